//! `leasehold worker run` (cli/src/worker/) against real `leasehold serve` processes:
//! the command it runs never outlives the lease, and never starts after it.
//!
//! Each test runs the worker as its own process over a three-node [`ProcCluster`]; the
//! command is `sh -c` with a background grandchild that ignores SIGTERM and appends to a
//! file every 50 ms, so "still producing effects" is visible from outside. Liveness of
//! the command's process group is read from `/proc` (a zombie counts as dead: it runs no
//! code). The tests hold one lock, so their timing does not compete for the 2 cores.
//!
//! The worker itself stopped (SIGSTOP), killed (SIGKILL) or hung up on (SIGHUP): the
//! command's group is dead before the TTL has passed since, and a second owner that
//! claims the job afterwards sees no further write from it (issue 28). A worker whose
//! stdout nobody reads keeps renewing and completes its jobs, with one slot on a
//! one-thread runtime and with four slots on the default one.
//!
//! The watchdog's edges (issue 44 item 6): `pkill -STOP -f 'leasehold worker'` stops the
//! worker but not its watchdog; a watchdog resumed past the deadline KILLs the group
//! without a TERM first; a watchdog whose worker died before `started` reached it kills
//! the group all the same.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use leasehold_client::{Client, JobState, NewJob};
use leasehold_cluster_tests::fixture::{leasehold_bin, ClusterOpts, ProcCluster, POLL};
use leasehold_cluster_tests::proxy::{Fault, LinkProxy};
use serde_json::json;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// Bound on the cluster electing a leader and on one client call.
const BOUND: Duration = Duration::from_secs(30);
/// Bound on the worker process exiting after its one job.
const WORKER_EXIT: Duration = Duration::from_secs(40);
/// Poll step of the "is the group dead yet" check: fine, because the assertion on the
/// time of death has only the deadline's margin (100 ms) of slack.
const DEATH_POLL: Duration = Duration::from_millis(5);

/// One test at a time: a lease-timing assertion must not share the CPUs with another
/// test's nine processes.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn bin() -> PathBuf {
    leasehold_bin(env!("CARGO_BIN_EXE_leasehold-under-test"))
}

/// A command whose direct child (sh) records its pid (= the group id, the worker makes
/// it a group leader), starts a grandchild that ignores SIGTERM and ticks into a file,
/// then does `tail` (e.g. `wait`, or print a result and exit 0).
fn ticking_command(dir: &Path, tail: &str) -> String {
    let d = dir.display();
    format!(
        "echo $$ > {d}/pgid.tmp && mv {d}/pgid.tmp {d}/pgid; \
         (trap '' TERM; while :; do echo tick >> {d}/ticks; sleep 0.05; done) & \
         echo $! > {d}/grandchild.tmp && mv {d}/grandchild.tmp {d}/grandchild; {tail}"
    )
}

/// Kills the command's whole group when the test ends, passed or not: a failing run
/// must not leave a ticking grandchild behind.
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            // SAFETY: kill(2) with a negative pid signals that process group; the group
            // is the test's own command's.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}

/// Fields after `comm` of `/proc/<pid>/stat`: state, ppid, pgrp, … (`comm` may hold
/// spaces and parentheses, hence the last `)`).
fn stat_fields(pid: &str) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// Pids of the processes of group `pgid` that are not zombies.
fn live_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let pgid = pgid.to_string();
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| stat_fields(pid).is_some_and(|f| f.len() > 2 && f[0] != "Z" && f[2] == pgid))
        .filter_map(|pid| pid.parse().ok())
        .collect()
}

/// Whether `pid` exists and is not a zombie.
fn is_alive(pid: i32) -> bool {
    stat_fields(&pid.to_string()).is_some_and(|f| f.first().is_some_and(|s| s != "Z"))
}

/// Polls until `path` holds a number (written atomically by the command), at most `bound`.
async fn read_pid(path: &Path, bound: Duration) -> i32 {
    let until = Instant::now() + bound;
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < until,
            "{} not written within {bound:?}",
            path.display()
        );
        tokio::time::sleep(POLL).await;
    }
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

fn spawn_worker(endpoints: &str, queue: &str, ttl_ms: u64, script: &str) -> Child {
    worker_command(endpoints, queue, ttl_ms, &["--max-jobs", "1"], script)
        .spawn()
        .expect("spawning the worker")
}

