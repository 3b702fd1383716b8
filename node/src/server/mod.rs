//! Starting and stopping a node: open storage, start Raft, form the cluster from the
//! peer list, serve HTTP, and run the node's tasks (batcher, ticks, elections, join).
//!
//! `start(listener, config)` takes a bound listener so tests can bind port 0.
//!
//! The wiring layer: it may import `http`, `node`, `raft`, `store` and the lower layers
//! (`security`, `time`, `telemetry`, `fsio`, `types`); only the CLI crate
//! (`leasehold-cli`: `serve`, `dev`) and tests use it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::SnapshotPolicy;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::fsio::Disk;
use crate::node::{Limits, Node, Parts, Peers};
use crate::raft::bootstrap::Bootstrap;
use crate::raft::election::Elector;
use crate::raft::join::Stage;
use crate::raft::network::Network;
use crate::raft::speculate::{SpeculationStats, Speculator};
use crate::raft::versions::Versions;
use crate::security::peer_auth::{ClusterId, PeerGuard, PeerSecret};
use crate::security::Guards;
use crate::store::{LogStore, SmShared, StateMachineStore, StorageFailed, WalOptions};
use crate::telemetry::metrics::{leader_took_office, Metrics};
use crate::time::clock::{SharedClock, SystemClock};
use crate::time::timekeeper::Timekeeper;
use crate::types::{NodeId, Raft};

/// Raft timing. `Default` is the conservative setting the in-process tests use (dozens of
/// nodes share one test process there); `serve` and `dev` run [`RaftTuning::fast`].
#[derive(Debug, Clone)]
pub struct RaftTuning {
    pub heartbeat_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// Take a snapshot (and purge the log) after this many entries.
    pub snapshot_every_logs: u64,
    /// Entries kept in the log behind a snapshot, so a briefly lagging follower catches
    /// up from the log rather than by a whole snapshot.
    pub logs_kept_after_snapshot: u64,
    /// A leader sends a lone write to its followers while its own fsync runs
    /// (`raft/speculate.rs`); off, they leave after it.
    pub speculative_append: bool,
}

impl RaftTuning {
    /// What `serve` and `dev` run. A follower asks for a pre-vote (`election.rs`) once it
    /// has heard nothing from a leader for the leader lease (the maximum election timeout)
    /// plus its own election timeout (drawn from the range for each attempt), and stands
    /// with a majority. 50 / 100–200 ms puts a new leader in place ~0.35–0.45 s after a
    /// crash (before pre-vote, ~0.8–1.3 s when the first candidate's log was behind the
    /// other follower's). An election still needs ≥ 300 ms of silence from the leader —
    /// six heartbeats: no leader change in 60 s runs of 64 clients on this 2-core box
    /// (`leasehold bench` reports `elections`). 150–300 ms, the previous default, gave a
    /// write gap of ~0.56 s (straddling the 600 ms target), and 1.5–2 s with the
    /// conservative setting.
    pub fn fast() -> Self {
        RaftTuning {
            heartbeat_ms: SERVE_HEARTBEAT_MS,
            election_timeout_min_ms: SERVE_ELECTION_TIMEOUT_MIN_MS,
            election_timeout_max_ms: SERVE_ELECTION_TIMEOUT_MAX_MS,
            ..RaftTuning::default()
        }
    }
}

/// `serve`'s default Raft timing (see [`RaftTuning::fast`]).
pub const SERVE_HEARTBEAT_MS: u64 = 50;
pub const SERVE_ELECTION_TIMEOUT_MIN_MS: u64 = 100;
pub const SERVE_ELECTION_TIMEOUT_MAX_MS: u64 = 200;

