//! How docs/api.md's request bodies become commands (`into_command`), for the node that
//! proposes them and the client that checks them before sending: each picks the
//! command's form (a release with a delay is a `ReleaseWith`) and validates it whole, as
//! `apply` will. And the version activation the leader builds ([`activation`]).
//!
//! Above the list (`list.rs`): imports it, the command files and the wire's requests.

use crate::commands::activate::{ActivateVersion, ActivateVersionIn, MembershipMark};
use crate::commands::cancel::Cancel;
use crate::commands::claim::Claim;
use crate::commands::claim_next::ClaimNext;
use crate::commands::claim_next_many::ClaimNextMany;
use crate::commands::complete::Complete;
use crate::commands::complete_many::CompleteMany;
use crate::commands::fail::Fail;
use crate::commands::lease_item::LeaseItem;
use crate::commands::list::Command;
use crate::commands::redrive::Redrive;
use crate::commands::release::{Release, ReleaseWith};
use crate::commands::renew::{Renew, RenewWith};
use crate::commands::renew_many::RenewMany;
use crate::commands::retry::Retry;
use crate::commands::submit::{Submit, SubmitWith};
use crate::limits;
use crate::version::ClusterVersion;
use crate::wire::{
    json_text, ApiError, CancelRequest, ClaimNextRequest, ClaimRequest, CompleteLeasesRequest,
    CompleteRequest, FailRequest, RedriveRequest, ReleaseRequest, RenewLeasesRequest, RenewRequest,
    RetryRequest, SubmitRequest,
};

/// The request (docs/api.md) as this command, in the form its fields need.
impl CancelRequest {
    pub fn into_command(self, job_id: &str) -> Result<Command, ApiError> {
        let cmd = Command::Cancel(Cancel {
            job_id: job_id.to_owned(),
            reason: self.reason,
        });
        cmd.validate()?;
        Ok(cmd)
    }
}

/// The request (docs/api.md) as this command, in the form its fields need.
impl ClaimRequest {
    pub fn into_command(self, job_id: &str) -> Result<Command, ApiError> {
        let cmd = Command::Claim(Claim {
            job_id: job_id.to_owned(),
            owner: self.owner,
            ttl_ms: self.ttl_ms,
        });
        cmd.validate()?;
        Ok(cmd)
    }
}

/// The request (docs/api.md) as this command, in the form its fields need.
impl ClaimNextRequest {
    /// The command, and how long (ms) to wait for a claimable job.
    pub fn into_command(self, queue: &str) -> Result<(Command, u64), ApiError> {
        let wait_ms = self.wait_ms.unwrap_or(0);
        limits::validate_wait_ms(wait_ms)?;
        let (queue, owner, ttl_ms) = (queue.to_owned(), self.owner, self.ttl_ms);
        let cmd = match self.max_jobs {
            None => Command::ClaimNext(ClaimNext {
                queue,
                owner,
                ttl_ms,
            }),
            Some(max_jobs) => Command::ClaimNextMany(ClaimNextMany {
                queue,
                owner,
                ttl_ms,
                max_jobs,
            }),
        };
        cmd.validate()?;
        Ok((cmd, wait_ms))
    }
}

/// The request (docs/api.md) as this command, in the form its fields need.
impl CompleteRequest {
    pub fn into_command(self, job_id: &str) -> Result<Command, ApiError> {
        let cmd = Command::Complete(Complete {
            job_id: job_id.to_owned(),
            owner: self.owner,
            generation: self.generation,
            result: json_text("result", self.result)?,
        });
        cmd.validate()?;
        Ok(cmd)
    }
}

/// The request (docs/api.md) as this command, in the form its fields need.
impl CompleteLeasesRequest {
    pub fn into_command(self) -> Result<Command, ApiError> {
        let leases = self.leases.into_iter().enumerate();
        let cmd = Command::CompleteMany(CompleteMany {
            owner: self.owner,
            leases: leases
                .map(|(i, l)| {
                    LeaseItem::from_request(i, "result", l.job_id, l.generation, l.result)
                })
                .collect::<Result<_, _>>()?,
        });
        cmd.validate()?;
        Ok(cmd)
    }
}

/// The request (docs/api.md) as this command, in the form its fields need.
impl FailRequest {
    pub fn into_command(self, job_id: &str) -> Result<Command, ApiError> {
        let cmd = Command::Fail(Fail {
            job_id: job_id.to_owned(),
            owner: self.owner,
            generation: self.generation,
            error: self.error,
        });
        cmd.validate()?;
        Ok(cmd)
    }
}

/// The request (docs/api.md) as this command, in the form its fields need.
impl RedriveRequest {
    pub fn into_command(self, queue: &str) -> Result<Command, ApiError> {
        let cmd = Command::Redrive(Redrive {
            queue: queue.to_owned(),
            limit: self.limit.unwrap_or(limits::REDRIVE_LIMIT_DEFAULT),
        });
        cmd.validate()?;
        Ok(cmd)
    }
}

