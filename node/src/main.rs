//! The `leasehold` binary: parses the command line and runs it (see `cli.rs`).

use clap::Parser;
use leasehold_node::cli::{self, Cli, Cmd};
use leasehold_node::cli_jobs;

fn main() -> anyhow::Result<()> {
    let args = Cli::parse();
    // Client commands print one line per error and nothing else on stderr: no logging.
    let client_cmd = matches!(args.command, Cmd::Job(_) | Cmd::Cluster(_));
    if !client_cmd {
        cli::init_tracing();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match args.command {
            Cmd::Serve(a) => cli::serve(a).await,
            Cmd::Dev(a) => cli::dev(a).await,
            Cmd::Bench(a) => leasehold_node::bench::run(a).await,
            Cmd::Job(a) => std::process::exit(cli_jobs::report(cli_jobs::run_job(a).await)),
            Cmd::Cluster(a) => std::process::exit(cli_jobs::report(cli_jobs::run_cluster(a).await)),
            Cmd::Worker(a) => {
                std::process::exit(cli_jobs::report(leasehold_node::worker::run(a).await))
            }
        }
    })
}
