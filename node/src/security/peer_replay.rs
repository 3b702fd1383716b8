//! Replay protection for peer RPCs (issue 17 item 3): which signed requests a node has
//! already accepted, so that each one is accepted at most once. A sender numbers its
//! requests to each receiver 1, 2, 3… within one run of its process (`boot`, random per
//! run); the receiver keeps, per sender and run, a sliding window like IPsec's and
//! WireGuard's: the highest number seen and a bitmap of the [`REPLAY_WINDOW`] below it.
//! Requests may arrive somewhat out of order (openraft runs appends, votes, pre-votes and
//! snapshot chunks concurrently over several pooled connections), which the bitmap
//! accepts; a duplicate, or a number too far below the highest, is refused.
//!
//! Pure bookkeeping: no clock, no IO, no secret (the caller has checked the MAC, so only
//! holders of the peer secret ever create an entry here). The argument for why this,
//! with the time window and the start-time check, refuses every replay is in
//! `peer_auth/`'s module doc.

use std::collections::HashMap;
use std::fmt;

use crate::types::NodeId;

/// Bits in the sliding window: how far below the highest number seen a request may
/// still arrive. Far above the requests one sender has in flight to one receiver.
pub const REPLAY_WINDOW: u64 = 128;
/// Runs of one sender remembered at once. A sender restarted more often than this within
/// `peer_auth::PEER_AUTH_WINDOW_MS` could have its oldest
/// run forgotten (and that run's requests replayed once each); nothing else evicts.
pub const REPLAY_RUNS_PER_SENDER: usize = 8;

/// Why a request was refused as a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// This exact number was accepted already.
    Duplicate,
    /// More than [`REPLAY_WINDOW`] below the highest accepted: cannot be told apart.
    TooOld,
}

impl fmt::Display for Replay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Replay::Duplicate => "a duplicate",
            Replay::TooOld => "more than the replay window below its newest",
        })
    }
}

/// One run's sliding window. Bit `i` of `seen`: `highest - i` was accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    highest: u64,
    seen: u128,
}

const _: () = assert!(REPLAY_WINDOW == u128::BITS as u64);

impl Window {
    /// Accepts `seq` (and remembers it) or says why not.
    pub fn accept(&mut self, seq: u64) -> Result<(), Replay> {
        if seq > self.highest {
            let shift = seq - self.highest;
            self.seen = if shift >= REPLAY_WINDOW {
                0
            } else {
                self.seen << shift
            };
            self.seen |= 1;
            self.highest = seq;
            return Ok(());
        }
        let back = self.highest - seq;
        if back >= REPLAY_WINDOW {
            return Err(Replay::TooOld);
        }
        if self.seen & (1 << back) != 0 {
            return Err(Replay::Duplicate);
        }
        self.seen |= 1 << back;
        Ok(())
    }
}

/// One run of a sender: its boot nonce, its window, and when it was last used (for
/// evicting the least recently used run).
#[derive(Debug)]
struct Run {
    boot: u64,
    window: Window,
    used: u64,
}

/// Every sender's recent runs.
#[derive(Debug, Default)]
pub struct ReplayTable {
    senders: HashMap<NodeId, Vec<Run>>,
    /// Bumped on every accepted request: the LRU order.
    tick: u64,
}

