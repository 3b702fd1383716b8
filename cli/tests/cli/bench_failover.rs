//! `leasehold bench failover` end to end: it starts its own three `serve` processes,
//! SIGKILLs the leader under load and reports the gaps. One short trial; what is asserted
//! is what must hold on any machine: the report's shape, every held lease intact, and
//! no unrenewed lease claimable before its TTL ran out. (The figures themselves are the
//! benchmark's business, not a test's.)

use std::time::Duration;

use serde_json::Value;

/// Bound on one trial: start, 2 s + 3 s of load, restart and catch-up, on a busy box.
const RUN_WAIT: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_failover_trial_keeps_held_leases_and_never_expires_early() {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_leasehold"));
    cmd.args([
        "bench",
        "failover",
        "--trials=1",
        "--concurrency=4",
        "--held=8",
        "--expiring=2",
        "--pre-secs=2",
        "--post-secs=4",
    ])
    .env_remove("RUST_LOG")
    .kill_on_drop(true);
    let out = tokio::time::timeout(RUN_WAIT, cmd.output())
        .await
        .expect("bench failover finishes in time")
        .expect("running leasehold");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failover failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), 2, "one trial line and one summary: {stdout}");
    let (trial, summary) = (&lines[0], &lines[1]);
    assert_eq!(trial["held_intact"], "8/8", "{trial}");
    for key in ["new_leader_ms", "write_gap_ms", "client_gap_ms"] {
        let v = trial[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} in {trial}"));
        assert!(v >= 0.0, "{key} = {v}");
    }
    let expiry = trial["expiry_error_ms"].as_array().expect("expiry list");
    assert_eq!(expiry.len(), 2, "{trial}");
    for e in expiry {
        let e = e
            .as_f64()
            .unwrap_or_else(|| panic!("an expiring lease was never claimable: {trial}"));
        assert!(
            e >= 0.0,
            "a lease became claimable {e} ms before its TTL ran out: {trial}"
        );
    }
    assert_eq!(summary["mode"], "failover");
    assert_eq!(summary["held_intact_all_trials"], true);
    assert!(
        summary["median"]["write_gap_ms"].as_f64().is_some(),
        "{summary}"
    );
}
