//! Cluster time: the stamp a leader puts on every entry it proposes (docs/design.md, "Cluster
//! time").
//!
//! A stamp is the larger of: the last applied stamp + monotonic time elapsed since it
//! was applied; and, within the leader's own term, its previous stamp + monotonic time
//! elapsed since it issued it. No wall clock takes part once a cluster has a stamped
//! entry, so a skewed or jumping wall clock on any node changes nothing. Because an applied stamp was taken before its entry reached this node, the
//! estimate from it never runs ahead of the true time since that stamp: after a failover
//! cluster time continues at most slightly behind, which only lengthens leases.
//!
//! Within a term the leader counts from its own stamps, not from applied ones: rebasing
//! on each applied entry would lose that entry's commit latency every time, and under a
//! steady load cluster time fell seconds behind real time within seconds (found by
//! `leasehold bench failover`: leases left to expire stayed held ~8 s past their TTL).
//!
//! A stamp this node issued in an *earlier* term counts for nothing (issue 16, item 1).
//! A leader cut off from its quorum keeps issuing stamps on its own line for entries that
//! never commit, while the majority's cluster time may stand still (a majority down for
//! seconds). Had the node's next term started at its old line ("never below what it
//! issued"), cluster time would jump seconds ahead of what the holders' deadlines were
//! computed against, and their leases would expire early. Store time never goes backwards
//! anyway (the state machine takes the maximum of its clock and each stamp), so issued
//! stamps need not be monotonic across terms.
//!
//! A new leader must not stamp until it has applied its predecessor's entries, or it
//! would estimate from an old basis (or, with none, from its own wall clock). The leader
//! loop marks a term "ready" once its first stamped entry is applied; writes of that term
//! wait for it.

use std::sync::Mutex;

use tokio::sync::watch;

use crate::time::clock::SharedClock;

/// The decision, as a pure function: the stamp for the next entry.
///
/// `basis` is `(stamp_ms, mono_ms_when_applied)` of the newest applied stamped entry,
/// `None` only for a cluster that has never applied one (then the wall clock seeds it).
/// `own` is `(stamp_ms, mono_ms_when_issued)` of this node's last stamp *in the current
/// term*, if it issued one (it leads this term). Stamps of earlier terms never take part.
pub fn decide_stamp(
    basis: Option<(u64, u64)>,
    own: Option<(u64, u64)>,
    mono_now_ms: u64,
    wall_now_ms: u64,
) -> u64 {
    let since = |(stamp_ms, at_mono_ms): (u64, u64)| {
        stamp_ms.saturating_add(mono_now_ms.saturating_sub(at_mono_ms))
    };
    let estimate = match basis {
        Some(b) => since(b),
        None => wall_now_ms,
    };
    estimate.max(own.map_or(0, since))
}

/// What this node issued last.
#[derive(Debug, Default)]
struct Issued {
    /// `(term, stamp_ms, mono_ms)` of the last stamp.
    own: Option<(u64, u64, u64)>,
}

impl Issued {
    fn own_in(&self, term: u64) -> Option<(u64, u64)> {
        self.own
            .filter(|(t, _, _)| *t == term)
            .map(|(_, stamp, at)| (stamp, at))
    }
}

/// Issues stamps on a leader and tracks which term is ready to stamp.
#[derive(Debug)]
pub struct Timekeeper {
    clock: SharedClock,
    issued: Mutex<Issued>,
    ready_term: watch::Sender<u64>,
}

