//! [`FaultDisk`]: the test disk. It does every operation for real, on real files, and
//! first writes down how to undo it: the pre-image of each byte a write or `set_len`
//! changes since the file's last fsync (and its old length), and each directory entry
//! (create, rename, unlink, mkdir) since its directory's last fsync. Then, seeded:
//!
//! - [`FaultDisk::power_loss`] undoes all of that — what a power cut loses — optionally
//!   tearing the most recent write (a random prefix of it stays), and kills the disk: every
//!   later operation through it fails, so the stores' handles can be dropped (their `Drop`
//!   flushes) without touching the files. The test then reopens the directory with
//!   [`Disk::Real`](crate::fsio::disk::Disk::Real): recovery runs on the real code path.
//! - [`Plan::crash_at`]: the power goes at the Nth operation, which is not done.
//! - [`Plan::fail_at`]: the Nth operation (or the Nth of a kind, or the first on a path)
//!   fails with an errno (EIO, ENOSPC) and is not done; later ones go ahead.
//! - [`Plan::short_writes`]: writes store a random prefix of their buffer and say so.
//! - [`FaultDisk::hold_syncs`]: fsyncs of some files block until the returned guard is
//!   dropped — a stalled device, for tests of what goes on meanwhile.
//!
//! Every operation is counted and kept in a trace, so a test can first run a workload on a
//! fault-free disk to learn how many operations it does, then crash it at each of them.
//!
//! A process can be powered off too ([`FaultDisk::journaled`], selected by
//! [`disk_from_env`]): the disk then also appends each undo step to a journal file outside
//! the data dir — a file's pre-image before the change, "synced" after an fsync returns, a
//! directory entry after it changed — so after a SIGKILL, [`undo_unsynced`] rebuilds the
//! journal from that file and cuts the power on the data dir the process left: the chaos
//! suite's whole-cluster power loss. The page cache a SIGKILL leaves is what the journal
//! takes back.
//!
//! This file only declares and re-exports (issue 45 item 7: its children import one
//! another, never it), from the bottom up: [`plan`] (what a test asks for), [`undo`] (how
//! each change is undone), [`sink`] (the journal file, and [`arm_crash`]), [`state`] (the
//! undo state, changed only through its methods), [`faulty`] (the disk and its files),
//! [`journal`] (the journal file's replay, and [`disk_from_env`]).
//!
//! Only in test builds and with the `fault-injection` feature.

pub(crate) mod faulty;
mod journal;
mod plan;
mod sink;
mod state;
mod undo;

pub use faulty::{FaultDisk, FaultFile, SyncHold};
pub use journal::{disk_from_env, undo_unsynced, Undone, JOURNAL_ENV};
pub use plan::{FailAt, Op, OpKind, Plan};
pub use sink::arm_crash;
