//! The state a scrape reads besides this node's own counters ([`Scrape`]: Raft's view,
//! the state machine's counts, the last snapshot build), and the registry of constant
//! gauges and counters it becomes for one exposition ([`registry`]). A fresh registry per
//! scrape holds no state between scrapes, so a queue that empties disappears and two
//! scrapes at once cannot mix their values.
//!
//! Imports: `types` (Raft's metrics), the state machine's stats, `prometheus_client`.

use std::sync::atomic::AtomicU64;

use leasehold_statemachine::{QueueStats, Stats};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use super::families::register;
use crate::types::RaftMetrics;

/// At most this many queues get their own `leasehold_jobs_by_queue` series; the rest
/// are summed under [`OTHER_QUEUES_LABEL`].
pub const QUEUES_EXPORTED_MAX: usize = 100;
/// The queue label of the queues past [`QUEUES_EXPORTED_MAX`]: parentheses are not
/// allowed in queue names, so no real queue can collide with it.
pub const OTHER_QUEUES_LABEL: &str = "(other)";

/// What a scrape reads besides this node's own counters.
#[derive(Debug, Clone)]
pub struct Scrape {
    pub raft: RaftMetrics,
    pub commit_index: u64,
    pub cluster_time_ms: u64,
    pub stats: Stats,
    pub queues: QueueTop,
    /// The last failover grace's extension, ms (`LeaseMachine::last_grace_ms`).
    pub last_grace_ms: u64,
    pub snapshots: SnapshotStats,
    /// The leader as this node tells clients (`Node::known_leader`): none while check
    /// quorum has deposed it, although openraft still calls it leader.
    pub known_leader: Option<u64>,
    /// Times check quorum deposed this node (`Elector::deposals`).
    pub quorum_lost: u64,
    /// The seq of the newest event applied here.
    pub event_seq: u64,
    /// Event-feed watchers open on this node (`node::watchers`).
    pub event_watchers: u64,
}

/// Snapshot builds of this node since it started: the state-machine store records them,
/// a scrape reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    pub builds: u64,
    /// Size of the last snapshot file built, bytes.
    pub last_bytes: u64,
    /// Whole build (capture, encode, write, fsync) of the last one, ms.
    pub last_build_ms: u64,
    /// Of which applies were held off (capturing the records), ms.
    pub last_capture_ms: u64,
    /// Log index the last snapshot covers.
    pub last_index: u64,
}

/// The queues exported one by one, and the rest summed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueTop {
    /// By queue name.
    pub top: Vec<(String, QueueStats)>,
    /// The queues past the top, summed; `None` when every queue is in `top`.
    pub rest: Option<QueueStats>,
    /// Queues holding at least one job.
    pub queues: u64,
}

/// The `max` largest queues: most open (pending + leased) jobs first, then most jobs,
/// then by name, so the choice is stable between scrapes of the same state. O(queues):
/// it runs under the state machine's read lock.
pub fn top_queues<'a>(
    all: impl Iterator<Item = (&'a str, &'a QueueStats)>,
    max: usize,
) -> QueueTop {
    let mut all: Vec<(&str, &QueueStats)> = all.collect();
    let queues = all.len() as u64;
    let key = |(name, s): &(&'a str, &QueueStats)| {
        (
            std::cmp::Reverse(s.open()),
            std::cmp::Reverse(s.total()),
            *name,
        )
    };
    let mut rest = None;
    if all.len() > max {
        if max > 0 {
            all.select_nth_unstable_by_key(max - 1, key);
        }
        let mut sum = QueueStats::default();
        for (_, s) in all.drain(max..) {
            sum.add(s);
        }
        rest = Some(sum);
    }
    all.sort_unstable_by_key(|(name, _)| *name);
    QueueTop {
        top: all.into_iter().map(|(q, s)| (q.to_owned(), *s)).collect(),
        rest,
        queues,
    }
}

/// A gauge family of unsigned values (set once per scrape).
type U64Gauges<S> = Family<S, Gauge<u64, AtomicU64>>;

/// `leasehold_jobs`' label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabels {
    state: &'static str,
}

/// `leasehold_jobs_by_queue`'s labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct QueueLabels {
    queue: String,
    state: &'static str,
}

/// The families of `s`, as constants: Raft, jobs, snapshots.
pub fn registry(s: &Scrape) -> Registry {
    let mut r = Registry::default();
    raft(&mut r, s);
    jobs(&mut r, s);
    jobs_by_queue(&mut r, s);
    snapshots(&mut r, &s.snapshots);
    r
}

fn gauge(r: &mut Registry, name: &str, v: u64) {
    register(r, name, ConstGauge::new(v));
}

fn counter(r: &mut Registry, name: &str, v: u64) {
    register(r, name, ConstCounter::new(v));
}

