//! Peer RPC authentication: every `/raft/…` request carries, in one header, an
//! HMAC-SHA256 of the shared peer secret over the request's method and path and every
//! field of the header: the sender's wall time, its id, the receiver's id, its cluster id,
//! a nonce of the sender's run, the request's number in that run, and the body's length
//! and SHA-256:
//!
//! ```text
//! x-leasehold-peer-auth: v2 t=<unix ms> from=<id> to=<id> cluster=<32 hex|-> boot=<16 hex>
//!     seq=<n> len=<bytes> sha256=<64 hex> mac=<64 hex>            (one line)
//! ```
//!
//! **The header is checked before a byte of body is read** ([`check_head`], then the
//! node's own checks in [`PeerGuard::check_head`]): MAC (constant time), time window,
//! `to=` is this node, `len=` is the request's `Content-Length` (required: no chunked
//! bodies), not stamped before this node started, not a replay. A request that fails
//! costs one HMAC: it is answered 401 without reading its body and never holds a Raft
//! in-flight slot (`http/raft_rpc.rs` takes one only after this check). Then the body is
//! read within a deadline and must have the header's digest ([`check_body`]), then the
//! cluster id ([`check_cluster`]). Without a secret (`serve` without
//! `--peer-secret-file`) the header is still sent, minus `mac=`, so a node pointed at
//! another cluster is still refused; that is a guard against mistakes, not security.
//!
//! **Version.** v2 replaced v1 (MAC over the body, so checked only after buffering it)
//! without a transition: a v1 header is refused as malformed, naming the version. Every
//! node of a cluster must be upgraded together.
//!
//! **Why replays are refused, and how.** Replays are *not* harmless: Raft is safe on a
//! network that duplicates and delays messages, but every accepted AppendEntries from the
//! current leader restarts a follower's election timer, so a captured heartbeat replayed
//! every 40 ms after the leader died kept followers from electing for 28 s (issue 17).
//! So each signed request is accepted at most once per receiver:
//!
//! * *Same receiver run.* A sender numbers its requests to each receiver (`seq=` 1, 2, …)
//!   within a run of its process (`boot=`, random per start); both are under the MAC, as
//!   is `to=`, so a request cannot be moved to another receiver. The receiver keeps per
//!   sender and run a sliding-window bitmap (`peer_replay.rs`, [`REPLAY_WINDOW`] wide,
//!   as IPsec/WireGuard do): concurrent requests may arrive out of order, a number seen
//!   before or too far below the newest is refused. The number is claimed when the
//!   header passes, before the body is read, so two copies racing cannot both pass.
//! * *Restarted sender.* Its new run has a new `boot=` and a window of its own; the old
//!   run's window stays ([`REPLAY_RUNS_PER_SENDER`] runs per sender are kept, least
//!   recently used evicted), so the old run's captured requests stay refused.
//! * *Restarted receiver.* The table is in memory and starts empty, so a request captured
//!   before the restart could pass it once. Such a request was stamped before the receiver
//!   started; the receiver refuses anything stamped more than [`PEER_RESTART_SLACK_MS`]
//!   before its start, and anything older than [`PEER_AUTH_WINDOW_MS`] anyway. What is
//!   left is a request stamped in the last [`PEER_RESTART_SLACK_MS`] before the start
//!   (while the receiver was stopping or down, so there are few such) replayed *once*
//!   each: a delayed duplicate, which Raft tolerates, and a bounded delay at worst, not a
//!   replay loop. The slack is there for peers' clocks that disagree by a few seconds.
//!
//! The timestamp is the node's wall clock, so peers' clocks must agree within the window
//! (NTP gives milliseconds). Cluster time itself still uses no wall clock (docs/design.md).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hmac::{Hmac, Mac};
use leasehold_statemachine::{ApiError, ErrorCode};
use sha2::Sha256;

pub use crate::security::cluster_id::{BadClusterId, ClusterId, CLUSTER_ID_BYTES};
pub use crate::security::hex::{hex_decode, hex_encode};
use crate::security::identity::{Identity, IdentityError};
use crate::security::peer_replay::ReplayTable;
#[cfg(doc)]
use crate::security::peer_replay::{REPLAY_RUNS_PER_SENDER, REPLAY_WINDOW};
use crate::telemetry::log_throttle::{LogThrottle, PEER_REFUSAL_LOG_INTERVAL};
use crate::telemetry::metrics::Refused;
use crate::time::clock::SharedClock;
use crate::types::NodeId;

pub const PEER_AUTH_HEADER: &str = "x-leasehold-peer-auth";
/// A request stamped further than this from the receiver's clock (either way) is refused.
pub const PEER_AUTH_WINDOW_MS: u64 = 30_000;
/// A shorter secret is refused: 32 bytes is HMAC-SHA256's own key strength.
pub const PEER_SECRET_BYTES_MIN: usize = 32;
/// Bound on the secret file: anything larger is not a secret file.
pub const PEER_SECRET_FILE_BYTES_MAX: u64 = 4096;
/// Random bytes in a generated secret (written as hex, so twice as many characters).
pub const PEER_SECRET_GENERATED_BYTES: usize = 32;
/// A request stamped more than this before the receiver started is refused (module doc:
/// replays to a restarted receiver). Covers peers' clocks disagreeing by up to this much
/// (the chaos tests run wall clocks 8 s apart).
pub const PEER_RESTART_SLACK_MS: u64 = 10_000;
const HEADER_VERSION: &str = "v2";
/// What the MAC covers starts with this, so the key signs nothing else by accident.
const MAC_DOMAIN: &[u8] = b"leasehold-peer-auth v2\n";

