//! `leasehold queue …`: calls on a whole queue rather than one job. So far `redrive`
//! (docs/api.md "Job lifecycle", version 1.1): a queue's failed jobs are its dead
//! letters (`leasehold job list --queue Q --state failed`), and a redrive retries them.

use clap::{Args, Subcommand};
use leasehold_statemachine::limits::REDRIVE_LIMIT_MAX;

use crate::common::{CliError, ClientOpts, Output};
use crate::show::show_redrive;

#[derive(Debug, Args)]
pub struct QueueArgs {
    #[command(subcommand)]
    pub command: QueueCmd,
}

#[derive(Debug, Subcommand)]
pub enum QueueCmd {
    /// Retry up to --limit failed jobs of QUEUE, oldest failure first, each back to
    /// pending with attempts 0 (POST /v1/queues/{queue}/redrive; admin or operator).
    /// Prints how many.
    Redrive {
        /// The queue.
        queue: String,
        /// How many jobs at most: 1–1000 (the store's default: 100). Repeat the command
        /// until it retries none to empty a longer list.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=REDRIVE_LIMIT_MAX as i64))]
        limit: Option<u32>,
    },
}

pub async fn run_queue(args: QueueArgs, opts: &ClientOpts) -> Result<(), CliError> {
    let client = opts.client()?;
    let json = opts.output == Output::Json;
    match args.command {
        QueueCmd::Redrive { queue, limit } => {
            show_redrive(client.redrive(&queue, limit).await?, json)
        }
    }
}
