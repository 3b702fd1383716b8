//! `redrive` (`POST /v1/queues/{queue}/redrive`, entry version 4): up to `limit` failed
//! jobs of a queue retried, oldest failure first; a scoped caller's only among the jobs
//! its scope holds.
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::kind::CommandKind;
use crate::descriptor::{CommandScope, Descriptor, Names, Operation};
use crate::limits;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Outcome;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::version::ClusterVersion;
use crate::wire::ApiError;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redrive {
    pub queue: String,
    pub limit: u32,
}

impl CommandKind for Redrive {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "redrive",
        operation: Operation::Redrive,
        scope: CommandScope::Queue,
        outcomes: &["ok"],
        since: ClusterVersion::Lifecycle,
    };

    fn names(&self) -> Names<'_> {
        Names {
            queue: Some(&self.queue),
            ..Names::NONE
        }
    }

    fn validate(&self) -> Result<(), ApiError> {
        limits::validate_redrive_limit(self.limit)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, scope: Option<&Scope>) -> Reply {
        redrive(m, at.log_index, at.now, &self.queue, self.limit, scope)
    }

    fn example() -> Self {
        Redrive {
            queue: "q".into(),
            limit: 10,
        }
    }
}

/// The rule: retries up to `limit` failed jobs of `queue` (those `scope` holds, among
/// the first [`limits::SCOPED_CLAIM_SCAN_MAX`]), oldest failure first.
pub(crate) fn redrive(
    m: &mut LeaseMachine,
    log_index: u64,
    now: u64,
    queue: &str,
    limit: u32,
    scope: Option<&Scope>,
) -> Reply {
    let held = |m: &LeaseMachine, h: u64| scope.is_none_or(|s| s.id_ok(&m.jobs[h].id));
    let picked: Vec<u64> = match m.jobs.ix().dead.get(queue) {
        None => Vec::new(),
        Some(dead) => dead
            .iter()
            .take(limits::SCOPED_CLAIM_SCAN_MAX)
            .map(|&(_, h)| h)
            .filter(|&h| held(m, h))
            .take(limit as usize)
            .collect(),
    };
    for &handle in &picked {
        m.requeue(log_index, now, handle, now);
    }
    Ok(Outcome::Retried(picked.len() as u64))
}