impl Timekeeper {
    pub fn new(clock: SharedClock) -> Self {
        Timekeeper {
            clock,
            issued: Mutex::new(Issued::default()),
            ready_term: watch::channel(0).0,
        }
    }

    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// A stamp for a new entry of `term` (which this node leads); never below what this
    /// node issued before in the same term.
    ///
    /// A caller may still hold a term it read before an await (the ticks and the batcher
    /// read the term, wait, then stamp), so `term` can be older than the one this node
    /// now leads. Such a stamp is issued but not remembered: the entry is refused anyway
    /// (the state machine store takes only the log's term), and recording it would
    /// overwrite the current term's own line, so the next stamp of the current term would
    /// fall back to the applied basis and lose a commit latency (issue 28, item 3).
    pub fn issue(&self, basis: Option<(u64, u64)>, term: u64) -> u64 {
        let mut issued = self.issued.lock().expect("timekeeper lock");
        let mono = self.clock.mono_ms();
        let own = issued.own_in(term);
        let stamp = decide_stamp(basis, own, mono, self.clock.wall_ms());
        if issued.own.is_none_or(|(t, _, _)| term >= t) {
            issued.own = Some((term, stamp, mono));
        }
        stamp
    }

    /// Current cluster time as this node estimates it in `term`, without issuing a
    /// stamp: what a leader judges reads against.
    pub fn estimate(&self, basis: Option<(u64, u64)>, term: u64) -> u64 {
        let issued = self.issued.lock().expect("timekeeper lock");
        let own = issued.own_in(term);
        match (basis, own) {
            // A node that never applied a stamped entry (nor leads with one) knows no
            // cluster time yet.
            (None, None) => 0,
            _ => decide_stamp(basis, own, self.clock.mono_ms(), self.clock.wall_ms()),
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
            decide_stamp(Some((10_000, 500)), None, 1_700, 99_999_999),
            11_200
        );
    }

    #[test]
    fn wall_clock_is_ignored_once_there_is_a_basis() {
        let a = decide_stamp(Some((10_000, 500)), None, 600, 0);
        let b = decide_stamp(Some((10_000, 500)), None, 600, u64::MAX / 2);
        assert_eq!(a, b);
    }

    #[test]
    fn wall_clock_seeds_a_new_cluster() {
        assert_eq!(
            decide_stamp(None, None, 5, 1_764_000_000_000),
            1_764_000_000_000
        );
    }

    #[test]
    fn never_below_what_was_issued_in_the_same_term() {
        assert_eq!(
            decide_stamp(Some((10_000, 500)), Some((20_000, 550)), 600, 0),
            20_050
        );
    }

    #[test]
    fn a_basis_applied_in_the_future_of_a_restarted_clock_counts_zero_elapsed() {
        assert_eq!(decide_stamp(Some((10_000, 900)), None, 100, 0), 10_000);
    }

    #[test]
    fn issued_stamps_never_decrease() {
        let tk = Timekeeper::new(crate::time::clock::SystemClock::new().shared());
        let mut prev = 0;
        for i in 0..100u64 {
            // A basis that jumps around must not move issued stamps backwards.
            let basis = Some((1_000_000 - (i % 7) * 1000, 0));
            let s = tk.issue(basis, 1);
            assert!(s >= prev);
            prev = s;
        }
    }

    /// A clock the test moves by hand.
    #[derive(Debug, Default)]
    struct HandClock {
        mono: std::sync::atomic::AtomicU64,
    }

    impl crate::time::clock::Clock for HandClock {
        fn wall_ms(&self) -> u64 {
            0
        }
        fn mono_ms(&self) -> u64 {
            self.mono.load(std::sync::atomic::Ordering::Relaxed)
        }
    }

    #[test]
    fn a_leader_under_load_keeps_real_time_although_its_entries_apply_late() {
        // Entries commit 50 ms after they are stamped, and one is stamped every 10 ms:
        // the applied basis always lags. Cluster time must still advance with the
        // monotonic clock, not fall behind by a commit latency per entry.
        let clock = std::sync::Arc::new(HandClock::default());
        let tk = Timekeeper::new(clock.clone());
        let (term, start) = (3, 1_000_000u64);
        let mut stamps = vec![(start, 0u64)]; // (stamp, mono issued)
        tk.issue(Some((start, 0)), term);
        for now in (10..=60_000u64).step_by(10) {
            clock.mono.store(now, std::sync::atomic::Ordering::Relaxed);
            // The newest entry applied by now is the one stamped 50 ms ago.
            let applied = stamps
                .iter()
                .rev()
                .find(|(_, at)| at + 50 <= now)
                .map(|(s, at)| (*s, at + 50));
            let s = tk.issue(applied, term);
            stamps.push((s, now));
        }
        let (last, at) = *stamps.last().unwrap();
        assert_eq!(
            last,
            start + at,
            "cluster time drifted from the monotonic clock"
        );
        assert_eq!(tk.estimate(None, term), start + at);
    }

