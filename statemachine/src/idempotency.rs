//! The table of idempotency keys: the first reply to each keyed request, kept for a window
//! of store time and bounded in count, in bytes, and per caller (issue 17 item 5).
//!
//! Store time never goes backwards, so keys are inserted in time order and insertion
//! order is already the expiry order. Each entry gets a sequence number; `order` maps
//! numbers to entries (so its first is the oldest, found in O(log n) on every apply), a
//! hash map from key to number answers retries, and each scope keeps the numbers of its
//! own entries oldest first. The maps keyed by strings are only ever looked up, never
//! iterated into a decision, so replay stays deterministic.
//!
//! ```text
//!  order:        1:"a k1"  2:"k7"  3:"a k2"  4:"b k1"  5:"a k3"     (oldest first)
//!  scopes["a"]:  [1, 3, 5]     scopes[""]: [2]     scopes["b"]: [4]
//! ```
//!
//! What is kept (issue 28 item 3): a reply that carries a job (a 201/200 Job, an error
//! embedding the job) keeps it without its payload and result when they are the job
//! record's — [`Shared`] names the record by handle and says which parts to read back.
//! That is exact, not a digest: a record's payload never changes (set at submit; a delete
//! and re-submit makes a new record, a new handle) and its result is set once, at
//! completion, and is final; a part that was null in the reply stays inline (null). So
//! a replay rebuilds the first reply byte for byte from the record, and an entry costs
//! its names and message, not the 128 KiB a job can carry. Before a record goes (a
//! delete), the entries sharing it get the parts copied in and count them from then on
//! ([`IdempotencyTable::materialize`], through the `shared` index from handle to
//! entries), keeping the bounds as an insert would. A table seeded from a backup keeps
//! only [`Kept::BeforeRaise`] markers (`raise_generations`).
//!
//! Bytes: every entry is *accounted* at [`accounted_bytes`] — a formula of its fields'
//! lengths: its key (held twice, in the entry and in the key index), the kept reply's
//! text (names, message, a payload or result held inline), [`REPLY_FIXED_BYTES`] and
//! [`ENTRY_OVERHEAD_BYTES`]. Not the bincode size of a wire struct, and not allocator
//! figures, which differ between replicas: every replica counts the same total and
//! forgets the same keys. The running total is recomputed from the entries on restore
//! and checked by `check_invariants`.
//!
//! Forgetting, always oldest first and deterministic:
//! 1. at every apply, keys older than the window, then the oldest while the table holds
//!    more than `keys_max` keys or `bytes_max` bytes;
//! 2. after an insert into a scope other than `""`, that scope's own oldest while the
//!    scope is over its quota (a 1/[`IDEMPOTENCY_SCOPE_SHARE`] share of keys and bytes).
//!    So a caller flooding its keys only ever evicts its own. The unscoped scope `""` —
//!    keys of a node without per-caller scoping (no auth file: one tenant), and of log
//!    entries written before scoping — has no quota of its own: there, quota and table
//!    would be the same caller, and a 1/8 cap would only shorten everyone's window.
//!
//! Why sharing with the record rather than other ways (issue 17 item 5 tried some): an
//! `Arc` around equal replies bounds memory but not the snapshot, which wrote every
//! reply in full; a digest alone cannot give the first bytes back. The record already
//! holds the bytes, in memory and in every snapshot, bounded by the job table: the
//! snapshot (format v3) carries the entries as kept, `Shared` included. What one caller
//! can pin (its scope's 8 MiB) and the table (64 MiB) stay bounded, on every replica,
//! and a delete of a record turns its sharers back into full-size entries under the
//! same bounds. May import `command` (the reply), `wire` (the job in it), `limits`
//! (bounds and key scopes) and `machine::Config`, nothing with IO.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::limits::{self, IDEMPOTENCY_SCOPE_SHARE};
use crate::machine::config::Config;
use crate::machine::jobs::indexes::FixedHashMap;
use crate::reply::{Outcome, Reply};
use crate::snapshot::error::Inconsistency;
use crate::version::ClusterVersion;
use crate::wire::Job;

