//! `serve --join ADDR`: a new, empty node asks a running cluster to add it.
//!
//! A node started with `--join` on a data dir Raft has never initialized records the
//! join in the marker file `<data-dir>/joining` (fsynced) and goes through two stages:
//!
//! 1. **waiting**: it answers no Raft RPC at all. It asks the cluster's leader (found
//!    through `ADDR`, any node) for the membership and waits until its id is not in it.
//!    An empty data dir may belong to a node that lost its disk while still a member: a
//!    leader that remembers what that node had acknowledged would see its log go back,
//!    and the node must not vote with its votes forgotten. The operator removes the old
//!    member (`leasehold cluster remove-node ID`); the log says so.
//! 2. **admitted** (marker rewritten first): it accepts replication but still refuses to
//!    vote, and posts `{"id","addr"}` to `POST /v1/cluster/nodes` (a follower forwards
//!    it), which adds it as a learner, waits for it to catch up and promotes it. Retried
//!    until the node is a voter; then the marker is removed and it votes like any voter.
//!
//! A restart keeps the stage (the marker says which), `--join` or not; a node that was
//! already admitted counts a membership naming it a voter as its own join done. Without
//! `--join` (a member restarted on a wiped disk that found its cluster by itself,
//! `bootstrap.rs`), it asks through the peers of its `--peer` list, in turn.
//!
//! Two stages come from `bootstrap.rs`, not from a join: **unsure** (an empty data dir
//! that has not yet found out whether a cluster exists: no Raft RPC answered, like
//! waiting) and, for an empty node the cluster does not name, **admitted** without a
//! marker (replication accepted for `leasehold cluster add-node`, votes refused until it
//! is a voter). A data dir that lost part of its state (`store/held.rs`) is unsure for
//! good: [`Joining::damaged`] never leaves that stage.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::security::tls::chain;
use crate::types::NodeId;

/// The founding marker: this empty node promised to found the cluster of its `--peer`
/// list, so it may vote with no log.
pub const FOUNDING_FILE: &str = "founding";

/// Whether the founding marker is in `data_dir`.
pub fn promised(data_dir: &Path) -> bool {
    data_dir.join(FOUNDING_FILE).exists()
}

/// The marker file of a join in progress.
pub const JOINING_FILE: &str = "joining";

/// Longest a new learner may take to catch up before it is promoted (bounded by the
/// listener's request timeout, 45 s by default). Past it the node stays a learner and
/// the same request, repeated, promotes it once it has caught up. Both sides of a join
/// read it: `POST /v1/cluster/nodes` (`http/membership.rs`) waits this long, and the
/// joining node's request waits for that answer.
pub const CATCH_UP_WAIT: Duration = Duration::from_secs(30);

/// What `serve --join` configures.
#[derive(Debug, Clone)]
pub struct JoinConfig {
    /// `HOST:PORT` of any node of the cluster to join.
    pub via: String,
    /// An admin token (`--join-token-file`), when the cluster has `--auth-file`.
    pub token: Option<String>,
    /// Other nodes to ask when `via` does not answer (in turn): the `--peer` list of a
    /// wiped member that rejoins by itself; empty for `serve --join`.
    pub alternates: Vec<String>,
}

impl JoinConfig {
    /// Asks the next node from now on (after a failed question), if there is another.
    pub(crate) fn rotate(&mut self) {
        if !self.alternates.is_empty() {
            let next = self.alternates.remove(0);
            let last = std::mem::replace(&mut self.via, next);
            self.alternates.push(last);
        }
    }
}

/// Where a join stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Not joining: a member like any other (or a node of the initial cluster).
    Member,
    /// Waiting until the cluster does not name this node: no Raft RPC answered.
    Waiting,
    /// Not a member when admitted: replication accepted, votes refused.
    Admitted,
    /// An empty data dir that does not know yet whether its cluster exists
    /// (`bootstrap.rs`): no Raft RPC answered, no election, no initialization.
    Unsure,
}

