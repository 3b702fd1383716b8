//! `leasehold job …` and `leasehold cluster …`: docs/api.md calls from the command line,
//! through [`leasehold_client::Client`]; also the client flags and the errors every client
//! command shares. Version 1.1's job flags and `job fail|retry|cancel` are in
//! [`lifecycle`](super::lifecycle), `queue …` in [`queue`](super::queue).
//!
//! Output ([`show`](super::show)): `--output table` (default) prints a human-readable
//! view; `--output json` prints exactly one docs/api.md object (a Job, a Lease, the
//! `GET /v1/jobs` page object `{"jobs":[…],"next_page_token":…}`, the history object
//! `{"events":[…]}`, or the `GET /v1/cluster` object). `job delete` prints nothing in
//! JSON mode (the API answers 204 with no body).
//!
//! Errors print one line to stderr, `error: <code>: <message>`, and exit with
//! [`EXIT_API`] for docs/api.md errors, [`EXIT_USAGE`] for bad arguments, [`EXIT_UNAVAILABLE`]
//! when no node answered or the outcome of a write is unknown.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};
use leasehold_client::{Client, Error, ErrorCode, JobState, ListJobs, NewJob};
use serde_json::Value;

use crate::lifecycle::{self, CancelArgs, FailArgs, ReleaseFlags, RetryArgs, RunAt, Schedule};
use crate::show::{show_job, show_lease, show_membership, show_page};

/// docs/api.md error (the store or the client's validation answered with an error code).
pub const EXIT_API: i32 = 1;
/// Bad command-line usage (clap uses 2 too).
pub const EXIT_USAGE: i32 = 2;
/// No node could serve the call, the outcome of a write is unknown, or the answer did
/// not follow docs/api.md.
pub const EXIT_UNAVAILABLE: i32 = 3;

/// The default endpoints: the `leasehold dev` cluster.
pub const DEFAULT_ENDPOINTS: &str = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

/// Flags shared by every client-side subcommand (`job`, `queue`, `events`, `cluster`,
/// `worker`, `snapshot save`, `bench`). They are declared once, on the top-level command, and
/// `global`, so they go before or after the subcommand alike (`leasehold --endpoints E
/// job list` and `leasehold job list --endpoints E`), as etcdctl's and kubectl's do; the
/// command that uses them is handed the parsed set. A subcommand with a flag of the same
/// name of its own (`serve --tls-ca`, `snapshot restore --output`) keeps it: clap does
/// not put a global flag on a subcommand that declares that argument itself.
#[derive(Debug, Clone, Args)]
#[command(
    next_help_heading = "Client options (job, queue, events, cluster, worker, snapshot save, bench)"
)]
pub struct ClientOpts {
    /// Nodes to talk to, comma-separated HOST:PORT (plain HTTP) or https://HOST:PORT.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_ENDPOINTS",
        default_value = DEFAULT_ENDPOINTS,
        value_delimiter = ','
    )]
    pub endpoints: Vec<String>,
    /// Output format: `table` (human-readable) or `json` (the API's object).
    #[arg(long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Bearer token for nodes started with `--auth-file` (prefer the environment
    /// variable: a flag shows in `ps`).
    #[arg(long, global = true, env = TOKEN_ENV, hide_env_values = true)]
    pub token: Option<String>,
    /// The CA certificate (PEM) that signs the nodes' certificates: needed for
    /// `https://HOST:PORT` endpoints, and the only root trusted for them.
    #[arg(long, global = true, env = TLS_CA_ENV)]
    pub tls_ca: Option<PathBuf>,
    /// A client certificate (PEM) for nodes started with `--tls-client-auth` (mTLS);
    /// needs --tls-client-key.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_TLS_CLIENT_CERT",
        requires = "tls_client_key"
    )]
    pub tls_client_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-client-cert.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_TLS_CLIENT_KEY",
        requires = "tls_client_cert"
    )]
    pub tls_client_key: Option<PathBuf>,
}

/// The environment variable every client command reads its token from.
pub const TOKEN_ENV: &str = "LEASEHOLD_TOKEN";
/// The environment variable every client command reads its CA file from.
pub const TLS_CA_ENV: &str = "LEASEHOLD_TLS_CA";

