//! The tenure as one pure state machine: every decision about a tenant's life on this replica,
//! and nothing else. No actix, no I/O, no clock of its own: the actor passes `now` and whether
//! the lease holds, carries out the [`Effect`]s, and feeds completions back as [`Input`]s.
//!
//! ```text
//!  Serving ──handoff──> Draining{deadline} ──tickets done──> Flushing(Publishing)
//!    ^  ^                   │ deadline                          │ image published
//!    │  └───────────────────┘                                   v
//!    └──── failed publish ─────────────────────────── Flushing(Releasing) ──> Ended(Released)
//!  Serving | Draining | Flushing(Publishing):
//!    abandon ──> Abandoning ──lease released──> Ended(Abandoned)
//!    forget  ──> Forgetting(Settling ─> Marking ─> Erasing ─> Releasing) ──> Ended(Forgotten)
//!                                        └ floor not raised ─> Releasing ──> Ended(Abandoned)
//!    lease lost, lapse after COMMIT, fenced publish ──> Ended(Abandoned)
//!    a segment of the change log not shipped ──> Ended(Abandoned)
//!  Serving, no ticket, untouched since judged idle ──passivate──> Passivating(Publishing)
//!    ──log settled / image published──> Passivating(Releasing) ──> Ended(Passivated)
//!    (a failed flush serves on; abandon, forget and a lost lease overtake it while publishing)
//! ```
//!
//! The rows of the state table in `docs/architecture.md` are the unit tests at the bottom.
//! Promise numbers refer to `docs/guarantees.md`.

use std::collections::BTreeSet;

use leasehold::Error;
use tokio::time::Instant;

use super::publish::Published;
use crate::events::Event;
use crate::passivation::PassivationReason;
use crate::status::TenantStatus;

mod passivation;
mod signals;

pub(crate) use signals::{Effect, Input, SnapshotPlan, Waiter};

/// How many times a forget asks the lease store again after an answer of unknown outcome (a
/// timeout): raising the floor is idempotent for the same tenure, so a retry is safe.
pub(crate) const FLOOR_RETRIES: u32 = 2;

/// Where a tenure is. Each variant carries the data only it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Takes runs, admissions and snapshots.
    Serving,
    /// A handoff waits for admitted work until `deadline` (counted from the handoff call).
    Draining {
        /// When the handoff's caller stops waiting.
        deadline: Instant,
    },
    /// The handoff's second half.
    Flushing(Flushing),
    /// Stopping like a crash: the lease is being handed back.
    Abandoning,
    /// Being erased.
    Forgetting(Forgetting),
    /// Let go for being idle (or least recently used at `max_open`): a handoff's flush with no
    /// caller waiting and no successor (`tenure/passivation.rs`).
    Passivating {
        /// Publishing (settling the log, or the final image), then releasing.
        step: Flushing,
        /// Why it was chosen.
        reason: PassivationReason,
        /// How long it had been idle when chosen (ms).
        idle_ms: u64,
    },
    /// Over: `Released`, `Abandoned`, `Forgotten` or `Passivated`.
    Ended(TenantStatus),
}

/// The steps of a flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flushing {
    /// The final image is being published; an abandon, forget or lost lease still overtakes.
    Publishing,
    /// The image is published: the local copy goes, then the lease is handed back. Too late to
    /// overtake.
    Releasing,
}

/// The steps of a forget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Forgetting {
    /// Waiting for uploads under way to settle.
    Settling,
    /// Raising the floor; `tries` calls made so far.
    Marking {
        /// Calls of `mark_forgotten` made so far.
        tries: u32,
    },
    /// The floor is raised: deleting every copy at or below it.
    Erasing {
        /// The raised floor.
        floor: u64,
    },
    /// Handing the lease back; `floor` is `None` when the floor could not be raised.
    Releasing {
        /// The raised floor, if it was.
        floor: Option<u64>,
        /// What the forget's caller will hear.
        error: Option<Error>,
    },
}

