//! The `leasehold` binary under client tokens (`serve --auth-file`, issue 7 part 2):
//! it sends `--token` / `LEASEHOLD_TOKEN` and explains a 401, and `worker run` and
//! `bench` send the token too. What the nodes enforce is node/tests/api/client_auth.rs;
//! the tokens are node/tests/common/tokens.rs.

use std::time::Duration;

use crate::binary::{self, Out};
use crate::common::tokens::{ADMIN, ANY_WORKER, READER, TEAM_A};
use crate::common::TestCluster;
use serde_json::json;

/// Bound on one run of the binary.
const CMD_WAIT: Duration = Duration::from_secs(60);

/// Runs `leasehold` with `LEASEHOLD_TOKEN` set to `env_token` (unset when `None`).
async fn leasehold(c: &TestCluster, env_token: Option<&str>, args: &[&str]) -> Out {
    let mut cmd = binary::leasehold(args);
    cmd.env("LEASEHOLD_ENDPOINTS", c.endpoints());
    if let Some(t) = env_token {
        cmd.env("LEASEHOLD_TOKEN", t);
    }
    binary::run(cmd, CMD_WAIT).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cli_sends_its_token_and_explains_a_401() {
    let (c, _dir) = TestCluster::start_with_tokens().await;
    c.wait_for_leader_in_process().await;

    let missing = leasehold(&c, None, &["cluster", "status"]).await;
    assert_eq!(missing.code, 1, "an api.md error: {:?}", missing.stderr);
    assert!(
        missing.stderr.starts_with("error: unauthenticated:")
            && missing.stderr.contains("--token")
            && missing.stderr.contains("LEASEHOLD_TOKEN"),
        "{:?}",
        missing.stderr
    );
    assert!(missing.stdout.is_empty(), "{:?}", missing.stdout);

    let flag = [
        "job", "claim", "j1", "--owner", "team-a/w", "--ttl-ms", "30000",
    ];
    let mut with_flag = flag.to_vec();
    with_flag.extend(["--token", TEAM_A, "--output", "json"]);
    let lease = leasehold(&c, None, &with_flag)
        .await
        .json_for("claim with --token");
    assert_eq!(lease["owner"], "team-a/w");

    let status = ["cluster", "status", "--output", "json"];
    let view = leasehold(&c, Some(READER), &status)
        .await
        .json_for("LEASEHOLD_TOKEN");
    assert!(view["leader_id"].is_u64(), "{view}");

    let mut outside = flag.to_vec();
    outside[4] = "team-b/w";
    let denied = leasehold(&c, Some(TEAM_A), &outside).await;
    assert_eq!(denied.code, 1, "{:?}", denied.stderr);
    assert!(
        denied.stderr.starts_with("error: permission_denied:") && denied.stderr.contains("team-a/"),
        "{:?}",
        denied.stderr
    );

    worker_and_bench_send_the_token(&c).await;
    c.shutdown().await;
}

/// `worker run` claims, renews and completes with the token; `bench` runs its cycles.
async fn worker_and_bench_send_the_token(c: &TestCluster) {
    let submit = [
        "job", "submit", "--id", "w-1", "--queue", "auth", "--output", "json",
    ];
    leasehold(c, Some(ADMIN), &submit).await.json_for("submit");
    let run = [
        "worker",
        "run",
        "--queue",
        "auth",
        "--ttl-ms",
        "5000",
        "--owner",
        "team-a/worker",
        "--max-jobs",
        "1",
        "--poll-wait-ms",
        "1000",
        "--",
        "true",
    ];
    let worker = leasehold(c, Some(TEAM_A), &run).await;
    assert_eq!(worker.code, 0, "worker: {:?}", worker.stderr);
    let job = leasehold(c, Some(READER), &["job", "get", "w-1", "--output", "json"])
        .await
        .json_for("get w-1");
    assert_eq!(
        (&job["state"], &job["owner"]),
        (&json!("completed"), &json!("team-a/worker"))
    );

    let bench = [
        "bench",
        "--cycles",
        "5",
        "--concurrency",
        "1",
        "--max-secs",
        "20",
    ];
    let report = leasehold(c, Some(ANY_WORKER), &bench)
        .await
        .json_for("bench");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["cycles_done"], 5, "{report}");
}
