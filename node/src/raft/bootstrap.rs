//! Forming a cluster from the `--peer` list only with proof that none exists, and never
//! voting with state this node does not have (issue 28, item 2).
//!
//! An empty data dir (no vote, no log) looks the same whether the node is new or lost its
//! disk while a member. Only the second is dangerous: its acknowledgements counted towards
//! commits, and with them forgotten its vote can elect a leader that lacks an
//! acknowledged write. So an empty node without `--join` starts **unsure**
//! (`join::Stage::Unsure`): it answers no Raft RPC, does not stand and does not
//! initialize, and asks every peer of its `--peer` list `POST /raft/bootstrap` what it
//! holds ([`PeerState`]):
//!
//! - a peer answers **member** (it has a vote or a log: the cluster exists) and its
//!   membership names this node a voter: this node lost its disk. It takes the join path
//!   (`join.rs`, stage waiting, through its peers in turn): no Raft RPC until the
//!   operator has run `leasehold cluster remove-node ID`, then it asks to be added, catches
//!   up and is promoted, voting only then;
//! - **every** peer answers member and none names it a voter: a new node (started with
//!   the full `--peer` list to be added by `leasehold cluster add-node`, which may have
//!   made it a learner already). It accepts replication and refuses votes until the
//!   membership in its own log makes it a voter (stage admitted, no marker): it then
//!   holds the log up to that entry. One member's "not named" is no proof: a member that
//!   lags (it missed the change that made this node a voter, which a majority committed
//!   without it) says the same, and the wiped node would then be taken for a new one and
//!   vote once replication brought it that old change, with the entries it acknowledged
//!   after it still missing. A majority holding the change includes a peer besides this
//!   node, so with every peer answering, one of them names it;
//! - **founding**: the lowest id of the list, when *every* peer answered empty (or had
//!   already promised), asks them all again with `promise: true`. An empty, unsure peer
//!   then first writes the **founding marker** (`<data-dir>/founding`, fsynced) and
//!   becomes a member: it has promised to found the cluster, so it may vote with an
//!   empty log. With every promise in, the lowest id writes its own marker and
//!   initializes. A wiped node has no marker, so it can never vote with forgotten state;
//! - otherwise (a peer unreachable, or answering unsure or joining) it waits and asks
//!   again, saying why.
//!
//! A node whose data dir lost only part of its state (`store/held.rs`) asks nothing and
//! promises nothing: it answers probes as joining and logs what the operator must do
//! ([`repeat_damage`]).
//!
//! The first formation therefore needs every node of the `--peer` list up (as Consul's
//! `bootstrap_expect` = N). Only empty peers promise, and only to the lowest id of their
//! own list, after that node has seen every peer empty: a peer cannot gain state while
//! unsure (it answers no Raft RPC), so the promise round finds what the first round saw.
//! The marker is removed once the node has state of its own (a vote or a log).
//! A two-phase probe matters with five voters: two wiped nodes must not make each other
//! promise while three members hold the cluster.
//!
//! Decide, then do: [`answer`] and [`decide`] are pure; [`Bootstrap::answer`] and
//! [`run`] act on their decisions.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use openraft::BasicNode;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use crate::raft::join::{promised, FOUNDING_FILE};
use crate::raft::join::{JoinConfig, JoinHandles, Joining, MarkerError, Stage};
pub use crate::raft::messages::{PeerState, ProbeRequest, ProbeResponse};
use crate::raft::network::Network;
use crate::security::peer_auth::PeerGuard;
use crate::security::tls::chain;
use crate::types::{NodeId, Raft};

/// The seed marker, written by `leasehold snapshot restore` with the snapshot's index: the
/// empty nodes of the new `--peer` list may promise to found the restored cluster with
/// this node, until it has applied an entry past that index (the new cluster formed).
pub const SEED_FILE: &str = "seed";

/// Bound on one probe's answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between rounds of questions, doubling up to the maximum.
const ROUND_PAUSE_MIN: Duration = Duration::from_millis(100);
const ROUND_PAUSE_MAX: Duration = Duration::from_secs(2);
/// A waiting node says why once every this many rounds (the first round included).
const LOG_EVERY_ROUNDS: u32 = 10;