    #[test]
    fn a_new_term_starts_from_the_applied_basis_not_an_old_own_stamp() {
        let clock = std::sync::Arc::new(HandClock::default());
        let tk = Timekeeper::new(clock.clone());
        assert_eq!(tk.issue(Some((5_000, 0)), 1), 5_000);
        clock
            .mono
            .store(1_000, std::sync::atomic::Ordering::Relaxed);
        // Term 2 (another leader) applied a stamp lagging our own line by 200 ms: in term
        // 3 this node continues from it, never jumping ahead to its old term's line.
        let applied = Some((5_700, 900));
        // Within term 1 (had it still led), its own line would say 6_000.
        assert_eq!(tk.estimate(applied, 1), 6_000);
        assert_eq!(tk.estimate(applied, 3), 5_800);
        assert_eq!(tk.issue(applied, 3), 5_800);
    }

    /// Issue 28, item 3: a tick (or a batch) that read term 4 before an await stamps
    /// after this node has begun stamping term 5. Its stamp must not replace term 5's own
    /// line: the next stamp of term 5 would fall back to the lagging applied basis.
    #[test]
    fn a_stamp_for_an_older_term_leaves_the_current_terms_line() {
        let clock = std::sync::Arc::new(HandClock::default());
        let tk = Timekeeper::new(clock.clone());
        let set = |ms: u64| clock.mono.store(ms, std::sync::atomic::Ordering::Relaxed);
        // Term 5's line: stamped at 50_000 (mono 0); its entries apply 40 ms late.
        assert_eq!(tk.issue(Some((50_000, 0)), 5), 50_000);
        set(100);
        assert_eq!(tk.issue(Some((50_000, 40)), 5), 50_100);
        // A stale caller stamps for term 4: from the basis, 40 ms behind the line.
        set(120);
        assert_eq!(tk.issue(Some((50_000, 40)), 4), 50_080);
        // Term 5 continues from its own line, not from the basis.
        set(150);
        assert_eq!(tk.issue(Some((50_000, 40)), 5), 50_150);
        assert_eq!(tk.estimate(Some((50_000, 40)), 5), 50_150);
    }

    /// Issue 16, item 1: a leader cut off from its quorum keeps stamping entries that
    /// never commit; while a majority is down, cluster time stands still. When the node
    /// leads again in a later term, its old line must not drag cluster time forward.
    #[test]
    fn stamps_of_a_cut_off_term_never_move_cluster_time_in_a_later_term() {
        let clock = std::sync::Arc::new(HandClock::default());
        let tk = Timekeeper::new(clock.clone());
        let set = |ms: u64| clock.mono.store(ms, std::sync::atomic::Ordering::Relaxed);
        // Term 1: this node leads from cluster time 100_000, then is cut off and goes on
        // stamping ticks that never commit, for 10 s of its own line.
        assert_eq!(tk.issue(Some((100_000, 0)), 1), 100_000);
        for t in (1_000..=10_000).step_by(1_000) {
            set(t);
            assert_eq!(tk.issue(Some((100_000, 0)), 1), 100_000 + t);
        }
        // Meanwhile the majority elected another leader, went down for 8 s and came back:
        // the newest stamp this node applied (at mono 11_000) is only 102_000.
        set(11_000);
        let applied = Some((102_000, 11_000));
        set(11_500);
        // Term 3, led by this node again: it continues from what it applied.
        assert_eq!(tk.estimate(applied, 3), 102_500);
        assert_eq!(tk.issue(applied, 3), 102_500);
        // …and within term 3 from its own line, never below it.
        set(11_600);
        assert_eq!(tk.issue(Some((102_000, 11_000)), 3), 102_600);
    }
}
