//! Snapshots — the whole state, serialized behind a format version byte — and
//! `check_invariants`, which ties the derived indexes to the records.
//!
//! Only records travel; indexes are derived and rebuilt on restore, so a snapshot can
//! never carry an index that disagrees with its records.
//!
//! # Formats are versioned (the rule)
//! What a snapshot carries is written through types of its own, named after the format
//! that introduced them (`v1.rs`: `JobRecordV1`, `ReplyV1`…; `v3.rs`: `RememberedV3`),
//! written from the in-memory types (`JobRecord`, `Remembered`, `wire::Job`) and read
//! back through a chain of images, never the in-memory types themselves: a new field in
//! memory or on the HTTP wire then changes no snapshot byte. The rules, as
//! `node/src/store/wal/format.rs` has for WAL records:
//! - a format, once released, never changes: the same state encodes to the same bytes
//!   (golden images: v3 and v4 in `tests/snapshot_golden.rs`, v5 and v6 in
//!   `tests/snapshot_golden_v5_v6.rs`; v1 and v2, no longer written, decode in the
//!   v1-keyed and v2-raised fixtures);
//! - every released format stays decodable, through a chain of images (as neon's
//!   `control_file_upgrade.rs` chains its safekeeper's formats): [`decode`] dispatches on
//!   the version byte to that format's image (`ImageV1` … `ImageV6`: what its body
//!   decodes to, with the checks only its bytes need — a v2 floor not 0, a cluster
//!   version its format carries); each format's file holds the one step
//!   `From<ImageVN-1> for ImageVN` that upgrades the previous image to its own, [`Chain`]
//!   takes an image step by step to the [`Newest`], and [`image_of`] converts that one
//!   to memory and checks it. An old format's types convert only to the next format's,
//!   so no decoding path bypasses a step, and v1 and v2 images load into today's
//!   machine. Job records are the exception: each format's record converts to a
//!   `JobRecord` as it is read (`v1::JobsV1`: a million records are never held in two
//!   shapes), so every image carries them converted and a step only re-tags them;
//! - a new field, or a new variant of an encoded enum, is a new format version. It joins
//!   the chain at its newest end: a new `vN.rs` with the types that changed, its
//!   `ImageVN` with `decode` and the step `From<ImageVN-1> for ImageVN`; a line in
//!   `chain!`, [`Newest`] and [`image_of`] moved on to `ImageVN`; an arm in [`decode`]
//!   and in [`encode_into`]; and a golden image. Unchanged types are reused from the
//!   version that introduced them.
//! - the writer is told which format to write ([`SnapshotFormat`]): during a rolling
//!   upgrade an old follower installs snapshots a new leader wrote, so a new format is
//!   written only once every node can read it — the machine writes the oldest format
//!   that carries its state ([`SnapshotFormat::for_cluster_version`]): v3 until an
//!   activation raised the cluster version (`version.rs`), v4 at cluster versions 2
//!   and 3, v5 at 4 (docs/api.md's version 1.1), v6 from 5 (events) on.

use std::collections::BTreeMap;
use std::sync::Arc;

use bincode::Options;

use crate::idempotency::{Bounds, IdempotencyTable, Remembered};
use crate::machine::{EventLog, History, JobRecord, Jobs, LeaseMachine, Place};
use crate::version::ClusterVersion;

mod v1;
mod v3;
mod v5;
mod v6;

pub(crate) mod body;
use body::{Header, ImageRef};
pub(crate) mod error;
pub(crate) mod format;
pub use error::{Inconsistency, SnapshotError};
pub use format::{
    SnapshotFormat, SNAPSHOT_FORMAT_V1, SNAPSHOT_FORMAT_V2, SNAPSHOT_FORMAT_V3, SNAPSHOT_FORMAT_V4,
    SNAPSHOT_FORMAT_V5, SNAPSHOT_FORMAT_V6,
};

impl SnapshotFormat {
    /// The format a machine at `cluster_version` writes
    /// ([`ClusterVersion::snapshot_format`]).
    pub fn for_cluster_version(cluster_version: u32) -> SnapshotFormat {
        ClusterVersion::snapshot_format(cluster_version)
    }
}

/// Everything a snapshot carries, in memory: what `restore` decodes, and what a
/// [`SnapshotSource`] holds.
#[derive(Debug, Clone)]
struct Image {
    header: Header,
    jobs: BTreeMap<u64, Arc<JobRecord>>,
    tombstones: BTreeMap<String, u64>,
    idempotency: Vec<(String, Remembered)>,
    generation_floor: u64,
    cluster_version: u32,
    /// The event state; the live jobs' histories are in their records.
    events: EventLog,
}

