//! The supervisor's side of passivation (docs/architecture.md, "Passivation"): the order of last
//! activity of its open tenants ([`Recency`], pure), the idle check that lets go of tenants idle
//! for `passivate_after`, the eviction of the least recently used idle tenant when an open meets
//! `max_open`, an open that waits for a passivation of its tenant under way, and the reopen a
//! handle asks for.
//!
//! ```text
//!   a tenant opens ──> noted (its activity cell) ──> idle check armed at oldest + passivate_after
//!   idle check: Recency::pick(before = now − passivate_after) ──> Passivate{judged} to each
//!                 refused (a ticket, used since) ──> noted again at now
//!                 begun, then its flush failed (serves on) ──> noted again as of the failure
//!                                                   (`ServesOn`, before it reads `serving`)
//!   open at max_open: Recency::pick(any age, one, not spared) ──> Passivate
//!                 ──> wait while it leaves ──> ended: the open goes again
//!                                          └─> serving (refused, or its flush failed): noted
//!                                              again, spared by this open, which goes again
//!                 (at most EVICTION_TRIES victims; OpenLimit when none is left to ask)
//!   open finding its tenant passivating, or passivated but still in the table ──> wait
//!                 while it passivates ──> the open goes again, behind the tenure's TenantGone
//! ```

use std::future::Future;
use std::time::Duration;

use actix::prelude::*;
use leasehold::clock::duration_ms;
use leasehold::{Error, LeaseKey};

use super::{Open, Supervisor, SupervisorActor, stopped};
use crate::passivation::{
    Chosen, PassivationReason, Standing, idle_before, idle_check_wait_ms, next_check_ms,
};
use crate::status::TenantStatus;
use crate::tenant::TenantRef;
use crate::tenant::messages::ServesOn;

/// How many victims one open at `max_open` asks before it is refused with `OpenLimit`.
pub(super) const EVICTION_TRIES: u32 = 8;

/// Runs the idle check now; answers how many tenants began to passivate.
#[derive(Message)]
#[rtype(result = "usize")]
pub(super) struct PassivateIdle;

impl Supervisor {
    /// Runs the idle check now, on the replica's clock: every tenant idle for
    /// `passivate_after` is asked to let go; answers how many began to (each then settles its
    /// log, releases its lease and stops; watch its status or the `passivated` event). It runs
    /// by itself when the least recently used tenant falls due; this is for tests with a manual
    /// clock and for operators. Nothing when passivation is off or the replica closes.
    pub async fn passivate_idle_now(&self) -> Result<usize, Error> {
        self.addr.send(PassivateIdle).await.map_err(|_| stopped())
    }
}

/// Opens the tenant of `key` again for a handle whose tenure `passivated_epoch` was passivated
/// (through `supervisor`, the one that handed the handle out).
pub(crate) fn reopen(
    supervisor: &Addr<SupervisorActor>,
    key: &LeaseKey,
    passivated_epoch: u64,
) -> impl Future<Output = Result<TenantRef, Error>> + use<> {
    let request = supervisor.send(Open::reactivating(key.clone(), Some(passivated_epoch)));
    async move { request.await.map_err(|_| stopped())? }
}

impl Handler<PassivateIdle> for SupervisorActor {
    type Result = ResponseActFuture<Self, usize>;

    fn handle(&mut self, _msg: PassivateIdle, ctx: &mut Context<Self>) -> Self::Result {
        self.check_idle(ctx)
    }
}

impl Handler<ServesOn> for SupervisorActor {
    type Result = ();

    /// A passivation's flush failed and the tenure serves on: noted again as used when it
    /// failed (it left the order of last activity when it was chosen), so the idle check that
    /// finds it idle again, or an eviction, tries again. Heard before its status reads
    /// `serving` again.
    fn handle(&mut self, msg: ServesOn, ctx: &mut Context<Self>) {
        let same = self
            .table
            .get(&msg.key)
            .is_some_and(|e| e.tenant.epoch() == msg.epoch);
        if same {
            self.note_activity(&msg.key, Some(msg.at_ms), ctx);
            // Its stamp may be older than the one the armed check was armed for (a tenant
            // noted in between): armed again at the oldest, so it is not asked late.
            self.arm_idle_check(ctx);
        }
    }
}

