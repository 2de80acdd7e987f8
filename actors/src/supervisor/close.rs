//! Closing a replica: hand every open tenant off, `close_concurrency` at a time so that one stuck
//! tenant holds only its own slot, wait for forgets under way, and report the tenants that could
//! not be flushed in the order they were opened, then drop dead local copies. Progress goes out
//! as events.

use actix::prelude::*;
use futures::StreamExt;
use leasehold::{Error, LeaseKey};

use super::{Close, SupervisorActor};
use crate::events::Event;
use crate::status::TenantStatus;

impl Handler<Close> for SupervisorActor {
    type Result = ResponseActFuture<Self, Result<Vec<LeaseKey>, Error>>;

    fn handle(&mut self, _msg: Close, _ctx: &mut Context<Self>) -> Self::Result {
        self.closing = true;
        let mut entries: Vec<_> = self.table.values().cloned().collect();
        entries.sort_by_key(|e| e.order);
        let rt = self.rt.clone();
        let total = entries.len();
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
                let erased = match &outcome {
                    // A tenant that a forget took meanwhile is erased, not unflushed. Only an
                    // overtaken handoff asks: a busy tenant's status could hold close up.
                    Err(e) if e.is_draining() => matches!(
                        entry.tenant.status().await,
                        TenantStatus::Forgetting | TenantStatus::Forgotten
                    ),
                    _ => false,
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
            let forgets = std::mem::take(&mut act.forgets);
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
                // Last, copies of tenants forgotten elsewhere while this replica held them.
                act.sweep_all_local().map(move |swept, _, _| {
                    if let Err(e) = swept {
                        tracing::warn!(error = %e, "the local sweep at close failed");
                    }
                    Ok(unflushed)
                })
            })
        }))
    }
}