impl Stage {
    /// How `/readyz` and the logs name it.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Member => "member",
            Stage::Waiting => "waiting",
            Stage::Admitted => "admitted",
            Stage::Unsure => "unsure",
        }
    }

    fn marker_text(self) -> &'static str {
        match self {
            Stage::Member | Stage::Unsure => "",
            Stage::Waiting => "waiting\n",
            Stage::Admitted => "admitted\n",
        }
    }
}

/// The join stage, shared by the join task and the Raft RPC handlers.
#[derive(Debug)]
pub struct Joining {
    stage: AtomicU8,
    /// The data dir cannot prove it holds what this node voted for (`store/held.rs`):
    /// the stage stays unsure whatever asks to change it.
    damaged: bool,
}

impl Joining {
    pub fn new(stage: Stage) -> Joining {
        let j = Joining {
            stage: AtomicU8::new(0),
            damaged: false,
        };
        j.set(stage);
        j
    }

    /// Unsure for the life of the process: the data dir lost part of its state.
    pub fn damaged() -> Joining {
        Joining {
            stage: AtomicU8::new(3),
            damaged: true,
        }
    }

    pub fn is_damaged(&self) -> bool {
        self.damaged
    }

    pub fn stage(&self) -> Stage {
        match self.stage.load(Ordering::Acquire) {
            1 => Stage::Waiting,
            2 => Stage::Admitted,
            3 => Stage::Unsure,
            _ => Stage::Member,
        }
    }

    pub(crate) fn set(&self, stage: Stage) {
        if self.damaged {
            return;
        }
        let v = match stage {
            Stage::Member => 0,
            Stage::Waiting => 1,
            Stage::Admitted => 2,
            Stage::Unsure => 3,
        };
        self.stage.store(v, Ordering::Release);
    }
}

pub fn marker_path(data_dir: &Path) -> PathBuf {
    data_dir.join(JOINING_FILE)
}

/// The join marker could not be created, written, read or removed: `serve` does not
/// start (or, once joined, keeps refusing votes and says so). The cause is the source.
#[derive(Debug, thiserror::Error)]
#[error("{action} {}", path.display())]
pub struct MarkerError {
    /// What was being done to `path`: `creating`, `renaming to`, `syncing the directory`…
    action: &'static str,
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

/// `map_err` for an IO step on the marker.
fn marker_io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> MarkerError {
    let path = path.to_path_buf();
    move |source| MarkerError {
        action,
        path,
        source,
    }
}

/// Writes the marker durably.
pub(crate) fn write_marker(data_dir: &Path, stage: Stage) -> Result<(), MarkerError> {
    write_durably(data_dir, JOINING_FILE, stage.marker_text())
}

/// Writes `<dir>/<name>` durably (write a temp file, fsync, rename, fsync the directory):
/// the join marker here, the founding marker in `bootstrap.rs`.
pub(crate) fn write_durably(dir: &Path, name: &str, text: &str) -> Result<(), MarkerError> {
    use std::io::Write;
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(marker_io("creating", &tmp))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(marker_io("writing", &tmp))?;
    std::fs::rename(&tmp, &path).map_err(marker_io("renaming to", &path))?;
    sync_dir(dir)
}

fn read_marker(data_dir: &Path) -> Result<Option<Stage>, MarkerError> {
    let path = marker_path(data_dir);
    match std::fs::read_to_string(&path) {
        Ok(t) if t.trim() == "admitted" => Ok(Some(Stage::Admitted)),
        // Anything else (an empty file from a crash mid-write included): start over
        // at the cautious stage.
        Ok(_) => Ok(Some(Stage::Waiting)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(marker_io("reading", &path)(e)),
    }
}

fn remove_marker(data_dir: &Path) -> Result<(), MarkerError> {
    remove_durably(&marker_path(data_dir))
}

/// Removes a marker file (if there) and fsyncs its directory.
pub(crate) fn remove_durably(path: &Path) -> Result<(), MarkerError> {
    let data_dir = path.parent().unwrap_or(Path::new("."));
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(marker_io("removing", path)(e)),
    }
    sync_dir(data_dir)
}

fn sync_dir(dir: &Path) -> Result<(), MarkerError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(marker_io("syncing the directory", dir))
}

