//! Coalescing the tip moves of a replica's tenants: every tip move asked while a batch is with
//! the lease store joins the next batch, one `move_tips` round trip for all of them (as
//! `renew_many` does for renewals). Measured in docs/benchmarks.md ("Would coalescing tip moves
//! pay?"): many tenants with one caller each share one lease-store transaction per round instead
//! of one each.
//!
//! The batches run on a task of their own, so a caller that stops waiting (its tenant stopped)
//! never strands the others; a caller whose answer never comes hears an outcome unknown.

use std::sync::{Arc, Mutex};

use leasehold::durable::StoreError;
use leasehold::lease::{LeaseError, LeaseRecord, SharedLeaseStore, TipMove};
use tokio::sync::oneshot;

/// One queued move and who waits for its answer.
type Asked = (TipMove, oneshot::Sender<Result<LeaseRecord, LeaseError>>);

/// The moves waiting for the next batch, and whether a batch task runs.
#[derive(Default)]
struct Queue {
    /// Moves asked since the batch under way was sent.
    asked: Vec<Asked>,
    /// A task is sending batches.
    running: bool,
}

/// The replica's coalescer of tip moves.
pub(crate) struct TipBatcher {
    /// The lease store (with its deadline).
    leases: SharedLeaseStore,
    /// The queue, shared with the batch task.
    queue: Arc<Mutex<Queue>>,
}

impl std::fmt::Debug for TipBatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TipBatcher").finish_non_exhaustive()
    }
}

impl TipBatcher {
    /// A coalescer in front of `leases`.
    pub(crate) fn new(leases: SharedLeaseStore) -> Self {
        Self {
            leases,
            queue: Arc::new(Mutex::new(Queue::default())),
        }
    }

    /// Moves one tip, in the next batch: what `LeaseStore::move_tip` would answer.
    pub(crate) async fn move_tip(&self, m: TipMove) -> Result<LeaseRecord, LeaseError> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let Ok(mut q) = self.queue.lock() else {
                return Err(unknown("the tip queue's lock is poisoned"));
            };
            q.asked.push((m, tx));
            !std::mem::replace(&mut q.running, true)
        };
        if start {
            let (leases, queue) = (self.leases.clone(), self.queue.clone());
            tokio::spawn(send_batches(leases, queue));
        }
        rx.await
            .unwrap_or_else(|_| Err(unknown("the tip batch was dropped")))
    }
}

/// Sends batches until the queue is empty.
async fn send_batches(leases: SharedLeaseStore, queue: Arc<Mutex<Queue>>) {
    loop {
        let batch = {
            let Ok(mut q) = queue.lock() else { return };
            if q.asked.is_empty() {
                q.running = false;
                return;
            }
            std::mem::take(&mut q.asked)
        };
        let moves: Vec<TipMove> = batch.iter().map(|(m, _)| m.clone()).collect();
        match leases.move_tips(&moves).await {
            Ok(outcomes) if outcomes.len() == batch.len() => {
                for ((_, tx), outcome) in batch.into_iter().zip(outcomes) {
                    let _ = tx.send(outcome);
                }
            }
            Ok(outcomes) => {
                let why = format!("{} outcomes for {} moves", outcomes.len(), batch.len());
                for (_, tx) in batch {
                    let _ = tx.send(Err(unknown(&why)));
                }
            }
            Err(e) => {
                for (_, tx) in batch {
                    let _ = tx.send(Err(e.clone()));
                }
            }
        }
    }
}

/// An answer of unknown outcome (the move may have applied).
fn unknown(why: &str) -> LeaseError {
    LeaseError::Store(StoreError::Unavailable {
        op: "move_tip",
        message: why.to_string(),
    })
}