impl Default for RaftTuning {
    fn default() -> Self {
        RaftTuning {
            heartbeat_ms: 100,
            election_timeout_min_ms: 500,
            election_timeout_max_ms: 1000,
            snapshot_every_logs: 20_000,
            logs_kept_after_snapshot: 5_000,
            speculative_append: true,
        }
    }
}

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub id: NodeId,
    pub data_dir: PathBuf,
    /// Every voter of the initial cluster (this node included): id → `host:port`.
    pub peers: BTreeMap<NodeId, String>,
    /// Peers this node dials at another address than the one in the membership (a
    /// proxy, a NAT): Raft RPC and forwarded requests to them go there.
    pub dial: BTreeMap<NodeId, String>,
    pub clock: SharedClock,
    pub limits: Limits,
    pub raft: RaftTuning,
    /// While leases are live, the leader writes a tick when no entry was applied for this
    /// long, so followers' basis of cluster time stays fresh for a failover.
    pub tick_interval_ms: u64,
    /// Client tokens (`serve --auth-file`); `None` leaves the client API open.
    pub auth: Option<Arc<crate::security::auth::AuthPolicy>>,
    /// The shared peer secret (`serve --peer-secret-file`); `None`: peer RPC is
    /// unauthenticated (a loud warning at startup).
    pub peer_secret: Option<PeerSecret>,
    /// `serve --cluster-id`: the cluster this data dir must belong to (adopted when the
    /// dir has none yet).
    pub cluster_id: Option<ClusterId>,
    /// Connection, header, in-flight and time limits of the HTTP listener.
    pub listener: crate::http::listener::ListenerLimits,
    /// `serve --tls-cert/--tls-key/--tls-ca`: the listener serves TLS and peers are
    /// called over https (`tls.rs`); `None`: plain HTTP.
    pub tls: Option<Arc<crate::security::tls::NodeTls>>,
    /// `serve --join`: ask this cluster to add this node instead of forming one from
    /// `peers` (which then lists only this node).
    pub join: Option<crate::raft::join::JoinConfig>,
    /// `serve --join-token-file`: the admin token of a join, `--join`'s or the one a
    /// member restarted on an empty data dir makes by itself (`raft/bootstrap.rs`).
    pub join_token: Option<String>,
    /// `serve/dev --allow-origin`: web origins whose pages may call this node
    /// (`http/browser.rs`); checked when the node starts.
    pub allow_origins: Vec<String>,
    /// What the data dir is written through: [`Disk::Real`], or in a test build a
    /// fault-injecting disk (`fsio::fault`).
    pub disk: Disk,
    /// The newest entry version this node applies and advertises (`raft/versions.rs`):
    /// the build's, lower only in tests.
    pub entry_version_max: u32,
}

impl NodeConfig {
    pub fn new(id: NodeId, data_dir: PathBuf, peers: BTreeMap<NodeId, String>) -> Self {
        NodeConfig {
            id,
            data_dir,
            peers,
            dial: BTreeMap::new(),
            clock: SystemClock::new().shared(),
            limits: Limits::default(),
            raft: RaftTuning::default(),
            tick_interval_ms: 250,
            auth: None,
            peer_secret: None,
            cluster_id: None,
            listener: Default::default(),
            tls: None,
            join: None,
            join_token: None,
            allow_origins: Vec::new(),
            disk: Disk::Real,
            entry_version_max: leasehold_statemachine::version::ENTRY_VERSION_MAX,
        }
    }
}

/// A node that is serving; dropping it does not stop it, `shutdown` does.
pub struct RunningNode {
    pub node: Arc<Node>,
    pub addr: std::net::SocketAddr,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    /// The node's log, watched for a failed write or fsync ([`RunningNode::failed`]).
    log: LogStore,
    /// What its speculative AppendEntries did (`raft/speculate.rs`); `None` when off.
    pub speculation: Option<Arc<SpeculationStats>>,
}

impl RunningNode {
    /// Stops serving, stops Raft, and waits for both.
    pub async fn shutdown(self) {
        self.cancel.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
        let _ = self.node.raft.shutdown().await;
        if let Err(e) = self.log.close_clean() {
            tracing::warn!(error = %e, "closing the raft log cleanly failed: the leader mark stays");
        }
    }

