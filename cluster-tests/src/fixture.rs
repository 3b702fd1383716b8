//! The chaos tests' process cluster: [`leasehold_proc_cluster`]'s [`ProcCluster`] (the
//! one `leasehold bench failover` runs on too), re-exported under the paths the tests
//! use, plus the two end-of-run reads only the checker needs — every job's final state
//! and every replica's digest — which speak in [`crate::history`]'s types and through
//! the Rust client, so they live here and not in the shared crate — and
//! [`cluster_cli`], the operator's `leasehold cluster …` as the tests run it.
//! The reads work on any [`Nodes`] (processes or containers).
//! Imports the shared crate, the client, `history` and `nodes`; the scenarios and tests
//! import it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

pub use leasehold_proc_cluster::{
    free_port, leasehold_bin, Added, ClusterOpts, NodeSpec, ProcCluster, Status, POLL,
};

use crate::history::{FeedEvent, FinalJob, ReplicaDigest, ReplicaFeed};
use crate::nodes::Nodes;

/// Three nodes of `bin` serving with the auth file `tokens` (written 0600 into a temp dir
/// that lives as long as the returned one), dialing each other directly, with slow
/// elections (a leader change mid-probe on a loaded two-core box would turn comparisons
/// of answers into noise), probed with `probe_token`; formed and at this build's entry
/// version ([`wait_activated`]) within `bound`. `name` prefixes the temp dirs.
pub async fn start_with_auth(
    name: &str,
    bin: std::path::PathBuf,
    tokens: &str,
    probe_token: &str,
    bound: Duration,
) -> (ProcCluster, tempfile::TempDir) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix(&format!("leasehold-{name}-auth-"))
        .tempdir()
        .unwrap();
    let auth = dir.path().join("tokens.toml");
    std::fs::write(&auth, tokens).unwrap();
    std::fs::set_permissions(&auth, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut opts = ClusterOpts::new(bin);
    opts.temp_prefix = format!("leasehold-{name}-");
    opts.link_proxies = false;
    opts.election_timeout_min_ms = 1_500;
    opts.election_timeout_max_ms = 3_000;
    opts.probe_timeout = Duration::from_secs(3);
    opts.serve_args_extra = vec![format!("--auth-file={}", auth.display())];
    opts.probe_token = Some(probe_token.into());
    let c = ProcCluster::start(opts, bound).await;
    wait_activated(&c, bound).await;
    (c, dir)
}

