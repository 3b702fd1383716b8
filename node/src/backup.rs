//! Backups: `leasehold snapshot save FILE` (through any node) and `leasehold snapshot
//! restore FILE --data-dir D` (seed a new cluster). (Being built.)

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    pub command: SnapshotCmd,
}

#[derive(Debug, Subcommand)]
pub enum SnapshotCmd {
    /// Not yet.
    Save,
}

pub async fn run(_args: SnapshotArgs) -> Result<(), crate::cli_jobs::CliError> {
    Err(crate::cli_jobs::CliError::usage("not yet"))
}