/// The records of a machine at one instant, detached from it: taking one costs a walk
/// of the job table's keys (records are shared, and the machine copies a record it
/// writes while a source still holds it) and a copy of the idempotency entries (small:
/// a job's payload and result are shared with its record), so a node can encode a
/// million-job snapshot without holding off applies for the whole encoding.
#[derive(Debug, Clone)]
pub struct SnapshotSource {
    image: Image,
}

impl SnapshotSource {
    /// [`LeaseMachine::digest`] as of the instant this was taken.
    pub fn digest(&self) -> u64 {
        crate::hash::fnv1a(&self.encode())
    }

    /// Exactly the bytes [`LeaseMachine::snapshot`] gave at the instant this was taken.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out).expect("state always encodes");
        out
    }

    /// [`Self::encode`] into a writer (a file), without the whole image in memory.
    pub fn encode_into<W: std::io::Write>(&self, w: W) -> bincode::Result<()> {
        let format = SnapshotFormat::for_cluster_version(self.image.cluster_version);
        self.encode_as(format, w)
    }

    /// [`Self::encode_into`] in format `format`.
    pub fn encode_as<W: std::io::Write>(
        &self,
        format: SnapshotFormat,
        w: W,
    ) -> bincode::Result<()> {
        encode_into(format, &self.image_ref(), w)
    }

    /// What the format encoders read: the image, borrowed.
    fn image_ref(&self) -> ImageRef<'_> {
        let i = &self.image;
        ImageRef {
            header: i.header,
            jobs: &i.jobs,
            tombstones: &i.tombstones,
            idempotency: i.idempotency.iter().map(|(k, r)| (k, r)).collect(),
            generation_floor: i.generation_floor,
            cluster_version: i.cluster_version,
            events: &i.events,
        }
    }
}

/// The version byte of `format`, then the image in it.
fn encode_into<W: std::io::Write>(
    format: SnapshotFormat,
    image: &ImageRef<'_>,
    mut w: W,
) -> bincode::Result<()> {
    if format < SnapshotFormat::for_cluster_version(image.cluster_version) {
        let why = format!(
            "format {format:?} cannot carry cluster version {}",
            image.cluster_version
        );
        return Err(Box::new(bincode::ErrorKind::Custom(why)));
    }
    w.write_all(&[format.version()])?;
    match format {
        SnapshotFormat::V3 => v3::encode_into(image, w),
        SnapshotFormat::V4 => {
            v3::encode_into(image, &mut w)?;
            bincode::serialize_into(w, &image.cluster_version)
        }
        SnapshotFormat::V5 => v5::encode_into(image, w),
        SnapshotFormat::V6 => {
            v5::encode_into(image, &mut w)?;
            v6::encode_into(image, w)
        }
    }
}

/// The image in a snapshot body of format `version`: decoded into that format's image,
/// upgraded one format at a time to the [`Newest`] ([`Chain`]), converted to memory.
fn decode(version: u8, body: &[u8], options: impl Options) -> Result<Image, SnapshotError> {
    let newest = match version {
        SNAPSHOT_FORMAT_V1 => v1::ImageV1::decode(body, options)?.newest(),
        SNAPSHOT_FORMAT_V2 => v1::ImageV2::decode(body, options)?.newest(),
        SNAPSHOT_FORMAT_V3 => v3::ImageV3::decode(body, options)?.newest(),
        SNAPSHOT_FORMAT_V4 => v3::ImageV4::decode(body, options)?.newest(),
        SNAPSHOT_FORMAT_V5 => v5::ImageV5::decode(body, options)?.newest(),
        SNAPSHOT_FORMAT_V6 => v6::ImageV6::decode(body, options)?.newest(),
        _ => return Err(SnapshotError::UnknownVersion(version)),
    };
    image_of(newest)
}

/// The newest format's image: every image upgrades to it ([`Chain`]), and it converts to
/// the in-memory [`Image`] ([`image_of`]).
type Newest = v6::ImageV6;

/// An image that upgrades to the [`Newest`], one format at a time.
trait Chain {
    fn newest(self) -> Newest;
}

impl Chain for Newest {
    fn newest(self) -> Newest {
        self
    }
}

/// `old => new`: one step of the chain, the `From<old>` in `new`'s file, then on from
/// `new`.
macro_rules! chain {
    ($($old:ty => $new:ty,)*) => {
        $(impl Chain for $old {
            fn newest(self) -> Newest {
                <$new>::from(self).newest()
            }
        })*
    };
}

