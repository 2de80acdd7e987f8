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

use super::log::LogShip;
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
    /// Told when a passivation's flush failed and the tenure serves on.
    pub(crate) serves_on: Recipient<ServesOn>,
    /// Where the final status is left for handles once the actor has stopped.
    pub(crate) ended: Arc<crate::status::StatusCell>,
    /// The change log, with `Shipped` and `Async`; `None` with `Images`.
    pub(crate) log: Option<LogShip>,
    /// Counts the tenant in `leasehold_open_tenants` from the open on, while its actor lives.
    pub(crate) counted: crate::metrics::OpenTenant,
    /// Its activity, which the supervisor reads to find idle tenants.
    pub(crate) activity: Arc<crate::passivation::Activity>,
}

/// A new image a logged tenure waits to take (at the next cut of its log).
pub(super) struct ImageWant {
    /// Batches committed when it was asked for.
    pub(super) commits: u64,
    /// The explicit snapshot's caller, if any.
    pub(super) reply: Option<oneshot::Sender<Result<Option<leasehold::layout::ImageRef>, Error>>>,
}

/// How many WAL frames a logged ledger keeps before the runtime checkpoints it (about 4 MB of
/// 4 KiB pages): the frames are read by then, so the checkpoint loses nothing of the log.
pub(crate) const CHECKPOINT_FRAMES: u32 = 1_000;

/// The reply channels of the handoff under way.
#[derive(Default)]
pub(super) struct HandoffReplies {
    /// Answered when the drain is over, with how long the flush may take (or refused,
    /// overtaken, timed out).
    pub(super) drained: Option<oneshot::Sender<Result<Duration, Error>>>,
    /// Answered when the flush is over.
    pub(super) done: Option<oneshot::Sender<Result<(), Error>>>,
}

/// Where the tenant's retention stands (docs/guarantees.md, the storage bound): one sweep at a
/// time, and one after every new image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum RetentionSweep {
    /// None under way.
    #[default]
    Idle,
    /// One under way.
    Running,
    /// One under way, and an image published since it began: it read the record and took its
    /// `now` before that image, so it cannot stand for it, and another runs once it ends.
    RunningThenAgain,
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
    /// Told when a passivation's flush failed and the tenure serves on.
    pub(super) serves_on: Recipient<ServesOn>,
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
    /// The change log, with `Shipped` and `Async`.
    pub(super) log: Option<LogShip>,
    /// A handoff's flush waits for the log to settle; the batches committed when it began.
    pub(super) flush_wanted: Option<u64>,
    /// Images wanted at the next cut of the log.
    pub(super) image_wanted: Vec<ImageWant>,
    /// Whether a retention sweep is under way, and whether another follows it.
    pub(super) retention: RetentionSweep,
    /// An image of a logged ledger is being taken and published: at most one at a time, so a
    /// slow upload never piles up read transactions (each a connection holding the WAL).
    pub(super) image_busy: bool,
    /// The durable store refused an image of this many bytes for its size, and why: periodic
    /// images are not taken again until the ledger is smaller (docs/guarantees.md, "Limits").
    pub(super) image_too_large: Option<(u64, Error)>,
    /// Counts this tenant in `leasehold_open_tenants` while the actor lives.
    _counted: crate::metrics::OpenTenant,
    /// When (wall clock) the next batch prunes stored replies older than the idempotency window.
    pub(super) next_prune_ms: u64,
    /// When the last segment's outcome came back (the gap to the next cut, a metric).
    pub(super) last_outcome: Option<std::time::Instant>,
    /// Touched at every run, admission, snapshot and query: the supervisor judges idleness by
    /// it (docs/architecture.md, "Passivation").
    pub(super) activity: Arc<crate::passivation::Activity>,
}

impl TenantActor {
    /// A serving tenant made of `parts`.
    pub(crate) fn new(parts: TenantParts) -> Self {
        let drain_ms = u64::try_from(parts.rt.drain_timeout.as_millis()).unwrap_or(u64::MAX);
        let tenure = Tenure::new(parts.cell.key.to_string(), parts.cell.epoch, drain_ms)
            .skipping_final_image(parts.rt.skips_final_image())
            .skipping_passivation_flush(parts.rt.skips_passivation_flush());
        Self {
            rt: parts.rt,
            tenure,
            cell: parts.cell,
            ledger: Some(parts.ledger),
            publisher: parts.publisher,
            lease_actor: parts.lease_actor,
            gone: parts.gone,
            forgets: parts.forgets,
            serves_on: parts.serves_on,
            ended: parts.ended,
            batch: None,
            handoff: HandoffReplies::default(),
            abandons: Vec::new(),
            forget: None,
            forget_done: None,
            log: parts.log,
            flush_wanted: None,
            image_wanted: Vec::new(),
            retention: RetentionSweep::Idle,
            image_busy: false,
            image_too_large: None,
            _counted: parts.counted,
            next_prune_ms: 0,
            last_outcome: None,
            activity: parts.activity,
        }
    }