/// One tenure of one tenant on this replica.
#[derive(Debug)]
pub(crate) struct Tenure {
    /// `<org>/<tenant>`, for errors and events.
    key: String,
    /// The tenure's epoch.
    epoch: u64,
    /// Where it is.
    phase: Phase,
    /// Live tickets of admitted work: a drain waits for them.
    tickets: BTreeSet<u64>,
    /// The next ticket's id.
    next_ticket: u64,
    /// Image publishes under way: a forget raises the floor only once none is, and a
    /// periodic snapshot is not started while one is.
    uploads: usize,
    /// Segments of the change log in flight (up to `segments_in_flight`): a forget raises the
    /// floor only once none is; they never hold back a periodic image (compaction keeps up
    /// under load).
    ships: usize,
    /// Batches committed in this tenure.
    commits: u64,
    /// `commits` as of the newest published image (or the restore).
    published: u64,
    /// A flush without its final image (a deliberate bug, `fault-switches`).
    skip_final_image: bool,
    /// A passivation that releases without settling its log or publishing its final image (a
    /// deliberate bug, `fault-switches`).
    skip_passivation_flush: bool,
    /// `drain_timeout`, for the `DrainTimeout` error.
    drain_timeout_ms: u64,
}

impl Tenure {
    /// A serving tenure of `key` at `epoch`.
    pub(crate) fn new(key: String, epoch: u64, drain_timeout_ms: u64) -> Self {
        Self {
            key,
            epoch,
            phase: Phase::Serving,
            tickets: BTreeSet::new(),
            next_ticket: 1,
            uploads: 0,
            ships: 0,
            commits: 0,
            published: 0,
            skip_final_image: false,
            skip_passivation_flush: false,
            drain_timeout_ms,
        }
    }

    /// Breaks promise 2 on purpose: a flush publishes no final image (harness tests only).
    pub(crate) fn skipping_final_image(mut self, skip: bool) -> Self {
        self.skip_final_image = skip;
        self
    }

    /// Breaks promise 12 on purpose: a passivation releases without settling (harness tests
    /// only).
    pub(crate) fn skipping_passivation_flush(mut self, skip: bool) -> Self {
        self.skip_passivation_flush = skip;
        self
    }

    /// The public status of the phase.
    pub(crate) fn status(&self) -> TenantStatus {
        phase_status(&self.phase)
    }

    /// The phase, for tests.
    #[cfg(test)]
    pub(crate) fn phase(&self) -> &Phase {
        &self.phase
    }

    /// Whether anything was committed since the newest published image.
    pub(crate) fn dirty(&self) -> bool {
        self.commits > self.published
    }

    fn fenced(&self) -> Error {
        Error::Fenced {
            key: self.key.clone(),
        }
    }

    fn drain_timeout(&self) -> Error {
        Error::DrainTimeout {
            key: self.key.clone(),
            after_ms: self.drain_timeout_ms,
        }
    }

    fn draining(&self) -> Error {
        Error::Draining {
            key: self.key.clone(),
            state: self.status().as_str().to_string(),
        }
    }

    /// The refusal for a verb that comes too late: `Draining` while leaving, `Fenced` after.
    fn refusal(&self) -> Error {
        match self.phase {
            Phase::Ended(_) => self.fenced(),
            _ => self.draining(),
        }
    }

    /// Whether an abandon, a forget or a lost lease may still overtake what is going on.
    fn overtakable(&self) -> bool {
        matches!(
            self.phase,
            Phase::Serving
                | Phase::Draining { .. }
                | Phase::Flushing(Flushing::Publishing)
                | Phase::Passivating {
                    step: Flushing::Publishing,
                    ..
                }
        )
    }

