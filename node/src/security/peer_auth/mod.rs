//! Peer RPC authentication: every `/raft/…` request carries, in one header, an
//! HMAC-SHA256 of the shared peer secret over the request's method and path and every
//! field of the header: the sender's wall time, its id, the receiver's id, its cluster id,
//! a nonce of the sender's run, the request's number in that run, and the body's length
//! and SHA-256:
//!
//! ```text
//! x-leasehold-peer-auth: v2 t=<unix ms> from=<id> to=<id> cluster=<32 hex|-> boot=<16 hex>
//!     seq=<n> len=<bytes> sha256=<64 hex> mac=<64 hex>            (one line)
//! ```
//!
//! **The header is checked before a byte of body is read** ([`check_head`], then the
//! node's own checks in [`PeerGuard::check_head`]): MAC (constant time), time window,
//! `to=` is this node, `len=` is the request's `Content-Length` (required: no chunked
//! bodies), not stamped before this node started, not a replay. A request that fails
//! costs one HMAC: it is answered 401 without reading its body and never holds a Raft
//! in-flight slot (`http/raft_rpc.rs` takes one only after this check). Then the body is
//! read within a deadline and must have the header's digest ([`check_body`]), then the
//! cluster id ([`check_cluster`]). Without a secret (`serve` without
//! `--peer-secret-file`) the header is still sent, minus `mac=`, so a node pointed at
//! another cluster is still refused; that is a guard against mistakes, not security.
//!
//! **Version.** v2 replaced v1 (MAC over the body, so checked only after buffering it)
//! without a transition: a v1 header is refused as malformed, naming the version. Every
//! node of a cluster must be upgraded together.
//!
//! **Why replays are refused, and how.** Replays are *not* harmless: Raft is safe on a
//! network that duplicates and delays messages, but every accepted AppendEntries from the
//! current leader restarts a follower's election timer, so a captured heartbeat replayed
//! every 40 ms after the leader died kept followers from electing for 28 s (issue 17).
//! So each signed request is accepted at most once per receiver:
//!
//! * *Same receiver run.* A sender numbers its requests to each receiver (`seq=` 1, 2, …)
//!   within a run of its process (`boot=`, random per start); both are under the MAC, as
//!   is `to=`, so a request cannot be moved to another receiver. The receiver keeps per
//!   sender and run a sliding-window bitmap (`peer_replay.rs`, [`REPLAY_WINDOW`] wide,
//!   as IPsec/WireGuard do): concurrent requests may arrive out of order, a number seen
//!   before or too far below the newest is refused. The number is claimed when the
//!   header passes, before the body is read, so two copies racing cannot both pass.
//! * *Restarted sender.* Its new run has a new `boot=` and a window of its own; the old
//!   run's window stays ([`REPLAY_RUNS_PER_SENDER`] runs per sender are kept, least
//!   recently used evicted), so the old run's captured requests stay refused.
//! * *Restarted receiver.* The table is in memory and starts empty, so a request captured
//!   before the restart could pass it once. Such a request was stamped before the receiver
//!   started; the receiver refuses anything stamped more than [`PEER_RESTART_SLACK_MS`]
//!   before its start, and anything older than [`PEER_AUTH_WINDOW_MS`] anyway. What is
//!   left is a request stamped in the last [`PEER_RESTART_SLACK_MS`] before the start
//!   (while the receiver was stopping or down, so there are few such) replayed *once*
//!   each: a delayed duplicate, which Raft tolerates, and a bounded delay at worst, not a
//!   replay loop. The slack is there for peers' clocks that disagree by a few seconds.
//!
//! The timestamp is the node's wall clock, so peers' clocks must agree within the window
//! (NTP gives milliseconds). Cluster time itself still uses no wall clock (docs/design.md).
//!
//! # Layout
//! - `secret.rs`: the shared secret and its file;
//! - `header.rs`: the header — signing, checking it before the body, the body and the
//!   cluster id against it;
//! - `guard.rs`: [`PeerGuard`], a node's checks and counters at run time.
//!
//! This file declares them and re-exports what the rest of the crate uses.

mod guard;
mod header;
mod secret;
#[cfg(test)]
mod tests;

pub use crate::security::cluster_id::{BadClusterId, ClusterId, CLUSTER_ID_BYTES};
pub use crate::security::hex::{hex_decode, hex_encode};
#[cfg(doc)]
use crate::security::peer_replay::{REPLAY_RUNS_PER_SENDER, REPLAY_WINDOW};
pub use guard::*;
pub use header::*;
pub use secret::*;