    /// The tenant was used now: it is not idle.
    pub(super) fn touch(&self) {
        self.activity.touch(self.rt.now_ms());
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
        let _batch = tracing::debug_span!("batch", key = %self.cell.key, epoch = self.cell.epoch,
            runs = callers.len())
        .entered();
        let began = std::time::Instant::now();
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
        if outcome.is_ok() && self.log.is_none() {
            crate::metrics::commit_took(began.elapsed());
        }
        match &outcome {
            Ok(()) => crate::metrics::committed(callers.len()),
            Err(e) if e.is_fenced() => crate::metrics::fenced(callers.len()),
            Err(_) => {}
        }
        if outcome.is_ok() && self.log.is_some() {
            return self.committed_logged(callers, began, ctx);
        }
        let outcome = if outcome.is_ok() {
            // Committed locally; if the lease ran out meanwhile nothing of this tenure may count
            // from here on: the tenure ends and these writes never reach an image.
            let lapsed = !self.held();
            self.feed(Input::Committed { lapsed }, ctx);
            if lapsed {
                crate::metrics::fenced(callers.len());
                Err(self.fenced())
            } else {
                Ok(())
            }
        } else {
            outcome
        };
        // Callers hear the outcome only once the tenant's state says the same.
        for caller in callers {
            caller(outcome.clone());
        }
    }

    /// A batch committed locally on a logged ledger: its changes join the log. With `Shipped`
    /// its callers wait until the log holds them; with `Async` they hear at once (if the lease
    /// still held at the commit), and the changes go at the next shipping tick.
    fn committed_logged(
        &mut self,
        callers: Vec<Finisher>,
        began: std::time::Instant,
        ctx: &mut Context<Self>,
    ) {
        let taken = match self.ledger.as_mut() {
            Some(ledger) => ledger.take_changes(),
            None => Ok(None),
        };
        if taken.is_ok() {
            crate::metrics::commit_took(began.elapsed());
        }
        let changes = match taken {
            Ok(changes) => changes,
            Err(e) => {
                // Without the pages the log cannot go on: nothing more is acknowledged.
                let error = Error::Unshipped {
                    key: self.key().to_string(),
                    reason: format!("reading the commit's pages failed: {e}"),
                };
                let mut segment = String::new();
                if let Some(log) = self.log.as_mut() {
                    segment = log.next_position().to_string();
                    log.add(None, callers);
                    log.fail(error.clone());
                }
                self.rt.events.emit(crate::events::Event::ShipFailed {
                    key: self.key().to_string(),
                    segment,
                    error: error.to_string(),
                });
                self.feed(Input::Committed { lapsed: false }, ctx);
                self.feed(Input::Shipping, ctx);
                self.feed(Input::Shipped(Err(error)), ctx);
                return;
            }
        };
        let shipped = self.rt.durability == crate::config::Durability::Shipped;
        if shipped && !self.rt.acks_before_tip() {
            self.feed(Input::Committed { lapsed: false }, ctx);
            if let Some(log) = self.log.as_mut() {
                log.add(changes, callers);
            }
            self.ship_next(ctx);
        } else {
            let lapsed = !self.held();
            self.feed(Input::Committed { lapsed }, ctx);
            let outcome = if lapsed {
                crate::metrics::fenced(callers.len());
                Err(self.fenced())
            } else {
                Ok(())
            };
            for caller in callers {
                caller(outcome.clone());
            }
            if let Some(log) = self.log.as_mut() {
                log.add(changes, Vec::new());
            }
            if shipped {
                self.ship_next(ctx);
            }
        }
        self.checkpoint_if_due();
    }

    /// With `Async`, the refusal of a run while the log is `async_pending_limit` behind: the
    /// bytes committed and not yet shipped are bounded (docs/guarantees.md, the numbers).
    fn log_behind(&self) -> Option<Error> {
        if !matches!(self.rt.durability, crate::config::Durability::Async { .. }) {
            return None;
        }
        let log = self.log.as_ref()?;
        let pending = log.unshipped_bytes();
        (pending >= self.rt.async_pending_limit && log.failure().is_none()).then(|| {
            Error::LogBehind {
                key: self.key().to_string(),
                pending_bytes: pending,
                limit: self.rt.async_pending_limit,
            }
        })
    }

    /// A run was refused with nothing of it committed: said to the observer and `tracing`.
    fn batch_refused(&self, error: &Error) {
        self.rt.events.emit(crate::events::Event::BatchRefused {
            key: self.key().to_string(),
            error: error.to_string(),
        });
    }

