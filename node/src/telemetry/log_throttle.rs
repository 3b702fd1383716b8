//! A rate limit for log lines that anyone can trigger (a refused peer RPC costs the sender
//! one request and, unthrottled, cost this node one WARN line: ~2,700 lines/s per
//! connection, a disk filler). At most one line per key per interval; the lines held back
//! meanwhile are counted and reported with the next one. The counting that matters to an
//! operator is in `/metrics`, which sees every refusal.
//!
//! Takes the time as an argument (no clock of its own), so it is tested without sleeping.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a refused peer RPC of one reason is logged at most.
pub const PEER_REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct Slot {
    last: Option<Instant>,
    suppressed: u64,
}

/// One slot per key (a fixed, small set: refusal reasons).
#[derive(Debug)]
pub struct LogThrottle {
    interval: Duration,
    slots: Mutex<HashMap<&'static str, Slot>>,
}

impl LogThrottle {
    pub fn new(interval: Duration) -> Self {
        LogThrottle {
            interval,
            slots: Mutex::default(),
        }
    }

    /// `Some(n)`: log now, and say that `n` lines of this key were held back since the
    /// last one; `None`: hold this one back (it is counted).
    pub fn admit(&self, key: &'static str, now: Instant) -> Option<u64> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let slot = slots.entry(key).or_default();
        match slot.last {
            Some(last) if now.saturating_duration_since(last) < self.interval => {
                slot.suppressed += 1;
                None
            }
            _ => {
                slot.last = Some(now);
                Some(std::mem::take(&mut slot.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_key_per_interval_with_the_held_back_count() {
        let t = LogThrottle::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert_eq!(t.admit("bad_mac", at(0)), Some(0));
        for ms in 1..=2_700 {
            assert_eq!(t.admit("bad_mac", at(ms)), None);
        }
        // Another key has its own slot.
        assert_eq!(t.admit("expired", at(5)), Some(0));
        assert_eq!(t.admit("bad_mac", at(9_999)), None);
        assert_eq!(t.admit("bad_mac", at(10_000)), Some(2_701));
        assert_eq!(t.admit("bad_mac", at(10_001)), None);
        assert_eq!(t.admit("bad_mac", at(25_000)), Some(1));
        assert_eq!(t.admit("expired", at(25_000)), Some(0));
    }

    #[test]
    fn an_earlier_instant_than_the_last_line_is_held_back_not_a_panic() {
        let t = LogThrottle::new(Duration::from_secs(1));
        let t0 = Instant::now() + Duration::from_secs(5);
        assert_eq!(t.admit("k", t0), Some(0));
        assert_eq!(t.admit("k", t0 - Duration::from_secs(3)), None);
    }
}
