//! Applying one log entry ([`LeaseMachine::apply`]): store time, the term's failover
//! grace, settling, the idempotency window, then the entry's command — a batch item by
//! item, a keyed command once (its retry replays the remembered reply), each through its
//! own rule (`Command::apply`, `commands/`), refused above the cluster version.
//!
//! The top of the crate's layers: imports `command` (the entry), `commands`, `machine`,
//! `idempotency`, `replies`' keeping (methods), `limits`, `reply`, `version` and `wire`;
//! nothing imports it.

use crate::command::Entry;
use crate::commands::{BatchItem, Command};
use crate::idempotency::{Bounds, Remembered};
use crate::limits;
use crate::machine::{idempotency_full, At, LeaseMachine};
use crate::reply::{Outcome, Reply};
use crate::version::ClusterVersion;
use crate::wire::{ApiError, ErrorCode};

impl LeaseMachine {
    /// Applies one log entry at `log_index` and returns its reply.
    pub fn apply(&mut self, log_index: u64, entry: &Entry) -> Reply {
        debug_assert!(log_index > self.last_log_index, "log applied out of order");
        let now = self.clock_ms.max(entry.stamp_ms);
        let events_on = ClusterVersion::Events.active_at(self.cluster_version);
        self.jobs.begin(log_index, now, events_on);
        if entry.term > self.term {
            if self.term != 0 {
                self.grant_failover_grace(now - self.clock_ms);
            }
            self.term = entry.term;
        }
        self.clock_ms = now;
        self.last_log_index = log_index;
        self.settle(now);
        self.idempotency
            .expire(now, Bounds::of(&self.config, self.cluster_version));
        let reply = match &entry.command {
            Command::Batch(items) => self.execute_batch(log_index, now, entry, items),
            cmd => self.execute_keyed(log_index, now, entry.idempotency_key.as_deref(), cmd),
        };
        #[cfg(debug_assertions)]
        self.check_invariants();
        reply
    }

    fn execute_keyed(
        &mut self,
        log_index: u64,
        now: u64,
        key: Option<&str>,
        cmd: &Command,
    ) -> Reply {
        // Before the idempotency table: a command refused for its version is not
        // remembered, so its retry after the activation is applied.
        self.check_active(cmd)?;
        match key {
            None => self.execute(log_index, now, cmd),
            // The node checked the key too; a log entry is never trusted to be well-formed,
            // and an unchecked key would be stored in the replicated table. A node that
            // scopes keys per caller proposes `"<scope> <key>"`.
            Some(key) => {
                limits::validate_stored_idempotency_key(key)?;
                self.execute_once(log_index, now, key, cmd)
            }
        }
    }

    /// A batch applies its items in order, as if each were its own entry at this stamp.
    fn execute_batch(
        &mut self,
        log_index: u64,
        now: u64,
        entry: &Entry,
        items: &[BatchItem],
    ) -> Reply {
        entry.command.validate()?;
        if entry.idempotency_key.is_some() {
            let msg = "a batch carries idempotency keys per item, not one for the entry";
            return Err(ApiError::new(ErrorCode::InvalidArgument, msg));
        }
        let replies = items
            .iter()
            .map(|i| self.execute_keyed(log_index, now, i.idempotency_key.as_deref(), &i.command))
            .collect();
        Ok(Outcome::Batch(replies))
    }

    fn execute_once(&mut self, log_index: u64, now: u64, key: &str, cmd: &Command) -> Reply {
        let fingerprint = cmd.fingerprint();
        if let Some(first) = self.idempotency.get(key) {
            if first.fingerprint == fingerprint {
                return self.replay(first, cmd);
            }
            return Err(ApiError::new(
                ErrorCode::IdempotencyKeyReused,
                format!("Idempotency-Key {key:?} was used for a different request"),
            ));
        }
        let bounds = Bounds::of(&self.config, self.cluster_version);
        if let Some(due_ms) = self.idempotency.full(key, now, bounds) {
            return Err(idempotency_full(key, due_ms));
        }
        let reply = self.execute(log_index, now, cmd);
        // An empty claim-next changed nothing; remembering it would make a waiting
        // client's re-proposal under the same key replay "empty" forever.
        if matches!(reply, Ok(Outcome::Empty)) {
            return reply;
        }
        let remembered = Remembered {
            fingerprint,
            recorded_ms: now,
            kept: self.kept(reply.clone()),
        };
        self.idempotency.insert(key.to_owned(), remembered, bounds);
        reply
    }

    fn execute(&mut self, log_index: u64, now: u64, cmd: &Command) -> Reply {
        cmd.validate()?;
        cmd.apply(self, At { log_index, now }, None)
    }

    /// Refuses a command whose entry version is above the cluster version; the
    /// activation itself is what raises it.
    fn check_active(&self, cmd: &Command) -> Result<(), ApiError> {
        match cmd {
            Command::ActivateVersion(_) | Command::ActivateVersionIn(_) => Ok(()),
            cmd => self.admits(cmd.since()),
        }
    }
}
