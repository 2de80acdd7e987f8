//! Passivation in the tenure: whether it may begin, and its flush — a handoff's flush with no
//! caller waiting and no successor (docs/architecture.md, "Passivation", the state table).
//!
//! ```text
//!  Serving ── passivate (no ticket, untouched since judged idle) ──> Passivating(Publishing)
//!     │                                                   │ log settled / final image published
//!     │ (refused: a ticket, touched since, leaving)        v
//!     │                                         Passivating(Releasing): close the ledger, end
//!     │                                         the tenure, drop the local copy, release
//!     └── a failed flush serves on <──────────┘             └──> Ended(Passivated)
//!  while publishing, an abandon, a forget or a lost lease overtakes it (as a handoff's flush)
//! ```

use leasehold::Error;

use super::{Effect, Flushing, Phase, Tenure};
use crate::events::Event;
use crate::passivation::PassivationReason;
use crate::status::TenantStatus;

impl Tenure {
    /// Whether the tenure is passivating, at `step`.
    pub(super) fn passivating(&self, step: Flushing) -> bool {
        matches!(self.phase, Phase::Passivating { step: s, .. } if s == step)
    }

    /// Why a passivation may not begin now, if it may not: only a serving tenure with no live
    /// ticket and not touched since it was judged idle is let go.
    fn passivation_refused(&self, untouched: bool) -> Option<&'static str> {
        match self.phase {
            Phase::Serving if !self.tickets.is_empty() => Some("a ticket is live"),
            Phase::Serving if !untouched => Some("it was used since it was judged idle"),
            Phase::Serving => None,
            _ => Some("it is leaving already"),
        }
    }

    /// A passivation asked for: refused (the caller hears why), or begun — the log settles
    /// (or, with `Images`, the final image is published) before anything is let go, so nothing
    /// acknowledged is lost (promise 12 in docs/guarantees.md).
    pub(super) fn passivate(
        &mut self,
        reason: PassivationReason,
        untouched: bool,
        idle_ms: u64,
        fx: &mut Vec<Effect>,
    ) {
        if let Some(why) = self.passivation_refused(untouched) {
            fx.push(Effect::Answer(Err(Error::Draining {
                key: self.key.clone(),
                state: format!("not passivated: {why}"),
            })));
            return;
        }
        let step = Flushing::Publishing;
        self.enter(
            Phase::Passivating {
                step,
                reason,
                idle_ms,
            },
            fx,
        );
        fx.push(Effect::Answer(Ok(())));
        if self.skip_passivation_flush {
            // The deliberate bug: let go with whatever is unshipped or unimaged.
            self.let_go(fx);
            return;
        }
        self.uploads += 1;
        fx.push(Effect::Publish {
            commits: self.commits,
            final_image: true,
            image: self.dirty() && !self.skip_final_image,
        });
    }

    /// The flush of a passivation came back: on success the tenure lets go; a fenced one is a
    /// lost lease; any other failure leaves it serving (the next idle check tries again).
    pub(super) fn passivation_published(
        &mut self,
        outcome: Result<Option<super::Published>, Error>,
        fenced: bool,
        fx: &mut Vec<Effect>,
    ) {
        match outcome {
            Ok(_) => self.let_go(fx),
            Err(error) if fenced => {
                fx.push(Effect::Emit(Event::Lost {
                    key: self.key.clone(),
                    epoch: self.epoch,
                }));
                self.lose_with(Err(error), fx);
            }
            // `ServesOn` is already among the effects, before `snapshot_failed`.
            Err(_) => self.enter(Phase::Serving, fx),
        }
    }

    /// Flushed: close the ledger, end the tenure, drop the local copy; the lease is released
    /// once the copy is gone (`Input::DirRemoved`), as after a handoff.
    fn let_go(&mut self, fx: &mut Vec<Effect>) {
        let Phase::Passivating {
            reason, idle_ms, ..
        } = self.phase
        else {
            return;
        };
        let step = Flushing::Releasing;
        self.enter(
            Phase::Passivating {
                step,
                reason,
                idle_ms,
            },
            fx,
        );
        fx.extend([Effect::CloseLedger, Effect::EndTenure, Effect::RemoveDir]);
    }

    /// The lease of a passivated tenure was handed back: it is over.
    pub(super) fn passivated(
        &mut self,
        reason: PassivationReason,
        idle_ms: u64,
        fx: &mut Vec<Effect>,
    ) {
        fx.push(Effect::Emit(Event::Passivated {
            key: self.key.clone(),
            epoch: self.epoch,
            reason,
            idle_ms,
        }));
        self.end(TenantStatus::Passivated, fx);
    }
}

#[cfg(test)]
mod tests;
