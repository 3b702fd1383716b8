//! A rolling upgrade with real processes (issue 29, item 5): three nodes of the previous
//! release under a claim/complete load are restarted one at a time on this build, on
//! their own data dirs. While any node runs the previous release the cluster version
//! stays the previous release's (1 before entry versions, 4 for issue 31's release:
//! nothing is written that it cannot read); after the last, the leader
//! activates this build's entry version. Then a downgrade is refused: the previous release started on an
//! upgraded node's data dir exits without serving, and so does this build claiming the
//! old entry version (`ENTRY_VERSION_MAX_ENV`), naming the newer data; this build on the
//! same dir comes back. The history checker judges the whole run (no acknowledged write
//! lost, fencing, mutual exclusion) and every replica's digest must agree.
//!
//! The previous release's binary: `LEASEHOLD_PREV_BIN`, else built here from a `git
//! worktree` at the commit in `cluster-tests/upgrade-from` (cached under
//! `target/upgrade-prev/`). When neither is possible the test prints why and passes —
//! unless `LEASEHOLD_REQUIRE_PREV_BIN=1` (CI), when it fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use leasehold_cluster_tests::fixture::ClusterOpts;
use leasehold_cluster_tests::scenario::{job_ids, Bins, Chaos, LEADER_BOUND};
use leasehold_node::raft::versions::ENTRY_VERSION_MAX_ENV;
use leasehold_node::store::LEADER_MARK_FILE;
/// The entry version this build applies, which the upgraded cluster activates.
use leasehold_statemachine::ENTRY_VERSION_MAX as NEWEST;
use serde::Deserialize;
use tokio::time::Instant;

/// Lease TTL of the load.
const TTL: u64 = 2_000;
/// Bound on a restarted node becoming ready, and on the activation.
const READY_BOUND: Duration = Duration::from_secs(60);
/// Bound on a refused start ending its process.
const EXIT_BOUND: Duration = Duration::from_secs(60);
const PREV_BIN_ENV: &str = "LEASEHOLD_PREV_BIN";
const REQUIRE_ENV: &str = "LEASEHOLD_REQUIRE_PREV_BIN";

fn bins() -> Bins {
    leasehold_cluster_tests::test_bins!()
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate is in the workspace")
        .to_path_buf()
}

/// The commit of the previous release (`cluster-tests/upgrade-from`).
fn pinned_commit() -> String {
    let path = repo_root().join("cluster-tests/upgrade-from");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .expect("cluster-tests/upgrade-from names a commit")
        .to_owned()
}

/// Runs `cmd`, or says why it failed.
fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = err.lines().rev().take(15).collect();
    Err(format!(
        "{what} failed ({}): {}",
        out.status,
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    ))
}

/// Builds the previous release from a `git worktree` at the pinned commit, once: kept as
/// `target/upgrade-prev/leasehold-<commit>`.
fn build_previous(commit: &str) -> Result<PathBuf, String> {
    let root = repo_root();
    let base = root.join("target/upgrade-prev");
    let bin = base.join(format!("leasehold-{commit}"));
    if bin.exists() {
        return Ok(bin);
    }
    let known = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["cat-file", "-e", &format!("{commit}^{{commit}}")])
        .status();
    if !matches!(known, Ok(s) if s.success()) {
        return Err(format!(
            "commit {commit} is not in this clone (shallow, or no git)"
        ));
    }
    let src = base.join(format!("src-{commit}"));
    if !src.exists() {
        let mut add = Command::new("git");
        add.arg("-C")
            .arg(&root)
            .args(["worktree", "add", "--detach"]);
        run(add.arg(&src).arg(commit), "git worktree add")?;
    }
    eprintln!(
        "upgrade: building the previous release ({commit}) in {}",
        src.display()
    );
    let mut build = Command::new(env!("CARGO"));
    build
        .current_dir(&src)
        .env("CARGO_TARGET_DIR", base.join("target"))
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "leasehold-node",
            "--bin",
            "leasehold",
        ]);
    run(&mut build, "cargo build of the previous release")?;
    std::fs::copy(base.join("target/release/leasehold"), &bin)
        .map_err(|e| format!("copying the previous binary: {e}"))?;
    Ok(bin)
}

/// The previous release's binary, or why there is none.
fn previous_binary() -> Result<PathBuf, String> {
    match std::env::var_os(PREV_BIN_ENV) {
        Some(p) if Path::new(&p).is_file() => Ok(PathBuf::from(p)),
        Some(p) => Err(format!(
            "{PREV_BIN_ENV}={} is not a file",
            p.to_string_lossy()
        )),
        None => build_previous(&pinned_commit()),
    }
}