/// What one entry costs beyond its key and its kept reply: the key index's slot, the
/// order map's node share, the scope FIFO's number, the shared index's slot and the
/// entry's fixed fields. A fixed figure (not `size_of`, which differs between builds) so
/// replicas agree.
pub(crate) const ENTRY_OVERHEAD_BYTES: u64 = 256;
/// What a kept reply costs beyond its text (names, message, inline payload and result):
/// its integers, tags and length prefixes — a Job's are about 150 bytes encoded.
pub(crate) const REPLY_FIXED_BYTES: u64 = 256;

/// Where a remembered reply's job has its payload and result when they are left out of
/// the kept reply: in job record `handle`, which holds them unchanged for as long as it
/// exists (a payload is set at submit, a result once at completion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shared {
    pub handle: u64,
    /// The reply's `payload` is the record's (it was not null).
    pub payload: bool,
    /// The reply's `result` is the record's (it was not null; the job was completed).
    pub result: bool,
}

/// What an entry keeps of its first reply.
// Nearly every entry is a `Reply`; boxing it to shrink the rare `BeforeRaise` would add
// an allocation to each.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kept {
    /// The reply, byte for byte once `shared` (if any) is put back from its record.
    Reply {
        reply: Reply,
        shared: Option<Shared>,
    },
    /// Answered by the cluster a backup came from, before `raise_generations` seeded
    /// this one: its generations are no longer current, so a retry answers
    /// `stale_lease`. Only the job the reply was about is kept.
    BeforeRaise { job_id: Option<String> },
    /// A client batch's reply (`Outcome::Batch`, from entry version
    /// [`crate::version::VERSION_BOUNDED_REPLIES`]): each item kept as a single reply is,
    /// sharing its own job's payload (and result) with that job's record (issue 44 item 1:
    /// a batch of 256 claims over 40 KiB payloads kept 10 MiB inline and evicted itself).
    Batch { items: Vec<(Reply, Option<Shared>)> },
}

/// An entry in memory; snapshots carry it as `snapshot::v3::RememberedV3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Remembered {
    pub fingerprint: u64,
    pub recorded_ms: u64,
    pub kept: Kept,
}

/// The job a reply carries: a Job outcome's, or the one an error embeds.
pub(crate) fn job_of(reply: &Reply) -> Option<&Job> {
    match reply {
        Ok(Outcome::Job(j)) => Some(j),
        Err(e) => e.job.as_deref(),
        Ok(_) => None,
    }
}

/// [`job_of`], to change it.
pub(crate) fn job_of_mut(reply: &mut Reply) -> Option<&mut Job> {
    match reply {
        Ok(Outcome::Job(j)) => Some(j),
        Err(e) => e.job.as_deref_mut(),
        Ok(_) => None,
    }
}

/// The job id a reply is about, if it names one.
pub(crate) fn job_id_of(reply: &Reply) -> Option<&str> {
    match reply {
        Ok(Outcome::Lease(l)) => Some(&l.job_id),
        r => job_of(r).map(|j| j.id.as_str()),
    }
}

/// The parts of a reply that can be shared with its job's record: the job's id, its
/// payload, and its result (a Job's; a Lease carries none).
pub(crate) struct Parts<'a> {
    pub id: &'a str,
    pub payload: &'a mut Option<String>,
    pub result: Option<&'a mut Option<String>>,
}

/// The shareable parts of a reply: a Job's (or an error's job), or a Lease's payload.
pub(crate) fn parts_mut(reply: &mut Reply) -> Option<Parts<'_>> {
    match reply {
        Ok(Outcome::Lease(l)) => Some(Parts {
            id: &l.job_id,
            payload: &mut l.payload,
            result: None,
        }),
        r => job_of_mut(r).map(|j| Parts {
            id: &j.id,
            payload: &mut j.payload,
            result: Some(&mut j.result),
        }),
    }
}

/// A reply's shareable parts, to read: the job id, the payload, the result (a Job's).
pub(crate) type PartsRef<'a> = (&'a str, &'a Option<String>, Option<&'a Option<String>>);

/// [`parts_mut`], to read.
pub(crate) fn parts(reply: &Reply) -> Option<PartsRef<'_>> {
    match reply {
        Ok(Outcome::Lease(l)) => Some((&l.job_id, &l.payload, None)),
        r => job_of(r).map(|j| (j.id.as_str(), &j.payload, Some(&j.result))),
    }
}