    /// Whether a run may execute now: serving, or draining under a live ticket; and the lease
    /// holds (promise 1).
    pub(crate) fn admits(&self, ticket: Option<u64>, held: bool) -> Result<(), Error> {
        let ticketed = ticket.is_some_and(|t| self.tickets.contains(&t));
        match self.phase {
            Phase::Serving => {}
            Phase::Draining { .. } if ticketed => {}
            Phase::Ended(_) => return Err(self.fenced()),
            _ => return Err(self.draining()),
        }
        if held { Ok(()) } else { Err(self.fenced()) }
    }

    /// Admits long work: a new ticket, while serving with the lease held.
    pub(crate) fn admit(&mut self, held: bool) -> Result<u64, Error> {
        self.admits(None, held)?;
        let id = self.next_ticket;
        self.next_ticket += 1;
        self.tickets.insert(id);
        Ok(id)
    }

    /// What a snapshot request comes to. A periodic one (`explicit == false`) stays quiet when
    /// there is nothing to do or a publish is already under way. Snapshots also run while
    /// draining, so the crash bound holds for ticket runs acknowledged during a drain (promise 3).
    pub(crate) fn snapshot(&mut self, held: bool, explicit: bool) -> SnapshotPlan {
        match self.phase {
            Phase::Serving | Phase::Draining { .. } => {}
            _ => return SnapshotPlan::Refuse(self.refusal()),
        }
        if !held {
            return SnapshotPlan::Refuse(self.fenced());
        }
        if !self.dirty() || (!explicit && self.uploads > 0) {
            return SnapshotPlan::Unchanged;
        }
        self.uploads += 1;
        SnapshotPlan::Publish {
            commits: self.commits,
        }
    }

    /// Feeds one input; returns what the actor must do, in order.
    pub(crate) fn on(&mut self, input: Input, now: Instant) -> Vec<Effect> {
        let mut fx = Vec::new();
        match input {
            Input::Handoff { deadline, held } => self.begin_handoff(deadline, held, now, &mut fx),
            Input::Retire { ticket } => {
                self.tickets.remove(&ticket);
                self.try_finish_drain(now, &mut fx);
            }
            Input::DrainDeadline { deadline } => self.drain_deadline(deadline, &mut fx),
            Input::Tick { held } => {
                if let SnapshotPlan::Publish { commits } = self.snapshot(held, false) {
                    fx.push(Effect::Publish {
                        commits,
                        final_image: false,
                        image: true,
                    });
                }
            }
            Input::Committed { lapsed } => {
                self.commits += 1;
                if lapsed {
                    fx.push(Effect::Emit(Event::Lost {
                        key: self.key.clone(),
                        epoch: self.epoch,
                    }));
                    self.lose(&mut fx);
                }
            }
            Input::Published {
                commits,
                final_image,
                outcome,
                lease_gone,
            } => self.published(commits, final_image, outcome, lease_gone, &mut fx),
            Input::Shipping => self.ships += 1,
            Input::Shipped(outcome) => self.shipped(outcome, &mut fx),
            Input::Abandon => self.abandon(&mut fx),
            Input::Forget => self.forget(&mut fx),
            Input::LeaseLost => {
                if self.overtakable() {
                    self.lose(&mut fx);
                }
            }
            Input::FloorRaised(outcome) => self.floor_raised(outcome, &mut fx),
            Input::Erased(outcome) => {
                if let Phase::Forgetting(Forgetting::Erasing { floor }) = self.phase {
                    self.enter(
                        Phase::Forgetting(Forgetting::Releasing {
                            floor: Some(floor),
                            error: outcome.err(),
                        }),
                        &mut fx,
                    );
                    fx.extend([Effect::EndTenure, Effect::ReleaseLease]);
                }
            }
            Input::DirRemoved => {
                if self.phase == Phase::Flushing(Flushing::Releasing)
                    || self.passivating(Flushing::Releasing)
                {
                    fx.push(Effect::ReleaseLease);
                }
            }
            Input::LeaseReleased => self.lease_released(&mut fx),
            Input::Passivate {
                reason,
                judged,
                touches,
                idle_ms,
            } => self.passivate(reason, judged == touches, idle_ms, &mut fx),
        }
        fx
    }