type HmacSha256 = Hmac<Sha256>;

// ---- the secret -----------------------------------------------------------------------

#[derive(Debug, thiserror::Error)]
pub enum PeerSecretError {
    #[error("reading the peer secret file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the peer secret file {path} is larger than {PEER_SECRET_FILE_BYTES_MAX} bytes")]
    TooLarge { path: PathBuf },
    #[error(
        "the peer secret in {path} is {len} bytes after trimming; at least \
         {PEER_SECRET_BYTES_MIN} are required (e.g. `openssl rand -hex 32 > FILE`)"
    )]
    TooShort { path: PathBuf, len: usize },
    #[error(
        "the peer secret file {path} is readable by every user (mode {mode:o}); \
         run `chmod 600 {path}`"
    )]
    WorldReadable { path: PathBuf, mode: u32 },
}

/// The shared peer secret. Its bytes never appear in `Debug` output or logs.
#[derive(Clone)]
pub struct PeerSecret(Arc<[u8]>);

impl fmt::Debug for PeerSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PeerSecret({} bytes, redacted)", self.0.len())
    }
}

impl PeerSecret {
    /// Reads `--peer-secret-file`: the file's bytes with surrounding whitespace trimmed
    /// (a trailing newline from `echo` is not part of the secret). A world-readable file
    /// is refused; a group-readable one is accepted with a warning.
    pub fn read_file(path: &Path) -> Result<PeerSecret, PeerSecretError> {
        let io = |source| PeerSecretError::Io {
            path: path.to_owned(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        if meta.len() > PEER_SECRET_FILE_BYTES_MAX {
            return Err(PeerSecretError::TooLarge {
                path: path.to_owned(),
            });
        }
        check_secret_mode(path, &meta)?;
        let raw = std::fs::read(path).map_err(io)?;
        let trimmed = raw.trim_ascii();
        if trimmed.len() < PEER_SECRET_BYTES_MIN {
            return Err(PeerSecretError::TooShort {
                path: path.to_owned(),
                len: trimmed.len(),
            });
        }
        Ok(PeerSecret(trimmed.into()))
    }

    /// A fresh random secret, as the hex text a secret file holds.
    pub fn generate_text() -> String {
        let bytes: [u8; PEER_SECRET_GENERATED_BYTES] = rand::random();
        hex_encode(&bytes)
    }

    /// Writes a fresh random secret to a new file at `path`, mode 0600, and returns it
    /// (`leasehold dev` and the test fixtures).
    pub fn write_new_file(path: &Path) -> Result<PeerSecret, PeerSecretError> {
        use std::io::Write;
        let io = |source| PeerSecretError::Io {
            path: path.to_owned(),
            source,
        };
        let mut f = new_private_file(path).map_err(io)?;
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        // The new file's directory entry is durable only once its directory is synced.
        f.write_all(Self::generate_text().as_bytes())
            .and_then(|()| f.sync_all())
            .and_then(|()| std::fs::File::open(dir)?.sync_all())
            .map_err(io)?;
        Self::read_file(path)
    }

    #[cfg(test)]
    fn from_bytes(b: &[u8]) -> PeerSecret {
        PeerSecret(b.into())
    }
}

#[cfg(unix)]
fn new_private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn new_private_file(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

#[cfg(unix)]
fn check_secret_mode(path: &Path, meta: &std::fs::Metadata) -> Result<(), PeerSecretError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o007 != 0 {
        return Err(PeerSecretError::WorldReadable {
            path: path.to_owned(),
            mode,
        });
    }
    if mode & 0o070 != 0 {
        tracing::warn!(path = %path.display(), mode = format!("{mode:o}"),
            "the peer secret file is readable by its group; chmod 600 is safer");
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_secret_mode(_: &Path, _: &std::fs::Metadata) -> Result<(), PeerSecretError> {
    Ok(())
}

// ---- the header -----------------------------------------------------------------------

/// Why a peer RPC was not admitted. `Display` is the 401 message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerAuthError {
    #[error("peer RPC refused: no {PEER_AUTH_HEADER} header (this node requires a peer secret)")]
    Missing,
    #[error("peer RPC refused: the {PEER_AUTH_HEADER} header has no mac= (is the sender started without --peer-secret-file?)")]
    Unsigned,
    #[error("peer RPC refused: malformed {PEER_AUTH_HEADER} header: {0}")]
    Malformed(String),
    #[error("peer RPC refused: stamped at {t_ms} ms, {skew_ms} ms from this node's clock (window {PEER_AUTH_WINDOW_MS} ms); a replay, or the peers' clocks disagree")]
    Expired { t_ms: u64, skew_ms: u64 },
    #[error("peer RPC refused: bad mac from node {from} (a different --peer-secret-file, or the request was altered)")]
    BadMac { from: NodeId },
    #[error("peer RPC refused: addressed to node {to}, this is node {me}")]
    WrongTarget { to: NodeId, me: NodeId },
    #[error("peer RPC refused: stamped at {t_ms} ms, before this node started at {started_ms} ms (less {PEER_RESTART_SLACK_MS} ms); a replay from before a restart, or the sender's clock is behind")]
    BeforeStart { t_ms: u64, started_ms: u64 },
    #[error("peer RPC refused: node {from} already sent request {seq} of run {boot:016x} ({why}): a replay")]
    Replay {
        from: NodeId,
        boot: u64,
        seq: u64,
        why: crate::security::peer_replay::Replay,
    },
    #[error("peer RPC refused: the header says len={len}, the request has {}", content_length.map_or_else(|| "no Content-Length (chunked bodies are not accepted)".to_owned(), |n| format!("Content-Length: {n}")))]
    Length {
        len: u64,
        content_length: Option<u64>,
    },
    #[error(
        "peer RPC refused: the body's SHA-256 is not the header's sha256= (altered in transit)"
    )]
    BodyDigest,
}

impl PeerAuthError {
    /// The `/metrics` reason this refusal is counted under.
    pub fn refusal(&self) -> Refused {
        match self {
            PeerAuthError::Missing => Refused::PeerAuthMissing,
            PeerAuthError::Unsigned => Refused::PeerAuthUnsigned,
            PeerAuthError::Malformed(_) => Refused::PeerAuthMalformed,
            PeerAuthError::Expired { .. } => Refused::PeerAuthExpired,
            PeerAuthError::BadMac { .. } => Refused::PeerAuthBadMac,
            PeerAuthError::WrongTarget { .. } => Refused::PeerAuthWrongTarget,
            PeerAuthError::BeforeStart { .. } => Refused::PeerAuthBeforeStart,
            PeerAuthError::Replay { .. } => Refused::PeerAuthReplay,
            PeerAuthError::Length { .. } => Refused::PeerAuthLength,
            PeerAuthError::BodyDigest => Refused::PeerAuthBodyDigest,
        }
    }
}

/// Who sends a request to whom, when, in which run and as which of its requests: the
/// header's fields that are not about the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope {
    pub t_ms: u64,
    pub from: NodeId,
    pub to: NodeId,
    pub cluster: Option<ClusterId>,
    /// Random per run of the sender (a restarted sender starts its counters over).
    pub boot: u64,
    /// Per (sender run, receiver): 1, 2, 3… in the order the requests are stamped.
    pub seq: u64,
}

