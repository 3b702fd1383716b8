//! Speculative AppendEntries (issue 33, item 5): a leader's lone write reaches the
//! followers while the leader's own fsync runs, instead of after it.
//!
//! openraft 0.9 appends a leader's entries (`append_to_log`), awaits their fsync, and only
//! then lets its replication streams send them: the leader's fsync and the follower's are
//! in series on every write that finds the pipeline idle. Calling `LogFlushed` early would
//! count an undurable copy toward the quorum, so instead the log store shows each append
//! to a [`Speculator`] just before writing it (`store::AppendObserver`), and the
//! speculator sends the same entries at once, as an ordinary AppendEntries of the current
//! leader, to every other member, and drops the answers. A follower that accepts them
//! appends and fsyncs them in parallel with the leader; openraft's own AppendEntries,
//! sent after the leader's flush, then finds them already there (a follower skips entries
//! it holds) and is acknowledged without a second fsync. The commit still needs the
//! leader's flush and a follower's acknowledgement through openraft's own accounting, so
//! durability is unchanged: an acknowledged write is on a majority's disks.
//!
//! Why it is safe: any AppendEntries of the current leader may arrive at any time, in any
//! order — a follower refuses a stale vote and a missing previous entry, truncates only
//! what conflicts with the leader's log (which a leader never rewrites within its term),
//! and keeps entries that match. The request carries the vote the entries were appended
//! under, read from the log itself, and the committed id the log recorded.
//!
//! Where it is sent from: a thread of its own, with its own runtime and connections. The
//! append runs on a tokio worker that the fsync then blocks, and a task spawned or woken
//! there goes to that worker's LIFO slot, which other workers do not steal: it would
//! leave only after the fsync, which is what this is for. A channel to another runtime
//! wakes that thread at once.
//!
//! When it is sent: only by the leader (the log's vote is committed and names this node),
//! only for entries a client waits on (not the leader's ticks, blanks or membership
//! changes), and only for a write that finds everything before it committed (the log's
//! committed id is its last id): under load, appends follow each other while replication is in flight,
//! the serial fsync is hidden, and a second request per entry would only cost CPU. At most
//! one speculative request is in flight per member; a member busy with the previous one
//! is skipped.
//!
//! Before the first early send of a term the log writes the leader mark
//! (`store/wal/mark.rs`): a release from before this one would resume the term it led
//! after an unclean stop, and the mark makes it refuse the data dir instead.
//!
//! May import: `raft::network`, `store`, `types`, and `leasehold_statemachine` (to tell a
//! tick from a client's command).

#[cfg(test)]
use leasehold_statemachine::commands::Claim;
use leasehold_statemachine::commands::Tick;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_statemachine::Command;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use openraft::EntryPayload;
use tokio::sync::{mpsc, watch};

use crate::raft::network::Network;
use crate::store::{AppendContext, AppendObserver};
use crate::types::{NodeId, RaftMetrics, TypeConfig};

/// Bound on one speculative request: past it the answer is of no use (openraft's own
/// AppendEntries has long carried the entries).
const SPECULATION_TIMEOUT: Duration = Duration::from_millis(500);
/// Requests waiting for the sender thread; past it an append is not speculated.
const QUEUE_MAX: usize = 64;

/// Sends a leader's lone writes to its members while its own fsync runs (module doc).
pub struct Speculator {
    me: NodeId,
    queue: mpsc::Sender<AppendEntriesRequest<TypeConfig>>,
    stats: Arc<SpeculationStats>,
}

/// What the speculator did, for tests and benchmarks.
#[derive(Debug, Default)]
pub struct SpeculationStats {
    /// Requests sent (one per member per speculated append).
    pub sent: AtomicU64,
    /// Answers that accepted the entries.
    pub accepted: AtomicU64,
    /// Answers that refused them (a conflict, a higher vote) or failed.
    pub refused: AtomicU64,
    /// Appends not speculated: not the leader, replication already in flight, or the
    /// sender thread behind.
    pub skipped: AtomicU64,
    /// Appends queued for the sender thread.
    pub queued: AtomicU64,
}

impl Speculator {
    /// A speculator for node `me`, calling its members over `network` (its own pooled
    /// connections) and reading the membership from `metrics`. Starts the sender thread,
    /// which ends when the speculator is dropped.
    pub fn new(
        me: NodeId,
        network: Network,
        metrics: watch::Receiver<RaftMetrics>,
    ) -> std::io::Result<Self> {
        let (queue, requests) = mpsc::channel(QUEUE_MAX);
        let stats = Arc::<SpeculationStats>::default();
        let sender = Sender {
            me,
            network,
            metrics,
            busy: BTreeMap::new(),
            stats: stats.clone(),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::Builder::new()
            .name(format!("speculate-{me}"))
            .spawn(move || runtime.block_on(sender.run(requests)))?;
        Ok(Speculator { me, queue, stats })
    }

    pub fn stats(&self) -> Arc<SpeculationStats> {
        self.stats.clone()
    }
}

impl AppendObserver for Speculator {
    fn sends_early(
        &self,
        before: &AppendContext,
        entries: &[openraft::Entry<TypeConfig>],
    ) -> Option<u64> {
        let term = speculates(self.me, before, entries);
        if term.is_none() {
            self.stats.skipped.fetch_add(1, Ordering::Relaxed);
        }
        term
    }

