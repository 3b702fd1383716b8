//! Peer RPC authentication: every `/raft/…` request carries an HMAC-SHA256 of the shared
//! peer secret over the path, a timestamp, the sender's id, its cluster id and the exact
//! body bytes, in one header:
//!
//! ```text
//! x-leasehold-peer-auth: v1 t=<unix ms> from=<node id> cluster=<32 hex|-> mac=<64 hex>
//! ```
//!
//! The receiver checks the MAC (constant time) and the timestamp before it decodes a byte
//! of the body, then the cluster id ([`check_cluster`]). Without a secret (`serve` without
//! `--peer-secret-file`) the header is still sent, minus `mac=`, so a node pointed at
//! another cluster is still refused; that is a guard against mistakes, not security.
//!
//! **Why replay inside the window is harmless.** A captured request can be resent for
//! [`PEER_AUTH_WINDOW_MS`], but only byte for byte, to the same path, in the same cluster:
//! exactly what a network that duplicates and delays messages does, and Raft is correct
//! on such a network (Raft paper §5.1: RPCs are idempotent and may be retried). An old
//! AppendEntries carries an old term or entries the follower already has (the Log
//! Matching property makes re-appending them a no-op); an old vote request or snapshot
//! chunk is refused by term. The window bounds how long a captured request stays usable
//! at all, which limits what a leaked capture is worth; a nonce table would buy nothing.
//!
//! The timestamp is the node's wall clock, so peers' clocks must agree within the window
//! (NTP gives milliseconds). Cluster time itself still uses no wall clock (design.md).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hmac::{Hmac, Mac};
use leasehold_statemachine::{ApiError, ErrorCode};
use sha2::Sha256;

use crate::clock::SharedClock;
use crate::identity::{Identity, IdentityError};
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
pub const CLUSTER_ID_BYTES: usize = 16;
const HEADER_VERSION: &str = "v1";
/// What the MAC covers starts with this, so the key signs nothing else by accident.
const MAC_DOMAIN: &[u8] = b"leasehold-peer-auth v1\n";

type HmacSha256 = Hmac<Sha256>;

// ---- cluster id -----------------------------------------------------------------------

/// A cluster's random 128-bit identity, fixed when the cluster is initialized.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterId([u8; CLUSTER_ID_BYTES]);

impl ClusterId {
    pub fn random() -> Self {
        ClusterId(rand::random())
    }

    pub fn from_hex(s: &str) -> Result<Self, String> {
        let bytes = hex_decode(s)
            .filter(|b| b.len() == CLUSTER_ID_BYTES)
            .ok_or_else(|| {
                format!(
                    "bad cluster id {s:?}: expected {} hex digits",
                    2 * CLUSTER_ID_BYTES
                )
            })?;
        let mut id = [0u8; CLUSTER_ID_BYTES];
        id.copy_from_slice(&bytes);
        Ok(ClusterId(id))
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex_encode(&self.0))
    }
}

impl fmt::Debug for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterId({self})")
    }
}

impl std::str::FromStr for ClusterId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ClusterId::from_hex(s)
    }
}

impl serde::Serialize for ClusterId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ClusterId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ClusterId::from_hex(&s).map_err(serde::de::Error::custom)
    }
}

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
        f.write_all(Self::generate_text().as_bytes())
            .and_then(|()| f.sync_all())
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

/// Why a peer RPC was not admitted. `Display` is the 401/403 message.
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
}

/// The parsed header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    pub t_ms: u64,
    pub from: NodeId,
    pub cluster: Option<ClusterId>,
    pub mac: Option<Vec<u8>>,
}