/// Puts the shared parts back into a kept reply from the record's payload and result.
pub(crate) fn put_back(
    reply: &mut Reply,
    s: Shared,
    payload: Option<&String>,
    result: Option<&String>,
) {
    let parts = parts_mut(reply).expect("a shared reply carries a job or a lease");
    if s.payload {
        *parts.payload = payload.cloned();
    }
    if let (true, Some(r)) = (s.result, parts.result) {
        *r = result.cloned();
    }
}

fn text_len(s: &Option<String>) -> u64 {
    s.as_ref().map_or(0, |s| s.len() as u64)
}

fn job_text_bytes(j: &Job) -> u64 {
    (j.id.len() + j.queue.len()) as u64
        + text_len(&j.owner)
        + text_len(&j.payload)
        + text_len(&j.result)
        // Version 1.1's text: none before it, so a v1 reply counts as it always did.
        + text_len(&j.last_error)
        + text_len(&j.cancel_reason)
        + text_len(&j.progress)
}

/// The text a reply holds: names, message, and the payload and result it holds inline.
fn reply_text_bytes(reply: &Reply) -> u64 {
    match reply {
        Ok(Outcome::Lease(l)) => {
            // A claim's payload and checkpoint (version 1.1) are held inline.
            (l.job_id.len() + l.owner.len()) as u64 + text_len(&l.payload) + text_len(&l.progress)
        }
        Ok(Outcome::Job(j)) => job_text_bytes(j),
        Ok(Outcome::Batch(rs)) => rs
            .iter()
            .map(|r| REPLY_FIXED_BYTES + reply_text_bytes(r))
            .sum(),
        Ok(Outcome::Deleted | Outcome::Empty | Outcome::Ticked | Outcome::Retried(_)) => 0,
        Err(e) => e.message.len() as u64 + e.job.as_deref().map_or(0, job_text_bytes),
    }
}

/// What an entry counts against the table's and its scope's byte bounds: a formula of
/// its fields' lengths — the key twice (entry and index), the kept reply's text plus
/// [`REPLY_FIXED_BYTES`], and [`ENTRY_OVERHEAD_BYTES`]. A payload or result shared with
/// a job record is not counted: the job table owns (and bounds) those bytes.
pub(crate) fn accounted_bytes(key: &str, remembered: &Remembered) -> u64 {
    let kept = match &remembered.kept {
        Kept::Reply { reply, .. } => REPLY_FIXED_BYTES + reply_text_bytes(reply),
        Kept::BeforeRaise { job_id } => job_id.as_ref().map_or(0, |id| id.len() as u64),
        Kept::Batch { items } => {
            let items: u64 = items
                .iter()
                .map(|(r, _)| REPLY_FIXED_BYTES + reply_text_bytes(r))
                .sum();
            REPLY_FIXED_BYTES + items
        }
    };
    2 * key.len() as u64 + kept + ENTRY_OVERHEAD_BYTES
}

/// How many more bytes an entry sharing `s` counts once the shared parts are copied in.
fn shared_len(s: Shared, payload: Option<&String>, result: Option<&String>) -> u64 {
    let len = |on: bool, t: Option<&String>| {
        if on {
            t.map_or(0, |t| t.len() as u64)
        } else {
            0
        }
    };
    len(s.payload, payload) + len(s.result, result)
}

/// The records an entry shares parts with, each once, in handle order.
fn shared_handles(r: &Remembered) -> BTreeSet<u64> {
    match &r.kept {
        Kept::Reply { shared, .. } => shared.iter().map(|s| s.handle).collect(),
        Kept::BeforeRaise { .. } => BTreeSet::new(),
        Kept::Batch { items } => items
            .iter()
            .filter_map(|(_, s)| Some(s.as_ref()?.handle))
            .collect(),
    }
}

/// The replies of an entry that share parts with record `handle`, with what they share.
fn sharing_with(kept: &mut Kept, handle: u64) -> Vec<(&mut Reply, &mut Option<Shared>)> {
    let with = |s: &Option<Shared>| s.is_some_and(|s| s.handle == handle);
    match kept {
        Kept::Reply { reply, shared } if with(shared) => vec![(reply, shared)],
        Kept::Reply { .. } | Kept::BeforeRaise { .. } => Vec::new(),
        Kept::Batch { items } => items
            .iter_mut()
            .filter(|(_, s)| with(s))
            .map(|(r, s)| (r, s))
            .collect(),
    }
}

