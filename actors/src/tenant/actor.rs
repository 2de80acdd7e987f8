//! The tenant actor: one per open tenant. Its mailbox serializes runs, admissions, snapshots,
//! handoff steps, abandon and forget; this file holds its state, group commit and the serving
//! verbs. The leaving verbs are in `lifecycle.rs`.
//!
//! **Group commit.** The first `Run` of a mailbox burst opens a transaction (`BEGIN IMMEDIATE`);
//! each run executes at once in its own savepoint; a future spawned on the actor commits the
//! batch after the mailbox is drained. Before `COMMIT` the lease is checked once: if it no longer
//! holds, the whole batch rolls back and every caller gets `Fenced` (CONTRACT promise 1). Every
//! caller is answered after the commit. Any other message commits the open batch first, so it
//! sees only settled work.

use std::collections::HashSet;
use std::sync::Arc;

use actix::prelude::*;
use leasehold::ledger::Ledger;
use leasehold::{Error, LeaseKey};
use tokio::sync::oneshot;

use super::messages::*;
use super::publish::{Published, Publisher};
use crate::events::Event;
use crate::lease_actor::{LeaseActor, LeaseCell};
use crate::runtime::Runtime;
use crate::status::TenantStatus;

/// How many messages may wait in a tenant's mailbox before senders wait.
pub(crate) const MAILBOX_CAPACITY: usize = 1_024;

/// Everything a tenant actor starts with.
pub(crate) struct TenantParts {
    /// The shared runtime.
    pub(crate) rt: Arc<Runtime>,
    /// The tenure's standing.
    pub(crate) cell: Arc<LeaseCell>,
    /// The open ledger.
    pub(crate) ledger: Ledger,
    /// Publishes this tenure's images.
    pub(crate) publisher: Arc<Publisher>,
    /// The renewal chain, to leave it on release.
    pub(crate) lease_actor: Addr<LeaseActor>,
    /// Told when the tenant reaches a final state.
    pub(crate) gone: Recipient<TenantGone>,
    /// Told when a forget begins.
    pub(crate) forgets: Recipient<ForgetBegun>,
}

/// One open tenant.
pub(crate) struct TenantActor {
    /// The shared runtime.
    pub(super) rt: Arc<Runtime>,
    /// Where the tenant is in its life.
    pub(super) status: TenantStatus,
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
    /// Callers of the open batch, answered at commit.
    pub(super) batch: Vec<Finisher>,
    /// Whether a transaction is open.
    pub(super) batch_open: bool,
    /// Live tickets of admitted work.
    pub(super) tickets: HashSet<u64>,
    /// The next ticket's id.
    pub(super) next_ticket: u64,
    /// The handoff waiting for the drain, if any.
    pub(super) drain: Option<oneshot::Sender<Result<(), Error>>>,
    /// Publishes under way (snapshots and the final flush).
    pub(super) uploads: usize,
    /// Waiting for `uploads` to reach zero.
    pub(super) upload_waiters: Vec<oneshot::Sender<()>>,
    /// Batches committed in this tenure.
    pub(super) commits: u64,
    /// `commits` as of the last published image (or the restore).
    pub(super) published_commits: u64,
    /// True once a flush has published and is handing the lease back: too late to overtake.
    pub(super) releasing: bool,
}