    fn appending(&self, before: &AppendContext, entries: &[openraft::Entry<TypeConfig>]) {
        let queued = speculative_request(self.me, before, entries)
            .is_some_and(|rpc| self.queue.try_send(rpc).is_ok());
        let counter = match queued {
            true => &self.stats.queued,
            false => &self.stats.skipped,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The term node `me` leads and would send `entries` early in, or `None` when this
/// append is not one to speculate on (module doc).
fn speculates(
    me: NodeId,
    before: &AppendContext,
    entries: &[openraft::Entry<TypeConfig>],
) -> Option<u64> {
    let vote = before.vote?;
    let leads = vote.is_committed() && vote.leader_id().voted_for() == Some(me);
    let idle = before.committed.is_some() && before.committed == before.prev;
    (leads && idle && entries.iter().any(awaited)).then_some(vote.leader_id().term)
}

/// The request node `me` sends before writing `entries`, or `None` when this append is
/// not one to speculate on (module doc).
fn speculative_request(
    me: NodeId,
    before: &AppendContext,
    entries: &[openraft::Entry<TypeConfig>],
) -> Option<AppendEntriesRequest<TypeConfig>> {
    speculates(me, before, entries)?;
    let vote = before.vote?;
    Some(AppendEntriesRequest {
        vote,
        prev_log_id: before.prev,
        entries: entries.to_vec(),
        leader_commit: before.committed,
    })
}

/// Whether a client waits on this entry: a command other than the leader's own tick (a
/// tick's latency matters to no one, and with leases live one is written every tick
/// interval: speculating on it would only cost the followers CPU).
fn awaited(entry: &openraft::Entry<TypeConfig>) -> bool {
    match &entry.payload {
        EntryPayload::Normal(e) => !matches!(e.command, Command::Tick(Tick)),
        EntryPayload::Blank | EntryPayload::Membership(_) => false,
    }
}

/// The sender thread's state.
struct Sender {
    me: NodeId,
    network: Network,
    metrics: watch::Receiver<RaftMetrics>,
    /// Per member: a speculative request is in flight.
    busy: BTreeMap<NodeId, Arc<AtomicBool>>,
    stats: Arc<SpeculationStats>,
}

impl Sender {
    async fn run(mut self, mut requests: mpsc::Receiver<AppendEntriesRequest<TypeConfig>>) {
        while let Some(rpc) = requests.recv().await {
            for (target, node) in self.members() {
                let flag = self.busy.entry(target).or_default().clone();
                if flag.swap(true, Ordering::AcqRel) {
                    continue;
                }
                let client = self.network.client(target, &node);
                let (rpc, stats) = (rpc.clone(), self.stats.clone());
                stats.sent.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(async move {
                    let answer = client.append_speculatively(&rpc, SPECULATION_TIMEOUT).await;
                    let counter = match answer {
                        Ok(AppendEntriesResponse::Success) => &stats.accepted,
                        _ => &stats.refused,
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    flag.store(false, Ordering::Release);
                });
            }
        }
    }

    /// Every other member, voters and learners.
    fn members(&self) -> Vec<(NodeId, openraft::BasicNode)> {
        let m = self.metrics.borrow();
        m.membership_config
            .membership()
            .nodes()
            .filter(|(id, _)| **id != self.me)
            .map(|(id, node)| (*id, node.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{LogId, Vote};
    use openraft::CommittedLeaderId;

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn entry_of(term: u64, index: u64, command: Command) -> openraft::Entry<TypeConfig> {
        let entry = leasehold_statemachine::Entry {
            stamp_ms: 1,
            term,
            idempotency_key: None,
            command,
        };
        openraft::Entry {
            log_id: log_id(term, index),
            payload: EntryPayload::Normal(entry),
        }
    }

    fn entry(term: u64, index: u64) -> openraft::Entry<TypeConfig> {
        let claim = Command::Claim(Claim {
            job_id: "j".into(),
            owner: "w".into(),
            ttl_ms: 1_000,
        });
        entry_of(term, index, claim)
    }

    fn context(vote: Vote, committed: u64, prev: u64) -> AppendContext {
        AppendContext {
            vote: Some(vote),
            committed: Some(log_id(2, committed)),
            prev: Some(log_id(2, prev)),
        }
    }

    #[test]
    fn a_leaders_lone_write_is_speculated_with_its_vote_prev_and_commit() {
        let vote = Vote::new_committed(2, 1);
        let rpc = speculative_request(1, &context(vote, 7, 7), &[entry(2, 8)])
            .expect("a lone write of the leader");
        assert_eq!(rpc.vote, vote);
        assert_eq!(rpc.prev_log_id, Some(log_id(2, 7)));
        assert_eq!(rpc.leader_commit, Some(log_id(2, 7)));
        assert_eq!(rpc.entries.len(), 1);
    }

    #[test]
    fn nothing_is_speculated_off_the_leader_behind_a_write_in_flight_or_unawaited() {
        let e = [entry(2, 8)];
        let cases = [
            (
                "a follower's append",
                context(Vote::new_committed(2, 3), 7, 7),
            ),
            ("a vote not yet committed", context(Vote::new(2, 1), 7, 7)),
            (
                "replication in flight",
                context(Vote::new_committed(2, 1), 6, 7),
            ),
        ];
        for (what, ctx) in cases {
            assert!(speculative_request(1, &ctx, &e).is_none(), "{what}");
        }
        let ctx = context(Vote::new_committed(2, 1), 7, 7);
        assert!(speculative_request(1, &ctx, &[]).is_none(), "no entries");
        let tick = [entry_of(2, 8, Command::Tick(Tick))];
        assert!(speculative_request(1, &ctx, &tick).is_none(), "a tick");
        let blank = [openraft::Entry {
            log_id: log_id(2, 8),
            payload: EntryPayload::Blank,
        }];
        assert!(speculative_request(1, &ctx, &blank).is_none(), "a blank");
    }
}