/// Reads a file a flag names; the error names the flag and the file.
pub fn read_flag_file(flag: &str, path: &Path) -> Result<Vec<u8>, CliError> {
    std::fs::read(path).map_err(|e| CliError::usage(format!("{flag} {}: {e}", path.display())))
}

impl ClientOpts {
    pub fn endpoints(&self) -> Vec<String> {
        self.endpoints
            .iter()
            .map(|e| e.trim().to_owned())
            .filter(|e| !e.is_empty())
            .collect()
    }

    /// The token, surrounding whitespace trimmed (`$(cat file)` keeps no newline, but
    /// an exported file may); an empty one is none.
    pub fn token(&self) -> Option<&str> {
        self.token
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
    }

    pub fn client(&self) -> Result<Client, CliError> {
        let mut builder = Client::builder(self.endpoints());
        if let Some(t) = self.token() {
            builder = builder.token(t);
        }
        if let Some(path) = &self.tls_ca {
            builder = builder.ca_cert_pem(read_flag_file("--tls-ca", path)?);
        }
        if let (Some(cert), Some(key)) = (&self.tls_client_cert, &self.tls_client_key) {
            builder = builder.identity_pem(
                &read_flag_file("--tls-client-cert", cert)?,
                &read_flag_file("--tls-client-key", key)?,
            );
        }
        builder.build().map_err(CliError::from)
    }
}

#[derive(Debug, Args)]
pub struct JobArgs {
    #[command(subcommand)]
    pub command: JobCmd,
}

/// `job submit`.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// Job id (generated by the store when absent).
    #[arg(long)]
    pub id: Option<String>,
    /// The queue to put it in (the store's `default` when absent).
    #[arg(long)]
    pub queue: Option<String>,
    /// Any JSON value.
    #[arg(long)]
    pub payload: Option<String>,
    /// Claims allowed at most: a claim past it moves the job to `failed` (no limit when
    /// absent).
    #[arg(long)]
    pub max_attempts: Option<u64>,
    #[command(flatten)]
    pub when: RunAt,
    #[command(flatten)]
    pub schedule: Schedule,
}

/// `job release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// Job id.
    pub id: String,
    /// The lease's owner.
    #[arg(long)]
    pub owner: String,
    /// The lease's generation (its fencing token).
    #[arg(long)]
    pub generation: u64,
    #[command(flatten)]
    pub how: ReleaseFlags,
}

#[derive(Debug, Subcommand)]
pub enum JobCmd {
    /// Create a job (POST /v1/jobs), due at once or later (--run-at, --delay).
    Submit(SubmitArgs),
    /// Show one job.
    Get {
        /// Job id.
        id: String,
    },
    /// List jobs (one page).
    List {
        /// Only the jobs of this queue.
        #[arg(long)]
        queue: Option<String>,
        /// Only jobs in this state: pending, leased, completed, failed or cancelled.
        #[arg(long, value_parser = parse_state)]
        state: Option<JobState>,
        /// Page size, 1–1000 (store default 100).
        #[arg(long)]
        limit: Option<usize>,
        /// Continue from a previous page's next_page_token.
        #[arg(long)]
        page_token: Option<String>,
    },
    /// Claim a lease on a job (created if absent).
    Claim {
        /// Job id.
        id: String,
        /// Who holds the lease (the owner every later call of it must name).
        #[arg(long)]
        owner: String,
        /// How long the lease lasts unless renewed.
        #[arg(long)]
        ttl_ms: u64,
    },
    /// Renew a lease.
    Renew {
        /// Job id.
        id: String,
        /// The lease's owner.
        #[arg(long)]
        owner: String,
        /// The lease's generation (its fencing token).
        #[arg(long)]
        generation: u64,
        /// The renewed lease's TTL (the claim's when absent).
        #[arg(long)]
        ttl_ms: Option<u64>,
    },
    /// Complete a leased job.
    Complete {
        /// Job id.
        id: String,
        /// The lease's owner.
        #[arg(long)]
        owner: String,
        /// The lease's generation (its fencing token).
        #[arg(long)]
        generation: u64,
        /// The job's result: any JSON value.
        #[arg(long)]
        result: Option<String>,
    },
    /// Release a lease: the job goes back to pending, claimable at once, after --delay,
    /// or after its backoff (--retry); `cancelled` if a cancel was requested.
    Release(ReleaseArgs),
    /// Fail a leased job for good (no further attempts): `failed`, with --error as its
    /// last_error, until `job retry` or `queue redrive`.
    Fail(FailArgs),
    /// Bring a failed or cancelled job back to pending, attempts 0 (admin or operator).
    Retry(RetryArgs),
    /// Cancel a job (admin or operator): a pending one at once; a leased one is marked
    /// cancel_requested, which its holder hears on its next renew.
    Cancel(CancelArgs),
    /// Show a job's last events (at most 100), oldest first: who held it, with which
    /// generation, and how each lease ended (GET /v1/jobs/{id}/history).
    History {
        /// Job id.
        id: String,
    },
    /// Delete a job.
    Delete {
        /// Job id.
        id: String,
    },
}

