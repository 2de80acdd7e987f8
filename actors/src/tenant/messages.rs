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

/// What came of a closure sent to a tenant.
pub(crate) enum RunOutcome<R, F> {
    /// It ran: its answer (or the commit's refusal).
    Ran(Result<R, Error>),
    /// It was refused before it ran, and comes back with the refusal (a handle may send it to
    /// a reopened tenure: docs/architecture.md, "Passivation").
    Refused(Error, F),
    /// It never reached the tenant (its actor had stopped), and comes back.
    Undelivered(F),
}

impl<R, F> RunOutcome<R, F> {
    /// The caller's answer: a closure that did not run is `Fenced` when it never reached its
    /// tenant (the tenure is over), else the refusal.
    pub(crate) fn into_answer(self, key: &LeaseKey) -> Result<R, Error> {
        match self {
            RunOutcome::Ran(answer) => answer,
            RunOutcome::Refused(error, _) => Err(error),
            RunOutcome::Undelivered(_) => Err(Error::Fenced {
                key: key.to_string(),
            }),
        }
    }
}

/// A typed [`RunJob`]. Dropped without running (a stopped actor's mailbox), it hands its
/// closure back ([`RunOutcome::Undelivered`]): undelivered messages come back to the sender.
pub(crate) struct TypedJob<F, R> {
    /// The host's closure; taken when it runs or is refused.
    f: Option<F>,
    /// Where its result goes; taken when answered.
    reply: Option<oneshot::Sender<RunOutcome<R, F>>>,
}

impl<F, R> TypedJob<F, R> {
    /// `f`, answering on `reply`.
    pub(crate) fn new(f: F, reply: oneshot::Sender<RunOutcome<R, F>>) -> Self {
        Self {
            f: Some(f),
            reply: Some(reply),
        }
    }
}

impl<F, R> Drop for TypedJob<F, R> {
    fn drop(&mut self) {
        if let (Some(f), Some(reply)) = (self.f.take(), self.reply.take()) {
            let _ = reply.send(RunOutcome::Undelivered(f));
        }
    }
}

impl<F, R> RunJob for TypedJob<F, R>
where
    F: FnOnce(&mut LedgerTx<'_>) -> Result<R, LedgerError> + Send + 'static,
    R: Send + 'static,
{
    fn execute(mut self: Box<Self>, ledger: &mut Ledger, _cx: &RunCx<'_>) -> Finisher {
        let (Some(f), Some(reply)) = (self.f.take(), self.reply.take()) else {
            return Box::new(|_| {});
        };
        let outcome = ledger.run_savepoint(f);
        Box::new(move |commit| {
            let answer = match (outcome, commit) {
                (Err(e), _) => Err(Error::from(e)),
                (Ok(_), Err(e)) => Err(e),
                (Ok(value), Ok(())) => Ok(value),
            };
            let _ = reply.send(RunOutcome::Ran(answer));
        })
    }

    fn refuse(mut self: Box<Self>, error: Error) {
        if let (Some(f), Some(reply)) = (self.f.take(), self.reply.take()) {
            let _ = reply.send(RunOutcome::Refused(error, f));
        }
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

/// Asks the tenant to let go (passivation, docs/architecture.md): answered at once, `Ok` when
/// the passivation has begun, refused when the tenure may not begin one now (a live ticket,
/// touched since it was judged idle, leaving already).
#[derive(Message)]
#[rtype(result = "Result<(), Error>")]
pub(crate) struct Passivate {
    /// Idle, or evicted at `max_open`.
    pub(crate) reason: crate::passivation::PassivationReason,
    /// The activity count the supervisor judged it idle at.
    pub(crate) judged: u64,
    /// How long it had been idle then (ms).
    pub(crate) idle_ms: u64,
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

/// Sent to the supervisor when a passivation's flush failed and the tenure serves on, before
/// its status reads `serving` again: the supervisor puts it back in its order of last activity
/// as used `at_ms` (the replica's clock when the flush failed).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct ServesOn {
    /// The tenant's key.
    pub(crate) key: LeaseKey,
    /// The tenure that serves on.
    pub(crate) epoch: u64,
    /// When its flush failed, on the replica's clock (ms).
    pub(crate) at_ms: u64,
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
