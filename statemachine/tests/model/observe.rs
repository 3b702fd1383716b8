//! What the harness watches besides model agreement: docs/design.md's history
//! invariants on the machine's replies alone ([`History`]), and what the random
//! sequences reached ([`Coverage`]), so the properties are known not to be vacuous.

use leasehold_statemachine::commands::{
    ActivateVersion, Cancel, Claim, ClaimNext, Complete, Delete, Fail, Release, ReleaseWith, Renew,
    RenewWith, Retry,
};
use std::collections::BTreeMap;

use leasehold_statemachine::{Command, Entry, ErrorCode, JobState, Outcome, Reply};

use crate::mjob::St;
use crate::reference::Model;

/// docs/design.md's history invariants, checked on the machine's replies alone.
#[derive(Default)]
pub struct History {
    /// Per job id: the newest generation a fresh claim granted, and whether it completed.
    granted: BTreeMap<String, u64>,
    completed: BTreeMap<String, bool>,
}

impl History {
    pub fn observe(&mut self, index: u64, entry: &Entry, reply: &Reply) {
        let fresh = |log_index: u64| log_index == index;
        match (&entry.command, reply) {
            (
                Command::Claim(Claim { .. }) | Command::ClaimNext(ClaimNext { .. }),
                Ok(Outcome::Lease(l)),
            ) if fresh(l.log_index) => {
                if let Some(prev) = self.granted.get(&l.job_id) {
                    assert_eq!(
                        l.generation,
                        prev + 1,
                        "generation skipped or granted twice"
                    );
                }
                assert!(!self.completed.get(&l.job_id).copied().unwrap_or(false));
                self.granted.insert(l.job_id.clone(), l.generation);
            }
            (
                Command::Renew(Renew { .. }) | Command::RenewWith(RenewWith { .. }),
                Ok(Outcome::Lease(l)),
            ) if fresh(l.log_index) => {
                let current = self.granted.get(&l.job_id);
                assert_eq!(Some(&l.generation), current, "renew of an old token");
            }
            (Command::Complete(Complete { .. }), Ok(Outcome::Job(j))) if fresh(j.log_index) => {
                let current = self.granted.get(&j.id);
                assert_eq!(Some(&j.generation), current, "complete of an old token");
                let was = self.completed.insert(j.id.clone(), true);
                assert_ne!(was, Some(true), "completed twice");
            }
            (
                Command::Release(Release { .. })
                | Command::ReleaseWith(ReleaseWith { .. })
                | Command::Fail(Fail { .. }),
                Ok(Outcome::Job(j)),
            ) if fresh(j.log_index) => {
                let current = self.granted.get(&j.id);
                assert_eq!(
                    Some(&j.generation),
                    current,
                    "release or fail of an old token"
                );
            }
            (Command::Retry(Retry { .. }), Ok(Outcome::Job(j))) if fresh(j.log_index) => {
                let current = self.granted.get(&j.id).copied().unwrap_or(0);
                assert_eq!(j.generation, current, "a retry keeps the generation");
            }
            (Command::Delete(Delete { job_id }), Ok(Outcome::Deleted)) => {
                // A re-created job continues above the deleted one's generation, so
                // `granted` stays; only completion starts afresh.
                self.completed.remove(job_id);
            }
            _ => {}
        }
    }
}

/// What the driver saw before an apply.
pub struct Before {
    pub clock: u64,
    /// lease_until of the targeted job, when it has had a lease.
    pub until: Option<u64>,
    /// The entry resends an earlier (key, command) pair that the model no longer holds.
    pub keyed_replay_possible: bool,
    /// The cluster version was 1.1 before the entry.
    pub v1_1: bool,
}

/// What the random sequences reached, for the coverage test.
#[derive(Default)]
pub struct Coverage {
    pub seen: BTreeMap<&'static str, u64>,
}

impl Coverage {
    pub fn hit(&mut self, what: &'static str) {
        *self.seen.entry(what).or_default() += 1;
    }

