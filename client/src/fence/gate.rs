//! [`FenceGate`] itself: the per-resource high-water marks, the dedup of retried writes
//! and their bounds ([`FenceConfig`]), the answer to one write ([`Admit`]). What it is
//! for, and why the check and the write are one step, is in `fence`'s doc. Imports
//! nothing of this crate; `fence` re-exports it and `fence::http` builds on it.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Bounds of a [`FenceGate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceConfig {
    /// How long an accepted write's key is remembered. Default 10 minutes, the store's
    /// own idempotency window (docs/api.md), so a worker retrying against both sees the same.
    pub dedup_window: Duration,
    /// At most this many keys are remembered; past it the oldest are forgotten early.
    /// Default 100,000.
    pub dedup_keys_max: usize,
    /// At most this many resources are fenced; writes to new ones are refused past it.
    /// Default 1,000,000.
    pub resources_max: usize,
}

impl Default for FenceConfig {
    fn default() -> Self {
        FenceConfig {
            dedup_window: Duration::from_secs(10 * 60),
            dedup_keys_max: 100_000,
            resources_max: 1_000_000,
        }
    }
}

/// The gate's answer to one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit<R> {
    /// The token is current and the key new: the write ran, and returned this.
    Accepted(R),
    /// This key was accepted before (with `token`): nothing ran. Answer the writer as a
    /// success — its write is in.
    Duplicate { token: u64 },
    /// A write with a higher token (`highest`) was accepted for this resource: nothing
    /// ran. The writer's lease is gone.
    Stale { highest: u64 },
    /// A new resource, but `resources_max` are already fenced: nothing ran.
    Full,
}

/// Per-resource fencing and write dedup; thread-safe (`Sync`), shard-locked.
///
/// # Example
///
/// The worked example of docs/design.md: worker A holds generation 7, stalls, and B claims
/// generation 8 and writes; A's late write is refused, B's retry is deduplicated.
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Mutex;
/// use leasehold_client::fence::{Admit, FenceGate};
///
/// let gate = FenceGate::new();
/// let store = Mutex::new(HashMap::new());
/// let write = |token: u64, key: &str, value: &str| {
///     gate.admit("invoice-42", token, Some(key), || {
///         store.lock().unwrap().insert("invoice-42", value.to_owned());
///         Ok::<_, std::convert::Infallible>(())
///     })
///     .unwrap()
/// };
///
/// assert_eq!(write(8, "b-1", "sent by B"), Admit::Accepted(()));
/// assert_eq!(write(8, "b-1", "sent by B"), Admit::Duplicate { token: 8 });
/// assert_eq!(write(7, "a-1", "sent by A"), Admit::Stale { highest: 8 });
/// assert_eq!(store.lock().unwrap()["invoice-42"], "sent by B");
/// assert_eq!(gate.highest("invoice-42"), Some(8));
/// ```
#[derive(Debug)]
pub struct FenceGate {
    shards: Vec<Mutex<Shard>>,
    config: FenceConfig,
    resources: AtomicUsize,
}

/// Shards let writes to different resources proceed in parallel.
const SHARDS_MAX: usize = 16;

#[derive(Debug, Default)]
struct Shard {
    highest: HashMap<String, u64>,
    /// Dedup id (resource + key) → token it was accepted with.
    keys: HashMap<String, u64>,
    /// The same keys in acceptance order, which is also expiry order.
    order: VecDeque<(Instant, String)>,
    keys_max: usize,
}

/// What the shard decides before anything runs.
enum Decision {
    Run { new_resource: bool },
    Refuse(Admit<()>),
}

impl Default for FenceGate {
    fn default() -> Self {
        FenceGate::new()
    }
}

impl FenceGate {
    pub fn new() -> Self {
        FenceGate::with_config(FenceConfig::default())
    }

    pub fn with_config(config: FenceConfig) -> Self {
        // Split the key budget exactly, so the total never exceeds `dedup_keys_max`.
        let n = SHARDS_MAX.min(config.dedup_keys_max).max(1);
        let shards = (0..n)
            .map(|i| {
                let extra = usize::from(i < config.dedup_keys_max % n);
                Mutex::new(Shard {
                    keys_max: config.dedup_keys_max / n + extra,
                    ..Shard::default()
                })
            })
            .collect();
        FenceGate {
            shards,
            config,
            resources: AtomicUsize::new(0),
        }
    }