/// Decides at startup where this node stands: with `--join` on a data dir Raft has never
/// initialized it starts a join (writing the marker); a marker left by an earlier run
/// means that join is still in progress, `--join` or not. Without `--join`, a data dir
/// Raft has never initialized is a member only if it promised to found the cluster (the
/// founding marker, `bootstrap.rs`); otherwise it is unsure until it has asked its peers.
pub fn begin(
    data_dir: &Path,
    join: Option<&JoinConfig>,
    initialized: bool,
) -> Result<Stage, MarkerError> {
    if let Some(stage) = read_marker(data_dir)? {
        return Ok(stage);
    }
    match (join, initialized) {
        (Some(_), false) => {
            write_marker(data_dir, Stage::Waiting)?;
            Ok(Stage::Waiting)
        }
        (Some(_), true) => {
            tracing::info!("this data dir is already a member of a cluster: --join is ignored");
            Ok(Stage::Member)
        }
        (None, true) => Ok(Stage::Member),
        (None, false) if promised(data_dir) => Ok(Stage::Member),
        (None, false) => Ok(Stage::Unsure),
    }
}

/// Steps of the retry backoff, then every `JOIN_RETRY_MAX`.
const JOIN_RETRY_MIN: Duration = Duration::from_millis(500);
const JOIN_RETRY_MAX: Duration = Duration::from_secs(5);

/// What the join task uses of the running node: its shares of the node's handles
/// (`node::Node::join_handles`), not the node itself, so `raft` never imports `node`.
pub struct JoinHandles {
    pub id: NodeId,
    pub joining: Arc<Joining>,
    /// The node's client for calls to other nodes (`--tls-*` included).
    pub forward_http: reqwest::Client,
    /// `http` or `https`.
    pub peer_scheme: &'static str,
}

/// Sleeps the current backoff step and doubles it (up to `JOIN_RETRY_MAX`); false if
/// the node stopped meanwhile.
async fn pause(delay: &mut Duration, cancel: &CancellationToken) -> bool {
    let d = *delay;
    *delay = (d * 2).min(JOIN_RETRY_MAX);
    tokio::select! {
        _ = cancel.cancelled() => false,
        _ = tokio::time::sleep(d) => true,
    }
}

/// Runs until the cluster has added this node (or the node stops).
pub async fn run(
    node: JoinHandles,
    join: Option<JoinConfig>,
    data_dir: PathBuf,
    advertised: String,
    cancel: CancellationToken,
) {
    let Some(mut join) = join else {
        tracing::error!(
            file = %marker_path(&data_dir).display(),
            "an earlier run started joining a cluster and did not finish; restart with \
             --join ADDR to finish (until then this node does not vote)"
        );
        return;
    };
    if node.joining.stage() == Stage::Waiting && !admit(&node, &mut join, &data_dir, &cancel).await
    {
        return;
    }
    let mut delay = JOIN_RETRY_MIN;
    loop {
        match request(&node, &join, &advertised).await {
            Ok(()) => break,
            Err(e) => {
                // A voter already: our own earlier request went through (admitted nodes
                // were not members when admitted).
                if let Ok(m) = leader_membership(&node, &join).await {
                    if m.voter_at(node.id, &advertised) {
                        break;
                    }
                }
                tracing::warn!(via = %join.via, error = %chain(&e), "join not done yet; retrying");
                join.rotate();
            }
        }
        if !pause(&mut delay, &cancel).await {
            return;
        }
    }
    match remove_marker(&data_dir) {
        Ok(()) => {
            node.joining.set(Stage::Member);
            tracing::info!(id = node.id, "joined the cluster as a voter");
        }
        // Still safe: the node keeps refusing votes, and says why.
        Err(e) => tracing::error!(
            error = %chain(&e),
            "joined, but the join marker could not be removed"
        ),
    }
}