/// The bounds the table keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub window_ms: u64,
    pub keys_max: usize,
    pub bytes_max: u64,
    pub scope_keys_max: usize,
    pub scope_bytes_max: u64,
    /// From entry version [`ClusterVersion::BoundedReplies`]: a full table or scope refuses a
    /// new key ([`IdempotencyTable::full`]) instead of forgetting a key inside its window.
    /// Before it, the oldest keys were forgotten early (kept for replay: every replica
    /// of an older cluster must forget the same keys).
    pub refuse: bool,
}

impl Bounds {
    /// The config's window and key bound, the byte bounds of `limits` for
    /// `cluster_version`, and whether a full table refuses.
    pub fn of(cfg: &Config, cluster_version: u32) -> Self {
        let refuse = ClusterVersion::BoundedReplies.active_at(cluster_version);
        let bytes_max = if refuse {
            limits::IDEMPOTENCY_BYTES_MAX_REFUSING
        } else {
            limits::IDEMPOTENCY_BYTES_MAX
        };
        Bounds {
            window_ms: cfg.idempotency_window_ms,
            keys_max: cfg.idempotency_keys_max,
            bytes_max,
            scope_keys_max: limits::idempotency_scope_keys_max(cfg.idempotency_keys_max),
            scope_bytes_max: bytes_max / IDEMPOTENCY_SCOPE_SHARE,
            refuse,
        }
    }
}

#[derive(Debug, Clone)]
struct Slot {
    key: String,
    remembered: Remembered,
    bytes: u64,
}

