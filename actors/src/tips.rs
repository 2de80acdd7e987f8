//! Coalescing the tip moves of a replica's tenants: every tip move asked while a batch is with
//! the lease store joins the next batch. On a store that moves many tips in one round trip
//! (`batches_tip_moves`: SQLite, PostgreSQL) a batch is one `move_tips` call for all of them (as
//! `renew_many` does for renewals; measured in docs/benchmarks.md, "Would coalescing tip moves
//! pay?", run D: many tenants with one caller each share one lease-store transaction per
//! round). On a store that makes one call per move, a batch is its moves one after another, each
//! under its own deadline and answered as soon as it is done — one move of the replica at a
//! time, as the store would take them anyway.
//!
//! The batches go from a thread of their own (not an arbiter): a tenant's blocking closure never
//! holds them up, no arbiter's stop strands them, and the thread ends when the replica's runtime
//! is dropped.
//!
//! **How long a caller waits** is the work actually ahead of it (docs/guarantees.md, "The log
//! tip"): the batch with the store when it asked, until that batch's deadline, then its own
//! move — its batch's one call under `store_deadline` on a store that batches, or the moves
//! queued before it and its own, `store_deadline` each, on one that does not — plus [`SLACK`]
//! for the thread hops. Never a constant that a burst of tenants can outgrow. An answer that
//! does not come within it is an outcome unknown.
//!
//! ```text
//!  tenant ─move_tip─► queue ──(batch thread: takes all queued)──► move_tips (one deadline)
//!                                                              or move_tip × n (one each)
//!           waits: [batch in flight, until its deadline] + [its own share] + SLACK
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
    /// Moves asked and not yet taken into a batch, in order.
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

/// How a batch goes to the lease store, and how long it may take.
#[derive(Debug, Clone, Copy)]
struct Batches {
    /// One `move_tips` call per batch (else one `move_tip` call per move).
    in_one_call: bool,
    /// The deadline of one lease-store call.
    store_deadline: Duration,
}

impl Batches {
    /// The longest a batch of `moves` moves takes, or the first `moves` moves of one.
    fn bound(self, moves: usize) -> Duration {
        match self.in_one_call {
            true => self.store_deadline,
            false => self.store_deadline * u32::try_from(moves).unwrap_or(u32::MAX),
        }
    }
}

/// The replica's coalescer of tip moves.
pub(crate) struct TipBatcher {
    /// The lease store (already bounded by `store_deadline`): asked directly only when the
    /// batch thread did not start.
    leases: SharedLeaseStore,
    /// The batch thread's queue; `None` when the thread did not start.
    shared: Option<Arc<Shared>>,
    /// How batches go to the store.
    batches: Batches,
    /// How many moves can be outstanding at once at most (every tenant the replica may open,
    /// each asking its move up to `TIP_ASKS` times): what a caller can find ahead of it.
    most_outstanding: usize,
}

impl std::fmt::Debug for TipBatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TipBatcher")
            .field("batches", &self.batches)
            .finish_non_exhaustive()
    }
}

/// How long a caller waits for its move when the batch with the store when it asked may take
/// `ahead` more and its own share of the next batch may take `own`: both, then [`SLACK`].
pub(crate) fn tip_wait(ahead: Duration, own: Duration) -> Duration {
    ahead + own + SLACK
}

impl TipBatcher {
    /// A coalescer in front of `leases` (already bounded by `store_deadline`), for a replica
    /// that opens at most `max_open` tenants.
    pub(crate) fn new(leases: SharedLeaseStore, store_deadline: Duration, max_open: usize) -> Self {
        let batches = Batches {
            in_one_call: leases.batches_tip_moves(),
            store_deadline,
        };
        let shared = Arc::new(Shared::default());
        let started = std::thread::Builder::new()
            .name("leasehold-tips".into())
            .spawn({
                let (leases, shared) = (leases.clone(), shared.clone());
                move || send_batches(leases, &shared, batches)
            });
        let shared = match started {
            Ok(_) => Some(shared),
            // Without the thread every move goes to the store directly.
            Err(e) => {
                tracing::error!(error = %e, "the tip batch thread did not start");
                None
            }
        };
        let asks = usize::try_from(crate::tenant::log::TIP_ASKS).unwrap_or(usize::MAX);
        Self {
            leases,
            shared,
            batches,
            most_outstanding: max_open.saturating_mul(asks),
        }
    }

    /// The longest a caller of [`TipBatcher::move_tip`] waits for one answer: a batch ahead
    /// and its own, on a store that batches; every move the replica can have outstanding, one
    /// after another, on one that does not.
    pub(crate) fn longest_wait(&self) -> Duration {
        match self.batches.in_one_call {
            true => tip_wait(self.batches.bound(1), self.batches.bound(1)),
            false => tip_wait(Duration::ZERO, self.batches.bound(self.most_outstanding)),
        }
    }

    /// Moves one tip, in the next batch: what `LeaseStore::move_tip` would answer, or an
    /// outcome unknown when no answer comes in time.
    pub(crate) async fn move_tip(&self, m: TipMove) -> Result<LeaseRecord, LeaseError> {
        let Some(shared) = &self.shared else {
            return self
                .leases
                .move_tip(&m.key, &m.owner, m.epoch, m.from, m.to)
                .await;
        };
        let (tx, rx) = oneshot::channel();
        let wait = {
            let mut queue = shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
            if queue.closed {
                return Err(unknown("the tip batch thread has stopped"));
            }
            queue.asked.push((m, tx));
            let ahead = queue.busy_until.map_or(Duration::ZERO, |until| {
                until.saturating_duration_since(Instant::now())
            });
            // The next batch takes every move queued, in order: this one and those before it.
            tip_wait(ahead, self.batches.bound(queue.asked.len()))
        };
        shared.wake.notify_one();
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
        if let Some(shared) = &self.shared {
            shared
                .queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .closed = true;
            shared.wake.notify_one();
        }
    }
}

/// The batch thread: takes every move asked so far and sends them, in one call or one by one;
/// answers each.
fn send_batches(leases: SharedLeaseStore, shared: &Shared, batches: Batches) {
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
    while let Some(batch) = next_batch(shared, batches) {
        if batches.in_one_call {
            runtime.block_on(send_in_one_call(&leases, batch));
        } else {
            for (m, tx) in batch {
                let outcome = leases.move_tip(&m.key, &m.owner, m.epoch, m.from, m.to);
                let _ = tx.send(runtime.block_on(outcome));
            }
        }
        shared
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .busy_until = None;
    }
}

/// Sends `batch` in one `move_tips` call and answers each move.
async fn send_in_one_call(leases: &SharedLeaseStore, batch: Vec<Asked>) {
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

/// Waits until moves are asked and takes them all, marking the batch busy until its deadline;
/// `None` once the batcher is closed and nothing is left.
fn next_batch(shared: &Shared, batches: Batches) -> Option<Vec<Asked>> {
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
    let now = Instant::now();
    let bound = batches.bound(queue.asked.len());
    queue.busy_until = Some(
        now.checked_add(bound)
            .unwrap_or(now + crate::config::MAX_DURATION),
    );
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
