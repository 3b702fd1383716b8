//! A real `leasehold serve` process on a disk that fails under it (issue 19), through the
//! `LD_PRELOAD` shim of `fs_shim.rs`: every directory entry it creates is fsynced into
//! its directory before it acknowledges a write, and after a failed fsync of its log it
//! acknowledges nothing more, never retries the fsync, and exits with code 74 and one
//! `error:` line.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::process::{Child, Command};

use crate::fs_shim::{read_trace, shim, unsynced_entries};

/// Bound on the node electing itself (one voter) and answering.
const READY_WAIT: Duration = Duration::from_secs(30);
/// Bound on the node exiting once its storage failed.
const EXIT_WAIT: Duration = Duration::from_secs(30);

struct Node {
    child: Child,
    addr: std::net::SocketAddr,
    http: reqwest::Client,
}

/// Starts a one-voter `serve` on `data` under the shim, with `env` for the shim.
fn serve(data: &Path, env: &[(&str, &Path)]) -> Node {
    let addr = leasehold_proc_cluster::free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    cmd.args(["serve", "--id=1"])
        .arg(format!("--listen={addr}"))
        .arg(format!("--data-dir={}", data.display()))
        .arg(format!("--peer=1={addr}"))
        .env("LD_PRELOAD", shim())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    Node {
        child: cmd.spawn().expect("starting leasehold serve"),
        addr,
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap(),
    }
}

impl Node {
    /// Waits (bounded) until the node leads its one-voter cluster.
    async fn wait_leader(&self) {
        let deadline = Instant::now() + READY_WAIT;
        let url = format!("http://{}/v1/cluster", self.addr);
        loop {
            if let Ok(r) = self.http.get(&url).send().await {
                if let Ok(v) = r.json::<Value>().await {
                    if v["leader_id"] == json!(1) {
                        return;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "node did not lead within {READY_WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Submits a job: its HTTP status, or `None` if no answer came.
    async fn submit(&self, id: &str) -> Option<u16> {
        let url = format!("http://{}/v1/jobs", self.addr);
        let r = self
            .http
            .post(&url)
            .json(&json!({"id": id, "queue": "q"}))
            .send()
            .await;
        r.ok().map(|r| r.status().as_u16())
    }
}

fn canonical_tmp() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    (tmp, root)
}

/// `<data>` itself, `<data>/log`, `<data>/sm`, the identity file, the first segment: each
/// new entry is fsynced into its directory by the time a write is acknowledged. `log/`
/// and `sm/` used to be created after the data dir's last fsync, and the data dir's own
/// entry was never synced into its parent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_new_directory_entry_is_fsynced_before_a_write_is_acknowledged() {
    let (_tmp, root) = canonical_tmp();
    let data = root.join("data");
    let trace = root.join("trace");
    let node = serve(&data, &[("LH_SHIM_TRACE", &trace)]);
    node.wait_leader().await;
    assert_eq!(node.submit("a").await, Some(201));
    let ops = read_trace(&trace);
    assert!(
        ops.iter()
            .any(|o| o.op == "mkdir" && o.path == data.join("log")),
        "the shim saw the node create its dirs: {ops:?}"
    );
    let unsynced = unsynced_entries(&ops, &root);
    assert!(
        unsynced.is_empty(),
        "entries never fsynced into their directory: {unsynced:#?}"
    );
}

/// The log's fdatasync starts failing with EIO after a first acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_log_fsync_stops_the_node_with_exit_code_74() {
    let (_tmp, root) = canonical_tmp();
    let data = root.join("data");
    let trace = root.join("trace");
    let trigger = root.join("fail-now");
    let log_dir = data.join("log").join("seg-");
    let node = serve(
        &data,
        &[
            ("LH_SHIM_TRACE", &trace),
            ("LH_SHIM_FAIL_PATH", &log_dir),
            ("LH_SHIM_FAIL_TRIGGER", &trigger),
        ],
    );
    node.wait_leader().await;
    assert_eq!(node.submit("before").await, Some(201));
    std::fs::write(&trigger, b"").unwrap();

    let after = node.submit("after").await;
    assert!(
        !after.is_some_and(|s| (200..300).contains(&s)),
        "a write was acknowledged after its fsync failed: {after:?}"
    );
    let out = tokio::time::timeout(EXIT_WAIT, node.child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the node did not exit within {EXIT_WAIT:?}"))
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(74), "stderr: {stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "one error line: {stderr}");
    assert!(errors[0].contains("storage failed"), "{}", errors[0]);

    let ops = read_trace(&trace);
    let first_fail = ops
        .iter()
        .position(|o| o.op == "fail")
        .expect("the shim failed an fsync");
    let log_syncs_after: Vec<_> = ops[first_fail + 1..]
        .iter()
        .filter(|o| {
            o.path
                .to_string_lossy()
                .contains(&*log_dir.to_string_lossy())
        })
        .collect();
    assert!(
        log_syncs_after.is_empty(),
        "the log fsynced again after the failure: {log_syncs_after:?}"
    );
}
