//! A fence in PostgreSQL (feature `fence-postgres`, `tokio-postgres`): the destination
//! rejects a late write itself, in the same transaction as the write (issue 34 item 3).
//!
//! A lease is temporary ownership: a worker paused past its lease (GC, SIGSTOP, a VM
//! migration) wakes up believing it still holds the job while a successor with a higher
//! token already wrote. The store cannot stop that late write; the destination must. This
//! module keeps, per resource, the highest token that ever wrote, and performs a caller's
//! write **only if its token is not older than that**, so the check and the write commit
//! together or not at all. It is the Python client's `leasehold.fence.postgres` — the same
//! schema ([`SCHEMA`], byte for byte) and the same decisions — so Rust and Python workers
//! can share one database.
//!
//! ```text
//! leasehold_fence(resource text PRIMARY KEY, token bigint, updated_at timestamptz)
//!     -- per resource, the highest fencing token seen
//! leasehold_fence_idempotency(key text PRIMARY KEY, resource text, token bigint,
//!                             applied_at timestamptz)
//!     -- every idempotency key whose write was applied
//! ```
//!
//! [`fenced_write`] decides, in one transaction:
//! 1. `INSERT … ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE
//!    leasehold_fence.token <= EXCLUDED.token RETURNING token`: it takes the resource's
//!    row lock and raises the highest token to ours, unless the highest is newer — then no
//!    row comes back: [`FenceError::StaleToken`], rolled back. A writer queued on the row
//!    lock behind a newer token is judged against that token once it commits (READ
//!    COMMITTED re-checks the latest row version). Equal tokens pass: the same lease may
//!    write several times.
//! 2. With an idempotency key: `INSERT … ON CONFLICT DO NOTHING` into the key table; a key
//!    already there means this write was applied before: it is dropped
//!    ([`Written::Duplicate`]).
//! 3. The caller's `write`, on the same transaction; then commit.
//!
//! Tokens are docs/api.md generations: per job they only grow, so the resource is usually
//! the job id or what the job writes to.
//!
//! May import `tokio-postgres` and nothing else of the crate.

use std::future::Future;
use std::pin::Pin;

use tokio_postgres::{Client, Transaction};

/// The fence's two tables (idempotent DDL); the Python client's `SCHEMA`, the same text.
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS leasehold_fence (
    resource   text PRIMARY KEY,
    token      bigint NOT NULL CHECK (token >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS leasehold_fence_idempotency (
    key        text PRIMARY KEY,
    resource   text NOT NULL,
    token      bigint NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
";

const RAISE: &str = "
INSERT INTO leasehold_fence (resource, token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
    WHERE leasehold_fence.token <= EXCLUDED.token
RETURNING token
";
const HIGHEST: &str = "SELECT token FROM leasehold_fence WHERE resource = $1";
const KEY: &str = "
INSERT INTO leasehold_fence_idempotency (key, resource, token) VALUES ($1, $2, $3)
ON CONFLICT (key) DO NOTHING RETURNING key
";

/// What [`fenced_write`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// The write ran and committed with the token check.
    Applied,
    /// Its idempotency key was applied before: nothing was written.
    Duplicate,
}

/// Why [`fenced_write`] wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// The token is older than the highest seen for the resource: PostgreSQL rejected
    /// the write (the transaction was rolled back).
    #[error("token {token} for {resource:?} is older than the highest seen ({highest:?}): write rejected")]
    StaleToken {
        resource: String,
        token: u64,
        highest: Option<u64>,
    },
    /// An empty resource, or a token past `bigint` (2^63 − 1): refused before sending.
    #[error("invalid fenced write: {0}")]
    Invalid(String),
    /// The database failed (or the caller's write did): everything was rolled back.
    #[error(transparent)]
    Db(#[from] tokio_postgres::Error),
}

/// The caller's write: statements on the fence's transaction.
pub type Write<'t> = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send + 't>>;

/// Creates the fence's tables if they do not exist.
pub async fn install(client: &Client) -> Result<(), tokio_postgres::Error> {
    client.batch_execute(SCHEMA).await
}

/// The highest token seen for `resource` (`None` if none wrote yet).
pub async fn highest_token(client: &Client, resource: &str) -> Result<Option<u64>, FenceError> {
    let row = client.query_opt(HIGHEST, &[&resource]).await?;
    Ok(row.map(|r| r.get::<_, i64>(0) as u64))
}

/// Runs `write` in one transaction with the fence check (module doc). A failing `write`
/// rolls everything back and its error is returned as [`FenceError::Db`].
///
/// ```no_run
/// # async fn f(db: &mut tokio_postgres::Client, token: u64) -> Result<(), Box<dyn std::error::Error>> {
/// use leasehold_client::fence::postgres::{fenced_write, Written};
/// let done = fenced_write(db, "invoice-42", token, Some("invoice-42/total"), |tx| {
///     Box::pin(async move {
///         tx.execute("UPDATE invoices SET total = 120 WHERE id = 42", &[]).await?;
///         Ok(())
///     })
/// })
/// .await?;
/// assert_eq!(done, Written::Applied);
/// # Ok(()) }
/// ```
pub async fn fenced_write<F>(
    client: &mut Client,
    resource: &str,
    token: u64,
    idempotency_key: Option<&str>,
    write: F,
) -> Result<Written, FenceError>
where
    F: for<'t> FnOnce(&'t Transaction<'t>) -> Write<'t>,
{
    let token_db = check(resource, token)?;
    let tx = client.transaction().await?;
    if tx
        .query_opt(RAISE, &[&resource, &token_db])
        .await?
        .is_none()
    {
        let highest = tx.query_opt(HIGHEST, &[&resource]).await?;
        tx.rollback().await?;
        return Err(FenceError::StaleToken {
            resource: resource.to_owned(),
            token,
            highest: highest.map(|r| r.get::<_, i64>(0) as u64),
        });
    }
    if let Some(key) = idempotency_key {
        if tx
            .query_opt(KEY, &[&key, &resource, &token_db])
            .await?
            .is_none()
        {
            tx.commit().await?;
            return Ok(Written::Duplicate);
        }
    }
    write(&tx).await?;
    tx.commit().await?;
    Ok(Written::Applied)
}

/// The token as PostgreSQL's `bigint`, after checking the arguments.
fn check(resource: &str, token: u64) -> Result<i64, FenceError> {
    if resource.is_empty() {
        return Err(FenceError::Invalid(
            "resource must be a non-empty string".into(),
        ));
    }
    i64::try_from(token)
        .map_err(|_| FenceError::Invalid(format!("token must be below 2^63 (got {token})")))
}
