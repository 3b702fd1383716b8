//! In-process cluster harness: three `server::start` nodes in one test process, real
//! HTTP on 127.0.0.1 (port-0 listeners), one `TempDir` per node.
//!
//! Synchronization is always "poll a condition until a deadline, then panic saying what
//! was awaited and what was last seen" ([`eventually`]); never a bare sleep.

#![allow(dead_code)]

pub mod api_md;
pub mod exposition;
pub mod tokens;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

pub use exposition::Exposition;
use leasehold_node::server::{self, NodeConfig, RunningNode};
use reqwest::header::HeaderMap;
use reqwest::Method;
use serde_json::Value;
use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::time::Instant;

/// Poll step of every wait.
pub const POLL: Duration = Duration::from_millis(25);
/// Bound on "the cluster elects a leader" (default election timeouts are 0.5–1 s).
pub const LEADER_WAIT: Duration = Duration::from_secs(20);
/// Bound on "a node catches up".
pub const CATCH_UP_WAIT: Duration = Duration::from_secs(30);

pub type Tweak = Arc<dyn Fn(&mut NodeConfig) + Send + Sync>;

/// How long past its deadline [`eventually`] lets a probe that is still running finish. A
/// request a node bounds itself (leader wait 3 s, then write timeout 5 s) fits; a hung
/// one does not. Without it a probe ended only when it did: an HTTP probe at the client's
/// 40 s timeout, and `wait_for_leader`'s three requests in a row 120 s past its 20 s bound
/// (issue 44, item 7).
pub const PROBE_OVERRUN_MAX: Duration = Duration::from_secs(10);
/// Bound on starting one node (`server::start`: opening its data dir and Raft).
pub const START_WAIT: Duration = Duration::from_secs(30);

