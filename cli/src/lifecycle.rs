//! Version 1.1's job lifecycle on the command line (docs/api.md "Job lifecycle"): when a
//! job becomes claimable (`--run-at`, `--delay`), its priority and backoff, how a release
//! ends an attempt (`--delay`, `--retry`, `--error`), and the `job fail`, `job retry`
//! and `job cancel` commands. `queue redrive` is in [`queue`](super::queue); how the new
//! fields print, in [`show`](super::show).
//!
//! Every flag is checked before anything is sent, against the node's own limits
//! (`leasehold_statemachine::limits`): a value out of range is a clap usage error naming
//! the flag, as is `--run-at` with `--delay`; a `--backoff` above its cap and an
//! over-long `--error` or `--reason` are checked here, after parsing, with the same exit
//! code (2) and the flags' names.

use clap::Args;
use leasehold_client::{Client, Job, NewJob, Release};
use leasehold_statemachine::limits::{
    ERROR_BYTES_MAX, PRIORITY_MAX, PRIORITY_MIN, REASON_BYTES_MAX,
};

use crate::common::{CliError, EXIT_UNAVAILABLE};
use crate::duration::{self, show_ms};

/// `--run-at` / `--delay`: when a job becomes claimable (`job submit`, `job retry`).
#[derive(Debug, Clone, Default, Args)]
pub struct RunAt {
    /// Not claimable before this cluster time, in ms (the cluster's clock, not this
    /// machine's: `leasehold cluster status` shows it). A past time is due at once.
    #[arg(long, value_name = "MS", conflicts_with = "delay")]
    pub run_at: Option<u64>,
    /// Not claimable until this long from now on the cluster's clock (its
    /// cluster_time_ms, read first), e.g. 1500ms, 30s, 5m, 2h, 7d; at most 366d.
    #[arg(long, value_name = "DURATION", value_parser = duration::run_delay_ms)]
    pub delay: Option<u64>,
}

impl RunAt {
    /// The `run_at_ms` to send: `--run-at` as given; `--delay` after the cluster time one
    /// `GET /v1/cluster` reports; none without either.
    pub async fn run_at_ms(&self, client: &Client) -> Result<Option<u64>, CliError> {
        match (self.run_at, self.delay) {
            (Some(ms), _) => Ok(Some(ms)),
            (None, Some(delay_ms)) => {
                let now = client.cluster_status().await?.cluster_time_ms;
                delayed(now, delay_ms).map(Some)
            }
            (None, None) => Ok(None),
        }
    }
}

/// `run_at_ms` for `--delay`: `delay_ms` after the cluster time a node reported. The
/// answering node's own estimate may trail the leader's stamp by a little, which only
/// makes the wait that much shorter. A node that has applied no stamped entry yet reports
/// 0, and 0 + delay is a time long past, due at once: refused rather than sent.
pub fn delayed(cluster_time_ms: u64, delay_ms: u64) -> Result<u64, CliError> {
    if cluster_time_ms == 0 {
        return Err(CliError {
            code: EXIT_UNAVAILABLE,
            message: "the cluster's time is not known yet (GET /v1/cluster answered \
                      cluster_time_ms 0): retry, or give --run-at"
                .into(),
        });
    }
    Ok(cluster_time_ms.saturating_add(delay_ms))
}

/// `job submit`'s priority and backoff.
#[derive(Debug, Clone, Default, Args)]
pub struct Schedule {
    /// Claim-next hands out higher priorities first: -1000 … 1000 (default 0).
    #[arg(
        long,
        allow_negative_numbers = true,
        value_parser = clap::value_parser!(i32).range(PRIORITY_MIN as i64..=PRIORITY_MAX as i64)
    )]
    pub priority: Option<i32>,
    /// After a failed attempt (its lease expired, or `job release --retry`), the job waits
    /// this long × 2^(attempts−1) before it is claimable again, e.g. 500ms, 10s; at most
    /// 1d (default 0: at once).
    #[arg(long, value_name = "DURATION", value_parser = duration::delay_ms)]
    pub backoff: Option<u64>,
    /// The longest such wait: at least --backoff, at most 1d (default 1h, or --backoff
    /// when that is longer).
    #[arg(long, value_name = "DURATION", value_parser = duration::delay_ms)]
    pub backoff_max: Option<u64>,
}

impl Schedule {
    /// `job` with the flags given; the node's defaults apply to those not given.
    pub fn apply(&self, mut job: NewJob) -> Result<NewJob, CliError> {
        if let Some(backoff_ms) = self.backoff {
            check_backoff(backoff_ms, self.backoff_max)?;
        }
        job.priority = self.priority;
        job.backoff_ms = self.backoff;
        job.backoff_ms_max = self.backoff_max;
        Ok(job)
    }
}

/// A backoff no longer than its cap, named as the flags are (the node would refuse it
/// with its field names, after a round trip).
pub fn check_backoff(backoff_ms: u64, backoff_ms_max: Option<u64>) -> Result<(), CliError> {
    // Without --backoff-max the store caps at 1 h, or at --backoff when that is longer.
    let message = match backoff_ms_max {
        Some(max) if max < backoff_ms => format!(
            "--backoff-max {} must not be below --backoff {}",
            show_ms(max),
            show_ms(backoff_ms)
        ),
        _ => return Ok(()),
    };
    Err(CliError::usage(message))
}