/// Stage 1 (waiting): until the cluster's membership no longer names this node; then
/// records the admission (marker first) and accepts replication. False if the node
/// stopped or the marker could not be written.
async fn admit(
    node: &JoinHandles,
    join: &mut JoinConfig,
    data_dir: &Path,
    cancel: &CancellationToken,
) -> bool {
    let mut delay = JOIN_RETRY_MIN;
    loop {
        match leader_membership(node, join).await {
            Ok(m) if !m.names(node.id) => break,
            Ok(m) => tracing::error!(
                id = node.id,
                leader = m.leader,
                "node {} is still a member of the cluster (the node whose data this one \
                 replaces?): remove it first (leasehold cluster remove-node {}); \
                 until then this node neither answers Raft nor votes",
                node.id,
                node.id
            ),
            Err(e) => {
                tracing::warn!(
                    via = %join.via,
                    error = %chain(&e),
                    "cannot read the membership yet; retrying"
                );
                join.rotate();
            }
        }
        if !pause(&mut delay, cancel).await {
            return false;
        }
    }
    if let Err(e) = write_marker(data_dir, Stage::Admitted) {
        tracing::error!(error = %chain(&e), "cannot record the join's progress; not joining");
        return false;
    }
    node.joining.set(Stage::Admitted);
    tracing::info!(
        id = node.id,
        "not a member: accepting replication, asking to be added"
    );
    true
}

/// The membership as the leader sees it (the leader is the one replicating to members).
struct LeaderView {
    leader: u64,
    voters: Vec<u64>,
    nodes: std::collections::BTreeMap<String, String>,
}

impl LeaderView {
    fn names(&self, id: u64) -> bool {
        self.nodes.contains_key(&id.to_string())
    }

    fn voter_at(&self, id: u64, addr: &str) -> bool {
        self.voters.contains(&id) && self.nodes.get(&id.to_string()).is_some_and(|a| a == addr)
    }
}

/// Why one question to the cluster about this join got no usable answer: logged, and
/// asked again after a pause. `request` is `GET <url>` or the URL posted to.
#[derive(Debug, thiserror::Error)]
enum AskError {
    #[error("{request}")]
    Send {
        request: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{request} answered {status}: {body}")]
    Refused {
        request: String,
        status: reqwest::StatusCode,
        body: String,
    },
    #[error("{request}: not JSON")]
    NotJson {
        request: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("the cluster has no leader right now")]
    NoLeader,
    #[error("the leader has no address")]
    LeaderWithoutAddr,
    #[error("leadership is changing")]
    LeadershipChanging,
    /// The membership's `voters` or `nodes` is not what `/v1/cluster` documents.
    #[error("{field}")]
    Field {
        field: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{url} answered {status} but this node is not a voter: {body}")]
    NotAVoter {
        url: String,
        status: reqwest::StatusCode,
        body: String,
    },
}

async fn get_cluster(
    node: &JoinHandles,
    join: &JoinConfig,
    addr: &str,
) -> Result<serde_json::Value, AskError> {
    let url = format!("{}://{addr}/v1/cluster", node.peer_scheme);
    let request = || format!("GET {url}");
    let mut req = node.forward_http.get(&url).timeout(Duration::from_secs(5));
    if let Some(t) = &join.token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.map_err(|source| AskError::Send {
        request: request(),
        source,
    })?;
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(AskError::Refused {
            request: request(),
            status,
            body: text.trim().to_owned(),
        });
    }
    serde_json::from_str(&text).map_err(|source| AskError::NotJson {
        request: request(),
        source,
    })
}

/// Asks `--join`'s node who leads, then asks the leader for its membership.
async fn leader_membership(node: &JoinHandles, join: &JoinConfig) -> Result<LeaderView, AskError> {
    let via = get_cluster(node, join, &join.via).await?;
    let leader = via["leader_id"].as_u64().ok_or(AskError::NoLeader)?;
    let view = if via["node_id"].as_u64() == Some(leader) {
        via
    } else {
        let addr = via["nodes"][leader.to_string()]
            .as_str()
            .ok_or(AskError::LeaderWithoutAddr)?
            .to_owned();
        get_cluster(node, join, &addr).await?
    };
    if view["leader_id"].as_u64() != Some(leader) || view["node_id"].as_u64() != Some(leader) {
        return Err(AskError::LeadershipChanging);
    }
    let field = |field: &'static str| move |source| AskError::Field { field, source };
    Ok(LeaderView {
        leader,
        voters: serde_json::from_value(view["voters"].clone()).map_err(field("voters"))?,
        nodes: serde_json::from_value(view["nodes"].clone()).map_err(field("nodes"))?,
    })
}

/// One `POST /v1/cluster/nodes`; `Ok` once the cluster answers that this node is a voter.
async fn request(node: &JoinHandles, join: &JoinConfig, advertised: &str) -> Result<(), AskError> {
    let url = format!("{}://{}/v1/cluster/nodes", node.peer_scheme, join.via);
    let body = serde_json::json!({ "id": node.id, "addr": advertised });
    let mut req = node
        .forward_http
        .post(&url)
        .timeout(CATCH_UP_WAIT + Duration::from_secs(15))
        .json(&body);
    if let Some(t) = &join.token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.map_err(|source| AskError::Send {
        request: "calling the cluster".into(),
        source,
    })?;
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(AskError::Refused {
            request: url,
            status,
            body: text.trim().to_owned(),
        });
    }
    let view: serde_json::Value =
        serde_json::from_str(&text).map_err(|source| AskError::NotJson {
            request: url.clone(),
            source,
        })?;
    let is_voter = view["voters"]
        .as_array()
        .is_some_and(|v| v.iter().any(|x| x.as_u64() == Some(node.id)));
    if !is_voter {
        return Err(AskError::NotAVoter {
            url,
            status,
            body: text,
        });
    }
    Ok(())
}

