//! Cluster time: the stamp a leader puts on every entry it proposes (design.md, "Cluster
//! time").
//!
//! A stamp is `max(last applied stamp + monotonic time elapsed since it was applied,
//! last stamp this node issued)`. No wall clock takes part once a cluster has a stamped
//! entry, so a skewed or jumping wall clock on any node changes nothing. Because the
//! basis stamp was taken before its entry reached this node, the estimate never runs
//! ahead of the true time since that stamp: after a failover cluster time continues at
//! most slightly behind, which only lengthens leases.
//!
//! A new leader must not stamp until it has applied its predecessor's entries, or it
//! would estimate from an old basis (or, with none, from its own wall clock). The leader
//! loop marks a term "ready" once its first stamped entry is applied; writes of that term
//! wait for it.

use std::sync::Mutex;

use tokio::sync::watch;

use crate::clock::SharedClock;

/// The decision, as a pure function: the stamp for the next entry.
///
/// `basis` is `(stamp_ms, mono_ms_when_applied)` of the newest applied stamped entry,
/// `None` only for a cluster that has never applied one (then the wall clock seeds it).
pub fn decide_stamp(
    basis: Option<(u64, u64)>,
    last_issued_ms: u64,
    mono_now_ms: u64,
    wall_now_ms: u64,
) -> u64 {
    let estimate = match basis {
        Some((stamp_ms, applied_mono_ms)) => {
            stamp_ms.saturating_add(mono_now_ms.saturating_sub(applied_mono_ms))
        }
        None => wall_now_ms,
    };
    estimate.max(last_issued_ms)
}

/// Issues stamps on a leader and tracks which term is ready to stamp.
#[derive(Debug)]
pub struct Timekeeper {
    clock: SharedClock,
    last_issued_ms: Mutex<u64>,
    ready_term: watch::Sender<u64>,
}

impl Timekeeper {
    pub fn new(clock: SharedClock) -> Self {
        Timekeeper {
            clock,
            last_issued_ms: Mutex::new(0),
            ready_term: watch::channel(0).0,
        }
    }

    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// A stamp for a new entry; strictly monotonic in what this node issues.
    pub fn issue(&self, basis: Option<(u64, u64)>) -> u64 {
        let mut last = self.last_issued_ms.lock().expect("timekeeper lock");
        let stamp = decide_stamp(basis, *last, self.clock.mono_ms(), self.clock.wall_ms());
        *last = stamp;
        stamp
    }

    /// Current cluster time as this node estimates it, without issuing a stamp: what a
    /// leader judges reads against.
    pub fn estimate(&self, basis: Option<(u64, u64)>) -> u64 {
        let last = *self.last_issued_ms.lock().expect("timekeeper lock");
        match basis {
            // A node that never applied a stamped entry knows no cluster time yet.
            None if last == 0 => 0,
            _ => decide_stamp(basis, last, self.clock.mono_ms(), self.clock.wall_ms()),
        }
    }

    pub fn mark_ready(&self, term: u64) {
        self.ready_term.send_if_modified(|t| {
            let newer = term > *t;
            if newer {
                *t = term;
            }
            newer
        });
    }

    pub fn ready_term(&self) -> u64 {
        *self.ready_term.borrow()
    }

    pub fn subscribe_ready(&self) -> watch::Receiver<u64> {
        self.ready_term.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimate_is_basis_plus_monotonic_elapsed() {
        assert_eq!(
            decide_stamp(Some((10_000, 500)), 0, 1_700, 99_999_999),
            11_200
        );
    }

    #[test]
    fn wall_clock_is_ignored_once_there_is_a_basis() {
        let a = decide_stamp(Some((10_000, 500)), 0, 600, 0);
        let b = decide_stamp(Some((10_000, 500)), 0, 600, u64::MAX / 2);
        assert_eq!(a, b);
    }

    #[test]
    fn wall_clock_seeds_a_new_cluster() {
        assert_eq!(
            decide_stamp(None, 0, 5, 1_764_000_000_000),
            1_764_000_000_000
        );
    }

    #[test]
    fn never_below_what_was_issued() {
        assert_eq!(decide_stamp(Some((10_000, 500)), 20_000, 600, 0), 20_000);
    }

    #[test]
    fn a_basis_applied_in_the_future_of_a_restarted_clock_counts_zero_elapsed() {
        assert_eq!(decide_stamp(Some((10_000, 900)), 0, 100, 0), 10_000);
    }

    #[test]
    fn issued_stamps_never_decrease() {
        let tk = Timekeeper::new(crate::clock::SystemClock::new().shared());
        let mut prev = 0;
        for i in 0..100u64 {
            // A basis that jumps around must not move issued stamps backwards.
            let basis = Some((1_000_000 - (i % 7) * 1000, 0));
            let s = tk.issue(basis);
            assert!(s >= prev);
            prev = s;
        }
    }
}
