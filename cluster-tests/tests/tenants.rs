//! Tenant isolation (issue 30), probed as an attacker holding one tenant's tokens would,
//! on three real `leasehold serve` processes with a peer secret and one auth file: an
//! unscoped admin and reader; tenants A and B scoped by `queues`, `job_prefix` and
//! `owner_prefix`, each with a worker and a reader token; an admin scoped to A; and a
//! tenant C scoped by `queues` alone. It proves that a scoped token learns nothing
//! about another tenant's jobs: the rejections feed shows it only its own entries; a
//! submit of an id someone else holds answers without the stored job; a job it does not
//! hold and a job that does not exist give the same answer, the same metric movement,
//! the same feed movement and the same idempotency behaviour; claim-next never hands it
//! a job it does not hold; a path with `.`/`..` segments means one id on every node;
//! its page tokens are its own; membership and snapshots are for unscoped admins only;
//! and `/metrics` names no job, owner or key of anyone.
//!
//! Every probe is sent to the leader and to a follower, which must answer alike (the
//! follower forwards, so a difference means the two judged different things), and every
//! refusal has a positive control: the same request by the owning tenant (or an unscoped
//! token) succeeds, so nothing here passes by refusing everything. The sections share
//! one cluster (starting one costs seconds) and use disjoint job ids; each runs as its
//! own task, so one failing section does not hide the others, and the test fails at the
//! end naming every failed section, with the nodes' log tails.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_cluster_tests::fixture::{leasehold_bin, start_with_auth, ProcCluster, POLL};
use leasehold_proc_cluster::{send_raw, RawRequest};
use serde_json::{json, Value};
use tokio::time::Instant;

const ADMIN: &str = "tok-admin-u1";
const READER: &str = "tok-reader-u2";
const A_WORKER: &str = "tok-a-worker";
const A_READER: &str = "tok-a-reader";
const B_WORKER: &str = "tok-b-worker";
const B_READER: &str = "tok-b-reader";
/// An admin scoped to tenant A.
const A_ADMIN: &str = "tok-a-admin";
/// Tenant C: `queues` alone, no `job_prefix` (docs/security.md allows it).
const C_WORKER: &str = "tok-c-worker";

const AUTH_FILE: &str = r#"
[[token]]
token = "tok-admin-u1"
role = "admin"
name = "unscoped admin"

[[token]]
token = "tok-reader-u2"
role = "reader"
name = "unscoped reader"

[[token]]
token = "tok-a-worker"
role = "worker"
queues = ["a-q"]
job_prefix = "a/"
owner_prefix = "a-"
name = "tenant a worker"

[[token]]
token = "tok-a-reader"
role = "reader"
queues = ["a-q"]
job_prefix = "a/"
owner_prefix = "a-"
name = "tenant a reader"

[[token]]
token = "tok-b-worker"
role = "worker"
queues = ["b-q"]
job_prefix = "b/"
owner_prefix = "b-"
name = "tenant b worker"

[[token]]
token = "tok-b-reader"
role = "reader"
queues = ["b-q"]
job_prefix = "b/"
owner_prefix = "b-"
name = "tenant b reader"

[[token]]
token = "tok-a-admin"
role = "admin"
queues = ["a-q"]
job_prefix = "a/"
owner_prefix = "a-"
name = "tenant a admin"

[[token]]
token = "tok-c-worker"
role = "worker"
queues = ["c-q"]
owner_prefix = "c-"
name = "tenant c worker"
"#;

/// Bound on the cluster's first leader, and on a settle (every replica applied what the
/// leader committed).
const CLUSTER_BOUND: Duration = Duration::from_secs(60);
/// Bound on one request (connect, write, read the whole answer).
const REQUEST_BOUND: Duration = Duration::from_secs(15);
/// How long a 503 (nothing was appended: safe to resend) is retried.
const UNAVAILABLE_RETRY: Duration = Duration::from_secs(20);
const TTL_MS: u64 = 60_000;
/// The feed's own cap on one page (`REJECTIONS_LIMIT_MAX`); the test stays well below
/// the feed's capacity, so a page from `after=0` holds the whole feed.
const FEED_LIMIT: u64 = 200;
/// The scope refusals counter.
const REFUSED: &str = "leasehold_listener_refused_total";

// ---- the cluster --------------------------------------------------------------------

struct Ctx {
    c: ProcCluster,
    /// Holds the auth file.
    _dir: tempfile::TempDir,
    /// Every job id, owner and idempotency key the sections sent: none may show in
    /// `/metrics`.
    named: Mutex<BTreeSet<String>>,
}

async fn start() -> Ctx {
    // Before the activation (which `start_with_auth` waits for) the leader checks scopes
    // the way a cluster being upgraded does (issue 30), and the scoped rejections feed is
    // empty.
    let bin = leasehold_bin(env!("CARGO_BIN_EXE_leasehold-under-test"));
    let (c, dir) = start_with_auth("tenants", bin, AUTH_FILE, READER, CLUSTER_BOUND).await;
    Ctx {
        c,
        _dir: dir,
        named: Mutex::new(BTreeSet::new()),
    }
}

impl Ctx {
    /// The leader and one follower, as the cluster agrees now.
    async fn pair(&self) -> (u64, u64) {
        let leader = self.c.wait_leader(CLUSTER_BOUND).await;
        let follower = self.c.ids().into_iter().find(|&i| i != leader).unwrap();
        (leader, follower)
    }

    /// Records names (ids, owners, keys) that `/metrics` must never show.
    fn name(&self, names: &[&str]) {
        let mut set = self.named.lock().unwrap();
        set.extend(names.iter().map(|n| n.to_string()));
    }