/// One scope's entries (sequence numbers, oldest first) and their accounted bytes.
#[derive(Debug, Clone, Default)]
struct ScopeUse {
    seqs: VecDeque<u64>,
    bytes: u64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct IdempotencyTable {
    /// Sequence number → entry; numbers grow with insertion, which is `recorded_ms`
    /// order. Internal, never serialized.
    order: BTreeMap<u64, Slot>,
    next_seq: u64,
    /// Key → sequence number.
    by_key: FixedHashMap<String, u64>,
    /// Scope → its entries; a scope without entries is removed.
    scopes: FixedHashMap<String, ScopeUse>,
    /// Sum of the entries' accounted bytes.
    bytes: u64,
    /// Job handle → the entries sharing that record's payload or result, to copy them
    /// in before the record goes ([`Self::materialize`]). Iterated in order only.
    shared: BTreeMap<u64, BTreeSet<u64>>,
}

impl IdempotencyTable {
    pub fn get(&self, key: &str) -> Option<&Remembered> {
        let seq = self.by_key.get(key)?;
        Some(&self.order[seq].remembered)
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Accounted bytes of all entries.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Accounted bytes of one scope's entries (`""`: the unscoped keys).
    pub fn scope_bytes(&self, scope: &str) -> u64 {
        self.scopes.get(scope).map_or(0, |u| u.bytes)
    }

    /// The largest scope's accounted bytes (a maximum: the map's order does not matter).
    pub fn largest_scope_bytes(&self) -> u64 {
        self.scopes.values().map(|u| u.bytes).max().unwrap_or(0)
    }

    /// Forgets keys older than the window at `now_ms`, then (before
    /// [`ClusterVersion::BoundedReplies`]) the oldest while the table is over its key or byte
    /// bound.
    pub fn expire(&mut self, now_ms: u64, b: Bounds) {
        while let Some((&seq, slot)) = self.order.first_key_value() {
            let too_old = slot.remembered.recorded_ms.saturating_add(b.window_ms) <= now_ms;
            if !too_old && !self.over(b) {
                break;
            }
            self.forget(seq);
        }
    }

    /// Whether the table must forget its oldest key now: only before
    /// [`ClusterVersion::BoundedReplies`] (after it, a full table refuses new keys instead).
    fn over(&self, b: Bounds) -> bool {
        !b.refuse && (self.order.len() > b.keys_max || self.bytes > b.bytes_max)
    }

    /// Whether a new key `key` must be refused (from [`ClusterVersion::BoundedReplies`]): its
    /// scope holds its quota of keys or bytes, or the table its bound, all inside the
    /// window at `now_ms`. `Some` says in how many ms of store time the oldest key in the
    /// way leaves the window. Apply calls it after forgetting the keys past the window;
    /// a node's early check (between applies) finds the oldest key past the window and
    /// says `None`: the apply decides then.
    pub fn full(&self, key: &str, now_ms: u64, b: Bounds) -> Option<u64> {
        if !b.refuse {
            return None;
        }
        let due = |seq: Option<&u64>| {
            let recorded = self.order[seq?].remembered.recorded_ms;
            let left = recorded.saturating_add(b.window_ms).saturating_sub(now_ms);
            (left > 0).then_some(left)
        };
        let scope = limits::split_idempotency_key(key).0;
        if let Some(used) = self.scopes.get(scope).filter(|_| !scope.is_empty()) {
            if used.seqs.len() >= b.scope_keys_max || used.bytes >= b.scope_bytes_max {
                return due(used.seqs.front());
            }
        }
        if self.order.len() >= b.keys_max || self.bytes >= b.bytes_max {
            return due(self.order.keys().next());
        }
        None
    }

    /// Remembers `key`'s first reply, then (before [`ClusterVersion::BoundedReplies`]) keeps the
    /// bounds: its scope's quota first (so a caller over it loses its own oldest key),
    /// then the table's. After it, the caller checked [`Self::full`] first, so the
    /// table and the scope hold at most one entry past their byte bounds and never more
    /// keys than their bounds.
    pub fn insert(&mut self, key: String, remembered: Remembered, b: Bounds) {
        let now_ms = remembered.recorded_ms;
        let scope = limits::split_idempotency_key(&key).0.to_owned();
        self.push(key, remembered);
        if !scope.is_empty() {
            self.keep_quota(&scope, b);
        }
        self.expire(now_ms, b);
    }

    fn push(&mut self, key: String, remembered: Remembered) {
        debug_assert!(!self.by_key.contains_key(&key), "key inserted twice");
        debug_assert!(self
            .order
            .last_key_value()
            .is_none_or(|(_, s)| s.remembered.recorded_ms <= remembered.recorded_ms));
        let bytes = accounted_bytes(&key, &remembered);
        let seq = self.next_seq;
        self.next_seq += 1;
        let scope = limits::split_idempotency_key(&key).0;
        let used = match self.scopes.get_mut(scope) {
            Some(u) => u,
            None => self.scopes.entry(scope.to_owned()).or_default(),
        };
        used.seqs.push_back(seq);
        used.bytes += bytes;
        self.bytes += bytes;
        for handle in shared_handles(&remembered) {
            self.shared.entry(handle).or_default().insert(seq);
        }
        self.by_key.insert(key.clone(), seq);
        let slot = Slot {
            key,
            remembered,
            bytes,
        };
        self.order.insert(seq, slot);
    }

    /// Forgets `scope`'s oldest keys while it is over its quota (before
    /// [`ClusterVersion::BoundedReplies`] only).
    fn keep_quota(&mut self, scope: &str, b: Bounds) {
        while let Some(used) = self.scopes.get(scope).filter(|_| !b.refuse) {
            if used.seqs.len() <= b.scope_keys_max && used.bytes <= b.scope_bytes_max {
                break;
            }
            let oldest = used.seqs[0];
            self.forget(oldest);
        }
    }

    /// Forgets entry `seq`, which is the oldest of its scope (every removal is).
    fn forget(&mut self, seq: u64) {
        let slot = self.order.remove(&seq).expect("forgotten entry exists");
        self.by_key.remove(&slot.key);
        let scope = limits::split_idempotency_key(&slot.key).0;
        let used = self.scopes.get_mut(scope).expect("scope of an entry");
        assert_eq!(
            used.seqs.pop_front(),
            Some(seq),
            "forgot a scope's newer key"
        );
        used.bytes -= slot.bytes;
        if used.seqs.is_empty() {
            self.scopes.remove(scope);
        }
        self.bytes -= slot.bytes;
        for handle in shared_handles(&slot.remembered) {
            let sharing = self
                .shared
                .get_mut(&handle)
                .expect("shared index of an entry");
            assert!(sharing.remove(&seq), "entry missing from the shared index");
            if sharing.is_empty() {
                self.shared.remove(&handle);
            }
        }
    }

    /// Job record `handle` is going (deleted): every entry sharing its payload or result
    /// gets them copied in from `payload` and `result`, and counts them from now on. The
    /// bounds are kept as after an insert — each grown scope's quota, then the table's,
    /// oldest first (before [`ClusterVersion::BoundedReplies`]; after it nothing inside the
    /// window is forgotten: the grown table refuses new keys until it is back under its
    /// bounds) — and only then are bytes copied, into the entries that stay: a record
    /// shared by many entries never makes a transient copy for each.
    pub fn materialize(
        &mut self,
        handle: u64,
        payload: Option<&String>,
        result: Option<&String>,
        b: Bounds,
    ) {
        let Some(sharing) = self.shared.get(&handle) else {
            return;
        };
        let mut grown = BTreeSet::new();
        for seq in sharing.clone() {
            let slot = self
                .order
                .get_mut(&seq)
                .expect("shared index names an entry");
            let more: u64 = sharing_with(&mut slot.remembered.kept, handle)
                .into_iter()
                .map(|(_, s)| shared_len(s.expect("a sharing reply"), payload, result))
                .sum();
            slot.bytes += more;
            self.bytes += more;
            let scope = limits::split_idempotency_key(&slot.key).0;
            self.scopes.get_mut(scope).expect("scope of an entry").bytes += more;
            grown.insert(scope.to_owned());
        }
        for scope in grown.iter().filter(|s| !s.is_empty()) {
            self.keep_quota(scope, b);
        }
        while self.over(b) {
            let (&oldest, _) = self.order.first_key_value().expect("over means not empty");
            self.forget(oldest);
        }
        for seq in self.shared.remove(&handle).unwrap_or_default() {
            let slot = self
                .order
                .get_mut(&seq)
                .expect("shared index names an entry");
            for (reply, shared) in sharing_with(&mut slot.remembered.kept, handle) {
                let s = shared.take().expect("a sharing reply");
                put_back(reply, s, payload, result);
            }
            debug_assert_eq!(slot.bytes, accounted_bytes(&slot.key, &slot.remembered));
        }
    }

    /// Every entry becomes [`Kept::BeforeRaise`] (a backup seeds a new cluster with its
    /// generations raised): a retry of any of them answers `stale_lease`.
    pub fn mark_before_raise(&mut self, b: Bounds) {
        let entries = std::mem::take(self)
            .order
            .into_values()
            .map(|s| {
                let job_id = match s.remembered.kept {
                    Kept::Reply { reply, .. } => job_id_of(&reply).map(str::to_owned),
                    Kept::BeforeRaise { job_id } => job_id,
                    Kept::Batch { .. } => None,
                };
                let r = Remembered {
                    kept: Kept::BeforeRaise { job_id },
                    ..s.remembered
                };
                (s.key, r)
            })
            .collect();
        *self = Self::from_entries(entries, b).expect("a table's own entries, each smaller");
    }

    /// Entries in insertion order, for snapshots.
    pub fn entries(&self) -> impl Iterator<Item = (&String, &Remembered)> {
        self.order.values().map(|s| (&s.key, &s.remembered))
    }

    /// Rebuilds a table from `entries()`, recounting every entry's bytes; `Err` says why
    /// they can't have come from one. A table written by a build without byte bounds or
    /// quotas may be over them: it is brought within them as it is read, forgetting what
    /// a bounded build would have forgotten (a table within the bounds loses nothing).
    pub fn from_entries(
        entries: Vec<(String, Remembered)>,
        b: Bounds,
    ) -> Result<Self, Inconsistency> {
        if entries.len() > b.keys_max {
            // The key bound is in the config: no build wrote a table over it.
            return Err(Inconsistency::IdempotencyOverBound);
        }
        let mut t = IdempotencyTable::default();
        t.by_key.reserve(entries.len());
        for (k, r) in entries {
            if t.by_key.contains_key(&k) {
                return Err(Inconsistency::KeyTwice(k));
            }
            if t.order
                .last_key_value()
                .is_some_and(|(_, last)| last.remembered.recorded_ms > r.recorded_ms)
            {
                return Err(Inconsistency::KeyOutOfOrder(k));
            }
            let scope = limits::split_idempotency_key(&k).0.to_owned();
            t.push(k, r);
            if !scope.is_empty() {
                t.keep_quota(&scope, b);
                // Refusing, no build lets a scope hold more keys than its quota (`full`).
                let held = t.scopes.get(&scope).map_or(0, |u| u.seqs.len());
                if b.refuse && held > b.scope_keys_max {
                    return Err(Inconsistency::IdempotencyOverBound);
                }
            }
            while t.over(b) {
                let (&oldest, _) = t.order.first_key_value().expect("over means not empty");
                t.forget(oldest);
            }
        }
        Ok(t)
    }

    /// The accounted total recomputed from the entries, not the running figure.
    pub fn recount_bytes(&self) -> u64 {
        self.order
            .values()
            .map(|s| accounted_bytes(&s.key, &s.remembered))
            .sum()
    }

    /// Asserts the indexes, the running totals and every bound. O(entries): the stored
    /// per-entry figures are summed, not recomputed (see [`Self::recount_bytes`]).
    pub fn check_invariants(&self, clock_ms: u64, b: Bounds) {
        assert_eq!(
            self.by_key.len(),
            self.order.len(),
            "idempotency index sizes"
        );
        assert!(!self.over(b), "idempotency table over its bound");
        assert!(
            self.order.len() <= b.keys_max,
            "idempotency keys over their bound"
        );
        let mut prev = 0;
        let mut sharing = 0;
        let mut scopes: FixedHashMap<&str, (Vec<u64>, u64)> = FixedHashMap::default();
        for (&seq, s) in &self.order {
            assert!(seq < self.next_seq, "idempotency number not yet issued");
            assert_eq!(
                self.by_key.get(&s.key),
                Some(&seq),
                "position of {:?}",
                s.key
            );
            let r = &s.remembered;
            assert!(r.recorded_ms >= prev, "idempotency keys out of time order");
            assert!(r.recorded_ms <= clock_ms, "idempotency key from the future");
            assert!(
                r.recorded_ms.saturating_add(b.window_ms) > clock_ms,
                "expired idempotency key kept"
            );
            prev = r.recorded_ms;
            for handle in shared_handles(r) {
                assert!(
                    self.shared
                        .get(&handle)
                        .is_some_and(|set| set.contains(&seq)),
                    "{:?} missing from the shared index",
                    s.key
                );
                sharing += 1;
            }
            let used = scopes
                .entry(limits::split_idempotency_key(&s.key).0)
                .or_default();
            used.0.push(seq);
            used.1 += s.bytes;
        }
        let indexed: usize = self.shared.values().map(BTreeSet::len).sum();
        assert_eq!(indexed, sharing, "shared index size");
        let total: u64 = scopes.values().map(|u| u.1).sum();
        assert_eq!(total, self.bytes, "idempotency bytes total");
        assert_eq!(scopes.len(), self.scopes.len(), "idempotency scopes");
        for (scope, (seqs, bytes)) in scopes {
            let used = &self.scopes[scope];
            assert!(
                used.seqs.iter().eq(seqs.iter()),
                "entries of scope {scope:?}"
            );
            assert_eq!(used.bytes, bytes, "bytes of scope {scope:?}");
            // Refusing, a scope may hold one entry past its byte quota (`full`), or more
            // once a deleted record's parts are copied in (`materialize`); never more keys.
            let bytes_within = b.refuse || bytes <= b.scope_bytes_max;
            let within = used.seqs.len() <= b.scope_keys_max && bytes_within;
            assert!(scope.is_empty() || within, "scope {scope:?} over its quota");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Bounds {
        Bounds {
            window_ms: 1_000,
            keys_max: 100,
            bytes_max: 10 * 1024,
            scope_keys_max: 3,
            scope_bytes_max: 2 * 1024,
            refuse: false,
        }
    }

    fn entry(key: &str, at: u64, pad: usize) -> (String, Remembered) {
        let r = Remembered {
            fingerprint: at,
            recorded_ms: at,
            kept: Kept::Reply {
                reply: Err(crate::wire::ApiError::new(
                    crate::wire::ErrorCode::LeaseHeld,
                    "x".repeat(pad),
                )),
                shared: None,
            },
        };
        (key.to_owned(), r)
    }

    fn keys(t: &IdempotencyTable) -> Vec<&str> {
        t.entries().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn accounted_bytes_are_key_twice_the_text_and_fixed_parts() {
        let (k, r) = entry("s key", 1, 100);
        let fixed = REPLY_FIXED_BYTES + ENTRY_OVERHEAD_BYTES;
        assert_eq!(accounted_bytes(&k, &r), 10 + 100 + fixed);
    }

    #[test]
    fn a_scope_over_its_key_quota_forgets_its_own_oldest() {
        let mut t = IdempotencyTable::default();
        for (i, k) in ["a 1", "u1", "b 1", "a 2", "a 3", "a 4", "u2"]
            .iter()
            .enumerate()
        {
            let (k, r) = entry(k, i as u64, 1);
            t.insert(k, r, small());
            t.check_invariants(i as u64, small());
        }
        assert_eq!(keys(&t), ["u1", "b 1", "a 2", "a 3", "a 4", "u2"]);
        assert_eq!(t.bytes(), t.recount_bytes());
        // Unscoped keys have no quota of their own.
        for i in 0..5 {
            let (k, r) = entry(&format!("u-more{i}"), 10, 1);
            t.insert(k, r, small());
        }
        assert_eq!(t.len(), 11);
        t.check_invariants(10, small());
    }

    #[test]
    fn byte_bounds_forget_oldest_of_the_scope_then_of_the_table() {
        let mut t = IdempotencyTable::default();
        let (k, r) = entry("b 1", 0, 100);
        t.insert(k, r, small());
        for i in 0..10 {
            let (k, r) = entry(&format!("a {i}"), 1, 500);
            t.insert(k, r, small());
            assert!(t.scope_bytes("a") <= small().scope_bytes_max);
        }
        assert_eq!(keys(&t), ["b 1", "a 8", "a 9"]);
        for i in 0..20 {
            let (k, r) = entry(&format!("u{i}"), 2, 700);
            t.insert(k, r, small());
            assert!(t.bytes() <= small().bytes_max);
        }
        // The table's bound forgets the oldest of anyone, oldest first.
        assert!(!keys(&t).contains(&"b 1"));
        assert_eq!(keys(&t).last(), Some(&"u19"));
        t.check_invariants(2, small());
        assert_eq!(t.largest_scope_bytes(), t.scope_bytes(""));
    }

    #[test]
    fn a_refusing_table_never_forgets_and_a_scope_over_its_key_quota_is_refused() {
        let refusing = Bounds {
            refuse: true,
            ..small()
        };
        let mut t = IdempotencyTable::default();
        for i in 0..3 {
            let (k, r) = entry(&format!("a {i}"), i, 1);
            assert_eq!(t.full(&k, i, refusing), None);
            t.insert(k, r, refusing);
        }
        // The quota is full: a new key of the scope is refused until the oldest leaves
        // the window; nothing was forgotten; another scope is not held back.
        assert_eq!(t.full("a 3", 3, refusing), Some(997));
        assert_eq!(t.full("b 0", 3, refusing), None);
        assert_eq!(keys(&t), ["a 0", "a 1", "a 2"]);
        t.check_invariants(3, refusing);
        // An image holding more keys in a scope than its quota cannot come from a build
        // that refuses.
        let over: Vec<_> = (0..4).map(|i| entry(&format!("a {i}"), i, 1)).collect();
        assert_eq!(
            IdempotencyTable::from_entries(over, refusing).unwrap_err(),
            Inconsistency::IdempotencyOverBound
        );
    }

    #[test]
    fn from_entries_brings_an_unbounded_table_within_the_bounds_as_insert_would() {
        let unbounded = Bounds {
            keys_max: usize::MAX,
            bytes_max: u64::MAX,
            scope_keys_max: usize::MAX,
            scope_bytes_max: u64::MAX,
            ..small()
        };
        let all: Vec<_> = (0..40)
            .map(|i| entry(&format!("{}k{i}", ["", "a ", "b "][i % 3]), i as u64, 300))
            .collect();
        // What an old build (no byte bounds, no quotas) would have written.
        let old = IdempotencyTable::from_entries(all.clone(), unbounded).unwrap();
        assert_eq!(old.len(), 40);
        let mut inserted = IdempotencyTable::default();
        for (k, r) in all {
            inserted.insert(
                k,
                r,
                Bounds {
                    window_ms: 1_000_000,
                    ..small()
                },
            );
        }
        let old_entries: Vec<_> = old.entries().map(|(k, r)| (k.clone(), r.clone())).collect();
        let restored = IdempotencyTable::from_entries(old_entries, small()).unwrap();
        assert_eq!(keys(&restored), keys(&inserted));
        assert_eq!(restored.bytes(), restored.recount_bytes());
        restored.check_invariants(39, small());
        // A table within the bounds loses nothing.
        let again: Vec<_> = restored
            .entries()
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        let same = IdempotencyTable::from_entries(again, small()).unwrap();
        assert_eq!(keys(&same), keys(&restored));
    }
}
