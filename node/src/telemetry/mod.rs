//! What a node tells its operator: Prometheus metrics and rate-limited log lines.
//!
//! - [`metrics`]: the counters, gauges and histograms of `GET /metrics` and their text
//!   exposition, through `prometheus-client`.
//! - [`log_throttle`]: at most one log line per interval for a repeated event.
//!
//! A lower layer: anyone may import it. It imports only `time` and `types`: the state it
//! renders is handed in by its callers.

pub mod log_throttle;
pub mod metrics;