    /// Waits until every node applied what the leader had committed when called: the
    /// feeds (recorded at apply, read locally) then hold every answered write.
    async fn settle(&self) {
        let (leader, _) = self.pair().await;
        let deadline = Instant::now() + CLUSTER_BOUND;
        let commit = loop {
            if let Some(s) = self.c.status(leader).await {
                break s.commit_index;
            }
            assert!(Instant::now() < deadline, "leader {leader} gave no status");
            tokio::time::sleep(POLL).await;
        };
        loop {
            let mut applied = Vec::new();
            for id in self.c.ids() {
                applied.push(self.c.status(id).await.map(|s| s.applied_index));
            }
            if applied.iter().all(|a| a.is_some_and(|a| a >= commit)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "replicas did not apply index {commit} in {CLUSTER_BOUND:?}: {applied:?}"
            );
            tokio::time::sleep(POLL).await;
        }
    }
}

// ---- requests -----------------------------------------------------------------------

fn get(path: &str, token: &str) -> RawRequest {
    RawRequest::new("GET", path).bearer(token)
}

fn delete(path: &str, token: &str) -> RawRequest {
    RawRequest::new("DELETE", path).bearer(token)
}

fn post(path: &str, token: &str, body: &Value) -> RawRequest {
    RawRequest::new("POST", path)
        .bearer(token)
        .json(&body.to_string())
}

fn with_key(req: RawRequest, key: &str) -> RawRequest {
    req.header("idempotency-key", key)
}

fn submit(token: &str, body: Value) -> RawRequest {
    post("/v1/jobs", token, &body)
}

/// One answer, with what was asked (for failure messages).
#[derive(Debug, Clone)]
struct Answer {
    what: String,
    status: u16,
    text: String,
    body: Value,
}

impl Answer {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or_default()
    }

    fn has_job(&self) -> bool {
        self.body["error"].get("job").is_some()
    }

    /// Status and error code.
    fn shape(&self) -> (u16, String) {
        (self.status, self.code().to_owned())
    }

    #[track_caller]
    fn ok(&self, status: u16) -> &Value {
        assert_eq!(self.status, status, "{}: {}", self.what, self.text);
        &self.body
    }

    #[track_caller]
    fn err(&self, status: u16, code: &str) -> &Value {
        assert_eq!(
            self.shape(),
            (status, code.to_owned()),
            "{}: {}",
            self.what,
            self.text
        );
        &self.body["error"]
    }
}

fn who(token: &str) -> &str {
    token.strip_prefix("tok-").unwrap_or(token)
}

fn describe(req: &RawRequest, node: u64) -> String {
    let token = req
        .headers
        .iter()
        .find(|(n, _)| n == "authorization")
        .map(|(_, v)| who(v.trim_start_matches("Bearer ")))
        .unwrap_or("no token");
    let body = String::from_utf8_lossy(&req.body);
    format!(
        "{} {} {body} as {token} via node {node}",
        req.method, req.target
    )
}

/// Sends `req` to node `node`; a 503 (nothing appended) is sent again, within a bound.
async fn send(t: &Ctx, node: u64, req: &RawRequest) -> Answer {
    let what = describe(req, node);
    let addr: SocketAddr = t.c.addr(node);
    let deadline = Instant::now() + UNAVAILABLE_RETRY;
    loop {
        let r = send_raw(addr, req, REQUEST_BOUND)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        if r.status == 503 && Instant::now() < deadline {
            tokio::time::sleep(POLL * 8).await;
            continue;
        }
        let text = r.text();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        return Answer {
            what,
            status: r.status,
            text,
            body,
        };
    }
}

/// Sends `req` to the follower, then to the leader: both answers (follower's first).
async fn both_raw(t: &Ctx, req: &RawRequest) -> (Answer, Answer) {
    let (leader, follower) = t.pair().await;
    let f = send(t, follower, req).await;
    let l = send(t, leader, req).await;
    (f, l)
}

/// Why two nodes' answers to one request differ in status or error code, if they do.
fn differ(f: &Answer, l: &Answer) -> Option<String> {
    (f.shape() != l.shape()).then(|| {
        format!(
            "follower and leader answer {} differently:\n  follower: {} {}\n  leader:   {} {}",
            f.what, f.status, f.text, l.status, l.text
        )
    })
}

/// [`both_raw`], requiring the same status and error code from both nodes.
async fn both(t: &Ctx, req: &RawRequest) -> (Answer, Answer) {
    let (f, l) = both_raw(t, req).await;
    if let Some(why) = differ(&f, &l) {
        panic!("{why}");
    }
    (f, l)
}

/// Failed checks of one section, reported together: the whole list says more about a
/// leak than its first item.
#[derive(Default)]
struct Checks(Vec<String>);

impl Checks {
    fn check(&mut self, ok: bool, why: impl FnOnce() -> String) {
        if !ok {
            self.0.push(why());
        }
    }

    #[track_caller]
    fn finish(self, what: &str) {
        assert!(
            self.0.is_empty(),
            "{what}: {} failed checks:\n- {}",
            self.0.len(),
            self.0.join("\n- ")
        );
    }
}

/// [`both`], and the bodies must be equal too (an error's message included).
async fn both_same_body(t: &Ctx, req: &RawRequest) -> Answer {
    let (f, l) = both(t, req).await;
    assert_eq!(f.text, l.text, "{} vs {}", f.what, l.what);
    l
}