// The chain, oldest first.
chain! {
    v1::ImageV1 => v1::ImageV2,
    v1::ImageV2 => v3::ImageV3,
    v3::ImageV3 => v3::ImageV4,
    v3::ImageV4 => v5::ImageV5,
    v5::ImageV5 => v6::ImageV6,
}

/// The newest image in memory, checked in this order: the event state, the records as
/// they were read, each live job's history against its record.
fn image_of(newest: Newest) -> Result<Image, SnapshotError> {
    let (events, histories) = newest.events.restore()?;
    let state = newest.state;
    if let Some(why) = state.jobs.inconsistency {
        return Err(why.into());
    }
    // Sorted already: built in bulk. A handle written twice keeps its last record, as a
    // map decoded entry by entry did.
    let mut jobs: BTreeMap<u64, Arc<JobRecord>> = state.jobs.jobs.into_iter().collect();
    attach_histories(&mut jobs, &events, histories)?;
    let idempotency = state
        .idempotency
        .into_iter()
        .map(|(k, r)| (k, r.into()))
        .collect();
    Ok(Image {
        header: state.header.into(),
        jobs,
        tombstones: state.tombstones,
        idempotency,
        generation_floor: newest.floor,
        cluster_version: newest.cluster_version,
        events,
    })
}

/// Puts each live job's history into its record; a history for no job, or a live id
/// whose history is also among the deleted ones, is refused.
fn attach_histories(
    jobs: &mut BTreeMap<u64, Arc<JobRecord>>,
    events: &EventLog,
    histories: Vec<(u64, History)>,
) -> Result<(), Inconsistency> {
    for (handle, history) in histories {
        let rec = jobs
            .get_mut(&handle)
            .ok_or_else(|| Inconsistency::BadHistory(format!("handle {handle}")))?;
        Arc::make_mut(rec).set_history(history);
    }
    match jobs.values().find(|r| events.graveyard.contains_key(&r.id)) {
        Some(r) => Err(Inconsistency::BadHistory(r.id.clone())),
        None => Ok(()),
    }
}

impl LeaseMachine {
    fn header(&self) -> Header {
        Header {
            config: self.config,
            clock_ms: self.clock_ms,
            term: self.term,
            last_log_index: self.last_log_index,
            next_handle: self.next_handle,
            grace_applied: self.grace_applied,
        }
    }

    /// The records as of now, to [`SnapshotSource::encode`] later (elsewhere).
    pub fn snapshot_source(&self) -> SnapshotSource {
        let image = Image {
            header: self.header(),
            jobs: self.jobs.records().clone(),
            tombstones: self.tombstones.clone(),
            idempotency: self
                .idempotency
                .entries()
                .map(|(k, r)| (k.clone(), r.clone()))
                .collect(),
            generation_floor: self.generation_floor,
            cluster_version: self.cluster_version,
            events: self.jobs.events().clone(),
        };
        SnapshotSource { image }
    }

    /// The whole state as bytes in the format its cluster version calls for:
    /// `[SNAPSHOT_FORMAT_V3] ++ bincode(state) ++ bincode(generation floor)`, and v4 (the
    /// cluster version after it) once an activation raised it.
    pub fn snapshot(&self) -> Vec<u8> {
        self.snapshot_as(SnapshotFormat::for_cluster_version(self.cluster_version))
    }

    /// The whole state as bytes in format `format`.
    pub fn snapshot_as(&self, format: SnapshotFormat) -> Vec<u8> {
        let image = ImageRef {
            header: self.header(),
            jobs: self.jobs.records(),
            tombstones: &self.tombstones,
            idempotency: self.idempotency.entries().collect(),
            generation_floor: self.generation_floor,
            cluster_version: self.cluster_version,
            events: self.jobs.events(),
        };
        let mut out = Vec::new();
        encode_into(format, &image, &mut out).expect("state always encodes");
        out
    }

    /// A fingerprint of the whole state (FNV-1a of `snapshot()`): two replicas that
    /// applied the same log have the same digest. For tests and checks, not for speed.
    pub fn digest(&self) -> u64 {
        crate::hash::fnv1a(&self.snapshot())
    }