/// Waits until every node of `c` applied the activation of this build's entry version,
/// which the leader proposes by itself about a second after the cluster forms; panics
/// with each node's cluster version after `bound`. Before it, the leader judges as a
/// cluster being upgraded does (older rules, no newer commands).
pub async fn wait_activated(c: &ProcCluster, bound: Duration) {
    let want = u64::from(leasehold_statemachine::ENTRY_VERSION_MAX);
    let deadline = Instant::now() + bound;
    loop {
        let mut seen = Vec::new();
        for id in c.ids() {
            let v: Option<serde_json::Value> = c.get_json(id, "/v1/cluster").await;
            seen.push(v.and_then(|v| v["cluster_version"].as_u64()));
        }
        if seen.iter().all(|v| *v == Some(want)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "cluster version {want} not active on every node within {bound:?}: {seen:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// `GET path` of node `id` within `timeout`: its status and JSON body (`Null` when the
/// body is not JSON); `None` when it does not answer.
pub async fn get_status(
    c: &ProcCluster,
    id: u64,
    path: &str,
    timeout: Duration,
) -> Option<(u16, serde_json::Value)> {
    let http = reqwest::Client::builder().timeout(timeout).build().ok()?;
    let resp = http
        .get(format!("{}{path}", c.endpoint(id)))
        .send()
        .await
        .ok()?;
    let status = resp.status().as_u16();
    Some((status, resp.json().await.unwrap_or_default()))
}

/// Until node `id`, (re)started, answers `/v1/cluster` as itself, within `bound`; fails
/// at once, with the nodes' logs, if its process ended (it refused to start, its port
/// was taken meanwhile).
pub async fn wait_answering(c: &mut ProcCluster, id: u64, bound: Duration) {
    let deadline = Instant::now() + bound;
    loop {
        if let Some((_, v)) =
            get_status(c, id, "/v1/cluster", POLL.max(Duration::from_secs(2))).await
        {
            if v["node_id"].as_u64() == Some(id) {
                return;
            }
        }
        if let Some(status) = c.try_exit_status(id) {
            panic!("node {id} exited ({status})\n{}", c.log_tails(30));
        }
        assert!(
            Instant::now() < deadline,
            "node {id} did not answer within {bound:?}\n{}",
            c.log_tails(30)
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Bound on one `leasehold cluster …` run. Its client gives up long before (12 s per
/// attempt, a few attempts); past this the process is killed and the call fails, saying
/// so, rather than hold a test up with nothing printed (issue 44, item 7).
pub const CLI_BOUND: Duration = Duration::from_secs(90);

/// `leasehold cluster ARGS --endpoints=ADDR` run with `bin`, as an operator runs it:
/// whether it succeeded, and its stdout then stderr. Bounded by [`CLI_BOUND`]; it blocks
/// the calling thread meanwhile (from async code, call it through `spawn_blocking`).
pub fn cluster_cli(bin: &Path, addr: &str, args: &[&str]) -> (bool, String) {
    let mut child = Command::new(bin)
        .arg("cluster")
        .args(args)
        .arg(format!("--endpoints={addr}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running leasehold cluster");
    let deadline = std::time::Instant::now() + CLI_BOUND;
    let mut timed_out = false;
    while child
        .try_wait()
        .expect("waiting for leasehold cluster")
        .is_none()
    {
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            timed_out = true;
            break;
        }
        std::thread::sleep(POLL);
    }
    let out = child
        .wait_with_output()
        .expect("reading leasehold cluster's output");
    let mut text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if timed_out {
        text.push_str(&format!(
            "\n(leasehold cluster {args:?} did not finish within {CLI_BOUND:?}: killed)"
        ));
    }
    (out.status.success() && !timed_out, text)
}

/// Every node's digest, once all are running, answer, and agree on applied index and
/// digest (or, after `bound`, what they last said: the checker judges it).
pub async fn converged_digests(c: &impl Nodes, bound: Duration) -> Vec<ReplicaDigest> {
    let deadline = Instant::now() + bound;
    loop {
        let mut all = Vec::new();
        for id in c.ids() {
            let d: Option<ReplicaDigest> = c.get_json(id, "/v1/cluster/digest").await;
            all.extend(d);
        }
        let full = all.len() == c.ids().len();
        let same = all
            .windows(2)
            .all(|w| (w[0].applied_index, &w[0].digest) == (w[1].applied_index, &w[1].digest));
        if (full && same) || Instant::now() >= deadline {
            return all;
        }
        tokio::time::sleep(POLL * 4).await;
    }
}

/// One page of `GET /v1/events`, as far as the checker reads it.
#[derive(serde::Deserialize)]
struct FeedPage {
    events: Vec<FeedEvent>,
    next_after: u64,
}

/// Every event each node's feed holds, page by page (after [`converged_digests`]: the
/// nodes applied the same log). A node that stops answering mid-read is left out.
pub async fn feeds(c: &impl Nodes) -> Vec<ReplicaFeed> {
    let mut out = Vec::new();
    'nodes: for node_id in c.ids() {
        let (mut events, mut after) = (Vec::new(), 0);
        loop {
            let path = format!("/v1/events?after={after}&limit=1000");
            let Some(page) = c.get_json::<FeedPage>(node_id, &path).await else {
                continue 'nodes;
            };
            if page.events.is_empty() {
                break;
            }
            after = page.next_after;
            events.extend(page.events);
        }
        out.push(ReplicaFeed { node_id, events });
    }
    out
}

/// Reads each job through the cluster (linearizable, via any node), retrying each
/// read until `bound`. A job that does not exist is left out.
pub async fn final_jobs(c: &impl Nodes, ids: &[String], bound: Duration) -> Vec<FinalJob> {
    let client = leasehold_client::Client::new(c.endpoints()).expect("client config");
    let mut out = Vec::new();
    for id in ids {
        let deadline = Instant::now() + bound;
        loop {
            match client.get_job(id).await {
                Ok(j) => {
                    out.push(FinalJob {
                        id: j.id.clone(),
                        generation: j.generation,
                        state: j.state.as_str().to_owned(),
                        owner: j.owner.clone(),
                    });
                    break;
                }
                Err(e) if e.code() == Some(leasehold_statemachine::ErrorCode::NotFound) => break,
                Err(e) => {
                    assert!(Instant::now() < deadline, "reading job {id}: {e}");
                    tokio::time::sleep(POLL).await;
                }
            }
        }
    }
    out
}
