//! [`PeerGuard`]: one node's peer-RPC identity at run time — what it stamps on the
//! requests it sends and what it admits (the time window, the start, replays through
//! `security::peer_replay`), its cluster id kept on disk. May import `header`, `secret`,
//! `security::identity`, `security::peer_replay`, `telemetry`, `time` and `fsio`.

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

use leasehold_statemachine::{ApiError, ErrorCode};

use super::header::*;
use super::secret::*;
use crate::security::cluster_id::ClusterId;
use crate::security::identity::{Identity, IdentityError};
use crate::security::peer_replay::ReplayTable;
use crate::telemetry::log_throttle::{LogThrottle, PEER_REFUSAL_LOG_INTERVAL};
use crate::telemetry::metrics::Refused;
use crate::time::clock::SharedClock;
use crate::types::NodeId;

// ---- the node's guard -------------------------------------------------------------------

/// One node's peer-RPC identity at run time: what it stamps on the requests it sends and
/// what it admits. Its cluster id goes from `None` to `Some` at most once, and is on disk
/// before any RPC is answered under it.
pub struct PeerGuard {
    node_id: NodeId,
    secret: Option<PeerSecret>,
    pub(super) clock: SharedClock,
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
