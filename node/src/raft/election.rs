//! Pre-vote in front of openraft 0.9's elections: a node campaigns only after a majority
//! of the voters (itself included) said they would vote for it.
//!
//! openraft 0.9 has no pre-vote. Two things went wrong without it (both measured with
//! `bench failover`, docs/performance.md):
//! - **A stale first candidate.** When the leader dies, the follower whose timer fires
//!   first may have missed the last entry. It campaigns; the other follower refuses it
//!   for its shorter log but stays in the old term, and then needs two campaigns of its
//!   own to get above the stale candidate's term: a write gap of 0.7–1.3 s instead of
//!   ~0.45 s, in 1–3 trials of 12.
//! - **Disruptive restarts.** A node restarted while the cluster had moved on campaigned
//!   on its own timer and now and then deposed a healthy leader.
//!
//! So `serve` turns openraft's own election timer off (`enable_elect: false`) and runs
//! [`run`] instead. A follower that has heard nothing from a leader for the leader lease
//! plus its election timeout (openraft's own rule, kept) asks every other voter
//! `POST /raft/prevote` with its last log id. A voter grants when it is not the leader,
//! has itself heard nothing from a leader for at least the lease, and the candidate's log
//! is at least as up to date as its own (Raft's vote rule, without touching any state).
//! With a majority of grants the node starts a real election (`Raft::trigger().elect()`),
//! which openraft runs as before; without one it waits a fresh election timeout and asks
//! again. Safety stays entirely with openraft's vote: pre-vote only decides *when* a node
//! may stand.
//!
//! **Check quorum** (issue 16, item 2; etcd's raft pairs PreVote with CheckQuorum for the
//! same reason). Pre-vote alone lets a leader that lost its quorum block elections: five
//! voters, one down, the leader reaching only one "bridge" node — the bridge keeps
//! hearing it and refuses the others' pre-votes, and no write commits for as long as the
//! partition lasts. So [`run`] also watches a leader's last quorum acknowledgement
//! (openraft's `millis_since_quorum_ack`, refreshed on every Raft core tick; the timer
//! adds the greatest age the value can have, see [`Freshness`]). A leader without one
//! for longer than the lease is **deposed**, within one 25 ms timer step of the lease
//! running out — well before a follower may stand (lease + its election timeout,
//! ≥ 100 ms with `serve`'s defaults). Deposed, it stops its regular
//! heartbeats, names no leader (`/readyz` 503, `leader_id` null), answers writes and
//! reads 503 at once, and answers pre-votes as a follower would. openraft 0.9 has no
//! step-down call, so the node stays leader in openraft's eyes until it meets a higher
//! term; to find out whether its quorum is back (nobody else may have been able to
//! elect), it sends one heartbeat round every [`PROBE_EVERY_LEASES`] leases, rarely
//! enough that the connected nodes see gaps long enough to elect without it.
//!
//! **Time.** Every span the timer judges — quiet since a leader was heard, the drawn
//! timeout, a leader's time in office, the probe interval — is read on the node's
//! injected [`Clock`](crate::time::clock::Clock) (`NodeConfig::clock`), the one cluster
//! time runs on, so a node started with `--clock-rate` (or a test's clock) campaigns on
//! that clock too. Only the 25 ms polling tick is tokio's: it decides how often the
//! timer looks, not what it sees.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::{BasicNode, ServerState};
use rand::Rng;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::raft::join::Joining;
pub use crate::raft::messages::{PreVoteRequest, PreVoteResponse};
use crate::raft::network::Network;
use crate::store::LogStore;
use crate::telemetry::metrics::Metrics;
use crate::time::clock::SharedClock;
use crate::types::{LogId, NodeId, Raft};