    /// The node's Raft log (a clone sharing it): for tests that read its entries.
    pub fn log(&self) -> LogStore {
        self.log.clone()
    }

    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Resolves once the node's storage has failed: the log failed a write or an fsync,
    /// or Raft stopped on a storage error (a snapshot that could not be written, say).
    /// Raft refuses every write from then on; [`run`] then ends the process's service.
    pub fn failed(&self) -> impl std::future::Future<Output = StorageFailed> + Send + 'static {
        let log = self.log.failed();
        let mut metrics = self.node.raft.metrics();
        let raft = async move {
            loop {
                if let Err(openraft::error::Fatal::StorageError(e)) =
                    &metrics.borrow_and_update().running_state
                {
                    return StorageFailed {
                        why: format!("raft stopped on a storage error: {e}"),
                    };
                }
                if metrics.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        };
        async move {
            tokio::select! {
                failed = log => failed,
                failed = raft => failed,
            }
        }
    }
}

/// Why a node did not start. A variant with a cause keeps it as its source (the CLI
/// prints the chain on one `error:` line); the others pass an error on as it is.
/// openraft's errors are boxed: they are large, and every `Result` here carries the size.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("reading the listener's address")]
    ListenerAddr(#[source] std::io::Error),
    #[error("--peer list has no entry for this node's id {0}")]
    NotInPeers(NodeId),
    #[error(transparent)]
    Identity(#[from] crate::security::identity::IdentityError),
    #[error("opening the log in {}", dir.display())]
    OpenLog {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("opening the state machine in {}", dir.display())]
    OpenStateMachine {
        dir: PathBuf,
        #[source]
        source: crate::store::SnapshotFileError,
    },
    /// The data dir holds entries or a snapshot of a newer release (issue 29, item 5).
    #[error(transparent)]
    NewerData(#[from] crate::raft::versions::CheckError),
    #[error(transparent)]
    RaftConfig(Box<openraft::ConfigError>),
    #[error("starting raft")]
    StartRaft(#[source] Box<openraft::error::Fatal<NodeId>>),
    #[error("starting the speculative-append thread")]
    Speculator(#[source] std::io::Error),
    /// Raft stopped while the node was starting.
    #[error(transparent)]
    RaftStopped(Box<openraft::error::Fatal<NodeId>>),
    #[error(transparent)]
    JoinMarker(#[from] crate::raft::join::MarkerError),
    /// Reading the data dir's marker, or recording a failed check (`store/held.rs`).
    #[error("checking what the data dir {} holds", dir.display())]
    Held {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    AllowOrigin(#[from] crate::security::browser::BadOrigin),
    #[error("building the client that forwards to the leader")]
    ForwardClient(#[source] reqwest::Error),
    /// The node ran, then its storage failed a write or an fsync (issue 19's fail-stop).
    #[error(transparent)]
    StorageFailed(#[from] crate::store::StorageFailed),
}

impl From<openraft::error::Fatal<NodeId>> for StartError {
    fn from(e: openraft::error::Fatal<NodeId>) -> Self {
        StartError::RaftStopped(Box::new(e))
    }
}

fn raft_config(t: &RaftTuning) -> Result<openraft::Config, StartError> {
    let c = openraft::Config {
        cluster_name: "leasehold".into(),
        heartbeat_interval: t.heartbeat_ms,
        election_timeout_min: t.election_timeout_min_ms,
        election_timeout_max: t.election_timeout_max_ms,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(t.snapshot_every_logs),
        max_in_snapshot_log_to_keep: t.logs_kept_after_snapshot,
        // Elections start from `election.rs`, after a pre-vote; openraft's own timer would
        // stand without asking.
        enable_elect: false,
        ..Default::default()
    };
    c.validate()
        .map_err(|e| StartError::RaftConfig(Box::new(e)))
}

/// Starts a node on a bound `listener` (tests bind port 0): opens its storage and Raft,
/// then serves and runs its tasks until [`RunningNode::shutdown`].
pub async fn start(listener: TcpListener, cfg: NodeConfig) -> Result<RunningNode, StartError> {
    let addr = listener.local_addr().map_err(StartError::ListenerAddr)?;
    let self_addr = cfg
        .peers
        .get(&cfg.id)
        .ok_or(StartError::NotInPeers(cfg.id))?;
    tracing::info!(id = cfg.id, %addr, advertised = %self_addr, "starting node");
    let opened = open(&cfg).await?;
    let stage = opened.stage;
    if let Some(losses) = &opened.damage {
        crate::raft::bootstrap::report_damage(cfg.id, &cfg.data_dir, losses);
    }
    if matches!(stage, Stage::Waiting | Stage::Admitted) {
        tracing::info!("joining a cluster: this node does not vote until the cluster has added it");
    }
    let bootstrap = Arc::new(
        Bootstrap::new(
            cfg.id,
            cfg.peers.clone(),
            cfg.dial.clone(),
            cfg.data_dir.clone(),
        )
        .with_join_token(cfg.join_token.clone()),
    );
    let browser = crate::security::browser::BrowserPolicy::new(
        crate::security::tls::peer_scheme(cfg.tls.as_deref()),
        addr.ip().is_loopback(),
        cfg.peers.values(),
        &cfg.allow_origins,
    )?;
    let (node, intake) = Node::new(Parts {
        id: cfg.id,
        raft: opened.raft,
        sm: opened.sm,
        time: Arc::new(Timekeeper::new(cfg.clock.clone())),
        limits: cfg.limits.clone(),
        metrics: Arc::new(Metrics::default()),
        peers: Peers {
            dial: cfg.dial.clone(),
            http: forward_client(&cfg)?,
            scheme: crate::security::tls::peer_scheme(cfg.tls.as_deref()),
        },
        guards: Guards {
            auth: cfg.auth.clone(),
            peer: opened.peer,
            browser,
        },
        joining: Arc::new(match &opened.damage {
            Some(_) => crate::raft::join::Joining::damaged(),
            None => crate::raft::join::Joining::new(stage),
        }),
        elector: opened.elector,
        truncations: opened.log.truncations(),
        bootstrap,
        versions: Arc::new(Versions::new(cfg.entry_version_max, opened.network.clone())),
    });
    let node = Arc::new(node);
    let cancel = CancellationToken::new();
    let mut tasks = spawn_tasks(&node, listener, opened.network, intake, &cfg, &cancel);
    tasks.push(spawn_standing(&node, stage, &cfg, self_addr, &cancel));
    Ok(RunningNode {
        node,
        addr,
        cancel,
        tasks,
        log: opened.log,
        speculation: opened.speculation,
    })
}

/// Starts what finds or makes this node's place in its cluster: a join in progress
/// (`--join`, or a marker from an earlier run, through the `--peer` list without
/// `--join`), or the bootstrap task (`raft/bootstrap.rs`: an empty data dir asks its peers
/// before it votes; the lowest id founds the cluster with every peer's promise).
fn spawn_standing(
    node: &Arc<Node>,
    stage: Stage,
    cfg: &NodeConfig,
    advertised: &str,
    cancel: &CancellationToken,
) -> JoinHandle<()> {
    let (dir, advertised) = (cfg.data_dir.clone(), advertised.to_owned());
    if node.joining.is_damaged() {
        // Nothing to find out: the operator replaces this node (docs/operations.md).
        return tokio::spawn(crate::raft::bootstrap::repeat_damage(
            cfg.id,
            dir,
            cancel.clone(),
        ));
    }
    if matches!(stage, Stage::Waiting | Stage::Admitted) {
        let join = cfg
            .join
            .clone()
            .or_else(|| node.bootstrap.join_via_peers(cfg.join_token.clone()));
        let run =
            crate::raft::join::run(node.join_handles(), join, dir, advertised, cancel.clone());
        return tokio::spawn(run);
    }
    let network =
        Network::new(cfg.dial.clone(), node.guards.peer.clone()).with_tls(cfg.tls.clone());
    tokio::spawn(crate::raft::bootstrap::run(
        node.bootstrap_handles(),
        network,
        advertised,
        cancel.clone(),
    ))
}

/// What [`start`] opens before the node exists.
struct Opened {
    raft: Raft,
    log: LogStore,
    speculation: Option<Arc<SpeculationStats>>,
    sm: Arc<SmShared>,
    network: Network,
    elector: Arc<Elector>,
    peer: Arc<PeerGuard>,
    /// Where a `serve --join` stands.
    stage: crate::raft::join::Stage,
    /// The data dir cannot prove it holds what this node voted for (`store/held.rs`):
    /// why. The stage is then unsure for good.
    damage: Option<Vec<crate::store::held::Loss>>,
}

/// Opens the data dir (identity first), the two stores and Raft, and reads where a join
/// stands.
async fn open(cfg: &NodeConfig) -> Result<Opened, StartError> {
    if !matches!(cfg.disk, Disk::Real) {
        tracing::warn!(
            "FAULT INJECTION: the data dir is written through a test disk that journals \
             every write (fsio::fault); never in production"
        );
    }
    let (survey, losses) = survey_held(cfg)?;
    // Before anything else touches the dir: refuse another node's (or cluster's) data.
    let identity =
        crate::security::identity::open_on(&cfg.disk, &cfg.data_dir, cfg.id, cfg.cluster_id)?;
    let peer = Arc::new(peer_guard(cfg, identity.cluster_id).on_disk(cfg.disk.clone()));
    let (log_store, sm_store) = open_stores(cfg).await?;
    let sm = sm_store.shared();
    check_versions(&log_store, &sm, cfg.entry_version_max).await?;
    let damage = check_held(cfg, &survey, losses, &log_store, &sm)?;
    let network = Network::new(cfg.dial.clone(), peer.clone()).with_tls(cfg.tls.clone());
    let elector = Arc::new(Elector::new(
        log_store.clone(),
        cfg.clock.clone(),
        cfg.raft.election_timeout_min_ms,
        cfg.raft.election_timeout_max_ms,
    ));
    let log = log_store.clone();
    let raft = Raft::new(
        cfg.id,
        Arc::new(raft_config(&cfg.raft)?),
        network.clone(),
        log_store,
        sm_store,
    )
    .await
    .map_err(|e| StartError::StartRaft(Box::new(e)))?;
    let speculation = speculate(cfg, &network, &raft, &log)?;
    let stage = match &damage {
        Some(_) => Stage::Unsure,
        None => crate::raft::join::begin(
            &cfg.data_dir,
            cfg.join.as_ref(),
            raft.is_initialized().await?,
        )?,
    };
    Ok(Opened {
        raft,
        log,
        speculation,
        sm,
        network,
        elector,
        peer,
        stage,
        damage,
    })
}

/// The Raft log (`<data>/log`) and the state machine store (`<data>/sm`), opened.
async fn open_stores(cfg: &NodeConfig) -> Result<(LogStore, StateMachineStore), StartError> {
    let dir = || cfg.data_dir.clone();
    let log_dir = cfg.data_dir.join("log");
    let log_store = LogStore::open_on(cfg.disk.clone(), &log_dir, WalOptions::default())
        .await
        .map_err(|source| StartError::OpenLog { dir: dir(), source })?;
    let sm_dir = cfg.data_dir.join("sm");
    let sm_store = StateMachineStore::open_on(
        cfg.disk.clone(),
        &sm_dir,
        cfg.clock.clone(),
        Default::default(),
    )
    .await
    .map_err(|source| StartError::OpenStateMachine { dir: dir(), source })?
    .with_entry_version_max(cfg.entry_version_max);
    Ok((log_store, sm_store))
}

/// The speculator (`raft/speculate.rs`) watching `log`'s appends, with its stats; `None`
/// with `--no-speculative-append`.
fn speculate(
    cfg: &NodeConfig,
    network: &Network,
    raft: &Raft,
    log: &LogStore,
) -> Result<Option<Arc<SpeculationStats>>, StartError> {
    if !cfg.raft.speculative_append {
        return Ok(None);
    }
    let s =
        Speculator::new(cfg.id, network.clone(), raft.metrics()).map_err(StartError::Speculator)?;
    let stats = s.stats();
    // A fresh log has no observer yet: `set` cannot fail here.
    let _ = log.observe_appends(Arc::new(s));
    Ok(Some(stats))
}

fn held_err(cfg: &NodeConfig) -> impl Fn(std::io::Error) -> StartError + '_ {
    |source| StartError::Held {
        dir: cfg.data_dir.clone(),
        source,
    }
}

/// What the data dir holds before anything is written (`store/held.rs`), and what that
/// alone shows lost. An identity file gone beside the rest is recorded (`damaged`) before
/// the identity is written again, so that no crash can hide it.
fn survey_held(
    cfg: &NodeConfig,
) -> Result<(crate::store::held::Survey, Vec<crate::store::held::Loss>), StartError> {
    use crate::store::held;
    let survey = held::survey(&cfg.data_dir, crate::security::identity::IDENTITY_FILE)
        .map_err(held_err(cfg))?;
    let losses = held::check_survey(&survey, cfg.id);
    if !losses.is_empty() {
        held::write_damaged(&cfg.disk, &cfg.data_dir, &losses).map_err(held_err(cfg))?;
    }
    Ok((survey, losses))
}

/// With both stores open: what the log and snapshot show lost beside `losses` (the
/// survey's). None: the marker is kept from now on. Some: `damaged` is written and the log
/// frozen, and the node stays unsure for good.
fn check_held(
    cfg: &NodeConfig,
    survey: &crate::store::held::Survey,
    mut losses: Vec<crate::store::held::Loss>,
    log_store: &LogStore,
    sm: &SmShared,
) -> Result<Option<Vec<crate::store::held::Loss>>, StartError> {
    use crate::store::held;
    let mut facts = log_store.held_facts().map_err(held_err(cfg))?;
    facts.snapshot_index = survey
        .snapshot_file
        .then(|| sm.read(|s| s.last_applied.map(|l| l.index)))
        .flatten();
    facts.seed = cfg
        .data_dir
        .join(crate::raft::bootstrap::SEED_FILE)
        .exists();
    let marker = survey.held.as_ref().and_then(|h| h.as_ref().ok());
    losses.extend(held::check_opened(marker, &facts));
    if losses.is_empty() {
        log_store
            .keep_held(cfg.disk.clone(), &cfg.data_dir, cfg.id)
            .map_err(held_err(cfg))?;
        return Ok(None);
    }
    held::write_damaged(&cfg.disk, &cfg.data_dir, &losses).map_err(held_err(cfg))?;
    log_store.freeze().map_err(held_err(cfg))?;
    Ok(Some(losses))
}

/// Refuses, before Raft runs, a data dir with a snapshot or log entries of a newer release
/// than this binary applies (`raft/versions.rs`): applying them would crash or diverge.
async fn check_versions(log: &LogStore, sm: &SmShared, own: u32) -> Result<(), StartError> {
    use crate::raft::versions::{check_log, check_machine, CheckError};
    use openraft::storage::RaftLogStorage;
    sm.read(|s| check_machine(&s.machine, own))
        .map_err(CheckError::from)?;
    let mut log = log.clone();
    let state = log
        .get_log_state()
        .await
        .map_err(|e| CheckError::Read(e.to_string()))?;
    let first = state.last_purged_log_id.map_or(0, |l| l.index + 1);
    if let Some(last) = state.last_log_id {
        check_log(&mut log, first, last.index, own).await?;
    }
    Ok(())
}

/// Serves `listener` and starts the node's tasks: the batcher, the ticks, the
/// election timer and the leader-change counter (in this order).
fn spawn_tasks(
    node: &Arc<Node>,
    listener: TcpListener,
    network: Network,
    intake: crate::node::batcher::Intake,
    cfg: &NodeConfig,
    cancel: &CancellationToken,
) -> Vec<JoinHandle<()>> {
    let app = crate::http::router(node.clone());
    let server = tokio::spawn(crate::http::listener::serve(
        listener,
        app,
        node.clone(),
        cfg.listener.clone(),
        cfg.tls.as_ref().map(|t| t.acceptor()),
        cancel.clone(),
    ));
    let batcher = tokio::spawn(crate::node::batcher::run(
        intake,
        node.proposer().clone(),
        cancel.clone(),
    ));
    let ticks = tokio::spawn(crate::node::ticks::run(
        node.proposer().clone(),
        node.metrics.clone(),
        cfg.tick_interval_ms,
        cancel.clone(),
    ));
    let elections = tokio::spawn(crate::raft::election::run(
        node.election_handles(),
        network,
        cancel.clone(),
    ));
    let upgrade = tokio::spawn(crate::node::upgrade::run(
        node.proposer().clone(),
        Network::new(cfg.dial.clone(), node.guards.peer.clone()).with_tls(cfg.tls.clone()),
        cancel.clone(),
    ));
    let mut tasks = vec![server, ticks, batcher, elections, upgrade];
    let leaders = watch_leader(node.raft.clone(), node.metrics.clone(), cancel.clone());
    tasks.push(tokio::spawn(leaders));
    tasks
}

/// The client that forwards requests to the leader (https with `--tls-*`, like Raft RPC).
fn forward_client(cfg: &NodeConfig) -> Result<reqwest::Client, StartError> {
    let b = reqwest::Client::builder()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_millis(500))
        // Drop a pooled connection before the leader's listener closes it as idle
        // (the same --header-read-timeout-ms everywhere): reusing one the server is
        // closing fails the forwarded request.
        .pool_idle_timeout(cfg.listener.header_read_timeout / 2);
    let b = match &cfg.tls {
        Some(tls) => tls.peer_client(b),
        None => b,
    };
    b.build().map_err(StartError::ForwardClient)
}

fn peer_guard(cfg: &NodeConfig, cluster_id: Option<ClusterId>) -> PeerGuard {
    if cfg.peer_secret.is_none() {
        tracing::warn!(
            id = cfg.id,
            "PEER RPC IS UNAUTHENTICATED: started without --peer-secret-file, so anyone who \
             can reach this port can send Raft messages and rewrite the lease table"
        );
    }
    match cluster_id {
        Some(c) => tracing::info!(cluster_id = %c, "cluster id"),
        None => {
            tracing::info!("no cluster id yet: adopting the first cluster that replicates here")
        }
    }
    PeerGuard::new(
        cfg.id,
        cfg.peer_secret.clone(),
        cfg.clock.clone(),
        cfg.data_dir.clone(),
        cluster_id,
    )
}

/// Runs a node until `shutdown` resolves.
pub async fn run(
    listener: TcpListener,
    cfg: NodeConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), StartError> {
    let running = start(listener, cfg).await?;
    tokio::select! {
        () = shutdown => {}
        // Fail-stop (issue 19): no graceful shutdown, which would try to write again;
        // the caller ends the process at once with its own exit code.
        failed = running.failed() => return Err(failed.into()),
    }
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

/// Counts leader changes into `metrics.leader_changes` until `cancel`. openraft
/// publishes its server metrics (vote, state, leader, membership) only when one changes,
/// so this wakes once per change, not per log entry.
pub async fn watch_leader(raft: Raft, metrics: Arc<Metrics>, cancel: CancellationToken) {
    let mut rx = raft.server_metrics();
    let mut last = None;
    loop {
        let seen = {
            let m = rx.borrow_and_update();
            m.current_leader
                .map(|leader| (m.vote.leader_id().get_term(), leader))
        };
        if leader_took_office(last, seen) {
            metrics.leader_changes.inc();
            last = seen;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = rx.changed() => if changed.is_err() { return },
        }
    }
}
