//! Read-only questions the node asks between entries, judged at a store time the caller
//! supplies (never earlier than the last applied stamp).

use crate::machine::LeaseMachine;
use crate::tenant::Scope;

impl LeaseMachine {
    /// Whether a claim-next on `queue` at store time `now_ms` would find a job: one is
    /// waiting in the queue, a lease in it has run out by `now_ms`, or a scheduled job
    /// of it is due by `now_ms`.
    ///
    /// The scans over run-out leases and due jobs are short: they are settled by the
    /// next entry, and a leader ticks while a deadline is pending.
    pub fn has_claimable(&self, queue: &str, now_ms: u64) -> bool {
        self.has_claimable_for(queue, now_ms, None)
    }

    /// [`LeaseMachine::has_claimable`] for a claim-next held to a tenant scope: only a
    /// job the scope holds counts (`commands/scoped.rs`).
    pub fn has_claimable_for(&self, queue: &str, now_ms: u64, scope: Option<&Scope>) -> bool {
        if self.next_ready(queue, scope).is_some() {
            return true;
        }
        let now = now_ms.max(self.clock_ms);
        let held = |id: &str| scope.is_none_or(|s| s.id_ok(id));
        let passed = |set: &'_ std::collections::BTreeSet<(u64, u64)>| {
            set.iter()
                .take_while(|(at, _)| *at <= now)
                .map(|(_, h)| &self.jobs[*h])
                .any(|rec| rec.queue == queue && held(&rec.id))
        };
        // A run-out lease may instead be cancelled or wait out a backoff: a false "yes"
        // costs the waiter one more proposal, never a wrong answer.
        passed(&self.jobs.ix().expiry) || passed(&self.jobs.ix().due)
    }
}
