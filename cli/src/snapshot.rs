//! Backups: `leasehold snapshot save FILE` (through any node) and `leasehold snapshot
//! restore FILE --data-dir D …` (seed a new cluster).
//!
//! A backup file is a snapshot file exactly as a node keeps it (`sm/snapshot.bin`,
//! format in `store/snapshot_file.rs`: version, CRC, meta, machine), taken by
//! `GET /v1/cluster/snapshot` (`http/backup.rs`) from a state holding every write
//! committed before the request.
//!
//! `save` downloads to a temp file beside FILE, `FILE.tmp.<pid>.<random>`, created
//! exclusively (`O_CREAT|O_EXCL`: never a path that exists, never through a symlink) with
//! mode 0600, fsyncs it, checks the CRC and that the machine decodes, then renames it to
//! FILE and fsyncs the directory: FILE is whole, checked and private, or absent. A path
//! planted at a temp name (a symlink to a victim, a world-readable file) is never
//! opened, written or removed: a failed save removes only the temp file it created.
//!
//! `restore` seeds ONE empty data dir of a NEW cluster; the new cluster's other nodes
//! start empty and catch up from it by snapshot. What it writes:
//!
//! ```text
//! D/log/        the Raft log: empty, purged up to the backup's last log id L, and the
//!               vote (L.term, --id) — so the new cluster's terms start above every
//!               term in the backup (openraft must never see log terms go backwards,
//!               and the failover grace keys on a term above the machine's last)
//! D/identity    --id and the new cluster's id (fresh and random, or --cluster-id)
//! D/sm/snapshot.bin   the backup's machine, meta = (L, the --peer list as voters)
//! ```
//!
//! The snapshot is written last: a restore cut short leaves a dir with a vote and no
//! membership, on which a node never elects anything (it stays unready) rather than
//! starting an empty cluster — and a second `restore` refuses the non-empty dir. A
//! restore that fails on its own removes what it wrote.
//!
//! Only the lowest id of `--peer` (the node that would otherwise found the cluster) may
//! be seeded alone. Seeding another id alone would leave that lowest node to found an
//! empty cluster beside the restored one; restoring every node's dir is allowed when
//! all get the same `--cluster-id`, which is what keeps two restores from being two
//! clusters.

use std::collections::{BTreeMap, BTreeSet};
use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Subcommand};
use leasehold_statemachine::{ErrorBody, ErrorCode, LeaseMachine, Raised};
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, Membership};
use serde::Serialize;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use crate::common::{read_flag_file, CliError, ClientOpts, Output, EXIT_API, EXIT_UNAVAILABLE};
use leasehold_node::http::{CLUSTER_ID_HEADER, SNAPSHOT_INDEX_HEADER};
use leasehold_node::security::identity::{self, Identity};
use leasehold_node::security::peer_auth::ClusterId;
use leasehold_node::security::tls::chain;
use leasehold_node::store::{LogStore, SnapshotFileError};
use leasehold_node::types::{LogId, NodeId, SnapshotMeta, StoredMembership, Vote};

/// `restore` could not write the data dir (what it wrote is removed again).
pub const EXIT_RESTORE_FAILED: i32 = 1;

/// Connecting to one node.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest silence while downloading, the node's encoding before the first byte
/// included (a node answers within its 45 s request timeout).
const READ_TIMEOUT: Duration = Duration::from_secs(90);
const BACKUP_PATH: &str = "/v1/cluster/snapshot";
/// Fresh temp names tried before giving up: a random 64-bit suffix collides with a
/// planted path only by chance, so a second collision means something is wrong.
const TMP_ATTEMPTS: usize = 4;

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    pub command: SnapshotCmd,
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCmd {
    /// Download a consistent backup of the cluster's lease table to FILE, through any
    /// node (GET /v1/cluster/snapshot; admin token when auth is on).
    Save(SaveArgs),
    /// Seed an empty data dir of a NEW cluster from a backup file: run it for the
    /// lowest --peer id, start that node on D and the others on empty data dirs.
    Restore(RestoreArgs),
}

