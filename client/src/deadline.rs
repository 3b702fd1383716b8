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
//!
//! The *cleanup window* ([`cleanup_window`]) sits before the deadline: when no renew has
//! succeeded by `deadline − window`, the work is told to stop, so it can clean up while
//! the lease still holds. It moves nothing: the deadline stays the hard stop.

use std::time::Duration;

/// The default cleanup window's cap. A cleanup (abort a request, flush, roll back) takes
/// well under this; a longer window would only stop work earlier on a renew that is
/// merely late, for TTLs long enough that a tenth of them exceeds it (over 50 s).
pub const CLEANUP_WINDOW_DEFAULT_MAX: Duration = Duration::from_secs(5);
/// The cleanup window is at most TTL / this. With the default schedule the first renew
/// is due at TTL/3: a window over TTL/3 would tell the work to stop while that renew's
/// round still has time to succeed.
pub const CLEANUP_WINDOW_TTL_DIVISOR_MIN: u32 = 3;

/// How long before the local deadline the work of a lease of `ttl` is told to stop when
/// no renew succeeded: `configured`, or by default `min(ttl / 10, 5 s)`; never more than
/// `ttl / 3` ([`CLEANUP_WINDOW_TTL_DIVISOR_MIN`]). A tenth of the TTL is about a third of
/// a renew interval: the renews have then been failing for most of two intervals.
pub fn cleanup_window(ttl: Duration, configured: Option<Duration>) -> Duration {
    let window = configured.unwrap_or((ttl / 10).min(CLEANUP_WINDOW_DEFAULT_MAX));
    window.min(ttl / CLEANUP_WINDOW_TTL_DIVISOR_MIN)
}

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
    fn the_default_cleanup_window_is_a_tenth_of_the_ttl_up_to_its_cap() {
        assert_eq!(cleanup_window(ms(600), None), ms(60));
        assert_eq!(cleanup_window(ms(10_000), None), ms(1_000));
        // At the cap and one past it.
        assert_eq!(cleanup_window(ms(50_000), None), CLEANUP_WINDOW_DEFAULT_MAX);
        assert_eq!(cleanup_window(ms(50_010), None), CLEANUP_WINDOW_DEFAULT_MAX);
        assert_eq!(cleanup_window(ms(49_990), None), ms(4_999));
        assert_eq!(cleanup_window(Duration::ZERO, None), Duration::ZERO);
    }

    #[test]
    fn a_configured_cleanup_window_is_capped_at_a_third_of_the_ttl() {
        assert_eq!(cleanup_window(ms(3_000), Some(ms(200))), ms(200));
        assert_eq!(
            cleanup_window(ms(3_000), Some(Duration::ZERO)),
            Duration::ZERO
        );
        // At the limit and one past it.
        assert_eq!(cleanup_window(ms(3_000), Some(ms(1_000))), ms(1_000));
        assert_eq!(cleanup_window(ms(3_000), Some(ms(1_001))), ms(1_000));
        assert_eq!(cleanup_window(ms(600), Some(ms(60_000))), ms(200));
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