/// `worker run` on `queue` with `flags` before the `--`; stdout and stderr piped.
fn worker_command(
    endpoints: &str,
    queue: &str,
    ttl_ms: u64,
    flags: &[&str],
    script: &str,
) -> Command {
    let mut cmd = Command::new(bin());
    // As an installed binary reads in `ps` and to `pkill -f`: `leasehold worker run …`.
    cmd.arg0("leasehold")
        .args(["worker", "run", "--queue", queue, "--ttl-ms"])
        .arg(ttl_ms.to_string())
        .args(flags)
        .args(["--", "sh", "-c", script])
        .env("LEASEHOLD_ENDPOINTS", endpoints)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

/// Waits (bounded) for the worker to exit; its exit code and stderr. One that does not
/// exit in time is killed, and the panic shows what it had written.
async fn finish(mut worker: Child) -> (i32, String) {
    use tokio::io::AsyncReadExt as _;
    let mut stderr = worker.stderr.take().expect("the worker's stderr is piped");
    let mut stdout = worker.stdout.take().expect("the worker's stdout is piped");
    let read = tokio::spawn(async move {
        let (mut err, mut out) = (Vec::new(), Vec::new());
        let _ = tokio::join!(stderr.read_to_end(&mut err), stdout.read_to_end(&mut out));
        String::from_utf8_lossy(&err).into_owned()
    });
    let status = match tokio::time::timeout(WORKER_EXIT, worker.wait()).await {
        Ok(status) => status.expect("waiting for the worker"),
        Err(_) => {
            let _ = worker.kill().await;
            let text = tokio::time::timeout(BOUND, read).await;
            let text = text.ok().and_then(Result::ok).unwrap_or_default();
            panic!("the worker did not exit within {WORKER_EXIT:?}; its stderr: {text}");
        }
    };
    // Bounded: a process the worker left behind may hold the pipes open.
    let text = tokio::time::timeout(BOUND, read).await;
    let text = text.ok().and_then(Result::ok).unwrap_or_default();
    (status.code().unwrap_or(-1), text)
}

async fn cluster() -> (ProcCluster, Client, String) {
    let c = ProcCluster::start(ClusterOpts::new(bin()), BOUND).await;
    let addrs: Vec<String> = c.ids().iter().map(|id| c.addr(*id).to_string()).collect();
    let client = Client::new(addrs.iter().cloned()).expect("valid endpoints");
    (c, client, addrs.join(","))
}

async fn submit(client: &Client, id: &str, queue: &str) {
    tokio::time::timeout(BOUND, client.submit(&NewJob::new().id(id).queue(queue)))
        .await
        .expect("submit in time")
        .expect("submit");
}

/// Polls job `id` until `pred` holds (bounded); the job's `lease_until_ms` then.
async fn wait_job(
    client: &Client,
    id: &str,
    what: &str,
    pred: impl Fn(&leasehold_client::Job) -> bool,
) -> leasehold_client::Job {
    wait_job_within(client, id, what, BOUND, pred).await
}

/// The cluster freezes (every node SIGSTOPped) while the command runs; its direct child
/// dies of SIGTERM at once, its grandchild ignores SIGTERM. The whole group must be dead
/// before the TTL has passed since the freeze: the last successful renew was sent before
/// it, so the store may expire the lease from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grandchild_ignoring_sigterm_is_killed_before_the_lease_can_expire() {
    let _serial = SERIAL.lock().await;
    let (mut c, client, endpoints) = cluster().await;
    submit(&client, "g-1", "gq").await;
    let dir = tempfile::tempdir().unwrap();
    let ttl_ms = 2_000;
    let ttl = Duration::from_millis(ttl_ms);
    let worker = spawn_worker(
        &endpoints,
        "gq",
        ttl_ms,
        &ticking_command(dir.path(), "wait"),
    );
    let pgid = read_pid(&dir.path().join("pgid"), BOUND).await;
    let mut guard = GroupGuard(Some(pgid));
    let grandchild = read_pid(&dir.path().join("grandchild"), BOUND).await;

    // Freeze just after a renew went through: the worker's deadline is then as late as
    // it gets, the case with the least slack.
    let claimed = wait_job(&client, "g-1", "leased", |j| j.state == JobState::Leased).await;
    wait_job(&client, "g-1", "a renew", |j| {
        j.lease_until_ms > claimed.lease_until_ms
    })
    .await;
    let frozen_at = Instant::now();
    for id in c.ids() {
        c.pause(id);
    }

    let give_up = frozen_at + ttl * 3;
    let dead_at = loop {
        let now = Instant::now();
        let left = live_members(pgid);
        if left.is_empty() && !is_alive(grandchild) {
            break now;
        }
        assert!(
            now < give_up,
            "{:?} after the freeze (ttl {ttl:?}), group {pgid} still has {left:?} \
             (grandchild {grandchild} alive: {})",
            now - frozen_at,
            is_alive(grandchild)
        );
        tokio::time::sleep(DEATH_POLL).await;
    };
    assert!(
        dead_at < frozen_at + ttl,
        "the command's group died {:?} after the freeze, past the ttl {ttl:?}",
        dead_at - frozen_at
    );
    // Dead processes write nothing: the file stays as it is.
    let ticks = file_len(&dir.path().join("ticks"));
    assert!(ticks > 0, "the grandchild never ticked");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        file_len(&dir.path().join("ticks")),
        ticks,
        "ticks after death"
    );

    for id in c.ids() {
        c.resume(id);
    }
    let (code, stderr) = finish(worker).await;
    guard.0 = None;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(stderr.contains("lease lost"), "stderr: {stderr}");
}

