//! Read-only questions the node asks between entries, judged at a store time the caller
//! supplies (never earlier than the last applied stamp).

use crate::machine::LeaseMachine;
use crate::tenant::Scope;

impl LeaseMachine {
    /// Whether a claim-next on `queue` at store time `now_ms` would find a job: one is
    /// waiting in the queue, or a lease in it has run out by `now_ms`.
    ///
    /// The scan over run-out leases is short: they are settled by the next entry, and a
    /// leader ticks while leases are live.
    pub fn has_claimable(&self, queue: &str, now_ms: u64) -> bool {
        self.has_claimable_for(queue, now_ms, None)
    }

    /// [`LeaseMachine::has_claimable`] for a claim-next held to a tenant scope: only a
    /// job the scope holds counts (`machine/scoped.rs`).
    pub fn has_claimable_for(&self, queue: &str, now_ms: u64, scope: Option<&Scope>) -> bool {
        if self.next_ready(queue, scope).is_some() {
            return true;
        }
        let now = now_ms.max(self.clock_ms);
        let held = |id: &str| scope.is_none_or(|s| s.id_ok(id));
        self.ix
            .expiry
            .iter()
            .take_while(|(until, _)| *until <= now)
            .map(|(_, h)| &self.jobs[h])
            .any(|rec| rec.queue == queue && held(&rec.id))
    }
}
