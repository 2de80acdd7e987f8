//! How the tenant actor carries out its tenure's effects, and the leaving verbs (handoff,
//! abandon, forget, a lost lease) that feed the tenure. Every decision is in `tenure.rs`: here
//! each effect becomes a call, and each call's completion becomes an [`Input`] fed back.

use actix::prelude::*;
use leasehold::sweep::erase_floor;
use leasehold::{Error, paths};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::actor::{HandoffReplies, TenantActor};
use super::messages::*;
use super::tenure::{Effect, Input, Waiter};
use crate::lease_actor::{LeaseLost, Unregister};

/// The caller of the input being fed, answered at once or kept as a waiter.
enum Caller {
    /// Nobody (a timer, a completion).
    None,
    /// A handoff's two reply channels.
    Handoff(HandoffReplies),
    /// An abandon's reply.
    Abandon(oneshot::Sender<Result<(), Error>>),
    /// A forget's reply.
    Forget(oneshot::Sender<Result<(), Error>>),
    /// A passivation's ask: always answered at once (begun, or refused).
    Passivate(oneshot::Sender<Result<(), Error>>),
}

impl TenantActor {
    /// Feeds `input` to the tenure and carries out what it decides.
    pub(super) fn feed(&mut self, input: Input, ctx: &mut Context<Self>) {
        self.feed_from(input, Caller::None, ctx);
    }

    fn feed_from(&mut self, input: Input, caller: Caller, ctx: &mut Context<Self>) {
        let effects = self.tenure.on(input, Instant::now());
        let answered = effects.iter().find_map(|e| match e {
            Effect::Answer(answer) => Some(answer.clone()),
            _ => None,
        });
        // A passivation's answer goes once its effects are carried out: whoever hears "begun"
        // reads `passivating` (or, if its flush failed at once, `serving` again), never the
        // `serving` of before (the supervisor's eviction watches the status from then on).
        let mut passivation = None;
        match (caller, answered) {
            (Caller::None, _) => {}
            (Caller::Handoff(replies), Some(answer)) => {
                if let Some(tx) = replies.drained {
                    let _ = tx.send(answer.map(|()| std::time::Duration::ZERO));
                }
            }
            (Caller::Abandon(tx) | Caller::Forget(tx), Some(answer)) => {
                let _ = tx.send(answer);
            }
            (Caller::Passivate(tx), Some(answer)) => passivation = Some((tx, answer)),
            (Caller::Passivate(_), None) => {}
            (Caller::Handoff(replies), None) => self.handoff = replies,
            (Caller::Abandon(tx), None) => self.abandons.push(tx),
            (Caller::Forget(tx), None) => self.forget = Some(tx),
        }
        for effect in effects {
            self.perform(effect, ctx);
        }
        if let Some((tx, answer)) = passivation {
            let _ = tx.send(answer);
        }
    }