/// One node's election timing and pre-vote bookkeeping.
pub struct Elector {
    /// The node's clock: every instant below is its `mono_ms`.
    clock: SharedClock,
    /// When this node last heard from a leader it accepted (or was the leader itself).
    contact_ms: AtomicU64,
    /// openraft's leader lease: the maximum election timeout.
    lease: Duration,
    timeout_min_ms: u64,
    timeout_max_ms: u64,
    log: LogStore,
    /// Set while this node leads in openraft's eyes but has had no quorum's
    /// acknowledgement within the lease (see the module docs).
    deposed: AtomicBool,
    /// Times this node was deposed by check quorum (`leasehold_raft_quorum_lost_total`).
    deposals: AtomicU64,
    /// The highest commit index a leader's accepted AppendEntries carried. A follower's
    /// own commit index stops at the end of its log, so a node catching up would look
    /// caught up by it; `/readyz` waits for this one too.
    leader_commit: AtomicU64,
}

/// A deposed leader probes for its quorum once every this many leases (800 ms with
/// `serve`'s 200 ms lease): longer than a follower waits before standing (lease + its
/// timeout, ≤ 2 leases), so between two probes the nodes it still reaches go quiet for
/// long enough to elect a leader that does have a quorum.
pub const PROBE_EVERY_LEASES: u32 = 4;

impl Elector {
    /// `log` is this node's log store (for its last log id), `clock` the node's own;
    /// timeouts in milliseconds.
    pub fn new(
        log: LogStore,
        clock: SharedClock,
        timeout_min_ms: u64,
        timeout_max_ms: u64,
    ) -> Elector {
        Elector {
            // A node that just started waits a whole lease and timeout before standing,
            // like openraft's own timer: a running cluster gets to reach it first.
            contact_ms: AtomicU64::new(clock.mono_ms()),
            clock,
            lease: Duration::from_millis(timeout_max_ms),
            timeout_min_ms,
            timeout_max_ms: timeout_max_ms.max(timeout_min_ms + 1),
            log,
            deposed: AtomicBool::new(false),
            deposals: AtomicU64::new(0),
            leader_commit: AtomicU64::new(0),
        }
    }

    /// True while this node leads in openraft's eyes without a quorum (check quorum).
    pub fn deposed(&self) -> bool {
        self.deposed.load(Ordering::Relaxed)
    }

    /// Times check quorum deposed this node since it started.
    pub fn deposals(&self) -> u64 {
        self.deposals.load(Ordering::Relaxed)
    }

    /// Now, on the node's clock.
    fn now_ms(&self) -> u64 {
        self.clock.mono_ms()
    }

    /// Records that a leader's AppendEntries or snapshot was accepted just now.
    pub fn heard_from_leader(&self) {
        self.contact_ms.fetch_max(self.now_ms(), Ordering::Relaxed);
    }

    /// Records the leader's commit index of an AppendEntries this node accepted.
    pub fn heard_commit(&self, index: u64) {
        self.leader_commit.fetch_max(index, Ordering::Relaxed);
    }

    /// The highest leader commit index heard ([`Elector::heard_commit`]); 0 before any.
    pub fn leader_commit(&self) -> u64 {
        self.leader_commit.load(Ordering::Relaxed)
    }

    /// Out of touch: a follower that has heard from no leader for as long as it waits
    /// before standing for election. Its openraft still names the old leader (with
    /// pre-vote, nothing moves its term while no majority agrees), so the node itself
    /// stops naming one: see `Node::known_leader`.
    pub fn out_of_touch(&self) -> bool {
        self.quiet_for() >= self.lease + Duration::from_millis(self.timeout_max_ms)
    }

    /// How long since this node last heard from a leader.
    pub fn quiet_for(&self) -> Duration {
        let since = self
            .now_ms()
            .saturating_sub(self.contact_ms.load(Ordering::Relaxed));
        Duration::from_millis(since)
    }

    /// How long ago `then_ms` was, on the node's clock.
    fn since(&self, then_ms: u64) -> Duration {
        Duration::from_millis(self.now_ms().saturating_sub(then_ms))
    }

    fn draw_timeout(&self) -> Duration {
        Duration::from_millis(
            rand::thread_rng().gen_range(self.timeout_min_ms..self.timeout_max_ms),
        )
    }