    pub fn note(&mut self, before: &Before, index: u64, entry: &Entry, reply: &Reply) {
        if entry.stamp_ms < before.clock {
            self.hit("stamp_behind_store_time");
        }
        if matches!(
            entry.command,
            Command::ActivateVersion(ActivateVersion { .. })
        ) && !before.v1_1
        {
            self.hit("activated_during_sequence");
        }
        match reply {
            Ok(o) => {
                self.hit(match o {
                    Outcome::Lease(_) => "ok:lease",
                    Outcome::Job(_) => "ok:job",
                    Outcome::Deleted => "ok:deleted",
                    Outcome::Empty => "ok:empty",
                    Outcome::Ticked => "ok:ticked",
                    Outcome::Batch(_) => "ok:batch",
                    Outcome::Retried(_) => "ok:retried",
                });
                self.note_ok(before, index, entry, o);
            }
            Err(e) => {
                self.hit(e.code.as_str());
                let at_until = before
                    .until
                    .is_some_and(|u| entry.stamp_ms == u && u >= before.clock);
                if e.code == ErrorCode::LeaseExpired && at_until {
                    self.hit("expired_exactly_at_lease_until");
                }
            }
        }
        if before.keyed_replay_possible && entry.idempotency_key.is_some() {
            self.note_forgotten(index, entry, reply);
        }
    }

    fn note_ok(&mut self, before: &Before, index: u64, entry: &Entry, o: &Outcome) {
        let log_index = match o {
            Outcome::Lease(l) => Some(l.log_index),
            Outcome::Job(j) => Some(j.log_index),
            _ => None,
        };
        if log_index.is_some_and(|i| i < index) && entry.idempotency_key.is_some() {
            self.hit("replayed");
        }
        let just_before = before
            .until
            .is_some_and(|u| entry.stamp_ms + 1 == u && entry.stamp_ms >= before.clock);
        let holder_op = matches!(
            entry.command,
            Command::Renew(Renew { .. })
                | Command::RenewWith(RenewWith { .. })
                | Command::Complete(Complete { .. })
                | Command::Release(Release { .. })
                | Command::ReleaseWith(ReleaseWith { .. })
                | Command::Fail(Fail { .. })
        );
        if holder_op && just_before && log_index == Some(index) {
            self.hit("live_one_ms_before_lease_until");
        }
        if log_index == Some(index) {
            self.note_lifecycle(before, entry, o);
        }
        if let Outcome::Retried(n) = o {
            self.hit(if *n > 0 {
                "redrive_retried_some"
            } else {
                "redrive_retried_none"
            });
        }
    }

    /// A fresh reply's version 1.1 cases.
    fn note_lifecycle(&mut self, before: &Before, entry: &Entry, o: &Outcome) {
        match (&entry.command, o) {
            (Command::ClaimNext(ClaimNext { .. }), Outcome::Lease(l)) if l.generation > 1 => {
                self.hit("claim_next_of_expired_lease");
            }
            (Command::Claim(Claim { .. }), Outcome::Lease(l)) if !before.v1_1 => {
                assert_eq!((&l.payload, l.attempts), (&None, None), "a v1 claim");
                self.hit("v1_claim_without_claim_fields");
            }
            (
                Command::Renew(Renew { .. }) | Command::RenewWith(RenewWith { .. }),
                Outcome::Lease(l),
            ) if l.cancel_requested => {
                self.hit("renew_told_of_cancel");
            }
            (
                Command::Release(Release { .. }) | Command::ReleaseWith(ReleaseWith { .. }),
                Outcome::Job(j),
            ) if j.state == JobState::Cancelled => {
                self.hit("release_carried_out_cancel");
            }
            (Command::Cancel(Cancel { .. }), Outcome::Job(j)) if j.cancel_requested => {
                self.hit("cancel_requested_of_leased");
            }
            _ => {}
        }
        if let Outcome::Lease(l) = o {
            if l.progress.is_some() {
                self.hit("progress_handed_to_next_claim");
            }
        }
    }

    fn note_forgotten(&mut self, index: u64, entry: &Entry, reply: &Reply) {
        let fresh = match reply {
            Ok(Outcome::Lease(l)) => l.log_index == index,
            Ok(Outcome::Job(j)) => j.log_index == index,
            _ => false,
        };
        if fresh {
            self.hit("key_forgotten");
            if entry
                .idempotency_key
                .as_ref()
                .is_some_and(|k| k.contains(' '))
            {
                self.hit("scoped_key_forgotten");
            }
        }
    }

    /// The model's own hits, and the leases whose end carried out a cancel since the
    /// last stamp (`before.clock`).
    pub fn note_model(&mut self, before: &Before, model: &mut Model) {
        for what in model.hits.drain(..) {
            *self.seen.entry(what).or_default() += 1;
        }
        let cancelled_at_end = model.jobs.values().any(|j| {
            let ended = j.lease_until > before.clock && j.lease_until <= model.clock;
            j.status == St::Open && j.leased && j.cancel_requested && ended
        });
        if cancelled_at_end {
            self.hit("cancelled_at_lease_end");
        }
        if model.stats().scheduled > 0 {
            self.hit("scheduled_jobs");
        }
    }
}