/// Pages through `GET /v1/jobs?limit=N` (plus `query`) as `token` on `node`: every
/// job id in order, and the `next_page_token` each page ended with (paired with the
/// last id on that page, when it had one).
async fn walk(
    t: &Ctx,
    node: u64,
    token: &str,
    limit: u64,
) -> (Vec<String>, Vec<(Option<String>, String)>) {
    let (mut ids, mut tokens) = (Vec::new(), Vec::new());
    let mut next: Option<String> = None;
    for _ in 0..10_000 {
        let mut path = format!("/v1/jobs?limit={limit}");
        if let Some(tok) = &next {
            path.push_str(&format!("&page_token={tok}"));
        }
        let page = send(t, node, &get(&path, token)).await;
        let body = page.ok(200).clone();
        let on_page: Vec<String> = body["jobs"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: {}", page.what, page.text))
            .iter()
            .map(|j| j["id"].as_str().unwrap().to_owned())
            .collect();
        let last = on_page.last().cloned();
        ids.extend(on_page);
        match body["next_page_token"].as_str() {
            Some(tok) => {
                tokens.push((last, tok.to_owned()));
                next = Some(tok.to_owned());
            }
            None => return (ids, tokens),
        }
    }
    panic!(
        "GET /v1/jobs as {} did not end within 10,000 pages",
        who(token)
    )
}

// ---- metrics and the feed -----------------------------------------------------------

/// `leasehold_listener_refused_total{reason="scope"}` summed over every node.
async fn scope_refusals(t: &Ctx) -> u64 {
    let mut sum = 0;
    for id in t.c.ids() {
        let text = send(t, id, &get("/metrics", READER)).await;
        sum += refused_in(&text.text, "scope");
    }
    sum
}

/// One reason's count in a `/metrics` text (0 when the series was never touched).
fn refused_in(metrics: &str, reason: &str) -> u64 {
    let label = format!("reason=\"{reason}\"");
    metrics
        .lines()
        .filter(|l| l.starts_with(REFUSED) && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// The whole rejections feed of `node` as `token` sees it.
async fn feed(t: &Ctx, node: u64, token: &str) -> Answer {
    let path = format!("/v1/cluster/rejections?after=0&limit={FEED_LIMIT}");
    let a = send(t, node, &get(&path, token)).await;
    a.ok(200);
    a
}

/// One feed entry without what differs per node (`seq`): `(command, code, job_id)`.
type Entry = (String, String, String);

/// The scope refusals of every node, and each node's feed as one token sees it.
type Measured = (u64, Vec<Vec<Entry>>);

/// A feed's entries, oldest first.
fn entries(feed: &Answer) -> Vec<Entry> {
    let s = |v: &Value| v.as_str().unwrap_or("-").to_owned();
    feed.body["rejections"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: {}", feed.what, feed.text))
        .iter()
        .map(|r| (s(&r["command"]), s(&r["code"]), s(&r["job_id"])))
        .collect()
}

fn last_seq(feed: &Answer) -> u64 {
    feed.body["last_seq"]
        .as_u64()
        .unwrap_or_else(|| panic!("{}: {}", feed.what, feed.text))
}

/// Every string value in a JSON document.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|i| strings(i, out)),
        Value::Object(map) => map.values().for_each(|i| strings(i, out)),
        _ => {}
    }
}

// ---- a. the rejections feed ---------------------------------------------------------

/// A's refused commands (a stale completion, a completion of a missing id, a reused
/// idempotency key) never show in B's view of the feed, nor move B's `last_seq`; A's
/// reader and the unscoped reader see them.
async fn rejections_feed_is_scoped(t: Arc<Ctx>) {
    let t = &*t;
    let (owner, key) = ("a-owner-feed", "key-a-feed");
    t.name(&[
        "a/feed-1",
        "a/feed-2",
        "a/feed-3",
        "a/feed-missing",
        owner,
        key,
    ]);
    t.settle().await;
    let mut before = BTreeMap::new();
    for token in [B_READER, B_WORKER] {
        for id in t.c.ids() {
            before.insert((token, id), last_seq(&feed(t, id, token).await));
        }
    }

    let (leader, _) = t.pair().await;
    let new = json!({"id": "a/feed-1", "queue": "a-q", "payload": {"n": 1}});
    send(t, leader, &submit(A_WORKER, new)).await.ok(201);
    let claim = json!({"owner": owner, "ttl_ms": TTL_MS});
    let lease = send(
        t,
        leader,
        &post("/v1/jobs/a/feed-1/claim", A_WORKER, &claim),
    )
    .await;
    let generation = lease.ok(200)["generation"].as_u64().unwrap();
    let stale = json!({"owner": owner, "generation": generation + 7});
    both(t, &post("/v1/jobs/a/feed-1/complete", A_WORKER, &stale))
        .await
        .0
        .err(409, "stale_lease");
    let held = json!({"owner": owner, "generation": 1});
    both(
        t,
        &post("/v1/jobs/a/feed-missing/complete", A_WORKER, &held),
    )
    .await
    .0
    .err(404, "not_found");
    let first = submit(A_WORKER, json!({"id": "a/feed-2", "queue": "a-q"}));
    send(t, leader, &with_key(first, key)).await.ok(201);
    let other = submit(A_WORKER, json!({"id": "a/feed-3", "queue": "a-q"}));
    both(t, &with_key(other, key))
        .await
        .0
        .err(422, "idempotency_key_reused");
    t.settle().await;

    let mut checks = Checks::default();
    for token in [B_READER, B_WORKER] {
        for id in t.c.ids() {
            let seen = feed(t, id, token).await;
            let mut said = Vec::new();
            strings(&seen.body, &mut said);
            let leaked: Vec<&String> = said
                .iter()
                .filter(|s| {
                    s.starts_with("a/")
                        || s.starts_with("a-")
                        || s.contains("a/feed")
                        || s.contains(owner)
                        || s.contains(key)
                })
                .collect();
            checks.check(leaked.is_empty(), || {
                format!("{} shows tenant A's {leaked:?}: {}", seen.what, seen.text)
            });
            let (was, is) = (before[&(token, id)], last_seq(&seen));
            checks.check(was == is, || {
                format!(
                    "{}: B's last_seq moved from {was} to {is} with A's refusals",
                    seen.what
                )
            });
        }
    }
    // Positive controls (A's reader sees A's own refusals, the unscoped reader all of
    // them) come before the verdict on B's view, so they run either way.
    let stale_entry = (
        "complete".to_owned(),
        "stale_lease".to_owned(),
        "a/feed-1".to_owned(),
    );
    let missing_entry = (
        "complete".to_owned(),
        "not_found".to_owned(),
        "a/feed-missing".to_owned(),
    );
    for token in [A_READER, READER] {
        let mut views = Vec::new();
        for id in t.c.ids() {
            let seen = feed(t, id, token).await;
            let got = entries(&seen);
            assert!(
                got.contains(&stale_entry),
                "{} lacks A's stale completion: {}",
                seen.what,
                seen.text
            );
            if token == READER {
                assert!(
                    got.contains(&missing_entry),
                    "{} lacks A's missing completion: {}",
                    seen.what,
                    seen.text
                );
            }
            views.push(got);
        }
        assert!(
            views.windows(2).all(|w| w[0] == w[1]),
            "{} sees different feeds per node: {views:?}",
            who(token)
        );
    }
    checks.finish("B's view of the feed");
}

// ---- b. a submit of an id the caller does not hold ----------------------------------

/// Why a 409 to a submitter who does not hold the stored job says too much, if it does:
/// it carries the job, or any of `secrets` (the job's payload, queue, owner).
fn reveals(a: &Answer, secrets: &[&str]) -> Option<String> {
    if a.shape() != (409, "already_exists".into()) {
        return Some(format!(
            "{}: {} {}, not 409 already_exists",
            a.what, a.status, a.text
        ));
    }
    if a.has_job() {
        return Some(format!(
            "{}: the 409 carries the stored job: {}",
            a.what, a.text
        ));
    }
    let shown: Vec<&&str> = secrets.iter().filter(|s| a.text.contains(**s)).collect();
    (!shown.is_empty()).then(|| format!("{}: the answer shows {shown:?}: {}", a.what, a.text))
}

/// When an id is taken by a job the submitter does not hold (an admin's `b/` job in A's
/// queue; C's `a/` job in C's queue), the 409 carries no job; A's own taken id does.
async fn submit_of_a_held_elsewhere_id_shows_no_job(t: Arc<Ctx>) {
    let t = &*t;
    t.name(&["b/hidden", "a/c-took", "a/own-1", "c-owner-took"]);
    let (leader, _) = t.pair().await;
    // Positive control: A's own taken id answers with A's own job.
    let own = json!({"id": "a/own-1", "queue": "a-q", "payload": {"mine": 1}});
    send(t, leader, &submit(A_WORKER, own.clone()))
        .await
        .ok(201);
    let (f, l) = both(t, &submit(A_WORKER, own)).await;
    for a in [&f, &l] {
        let e = a.err(409, "already_exists");
        assert_eq!(e["job"]["id"], "a/own-1", "{}: {}", a.what, a.text);
        assert_eq!(e["job"]["queue"], "a-q", "{}: {}", a.what, a.text);
    }

    // C (no job prefix) takes an id in A's namespace; b/hidden (the admin's, in A's
    // queue) is seeded before the sections run.
    let took = json!({"id": "a/c-took", "queue": "c-q", "payload": {"c": "s-c-took"}});
    send(t, leader, &submit(C_WORKER, took)).await.ok(201);
    let claim = json!({"owner": "c-owner-took", "ttl_ms": TTL_MS});
    let claim = post("/v1/jobs/a/c-took/claim", C_WORKER, &claim);
    send(t, leader, &claim).await.ok(200);

    let mut checks = Checks::default();
    let probes = [
        (
            submit(A_WORKER, json!({"id": "a/c-took", "queue": "a-q"})),
            &["s-c-took", "c-q", "c-owner-took"][..],
        ),
        (
            submit(B_WORKER, json!({"id": "b/hidden", "queue": "b-q"})),
            &["s-b-hidden", "a-q"][..],
        ),
    ];
    for (req, secrets) in &probes {
        let (f, l) = both_raw(t, req).await;
        checks.check(differ(&f, &l).is_none(), || differ(&f, &l).unwrap());
        for a in [&f, &l] {
            let why = reveals(a, secrets);
            checks.check(why.is_none(), || why.unwrap());
        }
    }
    checks.finish("submits of ids held elsewhere");
}

// ---- c. hidden and missing are indistinguishable ------------------------------------

/// One probe about a job id (`{id}` in the path stands for it).
struct Probe {
    token: &'static str,
    method: &'static str,
    /// After `/v1/jobs/{id}`.
    suffix: &'static str,
    body: Option<Value>,
}

impl Probe {
    fn request(&self, id: &str) -> RawRequest {
        let path = format!("/v1/jobs/{id}{}", self.suffix);
        match &self.body {
            Some(b) => post(&path, self.token, b),
            None => RawRequest::new(self.method, &path).bearer(self.token),
        }
    }
}

/// An answer with `id` written as `{id}`: what must be equal for a hidden and a missing
/// job.
fn normalized(a: &Answer, id: &str) -> String {
    format!("{} {}", a.status, a.text.replace(id, "{id}"))
}

/// A view of what a caller can measure around its probes: the scope refusals of every
/// node, and the feed as `viewer` sees it on each node.
async fn measure(t: &Ctx, viewer: &str) -> Measured {
    t.settle().await;
    let mut feeds = Vec::new();
    for id in t.c.ids() {
        // New entries are told apart by position: the feed must not have wrapped.
        let all = last_seq(&feed(t, id, READER).await);
        assert!(
            all < FEED_LIMIT,
            "node {id}'s feed holds {all} entries: it may wrap"
        );
        feeds.push(entries(&feed(t, id, viewer).await));
    }
    (scope_refusals(t).await, feeds)
}

/// What moved between two [`measure`]s, each of `ids` written as `{id}`: the refusal
/// count and each node's new feed entries.
fn moved(from: &Measured, to: &Measured, ids: &[&str]) -> (u64, Vec<Vec<Entry>>) {
    // Longest first: `b/missing` must not eat the head of `b/missing2`.
    let mut ids = ids.to_vec();
    ids.sort_by_key(|id| std::cmp::Reverse(id.len()));
    let new = from
        .1
        .iter()
        .zip(&to.1)
        .map(|(a, b)| {
            b[a.len().min(b.len())..]
                .iter()
                .map(|(c, code, j)| {
                    let j = ids.iter().fold(j.clone(), |j, id| j.replace(id, "{id}"));
                    (c.clone(), code.clone(), j)
                })
                .collect()
        })
        .collect();
    (to.0 - from.0, new)
}

/// One round's answers — `(follower's, leader's, what was asked)`, the id written as
/// `{id}` — and what moved around it (refusals, `viewer`'s feed per node).
type Round = (Vec<(String, String, String)>, (u64, Vec<Vec<Entry>>));

/// Sends every probe with its id for this round (`hidden`, or each probe's missing id),
/// then the idempotency-key reuse of `keyed` (a probe and its missing id) on each node.
async fn round(
    t: &Ctx,
    checks: &mut Checks,
    viewer: &str,
    probes: &[(Probe, &str)],
    keyed: Option<(&Probe, &str)>,
    hidden: Option<&str>,
) -> Round {
    let start = measure(t, viewer).await;
    let mut answers = Vec::new();
    let mut ids = Vec::new();
    for (probe, missing) in probes {
        let id = hidden.unwrap_or(missing);
        ids.push(id);
        let (f, l) = both_raw(t, &probe.request(id)).await;
        checks.check(differ(&f, &l).is_none(), || differ(&f, &l).unwrap());
        answers.push((normalized(&f, id), normalized(&l, id), l.what.clone()));
    }
    if let Some((p, missing)) = keyed {
        let id = hidden.unwrap_or(missing);
        ids.push(id);
        let (leader, follower) = t.pair().await;
        for node in [follower, leader] {
            let key = format!(
                "key-{}-{node}",
                if hidden.is_some() { "hid" } else { "mis" }
            );
            t.name(&[key.as_str()]);
            let first = send(t, node, &with_key(p.request(id), &key)).await;
            // The same key with another body.
            let mut other = p.request(id);
            other.body = json!({"owner": "b-owner-1", "generation": 2})
                .to_string()
                .into_bytes();
            let second = send(t, node, &with_key(other, &key)).await;
            let what = format!("{} (key reused after {})", second.what, first.what);
            // The key is the client's own choice, as the id is.
            let (first, second) = (normalized(&first, id), normalized(&second, id));
            let unkeyed = |a: String| a.replace(&key, "{key}");
            answers.push((unkeyed(first), unkeyed(second), what));
        }
    }
    let end = measure(t, viewer).await;
    (answers, moved(&start, &end, &ids))
}

/// Runs `probes` (and an idempotency-key reuse, when `keyed` is given) with the hidden
/// id, then with each missing id; every answer, the refusal counter and `viewer`'s feed
/// must move alike.
async fn compare_hidden_and_missing(
    t: &Ctx,
    viewer: &str,
    probes: &[(Probe, &str)],
    hidden: &str,
    keyed: Option<(&Probe, &str)>,
) -> Checks {
    let mut checks = Checks::default();
    let h = round(t, &mut checks, viewer, probes, keyed, Some(hidden)).await;
    let m = round(t, &mut checks, viewer, probes, keyed, None).await;
    for (h, m) in h.0.iter().zip(&m.0) {
        checks.check((&h.0, &h.1) == (&m.0, &m.1), || {
            format!(
                "a hidden job and a missing one answer differently:\n  hidden:  {}\n    {}\n    {}\n  missing: {}\n    {}\n    {}",
                h.2, h.0, h.1, m.2, m.0, m.1
            )
        });
    }
    let (h, m) = (&h.1, &m.1);
    checks.check(h.0 == m.0, || {
        format!(
            "{REFUSED}{{reason=\"scope\"}} (all nodes) moved by {} for the hidden job {hidden} and by {} for missing ones",
            h.0, m.0
        )
    });
    checks.check(h.1 == m.1, || {
        format!(
            "{}'s view of the feed moved differently (new entries per node):\n  hidden:  {:?}\n  missing: {:?}",
            who(viewer),
            h.1,
            m.1
        )
    });
    let group = format!("[hidden {hidden} vs missing, seen by {}]", who(viewer));
    Checks(
        checks
            .0
            .into_iter()
            .map(|c| format!("{group} {c}"))
            .collect(),
    )
}

/// For B's tokens, `b/hidden` (in A's queue) and `b/missing` give the same answers,
/// metric and feed movements and idempotency behaviour; likewise for A's scoped admin
/// deleting `a/hidden-in-b` (in B's queue) and `a/missing-del`.
async fn hidden_and_missing_are_indistinguishable(t: Arc<Ctx>) {
    let t = &*t;
    t.name(&[
        "b/missing",
        "b/missing2",
        "b-owner-1",
        "a/hidden-in-b",
        "a/missing-del",
    ]);
    let held = || Some(json!({"owner": "b-owner-1", "generation": 1}));
    let read = |token| Probe {
        token,
        method: "GET",
        suffix: "",
        body: None,
    };
    let b_probes = [
        (read(B_READER), "b/missing"),
        (read(B_WORKER), "b/missing"),
        (
            Probe {
                token: B_WORKER,
                method: "DELETE",
                suffix: "",
                body: None,
            },
            "b/missing",
        ),
        (
            Probe {
                token: B_WORKER,
                method: "POST",
                suffix: "/renew",
                body: Some(json!({"owner": "b-owner-1", "generation": 1, "ttl_ms": TTL_MS})),
            },
            "b/missing",
        ),
        (
            Probe {
                token: B_WORKER,
                method: "POST",
                suffix: "/complete",
                body: held(),
            },
            "b/missing",
        ),
        (
            Probe {
                token: B_WORKER,
                method: "POST",
                suffix: "/release",
                body: held(),
            },
            "b/missing",
        ),
        // A claim of a missing id would create it in `default`, which B does not hold.
        (
            Probe {
                token: B_WORKER,
                method: "POST",
                suffix: "/claim",
                body: Some(json!({"owner": "b-owner-1", "ttl_ms": TTL_MS})),
            },
            "b/missing2",
        ),
    ];
    let complete = Probe {
        token: B_WORKER,
        method: "POST",
        suffix: "/complete",
        body: held(),
    };
    let mut checks = compare_hidden_and_missing(
        t,
        B_READER,
        &b_probes,
        "b/hidden",
        Some((&complete, "b/missing")),
    )
    .await;

    let a_probes = [
        (
            Probe {
                token: A_ADMIN,
                method: "DELETE",
                suffix: "",
                body: None,
            },
            "a/missing-del",
        ),
        (read(A_READER), "a/missing-del"),
    ];
    checks.0.extend(
        compare_hidden_and_missing(t, A_READER, &a_probes, "a/hidden-in-b", None)
            .await
            .0,
    );

    // Positive controls: the hidden jobs are there for the unscoped admin, the missing
    // ones are not; B reads its own job and A's admin deletes A's own.
    for (id, queue) in [("b/hidden", "a-q"), ("a/hidden-in-b", "b-q")] {
        let job = both_same_body(t, &get(&format!("/v1/jobs/{id}"), ADMIN)).await;
        assert_eq!(job.ok(200)["queue"], queue, "{}: {}", job.what, job.text);
    }
    for id in ["b/missing", "b/missing2", "a/missing-del"] {
        both(t, &get(&format!("/v1/jobs/{id}"), ADMIN))
            .await
            .0
            .err(404, "not_found");
    }
    t.name(&["b/c-own", "a/c-own-del"]);
    let (leader, _) = t.pair().await;
    let own = json!({"id": "b/c-own", "queue": "b-q"});
    send(t, leader, &submit(B_WORKER, own)).await.ok(201);
    both_same_body(t, &get("/v1/jobs/b/c-own", B_READER))
        .await
        .ok(200);
    let own = json!({"id": "a/c-own-del", "queue": "a-q"});
    send(t, leader, &submit(A_WORKER, own)).await.ok(201);
    let gone = send(t, leader, &delete("/v1/jobs/a/c-own-del", A_ADMIN)).await;
    gone.ok(204);
    checks.finish("hidden vs missing");
}

// ---- d. claim-next ------------------------------------------------------------------

/// B's claim-next on its own queue never hands out `x/foreign` (an id outside B's
/// prefix, put there by the admin): it drains B's own jobs, then answers 204, and still
/// gets a new job of B's; the unscoped admin then gets `x/foreign`.
async fn claim_next_hands_out_only_held_jobs(t: Arc<Ctx>) {
    let t = &*t;
    t.name(&["x/foreign", "b/d-1", "b-owner-d", "admin-owner-d"]);
    let (leader, _) = t.pair().await;
    let foreign = json!({"id": "x/foreign", "queue": "b-q", "payload": {"s": "s-x-foreign"}});
    send(t, leader, &submit(ADMIN, foreign)).await.ok(201);
    let claim = json!({"owner": "b-owner-d", "ttl_ms": TTL_MS});
    let next = post("/v1/queues/b-q/claim", B_WORKER, &claim);
    let mut checks = Checks::default();
    // Other sections may have left B jobs pending in b-q: take them all first.
    for _ in 0..100 {
        let a = send(t, leader, &next).await;
        if a.status == 204 {
            break;
        }
        let id = a.ok(200)["job_id"].as_str().unwrap_or_default().to_owned();
        checks.check(id.starts_with("b/"), || {
            format!("B's claim-next handed out {id:?}, not B's: {}", a.text)
        });
    }
    let (f, l) = both(t, &next).await;
    checks.check((f.status, l.status) == (204, 204), || {
        format!(
            "{}: {} {}; {} {}",
            l.what, f.status, f.text, l.status, l.text
        )
    });

    // B still gets its own jobs.
    let mine = json!({"id": "b/d-1", "queue": "b-q"});
    send(t, leader, &submit(B_WORKER, mine)).await.ok(201);
    let got = send(t, leader, &next).await;
    assert_eq!(got.ok(200)["job_id"], "b/d-1", "{}: {}", got.what, got.text);
    // And the unscoped admin gets the job B could not (after `a/hidden-in-b`, seeded
    // into b-q before it and not B's either).
    let admin = json!({"owner": "admin-owner-d", "ttl_ms": TTL_MS});
    let admin = post("/v1/queues/b-q/claim", ADMIN, &admin);
    let mut got_ids = Vec::new();
    for _ in 0..10 {
        let got = send(t, leader, &admin).await;
        if got.status == 204 {
            break;
        }
        let id = got.ok(200)["job_id"].as_str().unwrap_or_default();
        got_ids.push(id.to_owned());
    }
    checks.check(got_ids.iter().any(|id| id == "x/foreign"), || {
        format!(
            "the unscoped admin's claim-next on b-q got {got_ids:?}, not x/foreign \
             (B holding it already would explain this)"
        )
    });
    checks.finish("claim-next");
}

// ---- e. one id, one meaning ---------------------------------------------------------

/// Paths with `.`/`..` segments (plain and percent-encoded) get the same answer from the
/// follower and the leader, and never A's job.
async fn dot_segments_mean_one_id_on_every_node(t: Arc<Ctx>) {
    let t = &*t;
    t.name(&["a/x", "b/x", "b-owner-e"]);
    let (leader, _) = t.pair().await;
    let ax = json!({"id": "a/x", "queue": "a-q", "payload": {"s": "s-a-x"}});
    send(t, leader, &submit(A_WORKER, ax)).await.ok(201);
    let bx = json!({"id": "b/x", "queue": "b-q", "payload": {"s": "s-b-x"}});
    send(t, leader, &submit(B_WORKER, bx)).await.ok(201);
    // Positive control: each tenant reads its own job on both nodes.
    both_same_body(t, &get("/v1/jobs/a/x", A_READER))
        .await
        .ok(200);
    both_same_body(t, &get("/v1/jobs/b/x", B_READER))
        .await
        .ok(200);

    let held = json!({"owner": "b-owner-e", "generation": 1});
    let claim = json!({"owner": "b-owner-e", "ttl_ms": TTL_MS});
    let mut probes = Vec::new();
    for token in [B_READER, B_WORKER] {
        for path in [
            "/v1/jobs/b/../a/x",
            "/v1/jobs/b/%2e%2e/a/x",
            "/v1/jobs/b/%2E%2E/a/x",
            "/v1/jobs/b/.%2e/a/x",
            "/v1/jobs/b/./x",
            "/v1/jobs/b/%2e/x",
        ] {
            probes.push(get(path, token));
        }
    }
    probes.push(post("/v1/jobs/b/../a/x/complete", B_WORKER, &held));
    probes.push(post("/v1/jobs/b/%2e%2e/a/x/complete", B_WORKER, &held));
    probes.push(post("/v1/jobs/b/../a/x/claim", B_WORKER, &claim));
    let mut checks = Checks::default();
    for req in &probes {
        let (f, l) = both_raw(t, req).await;
        checks.check(differ(&f, &l).is_none(), || differ(&f, &l).unwrap());
        for a in [&f, &l] {
            let leak = (a.status == 200 && a.text.contains("s-a-x"))
                || a.body["id"] == "a/x"
                || a.body["job_id"] == "a/x";
            checks.check(!leak, || format!("{}: B got A's job: {}", a.what, a.text));
        }
    }
    checks.finish("dot segments");
    // A's job is as A left it.
    let ax = both_same_body(t, &get("/v1/jobs/a/x", ADMIN)).await;
    let job = ax.ok(200);
    assert_eq!(
        (&job["state"], &job["generation"]),
        (&json!("pending"), &json!(0)),
        "{}",
        ax.text
    );
}

// ---- e2. page tokens ----------------------------------------------------------------

/// A single character of a page token changed (its first: every bit of it counts).
fn altered(token: &str) -> String {
    const HEX: &str = "0123456789abcdef";
    let mut chars: Vec<char> = token.chars().collect();
    let c = chars[0];
    chars[0] = match HEX.find(c) {
        Some(i) => HEX.as_bytes()[(i + 1) % 16] as char,
        None if c.is_ascii_alphanumeric() => {
            if c == 'z' || c == 'Z' || c == '9' {
                'a'
            } else {
                (c as u8 + 1) as char
            }
        }
        None => 'A',
    };
    chars.into_iter().collect()
}

/// A pages through exactly its own jobs (B's created between them), on both nodes; its
/// page tokens do not work for B, do not survive an altered character, and are not the
/// handles an unscoped list hands out at the same positions.
async fn page_tokens_are_the_tenants_own(t: Arc<Ctx>) {
    let t = &*t;
    let (leader, follower) = t.pair().await;
    for i in 1..=4 {
        let (a, b) = (format!("a/p{i}"), format!("b/p{i}"));
        t.name(&[a.as_str(), b.as_str()]);
        send(
            t,
            leader,
            &submit(A_WORKER, json!({"id": a, "queue": "a-q"})),
        )
        .await
        .ok(201);
        send(
            t,
            leader,
            &submit(B_WORKER, json!({"id": b, "queue": "b-q"})),
        )
        .await
        .ok(201);
    }
    let (everything, unscoped_tokens) = walk(t, leader, READER, 1).await;
    let held = |id: &String| id.starts_with("a/");
    let (admin_all, _) = walk(t, leader, ADMIN, 1000).await;
    let a_queue: BTreeSet<String> = {
        let page = send(t, leader, &get("/v1/jobs?queue=a-q&limit=1000", ADMIN)).await;
        page.ok(200)["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let want: BTreeSet<String> = admin_all
        .iter()
        .filter(|id| held(id) && a_queue.contains(*id))
        .cloned()
        .collect();
    assert!(want.len() >= 4, "A's jobs: {want:?}");
    assert_eq!(
        everything, admin_all,
        "the unscoped reader and admin list alike"
    );

    let mut a_tokens = BTreeMap::new();
    for node in [follower, leader] {
        let (ids, tokens) = walk(t, node, A_READER, 1).await;
        let seen: BTreeSet<String> = ids.iter().cloned().collect();
        assert_eq!(
            seen.len(),
            ids.len(),
            "A's pages on node {node} repeat a job: {ids:?}"
        );
        assert_eq!(seen, want, "A's pages on node {node} visit {ids:?}");
        for (last, tok) in tokens {
            if let Some(id) = last {
                a_tokens.insert(id, tok);
            }
        }
    }
    let tok = a_tokens.get("a/p2").expect("a page ending at a/p2").clone();
    // A's token works for A (positive), not for B, nor altered.
    both(
        t,
        &get(&format!("/v1/jobs?limit=1&page_token={tok}"), A_READER),
    )
    .await
    .0
    .ok(200);
    let mut checks = Checks::default();
    let as_b = get(&format!("/v1/jobs?limit=1&page_token={tok}"), B_READER);
    let altered_tok = altered(&tok);
    let bad = get(
        &format!("/v1/jobs?limit=1&page_token={altered_tok}"),
        A_READER,
    );
    for req in [&as_b, &bad] {
        let (f, l) = both_raw(t, req).await;
        for a in [&f, &l] {
            checks.check(a.shape() == (400, "invalid_argument".into()), || {
                format!(
                    "{}: {} {}, not 400 invalid_argument",
                    a.what, a.status, a.text
                )
            });
        }
    }
    // Not the global handles: the unscoped list's token after the same job differs.
    let unscoped: BTreeMap<String, String> = unscoped_tokens
        .into_iter()
        .filter_map(|(l, t)| Some((l?, t)))
        .collect();
    for i in 1..=3 {
        let id = format!("a/p{i}");
        let (a, u) = (&a_tokens[&id], &unscoped[&id]);
        checks.check(a != u, || {
            format!("A's page token after {id} is the unscoped list's handle {u:?}")
        });
    }
    checks.finish("page tokens");
}

// ---- f. membership and snapshots ----------------------------------------------------

/// The scoped admin may neither change membership nor download a snapshot; the unscoped
/// admin passes auth on all three.
async fn membership_and_snapshots_need_an_unscoped_admin(t: Arc<Ctx>) {
    let t = &*t;
    // Node 1's own id and address: accepted, it changes nothing (409: a voter already).
    // `{"id":9,"addr":"127.0.0.1:9"}` would, if ever let through, add an unreachable
    // learner and wait 30 s for it.
    let add = json!({"id": 1, "addr": t.c.addr(1).to_string()});
    let asks = [
        post("/v1/cluster/nodes", A_ADMIN, &add),
        delete("/v1/cluster/nodes/9", A_ADMIN),
        get("/v1/cluster/snapshot", A_ADMIN),
    ];
    let mut checks = Checks::default();
    for req in &asks {
        let (f, l) = both_raw(t, req).await;
        for a in [&f, &l] {
            checks.check(a.shape() == (403, "permission_denied".into()), || {
                format!(
                    "{}: {} {}, not 403 permission_denied",
                    a.what, a.status, a.text
                )
            });
        }
    }
    let unscoped = [
        post("/v1/cluster/nodes", ADMIN, &add),
        delete("/v1/cluster/nodes/9", ADMIN),
    ];
    for req in &unscoped {
        let (f, l) = both_raw(t, req).await;
        for a in [&f, &l] {
            let past_auth = (400..500).contains(&a.status) && ![401, 403].contains(&a.status);
            checks.check(past_auth, || {
                format!("{}: {} {}, not past auth", a.what, a.status, a.text)
            });
        }
    }
    let (f, l) = both_raw(t, &get("/v1/cluster/snapshot", ADMIN)).await;
    for a in [&f, &l] {
        checks.check(a.status == 200, || format!("{}: {}", a.what, a.status));
    }
    checks.finish("membership and snapshots");
}

// ---- g. metrics ---------------------------------------------------------------------

/// No node's `/metrics` names a job id, owner or idempotency key the sections sent.
async fn metrics_are_tenant_free(t: Arc<Ctx>) {
    let t = &*t;
    let named: Vec<String> = t.named.lock().unwrap().iter().cloned().collect();
    assert!(named.len() > 20, "the sections named {named:?}");
    for id in t.c.ids() {
        let m = send(t, id, &get("/metrics", READER)).await;
        m.ok(200);
        for name in &named {
            assert!(
                !m.text.contains(name.as_str()),
                "node {id}'s /metrics names {name:?}"
            );
        }
        assert!(
            m.text.contains(REFUSED),
            "node {id}'s /metrics lacks {REFUSED}"
        );
    }
}

// ---- the test -----------------------------------------------------------------------

/// Seeds what several sections read: `b/hidden` (B's prefix, A's queue) and
/// `a/hidden-in-b` (A's prefix, B's queue), both put there by the unscoped admin.
async fn seed(t: &Ctx) {
    t.name(&["b/hidden", "a/hidden-in-b"]);
    let (leader, _) = t.pair().await;
    let hidden = json!({"id": "b/hidden", "queue": "a-q", "payload": {"secret": "s-b-hidden"}});
    send(t, leader, &submit(ADMIN, hidden)).await.ok(201);
    let other = json!({"id": "a/hidden-in-b", "queue": "b-q", "payload": {"secret": "s-a-hidden"}});
    send(t, leader, &submit(ADMIN, other)).await.ok(201);
}

/// Runs one section as its own task: a failure is recorded, not fatal to the others.
async fn section<F, Fut>(t: &Arc<Ctx>, failed: &mut Vec<&'static str>, name: &'static str, f: F)
where
    F: FnOnce(Arc<Ctx>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    eprintln!("tenants: --- {name}");
    match tokio::spawn(f(t.clone())).await {
        Ok(()) => eprintln!("tenants: --- {name}: ok"),
        Err(e) => {
            let why = if e.is_panic() {
                "its panic is above"
            } else {
                "cancelled"
            };
            eprintln!("tenants: --- {name}: FAILED ({why})");
            failed.push(name);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_see_and_touch_only_what_they_hold() {
    let t = Arc::new(start().await);
    seed(&t).await;
    let mut failed = Vec::new();
    section(
        &t,
        &mut failed,
        "a. rejections feed is scoped",
        rejections_feed_is_scoped,
    )
    .await;
    section(
        &t,
        &mut failed,
        "b. submit of an id held elsewhere shows no job",
        submit_of_a_held_elsewhere_id_shows_no_job,
    )
    .await;
    section(
        &t,
        &mut failed,
        "c. hidden and missing are indistinguishable",
        hidden_and_missing_are_indistinguishable,
    )
    .await;
    section(
        &t,
        &mut failed,
        "d. claim-next hands out only held jobs",
        claim_next_hands_out_only_held_jobs,
    )
    .await;
    section(
        &t,
        &mut failed,
        "e. dot segments mean one id on every node",
        dot_segments_mean_one_id_on_every_node,
    )
    .await;
    section(
        &t,
        &mut failed,
        "e2. page tokens are the tenant's own",
        page_tokens_are_the_tenants_own,
    )
    .await;
    section(
        &t,
        &mut failed,
        "f. membership and snapshots need an unscoped admin",
        membership_and_snapshots_need_an_unscoped_admin,
    )
    .await;
    section(
        &t,
        &mut failed,
        "g. metrics are tenant-free",
        metrics_are_tenant_free,
    )
    .await;
    assert!(
        failed.is_empty(),
        "failed sections (each one's panic is printed above): {failed:#?}\n{}",
        t.c.log_tails(20)
    );
}
