//! The node's clocks, behind a trait so tests can run a node whose wall clock is offset
//! and whose monotonic clock runs fast or slow (`--clock-offset-ms`, `--clock-rate`).
//!
//! Cluster time (docs/design.md) uses the wall clock exactly once, for the first stamp of a new
//! cluster; after that only monotonic elapsed time matters. A skewed node therefore tests
//! that claim directly: an offset must change nothing, a rate error only what it must.

use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Milliseconds since the Unix epoch on this node's wall clock.
    fn wall_ms(&self) -> u64;
    /// Monotonic milliseconds since an arbitrary origin; never goes backwards.
    fn mono_ms(&self) -> u64;
}

pub type SharedClock = Arc<dyn Clock>;

/// The real clocks, optionally skewed for tests.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
    offset_ms: i64,
    rate: f64,
}

impl SystemClock {
    pub fn new() -> Self {
        Self::skewed(0, 1.0)
    }

    /// `offset_ms` is added to the wall clock; the monotonic clock runs at `rate` × real.
    pub fn skewed(offset_ms: i64, rate: f64) -> Self {
        assert!(
            rate > 0.0 && rate.is_finite(),
            "clock rate must be positive"
        );
        SystemClock {
            origin: Instant::now(),
            offset_ms,
            rate,
        }
    }

    pub fn shared(self) -> SharedClock {
        Arc::new(self)
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn wall_ms(&self) -> u64 {
        let real = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        real.saturating_add(self.offset_ms).max(0) as u64
    }

    fn mono_ms(&self) -> u64 {
        let elapsed = self.origin.elapsed().as_secs_f64() * 1000.0;
        (elapsed * self.rate) as u64
    }
}

/// A monotonic clock that moves only when told to ([`HeldClock::advance`]), over the
/// real wall clock: tests drive time-based decisions (the election timer, cluster time)
/// with it instead of waiting.
#[derive(Debug, Default)]
pub struct HeldClock {
    mono_ms: std::sync::atomic::AtomicU64,
}

impl HeldClock {
    /// A held clock at monotonic `mono_ms`.
    pub fn at(mono_ms: u64) -> Self {
        HeldClock {
            mono_ms: mono_ms.into(),
        }
    }

    /// Moves the monotonic clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.mono_ms
            .fetch_add(ms, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Clock for HeldClock {
    fn wall_ms(&self) -> u64 {
        SystemClock::new().wall_ms()
    }

    fn mono_ms(&self) -> u64 {
        self.mono_ms.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_moves_wall_clock_only() {
        let plain = SystemClock::new();
        let ahead = SystemClock::skewed(5_000, 1.0);
        let d = ahead.wall_ms() as i64 - plain.wall_ms() as i64;
        assert!((4_900..=5_100).contains(&d), "offset {d}");
        assert!(ahead.mono_ms() < 1_000);
    }

    #[test]
    fn a_held_clock_moves_only_when_told() {
        let c = HeldClock::at(1_000);
        assert_eq!(c.mono_ms(), 1_000);
        c.advance(250);
        assert_eq!(c.mono_ms(), 1_250);
    }

    #[test]
    fn monotonic_never_goes_back() {
        let c = SystemClock::skewed(0, 1.5);
        let mut prev = c.mono_ms();
        for _ in 0..1000 {
            let now = c.mono_ms();
            assert!(now >= prev);
            prev = now;
        }
    }
}
