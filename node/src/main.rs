//! The `leasehold` binary: parses the command line and runs it (see `cli/mod.rs`).

fn main() -> anyhow::Result<()> {
    leasehold_node::cli::main()
}