impl TenantActor {
    /// A serving tenant made of `parts`.
    pub(crate) fn new(parts: TenantParts) -> Self {
        Self {
            rt: parts.rt,
            status: TenantStatus::Serving,
            cell: parts.cell,
            ledger: Some(parts.ledger),
            publisher: parts.publisher,
            lease_actor: parts.lease_actor,
            gone: parts.gone,
            forgets: parts.forgets,
            batch: Vec::new(),
            batch_open: false,
            tickets: HashSet::new(),
            next_ticket: 1,
            drain: None,
            uploads: 0,
            upload_waiters: Vec::new(),
            commits: 0,
            published_commits: 0,
            releasing: false,
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

    pub(super) fn draining(&self) -> Error {
        Error::Draining {
            key: self.key().to_string(),
            state: self.status.as_str().to_string(),
        }
    }

    /// Moves to `to`, emitting the change; a move the state machine forbids is refused (and
    /// logged, since it means a bug).
    pub(super) fn move_to(&mut self, to: TenantStatus) -> bool {
        let from = self.status;
        if !from.can_move_to(to) {
            tracing::error!(key = %self.key(), %from, %to, "refused a backward status move");
            return false;
        }
        self.status = to;
        self.rt.events.emit(Event::StateChanged {
            key: self.key().to_string(),
            from,
            to,
        });
        true
    }

    /// Whether a call may run now: serving with the lease held, or draining under a live ticket.
    fn admission(&self, ticket: Option<u64>) -> Result<(), Error> {
        let ticketed = ticket.is_some_and(|t| self.tickets.contains(&t));
        match self.status {
            TenantStatus::Serving => {}
            TenantStatus::Draining if ticketed => {}
            s if s.is_leaving() => return Err(self.draining()),
            _ => return Err(self.fenced()),
        }
        if self.cell.holds(self.rt.now_ms()) || self.rt.skips_commit_check() {
            Ok(())
        } else {
            Err(self.fenced())
        }
    }

    /// Commits the open batch if the lease still holds, else rolls it back; answers its callers.
    /// The lease is checked again after the commit: a caller is told `Ok` only if the lease held
    /// when its write became durable locally.
    pub(super) fn commit_batch(&mut self) {
        if !self.batch_open {
            return;
        }
        self.batch_open = false;
        let callers = std::mem::take(&mut self.batch);
        let held = self.cell.holds(self.rt.now_ms()) || self.rt.skips_commit_check();
        let outcome = match self.ledger.as_mut() {
            None => Err(Error::Closed("the ledger was closed".into())),
            Some(ledger) if held => ledger.commit().map_err(|e| {
                let _ = ledger.rollback();
                Error::from(e)
            }),
            Some(ledger) => {
                let _ = ledger.rollback();
                Err(self.fenced())
            }
        };
        let lapsed =
            outcome.is_ok() && !self.cell.holds(self.rt.now_ms()) && !self.rt.skips_commit_check();
        let outcome = if lapsed {
            // Committed locally, but the lease ran out meanwhile: nothing of this tenure may
            // count from here on, so the tenure ends and these writes never reach an image.
            self.cell.end();
            Err(self.fenced())
        } else {
            outcome
        };
        if outcome.is_ok() {
            self.commits += 1;
        }
        if lapsed {
            self.rt.events.emit(Event::Lost {
                key: self.key().to_string(),
                epoch: self.cell.epoch,
            });
            self.lose();
        }
        // Callers hear the outcome only once the tenant's state says the same.
        for caller in callers {
            caller(outcome.clone());
        }
    }

    /// Whether anything was committed since the last published image.
    pub(super) fn dirty(&self) -> bool {
        self.commits > self.published_commits
    }

    /// Starts a publish and counts it as under way; `finish_upload` must follow.
    pub(super) fn begin_upload(&mut self) -> (Arc<Publisher>, u64) {
        self.uploads += 1;
        (self.publisher.clone(), self.commits)
    }

    /// Counts a publish as over and wakes those waiting for none to be under way.
    pub(super) fn finish_upload(&mut self) {
        self.uploads = self.uploads.saturating_sub(1);
        if self.uploads == 0 {
            for waiter in self.upload_waiters.drain(..) {
                let _ = waiter.send(());
            }
        }
    }

    /// Resolves when no publish is under way.
    pub(super) fn uploads_settled(&mut self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        if self.uploads == 0 {
            let _ = tx.send(());
        } else {
            self.upload_waiters.push(tx);
        }
        rx
    }

    /// Publishes an image if anything changed; a periodic tick and `Snapshot` both come here.
    fn snapshot(
        &mut self,
    ) -> ResponseActFuture<Self, Result<Option<leasehold::layout::ImageRef>, Error>> {
        self.commit_batch();
        if let Err(e) = self.admission(None) {
            return Box::pin(actix::fut::ready(Err(e)));
        }
        if !self.dirty() {
            let head = self.publisher.clone();
            return Box::pin(async move { Ok(head.head().await) }.into_actor(self));
        }
        let (publisher, commits) = self.begin_upload();
        Box::pin(
            async move { publisher.publish().await }
                .into_actor(self)
                .map(move |outcome, act, _| {
                    act.finish_upload();
                    act.after_snapshot(outcome, commits)
                }),
        )
    }

    fn after_snapshot(
        &mut self,
        outcome: Result<Published, Error>,
        commits: u64,
    ) -> Result<Option<leasehold::layout::ImageRef>, Error> {
        let key = self.key().to_string();
        match outcome {
            Ok(Published { image, taken_at_ms }) => {
                self.published_commits = self.published_commits.max(commits);
                self.rt.events.emit(Event::SnapshotPublished {
                    key,
                    image: image.clone(),
                    taken_at_ms,
                });
                if self.status.is_leaving() || self.status.is_final() {
                    return Err(self.draining());
                }
                Ok(Some(image))
            }
            Err(error) => {
                self.rt.events.emit(Event::SnapshotFailed {
                    key,
                    error: error.to_string(),
                });
                Err(error)
            }
        }
    }

    /// Closes the ledger (the file stays).
    pub(super) fn close_ledger(&mut self) {
        self.commit_batch();
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
                if act.status == TenantStatus::Serving && act.dirty() && act.uploads == 0 {
                    ctx.spawn(act.snapshot().map(|_, _, _| ()));
                }
            });
        }
    }
}