    /// Rebuilds a machine from `snapshot()` bytes (any format this build reads),
    /// indexes included.
    pub fn restore(bytes: &[u8]) -> Result<LeaseMachine, SnapshotError> {
        let (&version, body) = bytes.split_first().ok_or(SnapshotError::Empty)?;
        // The encoding of `bincode::serialize_into`, but bytes left over are an error, not
        // silently ignored: they mean the input is not (only) a snapshot.
        let options = bincode::DefaultOptions::new()
            .with_fixint_encoding()
            .reject_trailing_bytes();
        let image = decode(version, body, options)?;
        let h = image.header;
        let mut m = LeaseMachine::new(h.config);
        m.clock_ms = h.clock_ms;
        m.term = h.term;
        m.last_log_index = h.last_log_index;
        m.next_handle = h.next_handle;
        m.grace_applied = h.grace_applied;
        m.tombstones = image.tombstones;
        m.generation_floor = image.generation_floor;
        m.cluster_version = image.cluster_version;
        m.idempotency = IdempotencyTable::from_entries(
            image.idempotency,
            Bounds::of(&h.config, image.cluster_version),
        )?;
        for (&handle, rec) in &image.jobs {
            if handle >= m.next_handle {
                return Err(Inconsistency::IndexedTwice(rec.id.clone()).into());
            }
            m.check_restored_record(rec)?;
        }
        m.jobs = Jobs::restore(image.jobs, image.events).map_err(Inconsistency::IndexedTwice)?;
        m.check_restored_idempotency()?;
        Ok(m)
    }

    /// What `check_invariants` asserts of one record, as an error: a snapshot comes from
    /// a peer or the disk, so a record breaking an invariant is bad input, not a bug
    /// (found by fuzzing `restore`, issue 7 part 6). (A closed job that is leased does
    /// not even convert: `JobRecordV1`.)
    fn check_restored_record(&self, rec: &JobRecord) -> Result<(), Inconsistency> {
        let id = || rec.id.clone();
        if self.tombstones.contains_key(&rec.id) {
            return Err(Inconsistency::LiveTombstoned(id()));
        }
        if rec.generation < rec.attempts {
            return Err(Inconsistency::AttemptsOverGenerations(id()));
        }
        if rec.max_attempts.is_some_and(|max| rec.attempts > max) {
            return Err(Inconsistency::AttemptsOverMax(id()));
        }
        match rec.place() {
            Place::Leased { until_ms } if until_ms <= self.clock_ms => {
                Err(Inconsistency::ExpiredLease(id()))
            }
            Place::Scheduled { due_ms } if due_ms <= self.clock_ms => {
                Err(Inconsistency::DueNotReady(id()))
            }
            _ => Ok(()),
        }
    }
    /// The idempotency table's bounds against the restored clock and config.
    fn check_restored_idempotency(&self) -> Result<(), Inconsistency> {
        let cfg = self.config;
        if self.idempotency.len() > cfg.idempotency_keys_max {
            return Err(Inconsistency::IdempotencyOverBound);
        }
        for (key, r) in self.idempotency.entries() {
            if r.recorded_ms > self.clock_ms {
                return Err(Inconsistency::KeyFromFuture(key.clone()));
            }
            if r.recorded_ms.saturating_add(cfg.idempotency_window_ms) <= self.clock_ms {
                return Err(Inconsistency::ExpiredKeyKept(key.clone()));
            }
            if !self.shared_ok(r) {
                return Err(Inconsistency::SharedNotHeld(key.clone()));
            }
        }
        Ok(())
    }

    /// Panics when an index or a count disagrees with the records' places: that is a
    /// bug, never an input error. Run after every apply in debug builds and by the
    /// property tests.
    pub fn check_invariants(&self) {
        for (&handle, rec) in self.jobs.records() {
            assert!(handle < self.next_handle, "handle {handle} not yet issued");
            assert!(
                !self.tombstones.contains_key(&rec.id),
                "live job {} tombstoned",
                rec.id
            );
            assert!(rec.generation >= rec.attempts, "attempts beyond generation");
            if let Some(m) = rec.max_attempts {
                assert!(
                    rec.attempts <= m,
                    "attempts beyond max_attempts for {}",
                    rec.id
                );
            }
            match rec.place() {
                Place::Leased { until_ms } => assert!(
                    until_ms > self.clock_ms,
                    "expired lease of {} not settled",
                    rec.id
                ),
                Place::Scheduled { due_ms } => {
                    assert!(due_ms > self.clock_ms, "due job {} not made ready", rec.id)
                }
                Place::Ready { priority, .. } => assert_eq!(
                    priority, rec.life.priority,
                    "ready job {} out of its priority",
                    rec.id
                ),
                Place::Closed(_) => {}
            }
        }
        self.jobs.check();
        self.idempotency.check_invariants(
            self.clock_ms,
            Bounds::of(&self.config, self.cluster_version),
        );
        for (key, r) in self.idempotency.entries() {
            assert!(self.shared_ok(r), "{key:?} shares what no record holds");
        }
    }
}