    pub fn config(&self) -> &FenceConfig {
        &self.config
    }

    /// Admits a write of `resource` under fencing `token` with idempotency `key`: runs
    /// `apply` (the destination's write) only if the key is new and the token is at
    /// least the highest accepted for the resource, atomically with that check. The
    /// token and key are recorded only if `apply` returns `Ok` — a failed write may be
    /// retried under the same key.
    pub fn admit<R, E>(
        &self,
        resource: &str,
        token: u64,
        key: Option<&str>,
        apply: impl FnOnce() -> Result<R, E>,
    ) -> Result<Admit<R>, E> {
        self.admit_at(Instant::now(), resource, token, key, apply)
    }

    /// [`FenceGate::admit`] at an explicit clock reading (the dedup window's clock).
    pub fn admit_at<R, E>(
        &self,
        now: Instant,
        resource: &str,
        token: u64,
        key: Option<&str>,
        apply: impl FnOnce() -> Result<R, E>,
    ) -> Result<Admit<R>, E> {
        let dedup_id = key.map(|k| dedup_id(resource, k));
        let mut shard = self.shard(resource);
        shard.expire(now, self.config.dedup_window);
        let new_resource = match shard.decide(resource, token, dedup_id.as_deref()) {
            Decision::Refuse(refusal) => return Ok(refusal.map_accepted()),
            Decision::Run { new_resource } => new_resource,
        };
        if new_resource && !self.reserve_resource() {
            return Ok(Admit::Full);
        }
        // Gives the reserved slot back unless the write succeeds (also if it panics).
        let mut reservation = Reservation {
            count: &self.resources,
            held: new_resource,
        };
        let r = apply()?;
        reservation.held = false;
        shard.record(now, resource, token, dedup_id);
        Ok(Admit::Accepted(r))
    }

    /// Decides and records without a destination write of its own (the caller writes
    /// after an `Accepted`, and must itself serialize writes per resource).
    pub fn check(&self, resource: &str, token: u64, key: Option<&str>) -> Admit<()> {
        match self.admit(resource, token, key, || {
            Ok::<_, std::convert::Infallible>(())
        }) {
            Ok(a) => a,
            Err(never) => match never {},
        }
    }

    /// The highest token accepted for `resource`.
    pub fn highest(&self, resource: &str) -> Option<u64> {
        self.shard(resource).highest.get(resource).copied()
    }

    /// How many resources are fenced.
    pub fn resources(&self) -> usize {
        self.resources.load(Ordering::SeqCst)
    }

    /// How many idempotency keys are remembered now (expired ones may still count until
    /// their shard's next write).
    pub fn remembered_keys(&self) -> usize {
        self.shards.iter().map(|s| lock(s).order.len()).sum()
    }

    fn shard(&self, resource: &str) -> MutexGuard<'_, Shard> {
        let mut h = DefaultHasher::new();
        resource.hash(&mut h);
        lock(&self.shards[(h.finish() as usize) % self.shards.len()])
    }

    fn reserve_resource(&self) -> bool {
        let max = self.config.resources_max;
        self.resources
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }
}