/// What a node answers a probe, and whether it promises (writes the founding marker
/// first). Pure. `initialized`: it has a vote or a log; `from_lowest`: the asker is the
/// lowest id of this node's own `--peer` list.
pub fn answer(
    stage: Stage,
    initialized: bool,
    seeding: bool,
    promise: bool,
    from_lowest: bool,
) -> (PeerState, bool) {
    match stage {
        Stage::Waiting | Stage::Admitted => (PeerState::Joining, false),
        _ if initialized && seeding => (PeerState::Seed, false),
        _ if initialized => (PeerState::Member, false),
        Stage::Member => (PeerState::Founding, false),
        Stage::Unsure if promise && from_lowest => (PeerState::Founding, true),
        Stage::Unsure => (PeerState::Empty, false),
    }
}

/// What an unsure node (or a lowest id that has not initialized) does after a round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The cluster exists and names this node: it lost its data. Join through `via`.
    Rejoin { via: NodeId },
    /// The cluster exists and does not name this node: wait to be added.
    NotNamed,
    /// Lowest id, every peer empty or promised: ask for the promises.
    Found,
    /// A restored seed answered and no member names this node: promise to it.
    FoundWithSeed { seed: NodeId },
    /// Nothing to do yet; the text says why.
    Wait(String),
}

/// The decision after a round of probes, pure. `answers` has every other peer, `None`
/// for one that did not answer.
pub fn decide(
    me: NodeId,
    lowest: NodeId,
    answers: &BTreeMap<NodeId, Option<ProbeResponse>>,
) -> Step {
    let members: Vec<&ProbeResponse> = answers
        .values()
        .flatten()
        .filter(|a| a.state == PeerState::Member)
        .collect();
    if let Some(named) = members.iter().find(|a| a.names_you) {
        return Step::Rejoin { via: named.node };
    }
    if let Some(seed) = answers
        .values()
        .flatten()
        .find(|a| a.state == PeerState::Seed)
    {
        return Step::FoundWithSeed { seed: seed.node };
    }
    let silent: Vec<NodeId> = answers
        .iter()
        .filter(|(_, a)| a.is_none())
        .map(|(id, _)| *id)
        .collect();
    if !members.is_empty() {
        // "Not named" counts only once every peer says it: see the module docs.
        let unproven: Vec<NodeId> = answers
            .iter()
            .filter(|(_, a)| !a.as_ref().is_some_and(|a| a.state == PeerState::Member))
            .map(|(id, _)| *id)
            .collect();
        if unproven.is_empty() {
            return Step::NotNamed;
        }
        return Step::Wait(format!(
            "the members that answered do not name this node, but nodes {unproven:?} have              not answered as members, and a member that lags behind the cluster's              membership would not name it either"
        ));
    }
    if !silent.is_empty() {
        return Step::Wait(format!("no answer yet from nodes {silent:?}"));
    }
    let joining: Vec<NodeId> = answers
        .values()
        .flatten()
        .filter(|a| a.state == PeerState::Joining)
        .map(|a| a.node)
        .collect();
    if !joining.is_empty() {
        return Step::Wait(format!(
            "nodes {joining:?} are joining a cluster none of the others answers for"
        ));
    }
    if me == lowest {
        Step::Found
    } else {
        Step::Wait(format!(
            "every peer is empty: node {lowest} (the lowest id) founds the cluster"
        ))
    }
}

/// Writes the seed marker of a restored data dir (`snapshot restore`), durably.
pub fn mark_seed(data_dir: &Path, snapshot_index: u64) -> Result<(), MarkerError> {
    crate::raft::join::write_durably(data_dir, SEED_FILE, &format!("{snapshot_index}\n"))
}

/// One node's side of bootstrapping, shared by the probe handler and [`run`].
pub struct Bootstrap {
    me: NodeId,
    /// The `--peer` list: id → address in the membership.
    peers: BTreeMap<NodeId, String>,
    /// Peers dialled at another address (`--peer-dial`).
    dial: BTreeMap<NodeId, String>,
    data_dir: PathBuf,
    /// `serve --join-token-file`: the admin token of a rejoin, with `--auth-file`.
    join_token: Option<String>,
    /// Serializes a promise with the unsure node's own decisions: a node that promised
    /// never then takes an initialized founder for a sign that it lost its data.
    lock: tokio::sync::Mutex<()>,
}

