//! Backups (issue 8): `leasehold snapshot save` through a follower of an in-process
//! cluster with the real binary, `leasehold snapshot restore` into node 1's dir of a new
//! cluster on new ports, and what the new cluster must then show: the same jobs with
//! every generation raised above any the old cluster could have granted since (the
//! holders of leases live in the backup fenced off, their jobs held for the TTL plus the
//! failover grace, then claimable; without the raise, those leases still renew),
//! remembered idempotency keys answering `stale_lease`, a new cluster id. Then the refusals: a
//! corrupt file, a used data dir, a node that would fork the cluster, a missing or
//! weak token.

use leasehold_statemachine::commands::Claim;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::binary::{self, Out};
use crate::common::{self, eventually, u64_of, Req, Resp, TestCluster, CATCH_UP_WAIT};
use leasehold_statemachine::{Command, Entry, LeaseMachine};
use serde_json::{json, Value};

/// `snapshot restore`'s default generation raise (2^32).
const RAISE: u64 = leasehold_cli::snapshot::RAISE_GENERATIONS_DEFAULT;

/// Bound on one run of the binary.
const CMD_WAIT: Duration = Duration::from_secs(60);
/// The live lease outlives the test by far.
const LONG_TTL_MS: u64 = 3_600_000;
const LIVE_KEY: &str = "claim-live-1";
/// Jobs with a 60 kB payload each: a backup of over a megabyte.
const BULK_JOBS: usize = 24;

/// Runs `leasehold args…` (no endpoints or token from the environment), bounded.
async fn leasehold(args: &[&str], env: &[(&str, &str)]) -> Out {
    let mut cmd = binary::leasehold(args);
    cmd.envs(env.iter().copied());
    binary::run(cmd, CMD_WAIT).await
}

