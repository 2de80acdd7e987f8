//! Coalescing the tip moves of a replica's tenants: every tip move asked while a batch is with
//! the lease store joins the next batch, one `move_tips` round trip for all of them (as
//! `renew_many` does for renewals). Measured in docs/benchmarks.md ("Would coalescing tip moves
//! pay?", run D): many tenants with one caller each share one lease-store transaction per round.
//!
//! The batches go from a thread of their own (not an arbiter): a tenant's blocking closure never
//! holds them up, no arbiter's stop strands them, and the thread ends when the replica's runtime
//! is dropped. A caller waits at most for the batch under way and its own (each bounded by the
//! lease store's deadline); an answer that never comes is an outcome unknown.

use std::sync::mpsc;
use std::time::Duration;

use leasehold::durable::StoreError;
use leasehold::lease::{LeaseError, LeaseRecord, SharedLeaseStore, TipMove};
use tokio::sync::oneshot;

/// One asked move and who waits for its answer.
type Asked = (TipMove, oneshot::Sender<Result<LeaseRecord, LeaseError>>);

/// The replica's coalescer of tip moves.
pub(crate) struct TipBatcher {
    /// Moves for the batch thread; dropping it ends the thread.
    asked: mpsc::Sender<Asked>,
    /// How long a caller waits for its answer: the batch under way and its own.
    wait: Duration,
}

impl std::fmt::Debug for TipBatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TipBatcher").finish_non_exhaustive()
    }
}

impl TipBatcher {
    /// A coalescer in front of `leases` (already bounded by `store_deadline`).
    pub(crate) fn new(leases: SharedLeaseStore, store_deadline: Duration) -> Self {
        let (asked, rx) = mpsc::channel::<Asked>();
        let started = std::thread::Builder::new()
            .name("leasehold-tips".into())
            .spawn(move || send_batches(leases, rx));
        if let Err(e) = started {
            // Without the thread every move is answered "unknown" at once (`move_tip`).
            tracing::error!(error = %e, "the tip batch thread did not start");
        }
        Self {
            asked,
            wait: 2 * store_deadline + Duration::from_secs(1),
        }
    }

    /// Moves one tip, in the next batch: what `LeaseStore::move_tip` would answer, or an
    /// outcome unknown when no answer comes in time.
    pub(crate) async fn move_tip(&self, m: TipMove) -> Result<LeaseRecord, LeaseError> {
        let (tx, rx) = oneshot::channel();
        if self.asked.send((m, tx)).is_err() {
            return Err(unknown("the tip batch thread has stopped"));
        }
        match tokio::time::timeout(self.wait, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(unknown("the tip batch was dropped")),
            Err(_) => Err(LeaseError::Store(StoreError::Timeout {
                op: "move_tip",
                after_ms: u64::try_from(self.wait.as_millis()).unwrap_or(u64::MAX),
            })),
        }
    }
}

/// The batch thread: takes every move asked so far, sends them in one call, answers each.
fn send_batches(leases: SharedLeaseStore, asked: mpsc::Receiver<Asked>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!(error = %e, "the tip batch thread has no runtime");
            return;
        }
    };
    // `recv` blocks this thread only while nothing is asked.
    while let Ok(first) = asked.recv() {
        let mut batch = vec![first];
        batch.extend(asked.try_iter());
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
    }
}

/// An answer of unknown outcome (the move may have applied).
fn unknown(why: &str) -> LeaseError {
    LeaseError::Store(StoreError::Unavailable {
        op: "move_tip",
        message: why.to_string(),
    })
}