/// The request (docs/api.md) as this command, in the form its fields need.
impl ReleaseRequest {
    /// A v1 release without version 1.1's fields (or with `retry: false` alone), else a
    /// `ReleaseWith` (entry version 4).
    pub fn into_command(self, job_id: &str) -> Result<Command, ApiError> {
        let (job_id, owner, generation) = (job_id.to_owned(), self.owner, self.generation);
        let retry = self.retry.unwrap_or(false);
        let cmd = if self.delay_ms.is_none() && !retry && self.error.is_none() {
            Command::Release(Release {
                job_id,
                owner,
                generation,
            })
        } else {
            Command::ReleaseWith(ReleaseWith {
                job_id,
                owner,
                generation,
                delay_ms: self.delay_ms,
                retry,
                error: self.error,
            })
        };
        cmd.validate()?;
        Ok(cmd)
    }
}

/// The request (docs/api.md) as this command, in the form its fields need.
impl RenewRequest {
    /// A v1 renew without `progress`, else a `RenewWith` (entry version 4).
    pub fn into_command(self, job_id: &str) -> Result<Command, ApiError> {
        let job_id = job_id.to_owned();
        let (owner, generation, ttl_ms) = (self.owner, self.generation, self.ttl_ms);
        let cmd = match json_text("progress", self.progress)? {
            None => Command::Renew(Renew {
                job_id,
                owner,
                generation,
                ttl_ms,
            }),
            progress => Command::RenewWith(RenewWith {
                job_id,
                owner,
                generation,
                ttl_ms,
                progress,
            }),
        };
        cmd.validate()?;
        Ok(cmd)
    }
}

/// The request (docs/api.md) as this command, in the form its fields need.
impl RenewLeasesRequest {
    pub fn into_command(self) -> Result<Command, ApiError> {
        let leases = self.leases.into_iter().enumerate();
        let cmd = Command::RenewMany(RenewMany {
            owner: self.owner,
            ttl_ms: self.ttl_ms,
            leases: leases
                .map(|(i, l)| {
                    LeaseItem::from_request(i, "progress", l.job_id, l.generation, l.progress)
                })
                .collect::<Result<_, _>>()?,
        });
        cmd.validate()?;
        Ok(cmd)
    }
}

/// The request (docs/api.md) as this command, in the form its fields need.
impl RetryRequest {
    pub fn into_command(self, job_id: &str) -> Result<Command, ApiError> {
        let cmd = Command::Retry(Retry {
            job_id: job_id.to_owned(),
            run_at_ms: self.run_at_ms,
        });
        cmd.validate()?;
        Ok(cmd)
    }
}

/// The request (docs/api.md) as this command, in the form its fields need.
impl SubmitRequest {
    /// A v1 submit when none of version 1.1's fields is given (any cluster applies it),
    /// else a `SubmitWith` (entry version 4).
    pub fn into_command(self) -> Result<Command, ApiError> {
        let queue = self
            .queue
            .unwrap_or_else(|| limits::QUEUE_DEFAULT.to_owned());
        let payload = json_text("payload", self.payload)?;
        let v1_1 = self.run_at_ms.is_some()
            || self.priority.is_some()
            || self.backoff_ms.is_some()
            || self.backoff_ms_max.is_some();
        let cmd = if v1_1 {
            Command::SubmitWith(SubmitWith {
                id: self.id,
                queue,
                payload,
                max_attempts: self.max_attempts,
                run_at_ms: self.run_at_ms,
                priority: self.priority.unwrap_or(0),
                backoff_ms: self.backoff_ms.unwrap_or(0),
                // The default cap never refuses a backoff the caller gave alone.
                backoff_ms_max: self
                    .backoff_ms_max
                    .unwrap_or(limits::BACKOFF_MS_MAX_DEFAULT.max(self.backoff_ms.unwrap_or(0))),
            })
        } else {
            Command::Submit(Submit {
                id: self.id,
                queue,
                payload,
                max_attempts: self.max_attempts,
            })
        };
        cmd.validate()?;
        Ok(cmd)
    }
}

/// The activation of `version`, decided against the membership entry `membership`: in
/// the form that names it from [`VERSION_CHECKED_ACTIVATION`] on (every member decodes
/// it by then), as the plain form before.
pub fn activation(version: u32, membership: MembershipMark) -> Command {
    if ClusterVersion::CheckedActivation.active_at(version) {
        Command::ActivateVersionIn(ActivateVersionIn {
            version,
            membership,
        })
    } else {
        Command::ActivateVersion(ActivateVersion { version })
    }
}