/// A resource slot reserved for a write that has not succeeded yet.
struct Reservation<'a> {
    count: &'a AtomicUsize,
    held: bool,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.held {
            self.count.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// A write that panicked ran before anything was recorded, so a poisoned shard is still
/// consistent: keep serving rather than turn one bad write into a dead destination.
fn lock(m: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Keys are scoped per resource; the length prefix keeps `("ab","c")` and `("a","bc")`
/// apart.
fn dedup_id(resource: &str, key: &str) -> String {
    format!("{}:{resource}{key}", resource.len())
}

impl Admit<()> {
    fn map_accepted<R>(self) -> Admit<R> {
        match self {
            Admit::Accepted(()) => unreachable!("a refusal is never Accepted"),
            Admit::Duplicate { token } => Admit::Duplicate { token },
            Admit::Stale { highest } => Admit::Stale { highest },
            Admit::Full => Admit::Full,
        }
    }
}

impl Shard {
    /// Dedup first: a retry of an accepted write is a duplicate even if a higher token
    /// has been accepted since — its write did go in.
    fn decide(&self, resource: &str, token: u64, dedup_id: Option<&str>) -> Decision {
        if let Some(first) = dedup_id.and_then(|id| self.keys.get(id)) {
            return Decision::Refuse(Admit::Duplicate { token: *first });
        }
        match self.highest.get(resource) {
            Some(&highest) if token < highest => Decision::Refuse(Admit::Stale { highest }),
            Some(_) => Decision::Run {
                new_resource: false,
            },
            None => Decision::Run { new_resource: true },
        }
    }

    fn record(&mut self, now: Instant, resource: &str, token: u64, dedup_id: Option<String>) {
        let highest = self.highest.entry(resource.to_owned()).or_insert(token);
        *highest = (*highest).max(token);
        if let Some(id) = dedup_id {
            if self.keys_max > 0 {
                self.keys.insert(id.clone(), token);
                self.order.push_back((now, id));
            }
            self.evict_over_count();
        }
    }

    fn expire(&mut self, now: Instant, window: Duration) {
        while let Some((at, _)) = self.order.front() {
            if now.saturating_duration_since(*at) < window {
                break;
            }
            let (_, id) = self.order.pop_front().expect("front exists");
            self.keys.remove(&id);
        }
    }

    fn evict_over_count(&mut self) {
        while self.order.len() > self.keys_max {
            let (_, id) = self.order.pop_front().expect("over count means non-empty");
            self.keys.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn ok() -> Result<(), ()> {
        Ok(())
    }

    #[test]
    fn lower_tokens_are_refused_equal_and_higher_accepted() {
        let g = FenceGate::new();
        assert_eq!(g.admit("r", 7, None, ok), Ok(Admit::Accepted(())));
        assert_eq!(g.admit("r", 7, None, ok), Ok(Admit::Accepted(())));
        assert_eq!(g.admit("r", 8, None, ok), Ok(Admit::Accepted(())));
        assert_eq!(g.admit("r", 7, None, ok), Ok(Admit::Stale { highest: 8 }));
        assert_eq!(g.highest("r"), Some(8));
        // Resources are independent.
        assert_eq!(g.admit("other", 1, None, ok), Ok(Admit::Accepted(())));
        assert_eq!(g.resources(), 2);
    }

    #[test]
    fn a_duplicate_key_is_answered_without_running() {
        let g = FenceGate::new();
        assert_eq!(g.check("r", 7, Some("k")), Admit::Accepted(()));
        let ran = std::cell::Cell::new(false);
        let again = g.admit("r", 7, Some("k"), || {
            ran.set(true);
            ok()
        });
        assert_eq!(again, Ok(Admit::Duplicate { token: 7 }));
        assert!(!ran.get());
        // Even after a higher token: the first write did go in.
        assert_eq!(g.check("r", 9, Some("k2")), Admit::Accepted(()));
        assert_eq!(g.check("r", 7, Some("k")), Admit::Duplicate { token: 7 });
        // Keys are per resource.
        assert_eq!(g.check("s", 7, Some("k")), Admit::Accepted(()));
    }

    #[test]
    fn a_failed_write_records_nothing() {
        let g = FenceGate::new();
        assert_eq!(
            g.admit("r", 5, Some("k"), || Err::<(), _>("disk full")),
            Err("disk full")
        );
        assert_eq!(g.highest("r"), None);
        assert_eq!(g.resources(), 0);
        assert_eq!(g.check("r", 5, Some("k")), Admit::Accepted(()));
    }

    #[test]
    fn keys_expire_after_the_window() {
        let g = FenceGate::with_config(FenceConfig {
            dedup_window: Duration::from_secs(60),
            ..FenceConfig::default()
        });
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        assert_eq!(
            g.admit_at(at(0), "r", 1, Some("k"), ok),
            Ok(Admit::Accepted(()))
        );
        assert_eq!(
            g.admit_at(at(59), "r", 1, Some("k"), ok),
            Ok(Admit::Duplicate { token: 1 })
        );
        assert_eq!(
            g.admit_at(at(60), "r", 1, Some("k"), ok),
            Ok(Admit::Accepted(()))
        );
        // The fence itself never expires.
        assert_eq!(
            g.admit_at(at(3600), "r", 0, None, ok),
            Ok(Admit::Stale { highest: 1 })
        );
    }

    #[test]
    fn remembered_keys_are_bounded_in_count() {
        let max = 40;
        let g = FenceGate::with_config(FenceConfig {
            dedup_keys_max: max,
            ..FenceConfig::default()
        });
        for i in 0..1_000 {
            g.check(&format!("r{}", i % 7), 1, Some(&format!("k{i}")));
        }
        assert!(g.remembered_keys() <= max, "{}", g.remembered_keys());
        // The newest key of a shard is still remembered.
        assert_eq!(
            g.check("r5", 1, Some("k999")),
            Admit::Duplicate { token: 1 }
        );
    }

    #[test]
    fn tiny_key_budgets_are_exact() {
        for max in [0, 1, 3, 16, 17] {
            let g = FenceGate::with_config(FenceConfig {
                dedup_keys_max: max,
                ..FenceConfig::default()
            });
            for i in 0..200 {
                g.check(&format!("r{i}"), 1, Some("k"));
            }
            assert!(
                g.remembered_keys() <= max,
                "max {max}: {}",
                g.remembered_keys()
            );
        }
    }

    #[test]
    fn resources_are_bounded() {
        let g = FenceGate::with_config(FenceConfig {
            resources_max: 2,
            ..FenceConfig::default()
        });
        assert_eq!(g.check("a", 1, None), Admit::Accepted(()));
        assert_eq!(g.check("b", 1, None), Admit::Accepted(()));
        assert_eq!(g.check("c", 1, None), Admit::Full);
        // Known resources keep working.
        assert_eq!(g.check("a", 2, None), Admit::Accepted(()));
        assert_eq!(g.resources(), 2);
    }

    /// Many threads write one resource with tokens they draw from a shared counter (a
    /// stand-in for successive claims), in random interleavings. What the destination
    /// ends up with must be what a serial fence would allow: accepted tokens in
    /// non-decreasing order, the final value from the highest accepted token, each key
    /// applied once.
    #[test]
    fn concurrent_writers_never_go_backwards() {
        const THREADS: usize = 16;
        const WRITES: usize = 500;
        let gate = Arc::new(FenceGate::new());
        let applied = Arc::new(Mutex::new(Vec::<(u64, String)>::new()));
        let claims = Arc::new(AtomicUsize::new(1));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (gate, applied, claims) = (gate.clone(), applied.clone(), claims.clone());
                std::thread::spawn(move || {
                    let mut outcomes = (0, 0, 0);
                    for i in 0..WRITES {
                        // Every few writes, "claim" a newer generation.
                        let token = if i % 5 == 0 {
                            claims.fetch_add(1, Ordering::SeqCst) as u64
                        } else {
                            (claims.load(Ordering::SeqCst) as u64).saturating_sub((i % 3) as u64)
                        };
                        // Every key is written twice by its thread: once, and a retry.
                        let key = format!("t{t}-w{}", i / 2);
                        let r = gate.admit("job-1", token, Some(&key), || {
                            applied.lock().unwrap().push((token, key.clone()));
                            Ok::<_, ()>(())
                        });
                        match r.unwrap() {
                            Admit::Accepted(()) => outcomes.0 += 1,
                            Admit::Duplicate { .. } => outcomes.1 += 1,
                            Admit::Stale { .. } => outcomes.2 += 1,
                            Admit::Full => unreachable!(),
                        }
                    }
                    outcomes
                })
            })
            .collect();
        let mut dup = 0;
        for h in handles {
            dup += h.join().unwrap().1;
        }
        let applied = applied.lock().unwrap();
        assert!(!applied.is_empty());
        assert!(dup > 0, "retries must have been deduplicated");
        for w in applied.windows(2) {
            assert!(
                w[0].0 <= w[1].0,
                "token went backwards: {:?} then {:?}",
                w[0],
                w[1]
            );
        }
        let mut keys: Vec<_> = applied.iter().map(|(_, k)| k.clone()).collect();
        keys.sort();
        let n = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), n, "a key was applied twice");
        assert_eq!(gate.highest("job-1"), applied.last().map(|(t, _)| *t));
    }

    #[test]
    fn a_panicking_write_does_not_poison_the_gate() {
        let g = Arc::new(FenceGate::new());
        let g2 = g.clone();
        let r = std::thread::spawn(move || {
            let _ = g2.admit("r", 3, Some("k"), || -> Result<(), ()> { panic!("boom") });
        })
        .join();
        assert!(r.is_err());
        assert_eq!(g.resources(), 0, "the reserved slot was given back");
        assert_eq!(g.check("r", 3, Some("k")), Admit::Accepted(()));
    }
}