    /// Checkpoints a logged ledger whose WAL holds more than [`CHECKPOINT_FRAMES`] read frames,
    /// passively: a reader taking an image never makes the actor's thread wait (SQLite starts
    /// the WAL over once everything was copied and no reader needs it; the capture follows).
    fn checkpoint_if_due(&mut self) {
        if let Some(ledger) = self.ledger.as_mut()
            && ledger.wal_frames() >= CHECKPOINT_FRAMES
            && !ledger.in_batch()
            && let Err(e) = ledger.checkpoint_passive()
        {
            tracing::debug!(key = %self.cell.key, error = %e, "checkpoint postponed");
        }
    }

    /// Closes the ledger (the file stays).
    pub(super) fn close_ledger(&mut self, ctx: &mut Context<Self>) {
        self.commit_batch(ctx);
        if let Some(log) = self.log.as_mut() {
            // The ledger closes after a flush settled the log, or when leaving without one:
            // then what is not in flight is never shipped, and its callers hear so.
            log.fail(Error::Draining {
                key: self.cell.key.to_string(),
                state: self.tenure.status().as_str().to_string(),
            });
        }
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
        if let crate::config::Durability::Async { every } = self.rt.durability {
            ctx.run_interval(every, |act, ctx| {
                act.commit_batch(ctx);
                act.ship_next(ctx);
            });
        }
        if let Some(every) = self.rt.snapshot_every {
            ctx.run_interval(every, |act, ctx| {
                let held = act.held();
                act.commit_batch(ctx);
                act.feed(Input::Tick { held }, ctx);
            });
        }
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        // A segment still in flight (an abandon does not wait for it, nor does a replica
        // dropped without `close()`): its callers hear an unknown outcome, never `Fenced`.
        if let Some(log) = self.log.as_mut() {
            log.abort();
        }
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
        self.touch();
        if let Err(e) = self.tenure.admits(msg.ticket, self.held()) {
            if e.is_fenced() {
                crate::metrics::fenced(1);
            }
            return msg.job.refuse(e);
        }
        if let Some(behind) = self.log_behind() {
            self.batch_refused(&behind);
            return msg.job.refuse(behind);
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
            self.prune_replies_if_due();
        }
        let Some(ledger) = self.ledger.as_mut() else {
            return msg
                .job
                .refuse(Error::Closed("the ledger was closed".into()));
        };
        let started = std::time::Instant::now();
        let cx = RunCx {
            key: &self.cell.key,
            wall_ms: self.rt.wall_ms(),
            events: &self.rt.events,
            ignores_keys: self.rt.ignores_idempotency_keys(),
        };
        let finisher = msg.job.execute(ledger, &cx);
        let took = started.elapsed();
        let refused = ledger.take_refused_run();
        let batch_bytes = ledger.batch_bytes();
        if took >= SLOW_RUN {
            tracing::warn!(key = %self.key(), took_ms = took.as_millis() as u64,
                "a run held the tenant's thread; tenants on the same arbiter waited for it");
        }
        if let Some(batch) = self.batch.as_mut() {
            batch.push(finisher);
        }
        if let Some((bytes, limit)) = refused {
            self.batch_refused(&Error::BatchTooLarge { bytes, limit });
        }
        if batch_bytes >= self.rt.segment_limit / 2 {
            // No further run joins it: with each run at most half a segment, every committed
            // batch fits one (docs/guarantees.md, "Limits").
            self.commit_batch(ctx);
        }
    }
}

impl Handler<Admit> for TenantActor {
    type Result = Result<u64, Error>;

    fn handle(&mut self, _msg: Admit, ctx: &mut Context<Self>) -> Self::Result {
        self.touch();
        self.commit_batch(ctx);
        let held = self.held();
        self.tenure.admit(held)
    }
}

impl Handler<Retire> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: Retire, ctx: &mut Context<Self>) {
        self.touch();
        self.commit_batch(ctx);
        self.feed(Input::Retire { ticket: msg.ticket }, ctx);
    }
}

impl Handler<Snapshot> for TenantActor {
    type Result = ResponseActFuture<Self, Result<Option<leasehold::layout::ImageRef>, Error>>;

    fn handle(&mut self, _msg: Snapshot, ctx: &mut Context<Self>) -> Self::Result {
        self.touch();
        self.commit_batch(ctx);
        let held = self.held();
        match self.tenure.snapshot(held, true) {
            SnapshotPlan::Refuse(e) => Box::pin(actix::fut::ready(Err(e))),
            SnapshotPlan::Unchanged => {
                let head = self.publisher.clone();
                Box::pin(async move { Ok(head.head().await) }.into_actor(self))
            }
            SnapshotPlan::Publish { commits } if self.log.is_some() => {
                let answer = self.snapshot_logged(commits, ctx);
                let key = self.key().to_string();
                Box::pin(
                    async move {
                        answer.await.unwrap_or_else(|_| {
                            Err(Error::Draining {
                                key,
                                state: "stopped".into(),
                            })
                        })
                    }
                    .into_actor(self),
                )
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