#[derive(Debug, Args)]
pub struct SaveArgs {
    /// Where to write the backup (written to a new private temp file
    /// FILE.tmp.<pid>.<random> beside it, then renamed).
    pub file: PathBuf,
    /// Replace FILE if it exists.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// A backup written by `leasehold snapshot save`.
    pub file: PathBuf,
    /// The new node's data dir: must not exist, or be empty.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// The new node's id; must be in --peer.
    #[arg(long)]
    pub id: NodeId,
    /// A voter of the NEW cluster as ID=HOST:PORT; repeat for each. Start every node of
    /// the new cluster with this same --peer list.
    #[arg(long = "peer", value_parser = crate::peer::parse_peer, required = true)]
    pub peers: Vec<(NodeId, String)>,
    /// The new cluster's id (32 hex digits) instead of a fresh random one: needed to
    /// seed more than one node's dir (give all the same), never an id of a cluster
    /// that still runs.
    #[arg(long)]
    pub cluster_id: Option<ClusterId>,
    /// Raise every job's generation by this much, hold the leases live in the backup for
    /// their TTL plus the failover grace (for nobody), and make replies remembered in the
    /// backup answer stale_lease (0: keep all as it was); job ids the backup does not know
    /// start counting at this floor too. The old cluster may have granted generations
    /// after the backup; above them, no fencing token is ever granted twice.
    #[arg(long, default_value_t = RAISE_GENERATIONS_DEFAULT)]
    pub raise_generations: u64,
    /// Output format (as the client commands' --output: restore calls no node).
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// `restore`'s default generation raise: 2^32, more claims per job than any cluster
/// grants between a backup and its loss, and still 2^32 restores below u64's end.
pub const RAISE_GENERATIONS_DEFAULT: u64 = 1 << 32;

pub async fn run(args: SnapshotArgs, opts: &ClientOpts) -> Result<(), CliError> {
    match args.command {
        SnapshotCmd::Save(a) => save(a, opts).await,
        SnapshotCmd::Restore(a) => restore(a).await,
    }
}

// ---- checking a backup file -------------------------------------------------------------

/// A backup file that passed every check: CRC, meta, and the machine decodes.
struct Checked {
    last: LogId,
    /// The machine part, as in the file.
    machine: Vec<u8>,
    jobs: u64,
}

/// Why a backup file does not check out (a download for `save`, the input of `restore`).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("checking {}", path.display())]
    Task {
        path: PathBuf,
        #[source]
        source: tokio::task::JoinError,
    },
    #[error(transparent)]
    File(#[from] SnapshotFileError),
    #[error(
        "{}: the backup holds no applied log entry (it is of a cluster that never started)",
        .0.display()
    )]
    NoEntry(PathBuf),
}

/// Reads and checks a backup file, off the runtime (it decodes the whole table).
async fn check_file(path: &Path) -> Result<Checked, CheckError> {
    let owned = path.to_path_buf();
    tokio::task::spawn_blocking(move || check_file_blocking(&owned))
        .await
        .map_err(|source| CheckError::Task {
            path: path.to_path_buf(),
            source,
        })?
}

fn check_file_blocking(path: &Path) -> Result<Checked, CheckError> {
    let (meta, machine) = leasehold_node::store::read_snapshot_file(path)?;
    let decoded = LeaseMachine::restore(&machine).map_err(|source| SnapshotFileError::Machine {
        path: path.to_path_buf(),
        source,
    })?;
    let last = meta
        .last_log_id
        .ok_or_else(|| CheckError::NoEntry(path.to_path_buf()))?;
    let jobs = decoded.stats().jobs;
    // Freeing a large table takes a while too; nobody waits for it.
    std::thread::spawn(move || drop(decoded));
    Ok(Checked {
        last,
        machine,
        jobs,
    })
}

// ---- save --------------------------------------------------------------------------------

#[derive(Debug, Serialize)]
struct Saved {
    file: String,
    index: u64,
    term: u64,
    jobs: u64,
    bytes: u64,
    node_id: Option<u64>,
    cluster_id: Option<String>,
}

/// What the answering node said about the image, from the response headers.
struct Download {
    bytes: u64,
    index: Option<u64>,
    node_id: Option<u64>,
    cluster_id: Option<String>,
}

