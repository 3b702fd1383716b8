//! Every family `GET /metrics` reports, once: its exported name, type and help. This list
//! is the one source of truth: [`register`] takes a family's help and type from it (so no
//! family is exported without an entry), the tests check that a scrape exports exactly
//! these, and `node/tests/docs_api.rs` that docs/operations.md ("Metrics and alerts")
//! documents each with its type.
//!
//! Imports: `prometheus_client`'s registry and metric types; nothing of the crate.

use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Metric, Registry};

/// One family as a scrape shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FamilySpec {
    /// The exported name: with `_total` for a counter, without `_bucket`/`_sum`/`_count`
    /// for a histogram.
    pub name: &'static str,
    pub kind: MetricType,
    /// Without the final period: prometheus-client appends one.
    pub help: &'static str,
}

const fn family(name: &'static str, kind: MetricType, help: &'static str) -> FamilySpec {
    FamilySpec { name, kind, help }
}

use MetricType::{Counter, Gauge, Histogram};

/// In the order a scrape shows them: this node's own counters, then the state read at
/// scrape time (Raft, jobs, snapshots).
pub const FAMILIES: [FamilySpec; 35] = [
    family("leasehold_requests_total", Counter, "HTTP requests by route and status"),
    family(
        "leasehold_request_duration_seconds",
        Histogram,
        "Time from receiving a request to its response head, by route and method",
    ),
    family(
        "leasehold_commands_total",
        Counter,
        "Client commands this node proposed as leader, by kind and outcome (ok, empty, or an api.md error code)",
    ),
    family(
        "leasehold_listener_refused_total",
        Counter,
        "Requests the listener answered itself before routing (503 at an in-flight limit, 504 past the request timeout), connections it closed at the connection limit, peer RPCs refused (peer_auth_*, peer_cluster, raft_body_timeout), and the browser guard's refusals (content_type 415, cross_origin 403, host 403/400), by reason",
    ),
    family(
        "leasehold_forwarded_total",
        Counter,
        "Requests this node forwarded to the leader (attempts, each retry counted)",
    ),
    family("leasehold_ticks_total", Counter, "Tick entries proposed by this node as leader"),
    family(
        "leasehold_raft_leader_changes_total",
        Counter,
        "Leaders this node saw take office (a new leader, or the same one in a new term) since it started",
    ),
    family(
        "leasehold_raft_prevotes_granted_total",
        Counter,
        "Pre-votes this node granted to a candidate (POST /raft/prevote)",
    ),
    family(
        "leasehold_raft_prevotes_refused_total",
        Counter,
        "Pre-votes this node refused: it leads, heard from a leader within the lease, or holds a longer log",
    ),
    family(
        "leasehold_raft_elections_started_total",
        Counter,
        "Elections this node started after a majority granted its pre-vote",
    ),
    family("leasehold_raft_term", Gauge, "Current Raft term"),
    family(
        "leasehold_raft_is_leader",
        Gauge,
        "1 when this node is the leader (0 while check quorum has deposed it)",
    ),
    family("leasehold_raft_last_log_index", Gauge, "Last log index"),
    family(
        "leasehold_raft_commit_index",
        Gauge,
        "Last log index this node knows to be committed",
    ),
    family("leasehold_raft_applied_index", Gauge, "Last applied log index"),
    family(
        "leasehold_raft_voters",
        Gauge,
        "Voters in the membership this node knows",
    ),
    family(
        "leasehold_raft_learners",
        Gauge,
        "Learners in the membership this node knows",
    ),
    family(
        "leasehold_cluster_time_ms",
        Gauge,
        "Cluster time as this node estimates it",
    ),
    family(
        "leasehold_event_seq",
        Gauge,
        "Seq of the newest event this node applied (GET /v1/events)",
    ),
    family(
        "leasehold_event_watchers",
        Gauge,
        "Event-feed watchers (streams and waiting long polls) open on this node",
    ),
    family(
        "leasehold_raft_quorum_lost_total",
        Counter,
        "Times check quorum deposed this node: it led but no quorum acknowledged it within its lease",
    ),
    family(
        "leasehold_live_leases",
        Gauge,
        "Leases live at the last applied stamp",
    ),
    family(
        "leasehold_failover_grace_applied_total",
        Counter,
        "Term changes that extended live leases",
    ),
    family(
        "leasehold_failover_grace_last_ms",
        Gauge,
        "Extension the last failover grace gave live leases, ms (0 until one is applied after this node started)",
    ),
    family("leasehold_idempotency_keys", Gauge, "Idempotency keys remembered"),
    family(
        "leasehold_idempotency_bytes",
        Gauge,
        "Accounted bytes of the remembered idempotent replies (bounded by IDEMPOTENCY_BYTES_MAX)",
    ),
    family(
        "leasehold_idempotency_scope_bytes_max",
        Gauge,
        "Accounted bytes of the largest idempotency scope (one caller's keys, or the unscoped ones)",
    ),
    family("leasehold_queues", Gauge, "Queues holding at least one job"),
    family(
        "leasehold_jobs",
        Gauge,
        "Jobs by state at the last applied stamp",
    ),
    family(
        "leasehold_jobs_by_queue",
        Gauge,
        "Jobs by queue and state at the last applied stamp: the 100 queues with the most open jobs, the rest summed as queue=\"(other)\"",
    ),
    family(
        "leasehold_snapshot_builds_total",
        Counter,
        "Snapshots this node built since it started",
    ),
    family(
        "leasehold_snapshot_last_size_bytes",
        Gauge,
        "Size of the last snapshot file this node built",
    ),
    family(
        "leasehold_snapshot_last_build_seconds",
        Gauge,
        "Whole build of the last snapshot: capture, encode, write, fsync",
    ),
    family(
        "leasehold_snapshot_last_capture_seconds",
        Gauge,
        "Of the last build, how long applies were held off while its records were captured",
    ),
    family(
        "leasehold_snapshot_last_index",
        Gauge,
        "Log index the last snapshot this node built covers",
    ),
];

/// The entry of `name`. A name missing from [`FAMILIES`] is a bug of this module.
pub fn spec(name: &str) -> &'static FamilySpec {
    FAMILIES
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("{name} is not in FAMILIES"))
}

/// Registers `metric` as the family `name`, with the help and type [`FAMILIES`] gives it.
/// prometheus-client appends `_total` to a counter's name, so a counter is registered
/// without it and exported under `name` exactly.
pub fn register(registry: &mut Registry, name: &str, metric: impl Metric) {
    let spec = spec(name);
    assert_eq!(metric.metric_type(), spec.kind, "{name}'s type");
    let registered = match spec.kind {
        Counter => name
            .strip_suffix("_total")
            .expect("a counter ends in _total"),
        _ => name,
    };
    registry.register(registered, spec.help, metric);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn every_family_is_listed_once_with_a_help_the_crate_completes() {
        let names: BTreeSet<&str> = FAMILIES.iter().map(|f| f.name).collect();
        assert_eq!(names.len(), FAMILIES.len(), "a family listed twice");
        for f in FAMILIES {
            assert!(f.name.starts_with("leasehold_"), "{}", f.name);
            assert_eq!(f.kind == Counter, f.name.ends_with("_total"), "{}", f.name);
            assert!(!f.help.ends_with('.') && !f.help.is_empty(), "{}", f.name);
        }
    }
}
