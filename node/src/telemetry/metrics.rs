//! What `GET /metrics` reports, rendered in the Prometheus text format (0.0.4) by hand:
//! a few dozen families do not justify a metrics framework.
//!
//! Two kinds of numbers live here:
//! - counters this node bumps itself ([`Metrics`]): requests and their latency, commands
//!   it proposed, forwards, ticks, leader changes it saw. The per-request path is
//!   lock-free: a fixed cell per (route, method) and per (route, status), because every
//!   request of a node at ~10k req/s goes through it.
//! - a [`Scrape`] of state read at scrape time: Raft's view, the state machine's counts,
//!   the last snapshot build.
//!
//! Every label set is bounded: routes come from `http::route_label`, methods and statuses
//! from short fixed lists, queues are cut to the [`QUEUES_EXPORTED_MAX`] largest.
//! docs/operations.md ("Metrics and alerts") documents every family.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use axum::http::Method;
use leasehold_statemachine::{QueueStats, Stats};

use crate::types::{NodeId, RaftMetrics};

/// The route label of a request: a fixed set keeps the request families bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RouteLabel {
    Jobs,
    Job,
    QueueClaim,
    Cluster,
    Digest,
    Members,
    Rejections,
    Nodes,
    Node,
    Snapshot,
    Ui,
    Healthz,
    Readyz,
    Metrics,
    Raft,
    Other,
}

impl RouteLabel {
    pub const ALL: [RouteLabel; 16] = [
        RouteLabel::Jobs,
        RouteLabel::Job,
        RouteLabel::QueueClaim,
        RouteLabel::Cluster,
        RouteLabel::Digest,
        RouteLabel::Members,
        RouteLabel::Rejections,
        RouteLabel::Nodes,
        RouteLabel::Node,
        RouteLabel::Snapshot,
        RouteLabel::Ui,
        RouteLabel::Healthz,
        RouteLabel::Readyz,
        RouteLabel::Metrics,
        RouteLabel::Raft,
        RouteLabel::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            RouteLabel::Jobs => "/v1/jobs",
            RouteLabel::Job => "/v1/jobs/{id}",
            RouteLabel::QueueClaim => "/v1/queues/{queue}/claim",
            RouteLabel::Cluster => "/v1/cluster",
            RouteLabel::Digest => "/v1/cluster/digest",
            RouteLabel::Members => "/v1/cluster/members",
            RouteLabel::Rejections => "/v1/cluster/rejections",
            RouteLabel::Nodes => "/v1/cluster/nodes",
            RouteLabel::Node => "/v1/cluster/nodes/{id}",
            RouteLabel::Snapshot => "/v1/cluster/snapshot",
            RouteLabel::Ui => "/ui",
            RouteLabel::Healthz => "/healthz",
            RouteLabel::Readyz => "/readyz",
            RouteLabel::Metrics => "/metrics",
            RouteLabel::Raft => "/raft",
            RouteLabel::Other => "other",
        }
    }
}

/// Method labels of the latency histogram; anything else (HEAD, OPTIONS…) is `other`.
const METHODS: [&str; 4] = ["GET", "POST", "DELETE", "other"];

fn method_index(m: &Method) -> usize {
    match *m {
        Method::GET => 0,
        Method::POST => 1,
        Method::DELETE => 2,
        _ => 3,
    }
}

/// Statuses counted in lock-free cells; any other status goes to a locked map (rare).
const STATUSES: [u16; 15] = [
    200, 201, 204, 400, 401, 403, 404, 405, 409, 413, 422, 431, 500, 503, 504,
];

/// Upper bounds of the latency buckets, µs: 0.2 ms (a local read) to 60 s (a 30 s
/// claim-next long poll, forwarded, is still below the last one).
pub const LATENCY_BUCKETS_US: [u64; 17] = [
    200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000,
    2_000_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
];

/// At most this many queues get their own `leasehold_jobs_by_queue` series; the rest
/// are summed under [`OTHER_QUEUES_LABEL`].
pub const QUEUES_EXPORTED_MAX: usize = 100;
/// The queue label of the queues past [`QUEUES_EXPORTED_MAX`]: parentheses are not
/// allowed in queue names, so no real queue can collide with it.
pub const OTHER_QUEUES_LABEL: &str = "(other)";

/// One latency histogram: a count per bucket (not cumulative; the last is +Inf) and the
/// sum, in µs so that it stays an integer.
#[derive(Debug)]
struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_us: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    fn observe(&self, elapsed: Duration) {
        let us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        let i = LATENCY_BUCKETS_US.partition_point(|&le| le < us);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Cumulative bucket counts (the last is +Inf, the count) and the sum in seconds.
    /// The count is the +Inf bucket by construction, so the two never disagree, even
    /// while requests are observed during the scrape.
    fn read(&self) -> (Vec<u64>, f64) {
        let mut total = 0;
        let cumulative = self
            .buckets
            .iter()
            .map(|b| {
                total += b.load(Ordering::Relaxed);
                total
            })
            .collect();
        let sum_s = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        (cumulative, sum_s)
    }
}

