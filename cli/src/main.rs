//! The `leasehold` binary: parses the command line and runs it (see `lib.rs`, which
//! also decides how an error is printed and which exit code it gets).

fn main() -> std::process::ExitCode {
    leasehold_cli::main()
}