/// Polls `probe` until it returns `Ok`, at most `timeout` (and a last probe's
/// [`PROBE_OVERRUN_MAX`]); panics with `what` and the last `Err` (what was observed)
/// otherwise.
pub async fn eventually<T, Fut>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Result<T, String>>,
{
    let start = Instant::now();
    let deadline = start + timeout;
    let mut last = String::from("no probe answered yet");
    loop {
        match tokio::time::timeout_at(deadline + PROBE_OVERRUN_MAX, probe()).await {
            Ok(Ok(v)) => return v,
            Ok(Err(seen)) => {
                if Instant::now() >= deadline {
                    panic!("timed out after {timeout:?} waiting for {what}; last observed: {seen}");
                }
                last = seen;
            }
            Err(_) => panic!(
                "timed out after {:?} waiting for {what}: a probe was still running \
                 {PROBE_OVERRUN_MAX:?} past the {timeout:?} bound; last observed before it: \
                 {last}",
                start.elapsed()
            ),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Log output as `RUST_LOG` says (errors by default), plus a counter of openraft's
/// "timeout while confirming leadership" errors — one per failed read-index round per
/// peer — so a test can tell a bounded wait from a hot retry loop.
pub fn init_tracing() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let fmt = tracing_subscriber::fmt::layer()
        .with_test_writer()
        .with_filter(tracing_subscriber::EnvFilter::from_default_env());
    let count =
        LeadershipConfirmFailures.with_filter(tracing_subscriber::filter::LevelFilter::ERROR);
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(count)
        .try_init();
}

/// Failed read-index RPCs ("timeout while confirming leadership", logged by openraft at
/// ERROR once per failed peer per round), by the peer's port named in the error.
static LEADERSHIP_CONFIRM_FAILURES: std::sync::Mutex<BTreeMap<u16, u64>> =
    std::sync::Mutex::new(BTreeMap::new());

/// How many failed read-index RPCs openraft logged so far towards any of `addrs`.
pub fn leadership_confirm_failures(addrs: &[SocketAddr]) -> u64 {
    let m = LEADERSHIP_CONFIRM_FAILURES.lock().unwrap();
    addrs
        .iter()
        .map(|a| m.get(&a.port()).copied().unwrap_or(0))
        .sum()
}

struct LeadershipConfirmFailures;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LeadershipConfirmFailures {
    fn on_event(
        &self,
        event: &tracing::Event<'_>,
        _ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        #[derive(Default)]
        struct Fields {
            matches: bool,
            text: String,
        }
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                let v = format!("{value:?}");
                if field.name() == "message" && v.contains("confirming leadership") {
                    self.matches = true;
                }
                self.text.push_str(&v);
                self.text.push(' ');
            }
        }
        let mut f = Fields::default();
        event.record(&mut f);
        if !f.matches {
            return;
        }
        let ports: std::collections::BTreeSet<u16> = f
            .text
            .split("127.0.0.1:")
            .skip(1)
            .filter_map(|rest| {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
            .collect();
        let mut m = LEADERSHIP_CONFIRM_FAILURES.lock().unwrap();
        for p in ports {
            *m.entry(p).or_default() += 1;
        }
    }
}

// ---- requests and responses ---------------------------------------------------------

/// One HTTP request, kept so it can be sent again (retries) or to another node.
#[derive(Debug, Clone)]
pub struct Req {
    pub method: Method,
    pub path: String,
    pub body: Option<Vec<u8>>,
    pub headers: Vec<(String, String)>,
}

impl Req {
    pub fn get(path: impl Into<String>) -> Req {
        Req {
            method: Method::GET,
            path: path.into(),
            body: None,
            headers: vec![],
        }
    }

    pub fn delete(path: impl Into<String>) -> Req {
        Req {
            method: Method::DELETE,
            ..Req::get(path)
        }
    }

    pub fn post(path: impl Into<String>, body: &Value) -> Req {
        Req::post_raw(path, serde_json::to_vec(body).unwrap())
    }

    pub fn post_raw(path: impl Into<String>, body: impl Into<Vec<u8>>) -> Req {
        Req {
            method: Method::POST,
            path: path.into(),
            body: Some(body.into()),
            headers: vec![("content-type".into(), "application/json".into())],
        }
    }

    /// Adds `Idempotency-Key: key`.
    pub fn key(mut self, key: &str) -> Req {
        self.headers.push(("idempotency-key".into(), key.into()));
        self
    }

    pub fn describe(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

#[derive(Debug, Clone)]
pub struct Resp {
    /// `METHOD path on node N`, for assertion messages.
    pub what: String,
    /// The node the request was sent to.
    pub node: u64,
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{}: body is not JSON ({e}): {:?} (status {})",
                self.what,
                self.text(),
                self.status
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("visible header").to_owned())
    }

    /// docs/api.md: every response carries `X-Leasehold-Node: <id>` of the node that answered.
    #[track_caller]
    pub fn assert_node_header(&self) {
        assert_eq!(
            self.header("x-leasehold-node"),
            Some(self.node.to_string()),
            "{}: X-Leasehold-Node",
            self.what
        );
    }

    /// Asserts the status and returns the JSON body (`Null` for an empty body).
    #[track_caller]
    pub fn ok(&self, status: u16) -> Value {
        assert_eq!(
            self.status,
            status,
            "{}: expected {status}, got {} with body {}",
            self.what,
            self.status,
            self.text()
        );
        self.assert_node_header();
        if self.body.is_empty() {
            Value::Null
        } else {
            self.json()
        }
    }

    /// Asserts an docs/api.md error response: `status`, and a body of exactly
    /// `{"error":{"code","message"[,"job"]}}` with `code`. Returns the `error` object.
    #[track_caller]
    pub fn err(&self, status: u16, code: &str) -> Value {
        assert_eq!(
            self.status,
            status,
            "{}: expected {status} {code}, got {} with body {}",
            self.what,
            self.status,
            self.text()
        );
        assert_error_shape(self);
        let e = self.json()["error"].clone();
        assert_eq!(
            e["code"],
            code,
            "{}: error code in {}",
            self.what,
            self.text()
        );
        e
    }
}

/// Every non-2xx body is `{"error":{"code":string,"message":string[,"job":{…}]}}`, JSON.
#[track_caller]
pub fn assert_error_shape(r: &Resp) {
    r.assert_node_header();
    let ct = r.header("content-type").unwrap_or_default();
    assert!(
        ct.starts_with("application/json"),
        "{}: error content-type {ct:?}",
        r.what
    );
    let v = r.json();
    let top = v
        .as_object()
        .unwrap_or_else(|| panic!("{}: error body not an object: {v}", r.what));
    assert_eq!(
        top.keys().collect::<Vec<_>>(),
        vec!["error"],
        "{}: top-level keys of {v}",
        r.what
    );
    let e = v["error"]
        .as_object()
        .unwrap_or_else(|| panic!("{}: `error` not an object: {v}", r.what));
    assert!(
        e["code"].is_string(),
        "{}: error.code not a string: {v}",
        r.what
    );
    let msg = e.get("message").and_then(Value::as_str);
    assert!(
        msg.is_some_and(|m| !m.is_empty()),
        "{}: error.message missing or empty: {v}",
        r.what
    );
    for k in e.keys() {
        assert!(
            ["code", "message", "job"].contains(&k.as_str()),
            "{}: unexpected error field {k}: {v}",
            r.what
        );
    }
    if let Some(job) = e.get("job") {
        assert!(
            job["id"].is_string(),
            "{}: error.job is not a Job: {v}",
            r.what
        );
    }
}

#[track_caller]
/// `leasehold_listener_refused_total{reason="<reason>"}` in a `/metrics` text: every
/// reason is always rendered, so a missing series panics.
pub fn refused_in(metrics: &str, reason: &str) -> u64 {
    let name = "leasehold_listener_refused_total";
    Exposition::parse(metrics)
        .value(name, &[("reason", reason)])
        .unwrap_or_else(|| panic!("no {name}{{reason=\"{reason}\"}} in /metrics")) as u64
}

pub fn u64_of(v: &Value, field: &str) -> u64 {
    v[field]
        .as_u64()
        .unwrap_or_else(|| panic!("field {field} is not a u64 in {v}"))
}

// ---- the HTTP client ----------------------------------------------------------------

/// Sends requests to nodes by id. Cheap to clone, `'static`, so spawned tasks can use it.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    addrs: Arc<BTreeMap<u64, SocketAddr>>,
}

impl Client {
    pub fn addr(&self, id: u64) -> SocketAddr {
        self.addrs[&id]
    }

    pub async fn try_send(&self, id: u64, req: &Req) -> Result<Resp, String> {
        let url = format!("http://{}{}", self.addr(id), req.path);
        let mut b = self.http.request(req.method.clone(), url);
        for (k, v) in &req.headers {
            b = b.header(k, v);
        }
        if let Some(body) = &req.body {
            b = b.body(body.clone());
        }
        let what = format!("{} on node {id}", req.describe());
        let r = b.send().await.map_err(|e| format!("{what}: {e:?}"))?;
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let body = r
            .bytes()
            .await
            .map_err(|e| format!("{what}: reading body: {e:?}"))?
            .to_vec();
        Ok(Resp {
            what,
            node: id,
            status,
            headers,
            body,
        })
    }

    #[track_caller]
    pub fn send<'a>(&'a self, id: u64, req: &'a Req) -> impl Future<Output = Resp> + 'a {
        let caller = std::panic::Location::caller();
        async move {
            match self.try_send(id, req).await {
                Ok(r) => r,
                Err(e) => panic!("transport error ({caller}): {e}"),
            }
        }
    }

    pub async fn get(&self, id: u64, path: &str) -> Resp {
        self.send(id, &Req::get(path)).await
    }

    pub async fn post(&self, id: u64, path: &str, body: Value) -> Resp {
        self.send(id, &Req::post(path, &body)).await
    }

    pub async fn delete(&self, id: u64, path: &str) -> Resp {
        self.send(id, &Req::delete(path)).await
    }

    /// Sends `req` to `ids` in turn until an answer that is not 503/504 (nor a transport
    /// error) arrives — what a client does on docs/api.md's availability errors, with the same
    /// request (and so the same Idempotency-Key). Panics after `timeout`.
    pub async fn send_retrying(&self, ids: &[u64], req: &Req, timeout: Duration) -> Resp {
        let mut i = 0usize;
        let what = format!(
            "a non-503/504 answer to {} from nodes {ids:?}",
            req.describe()
        );
        eventually(&what, timeout, || {
            let id = ids[i % ids.len()];
            i += 1;
            async move {
                match self.try_send(id, req).await {
                    Ok(r) if r.status == 503 || r.status == 504 => {
                        Err(format!("{} {}", r.status, r.text()))
                    }
                    Ok(r) => Ok(r),
                    Err(e) => Err(e),
                }
            }
        })
        .await
    }

    /// `GET /v1/cluster` of one node, as JSON.
    pub async fn cluster_view(&self, id: u64) -> Result<Value, String> {
        let r = self.try_send(id, &Req::get("/v1/cluster")).await?;
        if r.status != 200 {
            return Err(format!(
                "GET /v1/cluster on node {id}: {} {}",
                r.status,
                r.text()
            ));
        }
        serde_json::from_slice(&r.body).map_err(|e| format!("cluster view of {id}: {e}"))
    }

    /// Polls `GET /v1/jobs/{id}` on `node` until the job's state is `state`.
    pub async fn wait_job_state(
        &self,
        node: u64,
        job: &str,
        state: &str,
        timeout: Duration,
    ) -> Value {
        let path = format!("/v1/jobs/{job}");
        eventually(
            &format!("job {job} to be {state} (GET on node {node})"),
            timeout,
            || {
                let path = path.clone();
                async move {
                    let r = self.try_send(node, &Req::get(path)).await?;
                    if r.status != 200 {
                        return Err(format!("{} {}", r.status, r.text()));
                    }
                    let j: Value = serde_json::from_slice(&r.body).map_err(|e| e.to_string())?;
                    if j["state"] == state {
                        Ok(j)
                    } else {
                        Err(j.to_string())
                    }
                }
            },
        )
        .await
    }
}

// ---- the cluster ----------------------------------------------------------------------

pub struct TestCluster {
    pub client: Client,
    pub ids: Vec<u64>,
    peers: BTreeMap<u64, String>,
    dirs: BTreeMap<u64, TempDir>,
    nodes: BTreeMap<u64, RunningNode>,
    tweak: Tweak,
}

impl Deref for TestCluster {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl TestCluster {
    /// Three nodes with default settings.
    pub async fn start() -> TestCluster {
        TestCluster::start_with(|_| {}).await
    }

    /// Three nodes that load their auth files from disk ([`tokens::policies`]); the dir
    /// holding the files is returned with them.
    pub async fn start_with_tokens() -> (TestCluster, TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let policies = tokens::policies(dir.path());
        let c =
            TestCluster::start_with(move |cfg| cfg.auth = Some(policies[&cfg.id].clone())).await;
        (c, dir)
    }

    /// Three nodes; `tweak` adjusts every node's config (limits, Raft tuning…).
    pub async fn start_with(
        tweak: impl Fn(&mut NodeConfig) + Send + Sync + 'static,
    ) -> TestCluster {
        init_tracing();
        let ids = vec![1u64, 2, 3];
        // Bind all three first: every node needs the whole peer list.
        let mut listeners = BTreeMap::new();
        for &id in &ids {
            let l = TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind 127.0.0.1:0");
            listeners.insert(id, l);
        }
        let addrs: BTreeMap<u64, SocketAddr> = listeners
            .iter()
            .map(|(id, l)| (*id, l.local_addr().unwrap()))
            .collect();
        let peers = addrs.iter().map(|(id, a)| (*id, a.to_string())).collect();
        let http = reqwest::Client::builder()
            .no_proxy()
            // No pooling: nodes stop and restart on the same address.
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(40))
            .build()
            .unwrap();
        let mut c = TestCluster {
            client: Client {
                http,
                addrs: Arc::new(addrs),
            },
            ids: ids.clone(),
            peers,
            dirs: BTreeMap::new(),
            nodes: BTreeMap::new(),
            tweak: Arc::new(tweak),
        };
        for (id, listener) in listeners {
            c.dirs.insert(
                id,
                tempfile::Builder::new()
                    .prefix(&format!("leasehold-n{id}-"))
                    .tempdir()
                    .unwrap(),
            );
            let running = tokio::time::timeout(START_WAIT, server::start(listener, c.config(id)))
                .await
                .unwrap_or_else(|_| {
                    panic!("starting node {id} did not finish within {START_WAIT:?}")
                })
                .unwrap_or_else(|e| panic!("starting node {id}: {e:#}"));
            c.nodes.insert(id, running);
        }
        c
    }

    fn config(&self, id: u64) -> NodeConfig {
        let mut cfg = NodeConfig::new(id, self.dirs[&id].path().to_path_buf(), self.peers.clone());
        (self.tweak)(&mut cfg);
        cfg
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.nodes.contains_key(&id)
    }

    pub fn running(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    /// The in-process handle of a running node.
    #[track_caller]
    pub fn node(&self, id: u64) -> &RunningNode {
        self.nodes
            .get(&id)
            .unwrap_or_else(|| panic!("node {id} is not running"))
    }

    /// Stops a node (`RunningNode::shutdown`), bounded.
    pub async fn stop(&mut self, id: u64) {
        let running = self
            .nodes
            .remove(&id)
            .unwrap_or_else(|| panic!("node {id} is not running"));
        let metrics = running.node.raft.metrics();
        tokio::time::timeout(Duration::from_secs(20), running.shutdown())
            .await
            .unwrap_or_else(|_| {
                let m = metrics.borrow();
                panic!(
                    "shutdown of node {id} did not finish within 20 s; its Raft last said: \
                     {:?} in term {}, running {:?}",
                    m.state, m.current_term, m.running_state
                )
            });
    }

    /// Starts a stopped node again on its data dir and its address. The address may be
    /// briefly unavailable (and the data dir briefly locked), so both are retried.
    pub async fn restart(&mut self, id: u64) {
        assert!(!self.is_running(id), "node {id} is running");
        let addr = self.addr(id);
        let what = format!("node {id} to restart on {addr}");
        let this = &*self;
        let running = eventually(&what, Duration::from_secs(15), || async move {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|e| format!("bind {addr}: {e}"))?;
            server::start(listener, this.config(id))
                .await
                .map_err(|e| format!("start: {e:#}"))
        })
        .await;
        self.nodes.insert(id, running);
    }

    /// Stops every running node. Call at the end of each test (the `TempDir`s are removed
    /// when the cluster is dropped).
    pub async fn shutdown(mut self) {
        for id in self.running() {
            self.stop(id).await;
        }
    }

    /// Waits until every running node names the same leader, and that leader says it
    /// leads. Returns its id.
    pub async fn wait_for_leader(&self) -> u64 {
        let running = self.running();
        eventually(
            &format!("one leader known to all of nodes {running:?}"),
            LEADER_WAIT,
            || {
                let running = running.clone();
                async move {
                    let mut views = Vec::new();
                    for id in &running {
                        views.push(self.cluster_view(*id).await?);
                    }
                    let leader = views[0]["leader_id"]
                        .as_u64()
                        .ok_or_else(|| format!("{views:?}"))?;
                    let agree = views
                        .iter()
                        .all(|v| v["leader_id"].as_u64() == Some(leader));
                    let leads = views
                        .iter()
                        .any(|v| v["node_id"] == leader && v["state"] == "Leader");
                    if agree && leads && running.contains(&leader) {
                        Ok(leader)
                    } else {
                        Err(format!("{views:?}"))
                    }
                }
            },
        )
        .await
    }

    /// Waits until every running node applied the activation of this build's cluster
    /// version (`ActivateVersion`, which the leader proposes by itself about a second
    /// after the cluster forms), asking in process: a test that compares a node's state
    /// before and after something must take "before" once that entry is in.
    pub async fn wait_settled(&self) {
        let want = leasehold_statemachine::ENTRY_VERSION_MAX;
        eventually(
            &format!("every node at cluster version {want}"),
            CATCH_UP_WAIT,
            || async {
                let seen: Vec<u32> = self
                    .running()
                    .iter()
                    .map(|id| self.node(*id).node.sm.read(|s| s.machine.cluster_version()))
                    .collect();
                if seen.iter().all(|v| *v == want) {
                    Ok(())
                } else {
                    Err(format!("cluster versions: {seen:?}"))
                }
            },
        )
        .await
    }

    /// [`TestCluster::wait_for_leader`] for clusters whose `/v1/cluster` needs a token:
    /// asks the running nodes in process. Returns the leader every one of them names.
    pub async fn wait_for_leader_in_process(&self) -> u64 {
        eventually("one leader known to every node", LEADER_WAIT, || async {
            let seen: Vec<Option<u64>> = self
                .running()
                .iter()
                .map(|id| self.node(*id).node.raft.metrics().borrow().current_leader)
                .collect();
            match seen[0] {
                Some(l) if seen.iter().all(|s| *s == Some(l)) => Ok(l),
                _ => Err(format!("{seen:?}")),
            }
        })
        .await
    }

    /// Waits until every running node applied `index`, asking them in process (for
    /// clusters behind TLS or tokens).
    pub async fn wait_all_applied_in_process(&self, index: u64) {
        eventually(
            &format!("every node to apply index {index}"),
            CATCH_UP_WAIT,
            || async {
                let seen: Vec<Option<u64>> = self
                    .running()
                    .iter()
                    .map(|id| self.node(*id).node.raft.metrics().borrow().last_applied)
                    .map(|l| l.map(|l| l.index))
                    .collect();
                if seen.iter().all(|a| a.is_some_and(|a| a >= index)) {
                    Ok(())
                } else {
                    Err(format!("applied: {seen:?}"))
                }
            },
        )
        .await
    }

    /// `(applied_index, digest)` once every running node's `/v1/cluster/digest` (sent as
    /// `digest_req`, which may carry a token) reports the same, within `bound`.
    pub async fn settled_digest(&self, digest_req: &Req, bound: Duration) -> (u64, String) {
        // The version activation is an entry the leader writes by itself: a digest taken
        // before it would differ from one taken after for no client's doing.
        self.wait_settled().await;
        eventually("every replica at the same digest", bound, || async {
            let mut views = Vec::new();
            for id in self.running() {
                let r = self.try_send(id, digest_req).await?;
                if r.status != 200 {
                    return Err(format!("node {id}: {} {}", r.status, r.text()));
                }
                let v = r.json();
                views.push((u64_of(&v, "applied_index"), v["digest"].to_string()));
            }
            if views.iter().all(|v| *v == views[0]) {
                Ok(views[0].clone())
            } else {
                Err(format!("{views:?}"))
            }
        })
        .await
    }

    /// Every node's address, comma-separated, as `--endpoints` and `LEASEHOLD_ENDPOINTS`
    /// take them.
    pub fn endpoints(&self) -> String {
        let all: Vec<String> = self
            .ids
            .iter()
            .map(|id| self.addr(*id).to_string())
            .collect();
        all.join(",")
    }

    /// Failed read-index RPCs towards this cluster's nodes so far (see `init_tracing`).
    pub fn leadership_confirm_failures(&self) -> u64 {
        let addrs: Vec<SocketAddr> = self.ids.iter().map(|id| self.addr(*id)).collect();
        leadership_confirm_failures(&addrs)
    }

    /// Waits for a leader other than `old`.
    pub async fn wait_for_new_leader(&self, old: u64) -> u64 {
        assert!(
            !self.is_running(old),
            "wait_for_new_leader expects node {old} stopped"
        );
        self.wait_for_leader().await
    }

    /// A running node other than `leader`.
    pub fn follower_of(&self, leader: u64) -> u64 {
        self.running()
            .into_iter()
            .find(|id| *id != leader)
            .expect("a running node besides the leader")
    }

    /// Waits until `id` reports `applied_index >= index` in `/v1/cluster`.
    pub async fn wait_applied(&self, id: u64, index: u64) {
        eventually(
            &format!("node {id} to apply up to index {index}"),
            CATCH_UP_WAIT,
            || async move {
                let v = self.cluster_view(id).await?;
                if v["applied_index"].as_u64().is_some_and(|a| a >= index) {
                    Ok(())
                } else {
                    Err(v.to_string())
                }
            },
        )
        .await
    }

    /// The leader's `commit_index`, then waits until every running node applied it.
    pub async fn wait_all_caught_up(&self, leader: u64) -> u64 {
        let commit = u64_of(&self.cluster_view(leader).await.unwrap(), "commit_index");
        for id in self.running() {
            self.wait_applied(id, commit).await;
        }
        commit
    }
}

// ---- raw HTTP (limits and garbage tests) ------------------------------------------------

/// A response read off a raw TCP connection.
#[derive(Debug)]
pub struct RawResp {
    pub status: u16,
    /// Lower-cased header names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: body is not JSON ({e}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// Reads one HTTP/1 response off `stream` (Content-Length bodies, or up to EOF), within
/// `timeout`. `Err` says what happened instead: EOF, a reset, a timeout.
pub async fn read_raw_response(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    timeout: Duration,
) -> Result<RawResp, String> {
    use tokio::io::AsyncReadExt;
    let read = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            if let Some(resp) = parse_raw_response(&buf)? {
                return Ok(resp);
            }
            let n = stream
                .read(&mut chunk)
                .await
                .map_err(|e| format!("read error after {} bytes: {e}", buf.len()))?;
            if n == 0 {
                return match parse_raw_head(&buf) {
                    Some((status, headers, body_at)) => Ok(RawResp {
                        status,
                        headers,
                        body: buf[body_at..].to_vec(),
                    }),
                    None => Err(format!("connection closed after {} bytes", buf.len())),
                };
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| format!("no response within {timeout:?}"))?
}

/// Status, headers, and where the body starts.
type RawHead = (u16, Vec<(String, String)>, usize);

fn parse_raw_head(buf: &[u8]) -> Option<RawHead> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Some((status, headers, end + 4))
}

fn parse_raw_response(buf: &[u8]) -> Result<Option<RawResp>, String> {
    let Some((status, headers, body_at)) = parse_raw_head(buf) else {
        return Ok(None);
    };
    let len = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| {
            v.parse::<usize>()
                .map_err(|e| format!("content-length {v}: {e}"))
        })
        .transpose()?;
    match len {
        Some(len) if buf.len() >= body_at + len => Ok(Some(RawResp {
            status,
            headers,
            body: buf[body_at..body_at + len].to_vec(),
        })),
        _ => Ok(None),
    }
}

/// Sends `request` verbatim on a new connection to `addr` and reads one response.
pub async fn raw_request(
    addr: SocketAddr,
    request: &[u8],
    timeout: Duration,
) -> Result<RawResp, String> {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.write_all(request)
        .await
        .map_err(|e| format!("write to {addr}: {e}"))?;
    read_raw_response(&mut s, timeout).await
}

impl TestCluster {
    /// Node `id`'s data dir (peer_auth/ checks the identity file and modes there).
    pub fn data_dir(&self, id: u64) -> &std::path::Path {
        self.dirs[&id].path()
    }
}
