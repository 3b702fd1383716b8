//! The `leasehold` binary: parses the command line and runs it (see `cli/mod.rs`, which
//! also decides how an error is printed and which exit code it gets).

fn main() -> std::process::ExitCode {
    leasehold_node::cli::main()
}