/// The parsed header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    pub env: Envelope,
    /// The body's length: must equal the request's `Content-Length`.
    pub len: u64,
    pub body_sha256: [u8; 32],
    pub mac: Option<[u8; 32]>,
}

fn fixed<const N: usize>(k: &str, v: &str) -> Result<[u8; N], PeerAuthError> {
    hex_decode(v)
        .and_then(|b| <[u8; N]>::try_from(b).ok())
        .ok_or_else(|| PeerAuthError::Malformed(format!("{k}= is not {} hex digits", 2 * N)))
}

/// The header's fields as parsed, each at most once.
#[derive(Default)]
struct Fields {
    t: Option<u64>,
    from: Option<u64>,
    to: Option<u64>,
    cluster: Option<Option<ClusterId>>,
    boot: Option<u64>,
    seq: Option<u64>,
    len: Option<u64>,
    sha256: Option<[u8; 32]>,
    mac: Option<[u8; 32]>,
}

impl Fields {
    fn set(&mut self, k: &str, v: &str) -> Result<(), PeerAuthError> {
        let bad = |m: String| PeerAuthError::Malformed(m);
        let num = |v: &str| v.parse::<u64>().map_err(|_| bad(format!("bad {k}={v:?}")));
        let twice = || bad(format!("{k}= given twice"));
        fn put<T>(
            slot: &mut Option<T>,
            v: T,
            twice: impl Fn() -> PeerAuthError,
        ) -> Result<(), PeerAuthError> {
            match slot.replace(v) {
                None => Ok(()),
                Some(_) => Err(twice()),
            }
        }
        match k {
            "t" => put(&mut self.t, num(v)?, twice),
            "from" => put(&mut self.from, num(v)?, twice),
            "to" => put(&mut self.to, num(v)?, twice),
            "cluster" if v == "-" => put(&mut self.cluster, None, twice),
            "cluster" => put(
                &mut self.cluster,
                Some(ClusterId::from_hex(v).map_err(|e| bad(e.to_string()))?),
                twice,
            ),
            "boot" => put(&mut self.boot, u64::from_be_bytes(fixed::<8>(k, v)?), twice),
            "seq" => put(&mut self.seq, num(v)?, twice),
            "len" => put(&mut self.len, num(v)?, twice),
            "sha256" => put(&mut self.sha256, fixed::<32>(k, v)?, twice),
            "mac" => put(&mut self.mac, fixed::<32>(k, v)?, twice),
            _ => Err(bad(format!("unknown key {k:?}"))),
        }
    }

    fn stamp(self) -> Result<Stamp, PeerAuthError> {
        let no = |k: &str| PeerAuthError::Malformed(format!("no {k}="));
        Ok(Stamp {
            env: Envelope {
                t_ms: self.t.ok_or_else(|| no("t"))?,
                from: self.from.ok_or_else(|| no("from"))?,
                to: self.to.ok_or_else(|| no("to"))?,
                cluster: self.cluster.ok_or_else(|| no("cluster"))?,
                boot: self.boot.ok_or_else(|| no("boot"))?,
                seq: self.seq.ok_or_else(|| no("seq"))?,
            },
            len: self.len.ok_or_else(|| no("len"))?,
            body_sha256: self.sha256.ok_or_else(|| no("sha256"))?,
            mac: self.mac,
        })
    }
}

impl Stamp {
    /// The unsigned stamp of `body` sent in `env`.
    pub fn new(env: Envelope, body: &[u8]) -> Stamp {
        use sha2::Digest;
        Stamp {
            env,
            len: body.len() as u64,
            body_sha256: Sha256::digest(body).into(),
            mac: None,
        }
    }

