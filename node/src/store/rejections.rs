//! The recent rejections feed: the last [`CAPACITY`] client commands the state machine
//! refused (a stale completion fenced off, a lease held by another owner, …), recorded as
//! they are applied. Every replica applies the same log, so every node shows the same
//! feed; it is node-local memory (not in snapshots), so a restarted node starts with the
//! rejections of the log it re-applies. What a refused command names (job, queue, owner,
//! generation) is read from its descriptor (`Command::names`).
//!
//! Scoped (issue 30): a rejection of a scoped command belongs to its caller's tenant
//! scope. A scoped viewer sees only its own tenant's, numbered by a sequence of that
//! tenant's own ([`RecentRejections::view`]), so neither the entries nor the gaps
//! between its numbers tell it anything of other tenants; an unscoped viewer sees all.

use leasehold_statemachine::commands::{ActivateVersion, ActivateVersionIn, Tick};
#[cfg(test)]
use leasehold_statemachine::commands::{Complete, RenewMany};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use leasehold_statemachine::tenant::Scope;
use leasehold_statemachine::{ApiError, Command, Names, Outcome, Reply};
use serde::Serialize;

/// Rejections kept per node.
pub const CAPACITY: usize = 200;

/// One refused command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Rejection {
    /// Increases by one per recorded rejection on this node: a poller asks for `after`.
    pub seq: u64,
    pub log_index: u64,
    /// The entry's stamp (cluster time, ms).
    pub at_ms: u64,
    /// `claim`, `claim_next`, `renew`, `complete`, `release`, `submit`, `delete`.
    pub command: &'static str,
    pub job_id: Option<String>,
    pub queue: Option<String>,
    pub owner: Option<String>,
    /// The generation the caller presented (renew, complete, release).
    pub generation: Option<u64>,
    /// docs/api.md's error code, e.g. `stale_lease`.
    pub code: &'static str,
    pub message: String,
    /// The job's generation when it was refused, if the error carried the job.
    pub current_generation: Option<u64>,
    /// The job's owner when it was refused, if the error carried the job.
    pub current_owner: Option<String>,
    /// The tenant scope of the caller it was refused to, and its number in that tenant's
    /// own sequence.
    #[serde(skip)]
    tenant: Option<(Arc<Scope>, u64)>,
}

#[derive(Debug, Clone, Default)]
pub struct RecentRejections {
    next_seq: u64,
    items: VecDeque<Rejection>,
    /// The last number of each tenant's own sequence.
    tenant_seqs: BTreeMap<Arc<Scope>, u64>,
}

impl RecentRejections {
    /// Records every refusal in `reply` to `command` (each item of a batch on its own, and
    /// each lease of a batch renew or complete under its job id and generation).
    pub fn record(&mut self, log_index: u64, at_ms: u64, command: &Command, reply: &Reply) {
        match (command, reply) {
            (Command::Batch(items), Ok(Outcome::Batch(replies))) => {
                for (item, reply) in items.iter().zip(replies) {
                    self.record(log_index, at_ms, &item.command, reply);
                }
            }
            (command, Ok(Outcome::Batch(replies))) => {
                let names = command.names();
                for (lease, reply) in names.leases.iter().zip(replies) {
                    if let Err(err) = reply {
                        let lease_names = Names {
                            job_id: Some(&lease.job_id),
                            generation: Some(lease.generation),
                            leases: &[],
                            ..names
                        };
                        let at = (log_index, at_ms);
                        self.push(at, command, lease_names, err);
                    }
                }
            }
            // The leader's own entries (a tick, a version activation) are no client's
            // rejection.
            (
                Command::Tick(Tick)
                | Command::ActivateVersion(ActivateVersion { .. })
                | Command::ActivateVersionIn(ActivateVersionIn { .. }),
                _,
            )
            | (_, Ok(_)) => {}
            (command, Err(err)) => self.push((log_index, at_ms), command, command.names(), err),
        }
    }