    fn begin_handoff(&mut self, deadline: Instant, held: bool, now: Instant, fx: &mut Vec<Effect>) {
        if now >= deadline {
            // The caller has stopped waiting (a busy actor handled this late): serve on.
            fx.push(Effect::Emit(Event::DrainTimeout {
                key: self.key.clone(),
                after_ms: self.drain_timeout_ms,
            }));
            fx.push(Effect::Answer(Err(self.drain_timeout())));
            return;
        }
        if self.phase != Phase::Serving {
            fx.push(Effect::Answer(Err(self.refusal())));
            return;
        }
        if !held {
            fx.push(Effect::Answer(Err(self.fenced())));
            return;
        }
        self.enter(Phase::Draining { deadline }, fx);
        fx.push(Effect::ArmDrainTimer { deadline });
        self.try_finish_drain(now, fx);
    }

    /// Once no ticket is left (and the deadline has not passed), the flush begins.
    fn try_finish_drain(&mut self, now: Instant, fx: &mut Vec<Effect>) {
        let Phase::Draining { deadline } = self.phase else {
            return;
        };
        if !self.tickets.is_empty() {
            return;
        }
        if now >= deadline {
            self.drain_deadline(deadline, fx);
            return;
        }
        self.enter(Phase::Flushing(Flushing::Publishing), fx);
        fx.push(Effect::Drained);
        // With nothing new the head already holds every commit, but the tenure must still hold
        // to call the handoff flushed: the publish then only confirms the lease.
        self.uploads += 1;
        fx.push(Effect::Publish {
            commits: self.commits,
            final_image: true,
            image: self.dirty() && !self.skip_final_image,
        });
    }

    fn drain_deadline(&mut self, deadline: Instant, fx: &mut Vec<Effect>) {
        if self.phase != (Phase::Draining { deadline }) {
            return;
        }
        fx.push(Effect::Emit(Event::DrainTimeout {
            key: self.key.clone(),
            after_ms: self.drain_timeout_ms,
        }));
        self.enter(Phase::Serving, fx);
        fx.push(Effect::Reply(Waiter::Handoff, Err(self.drain_timeout())));
    }

    fn published(
        &mut self,
        commits: u64,
        final_image: bool,
        outcome: Result<Option<Published>, Error>,
        lease_gone: bool,
        fx: &mut Vec<Effect>,
    ) {
        self.uploads = self.uploads.saturating_sub(1);
        if let Ok(published) = &outcome {
            self.published = self.published.max(commits);
            if let Some(Published {
                image, taken_at_ms, ..
            }) = published
            {
                fx.push(Effect::Emit(Event::SnapshotPublished {
                    key: self.key.clone(),
                    image: image.clone(),
                    taken_at_ms: *taken_at_ms,
                }));
            }
        }
        let fenced = matches!(&outcome, Err(e) if e.is_fenced());
        if let Err(error) = &outcome {
            if final_image && !fenced && self.passivating(Flushing::Publishing) {
                // A passivation's flush failed: the tenure serves on. The supervisor hears it
                // before anyone can see it, the `snapshot_failed` event included.
                fx.push(Effect::ServesOn);
            }
            fx.push(Effect::Emit(Event::SnapshotFailed {
                key: self.key.clone(),
                error: error.to_string(),
            }));
        }
        if final_image && self.passivating(Flushing::Publishing) {
            self.passivation_published(outcome, fenced, fx);
        } else if final_image && self.phase == Phase::Flushing(Flushing::Publishing) {
            match outcome {
                Ok(_) => {
                    self.enter(Phase::Flushing(Flushing::Releasing), fx);
                    fx.extend([Effect::CloseLedger, Effect::EndTenure, Effect::RemoveDir]);
                }
                Err(error) if fenced => {
                    fx.push(Effect::Emit(Event::Lost {
                        key: self.key.clone(),
                        epoch: self.epoch,
                    }));
                    self.lose_with(Err(error), fx);
                }
                Err(error) => {
                    self.enter(Phase::Serving, fx);
                    fx.push(Effect::Reply(Waiter::Handoff, Err(error)));
                }
            }
        } else if fenced && lease_gone && self.overtakable() {
            // A snapshot whose head the store refused for a lease it no longer holds ends the
            // tenure, as a flush does. (One that only found the holder's clock past the lease
            // leaves it: a renewal may revive it, and every call is fenced meanwhile.)
            fx.push(Effect::Emit(Event::Lost {
                key: self.key.clone(),
                epoch: self.epoch,
            }));
            self.lose(fx);
        }
        self.settle_forget(fx);
    }

