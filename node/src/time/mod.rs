//! Time: the clocks a node reads and the cluster time its leader stamps.
//!
//! - [`clock`]: wall and monotonic clocks behind a trait (skewable, or held, in tests).
//! - [`timekeeper`]: cluster time — the leader's stamps, never going backwards.
//!
//! A lower layer: anyone may import it. It imports only `types`.

pub mod clock;
pub mod timekeeper;