    /// Records one refusal of `command` (at its entry's index and stamp), naming `names`.
    fn push(
        &mut self,
        (log_index, at_ms): (u64, u64),
        command: &Command,
        names: Names,
        err: &ApiError,
    ) {
        let job = err.job.as_deref();
        let tenant = self.tenant_of(command);
        self.next_seq += 1;
        if self.items.len() == CAPACITY {
            self.items.pop_front();
        }
        self.items.push_back(Rejection {
            seq: self.next_seq,
            log_index,
            at_ms,
            command: command.kind(),
            job_id: names.job_id.map(str::to_owned),
            queue: names.queue.map(str::to_owned),
            owner: names.owner.map(str::to_owned),
            generation: names.generation,
            code: err.code.as_str(),
            message: err.message.clone(),
            current_generation: job.map(|j| j.generation),
            current_owner: job.and_then(|j| j.owner.clone()),
            tenant,
        });
    }

    /// Rejections with `seq > after`, oldest first, at most `limit` of the newest.
    pub fn since(&self, after: u64, limit: usize) -> Vec<Rejection> {
        let newer: Vec<&Rejection> = self.items.iter().filter(|r| r.seq > after).collect();
        let skip = newer.len().saturating_sub(limit);
        newer.into_iter().skip(skip).cloned().collect()
    }

    /// The `seq` of the newest rejection recorded (0: none yet).
    pub fn last_seq(&self) -> u64 {
        self.next_seq
    }

    /// What `viewer` may see: [`Self::since`] and [`Self::last_seq`] for an unscoped
    /// viewer (`None`); for a scoped one, only its tenant's rejections, with `seq`,
    /// `after` and `last_seq` in that tenant's own sequence.
    pub fn view(&self, viewer: Option<&Scope>, after: u64, limit: usize) -> (Vec<Rejection>, u64) {
        let Some(viewer) = viewer else {
            return (self.since(after, limit), self.last_seq());
        };
        let own = |r: &&Rejection| {
            let seq = r
                .tenant
                .as_ref()
                .filter(|(s, _)| **s == *viewer)
                .map(|(_, n)| *n);
            seq.filter(|n| *n > after)
        };
        let newer: Vec<Rejection> = self
            .items
            .iter()
            .filter_map(|r| {
                own(&r).map(|n| Rejection {
                    seq: n,
                    ..r.clone()
                })
            })
            .collect();
        let skip = newer.len().saturating_sub(limit);
        let last = self.tenant_seqs.get(viewer).copied().unwrap_or(0);
        (newer.into_iter().skip(skip).collect(), last)
    }

