//! The bench's shared plumbing: its error ([`BenchError`]), the operation a worker runs
//! ([`Mode`]), the state every worker shares (`Shared`, `Spread`), their latencies
//! (`Samples`) and one timed POST (`post`). Below `bench`'s other files, which import
//! it (issue 45 item 7: `batch` and `failover` took these from their parent, which
//! declares them); it imports nothing of this crate. `bench` re-exports the public ones.

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use clap::ValueEnum;
use serde_json::{json, Value};

/// Why a bench run, or one of its requests, failed. A run's error ends the command with
/// one `error:` line; a request's is counted (and the first few printed). A variant
/// with a cause keeps it as its source, printed after it on the same line.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{flag} {}", path.display())]
    Read {
        flag: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--tls-ca {}", path.display())]
    Ca {
        path: PathBuf,
        #[source]
        source: reqwest::Error,
    },
    #[error("--tls-client-cert {} / --tls-client-key {}", cert.display(), key.display())]
    Identity {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: reqwest::Error,
    },
    #[error("--token is not a valid header value")]
    Token(#[source] reqwest::header::InvalidHeaderValue),
    #[error("--endpoints is empty")]
    NoEndpoints,
    #[error("no node named a leader")]
    NoLeader,
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error("{path}: 204, nothing to claim")]
    NothingToClaim { path: String },
    #[error("{path}: {status} {body}")]
    Refused {
        path: String,
        status: reqwest::StatusCode,
        body: Value,
    },
    #[error("lease without generation")]
    NoGeneration,
    // `bench failover`:
    #[error("--trials must be at least 1")]
    NoTrials,
    #[error("finding this binary")]
    CurrentExe(#[source] std::io::Error),
    #[error(transparent)]
    Cluster(#[from] leasehold_proc_cluster::Error),
    #[error("node {id} did not catch up within {bound:?}")]
    NotCaughtUp { id: u64, bound: Duration },
    #[error(transparent)]
    Client(#[from] leasehold_client::Error),
    #[error("claiming a held job")]
    ClaimHeld(#[source] leasehold_client::Error),
    #[error("the bench's client: {0}")]
    ClientSetup(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// claim → renew → complete on a fresh job id.
    Cycle,
    /// Claim a fresh job id (created by the claim).
    Claim,
    /// Submit a fresh job into `--queue` (to load a queue for `claim-next`).
    Submit,
    /// Claim the next claimable job of `--queue`; an empty queue counts as an error.
    ClaimNext,
    /// Claim `--batch` jobs of `--queue` in one request, renew them in one, complete them
    /// in one (docs/api.md "Batches"); the queue is filled first, untimed.
    BatchCycle,
    /// Hold `--leases` leases for `--max-secs` with one lease set (the Rust client's
    /// `LeaseSet`: one batch renew per TTL/3 for all of them); report renews and losses.
    Hold,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Cycle => "cycle",
            Mode::Claim => "claim",
            Mode::Submit => "submit",
            Mode::ClaimNext => "claim-next",
            Mode::BatchCycle => "batch-cycle",
            Mode::Hold => "hold",
        }
    }
}

/// How `submit` spreads jobs over priorities and due times (`--priorities`,
/// `--due-times`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spread {
    pub(crate) priorities: u32,
    pub(crate) due_times: u64,
    /// Cluster time of the first due time.
    pub(crate) first_due_ms: u64,
    pub(crate) step_ms: u64,
}

impl Spread {
    /// The version 1.1 fields of the `k`-th submit.
    pub(crate) fn fields(&self, k: u64, body: &mut Value) {
        if self.priorities > 1 {
            let p = (k % u64::from(self.priorities)) as i64 - i64::from(self.priorities / 2);
            body["priority"] = json!(p);
        }
        if self.due_times > 0 {
            body["run_at_ms"] = json!(self.first_due_ms + (k % self.due_times) * self.step_ms);
        }
    }
}

#[derive(Default)]
pub(crate) struct Samples {
    pub(crate) claim: Vec<f64>,
    pub(crate) renew: Vec<f64>,
    pub(crate) complete: Vec<f64>,
    pub(crate) cycle: Vec<f64>,
    pub(crate) errors: u64,
    /// `batch-cycle`: jobs claimed, renewed and completed.
    pub(crate) jobs: u64,
}

pub(crate) struct Shared {
    pub(crate) http: reqwest::Client,
    pub(crate) urls: Vec<String>,
    pub(crate) mode: Mode,
    pub(crate) ttl_ms: u64,
    pub(crate) queue: String,
    pub(crate) spread: Spread,
    pub(crate) batch: u32,
    /// Job ids of a phase start with `bench-{run}-`, so phases never share a job.
    pub(crate) run: AtomicU64,
    pub(crate) next: AtomicU64,
}

pub(crate) async fn post(
    s: &Shared,
    url: &str,
    path: &str,
    body: Value,
) -> Result<(Value, f64), BenchError> {
    let t = Instant::now();
    let resp = s
        .http
        .post(format!("{url}{path}"))
        .json(&body)
        .send()
        .await?;
    let status = resp.status();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    if status == reqwest::StatusCode::NO_CONTENT {
        return Err(BenchError::NothingToClaim { path: path.into() });
    }
    if !status.is_success() {
        return Err(BenchError::Refused {
            path: path.into(),
            status,
            body: v,
        });
    }
    Ok((v, t.elapsed().as_secs_f64() * 1000.0))
}