    fn shipped(&mut self, outcome: Result<(), Error>, fx: &mut Vec<Effect>) {
        self.ships = self.ships.saturating_sub(1);
        if let Err(error) = outcome
            && self.overtakable()
        {
            // The log cannot go on: nothing more may be acknowledged; the durable log is the
            // authority at the next open. The lease is not handed back (as after a lapse): it
            // runs out within `ttl`, and a late landing of the failed segment is fenced by the
            // epoch either way.
            fx.push(Effect::Emit(Event::Lost {
                key: self.key.clone(),
                epoch: self.epoch,
            }));
            self.lose_with(Err(error), fx);
        }
        self.settle_forget(fx);
    }

    fn abandon(&mut self, fx: &mut Vec<Effect>) {
        if !self.overtakable() {
            // Already leaving by another way (a forget keeps its lease), or already gone.
            fx.push(Effect::Answer(Ok(())));
            return;
        }
        let overtaken = Err(self.draining());
        self.overtake(overtaken, fx);
        self.enter(Phase::Abandoning, fx);
        fx.extend([Effect::CloseLedger, Effect::EndTenure, Effect::ReleaseLease]);
    }

    fn forget(&mut self, fx: &mut Vec<Effect>) {
        if !self.overtakable() {
            fx.push(Effect::Answer(Err(self.refusal())));
            return;
        }
        let overtaken = Err(self.draining());
        self.overtake(overtaken, fx);
        self.enter(Phase::Forgetting(Forgetting::Settling), fx);
        fx.extend([Effect::CloseLedger, Effect::ForgetBegun]);
        self.settle_forget(fx);
    }

    /// A forget raises the floor once no upload is under way (promise 5).
    fn settle_forget(&mut self, fx: &mut Vec<Effect>) {
        if self.phase == Phase::Forgetting(Forgetting::Settling)
            && self.uploads == 0
            && self.ships == 0
        {
            self.enter(Phase::Forgetting(Forgetting::Marking { tries: 1 }), fx);
            fx.push(Effect::MarkForgotten);
        }
    }

    fn floor_raised(&mut self, outcome: Result<u64, Error>, fx: &mut Vec<Effect>) {
        let Phase::Forgetting(Forgetting::Marking { tries }) = self.phase else {
            return;
        };
        match outcome {
            Ok(floor) => {
                self.enter(Phase::Forgetting(Forgetting::Erasing { floor }), fx);
                fx.push(Effect::Erase { floor });
            }
            Err(error) if error.is_outcome_unknown() && tries <= FLOOR_RETRIES => {
                // It may have landed: ask again, the same tenure's retry is recognised.
                self.enter(
                    Phase::Forgetting(Forgetting::Marking { tries: tries + 1 }),
                    fx,
                );
                fx.push(Effect::MarkForgotten);
            }
            Err(error) => {
                // Nothing (known to be) forgotten: the tenure ends like an abandon, so the lease
                // is not renewed for ever by a tenant nobody can use.
                self.enter(
                    Phase::Forgetting(Forgetting::Releasing {
                        floor: None,
                        error: Some(error),
                    }),
                    fx,
                );
                fx.extend([Effect::EndTenure, Effect::ReleaseLease]);
            }
        }
    }