/// Free text for the store (`--error`, `--reason`): at most `max` bytes, as the node
/// allows. Checked here rather than by clap, which would echo the whole value back.
pub fn check_text(flag: &str, text: Option<&str>, max: usize) -> Result<(), CliError> {
    match text {
        Some(t) if t.len() > max => Err(CliError::usage(format!(
            "{flag} is {} bytes, at most {max} allowed",
            t.len()
        ))),
        _ => Ok(()),
    }
}

/// `job release`'s version 1.1 flags: how the attempt ended.
#[derive(Debug, Clone, Default, Args)]
pub struct ReleaseFlags {
    /// Claimable again only this long after the release, e.g. 30s; at most 1d. Overrides
    /// the job's backoff.
    #[arg(long, value_name = "DURATION", value_parser = duration::delay_ms)]
    pub delay: Option<u64>,
    /// A failed attempt: the job's backoff applies before it is claimable again.
    #[arg(long)]
    pub retry: bool,
    /// Why the attempt ended, kept as the job's last_error (at most 4 KiB).
    #[arg(long, value_name = "TEXT")]
    pub error: Option<String>,
}

impl ReleaseFlags {
    pub fn release(&self) -> Result<Release, CliError> {
        check_text("--error", self.error.as_deref(), ERROR_BYTES_MAX)?;
        Ok(Release {
            delay_ms: self.delay,
            retry: self.retry,
            error: self.error.clone(),
        })
    }
}

/// `job fail`.
#[derive(Debug, Args)]
pub struct FailArgs {
    /// Job id.
    pub id: String,
    /// The lease's owner.
    #[arg(long)]
    pub owner: String,
    /// The lease's generation (its fencing token).
    #[arg(long)]
    pub generation: u64,
    /// Why it failed, kept as the job's last_error (at most 4 KiB).
    #[arg(long, value_name = "TEXT")]
    pub error: Option<String>,
}

/// `job retry`.
#[derive(Debug, Args)]
pub struct RetryArgs {
    /// Job id (a failed or cancelled job).
    pub id: String,
    #[command(flatten)]
    pub when: RunAt,
}

/// `job cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Job id.
    pub id: String,
    /// Why, kept as the job's cancel_reason (at most 1 KiB).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

pub async fn fail(client: &Client, a: &FailArgs) -> Result<Job, CliError> {
    check_text("--error", a.error.as_deref(), ERROR_BYTES_MAX)?;
    let error = a.error.as_deref();
    Ok(client.fail(&a.id, &a.owner, a.generation, error).await?)
}

pub async fn retry(client: &Client, a: &RetryArgs) -> Result<Job, CliError> {
    let run_at_ms = a.when.run_at_ms(client).await?;
    Ok(client.retry(&a.id, run_at_ms).await?)
}

pub async fn cancel(client: &Client, a: &CancelArgs) -> Result<Job, CliError> {
    check_text("--reason", a.reason.as_deref(), REASON_BYTES_MAX)?;
    Ok(client.cancel(&a.id, a.reason.as_deref()).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::EXIT_USAGE;

    #[test]
    fn a_delay_counts_from_the_cluster_time_and_an_unknown_time_is_refused() {
        assert_eq!(delayed(1_000, 30_000).unwrap(), 31_000);
        assert_eq!(delayed(u64::MAX - 1, 5).unwrap(), u64::MAX);
        let e = delayed(0, 30_000).unwrap_err();
        assert_eq!(e.code, EXIT_UNAVAILABLE);
        assert!(e.message.contains("--run-at"), "{}", e.message);
    }

    #[test]
    fn a_backoff_above_its_cap_names_the_flags() {
        assert!(check_backoff(0, None).is_ok());
        // Over the default cap without --backoff-max: the store caps at the backoff.
        assert!(check_backoff(
            leasehold_statemachine::limits::BACKOFF_MS_MAX_DEFAULT + 1,
            None
        )
        .is_ok());
        assert!(check_backoff(7_200_000, Some(7_200_000)).is_ok());
        let e = check_backoff(60_000, Some(59_999)).unwrap_err();
        assert_eq!(e.code, EXIT_USAGE);
        assert_eq!(
            e.message,
            "--backoff-max 59999ms must not be below --backoff 1m"
        );
    }

    #[test]
    fn schedule_sends_only_the_flags_given() {
        let none = Schedule::default().apply(NewJob::new()).unwrap();
        assert_eq!(none, NewJob::new());
        let cap_only = Schedule {
            backoff_max: Some(60_000),
            priority: Some(-3),
            ..Schedule::default()
        };
        let job = cap_only.apply(NewJob::new()).unwrap();
        assert_eq!((job.backoff_ms, job.backoff_ms_max), (None, Some(60_000)));
        assert_eq!(job.priority, Some(-3));
        let over_its_cap = Schedule {
            backoff: Some(120_000),
            backoff_max: Some(60_000),
            ..Schedule::default()
        };
        assert!(over_its_cap.apply(NewJob::new()).is_err());
    }

    #[test]
    fn free_text_is_bounded_as_the_node_bounds_it() {
        let at = "x".repeat(ERROR_BYTES_MAX);
        assert!(check_text("--error", Some(&at), ERROR_BYTES_MAX).is_ok());
        let past = "x".repeat(ERROR_BYTES_MAX + 1);
        let e = check_text("--error", Some(&past), ERROR_BYTES_MAX).unwrap_err();
        assert_eq!(e.code, EXIT_USAGE);
        assert_eq!(e.message, "--error is 4097 bytes, at most 4096 allowed");
        assert!(check_text("--reason", None, REASON_BYTES_MAX).is_ok());
    }
}
