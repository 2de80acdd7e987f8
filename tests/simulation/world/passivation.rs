//! Passivation in the world (the passivation cases, `Op::Passivation`): time passes on every
//! clock and each driven replica runs its idle check at once — the path a real replica takes
//! when its idle timer fires, asked for by `Supervisor::passivate_idle_now` — and the world
//! waits until every passivation begun has ended. Handles that a call re-resolved (a
//! passivated tenant reopened on its replica) are found after each op and recorded under the
//! new tenure's key.
//!
//! Why the runtime's own idle timer (real time) changes nothing the model does not know: every
//! clock move of these cases goes through [`World::pass_time`], so a tenant is idle by the
//! replica's clock only between a move and the idle check that follows it at once; a timer
//! that fires in between lets go of the same tenants.

use std::time::Instant;

use futures::future::join_all;
use leasehold_actors::{TenantRef, TenantStatus};

use super::{SETTLE, World, insert, settle, settle_raw, unit};
use crate::model::{REPLICAS, Res};
use crate::ops::Racer;

impl World {
    /// Time passes (`ms` on every clock); in the passivation cases every driven replica then
    /// runs its idle check, and the world waits for the passivations it began.
    pub(crate) async fn pass_time(&self, ms: u64) {
        self.advance(ms);
        self.idle_checks((0..REPLICAS).collect()).await;
    }

    /// The idle check of each replica of `replicas`, one after another; then waits until no
    /// tenure is passivating.
    async fn idle_checks(&self, replicas: Vec<usize>) {
        if !self.case.passivation {
            return;
        }
        for r in replicas {
            let _ = settle_raw(self.sups[r].passivate_idle_now()).await;
        }
        self.until_no_passivation_under_way().await;
    }

    /// Waits (bounded by `SETTLE`) until no tenure the world holds a handle of is passivating.
    async fn until_no_passivation_under_way(&self) {
        let until = Instant::now() + SETTLE;
        loop {
            let statuses = join_all(self.handles.values().map(TenantRef::status)).await;
            if !statuses.contains(&TenantStatus::Passivating) || Instant::now() > until {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    /// `Op::RacePassivate`: time passes (`ms`), the other replicas' idle checks run (their
    /// passivations end), then the idle check of the replica the handle `h` of tenant `t` is
    /// bound to, and `with` is sent the moment that check has begun its passivations (a write
    /// inserts `id`): it meets the flush under way.
    pub(super) async fn race_passivate(
        &mut self,
        t: usize,
        h: &TenantRef,
        (ms, with): (u64, Racer),
        id: String,
    ) -> Res {
        let r = self.owners[&(t, h.epoch())];
        self.advance(ms);
        self.idle_checks((0..REPLICAS).filter(|&o| o != r).collect())
            .await;
        let _ = settle_raw(self.sups[r].passivate_idle_now()).await;
        let outcome = match with {
            Racer::Write => settle(insert(h, id)).await,
            Racer::Open => self.open(r, t).await,
            Racer::Handoff => settle(unit(h.handoff())).await,
            Racer::Forget => settle(unit(h.forget())).await,
            Racer::Abandon => settle(unit(h.abandon())).await,
        };
        self.until_no_passivation_under_way().await;
        outcome
    }

    /// Records every handle that a call bound to a new tenure (a passivated one's reopening)
    /// under that tenure's key too, with the replica that reopened it; the tenure it was bound
    /// to before was passivated (a host's handle is bound again after nothing else).
    pub(super) fn note_rebound_handles(&mut self) {
        let rebound: Vec<((usize, u64), TenantRef)> = self
            .handles
            .iter()
            .filter(|(k, h)| h.epoch() != k.1)
            .map(|(k, h)| (*k, h.clone()))
            .collect();
        for (k, h) in rebound {
            let now = (k.0, h.epoch());
            if self.handles.contains_key(&now) {
                continue;
            }
            let r = self.owners[&k];
            self.handles.insert(now, h);
            self.owners.insert(now, r);
            self.latest[r][k.0] = Some(now.1);
        }
    }

    /// Whether the handle recorded under `k` was bound to a newer tenure since: `k` was
    /// passivated (its own status cannot be asked through that handle any more).
    pub(super) fn rebound(&self, k: (usize, u64)) -> bool {
        self.handles.get(&k).is_some_and(|h| h.epoch() != k.1)
    }
}