impl SupervisorActor {
    /// How `tenant` stands now, for [`Recency::pick`].
    fn standing(tenant: &TenantRef) -> Standing {
        let bound = tenant.bound();
        bound
            .activity
            .standing(bound.ended.get() == TenantStatus::Serving)
    }

    /// Notes a tenant of the table in the order of last activity (after its open, or after it
    /// refused a passivation: then as active `now`, so it is not asked again at once); arms the
    /// idle check if none is armed.
    pub(super) fn note_activity(
        &mut self,
        key: &LeaseKey,
        now_ms: Option<u64>,
        ctx: &mut Context<Self>,
    ) {
        let Some(entry) = self.table.get(key) else {
            return;
        };
        let mut standing = Self::standing(&entry.tenant);
        if let Some(now) = now_ms {
            standing.last_ms = standing.last_ms.max(now);
        }
        self.recency.note(key.clone(), standing);
        if self.idle_timer.is_none() {
            self.arm_idle_check(ctx);
        }
    }

    /// The least recently used tenants that may be passivated, last active before `before`
    /// (any when `None`), at most `limit`; `spared` ones are passed over (they keep their place).
    fn choose(
        &mut self,
        before: Option<u64>,
        limit: usize,
        spared: &[LeaseKey],
    ) -> Vec<(TenantRef, Chosen<LeaseKey>)> {
        let (recency, table) = (&mut self.recency, &self.table);
        let chosen = recency.pick(before, limit, |key| {
            let standing = Self::standing(&table.get(key)?.tenant);
            Some(if spared.contains(key) {
                Standing {
                    serving: false,
                    ..standing
                }
            } else {
                standing
            })
        });
        chosen
            .into_iter()
            .filter_map(|c| Some((table.get(&c.key)?.tenant.clone(), c)))
            .collect()
    }

    /// Arms the next idle check for when the least recently used tenant could be idle long
    /// enough (real time; the judgment itself is on the replica's clock).
    pub(super) fn arm_idle_check(&mut self, ctx: &mut Context<Self>) {
        self.arm_idle_check_after(false, ctx);
    }

    /// Arms the next idle check; `after_check`: right after a check ran, when an overdue oldest
    /// tenant is one leaving by another way, looked at again after a back-off
    /// ([`idle_check_wait_ms`]).
    fn arm_idle_check_after(&mut self, after_check: bool, ctx: &mut Context<Self>) {
        if let Some(timer) = self.idle_timer.take() {
            ctx.cancel_future(timer);
        }
        let Some(after) = self.rt.passivate_after else {
            return;
        };
        if self.closing {
            return;
        }
        let now = self.rt.now_ms();
        let Some(due) = next_check_ms(self.recency.oldest_ms(), duration_ms(after)) else {
            return;
        };
        let wait_ms = idle_check_wait_ms(due, now, duration_ms(after), after_check);
        let wait = Duration::from_millis(wait_ms);
        self.idle_timer = Some(ctx.run_later(wait, |act, ctx| {
            act.idle_timer = None;
            let check = act.check_idle(ctx);
            ctx.spawn(check.map(|_, _, _| ()));
        }));
    }

    /// The idle check: asks every tenant idle for `passivate_after` to let go; those that
    /// refuse are noted again. Resolves with how many began; arms the next check.
    fn check_idle(&mut self, ctx: &mut Context<Self>) -> ResponseActFuture<Self, usize> {
        let Some(after) = self.rt.passivate_after.filter(|_| !self.closing) else {
            return Box::pin(actix::fut::ready(0));
        };
        let now = self.rt.now_ms();
        let chosen = self.choose(Some(idle_before(now, duration_ms(after))), usize::MAX, &[]);
        self.arm_idle_check_after(true, ctx);
        let asks = chosen.into_iter().map(|(tenant, c)| {
            let idle_ms = now.saturating_sub(c.last_ms);
            let ask = tenant.passivate(PassivationReason::Idle, c.touches, idle_ms);
            async move { (c.key, ask.await.is_ok()) }
        });
        let all = futures::future::join_all(asks);
        Box::pin(all.into_actor(self).map(move |answers, act, ctx| {
            let mut begun = 0;
            for (key, accepted) in answers {
                if accepted {
                    // A flush that fails puts it back in the order (`ServesOn`).
                    begun += 1;
                } else {
                    act.note_activity(&key, Some(act.rt.now_ms()), ctx);
                }
            }
            begun
        }))
    }