/// The same, blocking: for the config tweak, which is not async.
fn leasehold_blocking(args: &[String]) -> Out {
    std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("running leasehold")
        .into()
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

fn is_empty_or_absent(dir: &Path) -> bool {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// The fields a restore must keep (lease deadlines may only grow: failover grace).
fn essentials(job: &Value) -> Value {
    json!({
        "id": job["id"], "queue": job["queue"], "state": job["state"], "owner": job["owner"],
        "generation": job["generation"], "attempts": job["attempts"],
        "max_attempts": job["max_attempts"], "payload": job["payload"], "result": job["result"],
        "created_ms": job["created_ms"],
    })
}

async fn all_jobs(c: &TestCluster, node: u64) -> Vec<Value> {
    let page = c.get(node, "/v1/jobs?limit=1000").await.ok(200);
    assert!(page["next_page_token"].is_null(), "{page}");
    page["jobs"].as_array().unwrap().clone()
}

/// What the old cluster held when it was backed up.
struct Before {
    jobs: Vec<Value>,
    live_claim: Resp,
    cluster_id: String,
    /// The log index of the last acknowledged write.
    last_write_index: u64,
}

/// Jobs in every state: completed, live-leased (generation 2, claimed under an
/// idempotency key after generation 1 expired), released, pending with a payload; and
/// bulky ones.
async fn fill(c: &TestCluster, leader: u64) -> Before {
    let claim = |owner: &str, ttl: u64| json!({"owner": owner, "ttl_ms": ttl});
    let lease = c
        .post(leader, "/v1/jobs/done-1/claim", claim("w-1", 30_000))
        .await
        .ok(200);
    let g = u64_of(&lease, "generation");
    c.post(
        leader,
        "/v1/jobs/done-1/complete",
        json!({"owner": "w-1", "generation": g, "result": {"ok": true}}),
    )
    .await
    .ok(200);

    let lease = c
        .post(leader, "/v1/jobs/released-1/claim", claim("w-2", 30_000))
        .await
        .ok(200);
    let g = u64_of(&lease, "generation");
    c.post(
        leader,
        "/v1/jobs/released-1/release",
        json!({"owner": "w-2", "generation": g}),
    )
    .await
    .ok(200);

    c.post(
        leader,
        "/v1/jobs",
        json!({"id": "pending-1", "queue": "q1", "payload": {"n": 7}, "max_attempts": 3}),
    )
    .await
    .ok(201);

    // Enough bytes that the image streams in many frames (a payload is at most 64 KiB).
    let filler = "x".repeat(60_000);
    for i in 0..BULK_JOBS {
        let job = json!({"id": format!("bulk-{i}"), "queue": "bulk", "payload": filler});
        c.post(leader, "/v1/jobs", job).await.ok(201);
    }

    // Generation 1 of the live job runs out; generation 2 is the live lease.
    c.post(leader, "/v1/jobs/live-1/claim", claim("w-old", 100))
        .await
        .ok(200);
    c.wait_job_state(leader, "live-1", "pending", CATCH_UP_WAIT)
        .await;
    let keyed = Req::post("/v1/jobs/live-1/claim", &claim("w-live", LONG_TTL_MS)).key(LIVE_KEY);
    let live_claim = c.send(leader, &keyed).await;
    let lease = live_claim.ok(200);
    assert_eq!(u64_of(&lease, "generation"), 2, "{lease}");

    let cluster_id = c.cluster_view(leader).await.unwrap()["cluster_id"]
        .as_str()
        .unwrap()
        .to_owned();
    Before {
        jobs: all_jobs(c, leader).await,
        last_write_index: u64_of(&lease, "log_index"),
        live_claim,
        cluster_id,
    }
}

fn endpoint(c: &TestCluster, id: u64) -> String {
    c.addr(id).to_string()
}

/// Starts a new three-node cluster whose nodes `seeded` are seeded from `backup` by
/// `leasehold snapshot restore` (the others start empty); node 1 first, the others
/// under the cluster id its restore printed. The restore must name the new cluster's
/// addresses, which the harness binds as it starts: each seeded node's config tweak
/// runs it, once, just before the node starts. Returns the cluster and node 1's restore
/// output.
async fn start_restored(
    backup: PathBuf,
    dirs: &tempfile::TempDir,
    seeded: &'static [u64],
    raise_generations: u64,
) -> (TestCluster, Value) {
    let root = dirs.path().to_path_buf();
    let printed: Arc<Mutex<std::collections::BTreeMap<u64, Value>>> = Arc::default();
    let out = printed.clone();
    let c = TestCluster::start_with(move |cfg| {
        if !seeded.contains(&cfg.id) {
            return;
        }
        let dir = root.join(format!("n{}", cfg.id));
        let mut out = out.lock().unwrap();
        if !out.contains_key(&cfg.id) {
            let mut args: Vec<String> = vec![
                "snapshot".into(),
                "restore".into(),
                path_str(&backup).into(),
                "--data-dir".into(),
                path_str(&dir).into(),
                "--id".into(),
                cfg.id.to_string(),
                "--output".into(),
                "json".into(),
                "--raise-generations".into(),
                raise_generations.to_string(),
            ];
            for (id, addr) in &cfg.peers {
                args.extend(["--peer".into(), format!("{id}={addr}")]);
            }
            if let Some(first) = out.get(&1) {
                args.extend([
                    "--cluster-id".into(),
                    first["cluster_id"].as_str().unwrap().into(),
                ]);
            }
            out.insert(cfg.id, leasehold_blocking(&args).json());
        }
        cfg.data_dir = dir;
    })
    .await;
    let printed = printed.lock().unwrap()[&1].clone();
    (c, printed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_saved_through_a_follower_seeds_a_new_cluster() {
    let files = tempfile::tempdir().unwrap();
    let backup = files.path().join("cluster.snapshot");

    let old = TestCluster::start().await;
    let leader = old.wait_for_leader().await;
    let before = fill(&old, leader).await;
    let follower = old.follower_of(leader);

    let saved = leasehold(
        &[
            "snapshot",
            "save",
            path_str(&backup),
            "--endpoints",
            &endpoint(&old, follower),
            "--output",
            "json",
        ],
        &[],
    )
    .await
    .json();
    assert_eq!(saved["node_id"], follower, "{saved}");
    assert_eq!(saved["jobs"], before.jobs.len(), "{saved}");
    assert_eq!(saved["cluster_id"], before.cluster_id.as_str(), "{saved}");
    // Taken on a follower, yet it holds the last acknowledged write (read index).
    assert!(
        u64_of(&saved, "index") >= before.last_write_index,
        "{saved} misses the write at {}",
        before.last_write_index
    );
    let bytes = std::fs::metadata(&backup).unwrap().len();
    assert_eq!(u64_of(&saved, "bytes"), bytes);
    assert!(bytes > (BULK_JOBS * 60_000) as u64, "{bytes} bytes");
    assert_eq!(
        names_in(files.path()),
        ["cluster.snapshot"],
        "no temp file left"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&backup).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "a backup holds every job: private");
    }

    // The leader alone answers the read index a follower waits for.
    let ri = old
        .get(leader, "/v1/cluster/snapshot?read_index=true")
        .await
        .ok(200);
    assert!(u64_of(&ri, "read_index") >= before.last_write_index, "{ri}");
    assert_eq!(ri["node_id"], leader);
    old.get(follower, "/v1/cluster/snapshot?read_index=true")
        .await
        .err(503, "unavailable");
    old.get(follower, "/v1/cluster/snapshot?full=1")
        .await
        .err(400, "invalid_argument");

    // An existing file is kept unless --force.
    let args = ["snapshot", "save", path_str(&backup), "--endpoints"];
    let ep = endpoint(&old, leader);
    let again = leasehold(&[&args[..], &[ep.as_str()]].concat(), &[]).await;
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(again.stderr.contains("--force"), "{}", again.stderr);
    old.shutdown().await;

    let dirs = tempfile::tempdir().unwrap();
    let (new, restored) = start_restored(backup.clone(), &dirs, &[1], RAISE).await;
    assert_eq!(restored["generations_raised_by"], RAISE, "{restored}");
    assert_eq!(restored["leases_held"], 1, "{restored}");
    let new_leader = new.wait_for_leader().await;
    let new_id = restored["cluster_id"].as_str().unwrap().to_owned();
    assert_ne!(new_id, before.cluster_id, "a restore makes a NEW cluster");
    assert_eq!(restored["index"], saved["index"], "{restored}");
    for id in new.running() {
        let view = new.cluster_view(id).await.unwrap();
        assert_eq!(view["cluster_id"], new_id.as_str(), "node {id}: {view}");
        // New terms above every term of the backup's log.
        assert!(u64_of(&view, "term") > u64_of(&saved, "term"), "{view}");
    }

    // Every replica holds the same table (nodes 2 and 3 got it by snapshot) …
    new.settled_digest(&Req::get("/v1/cluster/digest"), CATCH_UP_WAIT)
        .await;
    // … with the same jobs, read through every node, every generation raised by RAISE
    // and the lease live in the backup held (its holder fenced off, its owner shown).
    let want: Vec<Value> = before
        .jobs
        .iter()
        .map(|j| {
            let mut e = essentials(j);
            e["generation"] = json!(u64_of(j, "generation") + RAISE);
            e
        })
        .collect();
    for id in new.running() {
        let jobs = all_jobs(&new, id).await;
        let got: Vec<Value> = jobs.iter().map(essentials).collect();
        assert_eq!(got, want, "jobs on node {id}");
    }

    // The old holder's generation is stale: fenced off, renewing or completing.
    let renew = |g: u64| json!({"owner": "w-live", "generation": g});
    new.post(new_leader, "/v1/jobs/live-1/renew", renew(2))
        .await
        .err(409, "stale_lease");
    new.post(
        new_leader,
        "/v1/jobs/live-1/complete",
        json!({"owner": "w-live", "generation": 2}),
    )
    .await
    .err(409, "stale_lease");
    // The idempotency key remembers the old cluster's answer, now stale: a retry is told
    // so instead of getting the pre-raise generation again.
    let keyed = Req::post(
        "/v1/jobs/live-1/claim",
        &json!({"owner": "w-live", "ttl_ms": LONG_TTL_MS}),
    )
    .key(LIVE_KEY);
    assert_eq!(before.live_claim.status, 200);
    let replay = new.send(new_leader, &keyed).await;
    let e = replay.err(409, "stale_lease");
    assert_eq!(u64_of(&e["job"], "generation"), 2 + RAISE, "{e}");
    // A new claim bumps the generation past the old one; completion stays final.
    let old_gen = u64_of(
        before
            .jobs
            .iter()
            .find(|j| j["id"] == "released-1")
            .unwrap(),
        "generation",
    );
    let claim = json!({"owner": "w-new", "ttl_ms": 30_000});
    let lease = new
        .post(new_leader, "/v1/jobs/released-1/claim", claim.clone())
        .await
        .ok(200);
    assert_eq!(u64_of(&lease, "generation"), old_gen + RAISE + 1);
    // The job whose lease was live in the backup is held for its (hour-long) TTL.
    new.post(new_leader, "/v1/jobs/live-1/claim", claim.clone())
        .await
        .err(409, "lease_held");
    // A job id the backup never knew (the old cluster may have created and claimed it
    // after the backup) starts above every old token too — and on every node, since the
    // floor is in the state the followers restored.
    let lease = new
        .post(
            new_leader,
            "/v1/jobs/born-after-backup/claim",
            claim.clone(),
        )
        .await
        .ok(200);
    assert_eq!(u64_of(&lease, "generation"), RAISE + 1);
    new.post(new_leader, "/v1/jobs/done-1/claim", claim)
        .await
        .err(409, "job_completed");
    new.settled_digest(&Req::get("/v1/cluster/digest"), CATCH_UP_WAIT)
        .await;
    new.shutdown().await;
}

/// A small valid backup, written with the store's own writer: no cluster needed.
fn write_backup(path: &Path) {
    let mut m = LeaseMachine::default();
    for i in 1..=5u64 {
        let entry = Entry {
            stamp_ms: 1_000 + i,
            term: 3,
            idempotency_key: None,
            command: Command::Claim(Claim {
                job_id: format!("job-{i}"),
                owner: "w".into(),
                ttl_ms: 10_000,
            }),
        };
        m.apply(i, &entry).unwrap();
    }
    let last = openraft::LogId::new(openraft::CommittedLeaderId::new(3, 2), 5);
    let meta = leasehold_node::types::SnapshotMeta {
        last_log_id: Some(last),
        last_membership: Default::default(),
        snapshot_id: "test".into(),
    };
    let dir = path.parent().unwrap();
    leasehold_node::store::write_snapshot_file(dir, &meta, m.snapshot()).unwrap();
    std::fs::rename(dir.join("snapshot.bin"), path).unwrap();
}

fn restore_args<'a>(file: &'a str, dir: &'a str, id: &'a str) -> Vec<&'a str> {
    vec![
        "snapshot",
        "restore",
        file,
        "--data-dir",
        dir,
        "--id",
        id,
        "--peer",
        "1=127.0.0.1:1",
        "--peer",
        "2=127.0.0.1:2",
        "--peer",
        "3=127.0.0.1:3",
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_refuses_a_corrupt_file_a_used_dir_and_a_lone_higher_id() {
    let t = tempfile::tempdir().unwrap();
    let good = t.path().join("good.snapshot");
    write_backup(&good);

    // A flipped byte: refused, naming the file; the dir stays empty.
    let bad = t.path().join("bad.snapshot");
    let mut bytes = std::fs::read(&good).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&bad, &bytes).unwrap();
    let empty = t.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = leasehold(&restore_args(path_str(&bad), path_str(&empty), "1"), &[]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains(path_str(&bad)) && out.stderr.contains("corrupted"),
        "{}",
        out.stderr
    );
    assert!(
        is_empty_or_absent(&empty),
        "a refused restore writes nothing"
    );
    let absent = t.path().join("absent");
    let out = leasehold(&restore_args(path_str(&bad), path_str(&absent), "1"), &[]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(!absent.exists());

    // A higher id alone would leave node 1 to found an empty cluster beside it.
    let out = leasehold(&restore_args(path_str(&good), path_str(&empty), "2"), &[]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("node 1's data dir"), "{}", out.stderr);
    assert!(is_empty_or_absent(&empty));

    // The good file seeds the empty dir once; a second restore finds it in use.
    let out = leasehold(&restore_args(path_str(&good), path_str(&empty), "1"), &[]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("jobs:       5"), "{}", out.stdout);
    for f in ["identity", "sm/snapshot.bin", "log"] {
        assert!(empty.join(f).exists(), "{f} written");
    }
    let identity: Value =
        serde_json::from_slice(&std::fs::read(empty.join("identity")).unwrap()).unwrap();
    assert_eq!(identity["node_id"], 1);
    let listing = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        v.sort();
        v
    };
    let seeded = listing(&empty);
    let out = leasehold(&restore_args(path_str(&good), path_str(&empty), "1"), &[]).await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("not empty"), "{}", out.stderr);
    assert_eq!(listing(&empty), seeded, "the used dir is left alone");

    // Another node's dir may be seeded too, but only under a pinned cluster id.
    let pinned = identity["cluster_id"].as_str().unwrap().to_owned();
    let second = t.path().join("second");
    let mut args = restore_args(path_str(&good), path_str(&second), "2");
    args.extend(["--cluster-id", &pinned]);
    let out = leasehold(&args, &[]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!("{pinned} (given)")),
        "{}",
        out.stdout
    );
}