    /// Answers a pre-vote, changing nothing. A deposed leader answers as a follower.
    pub fn answer(&self, state: ServerState, req: &PreVoteRequest) -> PreVoteResponse {
        let state = if state == ServerState::Leader && self.deposed() {
            ServerState::Follower
        } else {
            state
        };
        let judged = self
            .log
            .last_log_id()
            .map_err(Refusal::LogUnreadable)
            .and_then(|my_last| {
                judge(
                    state,
                    self.quiet_for(),
                    self.lease,
                    my_last,
                    req.last_log_id,
                )
            });
        match judged {
            Ok(()) => PreVoteResponse {
                granted: true,
                reason: String::new(),
            },
            Err(refusal) => PreVoteResponse {
                granted: false,
                reason: refusal.to_string(),
            },
        }
    }
}

/// Why a pre-vote was refused; its text is the answer's `reason`, for the candidate's log.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("this node is the leader")]
    Leader,
    #[error("this node heard from a leader (or started) {quiet_ms} ms ago")]
    HeardFromLeader { quiet_ms: u128 },
    #[error("the candidate's log ends at {candidate:?}, this node's at {mine:?}")]
    LogBehind {
        candidate: Option<LogId>,
        mine: Option<LogId>,
    },
    #[error("cannot read the log: {0}")]
    LogUnreadable(std::io::Error),
}

/// The pre-vote rule, as a pure function: grant unless this node leads, has heard from
/// a leader within the lease, or holds a log the candidate's does not reach.
pub fn judge(
    state: ServerState,
    quiet_for: Duration,
    lease: Duration,
    my_last: Option<LogId>,
    candidate_last: Option<LogId>,
) -> Result<(), Refusal> {
    if state == ServerState::Leader {
        return Err(Refusal::Leader);
    }
    if quiet_for < lease {
        return Err(Refusal::HeardFromLeader {
            quiet_ms: quiet_for.as_millis(),
        });
    }
    if candidate_last < my_last {
        return Err(Refusal::LogBehind {
            candidate: candidate_last,
            mine: my_last,
        });
    }
    Ok(())
}

/// The check-quorum rule, as a pure function: has a leader lost its quorum? `since_ack`
/// is how long ago a quorum last acknowledged it (openraft's `millis_since_quorum_ack`;
/// `None` before any acknowledgement in this term, then the time it has led counts).
pub fn quorum_lost(since_ack: Option<Duration>, leading_for: Duration, lease: Duration) -> bool {
    since_ack.unwrap_or(leading_for) > lease
}

/// Whether an InstallSnapshot answer shows the request was taken from a current leader:
/// openraft answers `Ok` with its own, higher vote when it refuses a stale leader, and
/// that must not restart the election timer (issue 16, item 2).
pub fn snapshot_accepted(
    request_vote: &openraft::Vote<NodeId>,
    response_vote: &openraft::Vote<NodeId>,
) -> bool {
    response_vote <= request_vote
}

/// What a leader's check-quorum step found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leading {
    /// A quorum acknowledged it within the lease.
    WithQuorum,
    /// Deposed; the caller need do nothing more this tick.
    Deposed,
}

/// When this node started leading, per term, and when a deposed leader last probed
/// (milliseconds on the node's clock).
#[derive(Debug, Default)]
struct LeaderWatch {
    since: Option<(u64, u64)>,
    probed: Option<u64>,
}

/// How stale openraft's `millis_since_quorum_ack` may be when the timer reads it.
///
/// openraft computes it when it publishes metrics, and a leader that hears from nobody
/// publishes only on its core tick, every 1.5 heartbeats (75 ms with `serve`'s 50 ms).
/// Read as it is, the value lags the truth by up to that tick plus the timer's own step,
/// and a cut-off leader was deposed 25–100 ms after its lease ran out (issue 28, item 3).
/// So the timer adds the value's greatest possible age: it was published after the
/// timer's previous look at an unchanged value, i.e. after `published_after_ms`. The
/// bound is never below the truth and at most one timer step (25 ms) above it, so a
/// deposal comes within one step of the lease running out: at most 25 ms after it (the
/// old reading: up to 100 ms), and perhaps up to 25 ms before it, three and a half
/// heartbeats without a quorum's answer.
#[derive(Debug, Clone, Copy)]
struct Freshness {
    /// The timer's previous look (node clock, ms).
    looked_ms: u64,
    /// The current value was published no earlier than this.
    published_after_ms: u64,
}

