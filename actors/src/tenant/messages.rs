//! The messages a tenant actor handles, one type per verb, and the ones it sends its supervisor.
//! Hosts never build these: they call methods on [`crate::TenantRef`].

use actix::prelude::*;
use leasehold::layout::ImageRef;
use leasehold::ledger::{Ledger, LedgerError, LedgerTx};
use leasehold::{Error, LeaseKey};
use tokio::sync::oneshot;

use crate::status::TenantStatus;

/// Answers one run's caller once its batch has committed or rolled back.
pub(crate) type Finisher = Box<dyn FnOnce(Result<(), Error>) + Send>;

/// What a run may need from its tenant beside the ledger.
pub(crate) struct RunCx<'a> {
    /// The tenant's key.
    pub(crate) key: &'a LeaseKey,
    /// The host's wall clock now (stamps a stored reply).
    pub(crate) wall_ms: u64,
    /// The replica's events.
    pub(crate) events: &'a crate::events::EventSink,
    /// Commands run without looking for their stored reply (a deliberate bug).
    pub(crate) ignores_keys: bool,
}

/// A host closure (or a typed command) with its reply channel, its result type erased.
pub(crate) trait RunJob: Send {
    /// Runs the closure in its own savepoint of the open batch; returns who to answer at commit.
    fn execute(self: Box<Self>, ledger: &mut Ledger, cx: &RunCx<'_>) -> Finisher;
    /// Answers the caller with `error` without running the closure.
    fn refuse(self: Box<Self>, error: Error);
}

/// A typed [`RunJob`].
pub(crate) struct TypedJob<F, R> {
    /// The host's closure.
    pub(crate) f: F,
    /// Where its result goes.
    pub(crate) reply: oneshot::Sender<Result<R, Error>>,
}

impl<F, R> RunJob for TypedJob<F, R>
where
    F: FnOnce(&mut LedgerTx<'_>) -> Result<R, LedgerError> + Send + 'static,
    R: Send + 'static,
{
    fn execute(self: Box<Self>, ledger: &mut Ledger, _cx: &RunCx<'_>) -> Finisher {
        let TypedJob { f, reply } = *self;
        let outcome = ledger.run_savepoint(f);
        Box::new(move |commit| {
            let answer = match (outcome, commit) {
                (Err(e), _) => Err(Error::from(e)),
                (Ok(_), Err(e)) => Err(e),
                (Ok(value), Ok(())) => Ok(value),
            };
            let _ = reply.send(answer);
        })
    }

    fn refuse(self: Box<Self>, error: Error) {
        let _ = self.reply.send(Err(error));
    }
}

/// Runs a host closure in the ledger (a savepoint of the current group commit).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Run {
    /// The ticket it runs under, if any: admitted work may still run while the tenant drains.
    pub(crate) ticket: Option<u64>,
    /// The closure and its reply.
    pub(crate) job: Box<dyn RunJob>,
}

/// Admits long work: the drain waits for its ticket.
#[derive(Message)]
#[rtype(result = "Result<u64, Error>")]
pub(crate) struct Admit;

/// A ticket was dropped: its work is over.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Retire {
    /// The ticket's id.
    pub(crate) ticket: u64,
}

/// Publishes an image of what is committed now.
#[derive(Message)]
#[rtype(result = "Result<Option<ImageRef>, Error>")]
pub(crate) struct Snapshot;

/// The tenant's status.
#[derive(Message)]
#[rtype(result = "TenantStatus")]
pub(crate) struct GetStatus;

/// Hands the tenant off: drain admitted work until `deadline`, publish the final image, drop
/// the local copy, release the lease.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Handoff {
    /// Counted from the handoff call, on the caller's side (promise 6).
    pub(crate) deadline: tokio::time::Instant,
    /// Answered when the drain is over — with the longest the flush may take — or refused,
    /// overtaken or timed out.
    pub(crate) drained: oneshot::Sender<Result<std::time::Duration, Error>>,
    /// Answered when the flush is over.
    pub(crate) done: oneshot::Sender<Result<(), Error>>,
}

/// The handoff's caller stopped waiting at `deadline`: a drain still under way for it ends and
/// the tenant serves again. Messages sent after this one see the tenant serving.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct DrainOver {
    /// The deadline of the handoff that gave up.
    pub(crate) deadline: tokio::time::Instant,
}

/// Stops like a crash: no flush, the local file kept, the lease handed back.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Abandon {
    /// Answered once the lease is handed back.
    pub(crate) reply: oneshot::Sender<Result<(), Error>>,
}

/// Erases the tenant: raises the floor, deletes every copy at or below it, releases the lease.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Forget {
    /// Answered once the forget is over.
    pub(crate) reply: oneshot::Sender<Result<(), Error>>,
}

/// Sent to the supervisor when a tenant reached a final state.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct TenantGone {
    /// The tenant's key.
    pub(crate) key: LeaseKey,
    /// The tenure that ended.
    pub(crate) epoch: u64,
    /// The final state it reached.
    pub(crate) status: TenantStatus,
}

/// Sent to the supervisor when a forget starts, so that `close` can wait for it.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ForgetBegun {
    /// The tenant's key.
    pub(crate) key: LeaseKey,
    /// The tenure being forgotten (an older one than the table's, if a failed forget is retried).
    pub(crate) epoch: u64,
    /// Resolves when the forget is over, however it ended.
    pub(crate) done: oneshot::Receiver<()>,
}
