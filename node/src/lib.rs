//! The Leasehold server: a replicated, durable lease table behind an HTTP/JSON API.
//!
//! # Layout
//! - [`types`]: the openraft type configuration.
//! - [`clock`]: wall and monotonic clocks behind a trait (skewable in tests).
//! - [`store`]: the durable log store (raft-log) and the state-machine store.

pub mod clock;
pub mod store;
pub mod types;
