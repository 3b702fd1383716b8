//! The `leasehold` binary, built inside this crate so its tests find it through
//! `CARGO_BIN_EXE_leasehold-under-test` (cargo builds it before the tests run).

fn main() -> std::process::ExitCode {
    leasehold_node::cli::main()
}
