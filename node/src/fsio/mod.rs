//! [`Disk`]: the one path by which the stores change files — the WAL's segments and
//! lock, the state machine's snapshot file, the data dir's identity files. Every create,
//! open for writing, positioned or sequential write, `set_len`/allocate, fsync/fdatasync,
//! rename, remove, mkdir and directory fsync goes through a `Disk` and the [`DiskFile`]s
//! it opens; reads stay plain `std` (they change nothing a crash could undo).
//!
//! The real implementation is `std` and nothing else: `Disk::Real` and `DiskFile::Real`
//! are matched on per call (no boxing, no allocation per write). Behind
//! `#[cfg(any(test, feature = "fault-injection"))]`, `Disk::Faulty` ([`fault`]) does the
//! same real operations on the same real files but keeps an undo journal, so a test can
//! cut the power at any operation, fail one with EIO/ENOSPC, or shorten writes, and then
//! reopen the directory with the real implementation (issue 19). The node's tests
//! enable `fault-injection` through a dev-dependency of the crate on itself, and cargo's
//! feature unification may then turn it on in other test builds of the workspace too;
//! the `leasehold` binary never constructs a faulty disk, so nothing selects it there.
//!
//! Directory entries are made durable here too: a file created, renamed or removed, or a
//! directory created, survives a power loss only once the directory holding that entry is
//! fsynced (Linux fsync(2): "fsync() on the file does not ensure that the entry in the
//! directory containing the file has also reached disk").
//!
//! This file only declares and re-exports (issue 45 item 7: its children import one
//! another, never it): `os` the `std` side (`Open`, `parent_of`, `fallocate`), `disk`
//! the [`Disk`] and [`DiskFile`] matched on per call, [`fault`] the fault-injecting disk.
//! Pure `std` (and `libc` for `fallocate`): imports nothing of the crate.

mod disk;
#[cfg(any(test, feature = "fault-injection"))]
pub mod fault;
mod os;

pub use disk::{Disk, DiskFile};
pub use os::{parent_of, Open};
