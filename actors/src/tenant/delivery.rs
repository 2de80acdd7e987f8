//! Typed messages on the tenant: a command runs as one run of the group commit (its reply
//! stored under its idempotency key in the same savepoint as its effect), a query reads on a
//! read connection of its own beside the write batch; both answer through the output gate
//! (docs/guarantees.md, promise 11).
//!
//! ```text
//!  command:  Run(CommandJob) ─► admission ─► stored reply? ─yes─► answer it (nothing runs)
//!                                   │ no
//!                                   ▼
//!            SAVEPOINT; handle; encode the reply; store it under the key; RELEASE
//!            ─► answered with its batch: on Shipped once the batch's segment is in the log
//!
//!  query:    QueryAdmit ─► (serving, lease holds) ─► a blocking thread: ReadLedger::begin
//!            (the snapshot) ─► QueryGate: a barrier behind every batch committed so far ─►
//!            the query reads ─► the barrier passes (everything it could see is in the log)
//!            ─► the lease still holds? ─► reply
//! ```
//!
//! The barrier is an empty batch added to the log ([`LogShip::add`]`(None, …)`): it is
//! answered once every batch committed before it is in the log, or with the log's failure. It
//! is added after the read transaction began, so everything the query can see is before it.

use std::path::PathBuf;
use std::sync::Arc;

use actix::prelude::*;
use leasehold::clock::SharedClock;
use leasehold::ledger::{Keyed, Ledger, LedgerError, ReadLedger, ReplyKey};
use leasehold::{Error, LeaseKey};
use tokio::sync::oneshot;

use super::TenantRef;
use super::actor::TenantActor;
use super::messages::{Finisher, Run, RunCx, RunJob};
use crate::events::Event;
use crate::lease_actor::LeaseCell;
use crate::message::{CommandCall, QueryCall};

/// The most stored replies one batch prunes: the next batch prunes more if more are due.
const PRUNE_AT_ONCE: u32 = 1_000;

/// A decoded command with its reply channel: a run like a closure's.
pub(crate) struct CommandJob {
    /// The message's name, stored beside its reply.
    pub(crate) name: String,
    /// The caller's idempotency key.
    pub(crate) key: Option<String>,
    /// The decoded command.
    pub(crate) call: CommandCall,
    /// Where its reply goes.
    pub(crate) reply: oneshot::Sender<Result<Vec<u8>, Error>>,
}

impl RunJob for CommandJob {
    fn execute(self: Box<Self>, ledger: &mut Ledger, cx: &RunCx<'_>) -> Finisher {
        let CommandJob {
            name,
            key,
            call,
            reply,
        } = *self;
        // A handler's own error (or a reply that cannot be encoded) is kept typed; the savepoint
        // only needs to hear that it failed.
        let mut failed = None;
        let run = |tx: &mut leasehold::ledger::LedgerTx<'_>| {
            call(tx).map_err(|e| {
                let why = LedgerError::Host(e.to_string());
                failed = Some(e);
                why
            })
        };
        let ran = match key {
            Some(key) if !cx.ignores_keys => {
                let key = ReplyKey {
                    key,
                    name: name.clone(),
                    at_ms: i64::try_from(cx.wall_ms).unwrap_or(i64::MAX),
                };
                ledger
                    .run_keyed(&key, run)
                    .map(|keyed| replayed(keyed, &name, cx))
            }
            _ => ledger.run_savepoint(run).map(Ok),
        };
        let outcome = match ran {
            Ok(answer) => answer,
            Err(e) => Err(failed.take().unwrap_or_else(|| Error::from(e))),
        };
        Box::new(move |commit| {
            let answer = match (outcome, commit) {
                (Err(e), _) => Err(e),
                (Ok(_), Err(e)) => Err(e),
                (Ok(bytes), Ok(())) => Ok(bytes),
            };
            let _ = reply.send(answer);
        })
    }

    fn refuse(self: Box<Self>, error: Error) {
        let _ = self.reply.send(Err(error));
    }
}

/// The reply of a keyed run: the one it stored, or the one stored before under its key (a key
/// used before for another message is the caller's mistake, refused).
fn replayed(keyed: Keyed, name: &str, cx: &RunCx<'_>) -> Result<Vec<u8>, Error> {
    match keyed {
        Keyed::Ran(reply) => Ok(reply),
        Keyed::Stored { name: stored, .. } if stored != name => Err(Error::BadMessage {
            reason: format!(
                "the idempotency key was used before for {stored}, not {name}: one key, one command"
            ),
        }),
        Keyed::Stored { reply, .. } => {
            cx.events.emit(Event::ReplyReplayed {
                key: cx.key.to_string(),
                name: name.to_string(),
            });
            Ok(reply)
        }
    }
}

/// What a query takes from its tenant once admitted.
pub(crate) struct QueryPass {
    /// The ledger file the read connection opens.
    path: PathBuf,
    /// The tenure's standing: checked again once the query has read.
    cell: Arc<LeaseCell>,
    /// The holder's clock.
    clock: SharedClock,
    /// Whether the reply waits for the log (`Shipped`).
    gated: bool,
    /// The replica's slots for read connections.
    slots: Arc<tokio::sync::Semaphore>,
}

/// Admits a query: the tenant serves and its lease holds.
#[derive(Message)]
#[rtype(result = "Result<QueryPass, Error>")]
pub(crate) struct QueryAdmit;

