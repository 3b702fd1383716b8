//! [`Config`]: the settings every replica must share (failover grace, the idempotency
//! window and table size), part of the snapshot. Imports only `limits`, so the
//! idempotency table below the machine can read it.

use serde::{Deserialize, Serialize};

use crate::limits;

/// Settings every replica must share; they are part of the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Longest failover grace added to live leases on a term change.
    pub grace_ms_max: u64,
    pub idempotency_window_ms: u64,
    pub idempotency_keys_max: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            grace_ms_max: limits::GRACE_MS_MAX_DEFAULT,
            idempotency_window_ms: limits::IDEMPOTENCY_WINDOW_MS,
            idempotency_keys_max: limits::IDEMPOTENCY_KEYS_MAX,
        }
    }
}
