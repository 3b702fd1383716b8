//! What a node is built from: its [`Parts`], each made by its own
//! module, the request [`Limits`], how it reaches its [`Peers`], and the members'
//! addresses as the Raft metrics show them. Below every other file of `node/`, so the
//! proposer and the upgrade poll take what they need from here, not from the node.
//! May import `node::watchers`, `raft`, `security`, `store`, `telemetry`, `time`, `types`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::watchers;
use crate::raft::bootstrap::Bootstrap;
use crate::raft::election::Elector;
use crate::raft::join::Joining;
use crate::raft::versions::Versions;
use crate::security::Guards;
use crate::store::SmShared;
use crate::telemetry::metrics::Metrics;
use crate::time::timekeeper::Timekeeper;
use crate::types::{NodeId, Raft, RaftMetrics};

/// Timeouts and bounds of request handling.
#[derive(Debug, Clone)]
pub struct Limits {
    /// A proposed write whose outcome is not known by then is answered 504 `timeout`.
    pub write_timeout: Duration,
    /// How long a request waits for a leader (election) before 503 `unavailable`.
    pub leader_wait: Duration,
    /// Most times a request is forwarded between nodes before 503.
    pub forward_hops_max: u32,
    /// Narrowed TTL range (`serve --ttl-ms-min/--ttl-ms-max`).
    pub ttl_ms_min: u64,
    pub ttl_ms_max: u64,
    /// Open event-feed watchers at most (`serve --max-watchers`).
    pub max_watchers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            write_timeout: Duration::from_secs(5),
            leader_wait: Duration::from_secs(3),
            forward_hops_max: 2,
            ttl_ms_min: leasehold_statemachine::limits::TTL_MS_MIN,
            ttl_ms_max: leasehold_statemachine::limits::TTL_MS_MAX,
            max_watchers: watchers::MAX_WATCHERS_DEFAULT,
        }
    }
}

/// How a node reaches its peers (forwarded client requests, `--join`).
#[derive(Clone)]
pub struct Peers {
    /// Peers dialled at another address than the membership's (`serve --peer-dial`).
    pub dial: BTreeMap<NodeId, String>,
    /// Client for forwarding requests to the leader (pooled, shared).
    pub http: reqwest::Client,
    /// `http` or, with `serve --tls-*`, `https`: the scheme of forwarded requests.
    pub scheme: &'static str,
}

/// The parts a [`Node`] is made of ([`Node::new`]), each built by its own module.
pub struct Parts {
    pub id: NodeId,
    pub raft: Raft,
    pub sm: Arc<SmShared>,
    pub time: Arc<Timekeeper>,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
    pub peers: Peers,
    pub guards: Guards,
    pub joining: Arc<Joining>,
    pub elector: Arc<Elector>,
    /// The log's truncation count, for the proposer (`proposer::forwarded_outcome`).
    pub truncations: crate::store::Truncations,
    pub bootstrap: Arc<Bootstrap>,
    pub versions: Arc<Versions>,
}

/// Each member's advertised address, by id.
pub fn member_addrs(m: &RaftMetrics) -> BTreeMap<NodeId, String> {
    m.membership_config
        .nodes()
        .map(|(id, n)| (*id, n.addr.clone()))
        .collect()
}
