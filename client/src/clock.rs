//! The local clock lease deadlines are kept on, chosen so that time a host spends
//! suspended counts as time passed.
//!
//! `CLOCK_MONOTONIC` (what `std`/`tokio` `Instant` read) stands still while a Linux host
//! is suspended, and — depending on the hypervisor — while a VM is paused. A lease's
//! deadline on that clock would still look ahead after a resume 60 s later, although the
//! store (whose nodes kept running) may long have given the job to someone else.
//!
//! - Linux: [`BootClock`] reads `CLOCK_BOOTTIME`, which is `CLOCK_MONOTONIC` plus the time
//!   spent suspended. A pause that the guest kernel does not see as a suspend (some
//!   hypervisors stop the guest's clocks with it) stays invisible to every guest clock:
//!   the deadline's drift and margin cannot cover that, only the fencing token can.
//! - Other platforms: [`BootClock`] falls back to the monotonic clock (`std::time::Instant`),
//!   so suspended time is NOT counted there. (On macOS `mach_continuous_time` would be the
//!   equivalent of `CLOCK_BOOTTIME`; it is not used yet.)
//!
//! On Linux, [`BootClock`]'s instants ([`LocalInstant::since_origin`]) are
//! `CLOCK_BOOTTIME` since boot, the same in every process of the host: a deadline can be
//! handed to another process as nanoseconds and compared there (how `worker run`'s
//! watchdog holds a command's kill deadline).
//!
//! Timers: a tokio sleep runs on the monotonic clock, so a task sleeping until a deadline
//! would wake late by the suspended time. [`Clock::sleep_until`] therefore sleeps in steps
//! of at most [`CLOCK_STEP`] and re-reads the clock after each.

use std::fmt;
use std::ops::{Add, Sub};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The longest a [`Clock::sleep_until`] sleeps on the monotonic clock before it reads its
/// own clock again: after a resume, a deadline that passed during the suspend is noticed
/// within this. 100 ms is the default deadline margin, the delay already budgeted for
/// waking a task; one timer wake-up per 100 ms per kept-alive lease costs nothing.
pub const CLOCK_STEP: Duration = Duration::from_millis(100);

/// A clock that never goes back: time since some origin fixed for the process's life.
pub trait LocalClock: Send + Sync + fmt::Debug + 'static {
    fn now(&self) -> Duration;
}

/// The production clock: `CLOCK_BOOTTIME` on Linux, the monotonic clock elsewhere (see
/// the module doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct BootClock;

impl LocalClock for BootClock {
    fn now(&self) -> Duration {
        boot_now()
    }
}

#[cfg(target_os = "linux")]
fn boot_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    // CLOCK_BOOTTIME exists since Linux 2.6.39; failing here means no usable clock at all.
    assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(not(target_os = "linux"))]
fn boot_now() -> Duration {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN.get_or_init(std::time::Instant::now).elapsed()
}

/// [`BootClock`] plus a jump a test adds with [`JumpClock::advance`]: simulates a suspend
/// (the local clock leaps while tokio's timers, on the monotonic clock, do not).
#[derive(Debug, Default)]
pub struct JumpClock {
    jumped_nanos: AtomicU64,
}

impl JumpClock {
    pub fn new() -> Arc<JumpClock> {
        Arc::new(JumpClock::default())
    }

    /// Moves this clock `by` forward, at once.
    pub fn advance(&self, by: Duration) {
        let nanos = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        self.jumped_nanos.fetch_add(nanos, Ordering::SeqCst);
    }
}

impl LocalClock for JumpClock {
    fn now(&self) -> Duration {
        boot_now() + Duration::from_nanos(self.jumped_nanos.load(Ordering::SeqCst))
    }
}

impl LocalClock for Arc<JumpClock> {
    fn now(&self) -> Duration {
        self.as_ref().now()
    }
}

/// A point in time on a client's [`Clock`]. Only comparable with instants of the same
/// clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LocalInstant(Duration);

