//! Seeding a new cluster from a backup (`leasehold snapshot restore`):
//! [`LeaseMachine::raise_generations`] and what it reports ([`Raised`]).
//!
//! Three things a restored cluster must not do (issue 8, issue 28 item 3): grant a
//! fencing token the old cluster may have granted after the backup (so every generation
//! is raised), let another owner claim a job whose old holder may still be working by
//! its own deadline (so a lease live in the backup is held, for nobody, for its TTL plus
//! the failover grace cap), and replay a remembered reply that names pre-raise
//! generations (so those entries answer `stale_lease`). May import `machine`
//! (moving a job only through its transition point) and `idempotency`; nothing with IO.

use crate::idempotency::Bounds;
use crate::machine::jobs::transition::Cause;
use crate::machine::{LeaseMachine, Place};

/// [`LeaseMachine::raise_generations`] refused: raising by `by` would overflow the
/// highest generation the machine knows, `top`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("raising generations by {by} overflows (the highest is {top})")]
pub struct GenerationOverflow {
    pub by: u64,
    pub top: u64,
}

/// What [`LeaseMachine::raise_generations`] did to the leases live in the backup.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Raised {
    /// Leases live in the backup, now held (for nobody) until their hold ends.
    pub leases_held: u64,
    /// The latest end of those holds, store time; `None` when none was live.
    pub held_until_ms: Option<u64>,
}

impl LeaseMachine {
    /// Raises every job's generation — and every deleted job's remembered one, and the
    /// floor of ids never seen — by `by`; holds every lease live in the backup until
    /// `max(lease_until_ms, clock_ms + ttl_ms) + grace_ms_max`; marks every remembered
    /// reply as answered before the raise. Errors (changing nothing) if a generation
    /// would overflow.
    ///
    /// Tokens: the cluster the backup came from may have granted generations after the
    /// backup; raised by more than it could have granted since, every token the restored
    /// cluster grants is above every token the old one did. Job ids the backup does not
    /// know — created in the old cluster after the backup, perhaps claimed there — get
    /// the same floor: their first claim here is generation `by + 1`.
    ///
    /// The hold: the old holder's own deadline is at most a TTL after its last successful
    /// renew, which happened before the old cluster stopped, so before the restored
    /// cluster began running; the restored cluster's time resumes at the backup's
    /// `clock_ms`, never runs faster than real time and stands still while it is down. So
    /// the holder has stopped by `clock_ms + ttl_ms` of restored-cluster time; the record's
    /// `lease_until_ms` covers a renew with a longer TTL recorded in the backup, and the
    /// grace cap covers the drift allowance. Until then the job stays leased at the
    /// raised generation (owner kept, for operators to see whose work it was): another
    /// owner's claim is `lease_held`, the old holder's renew and complete `stale_lease`;
    /// then it expires as any lease does.
    pub fn raise_generations(&mut self, by: u64) -> Result<Raised, GenerationOverflow> {
        let top = self
            .jobs
            .records()
            .values()
            .map(|r| r.generation)
            .chain(self.tombstones.values().copied())
            .chain([self.generation_floor])
            .max()
            .unwrap_or(0);
        if top.checked_add(by).is_none() {
            return Err(GenerationOverflow { by, top });
        }
        self.generation_floor += by;
        for g in self.tombstones.values_mut() {
            *g += by;
        }
        self.jobs.edit_all(|fields| fields.generation += by);
        let raised = self.hold_live_leases();
        self.idempotency
            .mark_before_raise(Bounds::of(&self.config, self.cluster_version));
        Ok(raised)
    }

    /// Moves every live lease's end to its hold's end (never earlier than it was).
    fn hold_live_leases(&mut self) -> Raised {
        let (now, grace_ms) = (self.clock_ms, self.config.grace_ms_max);
        let live: Vec<(u64, u64)> = self.jobs.ix().expiry.iter().copied().collect();
        let mut raised = Raised::default();
        for (until, handle) in live {
            let held = until
                .max(now.saturating_add(self.jobs[handle].ttl_ms))
                .saturating_add(grace_ms);
            self.jobs
                .move_to(handle, Place::Leased { until_ms: held }, Cause::Raise);
            raised.leases_held += 1;
            raised.held_until_ms = raised.held_until_ms.max(Some(held));
        }
        raised
    }
}