/// The command exits 0 but leaves a grandchild running (holding its stdout open). The
/// worker kills the group before it completes the job, and still takes the result line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grandchild_left_by_a_successful_command_is_killed_before_completion() {
    let _serial = SERIAL.lock().await;
    let (_c, client, endpoints) = cluster().await;
    submit(&client, "n-1", "nq").await;
    let dir = tempfile::tempdir().unwrap();
    let script = ticking_command(dir.path(), r#"echo '{"done":true}'"#);
    let worker = spawn_worker(&endpoints, "nq", 5_000, &script);
    let pgid = read_pid(&dir.path().join("pgid"), BOUND).await;
    let mut guard = GroupGuard(Some(pgid));
    let grandchild = read_pid(&dir.path().join("grandchild"), BOUND).await;

    let done = wait_job(&client, "n-1", "completed", |j| {
        j.state == JobState::Completed
    })
    .await;
    // Checked only now, after the completion was seen: it must already hold.
    let left = live_members(pgid);
    assert!(
        left.is_empty() && !is_alive(grandchild),
        "job completed while group {pgid} still has {left:?}"
    );
    assert_eq!(done.result, Some(json!({"done": true})), "{done:?}");
    let (code, stderr) = finish(worker).await;
    guard.0 = None;
    assert_eq!(code, 0, "stderr: {stderr}");
}

/// Every request of the worker crosses a proxy that delays each direction by 200 ms, with
/// a 400 ms TTL: the local deadline (396 − 100 = 296 ms after the claim's send) has passed
/// by the time the claim's answer is back (≥ 400 ms; since version 1.1 the claim carries
/// the payload, so no payload read adds to it). The command must not be started at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_is_not_started_after_the_local_deadline() {
    let _serial = SERIAL.lock().await;
    let (c, client, _) = cluster().await;
    submit(&client, "d-1", "dq").await;
    let mut proxies = Vec::new();
    for id in c.ids() {
        let p = LinkProxy::start(c.addr(id)).await.expect("a proxy");
        p.set(Fault::Delay(Duration::from_millis(200)));
        proxies.push(p);
    }
    let endpoints: Vec<String> = proxies.iter().map(|p| p.addr().to_string()).collect();
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let script = format!("echo started > {}", marker.display());
    let worker = spawn_worker(&endpoints.join(","), "dq", 400, &script);

    let (code, stderr) = finish(worker).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(
        stderr.contains("not starting the command"),
        "the worker did not refuse to start the command; stderr: {stderr}"
    );
    assert!(!marker.exists(), "the command ran; stderr: {stderr}");
    let job = client.get_job("d-1").await.expect("the job");
    assert_ne!(job.state, JobState::Completed, "{job:?}");
}

/// What is done to the worker process while its command runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WorkerFault {
    /// SIGSTOP by its pid, and left stopped (a debugger; not a frozen container, which
    /// would freeze the watchdog too).
    Stop,
    /// SIGKILL (the OOM killer, `kill -9`).
    Kill,
    /// SIGHUP (the terminal or ssh session went away).
    Hangup,
}

/// Sends `sig` to process `pid`.
fn signal(pid: u32, sig: i32) {
    let pid = i32::try_from(pid).expect("a pid");
    // SAFETY: kill(2) with plain integers; `pid` is the test's own worker process.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
}

/// Polls (bounded by `give_up`) until group `pgid` and `grandchild` are dead; when.
async fn wait_group_dead(pgid: i32, grandchild: i32, since: Instant, give_up: Instant) -> Instant {
    loop {
        let now = Instant::now();
        let left = live_members(pgid);
        if left.is_empty() && !is_alive(grandchild) {
            return now;
        }
        assert!(
            now < give_up,
            "{:?} after the fault, group {pgid} still has {left:?} (grandchild {grandchild} \
             alive: {})",
            now - since,
            is_alive(grandchild)
        );
        tokio::time::sleep(DEATH_POLL).await;
    }
}