impl LocalInstant {
    /// The instant `since_origin` after the clock's origin.
    pub fn from_origin(since_origin: Duration) -> LocalInstant {
        LocalInstant(since_origin)
    }

    pub fn since_origin(self) -> Duration {
        self.0
    }

    /// `self − earlier`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: LocalInstant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    pub fn checked_sub(self, d: Duration) -> Option<LocalInstant> {
        self.0.checked_sub(d).map(LocalInstant)
    }
}

impl Add<Duration> for LocalInstant {
    type Output = LocalInstant;
    fn add(self, d: Duration) -> LocalInstant {
        LocalInstant(self.0 + d)
    }
}

/// Saturating, like `Instant − Instant` in `std`.
impl Sub for LocalInstant {
    type Output = Duration;
    fn sub(self, earlier: LocalInstant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

/// The clock a client keeps its deadlines on (cheap to clone; clones share the clock).
#[derive(Clone)]
pub struct Clock(Arc<dyn LocalClock>);

impl Clock {
    pub fn new(clock: impl LocalClock) -> Clock {
        Clock(Arc::new(clock))
    }

    /// [`BootClock`], the default.
    pub fn boot() -> Clock {
        Clock::new(BootClock)
    }

    pub fn now(&self) -> LocalInstant {
        LocalInstant(self.0.now())
    }

    /// Sleeps until this clock reads `at` or later: tokio sleeps of at most
    /// [`CLOCK_STEP`], the clock re-read after each (why: the module doc).
    pub async fn sleep_until(&self, at: LocalInstant) {
        loop {
            let left = at.saturating_duration_since(self.now());
            if left.is_zero() {
                return;
            }
            tokio::time::sleep(left.min(CLOCK_STEP)).await;
        }
    }

    /// The tokio (monotonic) instant that `at` is at, as of now: for comparing with
    /// monotonic timestamps taken at about the same time. Not stable across a suspend.
    pub fn to_monotonic(&self, at: LocalInstant) -> tokio::time::Instant {
        let (mono, now) = (tokio::time::Instant::now(), self.now());
        if at >= now {
            mono + (at - now)
        } else {
            // An instant before the monotonic clock's own start is clamped to it.
            mono.checked_sub(now - at).unwrap_or(mono)
        }
    }
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::boot()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_clock_never_goes_back() {
        let c = Clock::boot();
        let mut last = c.now();
        for _ in 0..1_000 {
            let now = c.now();
            assert!(now >= last);
            last = now;
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_boot_clock_is_at_least_the_monotonic_clock() {
        // CLOCK_BOOTTIME = CLOCK_MONOTONIC + suspended time, and both start at boot.
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid, writable timespec.
        assert_eq!(
            unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) },
            0
        );
        let mono = Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32);
        assert!(BootClock.now() >= mono);
    }

    #[test]
    fn a_jump_moves_the_clock_at_once() {
        let j = JumpClock::new();
        let c = Clock::new(j.clone());
        let before = c.now();
        j.advance(Duration::from_secs(60));
        assert!(c.now() - before >= Duration::from_secs(60));
    }

    #[tokio::test]
    async fn sleep_until_wakes_within_a_step_of_a_jump() {
        let j = JumpClock::new();
        let c = Clock::new(j.clone());
        let at = c.now() + Duration::from_secs(3_600);
        let sleeper = tokio::spawn({
            let c = c.clone();
            async move { c.sleep_until(at).await }
        });
        j.advance(Duration::from_secs(3_600));
        tokio::time::timeout(CLOCK_STEP * 10, sleeper)
            .await
            .expect("woke within a few steps of the jump")
            .unwrap();
    }

    #[tokio::test]
    async fn to_monotonic_keeps_the_distance_from_now() {
        let c = Clock::boot();
        let at = c.now() + Duration::from_secs(5);
        let mono = c.to_monotonic(at);
        let left = mono - tokio::time::Instant::now();
        assert!(left <= Duration::from_secs(5) && left > Duration::from_millis(4_900));
    }
}