/// Whether this node answers Raft replication (append, snapshot) now.
pub fn refuses_replication(joining: &Joining) -> bool {
    matches!(joining.stage(), Stage::Waiting | Stage::Unsure)
}

/// Whether this node refuses vote requests now (every stage of a join, and unsure).
pub fn refuses_votes(joining: &Joining) -> bool {
    joining.stage() != Stage::Member
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_starts_only_on_an_uninitialized_dir_and_survives_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let j = JoinConfig {
            via: "127.0.0.1:7001".into(),
            token: None,
            alternates: Vec::new(),
        };
        // Never initialized, no promise to found a cluster: unsure (`bootstrap.rs`).
        assert_eq!(begin(dir.path(), None, false).unwrap(), Stage::Unsure);
        assert_eq!(begin(dir.path(), None, true).unwrap(), Stage::Member);
        assert_eq!(begin(dir.path(), Some(&j), true).unwrap(), Stage::Member);
        assert!(!marker_path(dir.path()).exists());
        assert_eq!(begin(dir.path(), Some(&j), false).unwrap(), Stage::Waiting);
        assert!(marker_path(dir.path()).exists());
        // A restart before the join finished keeps the stage, with or without --join.
        assert_eq!(begin(dir.path(), Some(&j), true).unwrap(), Stage::Waiting);
        write_marker(dir.path(), Stage::Admitted).unwrap();
        assert_eq!(begin(dir.path(), None, true).unwrap(), Stage::Admitted);
        // A marker cut short by a crash: back to the cautious stage.
        std::fs::write(marker_path(dir.path()), "").unwrap();
        assert_eq!(begin(dir.path(), None, true).unwrap(), Stage::Waiting);
        remove_marker(dir.path()).unwrap();
        assert_eq!(begin(dir.path(), None, true).unwrap(), Stage::Member);
    }

    #[test]
    fn a_marker_that_cannot_be_written_names_the_step_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let j = JoinConfig {
            via: "127.0.0.1:7001".into(),
            token: None,
            alternates: Vec::new(),
        };
        let e = begin(&dir.path().join("gone"), Some(&j), false).unwrap_err();
        let line = chain(&e);
        assert!(
            line.starts_with("creating ") && line.contains("joining.tmp"),
            "{line}"
        );
        let cause = std::error::Error::source(&e).expect("the IO error is the source");
        assert!(cause.is::<std::io::Error>(), "{cause:?}");
    }

    #[test]
    fn the_stage_flag_round_trips() {
        for s in [
            Stage::Member,
            Stage::Waiting,
            Stage::Admitted,
            Stage::Unsure,
        ] {
            assert_eq!(Joining::new(s).stage(), s);
        }
        let damaged = Joining::damaged();
        damaged.set(Stage::Member);
        assert_eq!(damaged.stage(), Stage::Unsure);
    }
}