#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCmd,
}

#[derive(Debug, Subcommand)]
pub enum ClusterCmd {
    /// Members, leader, term, indexes and cluster time (GET /v1/cluster).
    Status,
    /// Add node ID at ADDR (HOST:PORT): a learner, promoted to voter once it has caught up.
    /// Start the node first (`serve --join` adds itself instead).
    AddNode {
        /// The new node's id (its `serve --id`).
        id: u64,
        /// HOST:PORT the cluster reaches it at (its `--peer` address).
        addr: String,
    },
    /// Remove node ID (the leader too: it steps down once the change commits).
    RemoveNode {
        /// The node's id.
        id: u64,
    },
}

/// A `--state` that is not one of docs/api.md's job states.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown state {0:?}: expected pending, leased, completed, failed or cancelled")]
pub struct UnknownState(pub String);

fn parse_state(s: &str) -> Result<JobState, UnknownState> {
    JobState::parse(s).ok_or_else(|| UnknownState(s.to_owned()))
}

/// A failure of a client command: the one line to print and the exit code (the line is
/// already the whole story: a cause is folded into `message` when the error is made).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CliError {
    pub code: i32,
    pub message: String,
}

impl CliError {
    pub fn usage(message: impl Into<String>) -> CliError {
        CliError {
            code: EXIT_USAGE,
            message: message.into(),
        }
    }
}

impl From<Error> for CliError {
    fn from(e: Error) -> Self {
        let code = match &e {
            Error::Api { .. } => EXIT_API,
            Error::Config(_) => EXIT_USAGE,
            _ => EXIT_UNAVAILABLE,
        };
        let mut message = one_line(&e.to_string());
        if let Some(hint) = auth_hint(e.code()) {
            message.push_str(hint);
        }
        CliError { code, message }
    }
}

/// What to do about a 401/403, appended to the store's own message.
fn auth_hint(code: Option<ErrorCode>) -> Option<&'static str> {
    match code? {
        ErrorCode::Unauthenticated => {
            Some(" (the cluster requires a token: pass --token or set LEASEHOLD_TOKEN)")
        }
        ErrorCode::PermissionDenied => {
            Some(" (the token's role or owner prefix does not allow this call)")
        }
        _ => None,
    }
}

/// `s` with every run of whitespace (newlines too) as one space.
pub(crate) fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Prints `error: …` and returns the exit code.
pub fn report(result: Result<(), CliError>) -> i32 {
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {}", e.message);
            e.code
        }
    }
}

pub fn parse_json_arg(flag: &str, text: &str) -> Result<Value, CliError> {
    // Before serde, whose recursion limit would answer a vaguer "not valid JSON".
    leasehold_statemachine::limits::validate_json_depth(&format!("--{flag}"), text)
        .map_err(|e| CliError::usage(e.message))?;
    serde_json::from_str(text)
        .map_err(|e| CliError::usage(format!("--{flag} is not valid JSON: {e}")))
}

/// `job submit`'s body: its JSON payload, priority and backoff checked here; its run
/// time resolved (with `--delay`, from the cluster's time).
async fn new_job(client: &Client, a: SubmitArgs) -> Result<NewJob, CliError> {
    let mut nj = NewJob::new();
    if let Some(id) = a.id {
        nj = nj.id(id);
    }
    if let Some(q) = a.queue {
        nj = nj.queue(q);
    }
    if let Some(p) = a.payload {
        nj = nj.payload(parse_json_arg("payload", &p)?);
    }
    if let Some(n) = a.max_attempts {
        nj = nj.max_attempts(n);
    }
    nj = a.schedule.apply(nj)?;
    if let Some(ms) = a.when.run_at_ms(client).await? {
        nj = nj.run_at_ms(ms);
    }
    Ok(nj)
}

