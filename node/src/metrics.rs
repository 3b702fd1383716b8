//! Counters behind `GET /metrics`, rendered in the Prometheus text format by hand (a few
//! families do not justify a metrics framework).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use leasehold_statemachine::Stats;

use crate::types::RaftMetrics;

#[derive(Debug, Default)]
pub struct Metrics {
    /// (route, status) → count.
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    /// (command kind, outcome code) → count, as answered by this node's proposals.
    commands: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    pub forwarded: AtomicU64,
    pub ticks: AtomicU64,
}

impl Metrics {
    pub fn request(&self, route: &'static str, status: u16) {
        *self
            .requests
            .lock()
            .expect("metrics lock")
            .entry((route, status))
            .or_default() += 1;
    }

    pub fn command(&self, kind: &'static str, outcome: &'static str) {
        *self
            .commands
            .lock()
            .expect("metrics lock")
            .entry((kind, outcome))
            .or_default() += 1;
    }

    pub fn render(&self, raft: &RaftMetrics, stats: &Stats, cluster_time_ms: u64) -> String {
        let mut out = String::new();
        family(
            &mut out,
            "leasehold_requests_total",
            "counter",
            "HTTP requests by route and status.",
        );
        for ((route, status), n) in self.requests.lock().expect("metrics lock").iter() {
            let _ = writeln!(
                out,
                "leasehold_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        family(
            &mut out,
            "leasehold_commands_total",
            "counter",
            "Commands proposed here, by kind and outcome.",
        );
        for ((kind, outcome), n) in self.commands.lock().expect("metrics lock").iter() {
            let _ = writeln!(
                out,
                "leasehold_commands_total{{kind=\"{kind}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        let simple: [(&str, &str, &str, u64); 10] = [
            (
                "leasehold_forwarded_total",
                "counter",
                "Requests forwarded to the leader.",
                self.forwarded.load(Ordering::Relaxed),
            ),
            (
                "leasehold_ticks_total",
                "counter",
                "Tick entries proposed by this node as leader.",
                self.ticks.load(Ordering::Relaxed),
            ),
            (
                "leasehold_raft_term",
                "gauge",
                "Current Raft term.",
                raft.current_term,
            ),
            (
                "leasehold_raft_is_leader",
                "gauge",
                "1 when this node is the leader.",
                u64::from(raft.current_leader == Some(raft.id)),
            ),
            (
                "leasehold_raft_last_log_index",
                "gauge",
                "Last log index.",
                raft.last_log_index.unwrap_or(0),
            ),
            (
                "leasehold_raft_applied_index",
                "gauge",
                "Last applied log index.",
                raft.last_applied.map_or(0, |l| l.index),
            ),
            (
                "leasehold_cluster_time_ms",
                "gauge",
                "Cluster time as this node estimates it.",
                cluster_time_ms,
            ),
            (
                "leasehold_live_leases",
                "gauge",
                "Leases live at the last applied stamp.",
                stats.leased,
            ),
            (
                "leasehold_failover_grace_applied_total",
                "counter",
                "Term changes that extended live leases.",
                stats.grace_applied,
            ),
            (
                "leasehold_idempotency_keys",
                "gauge",
                "Idempotency keys remembered.",
                stats.idempotency_keys,
            ),
        ];
        for (name, kind, help, v) in simple {
            family(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {v}");
        }
        family(
            &mut out,
            "leasehold_jobs",
            "gauge",
            "Jobs by state at the last applied stamp.",
        );
        for (state, n) in [
            ("pending", stats.pending),
            ("leased", stats.leased),
            ("completed", stats.completed),
            ("failed", stats.failed),
        ] {
            let _ = writeln!(out, "leasehold_jobs{{state=\"{state}\"}} {n}");
        }
        out
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}
