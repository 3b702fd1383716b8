//! The table of idempotency keys: the first reply to each keyed request, kept for a window
//! of store time and bounded in count.
//!
//! Store time never goes backwards, so keys are inserted in time order and a FIFO is
//! already the expiry order: no second index is needed.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::command::Reply;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Remembered {
    pub fingerprint: u64,
    pub reply: Reply,
    pub recorded_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct IdempotencyTable {
    by_key: BTreeMap<String, Remembered>,
    /// Keys in insertion order, which is also `recorded_ms` order.
    order: VecDeque<String>,
}

impl IdempotencyTable {
    pub fn get(&self, key: &str) -> Option<&Remembered> {
        self.by_key.get(key)
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Forgets keys older than `window_ms` at `now_ms`, then the oldest beyond `keys_max`.
    pub fn expire(&mut self, now_ms: u64, window_ms: u64, keys_max: usize) {
        while let Some(oldest) = self.order.front() {
            let r = &self.by_key[oldest];
            let too_old = r.recorded_ms.saturating_add(window_ms) <= now_ms;
            if !too_old && self.order.len() <= keys_max {
                break;
            }
            let key = self.order.pop_front().expect("front exists");
            self.by_key.remove(&key);
        }
    }

    pub fn insert(&mut self, key: String, remembered: Remembered) {
        debug_assert!(!self.by_key.contains_key(&key), "key inserted twice");
        debug_assert!(self
            .order
            .back()
            .is_none_or(|k| self.by_key[k].recorded_ms <= remembered.recorded_ms));
        self.order.push_back(key.clone());
        self.by_key.insert(key, remembered);
    }

    /// Entries in insertion order, for snapshots.
    pub fn entries(&self) -> impl Iterator<Item = (&String, &Remembered)> {
        self.order.iter().map(|k| (k, &self.by_key[k]))
    }

    pub fn from_entries(entries: Vec<(String, Remembered)>) -> Self {
        let mut t = IdempotencyTable::default();
        for (k, r) in entries {
            t.insert(k, r);
        }
        t
    }

    pub fn check_invariants(&self, clock_ms: u64, window_ms: u64, keys_max: usize) {
        assert_eq!(self.by_key.len(), self.order.len(), "idempotency index sizes");
        assert!(self.order.len() <= keys_max, "idempotency table over its bound");
        let mut prev = 0;
        for k in &self.order {
            let r = self.by_key.get(k).expect("ordered key is in the table");
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
