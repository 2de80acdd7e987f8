//! The tenant actor: one per open tenant, a thin shell around its [`Tenure`]. Its mailbox
//! serializes runs, admissions, snapshots, handoff, abandon and forget; every decision about
//! the tenure's life is the pure state machine's (`tenure.rs`); this file carries out its
//! effects (`effects.rs`) and runs the group commit.
//!
//! **Group commit.** The first `Run` of a mailbox burst opens a transaction (`BEGIN IMMEDIATE`);
//! each run executes at once in its own savepoint; a future spawned on the actor commits the
//! batch after the mailbox is drained. Before `COMMIT` the lease is checked once: if it no longer
//! holds, the whole batch rolls back and every caller gets `Fenced` (promise 1 in
//! docs/guarantees.md). The lease is checked again after `COMMIT`: a lapse ends the tenure and
//! its callers get `Fenced`. Any other message commits the open batch first, so it sees only
//! settled work.

use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use leasehold::ledger::Ledger;
use leasehold::{Error, LeaseKey};
use tokio::sync::oneshot;

use super::messages::*;
use super::publish::Publisher;
use super::tenure::{Input, SnapshotPlan, Tenure};
use crate::lease_actor::{LeaseActor, LeaseCell};
use crate::runtime::Runtime;
use crate::status::TenantStatus;

/// How many messages may wait in a tenant's mailbox before senders wait.
pub(crate) const MAILBOX_CAPACITY: usize = 1_024;

/// A run that holds the actor's thread longer than this is reported by key: every tenant on
/// the same arbiter waits for it (docs/guarantees.md, "Blocking closures").
pub(crate) const SLOW_RUN: Duration = Duration::from_millis(100);

/// Everything a tenant actor starts with.
pub(crate) struct TenantParts {
    /// Stores, clock, configuration and events of the replica.
    pub(crate) rt: Arc<Runtime>,
    /// The tenure's standing.
    pub(crate) cell: Arc<LeaseCell>,
    /// The open ledger.
    pub(crate) ledger: Ledger,
    /// Publishes this tenure's images.
    pub(crate) publisher: Arc<Publisher>,
    /// The renewal chain, to leave it when the tenure ends.
    pub(crate) lease_actor: Addr<LeaseActor>,
    /// Told when the tenant reaches a final state.
    pub(crate) gone: Recipient<TenantGone>,
    /// Told when a forget begins.
    pub(crate) forgets: Recipient<ForgetBegun>,
    /// Where the final status is left for handles once the actor has stopped.
    pub(crate) ended: Arc<crate::status::StatusCell>,
}

/// The reply channels of the handoff under way.
#[derive(Default)]
pub(super) struct HandoffReplies {
    /// Answered when the drain is over, with how long the flush may take (or refused,
    /// overtaken, timed out).
    pub(super) drained: Option<oneshot::Sender<Result<Duration, Error>>>,
    /// Answered when the flush is over.
    pub(super) done: Option<oneshot::Sender<Result<(), Error>>>,
}

/// One open tenant.
pub(crate) struct TenantActor {
    /// Stores, clock, configuration and events of the replica.
    pub(super) rt: Arc<Runtime>,
    /// Every decision about the tenure's life.
    pub(super) tenure: Tenure,
    /// The tenure's standing, read before every run and commit.
    pub(super) cell: Arc<LeaseCell>,
    /// The ledger; `None` once closed.
    pub(super) ledger: Option<Ledger>,
    /// Publishes images.
    pub(super) publisher: Arc<Publisher>,
    /// The renewal chain.
    pub(super) lease_actor: Addr<LeaseActor>,
    /// Told when the tenant reaches a final state.
    pub(super) gone: Recipient<TenantGone>,
    /// Told when a forget begins.
    pub(super) forgets: Recipient<ForgetBegun>,
    /// The final status, for handles once the actor has stopped.
    pub(super) ended: Arc<crate::status::StatusCell>,
    /// Callers of the open transaction, answered at commit; `None` when none is open.
    pub(super) batch: Option<Vec<Finisher>>,
    /// The handoff under way, if any.
    pub(super) handoff: HandoffReplies,
    /// Callers of an abandon under way.
    pub(super) abandons: Vec<oneshot::Sender<Result<(), Error>>>,
    /// The caller of the forget under way.
    pub(super) forget: Option<oneshot::Sender<Result<(), Error>>>,
    /// Resolved when the forget under way is over; `close` waits for it.
    pub(super) forget_done: Option<oneshot::Sender<()>>,
}