const AUTH_FILE: &str = r#"
[[token]]
token = "adm-1"
role = "admin"

[[token]]
token = "rdr-1"
role = "reader"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backup_needs_an_admin_token() {
    let t = tempfile::tempdir().unwrap();
    let auth_path = t.path().join("auth.toml");
    std::fs::write(&auth_path, AUTH_FILE).unwrap();
    let policy = Arc::new(leasehold_node::security::auth::AuthPolicy::load(&auth_path).unwrap());
    let c = TestCluster::start_with(move |cfg| cfg.auth = Some(policy.clone())).await;
    let leader = eventually("a leader", common::LEADER_WAIT, || async {
        c.node(1)
            .node
            .raft
            .metrics()
            .borrow()
            .current_leader
            .ok_or("none".to_string())
    })
    .await;
    let follower = c.follower_of(leader);
    let file = t.path().join("b.snapshot");
    let save = |token: Option<&'static str>| {
        let file = path_str(&file).to_owned();
        let ep = endpoint(&c, follower);
        async move {
            let env: Vec<(&str, &str)> =
                token.map(|t| ("LEASEHOLD_TOKEN", t)).into_iter().collect();
            leasehold(&["snapshot", "save", &file, "--endpoints", &ep], &env).await
        }
    };

    let out = save(None).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(out.stderr.contains("401 unauthenticated"), "{}", out.stderr);
    let out = save(Some("rdr-1")).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("403 permission_denied"),
        "{}",
        out.stderr
    );
    assert_eq!(
        names_in(t.path()),
        ["auth.toml"],
        "a refused save leaves nothing"
    );

    let mut reader = Req::get("/v1/cluster/snapshot");
    reader
        .headers
        .push(("authorization".into(), "Bearer rdr-1".into()));
    c.send(follower, &reader)
        .await
        .err(403, "permission_denied");
    c.get(follower, "/v1/cluster/snapshot")
        .await
        .err(401, "unauthenticated");

    // The admin token goes through the follower and on to the leader's read index.
    let out = save(Some("adm-1")).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(
        out.stdout.contains(&format!("from node:  {follower}")),
        "{}",
        out.stdout
    );
    assert!(file.exists());
    c.shutdown().await;
}