    /// The tenant a refused command's caller belongs to, and its next number there.
    fn tenant_of(&mut self, command: &Command) -> Option<(Arc<Scope>, u64)> {
        let Command::Scoped(scoped) = command else {
            return None;
        };
        let key = match self.tenant_seqs.get_key_value(&scoped.scope) {
            Some((k, _)) => Arc::clone(k),
            None => Arc::new(scoped.scope.clone()),
        };
        let n = self.tenant_seqs.entry(Arc::clone(&key)).or_insert(0);
        *n += 1;
        Some((key, *n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_statemachine::{ApiError, BatchItem, ErrorCode};

    fn complete(job: &str, generation: u64) -> Command {
        Command::Complete(Complete {
            job_id: job.into(),
            owner: "w".into(),
            generation,
            result: None,
        })
    }

    #[test]
    fn records_refusals_only_and_keeps_the_newest() {
        let mut r = RecentRejections::default();
        let stale = Err(ApiError::new(
            ErrorCode::StaleLease,
            "generation 1 is not current",
        ));
        r.record(5, 100, &complete("a", 1), &stale);
        r.record(6, 110, &complete("a", 2), &Ok(Outcome::Ticked));
        r.record(7, 120, &Command::Tick(Tick), &stale);
        let got = r.since(0, 10);
        assert_eq!(got.len(), 1);
        assert_eq!(
            (
                got[0].seq,
                got[0].code,
                got[0].generation,
                got[0].job_id.as_deref()
            ),
            (1, "stale_lease", Some(1), Some("a"))
        );
        for i in 0..CAPACITY as u64 + 5 {
            r.record(10 + i, 200, &complete("b", i), &stale);
        }
        let all = r.since(0, usize::MAX);
        assert_eq!(all.len(), CAPACITY);
        assert_eq!(all.last().unwrap().seq, r.last_seq());
        assert_eq!(r.since(r.last_seq() - 3, 2).len(), 2);
        assert_eq!(r.since(r.last_seq() - 3, 2)[1].seq, r.last_seq());
    }

    #[test]
    fn a_batch_renews_refused_leases_are_recorded_by_job_and_generation() {
        use leasehold_statemachine::LeaseItem;
        let item = |id: &str, generation| LeaseItem {
            job_id: id.into(),
            generation,
            json: None,
        };
        let cmd = Command::RenewMany(RenewMany {
            owner: "w".into(),
            ttl_ms: None,
            leases: vec![item("a", 1), item("b", 2)],
        });
        let replies = vec![
            Ok(Outcome::Ticked),
            Err(ApiError::new(ErrorCode::StaleLease, "refused")),
        ];
        let mut r = RecentRejections::default();
        r.record(4, 40, &cmd, &Ok(Outcome::Batch(replies)));
        let got = r.since(0, 10);
        assert_eq!(got.len(), 1, "only the refused lease");
        let x = &got[0];
        assert_eq!(
            (
                x.command,
                x.code,
                x.job_id.as_deref(),
                x.generation,
                x.owner.as_deref()
            ),
            ("renew_many", "stale_lease", Some("b"), Some(2), Some("w"))
        );
    }

    #[test]
    fn batch_items_are_recorded_one_by_one() {
        let mut r = RecentRejections::default();
        let items = vec![
            BatchItem {
                idempotency_key: None,
                command: complete("x", 3),
            },
            BatchItem {
                idempotency_key: None,
                command: complete("y", 4),
            },
        ];
        let replies = vec![
            Ok(Outcome::Ticked),
            Err(ApiError::new(ErrorCode::LeaseExpired, "expired")),
        ];
        r.record(9, 1, &Command::Batch(items), &Ok(Outcome::Batch(replies)));
        let got = r.since(0, 10);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].job_id.as_deref(), Some("y"));
        assert_eq!(got[0].code, "lease_expired");
    }

    /// What each kind of refused command shows in the feed (read from its descriptor):
    /// pinned per kind, so the feed stays as it was before descriptors.
    #[test]
    fn every_kind_shows_what_it_names() {
        let stale = Err(ApiError::new(ErrorCode::StaleLease, "refused"));
        let (j, q, o) = (Some("j"), Some("q"), Some("o"));
        for cmd in leasehold_statemachine::commands::one_of_each() {
            let mut r = RecentRejections::default();
            r.record(1, 1, &cmd, &stale);
            let want = match cmd.kind() {
                "submit" => Some((j, q, None, None)),
                "claim" => Some((j, None, o, None)),
                "claim_next" => Some((None, q, o, None)),
                "renew" | "complete" | "release" | "fail" => Some((j, None, o, Some(7))),
                "delete" | "cancel" | "retry" => Some((j, None, None, None)),
                "redrive" => Some((None, q, None, None)),
                "claim_next_many" => Some((None, q, o, None)),
                "renew_many" | "complete_many" => Some((None, None, o, None)),
                "batch" => Some((None, None, None, None)),
                "tick" | "activate_version" => None,
                other => panic!("{other}: say what the feed shows of it"),
            };
            let got = r.since(0, 1).pop().map(|x| {
                assert_eq!((x.command, x.code), (cmd.kind(), "stale_lease"));
                (
                    x.job_id.clone(),
                    x.queue.clone(),
                    x.owner.clone(),
                    x.generation,
                )
            });
            let want = want.map(
                |(j, q, o, g): (Option<&str>, Option<&str>, Option<&str>, _)| {
                    (
                        j.map(str::to_owned),
                        q.map(str::to_owned),
                        o.map(str::to_owned),
                        g,
                    )
                },
            );
            assert_eq!(got, want, "{}", cmd.kind());
        }
    }
}
