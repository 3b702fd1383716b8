//! What `GET /metrics` reports, through `prometheus-client` (the Prometheus project's
//! Rust client): a [`Registry`] of `Family<Labels, Counter/Histogram>` that this node
//! bumps itself ([`Metrics`]), plus, per scrape, a registry of the state read at scrape
//! time ([`Scrape`]), both encoded in the Prometheus text format 0.0.4
//! ([`CONTENT_TYPE`]), which keeps today's `le` spelling (`le="1"`, as Go clients write
//! it) and family names in `# TYPE`.
//!
//! - [`families`]: every family's name, type and help, once (docs/operations.md
//!   documents each; `node/tests/docs_api.rs` checks).
//! - [`labels`]: the label vocabulary (routes, methods, statuses, refusal reasons).
//! - [`scrape`]: the scrape-time state and the registry it becomes.
//!
//! The per-request path does no allocation and no map lookup once a series exists: a
//! handle per (route, status) and (route, method), created on first use so that only
//! pairs seen are exported (as before), because every request of a node at ~10k req/s
//! goes through it. Refusal reasons and the usual command outcomes are created up front
//! and so exported as 0 from the start.
//!
//! Imports: `types`, the state machine's stats and command descriptors, and
//! `prometheus_client`; the state it renders is handed in by its callers.

pub mod families;
pub mod labels;
pub mod scrape;

use std::sync::OnceLock;
use std::time::Duration;

use axum::http::Method;
use leasehold_statemachine::DESCRIPTORS;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub use families::{FamilySpec, FAMILIES};
pub use labels::{Refused, RouteLabel, LATENCY_BUCKETS_US};
pub use scrape::{
    top_queues, QueueTop, Scrape, SnapshotStats, OTHER_QUEUES_LABEL, QUEUES_EXPORTED_MAX,
};

use crate::types::NodeId;
use families::register;
use labels::{
    method_index, CommandLabels, LatencyLabels, RefusedLabels, RequestLabels, METHODS, STATUSES,
};

/// The `Content-Type` of `GET /metrics`: the crate's for the text format 0.0.4
/// (`text/plain; version=0.0.4; charset=utf-8`).
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

const ROUTES: usize = RouteLabel::ALL.len();

type LatencyFamily = Family<LatencyLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS_US.iter().map(|&us| us as f64 / 1e6))
}

#[derive(Debug)]
pub struct Metrics {
    /// This node's own families, registered once; [`Metrics::render`] adds the scrape's.
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: LatencyFamily,
    /// (command kind, outcome code), as answered by this node's proposals.
    commands: Family<CommandLabels, Counter>,
    /// The hot path's handles into `requests` and `latency`, by route and then by
    /// [`STATUSES`] / [`METHODS`] index; set on a pair's first request.
    status_cells: [[OnceLock<Counter>; STATUSES.len()]; ROUTES],
    latency_cells: [[OnceLock<Histogram>; METHODS.len()]; ROUTES],
    /// What the listener (`http/listener/`) or the browser guard (`http/browser.rs`)
    /// refused before a handler saw it, by reason ([`Refused::ALL`] order).
    refused: [Counter; Refused::ALL.len()],
    pub forwarded: Counter,
    pub ticks: Counter,
    /// Leaders this node has seen take office (see `server::watch_leader`).
    pub leader_changes: Counter,
    /// Pre-votes this node answered (`election.rs`), granted and refused.
    pub prevotes_granted: Counter,
    pub prevotes_refused: Counter,
    /// Elections this node started after a granted pre-vote.
    pub elections_started: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let refused_family = Family::<RefusedLabels, Counter>::default();
        let refused = Refused::ALL
            .map(|reason| refused_family.get_or_create_owned(&RefusedLabels { reason }));
        let commands = Family::<CommandLabels, Counter>::default();
        // Each command's usual outcomes, from 0 before the first, so that `rate()` and
        // alerts on them work from the start (the command descriptors list them).
        for d in DESCRIPTORS {
            for &outcome in d.outcomes {
                let kind = d.name;
                let _ = commands.get_or_create(&CommandLabels { kind, outcome });
            }
        }
        let m = Metrics {
            registry: Registry::default(),
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            commands,
            status_cells: std::array::from_fn(|_| std::array::from_fn(|_| OnceLock::new())),
            latency_cells: std::array::from_fn(|_| std::array::from_fn(|_| OnceLock::new())),
            refused,
            forwarded: Counter::default(),
            ticks: Counter::default(),
            leader_changes: Counter::default(),
            prevotes_granted: Counter::default(),
            prevotes_refused: Counter::default(),
            elections_started: Counter::default(),
        };
        m.registered(refused_family)
    }
}