impl TenantActor {
    /// A serving tenant made of `parts`.
    pub(crate) fn new(parts: TenantParts) -> Self {
        let drain_ms = u64::try_from(parts.rt.drain_timeout.as_millis()).unwrap_or(u64::MAX);
        let tenure = Tenure::new(parts.cell.key.to_string(), parts.cell.epoch, drain_ms)
            .skipping_final_image(parts.rt.skips_final_image());
        Self {
            rt: parts.rt,
            tenure,
            cell: parts.cell,
            ledger: Some(parts.ledger),
            publisher: parts.publisher,
            lease_actor: parts.lease_actor,
            gone: parts.gone,
            forgets: parts.forgets,
            ended: parts.ended,
            batch: None,
            handoff: HandoffReplies::default(),
            abandons: Vec::new(),
            forget: None,
            forget_done: None,
        }
    }

    pub(super) fn key(&self) -> &LeaseKey {
        &self.cell.key
    }

    pub(super) fn fenced(&self) -> Error {
        Error::Fenced {
            key: self.key().to_string(),
        }
    }

    /// Whether the lease holds now (or the commit check is switched off, a deliberate bug).
    pub(super) fn held(&self) -> bool {
        self.cell.holds(self.rt.now_ms()) || self.rt.skips_commit_check()
    }

    /// Commits the open batch if the lease still holds, else rolls it back; answers its callers.
    /// The lease is checked again after the commit: a caller is told `Ok` only if the lease held
    /// when its write became durable locally.
    pub(super) fn commit_batch(&mut self, ctx: &mut Context<Self>) {
        let Some(callers) = self.batch.take() else {
            return;
        };
        let held = self.held();
        let fenced = self.fenced();
        let outcome = match self.ledger.as_mut() {
            None => Err(Error::Closed("the ledger was closed".into())),
            Some(ledger) if held => ledger.commit().map_err(|e| {
                let _ = ledger.rollback();
                Error::from(e)
            }),
            Some(ledger) => {
                let _ = ledger.rollback();
                Err(fenced)
            }
        };
        let outcome = if outcome.is_ok() {
            // Committed locally; if the lease ran out meanwhile nothing of this tenure may count
            // from here on: the tenure ends and these writes never reach an image.
            let lapsed = !self.held();
            self.feed(Input::Committed { lapsed }, ctx);
            if lapsed { Err(self.fenced()) } else { Ok(()) }
        } else {
            outcome
        };
        // Callers hear the outcome only once the tenant's state says the same.
        for caller in callers {
            caller(outcome.clone());
        }
    }

    /// Closes the ledger (the file stays).
    pub(super) fn close_ledger(&mut self, ctx: &mut Context<Self>) {
        self.commit_batch(ctx);
        if let Some(ledger) = self.ledger.take()
            && let Err(e) = ledger.close()
        {
            tracing::warn!(key = %self.key(), error = %e, "closing the ledger failed");
        }
    }
}

impl Actor for TenantActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        if let Some(every) = self.rt.snapshot_every {
            ctx.run_interval(every, |act, ctx| {
                let held = act.held();
                act.commit_batch(ctx);
                act.feed(Input::Tick { held }, ctx);
            });
        }
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        // Stopped before its tenure ended (its replica closed and dropped, its arbiter gone):
        // like a crash, nothing flushed, nothing released; its handles read it as abandoned.
        let status = self.tenure.status();
        if !status.is_final() {
            self.cell.end();
            self.ended.set(TenantStatus::Abandoned);
        } else {
            self.ended.set(status);
        }
    }
}