    pub fn parse(header: &str) -> Result<Stamp, PeerAuthError> {
        let mut parts = header.split_ascii_whitespace();
        match parts.next() {
            Some(HEADER_VERSION) => {}
            Some(v) if v.starts_with('v') => {
                return Err(PeerAuthError::Malformed(format!(
                    "version {v:?}, this node speaks {HEADER_VERSION:?} (every node of a \
                     cluster must run the same Leasehold version)"
                )))
            }
            _ => {
                return Err(PeerAuthError::Malformed(format!(
                    "expected it to start with {HEADER_VERSION:?}"
                )))
            }
        }
        let mut fields = Fields::default();
        for part in parts {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| PeerAuthError::Malformed(format!("{part:?} is not key=value")))?;
            fields.set(k, v)?;
        }
        fields.stamp()
    }

    /// Every field but `mac=`, canonically: what the MAC covers after method and path.
    fn render_fields(&self) -> String {
        let e = &self.env;
        let cluster = e.cluster.map_or_else(|| "-".to_owned(), |c| c.to_string());
        format!(
            "{HEADER_VERSION} t={} from={} to={} cluster={cluster} boot={:016x} seq={} len={} sha256={}",
            e.t_ms,
            e.from,
            e.to,
            e.boot,
            e.seq,
            self.len,
            hex_encode(&self.body_sha256)
        )
    }

    pub fn render(&self) -> String {
        let mut s = self.render_fields();
        if let Some(mac) = &self.mac {
            s.push_str(" mac=");
            s.push_str(&hex_encode(mac));
        }
        s
    }

    fn mac_input(&self, secret: &PeerSecret, method: &str, path: &str) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&secret.0).expect("HMAC takes a key of any length");
        m.update(MAC_DOMAIN);
        m.update(format!("{method}\n{path}\n{}\n", self.render_fields()).as_bytes());
        m
    }

    /// Signs this stamp for `method` and `path` (the body is in it by length and digest).
    pub fn signed(mut self, secret: &PeerSecret, method: &str, path: &str) -> Stamp {
        let mac = self.mac_input(secret, method, path).finalize().into_bytes();
        self.mac = Some(mac.into());
        self
    }
}

/// The header value a sender attaches: signed when there is a secret.
pub fn sign(
    secret: Option<&PeerSecret>,
    method: &str,
    path: &str,
    env: &Envelope,
    body: &[u8],
) -> String {
    let stamp = Stamp::new(*env, body);
    match secret {
        Some(s) => stamp.signed(s, method, path),
        None => stamp,
    }
    .render()
}

/// What the receiver knows of a request before reading its body.
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub header: Option<&'a str>,
    pub content_length: Option<u64>,
}

/// The checks on a request's head, all before a byte of body is read: with a secret, the
/// header must be present, well formed, signed with a valid MAC, fresh, addressed to `me`;
/// without one, no header is accepted (`Ok(None)`), a header is parsed for its cluster id
/// but its mac is not checked. Either way a header's `len=` must be the `Content-Length`.
pub fn check_head(
    secret: Option<&PeerSecret>,
    head: &Head<'_>,
    me: NodeId,
    now_ms: u64,
) -> Result<Option<Stamp>, PeerAuthError> {
    let stamp = match (secret, head.header) {
        (None, None) => return Ok(None),
        (Some(_), None) => return Err(PeerAuthError::Missing),
        (_, Some(h)) => Stamp::parse(h)?,
    };
    if let Some(secret) = secret {
        let mac = stamp.mac.ok_or(PeerAuthError::Unsigned)?;
        stamp
            .mac_input(secret, head.method, head.path)
            .verify_slice(&mac)
            .map_err(|_| PeerAuthError::BadMac {
                from: stamp.env.from,
            })?;
        let skew_ms = now_ms.abs_diff(stamp.env.t_ms);
        if skew_ms > PEER_AUTH_WINDOW_MS {
            return Err(PeerAuthError::Expired {
                t_ms: stamp.env.t_ms,
                skew_ms,
            });
        }
        if stamp.env.to != me {
            return Err(PeerAuthError::WrongTarget {
                to: stamp.env.to,
                me,
            });
        }
    }
    if head.content_length != Some(stamp.len) {
        return Err(PeerAuthError::Length {
            len: stamp.len,
            content_length: head.content_length,
        });
    }
    Ok(Some(stamp))
}

/// After the body is read: is it the one the (checked) header describes?
pub fn check_body(stamp: &Stamp, body: &[u8]) -> Result<(), PeerAuthError> {
    use sha2::Digest;
    let digest: [u8; 32] = Sha256::digest(body).into();
    // Not secret, so no constant-time compare needed: the MAC already covered it.
    if body.len() as u64 != stamp.len || digest != stamp.body_sha256 {
        return Err(PeerAuthError::BodyDigest);
    }
    Ok(())
}

// ---- the cluster check ----------------------------------------------------------------

/// What the receiver does about the sender's cluster id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterCheck {
    Accept,
    /// A fresh node takes the id of the cluster that replicates to it (persist it first).
    Adopt(ClusterId),
    /// 403, with this message.
    Refuse(String),
}

/// The decision, as a pure function. `replicates`: the RPC is an AppendEntries or an
/// InstallSnapshot (a vote never makes a node adopt). `fresh`: this node has no Raft log.
pub fn check_cluster(
    mine: Option<ClusterId>,
    theirs: Option<ClusterId>,
    replicates: bool,
    fresh: bool,
) -> ClusterCheck {
    match (mine, theirs) {
        (Some(m), Some(t)) if m == t => ClusterCheck::Accept,
        (Some(m), Some(t)) => ClusterCheck::Refuse(format!(
            "peer RPC from cluster {t} refused: this node belongs to cluster {m}"
        )),
        (Some(m), None) => ClusterCheck::Refuse(format!(
            "peer RPC without a cluster id refused: this node belongs to cluster {m}"
        )),
        (None, Some(t)) if replicates && fresh => ClusterCheck::Adopt(t),
        (None, Some(t)) if replicates => ClusterCheck::Refuse(format!(
            "peer RPC from cluster {t} refused: this node has Raft state but no cluster id \
             (a data dir from before cluster ids?); restart it with --cluster-id {t} if it \
             belongs to that cluster"
        )),
        (None, _) => ClusterCheck::Accept,
    }
}

