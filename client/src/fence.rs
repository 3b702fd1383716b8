//! [`FenceGate`]: what the destination of a worker's external writes embeds so that a
//! worker that lost its lease cannot overwrite the work of the one that has it
//! (docs/design.md invariant 4; Kleppmann, "How to do distributed locking", fencing tokens).
//!
//! Per resource the gate keeps the highest token it has accepted and refuses lower ones.
//! An equal token is accepted: it is the same holder writing again. Before that it
//! dedups on the write's idempotency key, within a bounded window and a bounded count,
//! so a retried write is applied once and its retry answered "duplicate".
//!
//! The check and the write must be one atomic step — otherwise A (token 7) could pass
//! the check, B (token 8) pass and write, and A write last. So [`FenceGate::admit`] runs
//! the destination's write *inside* the gate, under the lock of the resource's shard.
//! That write must therefore be synchronous and short; a destination whose writes are
//! async must serialize per resource itself and use [`FenceGate::admit`] with a closure
//! that only records.
//!
//! The high-water marks are never forgotten: forgetting one would let a stale token
//! through. Their number is bounded instead ([`FenceConfig::resources_max`]); past it,
//! writes to new resources are refused ([`Admit::Full`]). A destination that restarts
//! must persist them with its data — this gate lives in memory.
//!
//! The gate is in `gate`; this file declares and re-exports, so the destinations built
//! on it (`http`, `postgres`) import `gate`, never their parent (issue 45 item 7).

mod gate;
#[cfg(feature = "fence-http")]
pub mod http;
/// The same rule kept by PostgreSQL itself, in the write's own transaction.
#[cfg(feature = "fence-postgres")]
pub mod postgres;

pub use gate::{Admit, FenceConfig, FenceGate};
