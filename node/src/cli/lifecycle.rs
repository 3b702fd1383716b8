//! The CLI's part of version 1.1's job lifecycle (docs/api.md "Job lifecycle"): the
//! scheduling flags of `job submit` (`--run-at`, `--delay`, `--priority`, `--backoff`,
//! `--backoff-max`), the `--delay`/`--retry`/`--error` of `job release`, the `job fail`,
//! `job retry` and `job cancel` commands, and the `queue` group (`queue redrive`); and
//! the strict duration syntax they share (`1500ms`, `30s`, `5m`, `2h`).
//!
//! May import the client crate and `cli::jobs` (output, errors).

use std::time::Duration;

use clap::{Args, Subcommand};
use leasehold_client::{Client, NewJob, Release};

use crate::cli::jobs::{show_job, CliError, ClientOpts, Output};

/// A duration as the lifecycle flags take it: a whole number with a unit, `ms`, `s`,
/// `m` or `h` (`1500ms`, `30s`, `5m`, `2h`). No unit, a fraction or a sign is refused.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit: write e.g. 1500ms, 30s, 5m or 2h"))?;
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let ms_per = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(format!("{text:?}: the unit is one of ms, s, m, h")),
    };
    let ms = n
        .checked_mul(ms_per)
        .ok_or_else(|| format!("{text:?} is too long"))?;
    Ok(Duration::from_millis(ms))
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// When a job becomes due: at `--run-at` (cluster time, ms), or `--delay` after the
/// cluster's current time.
#[derive(Debug, Clone, Args)]
pub struct When {
    /// Not claimable before this cluster time (ms since the epoch, as the store counts).
    #[arg(long, value_name = "MS", conflicts_with = "delay")]
    pub run_at: Option<u64>,
    /// Not claimable before this long from now (cluster time): e.g. 30s, 5m, 2h.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub delay: Option<Duration>,
}

impl When {
    /// The `run_at_ms` these flags name; `--delay` asks the cluster for its time.
    async fn run_at_ms(&self, client: &Client) -> Result<Option<u64>, CliError> {
        match (self.run_at, self.delay) {
            (Some(at), _) => Ok(Some(at)),
            (None, Some(d)) => {
                let now = client.cluster_status().await?.cluster_time_ms;
                Ok(Some(now.saturating_add(ms(d))))
            }
            (None, None) => Ok(None),
        }
    }
}

/// `job submit`'s scheduling flags.
#[derive(Debug, Clone, Args)]
pub struct Schedule {
    #[command(flatten)]
    pub when: When,
    /// Claim order: −1000 … 1000, higher first (0 when absent).
    #[arg(long, allow_hyphen_values = true, value_parser = clap::value_parser!(i32).range(-1000..=1000))]
    pub priority: Option<i32>,
    /// After a failed attempt, wait this long × 2^(attempts−1) before the job is
    /// claimable again: e.g. 5s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub backoff: Option<Duration>,
    /// The longest such wait (the store's 1h, or --backoff if longer, when absent).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, requires = "backoff")]
    pub backoff_max: Option<Duration>,
}

impl Schedule {
    /// `job` with these fields.
    pub async fn apply(&self, client: &Client, mut job: NewJob) -> Result<NewJob, CliError> {
        job.run_at_ms = self.when.run_at_ms(client).await?;
        job.priority = self.priority;
        job.backoff_ms = self.backoff.map(ms);
        job.backoff_ms_max = self.backoff_max.map(ms);
        Ok(job)
    }
}

/// `job release`'s version 1.1 flags.
#[derive(Debug, Clone, Args)]
pub struct ReleaseFlags {
    /// Claimable again only this long from now (overrides the job's backoff): e.g. 30s.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub delay: Option<Duration>,
    /// This was a failed attempt: the job's backoff applies.
    #[arg(long)]
    pub retry: bool,
    /// Kept as the job's last_error (at most 4 KiB).
    #[arg(long)]
    pub error: Option<String>,
}

impl ReleaseFlags {
    pub fn release(&self) -> Release {
        Release {
            delay_ms: self.delay.map(ms),
            retry: self.retry,
            error: self.error.clone(),
        }
    }
}

/// `job fail|retry|cancel`.
#[derive(Debug, Subcommand)]
pub enum LifecycleCmd {
    /// Fail a leased job for good (a dead letter, until `job retry` or `queue redrive`).
    Fail {
        /// Job id.
        id: String,
        /// The lease's owner.
        #[arg(long)]
        owner: String,
        /// The lease's generation (its fencing token).
        #[arg(long)]
        generation: u64,
        /// Kept as the job's last_error (at most 4 KiB).
        #[arg(long)]
        error: Option<String>,
    },
    /// Bring a failed or cancelled job back to pending, its attempts at 0.
    Retry {
        /// Job id.
        id: String,
        #[command(flatten)]
        when: When,
    },
    /// Cancel a job: a pending one at once; a leased one's holder is told on its next
    /// renew, and the job ends cancelled when it lets go.
    Cancel {
        /// Job id.
        id: String,
        /// Why (at most 1 KiB), kept on the job.
        #[arg(long)]
        reason: Option<String>,
    },
}

pub async fn run_lifecycle(cmd: LifecycleCmd, client: &Client, json: bool) -> Result<(), CliError> {
    let job = match cmd {
        LifecycleCmd::Fail {
            id,
            owner,
            generation,
            error,
        } => {
            client
                .fail(&id, &owner, generation, error.as_deref())
                .await?
        }
        LifecycleCmd::Retry { id, when } => {
            let at = when.run_at_ms(client).await?;
            client.retry(&id, at).await?
        }
        LifecycleCmd::Cancel { id, reason } => client.cancel(&id, reason.as_deref()).await?,
    };
    show_job(&job, json)
}

#[derive(Debug, Args)]
pub struct QueueArgs {
    #[command(subcommand)]
    pub command: QueueCmd,
}

#[derive(Debug, Subcommand)]
pub enum QueueCmd {
    /// Retry a queue's failed jobs (its dead letters), oldest failure first.
    Redrive {
        /// The queue.
        queue: String,
        /// At most this many, 1–1000 (the store's 100 when absent).
        #[arg(long)]
        limit: Option<u32>,
    },
}

pub async fn run_queue(args: QueueArgs, opts: &ClientOpts) -> Result<(), CliError> {
    let client = opts.client()?;
    match args.command {
        QueueCmd::Redrive { queue, limit } => {
            let retried = client.redrive(&queue, limit).await?;
            if opts.output == Output::Json {
                println!("{}", serde_json::json!({ "retried": retried }));
            } else {
                println!("retried {retried} failed job(s) of {queue}");
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_a_whole_number_and_a_unit() {
        let ok = |t: &str| parse_duration(t).unwrap().as_millis();
        assert_eq!(
            [ok("1500ms"), ok("30s"), ok("5m"), ok("2h"), ok("0s")],
            [1_500, 30_000, 300_000, 7_200_000, 0]
        );
        for bad in [
            "",
            "30",
            "s",
            "1.5s",
            "-3s",
            "3 s",
            "3d",
            "3S",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }
}