async fn save(a: SaveArgs, opts: &ClientOpts) -> Result<(), CliError> {
    if !a.force && present(&a.file) {
        return Err(CliError::usage(format!(
            "{} exists: pass --force to replace it",
            a.file.display()
        )));
    }
    let endpoints = endpoint_urls(opts)?;
    let http = http_client(opts)?;
    let (f, tmp) = create_tmp(&a.file, tmp_candidates(&a.file)).map_err(|e| {
        failed(format!(
            "creating a temp file beside {}: {e}",
            a.file.display()
        ))
    })?;
    let f = tokio::fs::File::from_std(f);
    let result = save_to(&http, &endpoints, opts.token(), &a.file, f, &tmp, a.force).await;
    if result.is_err() {
        // Ours: `create_tmp` made it. Nothing else is ever removed.
        let _ = std::fs::remove_file(&tmp);
    }
    let (got, checked) = result?;
    let saved = Saved {
        file: a.file.display().to_string(),
        index: checked.last.index,
        term: checked.last.leader_id.term,
        jobs: checked.jobs,
        bytes: got.bytes,
        node_id: got.node_id,
        cluster_id: got.cluster_id,
    };
    print_saved(&saved, opts.output);
    Ok(())
}

async fn save_to(
    http: &reqwest::Client,
    endpoints: &[String],
    token: Option<&str>,
    file: &Path,
    mut f: tokio::fs::File,
    tmp: &Path,
    force: bool,
) -> Result<(Download, Checked), CliError> {
    let got = download(http, endpoints, token, &mut f, tmp).await?;
    drop(f);
    let checked = check_file(tmp).await.map_err(|e| CliError {
        code: EXIT_UNAVAILABLE,
        message: format!("the downloaded backup does not check out: {}", chain(&e)),
    })?;
    if let Some(index) = got.index.filter(|i| *i != checked.last.index) {
        return Err(CliError {
            code: EXIT_UNAVAILABLE,
            message: format!(
                "the node announced index {index} but the file holds {}",
                checked.last.index
            ),
        });
    }
    if !force && present(file) {
        return Err(CliError::usage(format!(
            "{} appeared while downloading: pass --force to replace it",
            file.display()
        )));
    }
    std::fs::rename(tmp, file)
        .and_then(|()| sync_parent(file))
        .map_err(|e| {
            failed(format!(
                "renaming {} to {}: {e}",
                tmp.display(),
                file.display()
            ))
        })?;
    Ok((got, checked))
}

fn failed(message: String) -> CliError {
    CliError {
        code: EXIT_API,
        message,
    }
}

/// Whether anything is at `path`, a dangling symlink included (`Path::exists` follows
/// links: a rename would silently replace one).
fn present(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// `FILE.tmp.<pid>.<random>` names beside FILE (same directory: the rename stays on one
/// filesystem), fresh each time.
fn tmp_candidates(file: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    std::iter::repeat_with(move || {
        let mut name = file.as_os_str().to_owned();
        name.push(format!(
            ".tmp.{}.{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        PathBuf::from(name)
    })
}

/// Creates the first of at most `TMP_ATTEMPTS` candidates that does not exist yet,
/// exclusively and 0600 from its first byte (a backup holds every job). `create_new`
/// is `O_CREAT|O_EXCL`, which fails on any existing path, a symlink included, instead
/// of opening it: a planted path is skipped, never written.
fn create_tmp(
    file: &Path,
    candidates: impl Iterator<Item = PathBuf>,
) -> std::io::Result<(std::fs::File, PathBuf)> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(identity::DATA_FILE_MODE);
    }
    for tmp in candidates.take(TMP_ATTEMPTS) {
        match options.open(&tmp) {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!(
            "{TMP_ATTEMPTS} fresh temp names for {} were all taken already (is someone \
             planting files in its directory?)",
            file.display()
        ),
    ))
}

/// fsyncs the directory holding `file`, so a rename into it is durable.
fn sync_parent(file: &Path) -> std::io::Result<()> {
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::File::open(parent)?.sync_all()
}

/// `host:port` → `http://host:port`; `http(s)://host:port[/]` kept (without the slash).
fn endpoint_urls(opts: &ClientOpts) -> Result<Vec<String>, CliError> {
    let urls: Vec<String> = opts
        .endpoints()
        .iter()
        .map(|e| {
            let e = e.trim_end_matches('/');
            if e.starts_with("http://") || e.starts_with("https://") {
                e.to_owned()
            } else {
                format!("http://{e}")
            }
        })
        .collect();
    if urls.is_empty() {
        return Err(CliError::usage("no --endpoints given"));
    }
    if urls.iter().any(|u| u.starts_with("https://")) && opts.tls_ca.is_none() {
        return Err(CliError::usage(
            "https:// endpoints need --tls-ca (the CA that signs the nodes' certificates)",
        ));
    }
    Ok(urls)
}

/// A client trusting only `--tls-ca` for https, presenting `--tls-client-cert` if given
/// (the rules of `leasehold_client`'s TLS settings).
fn http_client(opts: &ClientOpts) -> Result<reqwest::Client, CliError> {
    let mut b = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .no_proxy()
        .use_rustls_tls()
        .tls_built_in_root_certs(false);
    if let Some(path) = &opts.tls_ca {
        let pem = read_flag_file("--tls-ca", path)?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| CliError::usage(format!("--tls-ca {}: {e}", path.display())))?;
        for c in certs {
            b = b.add_root_certificate(c);
        }
    }
    if let (Some(cert), Some(key)) = (&opts.tls_client_cert, &opts.tls_client_key) {
        let mut pem = read_flag_file("--tls-client-cert", cert)?;
        pem.push(b'\n');
        pem.extend(read_flag_file("--tls-client-key", key)?);
        let id = reqwest::Identity::from_pem(&pem)
            .map_err(|e| CliError::usage(format!("--tls-client-cert/--tls-client-key: {e}")))?;
        b = b.identity(id);
    }
    b.build()
        .map_err(|e| CliError::usage(format!("building the HTTP client: {e}")))
}

