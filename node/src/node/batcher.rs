//! Group commit: client commands that arrive while earlier ones are being committed are
//! packed into one log entry (`Command::Batch`), so one append, one fsync, one
//! replication slot and one apply call serve many requests.
//!
//! A request waits only for the batches already in flight, at most
//! [`BATCH_INFLIGHT_MAX`]; a lone request is proposed as a plain entry, so an idle
//! cluster's latency is that of a single write.
//!
//! [`channel`] makes the two ends: the node holds the [`Queue`] its requests are
//! proposed through, [`run`] drains the [`Intake`] on a [`Proposer`] handle. May import
//! what `proposer.rs` may.

use std::sync::Arc;

use leasehold_statemachine::limits::BATCH_ITEMS_MAX;
use leasehold_statemachine::{BatchItem, Command, Outcome, Reply};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio_util::sync::CancellationToken;

use super::proposer::{ProposeError, Proposer};

/// Batches proposed concurrently. More overlap hides the commit latency of each; too
/// many would only split the queue into smaller batches.
pub const BATCH_INFLIGHT_MAX: usize = 4;
/// Requests queued for the batcher; past this, senders wait (backpressure).
pub const QUEUE_MAX: usize = 8192;

/// A command waiting to be proposed, and where its reply goes.
struct Pending {
    command: Command,
    key: Option<String>,
    reply: oneshot::Sender<Result<Reply, ProposeError>>,
}

/// The node's end: where requests are proposed ([`Queue::propose`]).
pub struct Queue {
    tx: mpsc::Sender<Pending>,
    in_flight: Arc<InFlight>,
}

/// The batcher's end ([`run`]).
pub struct Intake {
    rx: mpsc::Receiver<Pending>,
    in_flight: Arc<InFlight>,
}

/// A new queue and the intake that drains it.
pub fn channel() -> (Queue, Intake) {
    let (tx, rx) = mpsc::channel(QUEUE_MAX);
    let in_flight = Arc::new(InFlight::default());
    let intake = Intake {
        rx,
        in_flight: in_flight.clone(),
    };
    (Queue { tx, in_flight }, intake)
}

impl Queue {
    /// Proposes `command` in `term`, which [`Proposer::ready_term`] has just returned.
    /// On an idle node (nothing being committed, nothing queued) a batch would hold this
    /// one command anyway: it is proposed from here, in `term` (nothing awaited since).
    /// Otherwise it queues for the next batch.
    pub async fn propose(
        &self,
        proposer: &Proposer,
        term: u64,
        command: Command,
        key: Option<String>,
    ) -> Result<Reply, ProposeError> {
        if self.tx.capacity() == self.tx.max_capacity() {
            if let Some(_slot) = self.in_flight.try_first() {
                return proposer.propose_stamped(term, command, key).await;
            }
        }
        self.enqueue(command, key).await
    }

    /// Queues `command` for the next batch, which is proposed once its term is ready,
    /// and waits for its reply (the path of a request that arrives while others commit).
    pub async fn enqueue(
        &self,
        command: Command,
        key: Option<String>,
    ) -> Result<Reply, ProposeError> {
        let (reply, rx) = oneshot::channel();
        let pending = Pending {
            command,
            key,
            reply,
        };
        let shutting_down = || ProposeError::Unavailable("shutting down".into());
        self.tx.send(pending).await.map_err(|_| shutting_down())?;
        rx.await.unwrap_or_else(|_| Err(shutting_down()))
    }
}

/// Takes whatever is queued (up to a batch) each time a slot is free, until cancelled.
pub async fn run(intake: Intake, proposer: Proposer, cancel: CancellationToken) {
    let Intake { mut rx, in_flight } = intake;
    let batches = Arc::new(Semaphore::new(BATCH_INFLIGHT_MAX));
    // A request that did not fit the last batch: the first of the next.
    let mut carried: Option<Pending> = None;
    loop {
        let permit = tokio::select! {
            _ = cancel.cancelled() => return,
            p = batches.clone().acquire_owned() => p.expect("the semaphore is never closed"),
        };
        let first = match carried.take() {
            Some(p) => p,
            None => tokio::select! {
                _ = cancel.cancelled() => return,
                p = rx.recv() => match p { Some(p) => p, None => return },
            },
        };
        let mut weight = weight_of(&first);
        let mut batch = vec![first];
        while weight < BATCH_ITEMS_MAX {
            let Ok(p) = rx.try_recv() else { break };
            if weight + weight_of(&p) > BATCH_ITEMS_MAX {
                carried = Some(p);
                break;
            }
            weight += weight_of(&p);
            batch.push(p);
        }
        let (proposer, in_flight) = (proposer.clone(), in_flight.clone());
        tokio::spawn(async move {
            let slot = in_flight.enter();
            commit(&proposer, batch).await;
            drop(slot);
            drop(permit);
        });
    }
}

/// What a request counts towards a batch's [`BATCH_ITEMS_MAX`]: one, plus the leases a
/// client batch carries (`POST /v1/leases/…`), so group commit never packs hundreds of
/// those, each up to 1 MiB, into one entry.
fn weight_of(p: &Pending) -> usize {
    1 + p.command.names().leases.len()
}

/// Proposes a batch once its term is ready (`Proposer::ready_term`): requests may have
/// queued in an earlier term, and a stamp taken before the new term is ready would cost
/// the failover grace (issue 16, item 4).
async fn commit(node: &Proposer, mut batch: Vec<Pending>) {
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

/// Counts commits in flight: while none is, a request skips the batcher.
#[derive(Debug, Default)]
pub struct InFlight(std::sync::atomic::AtomicUsize);

/// One commit in flight; leaving (or being dropped, if its request is abandoned) ends it.
#[must_use]
pub struct CommitSlot<'a>(&'a InFlight);

impl InFlight {
    /// Enters only if no commit is in flight. Two requests may both see none and both
    /// enter: each then proposes its own entry, which costs batching, not correctness.
    pub fn try_first(&self) -> Option<CommitSlot<'_>> {
        use std::sync::atomic::Ordering;
        self.0
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| CommitSlot(self))
    }

    pub fn enter(&self) -> CommitSlot<'_> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        CommitSlot(self)
    }
}

impl Drop for CommitSlot<'_> {
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