    fn lease_released(&mut self, fx: &mut Vec<Effect>) {
        let released = |flushed| {
            Effect::Emit(Event::Released {
                key: self.key.clone(),
                epoch: self.epoch,
                flushed,
            })
        };
        match self.phase.clone() {
            Phase::Flushing(Flushing::Releasing) => {
                fx.push(released(true));
                self.end(TenantStatus::Released, fx);
                fx.push(Effect::Reply(Waiter::Handoff, Ok(())));
            }
            Phase::Abandoning => {
                fx.push(released(false));
                self.end(TenantStatus::Abandoned, fx);
                fx.push(Effect::Reply(Waiter::Abandon, Ok(())));
            }
            Phase::Forgetting(Forgetting::Releasing { floor, error }) => {
                let status = match floor {
                    Some(floor) => {
                        fx.push(Effect::Emit(Event::Forgotten {
                            key: self.key.clone(),
                            floor,
                        }));
                        TenantStatus::Forgotten
                    }
                    None => TenantStatus::Abandoned,
                };
                fx.push(released(false));
                self.end(status, fx);
                fx.push(Effect::Reply(Waiter::Forget, error.map_or(Ok(()), Err)));
            }
            Phase::Passivating {
                step: Flushing::Releasing,
                reason,
                idle_ms,
            } => {
                fx.push(released(true));
                self.passivated(reason, idle_ms, fx);
            }
            _ => {}
        }
    }

    /// Answers a handoff that an abandon, a forget or a lost lease overtakes; tickets go.
    fn overtake(&mut self, answer: Result<(), Error>, fx: &mut Vec<Effect>) {
        if matches!(self.phase, Phase::Draining { .. } | Phase::Flushing(_)) {
            fx.push(Effect::Reply(Waiter::Handoff, answer));
        }
        self.tickets.clear();
    }

    /// Stops after the lease was lost: nothing is flushed, the local file stays.
    fn lose(&mut self, fx: &mut Vec<Effect>) {
        let answer = Err(Error::Draining {
            key: self.key.clone(),
            state: "stopped".into(),
        });
        self.lose_with(answer, fx);
    }

    fn lose_with(&mut self, answer: Result<(), Error>, fx: &mut Vec<Effect>) {
        self.overtake(answer, fx);
        fx.extend([Effect::EndTenure, Effect::CloseLedger]);
        self.end(TenantStatus::Abandoned, fx);
    }

    /// Moves to `phase`, emitting the change of status it makes (promise: every state change
    /// emits an event).
    fn enter(&mut self, phase: Phase, fx: &mut Vec<Effect>) {
        let (from, to) = (self.status(), phase_status(&phase));
        self.phase = phase;
        if from != to {
            debug_assert!(from.can_move_to(to), "{from} -> {to}");
            fx.push(Effect::Emit(Event::StateChanged {
                key: self.key.clone(),
                from,
                to,
            }));
        }
    }

    fn end(&mut self, status: TenantStatus, fx: &mut Vec<Effect>) {
        self.enter(Phase::Ended(status), fx);
        fx.push(Effect::Finish(status));
    }
}

/// The public status of a phase.
fn phase_status(phase: &Phase) -> TenantStatus {
    match phase {
        Phase::Serving => TenantStatus::Serving,
        Phase::Draining { .. } => TenantStatus::Draining,
        Phase::Flushing(_) => TenantStatus::Flushing,
        Phase::Abandoning => TenantStatus::Abandoning,
        Phase::Forgetting(_) => TenantStatus::Forgetting,
        Phase::Passivating { .. } => TenantStatus::Passivating,
        Phase::Ended(status) => *status,
    }
}

#[cfg(test)]
mod tests;
