//! The label vocabulary of `GET /metrics`: route, method, status, refusal reason, command
//! kind and outcome, as Rust types, and the label sets (`#[derive(EncodeLabelSet)]`) the
//! families of `Metrics` (`mod.rs`) are keyed by. Every set is bounded: a route's label is
//! one of [`RouteLabel`] (the route table, `http/routes.rs`, names each route's, and its
//! tests check that every label is some route's path or the start of it), methods and
//! statuses come from the short fixed lists below.
//!
//! Imports: `axum::http::Method` and `prometheus_client`'s encoding traits; nothing of the crate.

use std::fmt::Write;

use axum::http::Method;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

/// The route label of a request: a fixed set keeps the request families bounded. Plain
/// data: which route has which label is the route table's (`http/routes.rs`); the
/// values below are the `route` label's contract (docs/operations.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteLabel {
    Jobs,
    Job,
    QueueClaim,
    QueueRedrive,
    LeasesRenew,
    LeasesComplete,
    Events,
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
    OpenApi,
    Raft,
    Other,
}

impl RouteLabel {
    pub const ALL: [RouteLabel; 21] = [
        RouteLabel::Jobs,
        RouteLabel::Job,
        RouteLabel::QueueClaim,
        RouteLabel::QueueRedrive,
        RouteLabel::LeasesRenew,
        RouteLabel::LeasesComplete,
        RouteLabel::Events,
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
        RouteLabel::OpenApi,
        RouteLabel::Raft,
        RouteLabel::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            RouteLabel::Jobs => "/v1/jobs",
            RouteLabel::Job => "/v1/jobs/{id}",
            RouteLabel::QueueClaim => "/v1/queues/{queue}/claim",
            RouteLabel::QueueRedrive => "/v1/queues/{queue}/redrive",
            RouteLabel::LeasesRenew => "/v1/leases/renew",
            RouteLabel::LeasesComplete => "/v1/leases/complete",
            RouteLabel::Events => "/v1/events",
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
            RouteLabel::OpenApi => "/v1/openapi.json",
            RouteLabel::Raft => "/raft",
            RouteLabel::Other => "other",
        }
    }
}

impl EncodeLabelValue for RouteLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.label())
    }
}

/// Method labels of the latency histogram; anything else (HEAD, OPTIONS…) is `other`.
pub(super) const METHODS: [&str; 4] = ["GET", "POST", "DELETE", "other"];

pub(super) fn method_index(m: &Method) -> usize {
    match *m {
        Method::GET => 0,
        Method::POST => 1,
        Method::DELETE => 2,
        _ => 3,
    }
}

/// Statuses whose series the hot path keeps a handle to; any other status is looked up
/// in its family (rare).
pub(super) const STATUSES: [u16; 15] = [
    200, 201, 204, 400, 401, 403, 404, 405, 409, 413, 422, 431, 500, 503, 504,
];

/// Upper bounds of the latency buckets, µs: 0.2 ms (a local read) to 60 s (a 30 s
/// claim-next long poll, forwarded, is still below the last one). Exported in seconds
/// (`le="0.0002"` … `le="60"`, then `+Inf`).
pub const LATENCY_BUCKETS_US: [u64; 17] = [
    200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000,
    2_000_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
];

/// `leasehold_requests_total`'s labels, in the order people match them textually.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct RequestLabels {
    pub route: RouteLabel,
    pub status: u16,
}

/// `leasehold_request_duration_seconds`' labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct LatencyLabels {
    pub route: RouteLabel,
    pub method: &'static str,
}

/// `leasehold_commands_total`'s labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct CommandLabels {
    pub kind: &'static str,
    pub outcome: &'static str,
}

/// `leasehold_listener_refused_total`'s label.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct RefusedLabels {
    pub reason: Refused,
}

/// Why the listener answered (or dropped) a request itself, before routing: these never
/// reach `leasehold_requests_total` or the latency histogram. The last three are the
/// browser guard's (`http/browser.rs`), inside the router: those are also requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// Peer RPCs refused 401 by `peer_auth/`, one reason each (issue 17 items 1, 3):
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

impl EncodeLabelValue for Refused {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.label())
    }
}
