//! Coalescing the tip moves of a replica's tenants: on a lease store that moves many tips in
//! one round trip (`batches_tip_moves`: SQLite, PostgreSQL), every tip move asked while a batch
//! is with the store joins the next batch, one `move_tips` call for all of them (as
//! `renew_many` does for renewals). Measured in docs/benchmarks.md ("Would coalescing tip moves
//! pay?", run D): many tenants with one caller each share one lease-store transaction per round.
//! A store that makes one call per move gains nothing from a queue: each tenant calls it
//! directly, under the store's deadline, as every other store call goes.
//!
//! The batches go from a thread of their own (not an arbiter): a tenant's blocking closure never
//! holds them up, no arbiter's stop strands them, and the thread ends when the replica's runtime
//! is dropped.
//!
//! **How long a caller waits** is the work actually ahead of it (docs/guarantees.md, "The log
//! tip"): the batch with the store when it asked (until that batch's deadline), then its own
//! batch (one call under `store_deadline`), plus [`SLACK`] for the thread hops — never a
//! constant that a burst of tenants can outgrow. An answer that never comes within it is an
//! outcome unknown.
//!
//! ```text
//!  tenant ─move_tip─► queue ──(batch thread: takes all queued)──► move_tips (one deadline)
//!           waits: [batch in flight, until its deadline] + [its own batch] + SLACK
//! ```

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use leasehold::durable::StoreError;
use leasehold::lease::{LeaseError, LeaseRecord, SharedLeaseStore, TipMove};
use tokio::sync::oneshot;

/// Time for the hops between a caller, the batch thread and back, beyond the store's own.
pub(crate) const SLACK: Duration = Duration::from_secs(1);

/// One asked move and who waits for its answer.
type Asked = (TipMove, oneshot::Sender<Result<LeaseRecord, LeaseError>>);

/// What the batch thread and the callers share.
#[derive(Default)]
struct Queue {
    /// Moves asked and not yet taken into a batch.
    asked: Vec<Asked>,
    /// Until when the batch with the store may take (its deadline), while one is.
    busy_until: Option<Instant>,
    /// Set when the replica's runtime goes: the thread ends once the queue is empty.
    closed: bool,
}

/// The queue and the bell that wakes the batch thread.
#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
}

/// The replica's coalescer of tip moves.
pub(crate) struct TipBatcher {
    /// The lease store (already bounded by `store_deadline`): asked directly when it makes one
    /// call per move, or when the batch thread did not start.
    leases: SharedLeaseStore,
    /// The batch thread's queue; `None` when moves go to the store directly.
    batches: Option<Arc<Shared>>,
    /// The deadline of one lease-store call (a whole batch, on a store that batches).
    store_deadline: Duration,
}

impl std::fmt::Debug for TipBatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TipBatcher")
            .field("batches", &self.batches.is_some())
            .finish_non_exhaustive()
    }
}

/// How long a caller waits for its move when the batch with the store when it asked may take
/// `ahead` more: that, then its own batch (`store_deadline`), then [`SLACK`].
pub(crate) fn tip_wait(ahead: Duration, store_deadline: Duration) -> Duration {
    ahead + store_deadline + SLACK
}

impl TipBatcher {
    /// A coalescer in front of `leases` (already bounded by `store_deadline`).
    pub(crate) fn new(leases: SharedLeaseStore, store_deadline: Duration) -> Self {
        let mut batches = None;
        if leases.batches_tip_moves() {
            let shared = Arc::new(Shared::default());
            let started = std::thread::Builder::new()
                .name("leasehold-tips".into())
                .spawn({
                    let (leases, shared) = (leases.clone(), shared.clone());
                    move || send_batches(leases, &shared, store_deadline)
                });
            match started {
                Ok(_) => batches = Some(shared),
                // Without the thread every move goes to the store directly.
                Err(e) => tracing::error!(error = %e, "the tip batch thread did not start"),
            }
        }
        Self {
            leases,
            batches,
            store_deadline,
        }
    }

    /// The longest a caller of [`TipBatcher::move_tip`] waits for one answer: a batch ahead
    /// and its own, or one call to a store that moves one tip per call (with the same
    /// [`SLACK`] for the hops back to the caller).
    pub(crate) fn longest_wait(&self) -> Duration {
        match self.batches {
            Some(_) => tip_wait(self.store_deadline, self.store_deadline),
            None => tip_wait(Duration::ZERO, self.store_deadline),
        }
    }

    /// Moves one tip, in the next batch: what `LeaseStore::move_tip` would answer, or an
    /// outcome unknown when no answer comes in time.
    pub(crate) async fn move_tip(&self, m: TipMove) -> Result<LeaseRecord, LeaseError> {
        let Some(shared) = &self.batches else {
            return self
                .leases
                .move_tip(&m.key, &m.owner, m.epoch, m.from, m.to)
                .await;
        };
        let (tx, rx) = oneshot::channel();
        let ahead = {
            let mut queue = shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
            if queue.closed {
                return Err(unknown("the tip batch thread has stopped"));
            }
            queue.asked.push((m, tx));
            queue.busy_until.map_or(Duration::ZERO, |until| {
                until.saturating_duration_since(Instant::now())
            })
        };
        shared.wake.notify_one();
        let wait = tip_wait(ahead, self.store_deadline);
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(unknown("the tip batch was dropped")),
            Err(_) => Err(LeaseError::Store(StoreError::Timeout {
                op: "move_tip",
                after_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            })),
        }
    }
}

impl Drop for TipBatcher {
    fn drop(&mut self) {
        if let Some(shared) = &self.batches {
            shared
                .queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .closed = true;
            shared.wake.notify_one();
        }
    }
}

/// The batch thread: takes every move asked so far, sends them in one call, answers each.
fn send_batches(leases: SharedLeaseStore, shared: &Shared, store_deadline: Duration) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!(error = %e, "the tip batch thread has no runtime");
            let mut queue = shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
            queue.closed = true;
            // Dropping the senders answers the callers at once: an outcome unknown.
            queue.asked.clear();
            return;
        }
    };
    while let Some(batch) = next_batch(shared, store_deadline) {
        let moves: Vec<TipMove> = batch.iter().map(|(m, _)| m.clone()).collect();
        let outcomes = runtime.block_on(leases.move_tips(&moves));
        match outcomes {
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
        shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .busy_until = None;
    }
}

/// Waits until moves are asked and takes them all, marking the batch busy until its deadline;
/// `None` once the batcher is closed and nothing is left.
fn next_batch(shared: &Shared, store_deadline: Duration) -> Option<Vec<Asked>> {
    let mut queue = shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
    while queue.asked.is_empty() {
        if queue.closed {
            return None;
        }
        queue = shared
            .wake
            .wait(queue)
            .unwrap_or_else(PoisonError::into_inner);
    }
    queue.busy_until = Some(Instant::now() + store_deadline);
    Some(std::mem::take(&mut queue.asked))
}

/// An answer of unknown outcome (the move may have applied).
fn unknown(why: &str) -> LeaseError {
    LeaseError::Store(StoreError::Unavailable {
        op: "move_tip",
        message: why.to_string(),
    })
}

#[cfg(test)]
mod tests;