    fn perform(&mut self, effect: Effect, ctx: &mut Context<Self>) {
        match effect {
            Effect::Publish {
                commits,
                final_image,
                image,
            } => self.publish(commits, final_image, image, ctx),
            Effect::ArmDrainTimer { deadline } => {
                let wait = deadline.saturating_duration_since(Instant::now());
                ctx.run_later(wait, move |act, ctx| {
                    act.commit_batch(ctx);
                    act.feed(Input::DrainDeadline { deadline }, ctx);
                });
            }
            Effect::Drained => {
                if let Some(tx) = self.handoff.drained.take() {
                    let _ = tx.send(Ok(self.flush_bound()));
                }
            }
            Effect::CloseLedger => self.close_ledger(ctx),
            Effect::EndTenure => {
                self.cell.end();
                self.lease_actor.do_send(Unregister {
                    key: self.key().clone(),
                    epoch: self.cell.epoch,
                });
            }
            Effect::RemoveDir => self.remove_dir(ctx),
            Effect::ReleaseLease => self.release_lease(ctx),
            Effect::ForgetBegun => {
                let (done, waited) = oneshot::channel();
                self.forget_done = Some(done);
                self.forgets.do_send(ForgetBegun {
                    key: self.key().clone(),
                    epoch: self.cell.epoch,
                    done: waited,
                });
            }
            Effect::MarkForgotten => self.mark_forgotten(ctx),
            Effect::Erase { floor } => self.erase(floor, ctx),
            Effect::Reply(waiter, answer) => self.reply(waiter, answer),
            Effect::Answer(_) => {} // answered by `feed_from`
            Effect::Emit(event) => {
                if let crate::events::Event::StateChanged { to, .. } = &event
                    && !to.is_final()
                {
                    // A final status is recorded by `Finish`, once the supervisor was told.
                    self.ended.set(*to);
                }
                self.rt.events.emit(event)
            }
            Effect::ServesOn => {
                // The supervisor hears before the status reads `serving` (the `Emit` after
                // this effect sets it): an idle check or eviction asked by whoever saw it
                // finds the tenant back in the order of last activity.
                self.serves_on.do_send(ServesOn {
                    key: self.key().clone(),
                    epoch: self.cell.epoch,
                    at_ms: self.rt.now_ms(),
                });
            }
            Effect::Finish(status) => {
                // The supervisor hears first: whoever sees the final status and then asks the
                // supervisor (an open waiting for a passivation to end) finds it gone.
                self.gone.do_send(TenantGone {
                    key: self.key().clone(),
                    epoch: self.cell.epoch,
                    status,
                });
                self.ended.set(status);
                if let Some(done) = self.forget_done.take() {
                    let _ = done.send(());
                }
                // Nothing of this tenure runs any more: the actor, its timers and its
                // mailbox go (later messages are answered by the handle, see `TenantRef`).
                ctx.stop();
            }
        }
    }

    fn reply(&mut self, waiter: Waiter, answer: Result<(), Error>) {
        match waiter {
            Waiter::Handoff => {
                if let Some(tx) = self.handoff.drained.take() {
                    let _ = tx.send(answer.map(|()| std::time::Duration::ZERO));
                } else if let Some(tx) = self.handoff.done.take() {
                    let _ = tx.send(answer);
                }
            }
            Waiter::Abandon => {
                for tx in self.abandons.drain(..) {
                    let _ = tx.send(answer.clone());
                }
            }
            Waiter::Forget => {
                if let Some(tx) = self.forget.take() {
                    let _ = tx.send(answer);
                }
            }
        }
    }

    /// The longest the flush of a drained handoff may take, counted by its caller: the final
    /// image's upload (its deadline grown with the ledger's size) and manifest, the head's
    /// compare-and-set and the release, each under `store_deadline`, with as much again for
    /// taking the image and removing the local copy (promise 6 in docs/guarantees.md); with a
    /// log, [`logged_flush_bound`].
    fn flush_bound(&self) -> std::time::Duration {
        let bytes = usize::try_from(self.publisher.ledger_bytes()).unwrap_or(usize::MAX);
        let upload = leasehold::deadline::put_deadline(self.rt.store_deadline, bytes);
        if let Some(log) = self.log.as_ref() {
            let tip_wait = self.rt.tips.longest_wait();
            let segments = log.segments_to_settle();
            return logged_flush_bound(upload, tip_wait, self.rt.store_deadline, segments);
        }
        2 * upload + 3 * self.rt.store_deadline
    }

    /// Publishes an image (or, with `image == false`, only confirms the lease). A logged tenant
    /// instead settles its log for a flush, and takes an image only when compaction is due.
    fn publish(&mut self, commits: u64, final_image: bool, image: bool, ctx: &mut Context<Self>) {
        if let Some(log) = self.log.as_ref() {
            if final_image {
                return self.flush_log(commits, ctx);
            }
            let (segments, bytes) = log.since_image();
            if self.rt.compaction.due(segments, bytes) {
                if let Some(refused) = self.image_refused_for_size() {
                    return self.image_not_taken(refused, ctx);
                }
                return self.want_image(
                    super::actor::ImageWant {
                        commits,
                        reply: None,
                    },
                    ctx,
                );
            }
            // No image now: the tick counts as done, but the commits stay unimaged, so an
            // explicit snapshot still takes one.
            let lease_gone = self.cell.is_ended();
            return self.feed(
                Input::Published {
                    commits: 0,
                    final_image,
                    outcome: Ok(None),
                    lease_gone,
                },
                ctx,
            );
        }
        if image && let Some(refused) = self.image_refused_for_size() {
            let lease_gone = self.cell.is_ended();
            let outcome = Err(refused);
            return self.feed(
                Input::Published {
                    commits,
                    final_image,
                    outcome,
                    lease_gone,
                },
                ctx,
            );
        }
        let publisher = self.publisher.clone();
        let held = self.cell.holds(self.rt.now_ms());
        let fenced = self.fenced();
        let work = async move {
            match (image, held) {
                (true, _) => publisher.publish(commits).await,
                (false, true) => Ok(None),
                (false, false) => Err(fenced),
            }
        };
        ctx.spawn(work.into_actor(self).map(move |outcome, act, ctx| {
            act.note_image_outcome(&outcome);
            act.feed(
                Input::Published {
                    commits,
                    final_image,
                    outcome,
                    lease_gone: act.cell.is_ended(),
                },
                ctx,
            );
        }));
    }

