//! The process-cluster fixture itself (`proc-cluster/`), where its behaviour is what a
//! failing test's report depends on: a start that cannot form says why at once, with the
//! nodes' logs, and keeps them (issue 44 item 7: a start that failed under load panicked
//! after 30 s with only "no agreed leader", and the logs that named the cause were gone).

use std::time::{Duration, Instant};

use leasehold_cluster_tests::fixture::{leasehold_bin, ClusterOpts, ProcCluster};

/// Far longer than a failed start may take: it must not wait this out.
const BOUND: Duration = Duration::from_secs(30);

/// Every node refuses its command line and exits at once: the start fails within a few
/// seconds (not after `BOUND`) naming the node that exited, with the end of its log, and
/// the logs stay on disk.
#[tokio::test]
async fn a_start_whose_node_exits_fails_at_once_with_its_log_kept() {
    let mut opts = ClusterOpts::new(leasehold_bin(env!("CARGO_BIN_EXE_leasehold-under-test")));
    opts.serve_args_extra = vec!["--no-such-flag".into()];
    let started = Instant::now();
    let Err(e) = ProcCluster::try_start(opts, BOUND).await else {
        panic!("a cluster whose nodes refuse their flags formed");
    };
    let took = started.elapsed();
    let text = e.to_string();
    let kept = text
        .split("kept in ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .map(std::path::PathBuf::from);
    let kept_log = kept.as_ref().map(|dir| dir.join("n1.log"));
    let log_there = kept_log.as_ref().is_some_and(|p| p.exists());
    if let Some(dir) = &kept {
        let _ = std::fs::remove_dir_all(dir);
    }
    assert!(
        took < BOUND / 3,
        "the start failed only after {took:?}: {text}"
    );
    assert!(text.contains("exited while the cluster formed"), "{text}");
    assert!(
        text.contains("--no-such-flag"),
        "the node's log is not in: {text}"
    );
    assert!(log_there, "the node's log was not kept: {text}");
}
