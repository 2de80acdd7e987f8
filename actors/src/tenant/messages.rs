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

/// A host closure with its reply channel, its result type erased.
pub(crate) trait RunJob: Send {
    /// Runs the closure in its own savepoint of the open batch; returns who to answer at commit.
    fn execute(self: Box<Self>, ledger: &mut Ledger) -> Finisher;
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
    fn execute(self: Box<Self>, ledger: &mut Ledger) -> Finisher {
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

/// Starts a drain: refuses new work; the receiver resolves `Ok` once admitted work is done, or
/// `Err` (or is dropped) when an abandon, a forget or a lost lease overtakes the handoff.
#[derive(Message)]
#[rtype(result = "Result<oneshot::Receiver<Result<(), Error>>, Error>")]
pub(crate) struct BeginDrain;

/// The drain deadline passed: serve again.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct CancelDrain;

/// Takes and publishes the final image, releases the lease and drops the local copy.
#[derive(Message)]
#[rtype(result = "Result<(), Error>")]
pub(crate) struct Flush;

/// Stops like a crash: no flush, the local file kept, the lease handed back.
#[derive(Message)]
#[rtype(result = "Result<(), Error>")]
pub(crate) struct Abandon;

/// Erases the tenant: raises the floor, deletes every copy at or below it, releases the lease.
#[derive(Message)]
#[rtype(result = "Result<(), Error>")]
pub(crate) struct Forget;

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