    fn remove_dir(&mut self, ctx: &mut Context<Self>) {
        let root = self.rt.state_root.clone();
        let key = self.key().clone();
        let removal = async move {
            let (org, tenant) = (key.org().clone(), key.tenant().clone());
            let removed =
                tokio::task::spawn_blocking(move || paths::remove_tenant_dir(&root, &org, &tenant))
                    .await;
            match removed {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(%key, error = %e, "dropping the local copy failed"),
                Err(e) => tracing::warn!(%key, error = %e, "the local delete task failed"),
            }
        };
        ctx.spawn(
            removal
                .into_actor(self)
                .map(|_, act, ctx| act.feed(Input::DirRemoved, ctx)),
        );
    }

    fn release_lease(&mut self, ctx: &mut Context<Self>) {
        let rt = self.rt.clone();
        let key = self.key().clone();
        let epoch = self.cell.epoch;
        let call = async move { rt.leases.release(&key, rt.replica.as_str(), epoch).await };
        ctx.spawn(call.into_actor(self).map(|released, act, ctx| {
            if let Err(e) = released {
                tracing::warn!(key = %act.key(), error = %e, "releasing the lease failed; it will expire");
            }
            act.feed(Input::LeaseReleased, ctx);
        }));
    }

    fn mark_forgotten(&mut self, ctx: &mut Context<Self>) {
        let rt = self.rt.clone();
        let key = self.key().clone();
        let epoch = self.cell.epoch;
        let call = async move {
            rt.leases
                .mark_forgotten(&key, rt.replica.as_str(), epoch)
                .await
                .map(|record| record.floor)
                .map_err(Error::from)
        };
        ctx.spawn(
            call.into_actor(self)
                .map(|floor, act, ctx| act.feed(Input::FloorRaised(floor), ctx)),
        );
    }

    /// Waits for this replica's puts of the tenant that outlived their deadline, deletes every
    /// durable copy at or below `floor` (asking again, up to [`leasehold::sweep::ERASE_TRIES`] times, when a
    /// sweep fails: a sweep keeps what it deleted), then the local directory — whatever the
    /// durable erasure answered: the floor is raised and this copy is dead. Renewals go on
    /// meanwhile: the lease is still registered. A put still running after `drain_timeout`, or
    /// a sweep that failed every time, makes the forget report its erasure incomplete; the
    /// floor's pending erasure in the lease store then has any replica's periodic pass finish
    /// it (promise 5 in docs/guarantees.md, "the erasure bound"; holes 6 and 11 in
    /// docs/testing.md).
    fn erase(&mut self, floor: u64, ctx: &mut Context<Self>) {
        let rt = self.rt.clone();
        let key = self.key().clone();
        let work = async move {
            let settled = rt
                .durable
                .settle_puts(&key.prefix(), rt.drain_timeout)
                .await;
            let erased = erase_floor(rt.durable.as_ref(), &key, floor).await;
            // The floor is raised: this replica's copy is dead whatever the store answered, and
            // goes now (the local sweep skips a tenant still in the replica's table).
            let root = rt.state_root.clone();
            let (org, tenant) = (key.org().clone(), key.tenant().clone());
            let removed =
                tokio::task::spawn_blocking(move || paths::remove_tenant_dir(&root, &org, &tenant))
                    .await
                    .map_err(|e| Error::Closed(format!("local delete task failed: {e}")));
            erased?;
            settled?;
            removed??;
            Ok(())
        };
        ctx.spawn(
            work.into_actor(self)
                .map(|erased, act, ctx| act.feed(Input::Erased(erased), ctx)),
        );
    }
}