impl Bootstrap {
    pub fn new(
        me: NodeId,
        peers: BTreeMap<NodeId, String>,
        dial: BTreeMap<NodeId, String>,
        data_dir: PathBuf,
    ) -> Bootstrap {
        Bootstrap {
            me,
            peers,
            dial,
            data_dir,
            join_token: None,
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The admin token a rejoin presents (`--join-token-file`).
    pub fn with_join_token(mut self, token: Option<String>) -> Bootstrap {
        self.join_token = token;
        self
    }

    fn lowest(&self) -> NodeId {
        *self.peers.keys().next().unwrap_or(&self.me)
    }

    /// Answers `POST /raft/bootstrap` (promising first, durably, when [`answer`] says so).
    pub async fn answer(
        &self,
        raft: &Raft,
        joining: &Joining,
        req: &ProbeRequest,
    ) -> Result<ProbeResponse, AnswerError> {
        let _one = self.lock.lock().await;
        if joining.is_damaged() {
            // It vouches for nothing: neither "empty" (it would promise) nor "member".
            return Ok(ProbeResponse {
                node: self.me,
                state: PeerState::Joining,
                names_you: false,
            });
        }
        let initialized = raft.is_initialized().await.map_err(AnswerError::Raft)?;
        let from_lowest = req.from == self.lowest() && req.from != self.me;
        let seeding = initialized && self.seeding(raft);
        let (state, promise) = answer(
            joining.stage(),
            initialized,
            seeding,
            req.promise,
            from_lowest,
        );
        if promise {
            self.promise()?;
            joining.set(Stage::Member);
            tracing::info!(
                founder = req.from,
                "promised to found the cluster of the --peer list"
            );
        }
        // A voter only: a learner's acknowledgements count towards no commit and it has
        // no vote to forget (and `cluster add-node` makes a new node one before it asks).
        let names_you = state == PeerState::Member && {
            let m = raft.metrics();
            let m = m.borrow();
            m.membership_config
                .membership()
                .voter_ids()
                .any(|id| id == req.from)
        };
        Ok(ProbeResponse {
            node: self.me,
            state,
            names_you,
        })
    }

    fn promise(&self) -> Result<(), MarkerError> {
        crate::raft::join::write_durably(&self.data_dir, FOUNDING_FILE, "founding\n")
    }

    /// Whether this node is a restored seed not yet past its snapshot; a seed that is past
    /// it drops the marker (and is then a member like any other).
    fn seeding(&self, raft: &Raft) -> bool {
        let path = self.data_dir.join(SEED_FILE);
        let Ok(text) = std::fs::read_to_string(&path) else {
            return false;
        };
        // Unreadable text: a crash mid-write of a restore that then never finished.
        let seed_index = text.trim().parse::<u64>().unwrap_or(0);
        let applied = raft.metrics().borrow().last_applied.map_or(0, |l| l.index);
        if applied <= seed_index {
            return true;
        }
        match crate::raft::join::remove_durably(&path) {
            Ok(()) => tracing::info!(applied, "the restored cluster formed: seed marker removed"),
            Err(e) => tracing::warn!(error = %chain(&e), "cannot remove the seed marker"),
        }
        false
    }

    /// Removes the founding marker of a node that now has state of its own.
    pub fn forget_promise(&self) -> Result<(), MarkerError> {
        crate::raft::join::remove_durably(&self.data_dir.join(FOUNDING_FILE))
    }

    /// Where to ask about a join without `--join`: the other peers, in id order.
    pub fn join_via_peers(&self, token: Option<String>) -> Option<JoinConfig> {
        let mut addrs = self.others().map(|(id, _)| self.dial_addr(id));
        let via = addrs.next()?;
        Some(JoinConfig {
            via,
            token,
            alternates: addrs.collect(),
        })
    }

    fn others(&self) -> impl Iterator<Item = (NodeId, &String)> {
        self.peers
            .iter()
            .filter(|(id, _)| **id != self.me)
            .map(|(id, a)| (*id, a))
    }

    fn dial_addr(&self, id: NodeId) -> String {
        self.dial
            .get(&id)
            .or_else(|| self.peers.get(&id))
            .cloned()
            .unwrap_or_default()
    }
}

/// A probe could not be answered (the peer sees a 500 and asks again).
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("raft stopped")]
    Raft(#[source] openraft::error::Fatal<NodeId>),
    #[error("writing the founding marker")]
    Marker(#[from] MarkerError),
}

/// What the bootstrap task uses of the running node (`node::Node::bootstrap_handles`).
pub struct BootstrapHandles {
    pub raft: Raft,
    pub joining: Arc<Joining>,
    pub bootstrap: Arc<Bootstrap>,
    /// For the cluster id the founder fixes before it initializes.
    pub peer: Arc<PeerGuard>,
    /// For a join, when this node finds it lost its data.
    pub join: JoinHandles,
}

/// Runs until this node knows where it stands (see the module docs), then runs the join
/// it found it needs, if any. `advertised`: this node's address in the membership.
pub async fn run(
    h: BootstrapHandles,
    mut network: Network,
    advertised: String,
    cancel: CancellationToken,
) {
    let b = h.bootstrap.clone();
    let mut pause = ROUND_PAUSE_MIN;
    let mut round = 0u32;
    while needs_bootstrap(&h).await {
        let answers = probe_all(&b, &mut network, false).await;
        match decide(b.me, b.lowest(), &answers) {
            Step::Rejoin { via } => return rejoin(h, via, advertised, cancel).await,
            Step::FoundWithSeed { seed } => {
                if promise_to_seed(&h, seed).await {
                    return;
                }
            }
            Step::NotNamed => return wait_until_voter(&h, &advertised, &cancel).await,
            Step::Found => match found(&h, &mut network).await {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(error = %chain(&e), "cannot initialize the cluster");
                    return;
                }
            },
            Step::Wait(why) if round.is_multiple_of(LOG_EVERY_ROUNDS) => tracing::info!(
                "empty data dir: not voting or initializing until the peers say whether the \
                 cluster exists ({why})"
            ),
            Step::Wait(_) => {}
        }
        round += 1;
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(pause) => {}
        }
        pause = (pause * 2).min(ROUND_PAUSE_MAX);
    }
    retire_seed(&h, &cancel).await;
}

