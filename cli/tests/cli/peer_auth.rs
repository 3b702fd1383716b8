//! `serve`'s refusals at startup and its private data dir (issue 7, part 1), as the
//! binary: a data dir of another node id is refused naming the file and both ids, a
//! short or world-readable peer secret file is refused, and a running node keeps its
//! data dir 0700/0600. Peer authentication itself is node/tests/cluster/peer_auth.rs.

use std::path::Path;
use std::time::Duration;

use crate::binary::{self, Out};
use crate::common::{eventually, LEADER_WAIT};
use leasehold_node::security::peer_auth::PeerSecret;
use serde_json::{json, Value};
use tokio::process::Command as Process;

/// Bound on one `leasehold` process run.
const PROC_WAIT: Duration = Duration::from_secs(30);

async fn leasehold(args: &[String]) -> Out {
    let mut cmd = binary::leasehold(args);
    cmd.env("RUST_LOG", "info");
    binary::run(cmd, PROC_WAIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_data_dir_of_another_node_id_naming_the_file_and_both_ids() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    leasehold_node::security::identity::open(&data, 2, None).unwrap();
    let out = leasehold(&[
        "serve".into(),
        "--id=3".into(),
        "--listen=127.0.0.1:0".into(),
        format!("--data-dir={}", data.display()),
        "--peer=3=127.0.0.1:1".into(),
    ])
    .await;
    let stderr = &out.stderr;
    assert_ne!(out.code, 0, "serve started on node 2's data dir: {stderr}");
    let file = data.join(leasehold_node::security::identity::IDENTITY_FILE);
    for needle in ["node 2", "node 3", &file.display().to_string()] {
        assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
    }
    assert!(
        !data.join("log").exists(),
        "the log was opened before the check"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_a_short_or_world_readable_secret_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short");
    std::fs::write(&short, "too-short\n").unwrap();
    std::fs::set_permissions(&short, std::fs::Permissions::from_mode(0o600)).unwrap();
    let open = dir.path().join("open");
    PeerSecret::write_new_file(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    for (file, needle) in [(&short, "at least 32"), (&open, "chmod 600")] {
        let out = leasehold(&[
            "serve".into(),
            "--id=1".into(),
            "--listen=127.0.0.1:0".into(),
            format!("--data-dir={}", dir.path().join("data").display()),
            "--peer=1=127.0.0.1:1".into(),
            format!("--peer-secret-file={}", file.display()),
        ])
        .await;
        let stderr = &out.stderr;
        assert_ne!(out.code, 0, "{}: {stderr}", file.display());
        assert!(
            stderr.contains(needle) && stderr.contains(&file.display().to_string()),
            "{stderr}"
        );
    }
}

/// Every dir under `root` (itself included) is 0700 and every file 0600.
fn assert_private(root: &Path) -> usize {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(root).unwrap();
    let mode = meta.permissions().mode() & 0o777;
    let want = if meta.is_dir() { 0o700 } else { 0o600 };
    assert_eq!(mode, want, "{} is {mode:o}", root.display());
    let mut n = 1;
    if meta.is_dir() {
        for e in std::fs::read_dir(root).unwrap() {
            n += assert_private(&e.unwrap().path());
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_keeps_its_data_dir_private() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let secret = dir.path().join("secret");
    PeerSecret::write_new_file(&secret).unwrap();
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut child = Process::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "serve".into(),
            "--id=1".into(),
            format!("--listen={addr}"),
            format!("--data-dir={}", data.display()),
            format!("--peer=1={addr}"),
            format!("--peer-secret-file={}", secret.display()),
        ])
        .env("RUST_LOG", "error")
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    let url = format!("http://{addr}/v1/jobs");
    eventually("the node to accept a job", LEADER_WAIT, || async {
        let r = http
            .post(&url)
            .json(&json!({"id": "j"}))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        match r.status().as_u16() {
            201 | 409 => Ok(()),
            s => Err(format!("{s}")),
        }
    })
    .await;
    let v: Value = http
        .get(format!("http://{addr}/v1/cluster"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        v["cluster_id"].as_str().is_some_and(|c| c.len() == 32),
        "{v}"
    );
    child.kill().await.unwrap();
    let files = assert_private(&data);
    assert!(data.join("log").is_dir() && data.join("identity").is_file());
    assert!(
        files >= 5,
        "expected the log, its files, sm and identity; saw {files} entries"
    );
}
