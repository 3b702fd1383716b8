//! Read-only questions the node asks between entries, judged at a store time the caller
//! supplies (never earlier than the last applied stamp).

use crate::machine::LeaseMachine;

impl LeaseMachine {
    /// Whether a claim-next on `queue` at store time `now_ms` would find a job: one is
    /// waiting in the queue, or a lease in it has run out by `now_ms`.
    ///
    /// The scan over run-out leases is short: they are settled by the next entry, and a
    /// leader ticks while leases are live.
    pub fn has_claimable(&self, queue: &str, now_ms: u64) -> bool {
        if self.ix.ready.get(queue).is_some_and(|q| !q.is_empty()) {
            return true;
        }
        let now = now_ms.max(self.clock_ms);
        self.ix
            .expiry
            .iter()
            .take_while(|(until, _)| *until <= now)
            .any(|(_, h)| self.jobs[h].queue == queue)
    }
}