/// The request cells of one route.
#[derive(Debug)]
struct RouteCells {
    statuses: [AtomicU64; STATUSES.len()],
    latency: [Histogram; METHODS.len()],
}

impl Default for RouteCells {
    fn default() -> Self {
        RouteCells {
            statuses: std::array::from_fn(|_| AtomicU64::new(0)),
            latency: std::array::from_fn(|_| Histogram::default()),
        }
    }
}

#[derive(Debug)]
pub struct Metrics {
    routes: [RouteCells; RouteLabel::ALL.len()],
    /// (route, status) → count, for statuses not in [`STATUSES`].
    other_statuses: Mutex<BTreeMap<(RouteLabel, u16), u64>>,
    /// (command kind, outcome code) → count, as answered by this node's proposals.
    commands: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    pub forwarded: AtomicU64,
    pub ticks: AtomicU64,
    /// Leaders this node has seen take office (see `server::watch_leader`).
    pub leader_changes: AtomicU64,
    /// Pre-votes this node answered (`election.rs`), granted and refused.
    pub prevotes_granted: AtomicU64,
    pub prevotes_refused: AtomicU64,
    /// Elections this node started after a granted pre-vote.
    pub elections_started: AtomicU64,
    /// What the listener (`http/listener/`) or the browser guard (`http/browser.rs`)
    /// refused before a handler saw it, by reason.
    refused: [AtomicU64; Refused::ALL.len()],
}

/// Why the listener answered (or dropped) a request itself, before routing: these never
/// reach `leasehold_requests_total` or the latency histogram. The last three are the
/// browser guard's (`http/browser.rs`), inside the router: those are also requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// 503: `--max-inflight` client requests were in flight.
    Inflight,
    /// 503: `--max-inflight-raft` Raft requests were in flight.
    InflightRaft,
    /// A new connection closed at once: `--max-connections` were open.
    Connections,
    /// 504: a client request ran past `--request-timeout-ms`.
    RequestTimeout,
    /// 504: a Raft request ran past its timeout.
    RaftRequestTimeout,
    /// 415: a `/v1/*` body whose `Content-Type` is not JSON (`http/browser.rs`).
    ContentType,
    /// 403: a cross-origin browser request, not `--allow-origin`ed (`http/browser.rs`).
    CrossOrigin,
    /// 403/400: a `Host` not naming this node on a loopback listener, or no `Host`
    /// (`http/browser.rs`: DNS rebinding).
    Host,
    /// Peer RPCs refused 401 by `peer_auth.rs`, one reason each (issue 17 items 1, 3):
    /// no header (this node has a peer secret).
    PeerAuthMissing,
    /// A header without `mac=`.
    PeerAuthUnsigned,
    /// A header that does not parse (or of another version).
    PeerAuthMalformed,
    /// `t=` outside the window.
    PeerAuthExpired,
    /// A wrong MAC: another secret, or an altered header.
    PeerAuthBadMac,
    /// `to=` names another node.
    PeerAuthWrongTarget,
    /// Stamped before this node started (a replay from before a restart).
    PeerAuthBeforeStart,
    /// A request this node has already accepted.
    PeerAuthReplay,
    /// No `Content-Length`, or not the header's `len=`.
    PeerAuthLength,
    /// The body is not the one the header's `sha256=` names.
    PeerAuthBodyDigest,
    /// 403: an authenticated peer of another cluster.
    PeerCluster,
    /// 504: an authenticated peer's body did not arrive within its deadline.
    RaftBodyTimeout,
    /// A new connection closed at once: its source address had
    /// `--max-connections-per-source` open.
    ConnectionsPerSource,
    /// An idle connection closed to make room past the high-water mark (listener/conns.rs).
    IdleEvicted,
    /// 503: the caller (token, or source address) held `--max-inflight-per-caller`.
    InflightPerCaller,
    /// 503: `--max-long-polls` claim-next waits were in progress.
    LongPolls,
    /// 503: the caller held `--max-long-polls-per-caller` claim-next waits.
    LongPollsPerCaller,
    /// 400: a GET, HEAD or DELETE declared a body (never read; the connection closes).
    BodyNotAllowed,
    /// 403 or 404: a scoped token named a queue or job outside its scope (`security/scope.rs`;
    /// counted by the handler, so these do reach `leasehold_requests_total`).
    Scope,
}