// ---- the node's guard -------------------------------------------------------------------

/// One node's peer-RPC identity at run time: what it stamps on the requests it sends and
/// what it admits. Its cluster id goes from `None` to `Some` at most once, and is on disk
/// before any RPC is answered under it.
pub struct PeerGuard {
    node_id: NodeId,
    secret: Option<PeerSecret>,
    clock: SharedClock,
    data_dir: PathBuf,
    /// What the identity file is written through ([`PeerGuard::on_disk`]).
    disk: crate::fsio::Disk,
    cluster: std::sync::RwLock<Option<ClusterId>>,
    /// Serializes giving this node a cluster id (adopting one, or generating one).
    assigning: tokio::sync::Mutex<()>,
    /// This run's nonce, in every request it sends (`boot=`).
    boot: u64,
    /// This node's wall clock when it started: older requests are refused (module doc).
    started_ms: u64,
    /// The last `seq=` sent to each peer.
    sent: std::sync::Mutex<HashMap<NodeId, u64>>,
    /// What each peer's runs have sent here (`peer_replay.rs`).
    received: std::sync::Mutex<ReplayTable>,
    /// One WARN per refusal reason per [`PEER_REFUSAL_LOG_INTERVAL`].
    log: LogThrottle,
}

impl fmt::Debug for PeerGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerGuard")
            .field("node_id", &self.node_id)
            .field("signed", &self.secret.is_some())
            .field("cluster", &self.cluster_id())
            .finish()
    }
}

impl PeerGuard {
    pub fn new(
        node_id: NodeId,
        secret: Option<PeerSecret>,
        clock: SharedClock,
        data_dir: PathBuf,
        cluster: Option<ClusterId>,
    ) -> Self {
        PeerGuard {
            node_id,
            secret,
            data_dir,
            disk: crate::fsio::Disk::Real,
            cluster: std::sync::RwLock::new(cluster),
            assigning: tokio::sync::Mutex::new(()),
            boot: rand::random(),
            started_ms: clock.wall_ms(),
            clock,
            sent: std::sync::Mutex::default(),
            received: std::sync::Mutex::default(),
            log: LogThrottle::new(PEER_REFUSAL_LOG_INTERVAL),
        }
    }

    /// Writes the identity file (when it adopts a cluster id) through `disk`.
    pub fn on_disk(self, disk: crate::fsio::Disk) -> Self {
        PeerGuard { disk, ..self }
    }

