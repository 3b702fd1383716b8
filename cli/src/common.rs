//! What every client command shares (`job`, `cluster`, `queue`, `events`, `worker`,
//! `snapshot save`, `bench`): the client flags ([`ClientOpts`], [`Output`]), the error a
//! command fails with ([`CliError`]) and its exit codes, and printing it on one line.
//! Below every command file, which imports it; it imports nothing of this crate
//! (issue 45 item 7: the commands imported these from `jobs`, which imports them back).
//! `jobs` re-exports them under their old paths.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use leasehold_client::{Client, Error, ErrorCode};

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