/// A restored seed drops its marker once it has applied past the snapshot, whether or not
/// anyone asks: a later snapshot must not make it look restored again.
async fn retire_seed(h: &BootstrapHandles, cancel: &CancellationToken) {
    let b = &h.bootstrap;
    let mut rx = h.raft.metrics();
    while b.data_dir.join(SEED_FILE).exists() && b.seeding(&h.raft) {
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = rx.changed() => if changed.is_err() { return },
        }
    }
}

/// Whether this node still has to find out where it stands: unsure, or the lowest id
/// that has not initialized. A node with state of its own drops its founding marker.
async fn needs_bootstrap(h: &BootstrapHandles) -> bool {
    let b = &h.bootstrap;
    let Ok(initialized) = h.raft.is_initialized().await else {
        return false; // Raft stopped
    };
    if initialized && promised(&b.data_dir) {
        if let Err(e) = b.forget_promise() {
            tracing::warn!(error = %chain(&e), "cannot remove the founding marker");
        }
    }
    match h.joining.stage() {
        Stage::Unsure => true,
        Stage::Member => !initialized && b.me == b.lowest(),
        _ => false,
    }
}

/// Asks every other peer at once; `None` for one that did not answer in time.
async fn probe_all(
    b: &Bootstrap,
    network: &mut Network,
    promise: bool,
) -> BTreeMap<NodeId, Option<ProbeResponse>> {
    let req = ProbeRequest {
        from: b.me,
        promise,
    };
    let mut set = JoinSet::new();
    for (id, addr) in b.others() {
        let client = network.client(id, &BasicNode::new(addr));
        let req = req.clone();
        set.spawn(async move { (id, client.bootstrap(&req, PROBE_TIMEOUT).await) });
    }
    let mut answers: BTreeMap<NodeId, Option<ProbeResponse>> =
        b.others().map(|(id, _)| (id, None)).collect();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((id, Ok(resp))) => {
                answers.insert(id, Some(resp));
            }
            Ok((id, Err(e))) => {
                tracing::debug!(peer = id, error = %e, "bootstrap probe not answered")
            }
            Err(_) => {}
        }
    }
    answers
}

