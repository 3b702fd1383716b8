//! In-flight budgets shared fairly between callers (issue 17 item 6).
//!
//! A [`Pool`] is a budget of in-flight requests with a per-caller cap inside it: one
//! caller (a token, or a source address without one) can hold at most `per_caller` of
//! its `total` slots, so a single reader or worker token flooding a node leaves the rest
//! to everyone else — an admin's `GET /v1/cluster` included. A [`Slot`] gives its place
//! back when dropped.
//!
//! A request starts on the ordinary client pool. A claim-next that turns out to wait
//! (`wait_ms > 0`, known only once its body is parsed) moves to the long-poll pool with
//! [`HeldSlot::into_long_poll`]: it gives its ordinary slot back, so long polls can only
//! ever fill their own budget. Only std and `crate::telemetry::metrics` are used here.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use crate::telemetry::metrics::Refused;

/// Who a request is counted against: the token's entry when the auth file names it,
/// else the address the connection comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CallerKey {
    Token(String),
    Source(IpAddr),
    /// Without an auth file, a cluster member's address: a follower forwards the
    /// requests of all its clients from there, so no per-caller cap applies (the total
    /// does).
    Member,
}

/// Why a pool refused a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Every slot of the pool is taken.
    Total,
    /// This caller holds its `per_caller` share.
    Caller,
}

/// One budget: at most `total` slots, at most `per_caller` of them per [`CallerKey`].
#[derive(Debug)]
pub struct Pool {
    total: usize,
    per_caller: usize,
    state: Mutex<PoolState>,
}

#[derive(Debug, Default)]
struct PoolState {
    in_use: usize,
    /// Only callers holding a slot are listed, so the map is bounded by `total`.
    by_caller: HashMap<CallerKey, usize>,
}

impl Pool {
    pub fn new(total: usize, per_caller: usize) -> Arc<Pool> {
        Arc::new(Pool {
            total,
            per_caller,
            state: Mutex::new(PoolState::default()),
        })
    }

    /// A slot for `key`, or why not: at once, nothing waits.
    pub fn try_take(self: &Arc<Self>, key: &CallerKey) -> Result<Slot, Full> {
        let mut s = self.state.lock().expect("slot pool lock");
        if s.in_use >= self.total {
            return Err(Full::Total);
        }
        let held = s.by_caller.get(key).copied().unwrap_or(0);
        if held >= self.per_caller && *key != CallerKey::Member {
            return Err(Full::Caller);
        }
        s.in_use += 1;
        s.by_caller.insert(key.clone(), held + 1);
        Ok(Slot {
            pool: self.clone(),
            key: key.clone(),
        })
    }

    /// Slots taken now (tests, metrics).
    pub fn in_use(&self) -> usize {
        self.state.lock().expect("slot pool lock").in_use
    }

    fn give_back(&self, key: &CallerKey) {
        let mut s = self.state.lock().expect("slot pool lock");
        s.in_use -= 1;
        if let Some(n) = s.by_caller.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                s.by_caller.remove(key);
            }
        }
    }
}

/// A taken slot; dropping it gives it back.
#[derive(Debug)]
pub struct Slot {
    pool: Arc<Pool>,
    key: CallerKey,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.pool.give_back(&self.key);
    }
}

/// The slot a client request holds, as a request extension: the listener keeps it for
/// the request's whole life, a handler may move it to the long-poll budget.
#[derive(Debug, Clone)]
pub struct HeldSlot(Arc<Mutex<Held>>);

#[derive(Debug)]
struct Held {
    key: CallerKey,
    ordinary: Option<Slot>,
    long_poll: Option<Slot>,
    long_polls: Arc<Pool>,
}

impl HeldSlot {
    pub fn new(key: CallerKey, ordinary: Slot, long_polls: Arc<Pool>) -> HeldSlot {
        HeldSlot(Arc::new(Mutex::new(Held {
            key,
            ordinary: Some(ordinary),
            long_poll: None,
            long_polls,
        })))
    }

    /// Moves the request to the long-poll budget, giving its ordinary slot back; on
    /// refusal it keeps the ordinary slot (the 503 it is answered with is quick) and
    /// says which limit refused it.
    pub fn into_long_poll(&self) -> Result<(), Refused> {
        let mut h = self.0.lock().expect("held slot lock");
        if h.long_poll.is_some() {
            return Ok(());
        }
        match h.long_polls.try_take(&h.key) {
            Ok(slot) => {
                h.long_poll = Some(slot);
                h.ordinary = None;
                Ok(())
            }
            Err(Full::Total) => Err(Refused::LongPolls),
            Err(Full::Caller) => Err(Refused::LongPollsPerCaller),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(s: &str) -> CallerKey {
        CallerKey::Token(s.to_owned())
    }

    #[test]
    fn one_caller_cannot_take_every_slot() {
        let pool = Pool::new(4, 2);
        let a1 = pool.try_take(&token("a")).unwrap();
        let _a2 = pool.try_take(&token("a")).unwrap();
        assert_eq!(pool.try_take(&token("a")).unwrap_err(), Full::Caller);
        let _b1 = pool.try_take(&token("b")).unwrap();
        let _c1 = pool.try_take(&token("c")).unwrap();
        assert_eq!(pool.try_take(&token("d")).unwrap_err(), Full::Total);
        drop(a1);
        assert_eq!(pool.in_use(), 3);
        let _a3 = pool.try_take(&token("a")).unwrap();
    }

    #[test]
    fn a_member_forwarding_for_its_clients_is_held_only_to_the_total() {
        let pool = Pool::new(3, 1);
        let held: Vec<_> = (0..3)
            .map(|_| pool.try_take(&CallerKey::Member).unwrap())
            .collect();
        assert_eq!(pool.try_take(&CallerKey::Member).unwrap_err(), Full::Total);
        drop(held);
        let _m = pool.try_take(&CallerKey::Member).unwrap();
        let _s = pool
            .try_take(&CallerKey::Source([127, 0, 0, 9].into()))
            .unwrap();
        let s2 = pool.try_take(&CallerKey::Source([127, 0, 0, 9].into()));
        assert_eq!(s2.unwrap_err(), Full::Caller);
    }

    #[test]
    fn a_long_poll_gives_its_ordinary_slot_back() {
        let ordinary = Pool::new(2, 2);
        let long_polls = Pool::new(1, 1);
        let key = token("w");
        let first = HeldSlot::new(
            key.clone(),
            ordinary.try_take(&key).unwrap(),
            long_polls.clone(),
        );
        first.into_long_poll().unwrap();
        assert_eq!((ordinary.in_use(), long_polls.in_use()), (0, 1));
        let second = HeldSlot::new(
            key.clone(),
            ordinary.try_take(&key).unwrap(),
            long_polls.clone(),
        );
        assert_eq!(second.into_long_poll(), Err(Refused::LongPolls));
        assert_eq!(ordinary.in_use(), 1, "a refused move keeps its slot");
        drop((first, second));
        assert_eq!((ordinary.in_use(), long_polls.in_use()), (0, 0));
    }
}