/// What the test reads of `/v1/cluster` (the previous release has no version fields).
#[derive(Debug, Deserialize)]
struct View {
    leader_id: Option<u64>,
    commit_index: u64,
    applied_index: u64,
    cluster_version: Option<u32>,
    entry_version_max: Option<u32>,
}

async fn view(c: &Chaos, id: u64) -> Option<View> {
    if !c.cluster.is_running(id) {
        return None;
    }
    c.cluster.get_json(id, "/v1/cluster").await
}

/// Waits until node `id` follows an agreed leader and has applied what it committed.
async fn wait_caught_up(c: &Chaos, id: u64) {
    let deadline = Instant::now() + READY_BOUND;
    loop {
        let leader = c.cluster.leader().await;
        let committed = match leader {
            Some(l) => view(c, l).await.map(|v| v.commit_index),
            None => None,
        };
        if let (Some(l), Some(committed), Some(v)) = (leader, committed, view(c, id).await) {
            if v.leader_id == Some(l) && v.applied_index >= committed {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "node {id} was not caught up within {READY_BOUND:?}\n{}",
            c.cluster.log_tails(20)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every node on this build reports cluster version `want` (the others report none).
async fn assert_cluster_version(c: &Chaos, upgraded: &[u64], want: u32) {
    for &id in upgraded {
        let v = view(c, id).await.expect("an upgraded node answers");
        assert_eq!(
            v.entry_version_max,
            Some(NEWEST),
            "node {id} runs this build"
        );
        assert_eq!(
            v.cluster_version,
            Some(want),
            "node {id}'s cluster version while {upgraded:?} of 3 are upgraded"
        );
    }
}

/// What the leader's `/v1/cluster` says of one member's entry version.
#[derive(Debug, Deserialize)]
struct MemberVersion {
    entry_version_max: u32,
    source: String,
}

#[derive(Debug, Deserialize)]
struct LeaderView {
    entry_versions: std::collections::BTreeMap<String, MemberVersion>,
}

/// The entry version the previous release's cluster runs once it has activated all it
/// can: its `entry_version_max`, or 1 for a release from before entry versions (no
/// version fields, and a 404 on `/raft/version`).
async fn previous_version(c: &Chaos) -> u32 {
    let deadline = Instant::now() + READY_BOUND;
    loop {
        let leader = c.cluster.wait_leader(LEADER_BOUND).await;
        if let Some(v) = view(c, leader).await {
            match v.entry_version_max {
                None => return 1,
                Some(max) if v.cluster_version == Some(max) => return max,
                Some(_) => {}
            }
        }
        assert!(
            Instant::now() < deadline,
            "the previous release's cluster did not activate its version"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How the leader of this build sees a member of the previous release, which runs
/// entry version `prev`: advertised, or (before entry versions) by its 404.
fn previous_as_seen(prev: u32) -> (u32, &'static str) {
    if prev == 1 {
        (1, "previous_release")
    } else {
        (prev, "advertised")
    }
}

/// When a node of this build leads while others are old: it must see each old node as
/// the previous release (at entry version `prev`) and each upgraded one at this build's
/// version, within a few polls.
/// Returns whether it could check (an old leader polls nobody).
async fn leader_sees_versions(c: &Chaos, upgraded: &[u64], prev: u32) -> bool {
    let Some(leader) = c.cluster.leader().await.filter(|l| upgraded.contains(l)) else {
        return false;
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v: Option<LeaderView> = c.cluster.get_json(leader, "/v1/cluster").await;
        let ok = v.as_ref().is_some_and(|v| {
            c.cluster.ids().iter().all(|id| {
                let seen = v.entry_versions.get(&id.to_string());
                let want = if upgraded.contains(id) {
                    (NEWEST, "advertised")
                } else {
                    previous_as_seen(prev)
                };
                seen.is_some_and(|s| (s.entry_version_max, s.source.as_str()) == want)
            })
        });
        if ok {
            return true;
        }
        assert!(
            Instant::now() < deadline,
            "leader {leader} (this build) does not see the members' versions: {v:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every node reports this build's cluster version.
async fn wait_activated(c: &Chaos) {
    let deadline = Instant::now() + READY_BOUND;
    loop {
        let mut versions = Vec::new();
        for id in c.cluster.ids() {
            versions.push(view(c, id).await.and_then(|v| v.cluster_version));
        }
        if versions.iter().all(|v| *v == Some(NEWEST)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "cluster version {NEWEST} not activated on every node within {READY_BOUND:?}: {versions:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts node `id` on `bin` (with `env`) on its data dir and waits for its process to
/// end by itself: it must fail without ever serving. Returns its log.
async fn assert_refuses_to_start(
    c: &mut Chaos,
    id: u64,
    bin: &Path,
    env: Vec<(String, String)>,
) -> String {
    c.cluster.set_binary(bin.to_path_buf(), env);
    c.cluster.restart(id);
    let deadline = Instant::now() + EXIT_BOUND;
    let status = loop {
        // `/v1/cluster` answers JSON on both releases as soon as a node serves.
        let served: Option<serde_json::Value> = c.cluster.get_json(id, "/v1/cluster").await;
        assert!(served.is_none(), "node {id} served on {}", bin.display());
        if let Some(s) = c.cluster.try_exit_status(id) {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "node {id} on {} did not exit within {EXIT_BOUND:?}",
            bin.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let log = std::fs::read_to_string(c.cluster.log_path(id)).unwrap_or_default();
    assert!(
        !status.success(),
        "node {id} on {} exited {status}",
        bin.display()
    );
    log
}

/// The last `n` lines of `log`.
fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The previous release's binary, or `None` after saying why there is none (a failure
/// instead under `LEASEHOLD_REQUIRE_PREV_BIN=1`).
fn previous_or_skip(test: &str) -> Option<PathBuf> {
    match previous_binary() {
        Ok(p) => Some(p),
        Err(why) if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") => {
            panic!("{REQUIRE_ENV}=1 and no previous release to upgrade from: {why}")
        }
        Err(why) => {
            eprintln!("{test}: skipped: no previous release to upgrade from: {why}");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_upgrade_from_the_previous_release_then_a_refused_downgrade() {
    let Some(prev) = previous_or_skip("upgrade") else {
        return;
    };
    let new = bins().leasehold;
    eprintln!("upgrade: from {} to {}", prev.display(), new.display());
    let mut c = Chaos::start(
        "rolling_upgrade",
        ClusterOpts::new(prev.clone()),
        TTL,
        bins(),
    )
    .await;
    c.spawn_workers(4, &job_ids("job", 6), |_| {});
    c.run_for(Duration::from_secs(2)).await;
    let prev_version = previous_version(&c).await;
    assert!(
        prev_version < NEWEST,
        "the previous release runs an older version"
    );
    eprintln!("upgrade: the previous release's cluster runs entry version {prev_version}");
    let ids = c.cluster.ids();
    for (i, &id) in ids.iter().enumerate() {
        c.cluster.kill(id);
        c.cluster.set_binary(new.clone(), Vec::new());
        c.cluster.restart(id);
        c.fault(format!("node {id} restarted on this build"));
        wait_caught_up(&c, id).await;
        c.run_for(Duration::from_secs(2)).await;
        if i + 1 < ids.len() {
            // Two polls of the leader's, at least, with an old node still in.
            assert_cluster_version(&c, &ids[..=i], prev_version).await;
            if !leader_sees_versions(&c, &ids[..=i], prev_version).await {
                eprintln!("upgrade: an old node leads: no versions to check at step {i}");
            }
            assert_cluster_version(&c, &ids[..=i], prev_version).await;
        }
    }
    wait_activated(&c).await;
    c.fault(format!("cluster version {NEWEST} activated"));
    c.run_for(Duration::from_secs(2)).await;

    // A downgrade after the activation: a follower's data dir now holds the new version.
    let leader = c.cluster.wait_leader(LEADER_BOUND).await;
    let victim = *ids.iter().find(|&&id| id != leader).expect("a follower");
    c.cluster.kill(victim);
    c.fault(format!(
        "node {victim} stopped, started on the previous release"
    ));
    let log = assert_refuses_to_start(&mut c, victim, &prev, Vec::new()).await;
    eprintln!(
        "upgrade: the previous release on node {victim}'s data dir:\n{}",
        tail(&log, 5)
    );
    let claimed = vec![(ENTRY_VERSION_MAX_ENV.to_owned(), "1".to_owned())];
    let log = assert_refuses_to_start(&mut c, victim, &new, claimed).await;
    assert!(
        log.contains("written by a newer leasehold")
            && log.contains("this binary applies up to 1; start the newer binary"),
        "this build claiming entry version 1 names the newer data:\n{}",
        tail(&log, 10)
    );
    c.cluster.set_binary(new.clone(), Vec::new());
    c.cluster.restart(victim);
    c.fault(format!("node {victim} back on this build"));
    wait_caught_up(&c, victim).await;
    assert_cluster_version(&c, &ids, NEWEST).await;
    c.run_for(Duration::from_secs(2)).await;
    c.finish().await;
}

/// Node `id`'s leader mark (`store/wal/mark.rs`).
fn leader_mark(c: &Chaos, id: u64) -> PathBuf {
    c.cluster.data_dir(id).join("log").join(LEADER_MARK_FILE)
}

/// The term node `id`'s leader mark names, if there is one.
fn mark_term(c: &Chaos, id: u64) -> Option<u64> {
    let text = std::fs::read_to_string(leader_mark(c, id)).ok()?;
    text.rsplit_once("term=")?.1.trim().parse().ok()
}

/// Waits until node `id` leads and has sent an entry early (its leader mark is there).
async fn wait_marked(c: &Chaos, id: u64) {
    let deadline = Instant::now() + READY_BOUND;
    while !leader_mark(c, id).exists() {
        assert!(
            Instant::now() < deadline,
            "leader {id} wrote no leader mark under load\n{}",
            c.cluster.log_tails(20)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Issue 44 item 5: the rollback below the speculative-append release is guarded. A
/// cluster of this build, not yet activated past the previous release's version (the
/// window in which a rollback is allowed), under load: its leader sends entries before
/// its own fsync and so writes the leader mark. Killed (an unclean stop), its data dir is
/// refused by the previous release, which would resume the term it led. This build
/// starts on it, follows a newer term (the mark goes), leads again, and is stopped
/// cleanly with SIGTERM (the mark goes again): then the previous release starts on it,
/// catches up, and the history checker and the replicas' digests judge the whole run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_previous_release_refuses_a_killed_leaders_data_dir_until_a_clean_stop() {
    let Some(prev) = previous_or_skip("leader mark") else {
        return;
    };
    let new = bins().leasehold;
    let mut c = Chaos::start("leader_mark", ClusterOpts::new(prev.clone()), TTL, bins()).await;
    let prev_version = previous_version(&c).await;
    let claimed = vec![(ENTRY_VERSION_MAX_ENV.to_owned(), prev_version.to_string())];
    c.cluster.set_binary(new.clone(), claimed.clone());
    for id in c.cluster.ids() {
        c.cluster.kill(id);
        c.cluster.restart(id);
        wait_caught_up(&c, id).await;
    }
    c.fault(format!(
        "every node on this build, claiming entry version {prev_version}"
    ));
    c.spawn_workers(2, &job_ids("job", 4), |_| {});
    let leader = c.cluster.wait_leader(LEADER_BOUND).await;
    wait_marked(&c, leader).await;
    c.cluster.kill(leader);
    c.fault(format!("leader {leader} killed with its leader mark"));
    let log = assert_refuses_to_start(&mut c, leader, &prev, Vec::new()).await;
    assert!(log.contains("is damaged at byte 0"), "{}", tail(&log, 10));
    eprintln!(
        "leader mark: the previous release on node {leader}:\n{}",
        tail(&log, 3)
    );

    let term_led = mark_term(&c, leader).expect("the mark names its term");
    c.cluster.set_binary(new.clone(), claimed.clone());
    c.cluster.restart(leader);
    wait_caught_up(&c, leader).await;
    assert!(
        mark_term(&c, leader).is_none_or(|t| t > term_led),
        "a newer term's vote removes the mark of term {term_led}"
    );

    // Whoever leads now: a clean stop removes its mark, and the rollback goes through.
    let second = c.cluster.wait_leader(LEADER_BOUND).await;
    wait_marked(&c, second).await;
    let stopped = c.cluster.stop(second, EXIT_BOUND).await;
    assert!(stopped.is_some_and(|s| s.success()), "SIGTERM: {stopped:?}");
    assert!(
        !leader_mark(&c, second).exists(),
        "a clean stop removes the mark"
    );
    c.fault(format!("leader {second} stopped cleanly"));
    c.cluster.set_binary(prev.clone(), Vec::new());
    c.cluster.restart(second);
    wait_caught_up(&c, second).await;
    c.fault(format!("node {second} rolled back to the previous release"));
    c.run_for(Duration::from_secs(2)).await;
    c.cluster.kill(second);
    c.cluster.set_binary(new, claimed);
    c.cluster.restart(second);
    wait_caught_up(&c, second).await;
    c.run_for(Duration::from_secs(1)).await;
    c.finish().await;
}
