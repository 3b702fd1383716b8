//! The `leasehold` binary, built inside this crate so its tests find it through
//! `CARGO_BIN_EXE_leasehold-under-test` (cargo builds it before the tests run).
//!
//! Unlike `leasehold`, it can write its data dir through a journaled fault-injecting disk:
//! started with `LEASEHOLD_FAULT_JOURNAL=<file>` (what `ClusterOpts::fault_journals`
//! sets), `serve` journals every write, so a test that SIGKILLs it can then take back what
//! a power cut would (`leasehold_node::fsio::fault::undo_unsynced`).

fn main() -> std::process::ExitCode {
    match leasehold_node::fsio::fault::disk_from_env() {
        Ok(disk) => leasehold_cli::main_on(disk),
        Err(e) => {
            eprintln!(
                "error: opening the fault journal ({}): {e}",
                leasehold_node::fsio::fault::JOURNAL_ENV
            );
            std::process::ExitCode::FAILURE
        }
    }
}