/// Tries the endpoints in turn until one streams a whole image into `f` (the temp file
/// `tmp`). A docs/api.md refusal (401, 403…) ends the attempt at once: every node would say
/// the same.
async fn download(
    http: &reqwest::Client,
    endpoints: &[String],
    token: Option<&str>,
    f: &mut tokio::fs::File,
    tmp: &Path,
) -> Result<Download, CliError> {
    let mut last = String::new();
    for base in endpoints {
        let mut req = http.get(format!("{base}{BACKUP_PATH}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => {
                last = format!("{base}: {e}");
                continue;
            }
        };
        let status = resp.status().as_u16();
        if status == 200 {
            match stream_to(resp, f, tmp).await {
                Ok(d) => return Ok(d),
                Err(e) => last = format!("{base}: {}", chain(&e)),
            }
            continue;
        }
        let body = resp.bytes().await.unwrap_or_default();
        let described = match serde_json::from_slice::<ErrorBody>(&body) {
            Ok(e) => e.error,
            Err(_) => {
                last = format!("{base}: HTTP {status}");
                continue;
            }
        };
        if matches!(status, 503 | 504) {
            last = format!("{base}: {status} {described}");
            continue;
        }
        let hint = match described.code {
            ErrorCode::Unauthenticated | ErrorCode::PermissionDenied => {
                " (a backup needs an admin token: pass --token or set LEASEHOLD_TOKEN)"
            }
            _ => "",
        };
        return Err(CliError {
            code: EXIT_API,
            message: format!("{base}: {status} {described}{hint}"),
        });
    }
    Err(CliError {
        code: EXIT_UNAVAILABLE,
        message: format!("no node could serve the backup; last: {last}"),
    })
}

