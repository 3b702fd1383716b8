//! Group commit: client commands that arrive while earlier ones are being committed are
//! packed into one log entry (`Command::Batch`), so one append, one fsync, one
//! replication slot and one apply call serve many requests.
//!
//! A request waits only for the batches already in flight, at most
//! [`BATCH_INFLIGHT_MAX`]; a lone request is proposed as a plain entry, so an idle
//! cluster's latency is that of a single write.

use std::sync::Arc;

use leasehold_statemachine::limits::BATCH_ITEMS_MAX;
use leasehold_statemachine::{BatchItem, Command, Outcome, Reply};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::node::{Node, ProposeError};

/// Batches proposed concurrently. More overlap hides the commit latency of each; too
/// many would only split the queue into smaller batches.
pub const BATCH_INFLIGHT_MAX: usize = 4;
/// Requests queued for the batcher; past this, senders wait (backpressure).
pub const QUEUE_MAX: usize = 8192;

/// A command waiting to be proposed, and where its reply goes.
pub struct Pending {
    pub command: Command,
    pub key: Option<String>,
    pub reply: oneshot::Sender<Result<Reply, ProposeError>>,
}

pub fn channel() -> (mpsc::Sender<Pending>, mpsc::Receiver<Pending>) {
    mpsc::channel(QUEUE_MAX)
}

/// Takes whatever is queued (up to a batch) each time a slot is free, until cancelled.
pub async fn run(node: Arc<Node>, mut rx: mpsc::Receiver<Pending>, cancel: CancellationToken) {
    let inflight = Arc::new(Semaphore::new(BATCH_INFLIGHT_MAX));
    loop {
        let permit = tokio::select! {
            _ = cancel.cancelled() => return,
            p = inflight.clone().acquire_owned() => p.expect("the semaphore is never closed"),
        };
        let first = tokio::select! {
            _ = cancel.cancelled() => return,
            p = rx.recv() => match p { Some(p) => p, None => return },
        };
        let mut batch = vec![first];
        while batch.len() < BATCH_ITEMS_MAX {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        let node = node.clone();
        tokio::spawn(async move {
            let slot = node.commits_in_flight.enter();
            commit(&node, batch).await;
            drop(slot);
            drop(permit);
        });
    }
}

/// Proposes a batch once its term is ready (`Node::ready_term`): requests may have
/// queued in an earlier term, and a stamp taken before the new term is ready would cost
/// the failover grace (issue 16, item 4).
async fn commit(node: &Node, mut batch: Vec<Pending>) {
    if batch.len() == 1 {
        let p = batch.pop().expect("one pending");
        let _ = p.reply.send(node.propose_ready(p.command, p.key).await);
        return;
    }
    let (items, replies): (Vec<BatchItem>, Vec<_>) = batch
        .into_iter()
        .map(|p| {
            let item = BatchItem {
                idempotency_key: p.key,
                command: p.command,
            };
            (item, p.reply)
        })
        .unzip();
    match node.propose_ready(Command::Batch(items), None).await {
        Ok(Ok(Outcome::Batch(rs))) if rs.len() == replies.len() => {
            for (tx, r) in replies.into_iter().zip(rs) {
                let _ = tx.send(Ok(r));
            }
        }
        Ok(other) => {
            // The machine refused the batch's shape: a bug in how it was built here.
            tracing::error!(?other, "batch entry rejected by the state machine");
            for tx in replies {
                let _ = tx.send(Err(ProposeError::Unavailable(
                    "internal: batch rejected".into(),
                )));
            }
        }
        Err(e) => {
            for tx in replies {
                let _ = tx.send(Err(e.clone()));
            }
        }
    }
}

/// Counts commits in flight (see `Node::commits_in_flight`).
#[derive(Debug, Default)]
pub struct InFlight(std::sync::atomic::AtomicUsize);

/// One commit in flight; leaving (or being dropped, if its request is abandoned) ends it.
#[must_use]
pub struct Slot<'a>(&'a InFlight);

impl InFlight {
    /// Enters only if no commit is in flight. Two requests may both see none and both
    /// enter: each then proposes its own entry, which costs batching, not correctness.
    pub fn try_first(&self) -> Option<Slot<'_>> {
        use std::sync::atomic::Ordering;
        self.0
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| Slot(self))
    }

    pub fn enter(&self) -> Slot<'_> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Slot(self)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_of_an_idle_node_skips_the_batcher() {
        let f = InFlight::default();
        let first = f.try_first().expect("idle");
        assert!(f.try_first().is_none(), "a commit is in flight");
        drop(first);
        let batch = f.enter();
        assert!(f.try_first().is_none(), "a batch is in flight");
        drop(batch);
        assert!(f.try_first().is_some());
    }
}
