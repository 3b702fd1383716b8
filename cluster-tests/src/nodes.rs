//! What a chaos run needs of the cluster under test, whatever runs its nodes: the
//! [`Nodes`] trait, implemented by the process cluster ([`ProcCluster`], nodes on
//! loopback behind fault proxies) and by the container cluster (`docker::DockerCluster`,
//! nodes in Docker on a network of the test's own). `scenario::Chaos` and `fixture`'s
//! end-of-run reads are written against it, so the same workers, recorder and checker
//! drive both.
//! Imports the shared crate ([`leasehold_proc_cluster`]: the process cluster and its
//! observers) and nothing of this crate: `fixture`, `docker` and `scenario` import it
//! (issue 45 item 7).

use std::path::Path;
use std::time::Duration;

use serde::de::DeserializeOwned;

use leasehold_proc_cluster::{ProcCluster, Status};

/// The cluster a chaos run (`scenario::Chaos`) runs on.
// Not `dyn`-safe and not `Send`-bounded on purpose: the tests hold concrete types.
#[allow(async_fn_in_trait)]
pub trait Nodes {
    /// Every member's id, in order.
    fn ids(&self) -> Vec<u64>;
    /// `http://addr` of every node, in id order (what clients are given).
    fn endpoints(&self) -> Vec<String>;
    /// Where history files and logs of a failed run are kept.
    fn root(&self) -> &Path;
    /// The tail of each node's log, for a failure message.
    fn log_tails(&self, lines: usize) -> String;
    /// `GET path` of node `id` as JSON, if it answers in time with that shape.
    async fn get_json<T: DeserializeOwned>(&self, id: u64, path: &str) -> Option<T>;
    /// Waits (bounded) until every node that should answer names the same leader,
    /// which says it leads; panics after `bound`.
    async fn wait_leader(&self, bound: Duration) -> Status;
    /// Undoes every fault: nodes running, unpaused, connected.
    async fn heal_all(&mut self);
}

impl Nodes for ProcCluster {
    fn ids(&self) -> Vec<u64> {
        ProcCluster::ids(self)
    }

    fn endpoints(&self) -> Vec<String> {
        ProcCluster::endpoints(self)
    }

    fn root(&self) -> &Path {
        ProcCluster::root(self)
    }

    fn log_tails(&self, lines: usize) -> String {
        ProcCluster::log_tails(self, lines)
    }

    async fn get_json<T: DeserializeOwned>(&self, id: u64, path: &str) -> Option<T> {
        ProcCluster::get_json(self, id, path).await
    }

    async fn wait_leader(&self, bound: Duration) -> Status {
        self.try_wait_leader(bound)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    async fn heal_all(&mut self) {
        ProcCluster::heal_all(self)
    }
}