impl Freshness {
    fn new(now_ms: u64) -> Freshness {
        Freshness {
            looked_ms: now_ms,
            published_after_ms: now_ms,
        }
    }

    /// The reported `since_ack_ms` plus the age the value can have at `now_ms`;
    /// `published` says whether openraft published metrics since the previous look.
    fn since_ack_at_most(
        &mut self,
        since_ack_ms: Option<u64>,
        published: bool,
        now_ms: u64,
    ) -> Option<u64> {
        if published {
            self.published_after_ms = self.looked_ms;
        }
        self.looked_ms = now_ms;
        let age = now_ms.saturating_sub(self.published_after_ms);
        since_ack_ms.map(|ms| ms.saturating_add(age))
    }
}

impl Elector {
    /// One check-quorum step on a leader of `term`: deposes it, restores it, or probes.
    async fn check_quorum(
        &self,
        raft: &crate::types::Raft,
        term: u64,
        since_ack_ms: Option<u64>,
        watch: &mut LeaderWatch,
    ) -> Leading {
        let since = match watch.since {
            Some((t, at)) if t == term => at,
            _ => {
                let now = self.now_ms();
                *watch = LeaderWatch {
                    since: Some((term, now)),
                    probed: None,
                };
                now
            }
        };
        let lost = quorum_lost(
            since_ack_ms.map(Duration::from_millis),
            self.since(since),
            self.lease,
        );
        if lost != self.deposed.swap(lost, Ordering::Relaxed) {
            raft.runtime_config().heartbeat(!lost);
            if lost {
                self.deposals.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    term,
                    since_ack_ms,
                    "check quorum: no quorum acknowledged this leader within its lease; \
                     refusing requests and stopping heartbeats"
                );
            } else {
                tracing::info!(
                    term,
                    "check quorum: a quorum acknowledged this leader again"
                );
            }
        }
        if !lost {
            return Leading::WithQuorum;
        }
        if watch
            .probed
            .is_none_or(|t| self.since(t) >= self.lease * PROBE_EVERY_LEASES)
        {
            watch.probed = Some(self.now_ms());
            let _ = raft.trigger().heartbeat().await;
        }
        Leading::Deposed
    }

    /// Leaves the deposed state when the node no longer leads (it met a higher term).
    fn not_leading(&self, raft: &crate::types::Raft) {
        if self.deposed.swap(false, Ordering::Relaxed) {
            raft.runtime_config().heartbeat(true);
            tracing::info!("check quorum: no longer leader; heartbeats back on for a next term");
        }
    }
}

/// What the election timer uses of the running node: its shares of the node's handles
/// (`node::Node::election_handles`), not the node itself, so `raft` never imports `node`.
pub struct ElectionHandles {
    pub id: NodeId,
    pub raft: Raft,
    pub elector: Arc<Elector>,
    /// A joining node does not stand (`join::refuses_votes`).
    pub joining: Arc<Joining>,
    /// For `elections_started`.
    pub metrics: Arc<Metrics>,
}

/// The election timer of a node: see the module docs. Runs until `cancel`.
pub async fn run(node: ElectionHandles, mut network: Network, cancel: CancellationToken) {
    let elector = node.elector.clone();
    // openraft checks its timer every 1.5 heartbeats; a finer tick costs nothing here.
    let tick = Duration::from_millis(25);
    let mut timeout = elector.draw_timeout();
    // When the last pre-vote round was asked for, on the node's clock.
    let mut asked: Option<u64> = None;
    let mut watch = LeaderWatch::default();
    let mut metrics = node.raft.metrics();
    let mut fresh = Freshness::new(elector.now_ms());
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        let published = metrics.has_changed().unwrap_or(false);
        let (state, is_voter, term, since_ack_ms) = {
            let m = metrics.borrow_and_update();
            let is_voter = m
                .membership_config
                .membership()
                .voter_ids()
                .any(|id| id == node.id);
            (m.state, is_voter, m.current_term, m.millis_since_quorum_ack)
        };
        let since_ack_ms = fresh.since_ack_at_most(since_ack_ms, published, elector.now_ms());
        if state == ServerState::Leader {
            let leading = elector
                .check_quorum(&node.raft, term, since_ack_ms, &mut watch)
                .await;
            if leading == Leading::WithQuorum {
                elector.heard_from_leader();
            }
            continue;
        }
        elector.not_leading(&node.raft);
        if crate::raft::join::refuses_votes(&node.joining) || !is_voter {
            continue;
        }
        if elector.quiet_for() < elector.lease + timeout
            || asked.is_some_and(|t| elector.since(t) < timeout)
        {
            continue;
        }
        asked = Some(elector.now_ms());
        timeout = elector.draw_timeout();
        if pre_vote(&node, &mut network).await && node.raft.trigger().elect().await.is_err() {
            return; // Raft has stopped
        }
    }
}