/// Claims `id` for a second owner as soon as the store lets anyone (bounded); when the
/// claim was answered.
async fn claim_when_free(client: &Client, id: &str, ttl_ms: u64) -> (Instant, u64) {
    let until = Instant::now() + BOUND;
    loop {
        let tried = tokio::time::timeout(BOUND, client.claim(id, "second-owner", ttl_ms)).await;
        match tried {
            Ok(Ok(lease)) => return (Instant::now(), lease.generation()),
            seen => assert!(
                Instant::now() < until,
                "job {id}: no second claim within {BOUND:?}; last: {seen:?}"
            ),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The parent pid of `pid` (from `/proc`).
fn parent_of(pid: i32) -> Option<i32> {
    stat_fields(&pid.to_string())?.get(1)?.parse().ok()
}

/// The worker is stopped, killed or hung up on just after a renew, while its command's
/// grandchild (which ignores SIGTERM) ticks into a file. The command's group must be dead
/// within the TTL of the fault, and when a second owner gets the job — after the store
/// expired the lease, or after the worker released it — the file must not grow any more.
/// The watchdog must not outlive the command.
async fn worker_fault_stops_the_command(fault: WorkerFault) {
    let _serial = SERIAL.lock().await;
    let (_c, client, endpoints) = cluster().await;
    let job = format!("{fault:?}-1").to_lowercase();
    submit(&client, &job, "fq").await;
    let dir = tempfile::tempdir().unwrap();
    let (ttl_ms, ttl) = (2_000, Duration::from_millis(2_000));
    let mut worker = spawn_worker(
        &endpoints,
        "fq",
        ttl_ms,
        &ticking_command(dir.path(), "wait"),
    );
    let worker_pid = worker.id().expect("the worker's pid");
    let pgid = read_pid(&dir.path().join("pgid"), BOUND).await;
    let _guard = GroupGuard(Some(pgid));
    let grandchild = read_pid(&dir.path().join("grandchild"), BOUND).await;
    let watchdog = parent_of(pgid);

    let claimed = wait_job(&client, &job, "leased", |j| j.state == JobState::Leased).await;
    wait_job(&client, &job, "a renew", |j| {
        j.lease_until_ms > claimed.lease_until_ms
    })
    .await;
    let fault_at = Instant::now();
    signal(
        worker_pid,
        match fault {
            WorkerFault::Stop => libc::SIGSTOP,
            WorkerFault::Kill => libc::SIGKILL,
            WorkerFault::Hangup => libc::SIGHUP,
        },
    );

    let dead_at = wait_group_dead(pgid, grandchild, fault_at, fault_at + ttl * 3).await;
    assert!(
        dead_at < fault_at + ttl,
        "the command's group died {:?} after the {fault:?}, past the ttl {ttl:?}",
        dead_at - fault_at
    );
    let (second_at, generation) = claim_when_free(&client, &job, ttl_ms).await;
    assert!(
        dead_at <= second_at,
        "claimed again before the group was dead"
    );
    assert_eq!(generation, 2);
    let ticks = file_len(&dir.path().join("ticks"));
    assert!(ticks > 0, "the grandchild never ticked");
    // Six ticks' worth of time under the second owner: not one more write.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        file_len(&dir.path().join("ticks")),
        ticks,
        "ticks under the second owner"
    );
    if let Some(watchdog) = watchdog {
        assert!(
            !is_alive(watchdog),
            "the watchdog {watchdog} outlived its command"
        );
    }

    match fault {
        WorkerFault::Hangup => {
            let (code, stderr) = finish(worker).await;
            assert_eq!(code, 0, "stderr: {stderr}");
            assert!(stderr.contains("released"), "stderr: {stderr}");
        }
        WorkerFault::Stop | WorkerFault::Kill => {
            let _ = worker.start_kill();
            let _ = tokio::time::timeout(WORKER_EXIT, worker.wait()).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_worker_does_not_leave_its_command_running() {
    worker_fault_stops_the_command(WorkerFault::Stop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_does_not_leave_its_command_running() {
    worker_fault_stops_the_command(WorkerFault::Kill).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_up_worker_stops_its_command_and_releases_the_job() {
    worker_fault_stops_the_command(WorkerFault::Hangup).await;
}

/// Bytes each command writes to stdout, far past a pipe's 64 KiB and the worker's relay
/// queue (4 MiB), then a result line.
const STALLED_OUTPUT_BYTES: u64 = 8 << 20;

/// `jobs` jobs run by one worker with `--concurrency jobs` whose stdout is a pipe nobody
/// reads; each command writes [`STALLED_OUTPUT_BYTES`], then runs 3 TTLs (so it needs
/// renewals), then prints its result. Every job must complete with its result.
/// `threads`: the worker's runtime threads (`TOKIO_WORKER_THREADS`), if not the default.
async fn stalled_stdout_reader(queue: &str, jobs: usize, threads: Option<usize>) {
    let _serial = SERIAL.lock().await;
    let (_c, client, endpoints) = cluster().await;
    let ids: Vec<String> = (0..jobs).map(|i| format!("{queue}-{i}")).collect();
    for id in &ids {
        submit(&client, id, queue).await;
    }
    let ttl_ms = 1_500;
    let script = format!(
        "yes 'output that nobody reads' | head -c {STALLED_OUTPUT_BYTES}; echo; sleep {}; \
         echo \"{{\\\"done\\\":\\\"$LEASEHOLD_JOB_ID\\\"}}\"",
        3 * ttl_ms / 1_000 + 1
    );
    let n = jobs.to_string();
    let flags = ["--concurrency", &n, "--max-jobs", &n];
    let mut cmd = worker_command(&endpoints, queue, ttl_ms, &flags, &script);
    if let Some(threads) = threads {
        cmd.env("TOKIO_WORKER_THREADS", threads.to_string());
    }
    let mut worker = cmd.spawn().expect("spawning the worker");
    // Held, never read: the pipe fills at 64 KiB and stays full.
    let _stalled = worker.stdout.take().expect("the worker's stdout");
    let mut stderr = worker.stderr.take().expect("the worker's stderr");
    let log = tokio::spawn(async move {
        let mut text = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text).await;
        text
    });

    for id in &ids {
        let done = wait_job_within(
            &client,
            id,
            "completed",
            Duration::from_millis(ttl_ms) * 12,
            |j| j.state == JobState::Completed,
        )
        .await;
        assert_eq!(done.result, Some(json!({"done": id})), "{done:?}");
        assert_eq!(done.generation, 1, "{done:?}");
    }
    let status = tokio::time::timeout(WORKER_EXIT, worker.wait())
        .await
        .expect("the worker exits after its jobs")
        .expect("waiting for the worker");
    let log = tokio::time::timeout(BOUND, log)
        .await
        .expect("stderr closes")
        .unwrap();
    assert_eq!(status.code(), Some(0), "stderr: {log}");
}

/// [`wait_job`] with its own bound.
async fn wait_job_within(
    client: &Client,
    id: &str,
    what: &str,
    bound: Duration,
    pred: impl Fn(&leasehold_client::Job) -> bool,
) -> leasehold_client::Job {
    let until = Instant::now() + bound;
    loop {
        let job = client.get_job(id).await;
        match job {
            Ok(job) if pred(&job) => return job,
            seen => assert!(
                Instant::now() < until,
                "job {id}: {what} not seen within {bound:?}; last: {seen:?}"
            ),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One slot on a one-thread runtime (a one-core machine): the relay of a stalled stdout
/// must not take the thread that renews.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stdout_reader_does_not_stop_renewals() {
    stalled_stdout_reader("stall1", 1, Some(1)).await;
}

/// Four slots, the runtime's default threads (fewer than four here): all four relays
/// stalled at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_stalled_relays_do_not_stop_renewals() {
    stalled_stdout_reader("stall4", 4, None).await;
}

/// Waits until the cluster runs version 1.1 (entry version 4, activated about a second
/// after forming): its calls answer 503 before.
async fn wait_version_1_1(client: &Client) {
    let deadline = Instant::now() + BOUND;
    loop {
        let status = client.cluster_status().await;
        if status.as_ref().is_ok_and(|s| s.cluster_version >= Some(4)) {
            return;
        }
        assert!(Instant::now() < deadline, "no version 1.1: {status:?}");
        tokio::time::sleep(POLL).await;
    }
}

/// Issue 31's worked example of cancellation: a job is cancelled while `worker run`
/// runs its command. The next renew answers `cancel_requested`, the worker SIGTERMs the
/// command's group (its grandchild ignores SIGTERM and is SIGKILLed after the grace),
/// and releases: the job ends `cancelled`. The group is dead within one renew interval
/// plus the grace (plus slack for a loaded machine) of the cancel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_stops_its_command_and_ends_cancelled() {
    let _serial = SERIAL.lock().await;
    let (_c, client, endpoints) = cluster().await;
    wait_version_1_1(&client).await;
    submit(&client, "x-1", "xq").await;
    let dir = tempfile::tempdir().unwrap();
    let ttl_ms = 3_000;
    let worker = spawn_worker(
        &endpoints,
        "xq",
        ttl_ms,
        &ticking_command(dir.path(), "wait"),
    );
    let pgid = read_pid(&dir.path().join("pgid"), BOUND).await;
    let mut guard = GroupGuard(Some(pgid));
    let grandchild = read_pid(&dir.path().join("grandchild"), BOUND).await;
    let asked = client.cancel("x-1", Some("stop it")).await.expect("cancel");
    let cancelled_at = Instant::now();
    assert!(asked.cancel_requested, "{asked:?}");
    // One renew interval (TTL/3) to hear of it, the grace (TTL/5) for SIGKILL, slack.
    let bound = Duration::from_millis(ttl_ms / 3 + ttl_ms / 5) + Duration::from_secs(2);
    let dead_at = wait_group_dead(pgid, grandchild, cancelled_at, cancelled_at + bound * 3).await;
    assert!(
        dead_at - cancelled_at < bound,
        "the command's group died {:?} after the cancel (bound {bound:?})",
        dead_at - cancelled_at
    );
    let job = wait_job(&client, "x-1", "cancelled", |j| {
        j.state == JobState::Cancelled
    })
    .await;
    assert_eq!(job.cancel_reason.as_deref(), Some("stop it"));
    let (code, stderr) = finish(worker).await;
    guard.0 = None;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(stderr.contains("the job was cancelled"), "stderr: {stderr}");
}

/// A command that fails is released as a failed attempt with its stderr's tail as the
/// job's `last_error`, and its job waits out its backoff; the checkpoint it printed
/// (`--progress-prefix`) reaches the next attempt as `LEASEHOLD_PROGRESS`, which resumes
/// from it and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_backs_off_and_the_next_resumes_from_its_checkpoint() {
    let _serial = SERIAL.lock().await;
    let (_c, client, endpoints) = cluster().await;
    wait_version_1_1(&client).await;
    let job = NewJob::new().id("r-1").queue("rq").backoff(700, 700);
    tokio::time::timeout(BOUND, client.submit(&job))
        .await
        .unwrap()
        .unwrap();
    let script = r#"if [ "$LEASEHOLD_PROGRESS" = null ]; then
          echo 'progress: {"step":1}'; sleep 1.5; echo "disk full on attempt $LEASEHOLD_ATTEMPT" >&2; exit 3
        else echo "{\"resumed\":$LEASEHOLD_PROGRESS,\"attempt\":$LEASEHOLD_ATTEMPT}"; fi"#;
    let flags = ["--max-jobs", "2", "--progress-prefix", "progress: "];
    let worker = worker_command(&endpoints, "rq", 900, &flags, script)
        .spawn()
        .expect("spawning the worker");
    let failed = wait_job(&client, "r-1", "a failed attempt", |j| {
        j.last_error.is_some()
    })
    .await;
    assert_eq!(
        failed.last_error.as_deref(),
        Some("disk full on attempt 1"),
        "{failed:?}"
    );
    assert_eq!(failed.progress, Some(json!({"step": 1})), "{failed:?}");
    let done = wait_job(&client, "r-1", "completed", |j| {
        j.state == JobState::Completed
    })
    .await;
    assert_eq!(
        done.result,
        Some(json!({"resumed": {"step": 1}, "attempt": 2})),
        "{done:?}"
    );
    let (code, stderr) = finish(worker).await;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(
        stderr.contains("released as a failed attempt"),
        "stderr: {stderr}"
    );
}

/// `--concurrency 3` runs three commands at the same time (issue 33 item 2): each
/// command marks itself started and waits (at most 20 s, then fails) until all three
/// have, so every job completes on its first attempt only if the three overlapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_runs_that_many_commands_at_once() {
    let _serial = SERIAL.lock().await;
    let (_c, client, endpoints) = cluster().await;
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (0..3).map(|i| format!("conc-{i}")).collect();
    for id in &ids {
        submit(&client, id, "conc").await;
    }
    let d = dir.path().display();
    let script = format!(
        "touch {d}/started-$LEASEHOLD_JOB_ID; i=0; \
         while [ \"$(ls {d} | grep -c '^started-')\" -lt 3 ]; do \
           i=$((i+1)); [ $i -gt 1000 ] && exit 1; sleep 0.02; done; \
         echo \"{{\\\"peers\\\":$(ls {d} | grep -c '^started-')}}\""
    );
    let flags = ["--concurrency", "3", "--max-jobs", "3"];
    let worker = worker_command(&endpoints, "conc", 10_000, &flags, &script)
        .spawn()
        .expect("spawning the worker");
    for id in &ids {
        let done = wait_job(&client, id, "completed", |j| j.state == JobState::Completed).await;
        assert_eq!(
            (done.generation, &done.result),
            (1, &Some(json!({"peers": 3}))),
            "{done:?}"
        );
    }
    let (code, log) = finish(worker).await;
    assert_eq!(code, 0, "stderr: {log}");
}

/// `pkill -STOP -f PATTERN` over the test's own processes only (`pids`): SIGSTOPs each
/// whose command line, its arguments joined by spaces as `pkill -f` reads it, contains
/// `pattern`; the pids it stopped. (Never a real pkill: other people's workers may run
/// on this host.)
fn pkill_stop(pattern: &str, pids: &[i32]) -> Vec<i32> {
    let mut stopped = Vec::new();
    for &pid in pids {
        if command_line(pid).is_some_and(|line| line.contains(pattern)) {
            signal(pid as u32, libc::SIGSTOP);
            stopped.push(pid);
        }
    }
    stopped
}

/// `/proc/<pid>/cmdline` with its arguments joined by spaces.
fn command_line(pid: i32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    Some(args.join(" "))
}

/// SIGKILLs the processes a test stopped when it ends, passed or not: a stopped
/// watchdog whose worker is gone would otherwise stay stopped forever. Declared after
/// the worker's handle, so it runs first, while the worker (their parent) still holds
/// their pids.
struct KillStopped(Vec<i32>);

impl Drop for KillStopped {
    fn drop(&mut self) {
        for &pid in &self.0 {
            // SAFETY: kill(2) with plain integers, on the test's own processes.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// Issue 44 item 6: the watchdog's command line began with `leasehold worker`, so
/// `pkill -STOP -f 'leasehold worker'` stopped it with the worker, and the command ran
/// on past its lease unsupervised. Now the watchdog's command line is its own
/// (`leasehold-watchdog --grace-ms … --deadline-ns …`, nothing of the command either):
/// the pattern stops the worker only, and the watchdog kills the group within the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pkill_stop_of_leasehold_worker_does_not_stop_the_watchdog() {
    let _serial = SERIAL.lock().await;
    let (_c, client, endpoints) = cluster().await;
    submit(&client, "p-1", "pq").await;
    let dir = tempfile::tempdir().unwrap();
    let (ttl_ms, ttl) = (2_000, Duration::from_millis(2_000));
    let script = ticking_command(dir.path(), "wait");
    let worker = spawn_worker(&endpoints, "pq", ttl_ms, &script);
    let worker_pid = worker.id().expect("the worker's pid") as i32;
    let pgid = read_pid(&dir.path().join("pgid"), BOUND).await;
    let mut guard = GroupGuard(Some(pgid));
    let grandchild = read_pid(&dir.path().join("grandchild"), BOUND).await;
    let watchdog = parent_of(pgid).expect("the command's parent");
    let watchdog_line = command_line(watchdog).unwrap_or_default();

    let claimed = wait_job(&client, "p-1", "leased", |j| j.state == JobState::Leased).await;
    wait_job(&client, "p-1", "a renew", |j| {
        j.lease_until_ms > claimed.lease_until_ms
    })
    .await;
    let fault_at = Instant::now();
    let stopped = pkill_stop(
        "leasehold worker",
        &[worker_pid, watchdog, pgid, grandchild],
    );
    let _resume = KillStopped(stopped.clone());
    assert!(
        stopped.contains(&worker_pid),
        "the pattern must match the worker ({:?}) for the test to mean anything",
        command_line(worker_pid)
    );

    let dead_at = wait_group_dead(pgid, grandchild, fault_at, fault_at + ttl * 3).await;
    assert!(
        dead_at < fault_at + ttl,
        "the command's group died {:?} after the pkill, past the ttl {ttl:?} (stopped: \
         {stopped:?}, watchdog {watchdog}: {watchdog_line:?})",
        dead_at - fault_at
    );
    // Reaped by the watchdog, which has exited: the group id may be anyone's now.
    guard.0 = None;
    // Nor would a pattern for the command (`pkill -f job.py`) reach it.
    let dir_text = dir.path().display().to_string();
    assert!(
        !watchdog_line.contains("worker") && !watchdog_line.contains(&dir_text),
        "the watchdog's command line names the worker or the command: {watchdog_line:?}"
    );
}

/// Waits (bounded) for `child`'s exit; its status. Polls: the child is std's, not tokio's.
async fn wait_exit(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let until = Instant::now() + BOUND;
    loop {
        if let Some(status) = child.try_wait().expect("waiting for a child") {
            return status;
        }
        assert!(
            Instant::now() < until,
            "{what} did not exit within {BOUND:?}"
        );
        tokio::time::sleep(DEATH_POLL).await;
    }
}

/// Issue 44 item 6: the worker and its watchdog are stopped (SIGSTOP) and the watchdog
/// is resumed only after the store gave the job to a second owner, long past the kill
/// deadline. The group must get SIGKILL at once, not SIGTERM first: a SIGTERM handler
/// would run while the job is someone else's. Seen from a probe process the test puts in
/// the command's group: with SIGTERM's default action it dies of a SIGTERM the moment one
/// is sent (the kernel ends it on sending), so its exit status names the first signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_resumed_past_the_deadline_kills_without_a_term() {
    use std::os::unix::process::ExitStatusExt as _;
    let _serial = SERIAL.lock().await;
    let (_c, client, endpoints) = cluster().await;
    submit(&client, "r-1", "rq2").await;
    let dir = tempfile::tempdir().unwrap();
    let ttl_ms = 2_000;
    let script = ticking_command(dir.path(), "wait");
    let worker = spawn_worker(&endpoints, "rq2", ttl_ms, &script);
    let worker_pid = worker.id().expect("the worker's pid") as i32;
    let pgid = read_pid(&dir.path().join("pgid"), BOUND).await;
    let mut guard = GroupGuard(Some(pgid));
    let grandchild = read_pid(&dir.path().join("grandchild"), BOUND).await;
    let watchdog = parent_of(pgid).expect("the command's parent");
    // The test's own child, moved into the command's group (same session: allowed).
    let mut probe = std::process::Command::new("sleep")
        .arg("600")
        .process_group(pgid)
        .spawn()
        .expect("a probe in the command's group");

    let claimed = wait_job(&client, "r-1", "leased", |j| j.state == JobState::Leased).await;
    wait_job(&client, "r-1", "a renew", |j| {
        j.lease_until_ms > claimed.lease_until_ms
    })
    .await;
    signal(watchdog as u32, libc::SIGSTOP);
    signal(worker_pid as u32, libc::SIGSTOP);
    let mut stopped = KillStopped(vec![watchdog, worker_pid]);
    // The store lets a second owner have the job: the lease expired there, so the
    // worker's local deadline (earlier) has long passed.
    let (_, generation) = claim_when_free(&client, "r-1", 60_000).await;
    assert_eq!(generation, 2);
    signal(watchdog as u32, libc::SIGCONT);

    let status = wait_exit(&mut probe, "the probe in the command's group").await;
    let resumed_at = Instant::now();
    wait_group_dead(pgid, grandchild, resumed_at, resumed_at + BOUND).await;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the group's first signal after a resume past the deadline was not SIGKILL: the \
         probe ended with {status:?} (15 = SIGTERM)"
    );
    signal(worker_pid as u32, libc::SIGCONT);
    // Both run again, and their pids are free once the worker is reaped: not to be killed.
    stopped.0.clear();
    let (code, stderr) = finish(worker).await;
    guard.0 = None;
    assert_eq!(code, 0, "stderr: {stderr}");
    assert!(stderr.contains("lease lost"), "stderr: {stderr}");
}

/// Issue 44 item 6: a worker that dies after starting its watchdog but before the
/// watchdog's `started` reached it. The watchdog's write of `started` then fails, and it
/// used to return at that error without killing the group: its leader died of
/// `PR_SET_PDEATHSIG`, and what the leader had started ran on unwatched. The test is the
/// worker here (the watchdog's protocol by hand, `cli/src/worker/protocol.rs`): it
/// fills the socket so that `started` cannot be written, lets the command start its
/// grandchild, then closes its end. The whole group must die with the watchdog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watchdog_whose_worker_died_before_started_kills_the_group() {
    use std::io::Write as _;
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let filler = theirs.try_clone().unwrap();
    fill(&filler);
    let script = ticking_command(dir.path(), "wait");
    let command = serde_json::to_string(&["sh", "-c", &script]).unwrap();
    ours.write_all(format!("command {command}\n").as_bytes())
        .unwrap();
    let now = leasehold_client::Clock::boot().now().since_origin();
    let deadline_ns = (now + Duration::from_secs(120)).as_nanos().to_string();
    let log_path = dir.path().join("watchdog.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut watchdog = std::process::Command::new(bin())
        .arg0("leasehold-watchdog")
        .args(["--grace-ms", "500", "--deadline-ns", &deadline_ns])
        .stdin(std::os::fd::OwnedFd::from(theirs))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawning the watchdog");
    drop(filler);
    let pgid = read_pid(&dir.path().join("pgid"), BOUND).await;
    let mut guard = GroupGuard(Some(pgid));
    let grandchild = read_pid(&dir.path().join("grandchild"), BOUND).await;
    assert_eq!(
        watchdog.try_wait().unwrap(),
        None,
        "the watchdog must still be writing `started`; its stderr: {}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );

    drop(ours); // the worker dies
    let died_at = Instant::now();
    let status = wait_exit(&mut watchdog, "the watchdog").await;
    let give_up = died_at + BOUND;
    loop {
        let left = live_members(pgid);
        if left.is_empty() && !is_alive(grandchild) {
            break;
        }
        assert!(
            Instant::now() < give_up,
            "{:?} after its worker died, the watchdog had exited ({status:?}) and group \
             {pgid} still has {left:?} (grandchild {grandchild} alive: {}); the \
             watchdog's stderr: {}",
            died_at.elapsed(),
            is_alive(grandchild),
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
        tokio::time::sleep(DEATH_POLL).await;
    }
    // The watchdog reaped the leader: the group id may be anyone's from now on.
    guard.0 = None;
}

/// Writes into `sock` until its send buffer is full (bounded): the next write on this
/// socket, the watchdog's, waits until the other end reads or closes.
fn fill(sock: &std::os::unix::net::UnixStream) {
    use std::io::Write as _;
    sock.set_nonblocking(true).unwrap();
    let chunk = [b'#'; 4096];
    for _ in 0..65_536 {
        match (&*sock).write(&chunk) {
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                sock.set_nonblocking(false).unwrap();
                return;
            }
            Err(e) => panic!("filling the socket: {e}"),
        }
    }
    panic!("the socket took 256 MiB without filling up");
}