impl Stamp {
    pub fn parse(header: &str) -> Result<Stamp, PeerAuthError> {
        let bad = |m: String| PeerAuthError::Malformed(m);
        let mut parts = header.split_ascii_whitespace();
        if parts.next() != Some(HEADER_VERSION) {
            return Err(bad(format!("expected it to start with {HEADER_VERSION:?}")));
        }
        let (mut t_ms, mut from, mut cluster, mut mac) = (None, None, None, None);
        for part in parts {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("{part:?} is not key=value")))?;
            let num = |v: &str| v.parse::<u64>().map_err(|_| bad(format!("bad {k}={v:?}")));
            match k {
                "t" => t_ms = Some(num(v)?),
                "from" => from = Some(num(v)?),
                "cluster" if v == "-" => cluster = Some(None),
                "cluster" => cluster = Some(Some(ClusterId::from_hex(v).map_err(bad)?)),
                "mac" => mac = Some(hex_decode(v).ok_or_else(|| bad("mac is not hex".into()))?),
                _ => return Err(bad(format!("unknown key {k:?}"))),
            }
        }
        Ok(Stamp {
            t_ms: t_ms.ok_or_else(|| bad("no t=".into()))?,
            from: from.ok_or_else(|| bad("no from=".into()))?,
            cluster: cluster.ok_or_else(|| bad("no cluster=".into()))?,
            mac,
        })
    }

    pub fn render(&self) -> String {
        let cluster = self
            .cluster
            .map_or_else(|| "-".to_owned(), |c| c.to_string());
        let mut s = format!(
            "{HEADER_VERSION} t={} from={} cluster={cluster}",
            self.t_ms, self.from
        );
        if let Some(mac) = &self.mac {
            s.push_str(" mac=");
            s.push_str(&hex_encode(mac));
        }
        s
    }

    fn mac_input(&self, secret: &PeerSecret, path: &str, body: &[u8]) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&secret.0).expect("HMAC takes a key of any length");
        let cluster = self
            .cluster
            .map_or_else(|| "-".to_owned(), |c| c.to_string());
        m.update(MAC_DOMAIN);
        m.update(format!("{path}\n{}\n{}\n{cluster}\n", self.t_ms, self.from).as_bytes());
        m.update(body);
        m
    }
}

/// The header value a sender attaches: signed when there is a secret.
pub fn sign(
    secret: Option<&PeerSecret>,
    path: &str,
    t_ms: u64,
    from: NodeId,
    cluster: Option<ClusterId>,
    body: &[u8],
) -> String {
    let mut stamp = Stamp {
        t_ms,
        from,
        cluster,
        mac: None,
    };
    if let Some(secret) = secret {
        let mac = stamp.mac_input(secret, path, body).finalize().into_bytes();
        stamp.mac = Some(mac.to_vec());
    }
    stamp.render()
}

/// The checks that need no body: with a secret, the header must be present, well formed,
/// signed and fresh. Run before the body is read, so an unauthenticated sender cannot make
/// the node buffer a large body just by sending one without a plausible header.
pub fn precheck(
    secret: Option<&PeerSecret>,
    header: Option<&str>,
    now_ms: u64,
) -> Result<Option<Stamp>, PeerAuthError> {
    if secret.is_none() {
        return header.map(Stamp::parse).transpose();
    }
    let stamp = Stamp::parse(header.ok_or(PeerAuthError::Missing)?)?;
    if stamp.mac.is_none() {
        return Err(PeerAuthError::Unsigned);
    }
    let skew_ms = now_ms.abs_diff(stamp.t_ms);
    if skew_ms > PEER_AUTH_WINDOW_MS {
        return Err(PeerAuthError::Expired {
            t_ms: stamp.t_ms,
            skew_ms,
        });
    }
    Ok(Some(stamp))
}