    pub fn cluster_id(&self) -> Option<ClusterId> {
        *self.cluster.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The header value for a `POST` to peer `to`'s `path` with `body`: the next number
    /// of this run's requests to `to`.
    pub fn stamp(&self, to: NodeId, path: &str, body: &[u8]) -> String {
        let seq = {
            let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
            let n = sent.entry(to).or_insert(0);
            *n += 1;
            *n
        };
        let env = Envelope {
            t_ms: self.clock.wall_ms(),
            from: self.node_id,
            to,
            cluster: self.cluster_id(),
            boot: self.boot,
            seq,
        };
        sign(self.secret.as_ref(), "POST", path, &env, body)
    }

    /// The initializing node's cluster id: the one it has, or a new random one, persisted.
    pub async fn ensure_cluster_id(&self) -> Result<ClusterId, IdentityError> {
        let _one = self.assigning.lock().await;
        if let Some(id) = self.cluster_id() {
            return Ok(id);
        }
        let id = ClusterId::random();
        self.persist(id).await?;
        tracing::info!(cluster_id = %id, "generated the cluster id");
        Ok(id)
    }

    /// [`check_head`] for this node, then (with a secret) its own checks: not stamped
    /// before this node started, and not a replay. Call before reading the body; a request
    /// that passes is remembered, so the same header is never accepted twice.
    pub fn check_head(&self, head: &Head<'_>) -> Result<Option<Stamp>, PeerAuthError> {
        let stamp = check_head(
            self.secret.as_ref(),
            head,
            self.node_id,
            self.clock.wall_ms(),
        )?;
        let Some(stamp) = stamp else {
            return Ok(None);
        };
        if self.secret.is_none() {
            // Unsigned: read for its cluster id only (anyone could forge it anyway).
            return Ok(Some(stamp));
        }
        let env = &stamp.env;
        if env.t_ms.saturating_add(PEER_RESTART_SLACK_MS) < self.started_ms {
            return Err(PeerAuthError::BeforeStart {
                t_ms: env.t_ms,
                started_ms: self.started_ms,
            });
        }
        self.received
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .accept(env.from, env.boot, env.seq)
            .map_err(|why| PeerAuthError::Replay {
                from: env.from,
                boot: env.boot,
                seq: env.seq,
                why,
            })?;
        Ok(Some(stamp))
    }

    /// Logs a refused peer RPC, at most once per reason per
    /// [`PEER_REFUSAL_LOG_INTERVAL`] (with how many were held back); `/metrics` counts
    /// every one ([`crate::telemetry::metrics::Metrics::refused`], the caller's).
    pub fn log_refusal(&self, path: &str, reason: Refused, message: &str) {
        if let Some(held_back) = self.log.admit(reason.label(), std::time::Instant::now()) {
            tracing::warn!(%path, reason = reason.label(), error = %message, held_back,
                "refused a peer RPC (one line per reason per {} s; all are counted in /metrics)",
                PEER_REFUSAL_LOG_INTERVAL.as_secs());
        }
    }

    /// Admits a peer RPC whose head passed [`PeerGuard::check_head`] and whose body has
    /// been read, or says why not, before anything in `body` is decoded. `replicates`: an
    /// AppendEntries or InstallSnapshot; `fresh`: this node has no Raft log yet.
    pub async fn admit(
        &self,
        stamp: Option<&Stamp>,
        body: &[u8],
        replicates: bool,
        fresh: bool,
    ) -> Result<(), ApiError> {
        let Some(stamp) = stamp else {
            return Ok(());
        };
        check_body(stamp, body)
            .map_err(|e| ApiError::new(ErrorCode::Unauthenticated, e.to_string()))?;
        let env = &stamp.env;
        match check_cluster(self.cluster_id(), env.cluster, replicates, fresh) {
            ClusterCheck::Accept => Ok(()),
            ClusterCheck::Refuse(m) => Err(ApiError::new(ErrorCode::PermissionDenied, m)),
            ClusterCheck::Adopt(id) => self.adopt(id, env.from).await,
        }
    }

    /// Admits a bootstrap probe (`raft/bootstrap.rs`): authenticated like any peer RPC,
    /// but from any cluster or none, since the probe is how an empty node finds out
    /// whether its cluster exists. Its answer changes no Raft state and adopts no id.
    pub fn admit_probe(&self, stamp: Option<&Stamp>, body: &[u8]) -> Result<(), ApiError> {
        match stamp {
            None => Ok(()),
            Some(stamp) => check_body(stamp, body)
                .map_err(|e| ApiError::new(ErrorCode::Unauthenticated, e.to_string())),
        }
    }

    async fn adopt(&self, id: ClusterId, from: NodeId) -> Result<(), ApiError> {
        let _one = self.assigning.lock().await;
        match self.cluster_id() {
            Some(mine) if mine == id => return Ok(()),
            Some(mine) => {
                return Err(ApiError::new(
                    ErrorCode::PermissionDenied,
                    format!(
                        "peer RPC from cluster {id} refused: this node belongs to cluster {mine}"
                    ),
                ))
            }
            None => {}
        }
        self.persist(id).await.map_err(|e| {
            ApiError::new(
                ErrorCode::Internal,
                format!("adopting cluster id {id}: {e}"),
            )
        })?;
        tracing::info!(cluster_id = %id, from, "joined the cluster: adopted its id");
        Ok(())
    }

    /// Writes the identity file, then publishes the id. Caller holds `assigning`.
    async fn persist(&self, id: ClusterId) -> Result<(), IdentityError> {
        let dir = self.data_dir.clone();
        let identity = Identity {
            cluster_id: Some(id),
            node_id: self.node_id,
        };
        let disk = self.disk.clone();
        tokio::task::spawn_blocking(move || {
            crate::security::identity::store_on(&disk, &dir, &identity)
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
        *self.cluster.write().unwrap_or_else(|e| e.into_inner()) = Some(id);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/raft/append";
    const NOW: u64 = 1_764_450_000_000;
    const ME: NodeId = 1;

    fn secret() -> PeerSecret {
        PeerSecret::from_bytes(&[7u8; PEER_SECRET_BYTES_MIN])
    }

    fn cluster() -> Option<ClusterId> {
        Some(ClusterId::from([1; CLUSTER_ID_BYTES]))
    }

    fn env(t_ms: u64) -> Envelope {
        Envelope {
            t_ms,
            from: 2,
            to: ME,
            cluster: cluster(),
            boot: 0x0123_4567_89ab_cdef,
            seq: 5,
        }
    }

    fn signed(body: &[u8]) -> String {
        sign(Some(&secret()), "POST", PATH, &env(NOW), body)
    }

    /// The head check, then the body check, as the node runs them.
    fn check(
        header: &str,
        path: &str,
        body: &[u8],
        now: u64,
    ) -> Result<Option<Stamp>, PeerAuthError> {
        let head = Head {
            method: "POST",
            path,
            header: Some(header),
            content_length: Some(body.len() as u64),
        };
        let stamp = check_head(Some(&secret()), &head, ME, now)?;
        check_body(stamp.as_ref().unwrap(), body)?;
        Ok(stamp)
    }

    #[test]
    fn a_good_mac_is_accepted_and_names_sender_run_and_cluster() {
        let s = check(&signed(b"body"), PATH, b"body", NOW)
            .unwrap()
            .unwrap();
        assert_eq!(s.env, env(NOW));
        assert_eq!(s.len, 4);
    }

    #[test]
    fn a_tampered_field_path_or_method_is_refused_by_the_head_check() {
        let h = signed(b"body");
        let bad_mac = Err(PeerAuthError::BadMac { from: 2 });
        assert_eq!(check(&h, "/raft/vote", b"body", NOW), bad_mac);
        let head = Head {
            method: "PUT",
            path: PATH,
            header: Some(&h),
            content_length: Some(4),
        };
        assert_eq!(check_head(Some(&secret()), &head, ME, NOW), bad_mac);
        let s = Stamp::parse(&h).unwrap();
        let digest = hex_encode(&s.body_sha256);
        for (from, to) in [
            (format!("t={NOW}"), format!("t={}", NOW + 1)),
            (cluster().unwrap().to_string(), "02".repeat(16)),
            ("to=1".into(), "to=3".into()),
            ("boot=0123".into(), "boot=0124".into()),
            ("seq=5".into(), "seq=6".into()),
            ("len=4".into(), "len=5".into()),
            (digest[..4].to_owned(), "0000".into()),
        ] {
            let t = h.replace(&from, &to);
            assert_ne!(t, h, "{from}");
            let head = Head {
                method: "POST",
                path: PATH,
                header: Some(&t),
                content_length: Some(5),
            };
            assert_eq!(check_head(Some(&secret()), &head, ME, NOW), bad_mac, "{to}");
        }
        let from = h.replace("from=2", "from=3");
        assert_eq!(
            check(&from, PATH, b"body", NOW),
            Err(PeerAuthError::BadMac { from: 3 })
        );
    }

    #[test]
    fn another_body_of_the_same_length_passes_the_head_and_fails_the_digest() {
        let h = signed(b"body");
        assert_eq!(
            check(&h, PATH, b"bodY", NOW),
            Err(PeerAuthError::BodyDigest)
        );
    }

    #[test]
    fn content_length_must_be_the_headers_len() {
        let h = signed(b"body");
        for content_length in [None, Some(3), Some(1_000_000)] {
            let head = Head {
                method: "POST",
                path: PATH,
                header: Some(&h),
                content_length,
            };
            assert_eq!(
                check_head(Some(&secret()), &head, ME, NOW),
                Err(PeerAuthError::Length {
                    len: 4,
                    content_length
                })
            );
        }
    }

    #[test]
    fn a_request_for_another_node_is_refused() {
        let h = signed(b"b");
        let head = Head {
            method: "POST",
            path: PATH,
            header: Some(&h),
            content_length: Some(1),
        };
        assert_eq!(
            check_head(Some(&secret()), &head, 3, NOW),
            Err(PeerAuthError::WrongTarget { to: ME, me: 3 })
        );
    }

    #[test]
    fn another_secret_is_refused() {
        let other = PeerSecret::from_bytes(&[8u8; PEER_SECRET_BYTES_MIN]);
        let h = sign(Some(&other), "POST", PATH, &env(NOW), b"body");
        assert_eq!(
            check(&h, PATH, b"body", NOW),
            Err(PeerAuthError::BadMac { from: 2 })
        );
    }

    #[test]
    fn the_window_is_inclusive_and_one_past_it_is_refused() {
        let h = signed(b"b");
        for now in [NOW - PEER_AUTH_WINDOW_MS, NOW + PEER_AUTH_WINDOW_MS] {
            assert!(check(&h, PATH, b"b", now).is_ok(), "at the window's edge");
        }
        for now in [NOW - PEER_AUTH_WINDOW_MS - 1, NOW + PEER_AUTH_WINDOW_MS + 1] {
            assert!(
                matches!(
                    check(&h, PATH, b"b", now),
                    Err(PeerAuthError::Expired { .. })
                ),
                "one past the window"
            );
        }
    }

    #[test]
    fn missing_unsigned_malformed_and_v1_headers_are_refused_with_a_secret() {
        let head = Head {
            method: "POST",
            path: PATH,
            header: None,
            content_length: Some(0),
        };
        assert_eq!(
            check_head(Some(&secret()), &head, ME, NOW),
            Err(PeerAuthError::Missing)
        );
        let unsigned = sign(None, "POST", PATH, &env(NOW), b"");
        assert_eq!(
            check(&unsigned, PATH, b"", NOW),
            Err(PeerAuthError::Unsigned)
        );
        let good = signed(b"");
        for h in [
            String::new(),
            format!("v1 t={NOW} from=2 cluster=- mac={}", "00".repeat(32)),
            good.replace("v2 ", "v3 "),
            good.replace(" seq=5", ""),
            good.replace(" seq=5", " seq=5 seq=5"),
            good.replace("seq=5", "seq=x"),
            good.replace("boot=0123456789abcdef", "boot=0123"),
            good.replace(" mac=", " mac=ab"),
            format!("{good} extra=1"),
        ] {
            let r = check(&h, PATH, b"", NOW);
            assert!(
                matches!(r, Err(PeerAuthError::Malformed(_))),
                "{h:?}: {r:?}"
            );
        }
        let v1 = Stamp::parse(&format!("v1 t={NOW}"))
            .unwrap_err()
            .to_string();
        assert!(v1.contains("same Leasehold version"), "{v1}");
    }

    #[test]
    fn without_a_secret_anything_well_formed_passes_and_no_header_too() {
        let head = |header| Head {
            method: "POST",
            path: PATH,
            header,
            content_length: Some(0),
        };
        assert_eq!(check_head(None, &head(None), ME, NOW), Ok(None));
        let h = sign(None, "POST", PATH, &env(0), b"");
        let s = check_head(None, &head(Some(&h)), 9, NOW).unwrap().unwrap();
        assert_eq!((s.env.from, s.env.cluster, s.mac), (2, cluster(), None));
        assert!(check_head(None, &head(Some("garbage")), ME, NOW).is_err());
    }

    /// Seeded: the header is attacker-controlled text, so no input may panic or pass.
    #[test]
    fn random_headers_never_panic_and_never_verify() {
        use rand::{Rng, SeedableRng};
        const SEED: u64 = 7;
        let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
        let good = signed(b"b");
        for _ in 0..5_000 {
            let mut h: Vec<u8> = good.bytes().collect();
            for _ in 0..rng.gen_range(1..4) {
                let i = rng.gen_range(0..h.len());
                h[i] = rng.gen_range(b' '..=b'~');
            }
            let h = String::from_utf8(h).unwrap();
            if h != good {
                let r = check(&h, PATH, b"b", NOW);
                assert!(
                    r.is_err() || Stamp::parse(&h) == Stamp::parse(&good),
                    "seed {SEED}: {h:?}"
                );
            }
        }
    }

    #[test]
    fn the_header_round_trips() {
        let s = Stamp::parse(&signed(b"x")).unwrap();
        assert_eq!(Stamp::parse(&s.render()).unwrap(), s);
        assert!(s.mac.is_some());
        let unsigned = Stamp::new(env(NOW), b"x");
        assert_eq!(Stamp::parse(&unsigned.render()).unwrap(), unsigned);
    }

    fn guard(dir: &Path) -> PeerGuard {
        let clock = crate::time::clock::SystemClock::skewed(0, 1.0).shared();
        PeerGuard::new(ME, Some(secret()), clock, dir.to_owned(), cluster())
    }

    /// The node's head check: each signed header is accepted once; one stamped long
    /// before this node started is refused.
    #[test]
    fn the_guard_accepts_a_header_once_and_refuses_one_from_before_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let g = guard(dir.path());
        let now = g.clock.wall_ms();
        let head_of = |h: &str| -> Result<Option<Stamp>, PeerAuthError> {
            g.check_head(&Head {
                method: "POST",
                path: PATH,
                header: Some(h),
                content_length: Some(1),
            })
        };
        let h = sign(Some(&secret()), "POST", PATH, &env(now), b"b");
        assert!(head_of(&h).unwrap().is_some());
        assert!(matches!(
            head_of(&h),
            Err(PeerAuthError::Replay {
                why: crate::security::peer_replay::Replay::Duplicate,
                ..
            })
        ));
        let old = now - PEER_RESTART_SLACK_MS - 1_000;
        let h = sign(Some(&secret()), "POST", PATH, &env(old), b"b");
        assert!(matches!(
            head_of(&h),
            Err(PeerAuthError::BeforeStart { .. })
        ));
        // The guard's own stamps number each target's requests from 1.
        let seqs: Vec<u64> = [2, 2, 3, 2]
            .iter()
            .map(|&to| Stamp::parse(&g.stamp(to, PATH, b"")).unwrap().env.seq)
            .collect();
        assert_eq!(seqs, [1, 2, 1, 3]);
    }

    #[test]
    fn cluster_ids_round_trip_through_hex_and_json() {
        let id = ClusterId::random();
        assert_eq!(ClusterId::from_hex(&id.to_string()), Ok(id));
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(serde_json::from_str::<ClusterId>(&json).unwrap(), id);
        assert_eq!(
            ClusterId::from_hex("abc").unwrap_err().to_string(),
            "bad cluster id \"abc\": expected 32 hex digits"
        );
        assert_eq!(hex_decode("00fFa9"), Some(vec![0, 0xff, 0xa9]));
        for bad in ["+f", "0", "zz", "éé"] {
            assert_eq!(hex_decode(bad), None, "{bad:?}");
        }
        assert!(ClusterId::from_hex(&"0".repeat(34)).is_err());
    }

    #[test]
    fn the_cluster_check_refuses_another_or_no_cluster_and_adopts_only_when_fresh() {
        let (a, b) = (ClusterId::from([1; 16]), ClusterId::from([2; 16]));
        assert_eq!(
            check_cluster(Some(a), Some(a), true, false),
            ClusterCheck::Accept
        );
        let refused = check_cluster(Some(a), Some(b), false, true);
        assert!(
            matches!(&refused, ClusterCheck::Refuse(m) if m.contains(&a.to_string()) && m.contains(&b.to_string())),
            "{refused:?}"
        );
        assert!(matches!(
            check_cluster(Some(a), None, true, true),
            ClusterCheck::Refuse(_)
        ));
        assert_eq!(
            check_cluster(None, Some(b), true, true),
            ClusterCheck::Adopt(b)
        );
        assert_eq!(
            check_cluster(None, Some(b), false, true),
            ClusterCheck::Accept,
            "votes never adopt"
        );
        assert!(matches!(
            check_cluster(None, Some(b), true, false),
            ClusterCheck::Refuse(_)
        ));
        assert_eq!(check_cluster(None, None, true, false), ClusterCheck::Accept);
    }

    #[test]
    fn secret_files_must_be_long_enough_and_not_world_readable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        let s = PeerSecret::write_new_file(&path).unwrap();
        assert_eq!(s.0.len(), 2 * PEER_SECRET_GENERATED_BYTES);
        assert!(
            PeerSecret::write_new_file(&path).is_err(),
            "never overwrites"
        );
        let short = dir.path().join("short");
        write_private(
            &short,
            &format!("{}\n", "x".repeat(PEER_SECRET_BYTES_MIN - 1)),
        );
        let err = PeerSecret::read_file(&short).unwrap_err().to_string();
        assert!(err.contains("31 bytes") && err.contains("short"), "{err}");
        let exact = dir.path().join("exact");
        write_private(
            &exact,
            &format!("  {}\n", "x".repeat(PEER_SECRET_BYTES_MIN)),
        );
        assert_eq!(
            PeerSecret::read_file(&exact).unwrap().0.len(),
            PEER_SECRET_BYTES_MIN
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&exact, std::fs::Permissions::from_mode(0o644)).unwrap();
            let err = PeerSecret::read_file(&exact).unwrap_err().to_string();
            assert!(err.contains("chmod 600"), "{err}");
        }
        let missing = PeerSecret::read_file(&dir.path().join("nope"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("nope"), "{missing}");
    }

    fn write_private(path: &Path, text: &str) {
        use std::io::Write;
        new_private_file(path)
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
}
