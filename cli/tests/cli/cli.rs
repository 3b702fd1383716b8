//! The `leasehold` binary's client commands (`job`, `queue`, `cluster`, `worker run`) against an
//! in-process three-node cluster. Every run of the binary is bounded by a timeout.

use std::time::Duration;

use crate::binary::{self, Out};
use crate::common::{self, TestCluster};
use leasehold_client::{ClusterStatus, Job, JobPage, JobState};
use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;

/// Bound on one CLI invocation (a short command).
const CMD_WAIT: Duration = Duration::from_secs(30);
/// Bound on a `worker run` with a few jobs.
const WORKER_WAIT: Duration = Duration::from_secs(60);

async fn leasehold(c: &TestCluster, args: &[&str], limit: Duration) -> Out {
    let mut cmd = binary::leasehold(args);
    cmd.env("LEASEHOLD_ENDPOINTS", c.endpoints());
    binary::run(cmd, limit).await
}

/// Runs a command that must succeed and print one JSON object; returns it parsed as `T`.
async fn json_of<T: serde::de::DeserializeOwned>(c: &TestCluster, args: &[&str]) -> T {
    let mut all = args.to_vec();
    all.extend(["--output", "json"]);
    let out = leasehold(c, &all, CMD_WAIT).await;
    assert_eq!(
        out.code, 0,
        "leasehold {all:?} failed: stdout={:?} stderr={:?}",
        out.stdout, out.stderr
    );
    let line = out.stdout.trim();
    assert_eq!(line.lines().count(), 1, "one JSON line expected: {line:?}");
    serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("leasehold {all:?} printed {line:?}, not the object: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn submit_get_claim_complete_and_errors() {
    let c = TestCluster::start().await;
    c.wait_for_leader().await;

    let job: Job = json_of(
        &c,
        &[
            "job",
            "submit",
            "--id",
            "cli-1",
            "--queue",
            "q1",
            "--payload",
            r#"{"n":1}"#,
            "--max-attempts",
            "5",
        ],
    )
    .await;
    assert_eq!(job.id, "cli-1");
    assert_eq!(job.queue, "q1");
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(job.max_attempts, Some(5));
    assert_eq!(job.payload.clone().unwrap(), json!({"n":1}));

    let got: Job = json_of(&c, &["job", "get", "cli-1"]).await;
    assert_eq!(got.id, "cli-1");
    assert_eq!(got.state, JobState::Pending);

    // The Lease object, as docs/api.md spells it.
    let lease: Value = json_of(
        &c,
        &[
            "job", "claim", "cli-1", "--owner", "w1", "--ttl-ms", "10000",
        ],
    )
    .await;
    for field in [
        "job_id",
        "owner",
        "generation",
        "lease_until_ms",
        "ttl_ms",
        "cluster_time_ms",
        "log_index",
    ] {
        assert!(lease.get(field).is_some(), "lease lacks {field}: {lease}");
    }
    let lease: leasehold_statemachine::Lease = serde_json::from_value(lease).unwrap();
    assert_eq!(lease.owner, "w1");
    assert_eq!(lease.lease_until_ms, lease.cluster_time_ms + lease.ttl_ms);
    let gen = lease.generation.to_string();

    let renewed: leasehold_statemachine::Lease = json_of(
        &c,
        &[
            "job",
            "renew",
            "cli-1",
            "--owner",
            "w1",
            "--generation",
            &gen,
        ],
    )
    .await;
    assert_eq!(renewed.generation, lease.generation);

    // A stale generation: one line on stderr, exit 1, nothing on stdout.
    let stale = (lease.generation + 5).to_string();
    let out = leasehold(
        &c,
        &[
            "job",
            "complete",
            "cli-1",
            "--owner",
            "w1",
            "--generation",
            &stale,
        ],
        CMD_WAIT,
    )
    .await;
    assert_eq!(out.code, 1, "stderr: {}", out.stderr);
    assert!(out.stdout.is_empty(), "stdout: {:?}", out.stdout);
    assert_eq!(out.stderr.lines().count(), 1, "stderr: {:?}", out.stderr);
    assert!(
        out.stderr.starts_with("error: stale_lease: "),
        "stderr: {:?}",
        out.stderr
    );

    let done: Job = json_of(
        &c,
        &[
            "job",
            "complete",
            "cli-1",
            "--owner",
            "w1",
            "--generation",
            &gen,
            "--result",
            r#"{"ok":true}"#,
        ],
    )
    .await;
    assert_eq!(done.state, JobState::Completed);
    assert_eq!(done.owner.as_deref(), Some("w1"));
    assert_eq!(done.result.clone().unwrap(), json!({"ok":true}));

    let page: JobPage = json_of(
        &c,
        &["job", "list", "--queue", "q1", "--state", "completed"],
    )
    .await;
    assert_eq!(page.jobs.len(), 1);
    assert_eq!(page.jobs[0].id, "cli-1");

    // More errors: not found (1), bad JSON argument (2), usage (2), no node (3).
    let out = leasehold(&c, &["job", "get", "nope"], CMD_WAIT).await;
    assert_eq!(out.code, 1);
    assert_eq!(out.stderr.lines().count(), 1, "stderr: {:?}", out.stderr);
    assert!(
        out.stderr.starts_with("error: not_found: "),
        "{:?}",
        out.stderr
    );
    let out = leasehold(&c, &["job", "submit", "--payload", "{nope"], CMD_WAIT).await;
    assert_eq!(out.code, 2, "stderr: {}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "stderr: {:?}", out.stderr);
    let out = leasehold(&c, &["job", "claim", "x", "--owner", "w"], CMD_WAIT).await;
    assert_eq!(out.code, 2, "a missing --ttl-ms is a usage error");
    let out = leasehold(
        &c,
        &["job", "get", "x", "--endpoints", "127.0.0.1:1"],
        CMD_WAIT,
    )
    .await;
    assert_eq!(out.code, 3, "stderr: {}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "stderr: {:?}", out.stderr);
    assert!(
        out.stderr.starts_with("error: unavailable"),
        "{:?}",
        out.stderr
    );

    // Delete.
    let out = leasehold(&c, &["job", "delete", "cli-1"], CMD_WAIT).await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    let out = leasehold(&c, &["job", "get", "cli-1"], CMD_WAIT).await;
    assert_eq!(out.code, 1);

    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_status_parses() {
    let c = TestCluster::start().await;
    c.wait_for_leader().await;
    let raw: Value = json_of(&c, &["cluster", "status"]).await;
    for field in [
        "node_id",
        "leader_id",
        "term",
        "voters",
        "learners",
        "nodes",
        "commit_index",
        "applied_index",
        "cluster_time_ms",
    ] {
        assert!(
            raw.get(field).is_some(),
            "cluster status lacks {field}: {raw}"
        );
    }
    // (cluster_time_ms may still be 0 on a node that has applied no stamped entry yet.)
    let s: ClusterStatus = serde_json::from_value(raw).unwrap();
    assert_eq!(s.voters.len(), 3);
    assert_eq!(s.nodes.len(), 3);
    assert!(s.leader_id.is_some());
    assert!(s.term >= 1);
    let out = leasehold(&c, &["cluster", "status"], CMD_WAIT).await;
    assert_eq!(out.code, 0, "stderr: {}", out.stderr);
    assert!(out.stdout.contains("leader_id:"), "{}", out.stdout);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_run_completes_jobs_with_results() {
    let c = TestCluster::start().await;
    c.wait_for_leader().await;
    for i in 1..=3 {
        let id = format!("w-{i}");
        let payload = format!(r#"{{"i":{i}}}"#);
        let _: Job = json_of(
            &c,
            &[
                "job",
                "submit",
                "--id",
                &id,
                "--queue",
                "wq",
                "--payload",
                &payload,
            ],
        )
        .await;
    }
    let out = leasehold(
        &c,
        &[
            "worker",
            "run",
            "--queue",
            "wq",
            "--ttl-ms",
            "2000",
            "--max-jobs",
            "3",
            "--",
            "sh",
            "-c",
            r#"echo "payload $LEASEHOLD_PAYLOAD gen $LEASEHOLD_GENERATION"; echo "{\"n\":\"$LEASEHOLD_JOB_ID\",\"p\":$LEASEHOLD_PAYLOAD}""#,
        ],
        WORKER_WAIT,
    )
    .await;
    assert_eq!(
        out.code, 0,
        "worker failed: stdout={} stderr={}",
        out.stdout, out.stderr
    );

    let page: JobPage = json_of(&c, &["job", "list", "--queue", "wq"]).await;
    assert_eq!(page.jobs.len(), 3, "{page:?}");
    for job in &page.jobs {
        assert_eq!(job.state, JobState::Completed, "{job:?}");
        let result: Value = job.result.clone().expect("a result");
        let payload: Value = job.payload.clone().unwrap();
        assert_eq!(result, json!({"n": job.id, "p": payload}), "{job:?}");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_releases_a_failed_job() {
    let c = TestCluster::start().await;
    c.wait_for_leader().await;
    let _: Job = json_of(&c, &["job", "submit", "--id", "f-1", "--queue", "fq"]).await;
    let out = leasehold(
        &c,
        &[
            "worker",
            "run",
            "--queue",
            "fq",
            "--ttl-ms",
            "2000",
            "--max-jobs",
            "1",
            "--",
            "sh",
            "-c",
            "exit 3",
        ],
        WORKER_WAIT,
    )
    .await;
    assert_eq!(out.code, 0, "stderr={}", out.stderr);
    let job: Job = json_of(&c, &["job", "get", "f-1"]).await;
    assert_eq!(job.state, JobState::Pending, "{job:?}");
    assert_eq!(job.owner, None);
    assert_eq!(job.generation, 1);
    c.shutdown().await;
}

/// Polls for a file to exist, at most `limit`; the time it was seen.
async fn wait_file(path: &std::path::Path, limit: Duration) -> tokio::time::Instant {
    let start = tokio::time::Instant::now();
    loop {
        if path.exists() {
            return tokio::time::Instant::now();
        }
        assert!(
            start.elapsed() < limit,
            "{} did not appear within {limit:?}",
            path.display()
        );
        tokio::time::sleep(common::POLL).await;
    }
}

fn spawn_worker(c: &TestCluster, args: &[&str]) -> tokio::process::Child {
    binary::leasehold(args)
        .env("LEASEHOLD_ENDPOINTS", c.endpoints())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawning the worker")
}

async fn finish(child: tokio::process::Child, limit: Duration) -> Out {
    tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the worker did not exit within {limit:?}"))
        .expect("waiting for the worker")
        .into()
}

/// A child that marks `started`, and `term` when it gets SIGTERM.
fn marking_child(dir: &std::path::Path) -> String {
    format!(
        "trap 'echo term > {d}/term; exit 143' TERM; echo started > {d}/started; sleep 30 & wait",
        d = dir.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_kills_its_child_before_the_deadline_when_renewals_fail() {
    let mut c = TestCluster::start().await;
    c.wait_for_leader().await;
    let _: Job = json_of(&c, &["job", "submit", "--id", "k-1", "--queue", "kq"]).await;
    let dir = tempfile::tempdir().unwrap();
    let script = marking_child(dir.path());
    let ttl_ms = 3000u64;
    let ttl = ttl_ms.to_string();
    let worker = spawn_worker(
        &c,
        &[
            "worker",
            "run",
            "--queue",
            "kq",
            "--ttl-ms",
            &ttl,
            "--max-jobs",
            "1",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    wait_file(&dir.path().join("started"), CMD_WAIT).await;
    // Let at least one renew happen, then take the whole cluster away.
    tokio::time::sleep(Duration::from_millis(ttl_ms / 2)).await;
    let stopped_at = tokio::time::Instant::now();
    for id in c.ids.clone() {
        c.stop(id).await;
    }
    // The last renew was sent before `stopped_at`, so the local deadline is before
    // stopped_at + ttl; the child must have had SIGTERM by then.
    let termed_at = wait_file(&dir.path().join("term"), Duration::from_millis(ttl_ms) * 3).await;
    assert!(
        termed_at < stopped_at + Duration::from_millis(ttl_ms),
        "SIGTERM came {:?} after the cluster stopped (ttl {ttl_ms} ms)",
        termed_at - stopped_at
    );
    let out = finish(worker, WORKER_WAIT).await;
    assert_eq!(out.code, 0, "stderr={}", out.stderr);
    assert!(out.stderr.contains("lease lost"), "stderr={}", out.stderr);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worker_stops_on_sigint_and_releases_its_job() {
    let c = TestCluster::start().await;
    c.wait_for_leader().await;
    let _: Job = json_of(&c, &["job", "submit", "--id", "s-1", "--queue", "sq"]).await;
    let dir = tempfile::tempdir().unwrap();
    let script = marking_child(dir.path());
    let worker = spawn_worker(
        &c,
        &[
            "worker", "run", "--queue", "sq", "--ttl-ms", "5000", "--", "sh", "-c", &script,
        ],
    );
    wait_file(&dir.path().join("started"), CMD_WAIT).await;
    let leased: Job = json_of(&c, &["job", "get", "s-1"]).await;
    assert_eq!(leased.state, JobState::Leased);
    let pid = worker.id().expect("worker pid");
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = finish(worker, WORKER_WAIT).await;
    assert_eq!(out.code, 0, "stderr={}", out.stderr);
    assert!(dir.path().join("term").exists(), "the child got no SIGTERM");
    let job: Job = json_of(&c, &["job", "get", "s-1"]).await;
    assert_eq!(job.state, JobState::Pending, "{job:?}");
    assert_eq!(job.owner, None, "{job:?}");
    c.shutdown().await;
}

/// Runs the binary with no cluster, `RUST_BACKTRACE=1` set.
async fn leasehold_alone(args: &[&str]) -> Out {
    let mut cmd = binary::leasehold(args);
    cmd.env("RUST_BACKTRACE", "1");
    binary::run(cmd, CMD_WAIT).await
}

/// Command lines that are each a user error, with what kind; files go under `dir`.
fn user_errors(dir: &std::path::Path) -> Vec<(&'static str, Vec<String>)> {
    let data = format!("--data-dir={}", dir.join("data").display());
    let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    let serve = |extra: &str| {
        words(&format!(
            "serve --id=1 --listen=127.0.0.1:0 --peer=1=127.0.0.1:1 {data} {extra}"
        ))
    };
    vec![
        (
            "bad flag value",
            words("job claim x --owner=w --ttl-ms=soon"),
        ),
        ("missing flag", words("job claim x")),
        (
            "unreadable file",
            serve("--auth-file=/nonexistent/tokens.toml"),
        ),
        (
            "unreadable file",
            serve("--peer-secret-file=/nonexistent/secret"),
        ),
        ("refused mode", serve("--worker-threads=0")),
        ("refused mode", words("bench failover --trials=0")),
        (
            "unreadable file",
            words(&format!(
                "snapshot restore /nonexistent/backup {data} --id=1 --peer=1=127.0.0.1:1"
            )),
        ),
        (
            "unreachable cluster",
            words("--endpoints=127.0.0.1:1 job get x"),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_error_is_one_error_line_without_a_backtrace_even_with_rust_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    for (what, argv) in user_errors(dir.path()) {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let out = leasehold_alone(&argv).await;
        let context = format!(
            "{what}: leasehold {argv:?} -> {} {:?}",
            out.code, out.stderr
        );
        assert_ne!(out.code, 0, "{context}");
        assert_eq!(out.stderr.lines().count(), 1, "{context}");
        assert!(out.stderr.starts_with("error: "), "{context}");
        assert!(
            !out.stderr.to_lowercase().contains("backtrace"),
            "{context}"
        );
        assert!(out.stdout.is_empty(), "{context}: stdout {:?}", out.stdout);
    }
}

/// A base port whose next three loopback ports are free right now: `dev --base-port`.
fn free_base_port() -> u16 {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let first = l.local_addr().unwrap().port();
        drop(l);
        let Some(last) = first.checked_add(2) else {
            continue;
        };
        if (first..=last).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return first - 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_starts_healthy_without_a_warn_or_error_line() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let base = free_base_port();
    let mut child = binary::leasehold(&["dev", &format!("--base-port={base}")])
        .arg(format!("--dir={}", dir.path().display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("spawning leasehold dev");
    let pgid = child.id().expect("dev's pid") as libc::pid_t;
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let logged = tokio::spawn(async move {
        let mut lines = stderr.lines();
        let mut all = Vec::new();
        while let Ok(Some(l)) = lines.next_line().await {
            all.push(l);
        }
        all
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(CMD_WAIT, async {
        while let Some(l) = stdout.next_line().await.expect("reading dev's stdout") {
            if l.starts_with("Leasehold dev cluster is up") {
                return true;
            }
        }
        false
    })
    .await;
    // The cluster answers on every node before we look at what it logged.
    let status = match ready {
        Ok(true) => {
            let url = format!("http://127.0.0.1:{}/v1/cluster", base + 3);
            reqwest::get(url).await.map(|r| r.status().is_success())
        }
        _ => Ok(false),
    };
    // SAFETY: kill(2) on the process group of the child we spawned in it.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let _ = child.wait().await;
    let logged = logged.await.unwrap();
    assert!(
        matches!(ready, Ok(true)),
        "dev did not come up within {CMD_WAIT:?}: {logged:#?}"
    );
    assert!(
        matches!(status, Ok(true)),
        "node 3 did not answer: {status:?}"
    );
    let bad: Vec<&String> = logged
        .iter()
        .filter(|l| l.contains(" WARN ") || l.contains("ERROR"))
        .collect();
    assert!(bad.is_empty(), "a healthy dev start logged: {bad:#?}");
}

// Version 1.1's job lifecycle from the command line (issue 31 item 5): scheduling,
// priorities, fail, retry, redrive, cancel, release's new flags; and the flags refused
// before anything is sent.

/// Runs a command that must fail with an API error: exit 1, nothing on stdout, one line
/// `error: <code>: …` on stderr.
async fn api_error(c: &TestCluster, args: &[&str], code: &str) {
    let out = leasehold(c, args, CMD_WAIT).await;
    let context = format!("leasehold {args:?} -> {} {:?}", out.code, out.stderr);
    assert_eq!(out.code, 1, "{context}");
    assert!(out.stdout.is_empty(), "{context}: stdout {:?}", out.stdout);
    assert_eq!(out.stderr.lines().count(), 1, "{context}");
    assert!(
        out.stderr.starts_with(&format!("error: {code}: ")),
        "{context}"
    );
}

/// Runs a command that must succeed in table form; returns its stdout.
async fn table_of(c: &TestCluster, args: &[&str]) -> String {
    let out = leasehold(c, args, CMD_WAIT).await;
    assert_eq!(out.code, 0, "leasehold {args:?}: stderr {:?}", out.stderr);
    out.stdout
}

/// The value of `label` in a `label: value` table, if the table has that row.
fn row<'a>(table: &'a str, label: &str) -> Option<&'a str> {
    table
        .lines()
        .find_map(|l| l.strip_prefix(label)?.strip_prefix(':'))
        .map(str::trim)
}

/// Claims `id` from the command line for `owner`; returns the generation, as a flag value.
async fn claim(c: &TestCluster, id: &str, owner: &str) -> String {
    let args = ["job", "claim", id, "--owner", owner, "--ttl-ms", "30000"];
    let lease: leasehold_statemachine::Lease = json_of(c, &args).await;
    lease.generation.to_string()
}

/// Claims `id` and fails it with `error`.
async fn claim_and_fail(c: &TestCluster, id: &str, error: &str) -> Job {
    let gen = claim(c, id, "w").await;
    let args = ["job", "fail", id, "--owner", "w", "--generation", &gen];
    json_of(c, &[&args[..], &["--error", error]].concat()).await
}

/// A claim of `id` that the store refuses with `code`.
async fn claim_refused(c: &TestCluster, id: &str, code: &str) {
    let args = ["job", "claim", id, "--owner", "w", "--ttl-ms", "1000"];
    api_error(c, &args, code).await;
}

/// `actual` is within a second of `expected` (two nodes' estimates of cluster time may
/// differ a little).
fn about(actual: Option<u64>, expected: u64) -> bool {
    actual.is_some_and(|t| t.abs_diff(expected) <= 1_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn submit_with_delay_is_not_due_and_priority_orders_claim_next() {
    let c = TestCluster::start().await;
    c.wait_for_leader().await;
    c.wait_settled().await;

    let before: ClusterStatus = json_of(&c, &["cluster", "status"]).await;
    let args = [
        "job", "submit", "--id", "later", "--queue", "sq", "--delay", "1h",
    ];
    let job: Job = json_of(&c, &args).await;
    // From the cluster time the CLI read just before the submit was stamped.
    assert!(about(job.run_at_ms, job.created_ms + 3_600_000), "{job:?}");
    let run_at = job.run_at_ms.expect("a delayed job has a run_at_ms");
    assert!(
        run_at + 1_000 >= before.cluster_time_ms + 3_600_000,
        "{job:?}"
    );
    let table = table_of(&c, &["job", "get", "later"]).await;
    assert_eq!(row(&table, "run_at_ms"), Some(run_at.to_string().as_str()));
    assert_eq!(row(&table, "state"), Some("pending"));
    claim_refused(&c, "later", "not_due").await;

    // Submitted low, mid, high; claim-next hands them out high, mid, low.
    for (id, flags) in [
        ("p-low", &["--priority", "-5"][..]),
        ("p-mid", &[][..]),
        (
            "p-high",
            &["--priority=10", "--backoff", "2s", "--backoff-max", "1m"][..],
        ),
    ] {
        let base = ["job", "submit", "--id", id, "--queue", "pq"];
        let _: Job = json_of(&c, &[&base[..], flags].concat()).await;
    }
    let table = table_of(&c, &["job", "get", "p-high"]).await;
    assert_eq!(row(&table, "priority"), Some("10"));
    assert_eq!(row(&table, "backoff_ms"), Some("2000"));
    assert_eq!(row(&table, "backoff_ms_max"), Some("60000"));
    // A job that uses none of 1.1's fields prints as in version 1.
    let table = table_of(&c, &["job", "get", "p-mid"]).await;
    assert_eq!(table.lines().count(), 13, "{table}");
    assert_eq!(row(&table, "priority"), None);

    let client = leasehold_client::Client::new(c.endpoints().split(',')).unwrap();
    let mut order = Vec::new();
    for _ in 0..3 {
        let lease = client.claim_next("pq", "w", 30_000, 0).await.unwrap();
        order.push(lease.expect("a claimable job").job_id().to_owned());
    }
    assert_eq!(order, ["p-high", "p-mid", "p-low"]);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fail_retry_and_redrive_a_queue_s_dead_letters() {
    let c = TestCluster::start().await;
    c.wait_for_leader().await;
    c.wait_settled().await;
    for id in ["d-1", "d-2"] {
        let _: Job = json_of(&c, &["job", "submit", "--id", id, "--queue", "dq"]).await;
    }
    let failed = claim_and_fail(&c, "d-1", "boom: disk full").await;
    assert_eq!(failed.state, JobState::Failed, "{failed:?}");
    assert_eq!(failed.last_error.as_deref(), Some("boom: disk full"));
    let table = table_of(&c, &["job", "get", "d-1"]).await;
    assert_eq!(row(&table, "state"), Some("failed"));
    assert_eq!(row(&table, "last_error"), Some("boom: disk full"));
    // `--output json` is the Job as the API answers it, field for field.
    let printed: Value = json_of(&c, &["job", "get", "d-1"]).await;
    let answered = c.get(1, "/v1/jobs/d-1").await.ok(200);
    assert_eq!(printed, answered);

    let retried: Job = json_of(&c, &["job", "retry", "d-1"]).await;
    assert_eq!(retried.state, JobState::Pending, "{retried:?}");
    assert_eq!(retried.attempts, 0);
    assert_eq!(retried.generation, failed.generation, "generation kept");
    api_error(&c, &["job", "retry", "d-1"], "invalid_state").await;

    for id in ["d-1", "d-2"] {
        claim_and_fail(&c, id, "again").await;
    }
    let once: Value = json_of(&c, &["queue", "redrive", "dq", "--limit", "1"]).await;
    assert_eq!(once, json!({"retried": 1}));
    let out = table_of(&c, &["queue", "redrive", "dq"]).await;
    assert_eq!(out.trim(), "retried 1 job");
    let none: Value = json_of(&c, &["queue", "redrive", "dq"]).await;
    assert_eq!(none, json!({"retried": 0}));
    let page: JobPage = json_of(&c, &["job", "list", "--queue", "dq"]).await;
    assert!(
        page.jobs.iter().all(|j| j.state == JobState::Pending),
        "{page:?}"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_and_release_with_delay_retry_and_error() {
    let c = TestCluster::start().await;
    c.wait_for_leader().await;
    c.wait_settled().await;
    for id in ["c-1", "c-2", "r-1"] {
        let _: Job = json_of(&c, &["job", "submit", "--id", id, "--queue", "cq"]).await;
    }
    let cancelled: Job = json_of(&c, &["job", "cancel", "c-1", "--reason", "not needed"]).await;
    assert_eq!(cancelled.state, JobState::Cancelled, "{cancelled:?}");
    claim_refused(&c, "c-1", "job_cancelled").await;
    cancel_a_leased_job(&c, "c-2").await;

    // Release: later, as a failed attempt, with an error.
    let gen = claim(&c, "r-1", "w").await;
    let args = [
        "job",
        "release",
        "r-1",
        "--owner",
        "w",
        "--generation",
        &gen,
    ];
    let flags = ["--delay", "30s", "--retry", "--error", "flaky upstream"];
    let later: Job = json_of(&c, &[&args[..], &flags].concat()).await;
    assert_eq!(later.state, JobState::Pending, "{later:?}");
    assert_eq!(later.last_error.as_deref(), Some("flaky upstream"));
    // The delay counts from the release's own stamp, and overrides the backoff.
    assert_eq!(
        later.run_at_ms,
        Some(later.updated_ms + 30_000),
        "{later:?}"
    );
    claim_refused(&c, "r-1", "not_due").await;
    c.shutdown().await;
}

/// A leased job cancelled: marked, its holder hears it on renew, its release makes it
/// `cancelled`, after which its lease is refused; a retry brings it back, later.
async fn cancel_a_leased_job(c: &TestCluster, id: &str) {
    let gen = claim(c, id, "w").await;
    let marked: Job = json_of(c, &["job", "cancel", id, "--reason", "stop"]).await;
    assert_eq!(
        (marked.state, marked.cancel_requested),
        (JobState::Leased, true)
    );
    let table = table_of(c, &["job", "get", id]).await;
    assert_eq!(row(&table, "cancel_requested"), Some("true"), "{table}");
    assert_eq!(row(&table, "cancel_reason"), Some("stop"), "{table}");
    let lease = ["--owner", "w", "--generation", gen.as_str()];
    let renewed = table_of(c, &[&["job", "renew", id][..], &lease].concat()).await;
    assert_eq!(row(&renewed, "cancel_requested"), Some("true"), "{renewed}");
    let released: Job = json_of(c, &[&["job", "release", id][..], &lease].concat()).await;
    assert_eq!(released.state, JobState::Cancelled, "{released:?}");
    api_error(
        c,
        &[&["job", "fail", id][..], &lease].concat(),
        "job_cancelled",
    )
    .await;
    let back: Job = json_of(c, &["job", "retry", id, "--delay", "1h"]).await;
    assert_eq!(back.state, JobState::Pending, "{back:?}");
    assert!(
        about(back.run_at_ms, back.updated_ms + 3_600_000),
        "{back:?}"
    );
}

/// Flag values each refused by the command line itself, and the flag its message names.
fn refused_flags() -> Vec<(Vec<String>, &'static str)> {
    let words = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    let with = |s: &str, flag: &str, value: String| {
        let mut w = words(s);
        w.extend([flag.to_owned(), value]);
        w
    };
    let lease = "--owner w --generation 1";
    vec![
        (words("job submit --delay 5"), "--delay"),
        (words("job submit --delay 1.5s"), "--delay"),
        (words("job submit --delay 367d"), "--delay"),
        (words("job submit --run-at 5 --delay 1s"), "--delay"),
        (words("job submit --priority 1001"), "--priority"),
        (words("job submit --priority -1001"), "--priority"),
        (words("job submit --backoff 2d"), "--backoff"),
        (
            words("job submit --backoff 1m --backoff-max 30s"),
            "--backoff-max",
        ),
        (
            words(&format!("job release x {lease} --delay soon")),
            "--delay",
        ),
        (
            words(&format!("job release x {lease} --delay 25h")),
            "--delay",
        ),
        (words("job retry x --run-at 3 --delay 1m"), "--run-at"),
        (
            with(&format!("job fail x {lease}"), "--error", "e".repeat(4097)),
            "--error",
        ),
        (
            with("job cancel x", "--reason", "r".repeat(1025)),
            "--reason",
        ),
        (words("queue redrive q --limit 0"), "--limit"),
        (words("queue redrive q --limit 1001"), "--limit"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lifecycle_flags_are_refused_before_anything_is_sent() {
    // No node listens on the endpoint: a command that sent anything would exit 3.
    for (argv, flag) in refused_flags() {
        let mut argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        argv.push("--endpoints=127.0.0.1:1");
        let out = leasehold_alone(&argv).await;
        let shown: Vec<&str> = argv.iter().map(|a| &a[..a.len().min(40)]).collect();
        let context = format!("leasehold {shown:?} -> {} {:?}", out.code, out.stderr);
        assert_eq!(out.code, 2, "{context}");
        assert_eq!(out.stderr.lines().count(), 1, "{context}");
        assert!(out.stderr.starts_with("error: "), "{context}");
        assert!(out.stderr.contains(flag), "{context}: should name {flag}");
        assert!(out.stdout.is_empty(), "{context}");
    }
    // Valid values (a negative priority after a space, a delay) get as far as sending.
    let argv = [
        "job",
        "submit",
        "--priority",
        "-5",
        "--delay",
        "30s",
        "--endpoints=127.0.0.1:1",
    ];
    let out = leasehold_alone(&argv).await;
    assert_eq!(out.code, 3, "{argv:?}: {:?}", out.stderr);
}

// Issue 32: `job history` and `events`, table and JSON, with and without --follow.

/// The `--output json` lines of `events ARGS`, each parsed as an Event.
async fn events_json(c: &TestCluster, args: &[&str]) -> Vec<leasehold_client::Event> {
    let all = [&["events"][..], args, &["--output", "json"]].concat();
    let out = leasehold(c, &all, CMD_WAIT).await;
    assert_eq!(out.code, 0, "leasehold {all:?}: stderr {:?}", out.stderr);
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}

fn seqs_of(events: &[leasehold_client::Event]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn job_history_and_events_print_one_line_per_event() {
    let c = TestCluster::start().await;
    c.wait_for_leader().await;
    c.wait_settled().await;
    let _: Job = json_of(&c, &["job", "submit", "--id", "h-1", "--queue", "hq"]).await;
    let gen = claim(&c, "h-1", "w1").await;
    let done = [
        "job",
        "complete",
        "h-1",
        "--owner",
        "w1",
        "--generation",
        &gen,
    ];
    let _: Job = json_of(&c, &done).await;
    let _: Job = json_of(&c, &["job", "submit", "--id", "other", "--queue", "oq"]).await;

    // `job history`: the API's object in JSON; a header and one line per event.
    let printed: Value = json_of(&c, &["job", "history", "h-1"]).await;
    let answered = c.get(1, "/v1/jobs/h-1/history").await.ok(200);
    assert_eq!(printed, answered);
    let table = table_of(&c, &["job", "history", "h-1"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(
        lines[0]
            .split_whitespace()
            .eq(["SEQ", "TIME", "EVENT", "GENERATION", "OWNER", "DETAIL"]),
        "{table}"
    );
    let claimed: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(&claimed[2..5], ["claimed", "1", "w1"], "{table}");
    assert!(claimed[1].ends_with('Z') && claimed[5].starts_with("lease_until_ms="));
    api_error(&c, &["job", "history", "nope"], "not_found").await;

    // `events` without --follow: all the feed holds after --after, then it exits.
    let all = events_json(&c, &[]).await;
    assert_eq!(seqs_of(&all), [1, 2, 3, 4], "{all:?}");
    let history: Vec<leasehold_client::Event> =
        serde_json::from_value(answered["events"].clone()).unwrap();
    assert_eq!(all[..3], history[..], "the job's history is in the feed");
    assert_eq!(seqs_of(&events_json(&c, &["--after", "2"]).await), [3, 4]);
    assert_eq!(seqs_of(&events_json(&c, &["--queue", "oq"]).await), [4]);
    assert_eq!(
        seqs_of(&events_json(&c, &["--job", "h-1", "--after", "1"]).await),
        [2, 3]
    );
    assert!(events_json(&c, &["--after", "4"]).await.is_empty());
    let table = table_of(&c, &["events", "--queue", "hq"]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(lines[0].starts_with("     SEQ TIME"), "{table}");
    let completed: Vec<&str> = lines[3].split_whitespace().collect();
    assert_eq!(
        [
            completed[0],
            completed[2],
            completed[3],
            completed[4],
            completed[5]
        ],
        ["3", "h-1", "completed", "1", "w1"],
        "{table}"
    );

    // --follow: what the feed holds, then what comes, until SIGINT (exit 0).
    let mut follow = binary::leasehold(&["events", "--follow", "--after", "3", "--output", "json"])
        .env("LEASEHOLD_ENDPOINTS", c.endpoints())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawning events --follow");
    let mut lines = tokio::io::BufReader::new(follow.stdout.take().unwrap()).lines();
    assert_eq!(next_event(&mut lines).await.seq, 4);
    let _: Job = json_of(&c, &["job", "submit", "--id", "late", "--queue", "hq"]).await;
    let late = next_event(&mut lines).await;
    assert_eq!((late.seq, late.job_id.as_str()), (5, "late"));
    let pid = follow.id().expect("pid").to_string();
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let out = finish(follow, CMD_WAIT).await;
    assert_eq!(out.code, 0, "stderr={}", out.stderr);
    c.shutdown().await;
}

/// The next line `events --follow --output json` prints, as an Event.
async fn next_event(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) -> leasehold_client::Event {
    let line = tokio::time::timeout(CMD_WAIT, lines.next_line())
        .await
        .expect("a line within the bound")
        .unwrap()
        .expect("events --follow keeps running");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_events_flags_are_refused_before_anything_is_sent() {
    for (args, flag) in [
        (&["events", "--queue", "Not A Queue"][..], "--queue"),
        (&["events", "--job", "a b"][..], "--job"),
        (&["events", "--after=-1"][..], "--after"),
        (&["events", "--after", "soon"][..], "--after"),
    ] {
        let argv = [args, &["--endpoints=127.0.0.1:1"]].concat();
        let out = leasehold_alone(&argv).await;
        let context = format!("leasehold {argv:?} -> {} {:?}", out.code, out.stderr);
        assert_eq!(out.code, 2, "{context}");
        assert_eq!(out.stderr.lines().count(), 1, "{context}");
        assert!(out.stderr.contains(flag), "{context}");
        assert!(out.stdout.is_empty(), "{context}");
    }
    // Valid flags get as far as sending: no node, exit 3.
    let out = leasehold_alone(&["events", "--queue", "q", "--endpoints=127.0.0.1:1"]).await;
    assert_eq!(out.code, 3, "{:?}", out.stderr);
}

/// `bench --mode batch-cycle` (issue 33 item 3): fills its queue, then each cycle claims,
/// renews and completes `--batch` jobs in three requests; its JSON line counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bench_batch_cycle_claims_renews_and_completes_its_batches() {
    let c = TestCluster::start().await;
    c.wait_for_leader().await;
    c.wait_settled().await;
    let args = [
        "bench",
        "--mode",
        "batch-cycle",
        "--batch",
        "4",
        "--cycles",
        "6",
        "--concurrency",
        "2",
        "--queue",
        "bb",
    ];
    let out = leasehold(&c, &args, WORKER_WAIT).await;
    assert_eq!(
        out.code, 0,
        "stdout={:?} stderr={:?}",
        out.stdout, out.stderr
    );
    let line: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON line");
    assert_eq!(line["mode"], "batch-cycle", "{line}");
    assert_eq!(
        (&line["cycles_done"], &line["batch"]),
        (&json!(6), &json!(4)),
        "{line}"
    );
    assert_eq!(
        (&line["jobs_done"], &line["errors"]),
        (&json!(24), &json!(0)),
        "{line}"
    );
    for step in ["claim", "renew", "complete", "cycle"] {
        assert_eq!(line["lat"][step]["n"], 6, "{step}: {line}");
    }
    // What the warm-up and the timed cycles left: every filled job completed or pending.
    let client = leasehold_client::Client::new(c.endpoints().split(',')).unwrap();
    let query = leasehold_client::ListJobs {
        queue: Some("bb".into()),
        state: Some(JobState::Leased),
        ..Default::default()
    };
    let leased = client.list_jobs(&query).await.unwrap();
    assert!(
        leased.jobs.is_empty(),
        "no lease left held: {:?}",
        leased.jobs
    );
    let out = leasehold(
        &c,
        &["bench", "--mode", "batch-cycle", "--batch", "257"],
        CMD_WAIT,
    )
    .await;
    assert_ne!(out.code, 0, "--batch 257 is refused");
    c.shutdown().await;
}
