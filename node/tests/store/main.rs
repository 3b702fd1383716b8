//! The storage layer and the decoders, without a server: openraft's storage conformance
//! suite and what it cannot see over `LogStore` + `StateMachineStore` (`storage_suite`),
//! and the fuzz targets' committed corpus plus seeded mutations on the stable toolchain
//! (`fuzz_replay`).
//!
//! A binary of its own, apart from the cluster tests (issue 18 item 6): the fuzz replay
//! keeps a core busy for seconds per target by design (its mutation phase is bounded in
//! wall time), which would steal time from tests that bound elections and timeouts, and
//! they in turn would cut its mutation count. Neither module starts a server or installs
//! a tracing subscriber.
//!
//! May import: `leasehold_node`, `leasehold_statemachine`, dev dependencies. Not `common`
//! (no cluster here).

mod fuzz_replay;
mod power_loss;
mod power_loss_files;
mod storage_suite;
mod wal_damage;