/// One pre-vote round: true when a majority of the voters (this node included) would
/// vote for it, so it may stand for election now.
async fn pre_vote(node: &ElectionHandles, network: &mut Network) -> bool {
    // The other voters, listed only now that this node will ask them.
    let others: Vec<(NodeId, BasicNode)> = {
        let m = node.raft.metrics();
        let m = m.borrow();
        let membership = m.membership_config.membership();
        membership
            .voter_ids()
            .filter(|id| *id != node.id)
            .filter_map(|id| membership.get_node(&id).map(|n| (id, n.clone())))
            .collect()
    };
    // A majority of all voters is all / 2 + 1, and our own vote is one of them.
    let all = others.len() + 1;
    let needed = all / 2;
    let granted = needed == 0 || ask(node, network, others, needed).await;
    if granted {
        tracing::info!(
            quiet_ms = node.elector.quiet_for().as_millis() as u64,
            "pre-vote granted by a majority; standing for election"
        );
        node.metrics.elections_started.inc();
    }
    granted
}

/// Asks `others` concurrently; true once `needed` of them granted.
async fn ask(
    node: &ElectionHandles,
    network: &mut Network,
    others: Vec<(NodeId, BasicNode)>,
    needed: usize,
) -> bool {
    let req = PreVoteRequest {
        candidate: node.id,
        last_log_id: match node.elector.log.last_log_id() {
            Ok(last) => last,
            Err(_) => return false,
        },
    };
    // An answer takes one round trip; a peer that has not answered within a lease is as
    // good as a refusal (a paused or partitioned node).
    let wait = node.elector.lease;
    let mut set = JoinSet::new();
    for (id, addr) in others {
        let client = network.client(id, &addr);
        let req = req.clone();
        set.spawn(async move { (id, client.prevote(&req, wait).await) });
    }
    let mut grants = 0;
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((_, Ok(resp))) if resp.granted => {
                grants += 1;
                if grants >= needed {
                    return true;
                }
            }
            Ok((peer, Ok(resp))) => {
                tracing::debug!(peer, reason = %resp.reason, "pre-vote refused")
            }
            Ok((peer, Err(e))) => tracing::debug!(peer, error = %e, "pre-vote not answered"),
            Err(_) => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn id(term: u64, index: u64) -> Option<LogId> {
        Some(LogId::new(CommittedLeaderId::new(term, 1), index))
    }

    #[test]
    fn prevote_rule() {
        let lease = Duration::from_millis(200);
        let quiet = Duration::from_millis(250);
        let f = ServerState::Follower;
        // Granted: no leader heard for a lease, candidate's log at least as long.
        assert!(judge(f, quiet, lease, id(2, 10), id(2, 10)).is_ok());
        assert!(judge(f, quiet, lease, id(2, 10), id(2, 11)).is_ok());
        assert!(judge(f, quiet, lease, id(2, 10), id(3, 4)).is_ok());
        assert!(judge(ServerState::Candidate, quiet, lease, None, None).is_ok());
        // Refused: a shorter log, or an older term at the end of it.
        let behind = |mine, theirs| {
            matches!(
                judge(f, quiet, lease, mine, theirs),
                Err(Refusal::LogBehind { .. })
            )
        };
        assert!(behind(id(2, 10), id(2, 9)));
        assert!(behind(id(3, 4), id(2, 10)));
        assert!(behind(id(1, 1), None));
        // Refused: a leader was heard from within the lease, or this node leads.
        let recent = Duration::from_millis(150);
        let err = judge(f, recent, lease, id(2, 10), id(2, 10)).unwrap_err();
        assert!(err.to_string().contains("150 ms ago"), "{err}");
        assert!(matches!(
            judge(ServerState::Leader, quiet, lease, None, id(9, 9)),
            Err(Refusal::Leader)
        ));
    }

    /// The timer's spans are read on the node's clock: a held clock holds them still,
    /// however much real time passes, and moving it moves them.
    #[tokio::test]
    async fn quiet_time_is_read_on_the_node_clock() {
        let dir = tempfile::tempdir().unwrap();
        let log = LogStore::open(dir.path()).await.unwrap();
        let clock = Arc::new(crate::time::clock::HeldClock::at(5_000));
        let e = Elector::new(log, clock.clone(), 100, 200);
        assert_eq!(e.quiet_for(), Duration::ZERO);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            e.quiet_for(),
            Duration::ZERO,
            "real time passed, the clock did not"
        );
        assert!(!e.out_of_touch());
        clock.advance(400);
        assert_eq!(e.quiet_for(), Duration::from_millis(400));
        assert!(e.out_of_touch(), "lease 200 ms + timeout max 200 ms");
        e.heard_from_leader();
        assert_eq!(e.quiet_for(), Duration::ZERO);
    }

    #[test]
    fn check_quorum_rule() {
        let lease = Duration::from_millis(200);
        let ms = Duration::from_millis;
        // Acknowledged within the lease: leading.
        assert!(!quorum_lost(Some(ms(150)), ms(10_000), lease));
        assert!(!quorum_lost(Some(ms(200)), ms(10_000), lease));
        // Not for longer than the lease: deposed, however long it has led.
        assert!(quorum_lost(Some(ms(201)), ms(10_000), lease));
        // No acknowledgement yet in this term: a new leader gets one lease.
        assert!(!quorum_lost(None, ms(150), lease));
        assert!(quorum_lost(None, ms(250), lease));
    }

    /// Issue 28, item 3: openraft publishes `millis_since_quorum_ack` only on its tick
    /// while nobody answers, so the value read can be 100 ms old; the bound adds that age.
    #[test]
    fn a_stale_since_ack_is_aged_by_the_time_since_it_could_have_been_published() {
        let mut f = Freshness::new(1_000);
        // Published between the looks at 1_000 and 1_025: at most 25 ms old.
        assert_eq!(f.since_ack_at_most(Some(120), true, 1_025), Some(145));
        // Not republished: it ages with every look.
        assert_eq!(f.since_ack_at_most(Some(120), false, 1_050), Some(170));
        assert_eq!(f.since_ack_at_most(Some(120), false, 1_075), Some(195));
        let lease = Duration::from_millis(200);
        assert!(!quorum_lost(Some(Duration::from_millis(195)), lease, lease));
        // One step later the bound passes the lease: deposed within a step of it (the
        // old reading, 120 ms, would have waited for the next publish, up to 75 ms on).
        let bound = f.since_ack_at_most(Some(120), false, 1_100).unwrap();
        assert_eq!(bound, 220);
        assert!(quorum_lost(
            Some(Duration::from_millis(bound)),
            lease,
            lease
        ));
        // A fresh publish resets the age to one step.
        assert_eq!(f.since_ack_at_most(Some(10), true, 1_125), Some(35));
        assert_eq!(f.since_ack_at_most(None, false, 1_150), None);
    }

    #[test]
    fn a_refused_snapshot_is_no_contact_with_a_leader() {
        use openraft::Vote;
        let leader = Vote::new_committed(5, 1);
        // Taken: the follower's vote is now the leader's.
        assert!(snapshot_accepted(&leader, &leader));
        // Refused: the follower answered with its own, higher vote (openraft answers Ok).
        let stale = Vote::new_committed(4, 2);
        assert!(!snapshot_accepted(&stale, &leader));
        assert!(!snapshot_accepted(&stale, &Vote::new(5, 3)));
    }
}
