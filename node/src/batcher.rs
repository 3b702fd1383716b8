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
            commit(&node, batch).await;
            drop(permit);
        });
    }
}

async fn commit(node: &Node, mut batch: Vec<Pending>) {
    let term = node.raft.metrics().borrow().current_term;
    if batch.len() == 1 {
        let p = batch.pop().expect("one pending");
        let _ = p
            .reply
            .send(node.propose_stamped(term, p.command, p.key).await);
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
    match node
        .propose_stamped(term, Command::Batch(items), None)
        .await
    {
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