/// Seeding every node's dir from the same file, under one cluster id, is the other
/// supported procedure: the three start equal and elect among themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_node_seeded_under_one_cluster_id_forms_one_cluster() {
    let files = tempfile::tempdir().unwrap();
    let backup = files.path().join("b.snapshot");
    let old = TestCluster::start().await;
    let leader = old.wait_for_leader().await;
    let before = fill(&old, leader).await;
    let ep = endpoint(&old, leader);
    let out = leasehold(
        &["snapshot", "save", path_str(&backup), "--endpoints", &ep],
        &[],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    old.shutdown().await;

    let dirs = tempfile::tempdir().unwrap();
    // Without the generation raise: the backup's table exactly, live lease included.
    let (new, restored) = start_restored(backup, &dirs, &[1, 2, 3], 0).await;
    assert_eq!(restored["leases_held"], 0, "{restored}");
    let new_leader = new.wait_for_leader().await;
    new.settled_digest(&Req::get("/v1/cluster/digest"), CATCH_UP_WAIT)
        .await;
    for id in new.running() {
        let view = new.cluster_view(id).await.unwrap();
        assert_eq!(
            view["cluster_id"], restored["cluster_id"],
            "node {id}: {view}"
        );
        let got: Vec<Value> = all_jobs(&new, id).await.iter().map(essentials).collect();
        let want: Vec<Value> = before.jobs.iter().map(essentials).collect();
        assert_eq!(got, want, "jobs on node {id}");
    }
    let renew = json!({"owner": "w-live", "generation": 2});
    new.post(new_leader, "/v1/jobs/live-1/renew", renew)
        .await
        .ok(200);
    new.settled_digest(&Req::get("/v1/cluster/digest"), CATCH_UP_WAIT)
        .await;
    new.shutdown().await;
}