    /// An open met `max_open`: with passivation on, the least recently used idle tenant is
    /// passivated and the open goes again once it has left; refused with `OpenLimit` when none
    /// is idle (or after [`EVICTION_TRIES`] victims). A victim that refuses, or whose
    /// passivation fails (it serves on), is noticed as soon as its status says so — not after
    /// `leave_limit` — and is not asked again by this open: the open goes to the next idle
    /// tenant, or is refused when none is left (docs/guarantees.md, "when an idle tenant is let
    /// go").
    pub(super) fn evict_for(
        &mut self,
        open: Open,
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Result<TenantRef, Error>> {
        let refused = Error::OpenLimit {
            limit: self.rt.max_open,
        };
        if self.rt.passivate_after.is_none() || open.evictions >= EVICTION_TRIES {
            return Box::pin(actix::fut::ready(Err(refused)));
        }
        let Some((victim, chosen)) = self.choose(None, 1, &open.spared).pop() else {
            return Box::pin(actix::fut::ready(Err(refused)));
        };
        let now = self.rt.now_ms();
        let idle_ms = now.saturating_sub(chosen.last_ms);
        let ask = victim.passivate(PassivationReason::Evicted, chosen.touches, idle_ms);
        let until = tokio::time::Instant::now() + self.rt.leave_limit();
        // The tenant answers once its status reads `passivating` (or `serving` again, when its
        // flush failed at once): from then on, leaving means under way.
        let left = async move {
            if ask.await.is_err() {
                return TenantStatus::Serving;
            }
            victim
                .wait_while_status(TenantStatus::is_leaving, until)
                .await
        };
        let mut again = Open {
            evictions: open.evictions + 1,
            ..open
        };
        let addr = ctx.address();
        Box::pin(left.into_actor(self).then(move |now, act, ctx| {
            if now == TenantStatus::Serving {
                // Refused, or its flush failed and it serves on: noted again as used now, and
                // spared by this open. (Ended, its `TenantGone` is queued ahead of the open.)
                act.note_activity(&chosen.key, Some(act.rt.now_ms()), ctx);
                again.spared.push(chosen.key);
            }
            actix::fut::wrap_future(async move { addr.send(again).await.map_err(|_| stopped())? })
        }))
    }

    /// An open of a tenant whose passivation is under way here, or has just ended while its
    /// tenure is still in the table: waits for it to end, then opens again (the caller does not
    /// notice; a passivation that failed serves on). The open goes again as a new message: a
    /// tenure's `TenantGone` is sent before its final status is set, so the open that comes
    /// back is handled after the tenure left the table — after its local copy was dropped and
    /// its lease released, which a passivation does before it ends — and opens a new tenure
    /// whose files nothing of the old one removes.
    pub(super) fn open_after_passivation(
        &mut self,
        tenant: TenantRef,
        open: Open,
        ctx: &mut Context<Self>,
    ) -> ResponseActFuture<Self, Result<TenantRef, Error>> {
        let epoch = tenant.epoch();
        let now = tenant.status_now();
        if open.waited_for == Some(epoch) && now.is_final() {
            // Ended, and still in the table after its `TenantGone` was handled: never expected;
            // refused rather than asked again in a loop.
            tracing::warn!(key = %open.key, epoch, status = %now,
                "a passivated tenure is still in the table after it ended");
            return Box::pin(actix::fut::ready(Err(Error::Draining {
                key: open.key.to_string(),
                state: now.as_str().into(),
            })));
        }
        let until = tokio::time::Instant::now() + self.rt.leave_limit();
        let addr = ctx.address();
        let again = Open {
            reactivates: open.reactivates.or(Some(epoch)),
            waited_for: Some(epoch),
            ..open
        };
        Box::pin(actix::fut::wrap_future(async move {
            let passivating = TenantStatus::Passivating;
            if tenant.wait_while_status(|s| s == passivating, until).await == passivating {
                return Err(Error::Draining {
                    key: tenant.key().to_string(),
                    state: passivating.as_str().into(),
                });
            }
            addr.send(again).await.map_err(|_| stopped())?
        }))
    }
}