impl Refused {
    pub const ALL: [Refused; 27] = [
        Refused::Inflight,
        Refused::InflightRaft,
        Refused::Connections,
        Refused::RequestTimeout,
        Refused::RaftRequestTimeout,
        Refused::ContentType,
        Refused::CrossOrigin,
        Refused::Host,
        Refused::PeerAuthMissing,
        Refused::PeerAuthUnsigned,
        Refused::PeerAuthMalformed,
        Refused::PeerAuthExpired,
        Refused::PeerAuthBadMac,
        Refused::PeerAuthWrongTarget,
        Refused::PeerAuthBeforeStart,
        Refused::PeerAuthReplay,
        Refused::PeerAuthLength,
        Refused::PeerAuthBodyDigest,
        Refused::PeerCluster,
        Refused::RaftBodyTimeout,
        Refused::ConnectionsPerSource,
        Refused::IdleEvicted,
        Refused::InflightPerCaller,
        Refused::LongPolls,
        Refused::LongPollsPerCaller,
        Refused::BodyNotAllowed,
        Refused::Scope,
    ];

    /// The `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Refused::Inflight => "inflight",
            Refused::InflightRaft => "inflight_raft",
            Refused::Connections => "connections",
            Refused::RequestTimeout => "request_timeout",
            Refused::RaftRequestTimeout => "raft_request_timeout",
            Refused::ContentType => "content_type",
            Refused::CrossOrigin => "cross_origin",
            Refused::Host => "host",
            Refused::PeerAuthMissing => "peer_auth_missing",
            Refused::PeerAuthUnsigned => "peer_auth_unsigned",
            Refused::PeerAuthMalformed => "peer_auth_malformed",
            Refused::PeerAuthExpired => "peer_auth_expired",
            Refused::PeerAuthBadMac => "peer_auth_bad_mac",
            Refused::PeerAuthWrongTarget => "peer_auth_wrong_target",
            Refused::PeerAuthBeforeStart => "peer_auth_before_start",
            Refused::PeerAuthReplay => "peer_auth_replay",
            Refused::PeerAuthLength => "peer_auth_length",
            Refused::PeerAuthBodyDigest => "peer_auth_body_digest",
            Refused::PeerCluster => "peer_cluster",
            Refused::RaftBodyTimeout => "raft_body_timeout",
            Refused::ConnectionsPerSource => "connections_per_source",
            Refused::IdleEvicted => "idle_evicted",
            Refused::InflightPerCaller => "inflight_per_caller",
            Refused::LongPolls => "long_polls",
            Refused::LongPollsPerCaller => "long_polls_per_caller",
            Refused::BodyNotAllowed => "body_not_allowed",
            Refused::Scope => "scope",
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            routes: std::array::from_fn(|_| RouteCells::default()),
            other_statuses: Mutex::default(),
            commands: Mutex::default(),
            forwarded: AtomicU64::new(0),
            ticks: AtomicU64::new(0),
            leader_changes: AtomicU64::new(0),
            prevotes_granted: AtomicU64::new(0),
            prevotes_refused: AtomicU64::new(0),
            elections_started: AtomicU64::new(0),
            refused: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// Outcomes each client command kind can have, reported as 0 before the first one so
/// that `rate()` and alerts on them work from the start. Outcomes are docs/api.md's error
/// codes, plus `ok` and, for claim-next, `empty`; any other outcome still shows up once
/// it happens.
const COMMAND_OUTCOMES: [(&str, &[&str]); 7] = [
    (
        "submit",
        &["ok", "already_exists", "idempotency_key_reused"],
    ),
    (
        "claim",
        &["ok", "lease_held", "job_completed", "job_failed"],
    ),
    ("claim_next", &["ok", "empty"]),
    (
        "renew",
        &[
            "ok",
            "stale_lease",
            "lease_expired",
            "job_completed",
            "not_found",
        ],
    ),
    (
        "complete",
        &[
            "ok",
            "stale_lease",
            "lease_expired",
            "job_completed",
            "not_found",
        ],
    ),
    (
        "release",
        &["ok", "stale_lease", "lease_expired", "not_found"],
    ),
    ("delete", &["ok", "lease_held", "not_found"]),
];

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

impl Metrics {
    /// Counts one answered request and its latency (taken in `http::stamp_headers`).
    pub fn request(&self, route: RouteLabel, method: &Method, status: u16, elapsed: Duration) {
        let cells = &self.routes[route as usize];
        match STATUSES.iter().position(|&s| s == status) {
            Some(i) => {
                cells.statuses[i].fetch_add(1, Ordering::Relaxed);
            }
            None => {
                *self
                    .other_statuses
                    .lock()
                    .expect("metrics lock")
                    .entry((route, status))
                    .or_default() += 1;
            }
        }
        cells.latency[method_index(method)].observe(elapsed);
    }