/// Checks a request's header against `path` and `body`. With a secret: the header must be
/// present, signed, fresh and valid. Without one: no header is accepted (`Ok(None)`, an
/// older peer), a header is parsed for its cluster id but its mac is not checked.
pub fn verify(
    secret: Option<&PeerSecret>,
    header: Option<&str>,
    path: &str,
    body: &[u8],
    now_ms: u64,
) -> Result<Option<Stamp>, PeerAuthError> {
    let stamp = precheck(secret, header, now_ms)?;
    if let (Some(secret), Some(stamp)) = (secret, &stamp) {
        let mac = stamp.mac.as_deref().unwrap_or_default();
        stamp
            .mac_input(secret, path, body)
            .verify_slice(mac)
            .map_err(|_| PeerAuthError::BadMac { from: stamp.from })?;
    }
    Ok(stamp)
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
    cluster: std::sync::RwLock<Option<ClusterId>>,
    /// Serializes giving this node a cluster id (adopting one, or generating one).
    assigning: tokio::sync::Mutex<()>,
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
            clock,
            data_dir,
            cluster: std::sync::RwLock::new(cluster),
            assigning: tokio::sync::Mutex::new(()),
        }
    }

    pub fn cluster_id(&self) -> Option<ClusterId> {
        *self.cluster.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The header value for a request to `path` with `body`.
    pub fn stamp(&self, path: &str, body: &[u8]) -> String {
        let now = self.clock.wall_ms();
        sign(
            self.secret.as_ref(),
            path,
            now,
            self.node_id,
            self.cluster_id(),
            body,
        )
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

    /// [`precheck`] for this node: call before reading the body.
    pub fn precheck(&self, header: Option<&str>) -> Result<(), ApiError> {
        precheck(self.secret.as_ref(), header, self.clock.wall_ms())
            .map(drop)
            .map_err(|e| ApiError::new(ErrorCode::Unauthenticated, e.to_string()))
    }

    /// Admits a peer RPC or says why not, before anything in `body` is decoded. `replicates`:
    /// an AppendEntries or InstallSnapshot; `fresh`: this node has no Raft log yet.
    pub async fn admit(
        &self,
        header: Option<&str>,
        path: &str,
        body: &[u8],
        replicates: bool,
        fresh: bool,
    ) -> Result<(), ApiError> {
        let now = self.clock.wall_ms();
        let stamp = verify(self.secret.as_ref(), header, path, body, now)
            .map_err(|e| ApiError::new(ErrorCode::Unauthenticated, e.to_string()))?;
        let Some(stamp) = stamp else {
            return Ok(());
        };
        match check_cluster(self.cluster_id(), stamp.cluster, replicates, fresh) {
            ClusterCheck::Accept => Ok(()),
            ClusterCheck::Refuse(m) => Err(ApiError::new(ErrorCode::PermissionDenied, m)),
            ClusterCheck::Adopt(id) => self.adopt(id, stamp.from).await,
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
        tokio::task::spawn_blocking(move || crate::identity::store(&dir, &identity))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))?;
        *self.cluster.write().unwrap_or_else(|e| e.into_inner()) = Some(id);
        Ok(())
    }
}

// ---- hex --------------------------------------------------------------------------------