/// A restored seed answered: promise to found its cluster (the founding marker), as to
/// the lowest id. False if the marker could not be written (asked again later).
async fn promise_to_seed(h: &BootstrapHandles, seed: NodeId) -> bool {
    let b = &h.bootstrap;
    let _one = b.lock.lock().await;
    if h.joining.stage() != Stage::Unsure {
        return true;
    }
    if let Err(e) = b.promise() {
        tracing::error!(error = %chain(&e), "cannot write the founding marker");
        return false;
    }
    h.joining.set(Stage::Member);
    tracing::info!(
        seed,
        "found the cluster restored on node {seed}: promised to found it"
    );
    true
}

/// The cluster names this node and it has no data: it lost its disk. Records the join
/// (the marker), then runs it through the peers, `via` first.
async fn rejoin(h: BootstrapHandles, via: NodeId, advertised: String, cancel: CancellationToken) {
    let b = h.bootstrap.clone();
    {
        let _one = b.lock.lock().await;
        if h.joining.stage() != Stage::Unsure {
            return; // it promised meanwhile
        }
        if let Err(e) = crate::raft::join::write_marker(&b.data_dir, Stage::Waiting) {
            tracing::error!(error = %chain(&e), "cannot record the join; staying unsure");
            return;
        }
        h.joining.set(Stage::Waiting);
    }
    tracing::error!(
        id = b.me,
        via,
        "THIS NODE LOST ITS DATA: its data dir is empty but node {via} says the cluster \
         exists and names node {}. It neither votes nor answers Raft until an operator \
         removes the old member (leasehold cluster remove-node {}); then it rejoins by \
         itself, catches up and is promoted (/readyz stays 503 until then)",
        b.me,
        b.me
    );
    let mut join = b
        .join_via_peers(b.join_token.clone())
        .expect("a peer answered");
    let via_addr = b.dial_addr(via);
    for _ in 0..join.alternates.len() {
        if join.via == via_addr {
            break;
        }
        join.rotate();
    }
    crate::raft::join::run(h.join, Some(join), b.data_dir.clone(), advertised, cancel).await;
}

/// The cluster exists and does not name this node: a new node, added by the operator
/// (`leasehold cluster add-node`). Replication is accepted, votes only once the
/// membership it holds makes it a voter.
async fn wait_until_voter(h: &BootstrapHandles, advertised: &str, cancel: &CancellationToken) {
    let b = &h.bootstrap;
    {
        let _one = b.lock.lock().await;
        if h.joining.stage() != Stage::Unsure {
            return;
        }
        h.joining.set(Stage::Admitted);
    }
    tracing::info!(
        id = b.me,
        "the cluster exists and does not name this node: waiting to be added \
         (leasehold cluster add-node {} {advertised}); not voting until then",
        b.me
    );
    let mut rx = h.raft.metrics();
    loop {
        let voter = rx
            .borrow_and_update()
            .membership_config
            .membership()
            .voter_ids()
            .any(|id| id == b.me);
        if voter {
            break;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            changed = rx.changed() => if changed.is_err() { return },
        }
    }
    let _one = b.lock.lock().await;
    h.joining.set(Stage::Member);
    tracing::info!(id = b.me, "added to the cluster as a voter");
}

/// How often a damaged node repeats what the operator must do.
const DAMAGE_REPEAT: Duration = Duration::from_secs(30);

/// Logs, once at start, why this node's data dir cannot prove it holds what it voted for
/// and what the operator does about it (docs/operations.md).
pub fn report_damage(me: NodeId, data_dir: &Path, losses: &[crate::store::held::Loss]) {
    for loss in losses {
        tracing::error!(id = me, "data dir {}: {loss}", data_dir.display());
    }
    say_damaged(me, data_dir);
}

