//! The `leasehold` binary: parses the command line and runs it (see `cli.rs`).

use clap::Parser;
use leasehold_node::cli::{self, Cli, Cmd};

fn main() -> anyhow::Result<()> {
    let args = Cli::parse();
    cli::init_tracing();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match args.command {
            Cmd::Serve(a) => cli::serve(a).await,
            Cmd::Dev(a) => cli::dev(a).await,
            Cmd::Bench(a) => leasehold_node::bench::run(a).await,
        }
    })
}