/// Asks for the output gate of a query whose read transaction has begun: `None` when replies
/// leave at the local commit (`Async`, `Images`), else a barrier behind every batch committed
/// so far.
#[derive(Message)]
#[rtype(result = "Option<oneshot::Receiver<Result<(), Error>>>")]
pub(crate) struct QueryGate;

impl Handler<QueryAdmit> for TenantActor {
    type Result = Result<QueryPass, Error>;

    fn handle(&mut self, _msg: QueryAdmit, _ctx: &mut Context<Self>) -> Self::Result {
        self.tenure.admits(None, self.held())?;
        let Some(ledger) = self.ledger.as_ref() else {
            return Err(Error::Closed("the ledger was closed".into()));
        };
        let shipped = self.rt.durability == crate::config::Durability::Shipped;
        Ok(QueryPass {
            path: ledger.path().to_path_buf(),
            cell: self.cell.clone(),
            clock: self.rt.clock.clone(),
            gated: shipped && self.log.is_some() && !self.rt.replies_before_log(),
            slots: self.rt.queries.clone(),
        })
    }
}

impl Handler<QueryGate> for TenantActor {
    type Result = Option<oneshot::Receiver<Result<(), Error>>>;

    fn handle(&mut self, _msg: QueryGate, ctx: &mut Context<Self>) -> Self::Result {
        let log = self.log.as_mut()?;
        let (passed, gate) = oneshot::channel();
        let barrier: Finisher = Box::new(move |outcome| {
            let _ = passed.send(outcome);
        });
        log.add(None, vec![barrier]);
        self.ship_next(ctx);
        Some(gate)
    }
}

impl TenantActor {
    /// Prunes stored replies older than the idempotency window in the batch just begun, at most
    /// [`PRUNE_AT_ONCE`] of them, once per `idempotency_window / 24` (and at every batch while
    /// a prune finds a full share): the deletes commit with the batch, under its lease check.
    pub(super) fn prune_replies_if_due(&mut self) {
        let now = self.rt.wall_ms();
        if now < self.next_prune_ms {
            return;
        }
        let window = leasehold::clock::duration_ms(self.rt.idempotency_window);
        let Some(ledger) = self.ledger.as_mut() else {
            return;
        };
        let before = i64::try_from(now.saturating_sub(window)).unwrap_or(i64::MAX);
        match ledger.prune_replies(before, PRUNE_AT_ONCE) {
            Ok(pruned) if pruned == PRUNE_AT_ONCE as usize => {}
            Ok(_) => self.next_prune_ms = now.saturating_add(window / 24),
            Err(e) => {
                tracing::warn!(key = %self.cell.key, error = %e, "pruning stored replies failed");
                self.next_prune_ms = now.saturating_add(window / 24);
            }
        }
    }
}

impl TenantRef {
    /// Runs a decoded command like [`TenantRef::run`]: sent now, answered with its batch.
    pub(crate) fn command(
        &self,
        name: String,
        key: Option<String>,
        call: CommandCall,
    ) -> impl std::future::Future<Output = Result<Vec<u8>, Error>> + use<> {
        let (reply, answer) = oneshot::channel();
        let job = Box::new(CommandJob {
            name,
            key,
            call,
            reply,
        });
        let request = self.addr.send(Run { ticket: None, job });
        let tenant = self.key.clone();
        async move {
            request.await.map_err(|_| super::closed(&tenant))?;
            answer.await.map_err(|_| super::closed(&tenant))?
        }
    }

    /// Runs a decoded query on a read connection of its own, and answers once everything it
    /// could have seen is acknowledged and the lease still holds.
    pub(crate) fn query(
        &self,
        call: QueryCall,
    ) -> impl std::future::Future<Output = Result<Vec<u8>, Error>> + use<> {
        let admit = self.addr.send(QueryAdmit);
        let (addr, key) = (self.addr.clone(), self.key.clone());
        async move {
            let pass = admit.await.map_err(|_| super::closed(&key))??;
            let _slot = pass
                .slots
                .clone()
                .acquire_owned()
                .await
                .map_err(|_| super::closed(&key))?;
            let path = pass.path.clone();
            let read = match blocking(move || ReadLedger::begin(&path).map_err(Error::from)).await {
                // The tenure ended meanwhile (its directory may be gone): it has left.
                Err(_) if pass.cell.is_ended() => return Err(left(&key)),
                other => other?,
            };
            let gate = match pass.gated {
                true => addr
                    .send(QueryGate)
                    .await
                    .map_err(|_| super::closed(&key))?,
                false => None,
            };
            let read = blocking(move || match read.run(|l| Ok(call(l))) {
                Ok(answer) => answer,
                Err(e) => Err(Error::from(e)),
            });
            let bytes = read.await?;
            if let Some(gate) = gate {
                gate.await.map_err(|_| super::closed(&key))??;
            }
            if pass.cell.is_ended() {
                // Handed off, abandoned or forgotten while it read: a successor may write from
                // now on, so this reply would be stale; the router routes the query again.
                return Err(left(&key));
            }
            if !pass.cell.holds(pass.clock.now_ms()) {
                return Err(fenced(&key));
            }
            Ok(bytes)
        }
    }
}

/// What a query hears when its tenure ended while it ran: it ran nothing, it may go again.
fn left(key: &LeaseKey) -> Error {
    Error::Draining {
        key: key.to_string(),
        state: "left".into(),
    }
}

fn fenced(key: &LeaseKey) -> Error {
    Error::Fenced {
        key: key.to_string(),
    }
}

/// Runs a blocking step on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Closed(format!("blocking task failed: {e}")))?
}
