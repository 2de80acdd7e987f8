//! Closing a replica: hand every open tenant off, `close_concurrency` at a time so that one stuck
//! tenant holds only its own slot, wait for forgets under way, and report the tenants that could
//! not be flushed in the order they were opened, then drop dead local copies. Progress goes out
//! as events.
//!
//! Opens already under way when `close` begins are waited for first (each is bounded by its
//! store calls' deadlines), and the tenants they opened are handed off with the rest: their
//! callers hear `Closed`, and nothing they could have written is lost (docs/guarantees.md,
//! promise 6, hole 1 of docs/testing.md). Once `close` has finished and the last handle is
//! dropped, the replica stops.

use actix::prelude::*;
use futures::StreamExt;
use leasehold::{Error, LeaseKey};
use tokio::sync::oneshot;

use super::{Close, Entry, SupervisorActor};
use crate::events::Event;
use crate::status::TenantStatus;
use crate::tenant::TenantRef;

impl Handler<Close> for SupervisorActor {
    type Result = ResponseFuture<Result<Vec<LeaseKey>, Error>>;

    /// Every close hears the answer of the one close that does the work: a close called again,
    /// while it runs or after, ends nothing early (docs/guarantees.md, `close()`).
    fn handle(&mut self, _msg: Close, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        match &self.closed_with {
            Some(answer) => {
                let _ = tx.send(answer.clone());
            }
            None => self.close_waiters.push(tx),
        }
        if !self.closing {
            self.closing = true;
            let in_flight: Vec<_> = self.opening.values().cloned().collect();
            let settled = futures::future::join_all(in_flight).into_actor(self);
            let work = settled.then(|opened, act, _| act.close_all(opened));
            ctx.spawn(work.map(|_, _, _| ()));
        }
        Box::pin(async move { rx.await.unwrap_or_else(|_| Err(super::stopped())) })
    }
}

/// The status `tenant` reaches once it has left (a final one, or `Forgetting` while a forget
/// still erases), waiting at most `limit`; what it is then otherwise.
async fn left(tenant: &TenantRef, limit: std::time::Duration) -> TenantStatus {
    let until = tokio::time::Instant::now() + limit;
    loop {
        let now = tenant.status_now();
        if now.is_final() || now == TenantStatus::Forgetting || tokio::time::Instant::now() >= until
        {
            return now;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

impl SupervisorActor {
    /// Hands off every tenant of the table and those the opens under way at `close` opened.
    fn close_all(
        &mut self,
        opened: Vec<Result<TenantRef, Error>>,
    ) -> ResponseActFuture<Self, Result<Vec<LeaseKey>, Error>> {
        let mut entries: Vec<Entry> = self.table.values().cloned().collect();
        for tenant in opened.into_iter().flatten() {
            let known = entries
                .iter()
                .any(|e| e.tenant.key() == tenant.key() && e.tenant.epoch() == tenant.epoch());
            if !known {
                let order = self.next_order;
                self.next_order += 1;
                entries.push(Entry { tenant, order });
            }
        }
        entries.sort_by_key(|e| e.order);
        let rt = self.rt.clone();
        let total = entries.len();
        let leave_limit = rt.drain_timeout + 4 * rt.store_deadline;
        let handoffs = async move {
            let mut unflushed: Vec<(u64, LeaseKey)> = Vec::new();
            let mut done = 0;
            let mut results = futures::stream::iter(entries)
                .map(|entry| {
                    let flushing = entry.tenant.handoff();
                    async move { (entry, flushing.await) }
                })
                .buffer_unordered(rt.close_concurrency);
            while let Some((entry, outcome)) = results.next().await {
                done += 1;
                let (erased, outcome) = match outcome {
                    // Already leaving by another call (a host's own handoff, a forget): close
                    // waits for it to end, bounded, and counts what it came to. Only a refused
                    // handoff asks: a busy tenant's status could hold close up.
                    Err(e) if e.is_draining() => match left(&entry.tenant, leave_limit).await {
                        TenantStatus::Forgetting | TenantStatus::Forgotten => (true, Err(e)),
                        TenantStatus::Released => (false, Ok(())),
                        _ => (false, Err(e)),
                    },
                    other => (false, other),
                };
                if let Err(e) = outcome
                    && !erased
                {
                    tracing::warn!(key = %entry.tenant.key(), error = %e, "not flushed at close");
                    unflushed.push((entry.order, entry.tenant.key().clone()));
                }
                rt.events.emit(Event::CloseProgress {
                    done,
                    total,
                    unflushed: unflushed.len(),
                });
            }
            unflushed.sort();
            unflushed
                .into_iter()
                .map(|(_, key)| key)
                .collect::<Vec<_>>()
        };
        Box::pin(handoffs.into_actor(self).then(|unflushed, act, _| {
            // The handles stay: the tenant actors stop when their forgets end.
            let forgets: Vec<_> = act
                .forgets
                .iter_mut()
                .filter_map(|(tenure, done, _)| Some((tenure.clone(), done.take()?)))
                .collect();
            let limit = act.rt.drain_timeout;
            async move {
                for ((key, _epoch), done) in forgets {
                    if tokio::time::timeout(limit, done).await.is_err() {
                        tracing::warn!(%key, "close stopped waiting for a forget");
                    }
                }
                unflushed
            }
            .into_actor(act)
            .then(|unflushed, act, _| {
                // The puts of unknown outcome of the tenures just ended: reconciled now if they
                // have settled, else while the replica lingers (see `stop_if_done`).
                let cx = act.rt.reconcile.clone();
                actix::fut::wrap_future(async move {
                    crate::reconcile::pass::run(&cx, true).await;
                    unflushed
                })
            })
            .then(|unflushed, act, _| {
                // Last, copies of tenants forgotten elsewhere while this replica held them.
                act.sweep_all_local().map(move |swept, act, ctx| {
                    if let Err(e) = swept {
                        tracing::warn!(error = %e, "the local sweep at close failed");
                    }
                    if unflushed.is_empty() && act.forgets.is_empty() && act.opening.is_empty() {
                        // Nothing of this replica is left on its root: the next may start on it.
                        act.rt.release_root();
                    }
                    let answer = Ok(unflushed);
                    for waiter in act.close_waiters.drain(..) {
                        let _ = waiter.send(answer.clone());
                    }
                    act.closed_with = Some(answer.clone());
                    act.closed = true;
                    act.stop_if_done(ctx);
                    answer
                })
            })
        }))
    }
}