pub fn hex_encode(bytes: &[u8]) -> String {
    use fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(2 * bytes.len()), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

pub fn hex_decode(s: &str) -> Option<Vec<u8>> {
    let pairs = s.as_bytes().chunks_exact(2);
    if !pairs.remainder().is_empty() {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    pairs
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/raft/append";
    const NOW: u64 = 1_764_450_000_000;

    fn secret() -> PeerSecret {
        PeerSecret::from_bytes(&[7u8; PEER_SECRET_BYTES_MIN])
    }

    fn cluster() -> Option<ClusterId> {
        Some(ClusterId([1; CLUSTER_ID_BYTES]))
    }

    fn signed(body: &[u8]) -> String {
        sign(Some(&secret()), PATH, NOW, 2, cluster(), body)
    }

    fn check(
        header: &str,
        path: &str,
        body: &[u8],
        now: u64,
    ) -> Result<Option<Stamp>, PeerAuthError> {
        verify(Some(&secret()), Some(header), path, body, now)
    }

    #[test]
    fn a_good_mac_is_accepted_and_names_sender_and_cluster() {
        let s = check(&signed(b"body"), PATH, b"body", NOW)
            .unwrap()
            .unwrap();
        assert_eq!((s.from, s.cluster, s.t_ms), (2, cluster(), NOW));
    }

    #[test]
    fn a_tampered_body_path_time_sender_or_cluster_is_refused() {
        let h = signed(b"body");
        let bad_mac = Err(PeerAuthError::BadMac { from: 2 });
        assert_eq!(check(&h, PATH, b"bodY", NOW), bad_mac);
        assert_eq!(check(&h, "/raft/vote", b"body", NOW), bad_mac);
        let later = h.replace(&format!("t={NOW}"), &format!("t={}", NOW + 1));
        assert_eq!(check(&later, PATH, b"body", NOW), bad_mac);
        let other = h.replace(&cluster().unwrap().to_string(), &"02".repeat(16));
        assert_eq!(check(&other, PATH, b"body", NOW), bad_mac);
        let from = h.replace("from=2", "from=3");
        assert_eq!(
            check(&from, PATH, b"body", NOW),
            Err(PeerAuthError::BadMac { from: 3 })
        );
    }

    #[test]
    fn another_secret_is_refused() {
        let other = PeerSecret::from_bytes(&[8u8; PEER_SECRET_BYTES_MIN]);
        let h = sign(Some(&other), PATH, NOW, 2, cluster(), b"body");
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
    fn missing_unsigned_and_malformed_headers_are_refused_with_a_secret() {
        assert_eq!(
            verify(Some(&secret()), None, PATH, b"", NOW),
            Err(PeerAuthError::Missing)
        );
        let unsigned = sign(None, PATH, NOW, 2, cluster(), b"");
        assert_eq!(
            check(&unsigned, PATH, b"", NOW),
            Err(PeerAuthError::Unsigned)
        );
        for h in [
            "",
            "v2 t=1 from=2 cluster=-",
            "v1 t=x from=2 cluster=-",
            "v1 from=2 cluster=-",
            "v1 t=1 from=2 cluster=zz",
            "v1 t=1 from=2 cluster=- mac=xyz",
        ] {
            assert!(
                matches!(check(h, PATH, b"", NOW), Err(PeerAuthError::Malformed(_))),
                "{h:?}"
            );
        }
    }

    #[test]
    fn precheck_refuses_what_needs_no_body_to_refuse() {
        let s = secret();
        assert_eq!(precheck(Some(&s), None, NOW), Err(PeerAuthError::Missing));
        let unsigned = sign(None, PATH, NOW, 2, cluster(), b"");
        assert_eq!(
            precheck(Some(&s), Some(&unsigned), NOW),
            Err(PeerAuthError::Unsigned)
        );
        let late = NOW + PEER_AUTH_WINDOW_MS + 1;
        let stale = precheck(Some(&s), Some(&signed(b"x")), late);
        assert!(
            matches!(stale, Err(PeerAuthError::Expired { .. })),
            "{stale:?}"
        );
        // A wrong mac passes the precheck: only the body can tell.
        let wrong = sign(Some(&s), PATH, NOW, 2, cluster(), b"other");
        assert!(precheck(Some(&s), Some(&wrong), NOW).is_ok());
    }

    #[test]
    fn without_a_secret_anything_well_formed_passes_and_no_header_too() {
        assert_eq!(verify(None, None, PATH, b"", NOW), Ok(None));
        let h = sign(None, PATH, 0, 2, None, b"");
        let s = verify(None, Some(&h), PATH, b"", NOW).unwrap().unwrap();
        assert_eq!((s.from, s.cluster, s.mac), (2, None, None));
        assert!(verify(None, Some("garbage"), PATH, b"", NOW).is_err());
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
        assert_eq!(s.mac.as_ref().map(Vec::len), Some(32));
    }

    #[test]
    fn cluster_ids_round_trip_through_hex_and_json() {
        let id = ClusterId::random();
        assert_eq!(ClusterId::from_hex(&id.to_string()), Ok(id));
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(serde_json::from_str::<ClusterId>(&json).unwrap(), id);
        assert!(ClusterId::from_hex("abc").is_err());
        assert_eq!(hex_decode("00fFa9"), Some(vec![0, 0xff, 0xa9]));
        for bad in ["+f", "0", "zz", "éé"] {
            assert_eq!(hex_decode(bad), None, "{bad:?}");
        }
        assert!(ClusterId::from_hex(&"0".repeat(34)).is_err());
    }

    #[test]
    fn the_cluster_check_refuses_another_or_no_cluster_and_adopts_only_when_fresh() {
        let (a, b) = (ClusterId([1; 16]), ClusterId([2; 16]));
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
