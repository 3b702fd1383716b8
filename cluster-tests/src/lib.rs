//! Black-box chaos tests of Leasehold: real `leasehold serve` processes behind fault
//! proxies, workers recording every operation, and a checker of the invariants of
//! `docs/design.md` over the recorded history.
//!
//! - [`history`]: the recorded operations and the run's final observations;
//! - [`checker`]: the invariants, checked over a [`history::RunRecord`];
//! - [`fixture`]: the cluster of real processes ([`leasehold_proc_cluster`]'s, shared
//!   with `leasehold bench failover`) and the checker's end-of-run reads of it;
//! - [`holders`]: lease holders that must keep their leases through a scenario;
//! - [`nodes`]: what a run needs of its cluster ([`nodes::Nodes`]), whatever runs it;
//! - [`docker`]: the container cluster — nodes in Docker on the test's own network,
//!   faults through the engine (kill, pause, network disconnect, restart);
//! - [`scenario`]: one seeded chaos run on either cluster, ending in the verdict;
//! - [`workload`]: the workers (in-process tasks or processes) and their recording;
//! - [`nemesis`]: the mixed random fault schedule of the chaos suite and the soak;
//! - [`postgres`]: a throw-away PostgreSQL server for the fence tests;
//! - [`power`]: power loss on process nodes (SIGKILL, then their unsynced writes undone);
//! - [`proxy`]: a TCP fault proxy per directed link (blackhole, delay, drop), from
//!   [`leasehold_proc_cluster`];

pub mod checker;
pub mod docker;
pub mod fixture;
pub mod history;
pub mod holders;
pub mod nemesis;
pub mod nodes;
pub mod postgres;
pub mod power;
pub mod scenario;
pub mod workload;

pub use leasehold_proc_cluster::proxy;