/// Why one node's image did not make it into the temp file (the next node is tried).
#[derive(Debug, thiserror::Error)]
enum StreamError {
    /// `action` is `truncating`, `seeking in`, `writing` or `syncing`.
    #[error("{action} {}", path.display())]
    File {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the download broke off after {bytes} bytes")]
    BrokeOff {
        bytes: u64,
        #[source]
        source: reqwest::Error,
    },
}

/// Writes the body to `f` (the temp file `tmp`) from its start, dropping what an
/// earlier, broken-off attempt left, and fsyncs it.
async fn stream_to(
    mut resp: reqwest::Response,
    f: &mut tokio::fs::File,
    tmp: &Path,
) -> Result<Download, StreamError> {
    let file = |action: &'static str| {
        move |source| StreamError::File {
            action,
            path: tmp.to_path_buf(),
            source,
        }
    };
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let index = header(SNAPSHOT_INDEX_HEADER).and_then(|v| v.parse().ok());
    let node_id = header(leasehold_node::http::NODE_HEADER).and_then(|v| v.parse().ok());
    let cluster_id = header(CLUSTER_ID_HEADER);
    f.set_len(0).await.map_err(file("truncating"))?;
    f.seek(SeekFrom::Start(0))
        .await
        .map_err(file("seeking in"))?;
    let mut bytes = 0u64;
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|source| StreamError::BrokeOff { bytes, source })?
    {
        f.write_all(&chunk).await.map_err(file("writing"))?;
        bytes += chunk.len() as u64;
    }
    f.sync_all().await.map_err(file("syncing"))?;
    Ok(Download {
        bytes,
        index,
        node_id,
        cluster_id,
    })
}

fn print_saved(s: &Saved, output: Output) {
    if output == Output::Json {
        println!("{}", serde_json::to_string(s).expect("serializes"));
        return;
    }
    println!("saved {}", s.file);
    println!("index:      {}", s.index);
    println!("term:       {}", s.term);
    println!("jobs:       {}", s.jobs);
    println!("bytes:      {}", s.bytes);
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    println!("from node:  {}", opt(s.node_id.map(|n| n.to_string())));
    println!("cluster_id: {}", opt(s.cluster_id.clone()));
}

// ---- restore -----------------------------------------------------------------------------

/// Why `snapshot restore` refuses before it writes anything (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum RestoreRefused {
    #[error("no --peer given")]
    NoPeers,
    #[error("--id {0} is not in the --peer list")]
    NotAPeer(NodeId),
    #[error(
        "node {id} is not the lowest --peer id: restore into node {lowest}'s data dir (it \
         starts the restored cluster; the others start empty and catch up). To seed every \
         node's dir from the same file, restore node {lowest} first and give the others \
         the --cluster-id it prints"
    )]
    NotTheLowest { id: NodeId, lowest: NodeId },
    #[error("--peer lists node {0} twice")]
    PeerTwice(NodeId),
    #[error("--data-dir {}", dir.display())]
    DataDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "--data-dir {} is not empty (it holds {entry:?}): restore only seeds a new node's \
         empty data dir, never one in use",
        dir.display()
    )]
    NotEmpty {
        dir: PathBuf,
        entry: std::ffi::OsString,
    },
    #[error("refusing to restore")]
    BadFile(#[source] CheckError),
    #[error("refusing to restore")]
    Raise(#[source] RaiseError),
}

impl From<RestoreRefused> for CliError {
    fn from(e: RestoreRefused) -> Self {
        CliError::usage(chain(&e))
    }
}

/// Who may be seeded, as a pure function: `id` must be a voter, and unless every seeded
/// dir shares a pinned `--cluster-id`, only the lowest id — the node that would
/// otherwise found a new, empty cluster.
pub fn check_seeded_id(
    id: NodeId,
    peers: &BTreeMap<NodeId, String>,
    cluster_id: Option<ClusterId>,
) -> Result<(), RestoreRefused> {
    let Some(&lowest) = peers.keys().next() else {
        return Err(RestoreRefused::NoPeers);
    };
    if !peers.contains_key(&id) {
        return Err(RestoreRefused::NotAPeer(id));
    }
    if id != lowest && cluster_id.is_none() {
        return Err(RestoreRefused::NotTheLowest { id, lowest });
    }
    Ok(())
}

/// The --peer list as a map; an id given twice is refused.
fn peer_map(peers: &[(NodeId, String)]) -> Result<BTreeMap<NodeId, String>, RestoreRefused> {
    let mut map = BTreeMap::new();
    for (id, addr) in peers {
        if map.insert(*id, addr.clone()).is_some() {
            return Err(RestoreRefused::PeerTwice(*id));
        }
    }
    Ok(map)
}

/// `Ok(true)`: D does not exist (restore creates it); `Ok(false)`: an empty dir.
fn check_empty_dir(dir: &Path) -> Result<bool, RestoreRefused> {
    let unreadable = |source| RestoreRefused::DataDir {
        dir: dir.to_path_buf(),
        source,
    };
    let mut entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(unreadable(e)),
    };
    if let Some(entry) = entries.next() {
        let entry = entry.map_err(unreadable)?;
        return Err(RestoreRefused::NotEmpty {
            dir: dir.to_path_buf(),
            entry: entry.file_name(),
        });
    }
    Ok(false)
}