fn say_damaged(me: NodeId, data_dir: &Path) {
    tracing::error!(
        id = me,
        "THIS NODE'S DATA DIR LOST PART OF ITS STATE ({}/damaged says what): it neither \
         votes nor answers Raft, and /readyz stays 503. Replace it: leasehold cluster \
         remove-node {me} (through any other node); then stop this node, move {} aside \
         and start it on an empty data dir with --join (docs/operations.md, \"A data dir \
         that lost part of its state\")",
        data_dir.display(),
        data_dir.display()
    );
}

/// Repeats [`report_damage`]'s instructions until the node stops.
pub async fn repeat_damage(me: NodeId, data_dir: PathBuf, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(DAMAGE_REPEAT) => say_damaged(me, &data_dir),
        }
    }
}

/// Why the founder could not initialize.
#[derive(Debug, thiserror::Error)]
pub enum FoundError {
    #[error(transparent)]
    Marker(#[from] MarkerError),
    #[error(transparent)]
    Identity(#[from] crate::security::identity::IdentityError),
    #[error("initializing raft")]
    Initialize(
        #[source]
        Box<
            openraft::error::RaftError<NodeId, openraft::error::InitializeError<NodeId, BasicNode>>,
        >,
    ),
}

/// The lowest id, every peer empty: asks for every promise, then promises itself, fixes
/// the cluster id (on disk before the cluster exists, so every RPC carries it) and
/// initializes. `Ok(false)`: a promise is missing; ask again later.
async fn found(h: &BootstrapHandles, network: &mut Network) -> Result<bool, FoundError> {
    let b = &h.bootstrap;
    let answers = probe_all(b, network, true).await;
    let missing: Vec<NodeId> = answers
        .iter()
        .filter(|(_, a)| !matches!(a, Some(r) if r.state == PeerState::Founding))
        .map(|(id, _)| *id)
        .collect();
    if !missing.is_empty() {
        tracing::info!(?missing, "not every peer promised to found the cluster yet");
        return Ok(false);
    }
    {
        let _one = b.lock.lock().await;
        if h.joining.stage() == Stage::Unsure {
            b.promise()?;
            h.joining.set(Stage::Member);
        }
    }
    h.peer.ensure_cluster_id().await?;
    let members: BTreeMap<NodeId, BasicNode> = b
        .peers
        .iter()
        .map(|(id, addr)| (*id, BasicNode::new(addr)))
        .collect();
    tracing::info!(
        ?members,
        "every peer is empty and promised: initializing a new cluster"
    );
    match h.raft.initialize(members).await {
        Ok(()) => Ok(true),
        // A vote or a log appeared meanwhile: nothing to do.
        Err(openraft::error::RaftError::APIError(e)) => {
            tracing::warn!(error = %e, "initialize refused");
            Ok(true)
        }
        Err(e) => Err(FoundError::Initialize(Box::new(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(node: NodeId, state: PeerState, names_you: bool) -> Option<ProbeResponse> {
        Some(ProbeResponse {
            node,
            state,
            names_you,
        })
    }

    #[test]
    fn only_an_unsure_empty_node_promises_and_only_to_the_lowest_id() {
        use PeerState::*;
        // An unsure, empty node promises to the lowest id's promise request only.
        assert_eq!(
            answer(Stage::Unsure, false, false, true, true),
            (Founding, true)
        );
        assert_eq!(
            answer(Stage::Unsure, false, false, true, false),
            (Empty, false)
        );
        assert_eq!(
            answer(Stage::Unsure, false, false, false, true),
            (Empty, false)
        );
        // Already promised, or holding state, or joining: no new promise.
        assert_eq!(
            answer(Stage::Member, false, false, true, true),
            (Founding, false)
        );
        assert_eq!(
            answer(Stage::Member, true, false, true, true),
            (Member, false)
        );
        assert_eq!(
            answer(Stage::Waiting, false, false, true, true),
            (Joining, false)
        );
        assert_eq!(
            answer(Stage::Admitted, true, false, true, true),
            (Joining, false)
        );
        // A restored seed says so until it is past its snapshot.
        assert_eq!(
            answer(Stage::Member, true, true, false, false),
            (Seed, false)
        );
    }

    #[test]
    fn a_cluster_that_names_this_node_means_it_lost_its_data() {
        use PeerState::*;
        let answers = BTreeMap::from([(2, resp(2, Empty, false)), (3, resp(3, Member, true))]);
        assert_eq!(decide(1, 1, &answers), Step::Rejoin { via: 3 });
        // Even with a peer silent: one member naming it is enough.
        let answers = BTreeMap::from([(1, None), (3, resp(3, Member, true))]);
        assert_eq!(decide(2, 1, &answers), Step::Rejoin { via: 3 });
        let answers = BTreeMap::from([(1, resp(1, Member, false)), (3, resp(3, Member, false))]);
        assert_eq!(decide(4, 1, &answers), Step::NotNamed);
        // A restored seed: found with it, unless a member names this node a voter.
        let answers = BTreeMap::from([(1, resp(1, Seed, false)), (3, None)]);
        assert_eq!(decide(2, 1, &answers), Step::FoundWithSeed { seed: 1 });
        let answers = BTreeMap::from([(1, resp(1, Seed, false)), (3, resp(3, Member, true))]);
        assert_eq!(decide(2, 1, &answers), Step::Rejoin { via: 3 });
    }

    #[test]
    fn a_lagging_member_that_does_not_name_this_node_is_no_proof_alone() {
        use PeerState::*;
        // Node 3 missed the change that made node 2 a voter; node 1, which holds it, is
        // down (or wiped, or damaged): node 2 must not take itself for a new node.
        for one in [None, resp(1, Empty, false), resp(1, Joining, false)] {
            let answers = BTreeMap::from([(1, one.clone()), (3, resp(3, Member, false))]);
            assert!(
                matches!(decide(2, 1, &answers), Step::Wait(ref w) if w.contains("[1]")),
                "{one:?}: {:?}",
                decide(2, 1, &answers)
            );
        }
        // Once node 1 answers, it names node 2 (it holds the change) …
        let answers = BTreeMap::from([(1, resp(1, Member, true)), (3, resp(3, Member, false))]);
        assert_eq!(decide(2, 1, &answers), Step::Rejoin { via: 1 });
        // … or, if it does not either, node 2 really is not a voter.
        let answers = BTreeMap::from([(1, resp(1, Member, false)), (3, resp(3, Member, false))]);
        assert_eq!(decide(2, 1, &answers), Step::NotNamed);
    }

    #[test]
    fn only_the_lowest_id_founds_and_only_when_every_peer_is_empty() {
        use PeerState::*;
        let empty = BTreeMap::from([(2, resp(2, Empty, false)), (3, resp(3, Founding, false))]);
        assert_eq!(decide(1, 1, &empty), Step::Found);
        assert!(matches!(
            decide(
                2,
                1,
                &BTreeMap::from([(1, resp(1, Empty, false)), (3, resp(3, Empty, false))])
            ),
            Step::Wait(_)
        ));
        let silent = BTreeMap::from([(2, resp(2, Empty, false)), (3, None)]);
        assert!(matches!(decide(1, 1, &silent), Step::Wait(w) if w.contains("[3]")));
        let joining = BTreeMap::from([(2, resp(2, Joining, false)), (3, resp(3, Empty, false))]);
        assert!(matches!(decide(1, 1, &joining), Step::Wait(_)));
        // Alone in its --peer list: nothing to ask.
        assert_eq!(decide(1, 1, &BTreeMap::new()), Step::Found);
    }

    #[test]
    fn the_founding_marker_is_durable_and_forgotten_on_request() {
        let dir = tempfile::tempdir().unwrap();
        let b = Bootstrap::new(
            2,
            BTreeMap::from([(1, "a:1".into()), (2, "b:2".into())]),
            BTreeMap::new(),
            dir.path().to_path_buf(),
        );
        assert!(!promised(dir.path()));
        b.promise().unwrap();
        assert!(promised(dir.path()));
        b.forget_promise().unwrap();
        assert!(!promised(dir.path()));
        let j = b.join_via_peers(None).unwrap();
        assert_eq!((j.via.as_str(), j.alternates.len()), ("a:1", 0));
    }
}