    pub fn command(&self, kind: &'static str, outcome: &'static str) {
        *self
            .commands
            .lock()
            .expect("metrics lock")
            .entry((kind, outcome))
            .or_default() += 1;
    }

    pub fn render(&self, s: &Scrape) -> String {
        let mut out = String::with_capacity(16 * 1024);
        self.render_requests(&mut out);
        self.render_commands(&mut out);
        self.render_counters(&mut out);
        render_raft(&mut out, s);
        render_jobs(&mut out, s);
        render_snapshots(&mut out, &s.snapshots);
        out
    }

    fn render_requests(&self, out: &mut String) {
        family(
            out,
            "leasehold_requests_total",
            "counter",
            "HTTP requests by route and status.",
        );
        let mut counts: BTreeMap<(&str, u16), u64> = BTreeMap::new();
        for route in RouteLabel::ALL {
            let cells = &self.routes[route as usize];
            for (status, n) in STATUSES.iter().zip(&cells.statuses) {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    counts.insert((route.label(), *status), n);
                }
            }
        }
        for ((route, status), n) in self.other_statuses.lock().expect("metrics lock").iter() {
            counts.insert((route.label(), *status), *n);
        }
        for ((route, status), n) in counts {
            sample(
                out,
                "leasehold_requests_total",
                &[("route", route), ("status", &status.to_string())],
                n,
            );
        }
        let name = "leasehold_request_duration_seconds";
        family(
            out,
            name,
            "histogram",
            "Time from receiving a request to its response head, by route and method.",
        );
        for route in RouteLabel::ALL {
            for (method, h) in METHODS.iter().zip(&self.routes[route as usize].latency) {
                let (cumulative, sum_s) = h.read();
                let count = *cumulative.last().expect("+Inf bucket");
                if count == 0 {
                    continue;
                }
                let labels = [("route", route.label()), ("method", *method)];
                histogram(out, name, &labels, &cumulative, sum_s);
            }
        }
    }

    fn render_commands(&self, out: &mut String) {
        family(
            out,
            "leasehold_commands_total",
            "counter",
            "Client commands this node proposed as leader, by kind and outcome (ok, empty, or an api.md error code).",
        );
        let mut counts = self.commands.lock().expect("metrics lock").clone();
        for (kind, outcomes) in COMMAND_OUTCOMES {
            for outcome in outcomes {
                counts.entry((kind, outcome)).or_insert(0);
            }
        }
        for ((kind, outcome), n) in counts {
            sample(
                out,
                "leasehold_commands_total",
                &[("kind", kind), ("outcome", outcome)],
                n,
            );
        }
    }