pub async fn run_job(args: JobArgs, opts: &ClientOpts) -> Result<(), CliError> {
    let client = opts.client()?;
    let json = opts.output == Output::Json;
    match args.command {
        JobCmd::Submit(a) => {
            let nj = new_job(&client, a).await?;
            show_job(&client.submit(&nj).await?, json)
        }
        JobCmd::Get { id } => show_job(&client.get_job(&id).await?, json),
        JobCmd::History { id } => crate::events::show_history(client.history(&id).await?, json),
        JobCmd::List {
            queue,
            state,
            limit,
            page_token,
        } => {
            let q = ListJobs {
                queue,
                state,
                limit,
                page_token,
            };
            show_page(&client.list_jobs(&q).await?, json)
        }
        JobCmd::Delete { id } => {
            client.delete_job(&id).await?;
            if !json {
                println!("deleted {id}");
            }
            Ok(())
        }
        JobCmd::Retry(a) => show_job(&lifecycle::retry(&client, &a).await?, json),
        JobCmd::Cancel(a) => show_job(&lifecycle::cancel(&client, &a).await?, json),
        lease_cmd => run_lease_cmd(&client, lease_cmd, json).await,
    }
}

/// The `job` commands a lease holder runs: claim, renew, complete, release, fail.
async fn run_lease_cmd(client: &Client, cmd: JobCmd, json: bool) -> Result<(), CliError> {
    match cmd {
        JobCmd::Claim { id, owner, ttl_ms } => {
            let lease = client.claim(&id, &owner, ttl_ms).await?;
            show_lease(&lease.wire(), json)
        }
        JobCmd::Renew {
            id,
            owner,
            generation,
            ttl_ms,
        } => {
            let lease = client.renew(&id, &owner, generation, ttl_ms).await?;
            show_lease(&lease.wire(), json)
        }
        JobCmd::Complete {
            id,
            owner,
            generation,
            result,
        } => {
            let result = result.map(|r| parse_json_arg("result", &r)).transpose()?;
            let job = client.complete(&id, &owner, generation, result).await?;
            show_job(&job, json)
        }
        JobCmd::Release(a) => {
            let how = a.how.release()?;
            let job = client
                .release_with(&a.id, &a.owner, a.generation, &how)
                .await?;
            show_job(&job, json)
        }
        JobCmd::Fail(a) => show_job(&lifecycle::fail(client, &a).await?, json),
        other => unreachable!("run_job handles {other:?} itself"),
    }
}

pub async fn run_cluster(args: ClusterArgs, opts: &ClientOpts) -> Result<(), CliError> {
    let client = opts.client()?;
    let json = opts.output == Output::Json;
    match args.command {
        ClusterCmd::Status => crate::show::show_cluster(&client.cluster_status().await?, json),
        ClusterCmd::AddNode { id, addr } => {
            leasehold_node::http::validate_addr(&addr)
                .map_err(|e| CliError::usage(e.to_string()))?;
            show_membership(&client.add_node(id, &addr).await?, json)
        }
        ClusterCmd::RemoveNode { id } => show_membership(&client.remove_node(id).await?, json),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_statemachine::limits::JSON_DEPTH_MAX;

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn a_payload_nested_past_json_depth_max_is_a_usage_error() {
        assert!(parse_json_arg("payload", &nested(JSON_DEPTH_MAX)).is_ok());
        let e = parse_json_arg("payload", &nested(JSON_DEPTH_MAX + 1)).unwrap_err();
        assert_eq!(e.code, EXIT_USAGE);
        assert!(
            e.message.contains("--payload is nested 65"),
            "{}",
            e.message
        );
        // Past serde's own recursion limit too: the same clear message.
        let e = parse_json_arg("result", &nested(32_000)).unwrap_err();
        assert!(e.message.contains("JSON_DEPTH_MAX"), "{}", e.message);
    }
}
