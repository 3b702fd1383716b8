//! Black-box chaos tests of Leasehold: real `leasehold serve` processes behind fault
//! proxies, workers recording every operation, and a checker of the invariants of
//! `docs/design.md` over the recorded history.
//!
//! - [`history`]: the recorded operations and the run's final observations;
//! - [`checker`]: the invariants, checked over a [`history::RunRecord`];
//! - [`proxy`]: a TCP fault proxy per directed link (blackhole, delay, drop);

pub mod checker;
pub mod fixture;
pub mod history;
pub mod proxy;
pub mod scenario;
pub mod workload;
