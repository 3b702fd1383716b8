//! The worker's own lease deadline, on the client's local clock (docs/design.md,
//! "Client-side safety"; `CLOCK_BOOTTIME` on Linux, see `clock`):
//!
//! ```text
//! deadline = sent + ttl × (1 − drift) − margin
//! ```
//!
//! `sent` is the instant the claim or renew was FIRST sent — a retry under the same
//! `Idempotency-Key` keeps it, because the store may have applied the first attempt. The
//! store stamps the entry no earlier than `sent` (cluster time never runs ahead of real
//! time), so its expiry `stamp + ttl` is never before `sent + ttl`. `drift` covers the
//! store's clock running faster than ours; `margin` covers the time between the deadline
//! firing and the work actually stopping (waking the task, a write already in flight).

use std::time::Duration;

use crate::clock::LocalInstant;

/// How conservative the local deadline is. Defaults: drift 1 %, margin 100 ms.
///
/// 1 % is far above real quartz drift (tens of ppm) and covers a VM clock or a node run
/// with a skewed rate in tests; 100 ms covers scheduling delay on a loaded host. A TTL
/// close to the margin leaves little or no time: with `ttl_ms = 100` (docs/api.md's minimum)
/// the default deadline is the send instant itself — lower the margin for tiny TTLs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeadlinePolicy {
    /// Fraction of the TTL assumed lost to clock-rate difference; in `[0, 1)`.
    pub drift: f64,
    /// Time kept in reserve for stopping the work.
    pub margin: Duration,
}

impl Default for DeadlinePolicy {
    fn default() -> Self {
        DeadlinePolicy {
            drift: 0.01,
            margin: Duration::from_millis(100),
        }
    }
}

/// A [`DeadlinePolicy`] whose `drift` is not a fraction in `[0, 1)` (NaN included).
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("drift must be in [0, 1) (got {drift})")]
pub struct DriftOutOfRange {
    pub drift: f64,
}

impl DeadlinePolicy {
    /// Checks `drift` is a fraction in `[0, 1)`.
    pub fn validate(&self) -> Result<(), DriftOutOfRange> {
        if !(0.0..1.0).contains(&self.drift) {
            return Err(DriftOutOfRange { drift: self.drift });
        }
        Ok(())
    }

    /// `sent + ttl × (1 − drift) − margin`, never before `sent`.
    pub fn deadline(&self, sent: LocalInstant, ttl: Duration) -> LocalInstant {
        sent + self.usable(ttl)
    }

    /// `ttl × (1 − drift) − margin`, at least zero: how long after the send the lease may
    /// be used. Rounded down to whole microseconds (never up: up would be unsafe).
    pub fn usable(&self, ttl: Duration) -> Duration {
        let micros = (ttl.as_micros() as f64 * (1.0 - self.drift)).floor() as u64;
        Duration::from_micros(micros).saturating_sub(self.margin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn default_deadline_of_a_ten_second_lease() {
        let p = DeadlinePolicy::default();
        let sent = LocalInstant::from_origin(Duration::from_secs(1_000));
        // 10 s × 0.99 − 100 ms = 9.8 s.
        assert_eq!(p.deadline(sent, ms(10_000)), sent + ms(9_800));
    }

    #[test]
    fn deadline_is_never_after_the_earliest_store_expiry() {
        // The store's expiry is at least sent + ttl; the deadline must come before it for
        // every TTL docs/api.md allows, and by at least the margin.
        let p = DeadlinePolicy::default();
        let sent = LocalInstant::from_origin(Duration::from_secs(1_000));
        for ttl_ms in [100, 101, 250, 1_000, 2_000, 60_000, 3_600_000] {
            let ttl = ms(ttl_ms);
            let d = p.deadline(sent, ttl);
            assert!(d + p.margin <= sent + ttl || d == sent, "ttl {ttl_ms}");
            assert!(d <= sent + ttl, "ttl {ttl_ms}");
        }
    }

    #[test]
    fn a_ttl_within_the_margin_gives_no_time_at_all() {
        let p = DeadlinePolicy::default();
        let sent = LocalInstant::from_origin(Duration::from_secs(1_000));
        assert_eq!(p.deadline(sent, ms(100)), sent);
        assert_eq!(p.deadline(sent, Duration::ZERO), sent);
    }

    #[test]
    fn drift_and_margin_are_configurable() {
        let p = DeadlinePolicy {
            drift: 0.1,
            margin: ms(0),
        };
        assert_eq!(p.usable(ms(1_000)), ms(900));
        let p = DeadlinePolicy {
            drift: 0.0,
            margin: ms(50),
        };
        assert_eq!(p.usable(ms(1_000)), ms(950));
    }

    #[test]
    fn drift_must_be_a_fraction() {
        let bad = |drift| DeadlinePolicy {
            drift,
            ..DeadlinePolicy::default()
        };
        assert!(bad(0.0).validate().is_ok());
        assert!(bad(0.999).validate().is_ok());
        assert!(bad(1.0).validate().is_err());
        assert!(bad(-0.01).validate().is_err());
        assert!(bad(f64::NAN).validate().is_err());
    }

    #[test]
    fn usable_time_rounds_down() {
        let p = DeadlinePolicy {
            drift: 1.0 / 3.0,
            margin: Duration::ZERO,
        };
        // 1 ms × 2/3 = 666.66… µs → 666 µs, not 667.
        assert_eq!(p.usable(ms(1)), Duration::from_micros(666));
    }
}