fn raft(r: &mut Registry, s: &Scrape) {
    let raft = &s.raft;
    let membership = raft.membership_config.membership();
    gauge(r, "leasehold_raft_term", raft.current_term);
    let is_leader = u64::from(s.known_leader == Some(raft.id));
    gauge(r, "leasehold_raft_is_leader", is_leader);
    let last_log = raft.last_log_index.unwrap_or(0);
    gauge(r, "leasehold_raft_last_log_index", last_log);
    gauge(r, "leasehold_raft_commit_index", s.commit_index);
    let applied = raft.last_applied.map_or(0, |l| l.index);
    gauge(r, "leasehold_raft_applied_index", applied);
    let voters = membership.voter_ids().count() as u64;
    gauge(r, "leasehold_raft_voters", voters);
    let learners = membership.learner_ids().count() as u64;
    gauge(r, "leasehold_raft_learners", learners);
    gauge(r, "leasehold_cluster_time_ms", s.cluster_time_ms);
    gauge(r, "leasehold_event_seq", s.event_seq);
    gauge(r, "leasehold_event_watchers", s.event_watchers);
    counter(r, "leasehold_raft_quorum_lost_total", s.quorum_lost);
}

/// The states of a job, in the order the families show them.
fn by_state(q: &QueueStats) -> [(&'static str, u64); 5] {
    [
        ("pending", q.pending),
        ("leased", q.leased),
        ("completed", q.completed),
        ("failed", q.failed),
        ("cancelled", q.cancelled),
    ]
}

fn jobs(r: &mut Registry, s: &Scrape) {
    let stats = &s.stats;
    gauge(r, "leasehold_live_leases", stats.leased);
    counter(
        r,
        "leasehold_failover_grace_applied_total",
        stats.grace_applied,
    );
    gauge(r, "leasehold_failover_grace_last_ms", s.last_grace_ms);
    gauge(r, "leasehold_idempotency_keys", stats.idempotency_keys);
    gauge(r, "leasehold_idempotency_bytes", stats.idempotency_bytes);
    let scope_max = stats.idempotency_scope_bytes_max;
    gauge(r, "leasehold_idempotency_scope_bytes_max", scope_max);
    gauge(r, "leasehold_queues", s.queues.queues);
    let jobs = U64Gauges::<StateLabels>::default();
    let totals = QueueStats {
        pending: stats.pending,
        leased: stats.leased,
        completed: stats.completed,
        failed: stats.failed,
        cancelled: stats.cancelled,
    };
    for (state, n) in by_state(&totals) {
        jobs.get_or_create(&StateLabels { state }).set(n);
    }
    register(r, "leasehold_jobs", jobs);
}

fn jobs_by_queue(r: &mut Registry, s: &Scrape) {
    let family = U64Gauges::<QueueLabels>::default();
    let rest = s.queues.rest.map(|q| (OTHER_QUEUES_LABEL, q));
    let queues = s.queues.top.iter().map(|(q, st)| (q.as_str(), *st));
    for (queue, st) in queues.chain(rest) {
        for (state, n) in by_state(&st) {
            let labels = QueueLabels {
                queue: queue.to_owned(),
                state,
            };
            family.get_or_create(&labels).set(n);
        }
    }
    register(r, "leasehold_jobs_by_queue", family);
}

fn snapshots(r: &mut Registry, s: &SnapshotStats) {
    counter(r, "leasehold_snapshot_builds_total", s.builds);
    gauge(r, "leasehold_snapshot_last_size_bytes", s.last_bytes);
    let seconds = |ms: u64| ConstGauge::new(ms as f64 / 1e3);
    let build = seconds(s.last_build_ms);
    register(r, "leasehold_snapshot_last_build_seconds", build);
    let capture = seconds(s.last_capture_ms);
    register(r, "leasehold_snapshot_last_capture_seconds", capture);
    gauge(r, "leasehold_snapshot_last_index", s.last_index);
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    #[test]
    fn only_the_largest_queues_get_their_own_series() {
        let stats = |open: u64, completed: u64| QueueStats {
            pending: open,
            completed,
            ..Default::default()
        };
        let mut all: BTreeMap<String, QueueStats> = (0..250u64)
            .map(|i| (format!("q{i:03}"), stats(i % 7, i)))
            .collect();
        all.insert("big".into(), stats(1000, 0));
        let top = top_queues(
            all.iter().map(|(q, s)| (q.as_str(), s)),
            QUEUES_EXPORTED_MAX,
        );
        assert_eq!(top.queues, 251);
        assert_eq!(top.top.len(), QUEUES_EXPORTED_MAX);
        assert!(top.top.windows(2).all(|w| w[0].0 < w[1].0), "by name");
        assert!(top.top.iter().any(|(q, _)| q == "big"));
        // Nothing left out has more open jobs than anything kept.
        let kept: BTreeSet<&str> = top.top.iter().map(|(q, _)| q.as_str()).collect();
        let min_kept = top.top.iter().map(|(_, s)| s.open()).min().unwrap();
        for (q, s) in &all {
            if !kept.contains(q.as_str()) {
                assert!(s.open() <= min_kept, "{q} left out");
            }
        }
        // Nothing is lost: the kept ones and the rest add up to every job.
        let mut sum = top.rest.expect("a rest");
        for (_, s) in &top.top {
            sum.add(s);
        }
        let mut want = QueueStats::default();
        all.values().for_each(|s| want.add(s));
        assert_eq!(sum, want);

        let few = top_queues(
            all.iter().take(3).map(|(q, s)| (q.as_str(), s)),
            QUEUES_EXPORTED_MAX,
        );
        assert_eq!((few.top.len(), few.rest), (3, None));
    }
}