    /// Counts a request (or connection) the listener refused.
    pub fn refused(&self, why: Refused) {
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn render_counters(&self, out: &mut String) {
        let name = "leasehold_listener_refused_total";
        family(
            out,
            name,
            "counter",
            "Requests the listener answered itself before routing (503 at an in-flight limit, 504 past the request timeout), connections it closed at the connection limit, peer RPCs refused (peer_auth_*, peer_cluster, raft_body_timeout), and the browser guard's refusals (content_type 415, cross_origin 403, host 403/400), by reason.",
        );
        for why in Refused::ALL {
            let n = self.refused[why as usize].load(Ordering::Relaxed);
            sample(out, name, &[("reason", why.label())], n);
        }
        for (name, help, v) in [
            (
                "leasehold_forwarded_total",
                "Requests this node forwarded to the leader (attempts, each retry counted).",
                &self.forwarded,
            ),
            (
                "leasehold_ticks_total",
                "Tick entries proposed by this node as leader.",
                &self.ticks,
            ),
            (
                "leasehold_raft_leader_changes_total",
                "Leaders this node saw take office (a new leader, or the same one in a new term) since it started.",
                &self.leader_changes,
            ),
            (
                "leasehold_raft_prevotes_granted_total",
                "Pre-votes this node granted to a candidate (POST /raft/prevote).",
                &self.prevotes_granted,
            ),
            (
                "leasehold_raft_prevotes_refused_total",
                "Pre-votes this node refused: it leads, heard from a leader within the lease, or holds a longer log.",
                &self.prevotes_refused,
            ),
            (
                "leasehold_raft_elections_started_total",
                "Elections this node started after a majority granted its pre-vote.",
                &self.elections_started,
            ),
        ] {
            family(out, name, "counter", help);
            sample(out, name, &[], v.load(Ordering::Relaxed));
        }
    }
}

fn render_raft(out: &mut String, s: &Scrape) {
    let raft = &s.raft;
    let membership = raft.membership_config.membership();
    let gauges: [(&str, &str, u64); 8] = [
        (
            "leasehold_raft_term",
            "Current Raft term.",
            raft.current_term,
        ),
        (
            "leasehold_raft_is_leader",
            "1 when this node is the leader (0 while check quorum has deposed it).",
            u64::from(s.known_leader == Some(raft.id)),
        ),
        (
            "leasehold_raft_last_log_index",
            "Last log index.",
            raft.last_log_index.unwrap_or(0),
        ),
        (
            "leasehold_raft_commit_index",
            "Last log index this node knows to be committed.",
            s.commit_index,
        ),
        (
            "leasehold_raft_applied_index",
            "Last applied log index.",
            raft.last_applied.map_or(0, |l| l.index),
        ),
        (
            "leasehold_raft_voters",
            "Voters in the membership this node knows.",
            membership.voter_ids().count() as u64,
        ),
        (
            "leasehold_raft_learners",
            "Learners in the membership this node knows.",
            membership.learner_ids().count() as u64,
        ),
        (
            "leasehold_cluster_time_ms",
            "Cluster time as this node estimates it.",
            s.cluster_time_ms,
        ),
    ];
    for (name, help, v) in gauges {
        family(out, name, "gauge", help);
        sample(out, name, &[], v);
    }
    let name = "leasehold_raft_quorum_lost_total";
    family(
        out,
        name,
        "counter",
        "Times check quorum deposed this node: it led but no quorum acknowledged it within its lease.",
    );
    sample(out, name, &[], s.quorum_lost);
}

/// The one-sample families of [`render_jobs`]: name, type, help, value.
fn simple_job_families(s: &Scrape) -> [(&'static str, &'static str, &'static str, u64); 7] {
    let stats = &s.stats;
    [
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
            "leasehold_failover_grace_last_ms",
            "gauge",
            "Extension the last failover grace gave live leases, ms (0 until one is applied after this node started).",
            s.last_grace_ms,
        ),
        (
            "leasehold_idempotency_keys",
            "gauge",
            "Idempotency keys remembered.",
            stats.idempotency_keys,
        ),
        (
            "leasehold_idempotency_bytes",
            "gauge",
            "Accounted bytes of the remembered idempotent replies (bounded by IDEMPOTENCY_BYTES_MAX).",
            stats.idempotency_bytes,
        ),
        (
            "leasehold_idempotency_scope_bytes_max",
            "gauge",
            "Accounted bytes of the largest idempotency scope (one caller's keys, or the unscoped ones).",
            stats.idempotency_scope_bytes_max,
        ),
        (
            "leasehold_queues",
            "gauge",
            "Queues holding at least one job.",
            s.queues.queues,
        ),
    ]
}

fn render_jobs(out: &mut String, s: &Scrape) {
    let stats = &s.stats;
    for (name, kind, help, v) in simple_job_families(s) {
        family(out, name, kind, help);
        sample(out, name, &[], v);
    }
    family(
        out,
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
        sample(out, "leasehold_jobs", &[("state", state)], n);
    }
    render_jobs_by_queue(out, s);
}

fn render_jobs_by_queue(out: &mut String, s: &Scrape) {
    let name = "leasehold_jobs_by_queue";
    family(
        out,
        name,
        "gauge",
        "Jobs by queue and state at the last applied stamp: the 100 queues with the most open jobs, the rest summed as queue=\"(other)\".",
    );
    let rest = s.queues.rest.map(|r| (OTHER_QUEUES_LABEL, r));
    let queues = s.queues.top.iter().map(|(q, st)| (q.as_str(), *st));
    for (queue, st) in queues.chain(rest) {
        for (state, n) in [
            ("pending", st.pending),
            ("leased", st.leased),
            ("completed", st.completed),
            ("failed", st.failed),
        ] {
            sample(out, name, &[("queue", queue), ("state", state)], n);
        }
    }
}

fn render_snapshots(out: &mut String, s: &SnapshotStats) {
    family(
        out,
        "leasehold_snapshot_builds_total",
        "counter",
        "Snapshots this node built since it started.",
    );
    sample(out, "leasehold_snapshot_builds_total", &[], s.builds);
    let gauges: [(&str, &str, f64); 4] = [
        (
            "leasehold_snapshot_last_size_bytes",
            "Size of the last snapshot file this node built.",
            s.last_bytes as f64,
        ),
        (
            "leasehold_snapshot_last_build_seconds",
            "Whole build of the last snapshot: capture, encode, write, fsync.",
            s.last_build_ms as f64 / 1e3,
        ),
        (
            "leasehold_snapshot_last_capture_seconds",
            "Of the last build, how long applies were held off while its records were captured.",
            s.last_capture_ms as f64 / 1e3,
        ),
        (
            "leasehold_snapshot_last_index",
            "Log index the last snapshot this node built covers.",
            s.last_index as f64,
        ),
    ];
    for (name, help, v) in gauges {
        family(out, name, "gauge", help);
        sample(out, name, &[], v);
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], v: impl std::fmt::Display) {
    out.push_str(name);
    write_labels(out, labels, None);
    let _ = writeln!(out, " {v}");
}

fn histogram(
    out: &mut String,
    name: &str,
    labels: &[(&str, &str)],
    cumulative: &[u64],
    sum_s: f64,
) {
    let bucket = format!("{name}_bucket");
    for (i, n) in cumulative.iter().enumerate() {
        let le = match LATENCY_BUCKETS_US.get(i) {
            Some(us) => (*us as f64 / 1e6).to_string(),
            None => "+Inf".to_owned(),
        };
        out.push_str(&bucket);
        write_labels(out, labels, Some(&le));
        let _ = writeln!(out, " {n}");
    }
    sample(out, &format!("{name}_sum"), labels, sum_s);
    let count = cumulative.last().copied().unwrap_or(0);
    sample(out, &format!("{name}_count"), labels, count);
}

fn write_labels(out: &mut String, labels: &[(&str, &str)], le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let le = le.map(|v| ("le", v));
    for (i, (k, v)) in labels.iter().copied().chain(le).enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{k}=\"{}\"", escape_label(v));
    }
    out.push('}');
}

