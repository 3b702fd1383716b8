//! The `--peer ID=HOST:PORT` flag value (`serve`, `snapshot restore`): [`parse_peer`]
//! and its error, [`BadPeer`]. Imports nothing of this crate, so the command line
//! (lib.rs) and `snapshot` both import it (issue 45 item 7).

use leasehold_node::types::NodeId;

/// A `--peer` value that is not `ID=HOST:PORT` (clap prints it after the flag's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadPeer {
    #[error("expected ID=HOST:PORT")]
    NoEquals,
    #[error("bad node id {0:?}")]
    Id(String),
    #[error("bad address {0:?}: expected HOST:PORT")]
    Addr(String),
}

/// `ID=HOST:PORT`, as `--peer` takes it (`serve`, `snapshot restore`).
pub(crate) fn parse_peer(s: &str) -> Result<(NodeId, String), BadPeer> {
    let (id, addr) = s.split_once('=').ok_or(BadPeer::NoEquals)?;
    let id = id.parse().map_err(|_| BadPeer::Id(id.to_owned()))?;
    if addr.is_empty() || !addr.contains(':') {
        return Err(BadPeer::Addr(addr.to_owned()));
    }
    Ok((id, addr.to_owned()))
}
