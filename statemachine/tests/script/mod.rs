//! A scripted history for the golden snapshot tests: entries applied at rising log
//! indexes and stamps, in the term the test sets. Shared by `snapshot_golden.rs` and
//! `snapshot_golden_v5_v6.rs`.

use leasehold_statemachine::{Command, Entry, LeaseMachine, Reply};

/// Applies entries at rising indexes; each a stamp 10 ms after the last, in `term`.
pub struct Script {
    pub m: LeaseMachine,
    pub index: u64,
    pub stamp_ms: u64,
    pub term: u64,
}

impl Script {
    pub fn apply(&mut self, key: Option<&str>, command: Command) -> Reply {
        self.index += 1;
        self.stamp_ms += 10;
        let entry = Entry {
            stamp_ms: self.stamp_ms,
            term: self.term,
            idempotency_key: key.map(str::to_owned),
            command,
        };
        self.m.apply(self.index, &entry)
    }
}