impl Handler<Run> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: Run, ctx: &mut Context<Self>) {
        if let Err(e) = self.tenure.admits(msg.ticket, self.held()) {
            return msg.job.refuse(e);
        }
        let Some(ledger) = self.ledger.as_mut() else {
            return msg
                .job
                .refuse(Error::Closed("the ledger was closed".into()));
        };
        if self.batch.is_none() {
            if let Err(e) = ledger.begin() {
                return msg.job.refuse(e.into());
            }
            self.batch = Some(Vec::new());
            // Runs after the messages already in the mailbox: they join this batch.
            ctx.spawn(actix::fut::ready(()).map(|_, act: &mut Self, ctx| act.commit_batch(ctx)));
        }
        let started = std::time::Instant::now();
        let finisher = msg.job.execute(ledger);
        let took = started.elapsed();
        if took >= SLOW_RUN {
            tracing::warn!(key = %self.key(), took_ms = took.as_millis() as u64,
                "a run held the tenant's thread; tenants on the same arbiter waited for it");
        }
        if let Some(batch) = self.batch.as_mut() {
            batch.push(finisher);
        }
    }
}

impl Handler<Admit> for TenantActor {
    type Result = Result<u64, Error>;

    fn handle(&mut self, _msg: Admit, ctx: &mut Context<Self>) -> Self::Result {
        self.commit_batch(ctx);
        let held = self.held();
        self.tenure.admit(held)
    }
}

impl Handler<Retire> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: Retire, ctx: &mut Context<Self>) {
        self.commit_batch(ctx);
        self.feed(Input::Retire { ticket: msg.ticket }, ctx);
    }
}

impl Handler<Snapshot> for TenantActor {
    type Result = ResponseActFuture<Self, Result<Option<leasehold::layout::ImageRef>, Error>>;

    fn handle(&mut self, _msg: Snapshot, ctx: &mut Context<Self>) -> Self::Result {
        self.commit_batch(ctx);
        let held = self.held();
        match self.tenure.snapshot(held, true) {
            SnapshotPlan::Refuse(e) => Box::pin(actix::fut::ready(Err(e))),
            SnapshotPlan::Unchanged => {
                let head = self.publisher.clone();
                Box::pin(async move { Ok(head.head().await) }.into_actor(self))
            }
            SnapshotPlan::Publish { commits } => {
                let publisher = self.publisher.clone();
                let work = async move {
                    let outcome = publisher.publish(commits).await;
                    (outcome, publisher.head().await)
                };
                Box::pin(work.into_actor(self).map(move |(outcome, head), act, ctx| {
                    let answer = match &outcome {
                        Ok(Some(published)) => Ok(Some(published.image.clone())),
                        Ok(None) => Ok(head),
                        Err(e) => Err(e.clone()),
                    };
                    let lease_gone = act.cell.is_ended();
                    act.feed(
                        Input::Published {
                            commits,
                            final_image: false,
                            outcome,
                            lease_gone,
                        },
                        ctx,
                    );
                    // Published, but a forget or a lost lease took the tenant meanwhile.
                    match act.tenure.status() {
                        TenantStatus::Abandoning
                        | TenantStatus::Abandoned
                        | TenantStatus::Forgetting
                        | TenantStatus::Forgotten
                            if answer.is_ok() =>
                        {
                            Err(Error::Draining {
                                key: act.key().to_string(),
                                state: act.tenure.status().as_str().to_string(),
                            })
                        }
                        _ => answer,
                    }
                }))
            }
        }
    }
}

impl Handler<GetStatus> for TenantActor {
    type Result = MessageResult<GetStatus>;

    fn handle(&mut self, _msg: GetStatus, ctx: &mut Context<Self>) -> Self::Result {
        self.commit_batch(ctx);
        MessageResult(self.tenure.status())
    }
}