/// The backup's meta for the new cluster: the same last log id (so terms go on above
/// it), the new voters as its membership.
fn seeded_meta(last: LogId, peers: &BTreeMap<NodeId, String>) -> SnapshotMeta {
    let voters: BTreeSet<NodeId> = peers.keys().copied().collect();
    let nodes: BTreeMap<NodeId, BasicNode> = peers
        .iter()
        .map(|(id, addr)| (*id, BasicNode::new(addr)))
        .collect();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    SnapshotMeta {
        last_log_id: Some(last),
        last_membership: StoredMembership::new(Some(last), Membership::new(vec![voters], nodes)),
        snapshot_id: format!(
            "restored-{}-{}-{}-{nanos:x}",
            last.leader_id.term, last.leader_id.node_id, last.index
        ),
    }
}

#[derive(Debug, Serialize)]
struct Restored {
    file: String,
    data_dir: String,
    node_id: NodeId,
    cluster_id: String,
    index: u64,
    term: u64,
    jobs: u64,
    /// By how much every generation was raised (0: not).
    generations_raised_by: u64,
    /// Leases live in the backup, held (for nobody) after the raise until their TTL plus
    /// the failover grace cap of restored-cluster time has passed.
    leases_held: u64,
    /// The latest end of those holds (cluster time); null when none was live.
    leases_held_until_ms: Option<u64>,
    voters: BTreeMap<NodeId, String>,
}