impl Metrics {
    /// `self` with its families in its registry (each metric is a shared handle: the
    /// registry's clone and the field count the same).
    fn registered(mut self, refused: Family<RefusedLabels, Counter>) -> Self {
        let r = &mut self.registry;
        register(r, "leasehold_requests_total", self.requests.clone());
        register(
            r,
            "leasehold_request_duration_seconds",
            self.latency.clone(),
        );
        register(r, "leasehold_commands_total", self.commands.clone());
        register(r, "leasehold_listener_refused_total", refused);
        for (name, counter) in [
            ("leasehold_forwarded_total", &self.forwarded),
            ("leasehold_ticks_total", &self.ticks),
            ("leasehold_raft_leader_changes_total", &self.leader_changes),
            (
                "leasehold_raft_prevotes_granted_total",
                &self.prevotes_granted,
            ),
            (
                "leasehold_raft_prevotes_refused_total",
                &self.prevotes_refused,
            ),
            (
                "leasehold_raft_elections_started_total",
                &self.elections_started,
            ),
        ] {
            register(r, name, counter.clone());
        }
        self
    }

    /// Counts one answered request and its latency (taken in `stamp_headers`, `http/router.rs`).
    pub fn request(&self, route: RouteLabel, method: &Method, status: u16, elapsed: Duration) {
        let cells = route as usize;
        let labels = || RequestLabels { route, status };
        match STATUSES.iter().position(|&s| s == status) {
            Some(i) => self.status_cells[cells][i]
                .get_or_init(|| self.requests.get_or_create_owned(&labels()))
                .inc(),
            None => self.requests.get_or_create(&labels()).inc(),
        };
        let m = method_index(method);
        self.latency_cells[cells][m]
            .get_or_init(|| {
                let method = METHODS[m];
                self.latency
                    .get_or_create_owned(&LatencyLabels { route, method })
            })
            .observe(elapsed.as_secs_f64());
    }

    pub fn command(&self, kind: &'static str, outcome: &'static str) {
        self.commands
            .get_or_create(&CommandLabels { kind, outcome })
            .inc();
    }

    /// Counts a request (or connection) the listener refused.
    pub fn refused(&self, why: Refused) {
        self.refused[why as usize].inc();
    }

    /// The exposition: this node's families, then the scrape's ([`CONTENT_TYPE`]).
    pub fn render(&self, s: &Scrape) -> String {
        let mut out = String::with_capacity(16 * 1024);
        prometheus_text::encode(&mut out, &self.registry).expect("writing to a String");
        prometheus_text::encode(&mut out, &scrape::registry(s)).expect("writing to a String");
        out
    }
}

/// Whether `seen` (term, leader) is a leader taking office after `last`, the last leader
/// this node saw: a new leader id, or the same one elected again in a later term. A
/// spell without a known leader (an election) is not a change by itself.
pub fn leader_took_office(last: Option<(u64, NodeId)>, seen: Option<(u64, NodeId)>) -> bool {
    seen.is_some() && seen != last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_changes_count_new_leaders_and_new_terms() {
        assert!(leader_took_office(None, Some((1, 1))));
        assert!(!leader_took_office(Some((1, 1)), Some((1, 1))));
        assert!(!leader_took_office(Some((1, 1)), None), "an election alone");
        assert!(leader_took_office(Some((1, 1)), Some((2, 1))), "re-elected");
        assert!(leader_took_office(Some((1, 1)), Some((2, 3))));
    }
}
