//! In-process harness for the client's cluster tests: three `server::start` nodes on
//! 127.0.0.1 port-0 listeners, one `TempDir` each, and a fenced destination
//! (`leasehold_client::fence::http`) on its own listener.
//!
//! Synchronization is "poll a condition until a bound, then panic saying what was
//! awaited and what was last seen" ([`eventually`]); never a bare sleep.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use leasehold_client::fence::http::{serve, FencedStore};
use leasehold_client::Client;
use leasehold_node::server::{self, NodeConfig, RunningNode};
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::time::Instant;

/// Poll step of every wait.
pub const POLL: Duration = Duration::from_millis(20);
/// Bound on "the cluster elects a leader" (election timeouts are 0.5–1 s; the box is
/// small and shared, hence the slack).
pub const LEADER_WAIT: Duration = Duration::from_secs(20);
/// Bound on a node's shutdown.
pub const SHUTDOWN_WAIT: Duration = Duration::from_secs(20);

/// Polls `probe` until `Ok`, at most `bound`; panics with `what` and the last `Err`.
pub async fn eventually<T, Fut>(what: &str, bound: Duration, mut probe: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + bound;
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(last) if Instant::now() >= deadline => {
                panic!("timed out after {bound:?} waiting for {what}; last observed: {last}")
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// An address nothing listens on (bound, then released).
pub async fn dead_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

pub struct Cluster {
    pub addrs: BTreeMap<u64, SocketAddr>,
    nodes: BTreeMap<u64, RunningNode>,
    _dirs: Vec<TempDir>,
}

impl Cluster {
    /// Three nodes, default settings, a leader elected and known to all.
    pub async fn start() -> Cluster {
        let ids = [1u64, 2, 3];
        // Bind all first: every node needs the whole peer list.
        let mut listeners = BTreeMap::new();
        for id in ids {
            listeners.insert(id, TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        let addrs: BTreeMap<u64, SocketAddr> = listeners
            .iter()
            .map(|(id, l)| (*id, l.local_addr().unwrap()))
            .collect();
        let peers: BTreeMap<u64, String> =
            addrs.iter().map(|(id, a)| (*id, a.to_string())).collect();
        let mut nodes = BTreeMap::new();
        let mut dirs = Vec::new();
        for (id, listener) in listeners {
            let dir = tempfile::Builder::new()
                .prefix(&format!("leasehold-client-n{id}-"))
                .tempdir()
                .unwrap();
            let cfg = NodeConfig::new(id, dir.path().to_path_buf(), peers.clone());
            let running = server::start(listener, cfg)
                .await
                .unwrap_or_else(|e| panic!("starting node {id}: {e:#}"));
            nodes.insert(id, running);
            dirs.push(dir);
        }
        let c = Cluster {
            addrs,
            nodes,
            _dirs: dirs,
        };
        c.wait_for_leader().await;
        c
    }

    /// `host:port` of every node, in id order.
    pub fn endpoints(&self) -> Vec<String> {
        self.addrs.values().map(|a| a.to_string()).collect()
    }

    /// A client over all nodes, default settings.
    pub fn client(&self) -> Client {
        Client::new(self.endpoints()).unwrap()
    }

    /// Waits until every running node names the same, running leader.
    pub async fn wait_for_leader(&self) -> u64 {
        let client = self.client();
        let running: Vec<usize> = self
            .addrs
            .keys()
            .enumerate()
            .filter(|(_, id)| self.nodes.contains_key(id))
            .map(|(i, _)| i)
            .collect();
        eventually("one leader known to every node", LEADER_WAIT, || {
            let (client, running) = (client.clone(), running.clone());
            async move {
                let mut leaders = Vec::new();
                for i in running {
                    let s = client
                        .cluster_status_at(i)
                        .await
                        .map_err(|e| e.to_string())?;
                    leaders.push(s.leader_id);
                }
                match leaders[0] {
                    Some(l) if leaders.iter().all(|x| *x == Some(l)) => Ok(l),
                    _ => Err(format!("leaders seen: {leaders:?}")),
                }
            }
        })
        .await
    }

    /// Stops one node, bounded.
    pub async fn stop(&mut self, id: u64) {
        let node = self.nodes.remove(&id).expect("node is running");
        tokio::time::timeout(SHUTDOWN_WAIT, node.shutdown())
            .await
            .unwrap_or_else(|_| panic!("node {id} did not shut down within {SHUTDOWN_WAIT:?}"));
    }

    /// Stops every running node, all at once (bounded): every node stops serving
    /// first, then each is shut down.
    pub async fn stop_all(&mut self) {
        let nodes = std::mem::take(&mut self.nodes);
        for node in nodes.values() {
            node.cancel_token().cancel();
        }
        let all = async {
            for node in nodes.into_values() {
                node.shutdown().await;
            }
        };
        tokio::time::timeout(SHUTDOWN_WAIT, all)
            .await
            .expect("nodes shut down in time");
    }

    /// Stops what still runs; call at the end of each test.
    pub async fn shutdown(mut self) {
        self.stop_all().await;
    }
}

/// The fenced destination, served on a port-0 listener; stops when dropped.
pub struct Destination {
    pub store: Arc<FencedStore>,
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Destination {
    pub async fn start() -> Destination {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let store = Arc::new(FencedStore::new());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let served = store.clone();
        tokio::spawn(async move {
            let _ = serve(listener, served, async move {
                let _ = rx.await;
            })
            .await;
        });
        Destination {
            store,
            url,
            stop: Some(tx),
        }
    }
}

impl Drop for Destination {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}
