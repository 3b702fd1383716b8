//! The peer-auth header (the module doc of `peer_auth`): its fields, signing it, checking
//! it before the body is read and the body against it, and the cluster check. May import
//! `secret`, `security::cluster_id`, `security::hex`, `telemetry::metrics` (the refusal
//! reasons) and `types`.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::secret::*;
use crate::security::cluster_id::ClusterId;
use crate::security::hex::{hex_decode, hex_encode};
use crate::telemetry::metrics::Refused;
use crate::types::NodeId;

pub const PEER_AUTH_HEADER: &str = "x-leasehold-peer-auth";
/// A request stamped further than this from the receiver's clock (either way) is refused.
pub const PEER_AUTH_WINDOW_MS: u64 = 30_000;
/// A request stamped more than this before the receiver started is refused (module doc:
/// replays to a restarted receiver). Covers peers' clocks disagreeing by up to this much
/// (the chaos tests run wall clocks 8 s apart).
pub const PEER_RESTART_SLACK_MS: u64 = 10_000;
const HEADER_VERSION: &str = "v2";
/// What the MAC covers starts with this, so the key signs nothing else by accident.
const MAC_DOMAIN: &[u8] = b"leasehold-peer-auth v2\n";

type HmacSha256 = Hmac<Sha256>;

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
        let mut m =
            HmacSha256::new_from_slice(secret.key()).expect("HMAC takes a key of any length");
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