impl Handler<Handoff> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: Handoff, ctx: &mut Context<Self>) {
        self.commit_batch(ctx);
        let held = self.cell.holds(self.rt.now_ms());
        let replies = HandoffReplies {
            drained: Some(msg.drained),
            done: Some(msg.done),
        };
        let input = Input::Handoff {
            deadline: msg.deadline,
            held,
        };
        self.feed_from(input, Caller::Handoff(replies), ctx);
    }
}

impl Handler<DrainOver> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: DrainOver, ctx: &mut Context<Self>) {
        self.commit_batch(ctx);
        let deadline = msg.deadline;
        self.feed(Input::DrainDeadline { deadline }, ctx);
    }
}

impl Handler<Abandon> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: Abandon, ctx: &mut Context<Self>) {
        self.commit_batch(ctx);
        self.feed_from(Input::Abandon, Caller::Abandon(msg.reply), ctx);
    }
}

impl Handler<Forget> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: Forget, ctx: &mut Context<Self>) {
        self.commit_batch(ctx);
        self.feed_from(Input::Forget, Caller::Forget(msg.reply), ctx);
    }
}

impl Handler<Passivate> for TenantActor {
    type Result = Result<(), Error>;

    fn handle(&mut self, msg: Passivate, ctx: &mut Context<Self>) -> Self::Result {
        self.commit_batch(ctx);
        let (tx, mut answer) = oneshot::channel();
        let input = Input::Passivate {
            reason: msg.reason,
            judged: msg.judged,
            touches: self.activity.touches(),
            idle_ms: msg.idle_ms,
        };
        self.feed_from(input, Caller::Passivate(tx), ctx);
        answer.try_recv().unwrap_or_else(|_| {
            Err(Error::Closed(format!(
                "{}: the passivation went unanswered",
                self.key()
            )))
        })
    }
}

impl Handler<LeaseLost> for TenantActor {
    type Result = ();

    fn handle(&mut self, _msg: LeaseLost, ctx: &mut Context<Self>) {
        self.commit_batch(ctx);
        self.feed(Input::LeaseLost, ctx);
    }
}

/// The longest a logged tenant's flush may take: settling the log — `segments` segments (the one
/// in flight and those the waiting batches are cut into), each up to `PUT_WAITS` waits of its
/// put's deadline (`upload`: `store_deadline` grown with at most the ledger's size: its sends,
/// a wait for its tries to settle and a look at its size) and up
/// to `TIP_ASKS` tip-move asks, each waiting at most `tip_wait` (the tip batcher's longest wait:
/// a batch ahead and its own) — then the release (promise 6 in docs/guarantees.md).
pub(super) fn logged_flush_bound(
    upload: std::time::Duration,
    tip_wait: std::time::Duration,
    store_deadline: std::time::Duration,
    segments: u32,
) -> std::time::Duration {
    segments.max(2) * (super::log::PUT_WAITS * upload + super::log::TIP_ASKS * tip_wait)
        + store_deadline
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_logged_flush_counts_every_tip_ask_at_the_longest_the_batcher_lets_it_wait() {
        let d = Duration::from_secs(10);
        let upload = leasehold::deadline::put_deadline(d, 80 << 20);
        // On a store that batches, an ask waits for a batch ahead and its own: 2 × d + slack.
        let tip_wait = crate::tips::tip_wait(d, d);
        let bound = logged_flush_bound(upload, tip_wait, d, 2);
        let segment = 5 * upload + 3 * (2 * d + crate::tips::SLACK);
        assert_eq!(bound, 2 * segment + d);
        // The count this replaced (6 × store_deadline per segment) fell short by the slack of
        // every ask.
        assert!(2 * (upload + 6 * d) + d < bound);
        // Batches cut into more segments behind the one in flight: each is counted.
        let five = logged_flush_bound(upload, tip_wait, d, 5);
        assert_eq!(five, 5 * segment + d);
    }
}