// ---- the temp file of `snapshot save` (issue 17 item 8) -------------------------------

/// Names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[cfg(unix)]
fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

/// A cluster holding `SMALL_JOBS` pending jobs, and the leader.
const SMALL_JOBS: usize = 3;
async fn small_cluster() -> (TestCluster, u64) {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    for i in 0..SMALL_JOBS {
        let job = json!({"id": format!("j-{i}"), "queue": "q", "payload": {"i": i}});
        c.post(leader, "/v1/jobs", job).await.ok(201);
    }
    (c, leader)
}

/// `snapshot save FILE` through `node`, which must succeed; its JSON output.
async fn save_ok(c: &TestCluster, node: u64, file: &Path) -> Value {
    let ep = endpoint(c, node);
    let args = ["snapshot", "save", path_str(file), "--endpoints", &ep];
    leasehold(&[&args[..], &["--output", "json"]].concat(), &[])
        .await
        .json()
}

/// FILE is a regular file holding a backup that checks out: the index `save` printed
/// and every job of the cluster.
#[track_caller]
fn assert_good_backup(file: &Path, saved: &Value) {
    let meta = std::fs::symlink_metadata(file).unwrap();
    assert!(
        meta.file_type().is_file(),
        "{} is not a regular file",
        file.display()
    );
    let (meta, machine) = leasehold_node::store::read_snapshot_file(file).unwrap();
    assert_eq!(
        meta.last_log_id.map(|l| l.index),
        Some(u64_of(saved, "index")),
        "{saved}"
    );
    let m = LeaseMachine::restore(&machine).unwrap();
    assert_eq!(m.stats().jobs, SMALL_JOBS as u64);
    assert_eq!(saved["jobs"], SMALL_JOBS, "{saved}");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshot_save_does_not_follow_a_symlink_planted_at_the_temp_name() {
    let t = tempfile::tempdir().unwrap();
    let backup = t.path().join("backup.snap");
    let victim = t.path().join("victim.conf");
    let planted = t.path().join("backup.snap.tmp");
    let secret = b"listen = 127.0.0.1:7000\n".to_vec();
    std::fs::write(&victim, &secret).unwrap();
    std::os::unix::fs::symlink(&victim, &planted).unwrap();

    let (c, leader) = small_cluster().await;
    let saved = save_ok(&c, leader, &backup).await;
    c.shutdown().await;

    let victim_now = String::from_utf8_lossy(&std::fs::read(&victim).unwrap()).into_owned();
    assert_eq!(
        victim_now.as_bytes(),
        secret,
        "the victim was written: {victim_now:?}"
    );
    assert_eq!(
        std::fs::read_link(&planted).unwrap(),
        victim,
        "the planted link is left as it was"
    );
    assert_good_backup(&backup, &saved);
    assert_eq!(format!("{:o}", mode_of(&backup)), "600");
    // Nothing else left behind: the temp file was renamed.
    assert_eq!(
        names_in(t.path()),
        ["backup.snap", "backup.snap.tmp", "victim.conf"]
    );
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn snapshot_save_is_private_even_over_a_stale_world_readable_temp_file() {
    use std::os::unix::fs::PermissionsExt;
    let t = tempfile::tempdir().unwrap();
    let backup = t.path().join("backup.snap");
    let stale = t.path().join("backup.snap.tmp");
    std::fs::write(&stale, b"stale").unwrap();
    std::fs::set_permissions(&stale, std::fs::Permissions::from_mode(0o644)).unwrap();

    let (c, leader) = small_cluster().await;
    let saved = save_ok(&c, leader, &backup).await;
    c.shutdown().await;

    assert_eq!(
        format!("{:o}", mode_of(&backup)),
        "600",
        "a backup holds every payload: private"
    );
    assert_good_backup(&backup, &saved);
    // The stale file is not ours: left alone.
    assert_eq!(std::fs::read(&stale).unwrap(), b"stale");
    assert_eq!(format!("{:o}", mode_of(&stale)), "644");
    assert_eq!(names_in(t.path()), ["backup.snap", "backup.snap.tmp"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_snapshot_save_removes_no_temp_file_it_did_not_create() {
    let t = tempfile::tempdir().unwrap();
    let backup = t.path().join("backup.snap");
    let stale = t.path().join("backup.snap.tmp");
    std::fs::write(&stale, b"someone else's").unwrap();
    // A port nothing listens on: every attempt is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ep = format!("127.0.0.1:{port}");
    let out = leasehold(
        &["snapshot", "save", path_str(&backup), "--endpoints", &ep],
        &[],
    )
    .await;
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(out.stderr.contains("no node could serve"), "{}", out.stderr);
    let stale_now = std::fs::read(&stale).expect("the stale temp file is still there");
    assert_eq!(stale_now, b"someone else's");
    assert_eq!(
        names_in(t.path()),
        ["backup.snap.tmp"],
        "only ours is removed"
    );
}

// ---- a restored cluster honours the backup's leases (issue 28 item 3) -----------------

/// TTL of the lease live in the backup in the hold test: short, so the hold ends soon.
const HOLD_TTL_MS: u64 = 1_500;
const HOLD_KEY: &str = "claim-held-1";
/// Longest wait for the hold to end: TTL + the failover grace cap, with room.
const HOLD_WAIT: Duration = Duration::from_secs(30);

/// The store time of the machine in a backup file.
fn backup_clock_ms(file: &Path) -> u64 {
    let (_, machine) = leasehold_node::store::read_snapshot_file(file).unwrap();
    LeaseMachine::restore(&machine).unwrap().clock_ms()
}

/// A job leased in the backup is held on the restored cluster for its TTL plus the
/// failover grace cap of restored-cluster time, for nobody: another owner's claim is
/// `lease_held` until then and granted after; the old holder's renew and complete are
/// `stale_lease` (its generation was raised); and a same-key retry of the claim the
/// backup remembers answers 409 `stale_lease`, never the old 200 Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lease_live_in_the_backup_is_held_for_its_ttl_and_the_grace_after_a_restore() {
    let files = tempfile::tempdir().unwrap();
    let backup = files.path().join("held.snapshot");
    let old = TestCluster::start().await;
    let leader = old.wait_for_leader().await;
    let claim = json!({"owner": "w-old", "ttl_ms": HOLD_TTL_MS});
    let keyed = Req::post("/v1/jobs/held-1/claim", &claim).key(HOLD_KEY);
    let first = old.send(leader, &keyed).await;
    assert_eq!(u64_of(&first.ok(200), "generation"), 1);
    let saved = save_ok(&old, leader, &backup).await;
    assert!(saved["index"].is_u64(), "{saved}");
    old.shutdown().await;
    let clock_ms = backup_clock_ms(&backup);
    let grace_ms = leasehold_statemachine::limits::GRACE_MS_MAX_DEFAULT;

    let dirs = tempfile::tempdir().unwrap();
    let (new, restored) = start_restored(backup, &dirs, &[1], RAISE).await;
    let l = new.wait_for_leader().await;
    let held_until = clock_ms + HOLD_TTL_MS + grace_ms;

    // Another owner cannot claim it: it is held, at the raised generation.
    let other = json!({"owner": "w-new", "ttl_ms": 30_000});
    let held = new.post(l, "/v1/jobs/held-1/claim", other.clone()).await;
    let e = held.err(409, "lease_held");
    assert_eq!(u64_of(&e["job"], "generation"), 1 + RAISE, "{e}");
    assert_eq!(e["job"]["state"], "leased", "{e}");
    assert_eq!(e["job"]["owner"], "w-old", "{e}");
    assert!(u64_of(&e["job"], "lease_until_ms") >= held_until, "{e}");
    // The old holder is fenced off.
    let token = json!({"owner": "w-old", "generation": 1});
    new.post(l, "/v1/jobs/held-1/renew", token.clone())
        .await
        .err(409, "stale_lease");
    new.post(l, "/v1/jobs/held-1/complete", token)
        .await
        .err(409, "stale_lease");
    // The claim the backup remembers answers stale, not its 200 of the old cluster.
    let retry = new.send(l, &keyed).await;
    let e = retry.err(409, "stale_lease");
    assert!(e["message"].as_str().unwrap().contains("backup"), "{e}");
    assert_eq!(u64_of(&e["job"], "generation"), 1 + RAISE, "{e}");

    // Claimable once TTL + grace of restored-cluster time has passed, not before.
    let lease = eventually("the hold to end", HOLD_WAIT, || {
        let (new, other) = (&new, other.clone());
        async move {
            let r = new.post(l, "/v1/jobs/held-1/claim", other).await;
            if r.status == 200 {
                return Ok(r.json());
            }
            r.err(409, "lease_held");
            Err(r.text())
        }
    })
    .await;
    assert_eq!(u64_of(&lease, "generation"), 2 + RAISE, "{lease}");
    let granted_at = u64_of(&lease, "cluster_time_ms");
    assert!(
        granted_at >= held_until,
        "granted at {granted_at}, backup clock {clock_ms}, held until {held_until}"
    );
    // The restore said what it held, and until when.
    assert_eq!(restored["leases_held"], 1, "{restored}");
    assert!(
        u64_of(&restored, "leases_held_until_ms") >= held_until,
        "{restored}"
    );
    new.settled_digest(&Req::get("/v1/cluster/digest"), CATCH_UP_WAIT)
        .await;
    new.shutdown().await;
}