/// Label values escape `\`, `"` and newline (the text format's rules).
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// HELP text escapes `\` and newline.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Whether `seen` (term, leader) is a leader taking office after `last`, the last leader
/// this node saw: a new leader id, or the same one elected again in a later term. A
/// spell without a known leader (an election) is not a change by itself.
pub fn leader_took_office(last: Option<(u64, NodeId)>, seen: Option<(u64, NodeId)>) -> bool {
    seen.is_some() && seen != last
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use super::*;

    /// One parsed sample line.
    #[derive(Debug)]
    struct Sample {
        name: String,
        labels: BTreeMap<String, String>,
        value: f64,
    }

    fn parse_labels(s: &str) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::new();
        let mut chars = s.chars().peekable();
        while chars.peek().is_some() {
            let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
            assert_eq!(
                chars.next(),
                Some('"'),
                "label {key} value is quoted in {s}"
            );
            let mut value = String::new();
            loop {
                match chars.next().expect("closing quote") {
                    '\\' => match chars.next().expect("escaped char") {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        c => panic!("bad escape \\{c} in {s}"),
                    },
                    '"' => break,
                    c => value.push(c),
                }
            }
            assert!(
                key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !key.is_empty(),
                "label name {key:?}"
            );
            assert!(labels.insert(key, value).is_none(), "label twice in {s}");
            if chars.peek() == Some(&',') {
                chars.next();
            }
        }
        labels
    }

    fn parse_sample(line: &str) -> Sample {
        let (series, value) = line.rsplit_once(' ').expect("series and value");
        let value = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("value of {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let inner = rest.strip_suffix('}').expect("closing brace");
                (name.to_owned(), parse_labels(inner))
            }
            None => (series.to_owned(), BTreeMap::new()),
        };
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "metric name {name:?}"
        );
        Sample {
            name,
            labels,
            value,
        }
    }

    /// Parses the text format strictly: HELP and TYPE once per family, before its
    /// samples; every sample belongs to a declared family; no series twice. Returns the
    /// families' types and the samples.
    fn parse(text: &str) -> (HashMap<String, String>, Vec<Sample>) {
        let mut types = HashMap::new();
        let mut helped = BTreeSet::new();
        let mut samples = Vec::new();
        let mut seen = BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                assert!(helped.insert(name.to_owned()), "HELP twice for {name}");
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(helped.contains(name), "TYPE before HELP for {name}");
                assert!(
                    ["counter", "gauge", "histogram"].contains(&kind),
                    "type {kind}"
                );
                assert!(
                    types.insert(name.to_owned(), kind.to_owned()).is_none(),
                    "TYPE twice for {name}"
                );
                continue;
            }
            assert!(!line.starts_with('#') && !line.is_empty(), "line {line:?}");
            assert!(
                seen.insert(line.rsplit_once(' ').unwrap().0.to_owned()),
                "series twice: {line}"
            );
            let s = parse_sample(line);
            let family = family_of(&s.name, &types);
            assert!(family.is_some(), "sample {} of no declared family", s.name);
            samples.push(s);
        }
        (types, samples)
    }

    fn family_of<'a>(name: &'a str, types: &HashMap<String, String>) -> Option<&'a str> {
        if types.contains_key(name) {
            return Some(name);
        }
        ["_bucket", "_sum", "_count"].iter().find_map(|suffix| {
            let base = name.strip_suffix(suffix)?;
            (types.get(base).map(String::as_str) == Some("histogram")).then_some(base)
        })
    }

    /// A series' labels but `le`, in order.
    type Labels = Vec<(String, String)>;

    /// Histograms: buckets in increasing `le`, cumulative (never decreasing), ending in
    /// +Inf equal to `_count`, with a `_sum`.
    fn check_histograms(types: &HashMap<String, String>, samples: &[Sample]) {
        for (family, _) in types.iter().filter(|(_, t)| *t == "histogram") {
            let mut series: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
            let bucket = format!("{family}_bucket");
            for s in samples.iter().filter(|s| s.name == bucket) {
                let le = s.labels.get("le").expect("le label");
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().expect("le is a number")
                };
                let rest = s.labels.iter().filter(|(k, _)| *k != "le");
                let key = rest.map(|(k, v)| (k.clone(), v.clone())).collect();
                series.entry(key).or_default().push((le, s.value));
            }
            for (labels, buckets) in series {
                assert!(
                    buckets.windows(2).all(|w| w[0].0 < w[1].0),
                    "le order {labels:?}"
                );
                assert!(
                    buckets.windows(2).all(|w| w[0].1 <= w[1].1),
                    "cumulative {labels:?}"
                );
                let (le, inf) = *buckets.last().unwrap();
                assert_eq!(le, f64::INFINITY, "+Inf last in {labels:?}");
                let find = |suffix: &str| {
                    let name = format!("{family}{suffix}");
                    samples
                        .iter()
                        .find(|s| {
                            s.name == name
                                && s.labels
                                    .iter()
                                    .map(|(k, v)| (k.clone(), v.clone()))
                                    .collect::<Vec<_>>()
                                    == labels
                        })
                        .unwrap_or_else(|| panic!("{name} of {labels:?}"))
                        .value
                };
                assert_eq!(find("_count"), inf, "+Inf == count for {labels:?}");
                assert!(find("_sum") >= 0.0);
            }
        }
    }

    fn scrape() -> Scrape {
        let raft = openraft::RaftMetrics::new_initial(1);
        let mut queues = BTreeMap::new();
        queues.insert(
            "default".to_owned(),
            QueueStats {
                pending: 2,
                leased: 1,
                completed: 3,
                failed: 0,
            },
        );
        Scrape {
            raft,
            commit_index: 7,
            cluster_time_ms: 1_764_450_000_000,
            stats: Stats::default(),
            queues: top_queues(queues.iter().map(|(q, s)| (q.as_str(), s)), 100),
            last_grace_ms: 250,
            known_leader: None,
            quorum_lost: 0,
            snapshots: SnapshotStats {
                builds: 2,
                last_bytes: 4096,
                last_build_ms: 1500,
                last_capture_ms: 20,
                last_index: 42,
            },
        }
    }

    fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        samples
            .iter()
            .find(|s| {
                s.name == name
                    && s.labels.len() == labels.len()
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
    }

    #[test]
    fn output_parses_and_histograms_are_well_formed() {
        let m = Metrics::default();
        let ms = Duration::from_millis;
        for (route, method, status, took) in [
            (RouteLabel::Job, Method::POST, 200, ms(3)),
            (RouteLabel::Job, Method::POST, 409, ms(1)),
            (
                RouteLabel::Job,
                Method::GET,
                200,
                Duration::from_micros(150),
            ),
            (RouteLabel::QueueClaim, Method::POST, 204, ms(30_000)),
            (RouteLabel::QueueClaim, Method::POST, 200, ms(90_000)),
            (RouteLabel::Other, Method::PUT, 418, ms(0)),
        ] {
            m.request(route, &method, status, took);
        }
        m.command("complete", "stale_lease");
        m.command("claim", "ok");
        m.forwarded.fetch_add(3, Ordering::Relaxed);
        let text = m.render(&scrape());
        let (types, samples) = parse(&text);
        check_histograms(&types, &samples);

        let d = "leasehold_request_duration_seconds";
        let job_post = [("route", "/v1/jobs/{id}"), ("method", "POST")];
        assert_eq!(value(&samples, &format!("{d}_count"), &job_post), Some(2.0));
        let le = |le| [job_post[0], job_post[1], ("le", le)];
        assert_eq!(
            value(&samples, &format!("{d}_bucket"), &le("0.001")),
            Some(1.0)
        );
        assert_eq!(
            value(&samples, &format!("{d}_bucket"), &le("0.002")),
            Some(1.0)
        );
        assert_eq!(
            value(&samples, &format!("{d}_bucket"), &le("0.005")),
            Some(2.0)
        );
        assert_eq!(value(&samples, &format!("{d}_sum"), &job_post), Some(0.004));
        let first = [
            ("route", "/v1/jobs/{id}"),
            ("method", "GET"),
            ("le", "0.0002"),
        ];
        assert_eq!(value(&samples, &format!("{d}_bucket"), &first), Some(1.0));
        // A 30 s long poll is in the 30 s bucket; past 60 s only in +Inf.
        let claim = |le| {
            [
                ("route", "/v1/queues/{queue}/claim"),
                ("method", "POST"),
                ("le", le),
            ]
        };
        assert_eq!(
            value(&samples, &format!("{d}_bucket"), &claim("10")),
            Some(0.0)
        );
        assert_eq!(
            value(&samples, &format!("{d}_bucket"), &claim("30")),
            Some(1.0)
        );
        assert_eq!(
            value(&samples, &format!("{d}_bucket"), &claim("60")),
            Some(1.0)
        );
        assert_eq!(
            value(&samples, &format!("{d}_bucket"), &claim("+Inf")),
            Some(2.0)
        );
        // Never-seen (route, method) pairs are left out.
        assert_eq!(
            value(
                &samples,
                &format!("{d}_count"),
                &[("route", "/healthz"), ("method", "GET")]
            ),
            None
        );

        let req = "leasehold_requests_total";
        assert_eq!(
            value(
                &samples,
                req,
                &[("route", "/v1/jobs/{id}"), ("status", "200")]
            ),
            Some(2.0)
        );
        assert_eq!(
            value(&samples, req, &[("route", "other"), ("status", "418")]),
            Some(1.0)
        );
        assert_eq!(
            value(
                &samples,
                &format!("{d}_count"),
                &[("route", "other"), ("method", "other")]
            ),
            Some(1.0)
        );
        // The existing label order is kept (people match it textually).
        assert!(
            text.contains("leasehold_requests_total{route=\"/v1/jobs/{id}\",status=\"409\"} 1\n")
        );

        let cmd = "leasehold_commands_total";
        assert_eq!(
            value(
                &samples,
                cmd,
                &[("kind", "complete"), ("outcome", "stale_lease")]
            ),
            Some(1.0)
        );
        assert_eq!(
            value(&samples, cmd, &[("kind", "claim"), ("outcome", "ok")]),
            Some(1.0)
        );
        // Seeded at 0 before the first one.
        assert_eq!(
            value(
                &samples,
                cmd,
                &[("kind", "renew"), ("outcome", "lease_expired")]
            ),
            Some(0.0)
        );

        for (name, v) in [
            ("leasehold_forwarded_total", 3.0),
            ("leasehold_raft_commit_index", 7.0),
            ("leasehold_raft_leader_changes_total", 0.0),
            ("leasehold_failover_grace_last_ms", 250.0),
            ("leasehold_snapshot_builds_total", 2.0),
            ("leasehold_snapshot_last_size_bytes", 4096.0),
            ("leasehold_snapshot_last_build_seconds", 1.5),
            ("leasehold_snapshot_last_capture_seconds", 0.02),
            ("leasehold_queues", 1.0),
        ] {
            assert_eq!(value(&samples, name, &[]), Some(v), "{name}");
        }
        let q = |state| [("queue", "default"), ("state", state)];
        assert_eq!(
            value(&samples, "leasehold_jobs_by_queue", &q("pending")),
            Some(2.0)
        );
        assert_eq!(
            value(&samples, "leasehold_jobs_by_queue", &q("completed")),
            Some(3.0)
        );
        for family in [
            "leasehold_requests_total",
            "leasehold_commands_total",
            "leasehold_ticks_total",
            "leasehold_raft_term",
            "leasehold_raft_is_leader",
            "leasehold_raft_last_log_index",
            "leasehold_raft_applied_index",
            "leasehold_raft_voters",
            "leasehold_raft_learners",
            "leasehold_cluster_time_ms",
            "leasehold_live_leases",
            "leasehold_failover_grace_applied_total",
            "leasehold_idempotency_keys",
            "leasehold_idempotency_bytes",
            "leasehold_idempotency_scope_bytes_max",
            "leasehold_jobs",
            "leasehold_snapshot_last_index",
        ] {
            assert!(types.contains_key(family), "{family} declared");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        let mut out = String::new();
        sample(&mut out, "x", &[("a", "q\"u\\o\nte")], 1);
        assert_eq!(out, "x{a=\"q\\\"u\\\\o\\nte\"} 1\n");
        let s = parse_sample(out.trim_end());
        assert_eq!(s.labels["a"], "q\"u\\o\nte");
    }

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

    #[test]
    fn leader_changes_count_new_leaders_and_new_terms() {
        assert!(leader_took_office(None, Some((1, 1))));
        assert!(!leader_took_office(Some((1, 1)), Some((1, 1))));
        assert!(!leader_took_office(Some((1, 1)), None), "an election alone");
        assert!(leader_took_office(Some((1, 1)), Some((2, 1))), "re-elected");
        assert!(leader_took_office(Some((1, 1)), Some((2, 3))));
    }
}
