//! The table of idempotency keys: the first reply to each keyed request, kept for a window
//! of store time and bounded in count.
//!
//! Store time never goes backwards, so keys are inserted in time order and a FIFO is
//! already the expiry order: no second index is needed. The FIFO holds the entries
//! themselves, so expiring checks its front in O(1) (it runs on every apply) and a
//! snapshot walks it in order without a lookup per key; a hash map from key to position
//! answers retries. The map is only ever looked up, never iterated, so it keeps replay
//! deterministic.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::command::Reply;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Remembered {
    pub fingerprint: u64,
    pub reply: Reply,
    pub recorded_ms: u64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct IdempotencyTable {
    /// Entries in insertion order, which is also `recorded_ms` order.
    order: VecDeque<(String, Remembered)>,
    /// Sequence number of the front of `order`: entry `i` of `order` is number
    /// `front_seq + i`. Numbers are internal and never serialized.
    front_seq: u64,
    /// Key → sequence number.
    by_key: HashMap<String, u64>,
}

impl IdempotencyTable {
    pub fn get(&self, key: &str) -> Option<&Remembered> {
        let seq = *self.by_key.get(key)?;
        Some(&self.order[(seq - self.front_seq) as usize].1)
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Forgets keys older than `window_ms` at `now_ms`, then the oldest beyond `keys_max`.
    pub fn expire(&mut self, now_ms: u64, window_ms: u64, keys_max: usize) {
        while let Some((_, r)) = self.order.front() {
            let too_old = r.recorded_ms.saturating_add(window_ms) <= now_ms;
            if !too_old && self.order.len() <= keys_max {
                break;
            }
            let (key, _) = self.order.pop_front().expect("front exists");
            self.by_key.remove(&key);
            self.front_seq += 1;
        }
    }

    pub fn insert(&mut self, key: String, remembered: Remembered) {
        debug_assert!(!self.by_key.contains_key(&key), "key inserted twice");
        debug_assert!(self
            .order
            .back()
            .is_none_or(|(_, r)| r.recorded_ms <= remembered.recorded_ms));
        let seq = self.front_seq + self.order.len() as u64;
        self.by_key.insert(key.clone(), seq);
        self.order.push_back((key, remembered));
    }

    /// Entries in insertion order, for snapshots.
    pub fn entries(&self) -> impl Iterator<Item = (&String, &Remembered)> {
        self.order.iter().map(|(k, r)| (k, r))
    }

    /// Rebuilds a table from `entries()`; `Err` says why they can't have come from one.
    pub fn from_entries(entries: Vec<(String, Remembered)>) -> Result<Self, String> {
        let mut t = IdempotencyTable::default();
        t.by_key.reserve(entries.len());
        t.order.reserve(entries.len());
        for (k, r) in entries {
            if t.by_key.contains_key(&k) {
                return Err(format!("idempotency key {k:?} remembered twice"));
            }
            if t.order
                .back()
                .is_some_and(|(_, last)| last.recorded_ms > r.recorded_ms)
            {
                return Err(format!("idempotency key {k:?} out of time order"));
            }
            t.insert(k, r);
        }
        Ok(t)
    }

    pub fn check_invariants(&self, clock_ms: u64, window_ms: u64, keys_max: usize) {
        assert_eq!(
            self.by_key.len(),
            self.order.len(),
            "idempotency index sizes"
        );
        assert!(
            self.order.len() <= keys_max,
            "idempotency table over its bound"
        );
        let mut prev = 0;
        for (i, (k, r)) in self.order.iter().enumerate() {
            let seq = self.by_key.get(k).expect("ordered key is in the table");
            assert_eq!(
                *seq,
                self.front_seq + i as u64,
                "idempotency position of {k:?}"
            );
            assert!(r.recorded_ms >= prev, "idempotency keys out of time order");
            assert!(r.recorded_ms <= clock_ms, "idempotency key from the future");
            assert!(
                r.recorded_ms.saturating_add(window_ms) > clock_ms,
                "expired idempotency key kept"
            );
            prev = r.recorded_ms;
        }
    }
}