impl ReplayTable {
    /// Accepts request `seq` of run `boot` of `from`, or says why it is a replay.
    pub fn accept(&mut self, from: NodeId, boot: u64, seq: u64) -> Result<(), Replay> {
        self.tick += 1;
        let runs = self.senders.entry(from).or_default();
        let i = match runs.iter().position(|r| r.boot == boot) {
            Some(i) => i,
            None => {
                if runs.len() >= REPLAY_RUNS_PER_SENDER {
                    let oldest = (0..runs.len()).min_by_key(|&i| runs[i].used).unwrap_or(0);
                    runs.swap_remove(oldest);
                }
                // A new run: its window starts at this request, nothing seen yet.
                let window = Window {
                    highest: seq,
                    seen: 0,
                };
                runs.push(Run {
                    boot,
                    window,
                    used: 0,
                });
                runs.len() - 1
            }
        };
        runs[i].window.accept(seq)?;
        runs[i].used = self.tick;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_requests_are_accepted_and_each_only_once() {
        let mut w = Window::default();
        for seq in 1..=1_000 {
            assert_eq!(w.accept(seq), Ok(()), "{seq}");
            assert_eq!(w.accept(seq), Err(Replay::Duplicate), "{seq}");
        }
    }

    #[test]
    fn reordering_within_the_window_is_accepted_and_beyond_it_refused() {
        let mut w = Window::default();
        assert_eq!(w.accept(1), Ok(()));
        assert_eq!(w.accept(5), Ok(()));
        // 2..4 arrive late, in any order: accepted once each.
        for seq in [3, 2, 4] {
            assert_eq!(w.accept(seq), Ok(()));
            assert_eq!(w.accept(seq), Err(Replay::Duplicate));
        }
        let top = 5 + REPLAY_WINDOW;
        assert_eq!(w.accept(top), Ok(()));
        // The lowest number the window still holds, unseen: accepted.
        assert_eq!(w.accept(top - (REPLAY_WINDOW - 1)), Ok(()));
        // One below it: too old, seen or not.
        assert_eq!(w.accept(top - REPLAY_WINDOW), Err(Replay::TooOld));
        assert_eq!(w.accept(5), Err(Replay::TooOld));
        assert_eq!(w.accept(2), Err(Replay::TooOld));
        // A jump of more than the window clears it.
        assert_eq!(w.accept(top + 10 * REPLAY_WINDOW), Ok(()));
        assert_eq!(w.accept(top), Err(Replay::TooOld));
    }

    /// Seeded: any order of 1..=n shuffled within the window is accepted exactly once.
    #[test]
    fn random_reordering_within_the_window_accepts_each_exactly_once() {
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        const SEED: u64 = 17;
        let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
        let mut seqs: Vec<u64> = (1..=2_000).collect();
        // Shuffle within chunks smaller than the window: bounded displacement.
        for chunk in seqs.chunks_mut(REPLAY_WINDOW as usize / 2) {
            chunk.shuffle(&mut rng);
        }
        let mut t = ReplayTable::default();
        for &s in &seqs {
            assert_eq!(t.accept(2, 9, s), Ok(()), "seed {SEED}: {s}");
        }
        for &s in seqs.iter().rev().take(64) {
            assert!(t.accept(2, 9, s).is_err(), "seed {SEED}: replay of {s}");
        }
    }

    #[test]
    fn a_restarted_sender_starts_over_and_its_old_run_stays_refused() {
        let mut t = ReplayTable::default();
        for seq in 1..=50 {
            t.accept(1, 0xaaaa, seq).unwrap();
        }
        // The sender restarts: a new boot, counting from 1 again.
        for seq in 1..=10 {
            assert_eq!(t.accept(1, 0xbbbb, seq), Ok(()));
        }
        // Replays of the old run are still refused; so are the new run's.
        assert_eq!(t.accept(1, 0xaaaa, 50), Err(Replay::Duplicate));
        assert_eq!(t.accept(1, 0xaaaa, 49), Err(Replay::Duplicate));
        assert_eq!(t.accept(1, 0xbbbb, 10), Err(Replay::Duplicate));
        // Another sender's numbers are its own.
        assert_eq!(t.accept(2, 0xaaaa, 50), Ok(()));
    }

    #[test]
    fn the_first_request_of_a_run_may_be_any_number_and_later_ones_reorder_around_it() {
        let mut t = ReplayTable::default();
        assert_eq!(t.accept(3, 1, 400), Ok(()));
        assert_eq!(
            t.accept(3, 1, 399),
            Ok(()),
            "sent before 400, arrived after"
        );
        assert_eq!(t.accept(3, 1, 400), Err(Replay::Duplicate));
        assert_eq!(t.accept(3, 1, 400 - REPLAY_WINDOW), Err(Replay::TooOld));
    }

    #[test]
    fn only_the_least_recently_used_run_is_forgotten() {
        let mut t = ReplayTable::default();
        let runs = REPLAY_RUNS_PER_SENDER as u64;
        for boot in 0..runs {
            t.accept(1, boot, 1).unwrap();
        }
        t.accept(1, 0, 2).unwrap(); // run 0 used again: run 1 is now the oldest
        t.accept(1, runs, 1).unwrap(); // one run too many: run 1 is forgotten
        assert_eq!(t.accept(1, 0, 2), Err(Replay::Duplicate));
        assert_eq!(t.accept(1, 2, 1), Err(Replay::Duplicate));
        assert_eq!(t.accept(1, 1, 1), Ok(()), "forgotten: accepted once more");
    }
}