impl Handler<Run> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: Run, ctx: &mut Context<Self>) {
        if let Err(e) = self.admission(msg.ticket) {
            return msg.job.refuse(e);
        }
        let Some(ledger) = self.ledger.as_mut() else {
            return msg
                .job
                .refuse(Error::Closed("the ledger was closed".into()));
        };
        if !self.batch_open {
            if let Err(e) = ledger.begin() {
                return msg.job.refuse(e.into());
            }
            self.batch_open = true;
            // Runs after the messages already in the mailbox: they join this batch.
            ctx.spawn(actix::fut::ready(()).map(|_, act: &mut Self, _| act.commit_batch()));
        }
        let finisher = msg.job.execute(ledger);
        self.batch.push(finisher);
    }
}

impl Handler<Admit> for TenantActor {
    type Result = Result<u64, Error>;

    fn handle(&mut self, _msg: Admit, _ctx: &mut Context<Self>) -> Self::Result {
        self.commit_batch();
        self.admission(None)?;
        let id = self.next_ticket;
        self.next_ticket += 1;
        self.tickets.insert(id);
        Ok(id)
    }
}

impl Handler<Retire> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: Retire, _ctx: &mut Context<Self>) {
        self.commit_batch();
        self.tickets.remove(&msg.ticket);
        if self.tickets.is_empty()
            && self.status == TenantStatus::Draining
            && let Some(drained) = self.drain.take()
        {
            let _ = drained.send(Ok(()));
        }
    }
}

impl Handler<Snapshot> for TenantActor {
    type Result = ResponseActFuture<Self, Result<Option<leasehold::layout::ImageRef>, Error>>;

    fn handle(&mut self, _msg: Snapshot, _ctx: &mut Context<Self>) -> Self::Result {
        self.snapshot()
    }
}

impl Handler<GetStatus> for TenantActor {
    type Result = MessageResult<GetStatus>;

    fn handle(&mut self, _msg: GetStatus, _ctx: &mut Context<Self>) -> Self::Result {
        self.commit_batch();
        MessageResult(self.status)
    }
}