/// Why the backup's generations could not be raised.
#[derive(Debug, thiserror::Error)]
pub enum RaiseError {
    #[error(transparent)]
    Restore(#[from] leasehold_statemachine::SnapshotError),
    #[error("--raise-generations")]
    Overflow(#[source] leasehold_statemachine::GenerationOverflow),
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
}

/// Raises the backup's generations (see `LeaseMachine::raise_generations`), off the
/// runtime: the machine bytes to seed with and what the raise held.
async fn raise(machine: Vec<u8>, by: u64) -> Result<(Vec<u8>, Raised), RaiseError> {
    if by == 0 {
        return Ok((machine, Raised::default()));
    }
    tokio::task::spawn_blocking(move || {
        let mut m = LeaseMachine::restore(&machine)?;
        let raised = m.raise_generations(by).map_err(RaiseError::Overflow)?;
        Ok((m.snapshot(), raised))
    })
    .await?
}

async fn restore(a: RestoreArgs) -> Result<(), CliError> {
    let peers = peer_map(&a.peers)?;
    check_seeded_id(a.id, &peers, a.cluster_id)?;
    // Everything is checked before anything is written.
    let checked = check_file(&a.file).await.map_err(RestoreRefused::BadFile)?;
    let created = check_empty_dir(&a.data_dir)?;
    let cluster_id = a.cluster_id.unwrap_or_else(ClusterId::random);
    identity::restrict_umask();
    let Checked {
        last,
        machine,
        jobs,
    } = checked;
    let (machine, raised) = raise(machine, a.raise_generations)
        .await
        .map_err(RestoreRefused::Raise)?;
    let seeded = seed(&a.data_dir, a.id, cluster_id, &peers, last, machine).await;
    if let Err(e) = seeded {
        let undo = undo_seed(&a.data_dir, created)
            .err()
            .map(|u| format!("; removing what was written failed too ({u}): empty the dir by hand"))
            .unwrap_or_default();
        return Err(CliError {
            code: EXIT_RESTORE_FAILED,
            message: format!(
                "restoring into {}: {}{undo}",
                a.data_dir.display(),
                chain(&e)
            ),
        });
    }
    let restored = Restored {
        file: a.file.display().to_string(),
        data_dir: a.data_dir.display().to_string(),
        node_id: a.id,
        cluster_id: cluster_id.to_string(),
        index: last.index,
        term: last.leader_id.term,
        jobs,
        generations_raised_by: a.raise_generations,
        leases_held: raised.leases_held,
        leases_held_until_ms: raised.held_until_ms,
        voters: peers,
    };
    print_restored(&restored, a.cluster_id.is_some(), a.output);
    Ok(())
}

/// Why writing the seeded data dir failed (what was written is removed again).
#[derive(Debug, thiserror::Error)]
enum SeedError {
    #[error(transparent)]
    Identity(#[from] identity::IdentityError),
    #[error(transparent)]
    OpenLog(std::io::Error),
    #[error("purging the new log up to {last}")]
    Purge {
        last: LogId,
        #[source]
        source: openraft::StorageError<NodeId>,
    },
    #[error("saving the vote")]
    Vote(#[source] openraft::StorageError<NodeId>),
    /// `action` is `creating` or `syncing`.
    #[error("{action} {}", path.display())]
    Dir {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Task(#[from] tokio::task::JoinError),
    #[error("writing the snapshot")]
    Snapshot(#[source] std::io::Error),
    #[error(transparent)]
    SeedMarker(#[from] leasehold_node::raft::join::MarkerError),
}

/// Writes D (see the module doc), the snapshot last.
async fn seed(
    dir: &Path,
    id: NodeId,
    cluster_id: ClusterId,
    peers: &BTreeMap<NodeId, String>,
    last: LogId,
    machine: Vec<u8>,
) -> Result<(), SeedError> {
    identity::prepare_dir(dir)?;
    {
        let mut log = LogStore::open(&dir.join("log"))
            .await
            .map_err(SeedError::OpenLog)?;
        log.purge(last)
            .await
            .map_err(|source| SeedError::Purge { last, source })?;
        // Synced, and after the purge in the log's write order: both are on disk.
        log.save_vote(&Vote::new(last.leader_id.term, id))
            .await
            .map_err(SeedError::Vote)?;
    }
    identity::store(
        dir,
        &Identity {
            cluster_id: Some(cluster_id),
            node_id: id,
        },
    )?;
    let in_dir = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| SeedError::Dir {
            action,
            path,
            source,
        }
    };
    // The empty nodes of the new --peer list found the cluster with this seed
    // (`raft/bootstrap.rs`) until it has committed past the snapshot.
    leasehold_node::raft::bootstrap::mark_seed(dir, last.index)?;
    let sm = dir.join("sm");
    std::fs::create_dir_all(&sm).map_err(in_dir("creating", &sm))?;
    let meta = seeded_meta(last, peers);
    tokio::task::spawn_blocking(move || {
        leasehold_node::store::write_snapshot_file(&sm, &meta, machine)
    })
    .await?
    .map_err(SeedError::Snapshot)?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(in_dir("syncing", dir))
}

/// Brings D back to how restore found it: absent, or empty.
fn undo_seed(dir: &Path, created: bool) -> std::io::Result<()> {
    if created {
        return match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        };
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

fn print_restored(r: &Restored, pinned: bool, output: Output) {
    if output == Output::Json {
        println!("{}", serde_json::to_string(r).expect("serializes"));
        return;
    }
    let peers: Vec<String> = r
        .voters
        .iter()
        .map(|(id, addr)| format!("--peer {id}={addr}"))
        .collect();
    let peers = peers.join(" ");
    println!("restored {} into {}", r.file, r.data_dir);
    println!("node_id:    {}", r.node_id);
    let how = if pinned { "given" } else { "new" };
    println!("cluster_id: {} ({how})", r.cluster_id);
    println!("index:      {}", r.index);
    println!("term:       {}", r.term);
    println!("jobs:       {}", r.jobs);
    if r.generations_raised_by > 0 {
        println!(
            "generations raised by {}; replies remembered in the backup answer stale_lease",
            r.generations_raised_by
        );
        if let Some(until) = r.leases_held_until_ms {
            println!(
                "{} lease(s) live in the backup held for their TTL plus the failover grace \
                 (their old holders are fenced off; nobody can claim them before cluster \
                 time {until})",
                r.leases_held
            );
        }
    } else {
        println!(
            "generations NOT raised: tokens the old cluster granted after the backup may \
             be granted again"
        );
    }
    println!();
    println!("Next: start this node on its data dir with the same peer list:");
    println!(
        "  leasehold serve --id {} --data-dir {} --listen <its address> {peers}",
        r.node_id, r.data_dir
    );
    println!(
        "then every other node with an EMPTY data dir and the same --peer list (add \
         --cluster-id {} to refuse any other cluster); they catch up from this one.",
        r.cluster_id
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers() -> BTreeMap<NodeId, String> {
        (1..=3).map(|i| (i, format!("127.0.0.1:800{i}"))).collect()
    }

    #[test]
    fn only_the_lowest_id_is_seeded_alone() {
        assert!(check_seeded_id(1, &peers(), None).is_ok());
        let err = check_seeded_id(2, &peers(), None).unwrap_err();
        assert!(
            matches!(err, RestoreRefused::NotTheLowest { id: 2, lowest: 1 }),
            "{err}"
        );
        assert!(err.to_string().contains("node 1's data dir"), "{err}");
        let pinned = Some(ClusterId::random());
        assert!(check_seeded_id(2, &peers(), pinned).is_ok());
        assert!(matches!(
            check_seeded_id(4, &peers(), pinned),
            Err(RestoreRefused::NotAPeer(4))
        ));
    }

    #[test]
    fn a_peer_given_twice_is_refused() {
        let twice = vec![(1, "a:1".to_string()), (1, "b:2".to_string())];
        assert!(matches!(
            peer_map(&twice),
            Err(RestoreRefused::PeerTwice(1))
        ));
    }

    #[test]
    fn the_seeded_meta_keeps_the_log_id_and_takes_the_new_voters() {
        let last = openraft::LogId::new(openraft::CommittedLeaderId::new(7, 2), 41);
        let meta = seeded_meta(last, &peers());
        assert_eq!(meta.last_log_id, Some(last));
        assert_eq!(meta.last_membership.log_id(), &Some(last));
        let voters: Vec<NodeId> = meta.last_membership.membership().voter_ids().collect();
        assert_eq!(voters, vec![1, 2, 3]);
        let addr = meta.last_membership.membership().get_node(&3).unwrap();
        assert_eq!(addr.addr, "127.0.0.1:8003");
    }

    #[cfg(unix)]
    #[test]
    fn a_temp_name_taken_by_a_planted_symlink_is_skipped_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("b.snap");
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let names: Vec<PathBuf> = (0..TMP_ATTEMPTS + 1)
            .map(|i| d.path().join(format!("b.snap.tmp.{i}")))
            .collect();
        std::os::unix::fs::symlink(&victim, &names[0]).unwrap();
        let (_, tmp) = create_tmp(&file, names.clone().into_iter()).unwrap();
        assert_eq!(tmp, names[1]);
        let mode = std::fs::metadata(&tmp).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // Every name taken (names[1] by the file just made): refused, nothing touched.
        for n in &names[2..TMP_ATTEMPTS] {
            std::os::unix::fs::symlink(&victim, n).unwrap();
        }
        let err = create_tmp(&file, names.clone().into_iter()).unwrap_err();
        assert!(err.to_string().contains("all taken"), "{err}");
        assert!(
            !names[TMP_ATTEMPTS].exists(),
            "only {TMP_ATTEMPTS} names tried"
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    }

    #[test]
    fn temp_names_are_fresh_and_beside_the_file() {
        let file = Path::new("/backups/b.snap");
        let two: Vec<PathBuf> = tmp_candidates(file).take(2).collect();
        assert_ne!(two[0], two[1]);
        for t in &two {
            assert_eq!(t.parent(), file.parent());
            let name = t.file_name().unwrap().to_str().unwrap();
            let pid = format!("b.snap.tmp.{}.", std::process::id());
            assert!(name.starts_with(&pid), "{name}");
        }
    }

    #[test]
    fn only_an_absent_or_empty_dir_is_seeded() {
        let d = tempfile::tempdir().unwrap();
        assert!(matches!(check_empty_dir(&d.path().join("new")), Ok(true)));
        assert!(matches!(check_empty_dir(d.path()), Ok(false)));
        std::fs::write(d.path().join("x"), b"").unwrap();
        let err = check_empty_dir(d.path()).unwrap_err();
        assert!(matches!(err, RestoreRefused::NotEmpty { .. }), "{err}");
        assert!(err.to_string().contains("not empty"), "{err}");
    }
}
