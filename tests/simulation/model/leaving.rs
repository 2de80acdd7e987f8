//! The model of how a tenure leaves: handoff (drain, flush, release), abandon, forget, a lease
//! lost at renewal, and the local copies left behind (dropped when dead).

use std::cell::Cell;

use super::{Dir, Held, MARGIN_MS, Outcomes, REPLICAS, Res, State, Status, TENANTS, TTL_MS};
use crate::ops::Late;

thread_local! {
    /// Whether a logged handoff is reported flushed only while its lease holds (as promise 2 of
    /// docs/guarantees.md states for every flush): set only by the ignored regression that pins
    /// its breach (`change_log.rs`); off, the model takes the runtime's flush, which asks only whether
    /// the tenure ended.
    pub static LOGGED_FLUSH_NEEDS_THE_LEASE: Cell<bool> = const { Cell::new(true) };
}

impl State {
    /// Ends the tenure locally and hands its lease back (when the store still has it live).
    pub(super) fn release(&mut self, k: (usize, u64)) {
        let (t, epoch) = k;
        let replica = self.tenures[&k].replica;
        self.end(k);
        self.release_call(t, replica, epoch);
    }

    /// The `release` call of `(t, epoch)` by `r`: the calls kept back may land first; an
    /// outage refuses it; a late landing keeps it back; else the store hands a live lease back.
    pub(super) fn release_call(&mut self, t: usize, r: usize, epoch: u64) {
        self.before_release();
        if self.lease_down {
            return;
        }
        if self.take_late(Late::Release) {
            self.hold(Held::Release { t, r, epoch });
            return;
        }
        if self.store_live(t, r, epoch)
            && let Some(row) = self.tenants[t].row.as_mut()
        {
            row.released = true;
        }
    }

    /// The tenure never holds again and leaves the renewal chain.
    pub(super) fn end(&mut self, k: (usize, u64)) {
        let (t, epoch) = k;
        let replica = self.tenures[&k].replica;
        self.tenure(k).ended = true;
        if self.registered[replica][t] == Some(epoch) {
            self.registered[replica][t] = None;
        }
    }

    /// Enters a final state and leaves the supervisor's table.
    pub(super) fn finish(&mut self, k: (usize, u64), status: Status) {
        let (t, epoch) = k;
        let replica = self.tenures[&k].replica;
        self.tenure(k).status = status;
        if status != Status::Released {
            // The supervisor checks the local copy against the floor, in the background.
            self.local_sweeps[replica][t] = true;
        }
        if self.table[replica][t] == Some(epoch) {
            self.table[replica][t] = None;
        }
    }

    /// The lease was lost: nothing flushed, the local file kept.
    pub(super) fn lose(&mut self, k: (usize, u64)) {
        self.end(k);
        self.finish(k, Status::Abandoned);
    }

    /// The flush of a handoff whose drain is over. Under `Shipped` everything acknowledged
    /// is in the log already: no image, only the release.
    pub(super) fn flush(&mut self, k: (usize, u64), hung: bool) -> Res {
        let logged = self.logged(k);
        if !logged
            && self.tenures[&k].dirty
            && let Err(e) = self.publish(k, hung)
        {
            if e == Res::Fenced {
                self.lose(k);
            }
            return e;
        }
        if self.tenures[&k].pending {
            // `Async`: the flush ships what is pending first; a shipment that fails ends the
            // tenure and is the handoff's answer.
            let shipped = self.ship(k);
            if shipped != Res::Ok {
                return shipped;
            }
        }
        let needs_lease = !logged || LOGGED_FLUSH_NEEDS_THE_LEASE.get();
        if needs_lease && (logged || !self.tenures[&k].dirty) && !self.holds(k) {
            // Nothing to publish, but a handoff is only flushed while its tenure holds.
            self.lose(k);
            return Res::Fenced;
        }
        self.release(k);
        let (t, _) = k;
        let replica = self.tenures[&k].replica;
        self.dirs[replica][t] = Dir::Absent;
        self.finish(k, Status::Released);
        Res::Ok
    }

    /// `TenantRef::handoff` with no admitted work.
    pub(super) fn handoff(&mut self, k: (usize, u64), hung: bool) -> Res {
        if self.tenures[&k].status == Status::Passivated {
            // Let go by a passivation: flushed and released already.
            return Res::Ok;
        }
        if let Err(e) = self.begin_drain(k) {
            return e;
        }
        self.flush(k, hung)
    }

    pub(super) fn begin_drain(&self, k: (usize, u64)) -> Result<(), Res> {
        match self.tenures[&k].status {
            Status::Serving if self.holds(k) => Ok(()),
            Status::Serving => Err(Res::Fenced),
            Status::Forgetting => Err(Res::Draining),
            _ => Err(Res::Fenced),
        }
    }

    /// `TenantRef::abandon`.
    pub(super) fn abandon(&mut self, k: (usize, u64)) -> Res {
        if self.tenures[&k].status == Status::Serving {
            self.release(k);
            self.finish(k, Status::Abandoned);
        }
        Res::Ok
    }

    /// `TenantRef::forget`.
    pub(super) fn forget(&mut self, k: (usize, u64)) -> Res {
        let (t, epoch) = k;
        match self.tenures[&k].status {
            Status::Serving => {}
            Status::Forgetting => return Res::Draining,
            _ => return Res::Fenced,
        }
        let replica = self.tenures[&k].replica;
        // The tenure leaves the table as the forget begins (only this tenure: a newer one of
        // the same tenant stays, as with every other final state); the ledger closes.
        self.tenure(k).status = Status::Forgetting;
        if self.table[replica][t] == Some(epoch) {
            self.table[replica][t] = None;
        }
        // A forget that cannot raise the floor forgets nothing and ends the tenure like an
        // abandon: the lease is released (if the store answers) and the local file stays.
        if self.lease_down {
            self.release(k);
            self.finish(k, Status::Abandoned);
            return Res::StoreDown;
        }
        if self.take_late(Late::MarkForgotten) {
            // The call times out and lands later; raising the floor is idempotent for the
            // tenure, so the forget asks again at once (docs/guarantees.md, "Late landings").
            self.held.push(Held::MarkForgotten {
                t,
                r: replica,
                epoch,
            });
        }
        if !self.store_live(t, replica, epoch) {
            self.release(k);
            self.finish(k, Status::Abandoned);
            return Res::Fenced;
        }
        self.raise_floor(t, epoch);
        if self.durable_down {
            // The floor is raised: the tenure ends forgotten all the same; what could not be
            // deleted goes at the next open's sweep, and the dead local copy at a local sweep.
            self.release(k);
            self.finish(k, Status::Forgotten);
            return Res::StoreDown;
        }
        self.tenants[t].leftovers.clear();
        self.tenants[t].seg_leftovers.clear();
        self.dirs[replica][t] = Dir::Absent;
        self.release(k);
        self.finish(k, Status::Forgotten);
        Res::Ok
    }

    /// `Supervisor::renew_now` on replica `r`.
    pub(super) fn renew(&mut self, r: usize) -> Res {
        let batch: Vec<(usize, u64)> = (0..TENANTS)
            .filter_map(|t| self.registered[r][t].map(|e| (t, e)))
            .collect();
        if batch.is_empty() {
            return Res::Ok;
        }
        if self.lease_down {
            return Res::StoreDown;
        }
        if self.take_late(Late::Renew) {
            return self.hold(Held::Renew { r, batch });
        }
        let now = self.now;
        for (t, epoch) in batch {
            if self.store_live(t, r, epoch) {
                if let Some(row) = self.tenants[t].row.as_mut() {
                    row.expires_at = now + TTL_MS;
                }
                let tenure = self.tenure((t, epoch));
                tenure.valid_until = tenure.valid_until.max(now + TTL_MS - MARGIN_MS);
            } else {
                self.end((t, epoch));
                if self.tenures[&(t, epoch)].status == Status::Serving {
                    self.finish((t, epoch), Status::Abandoned);
                }
            }
        }
        Res::Ok
    }

    /// A local copy that is dead — its tenure (the last opened there) at or below the floor,
    /// the tenant not open there — and that a background local sweep may check, may be gone.
    pub(super) fn mark_dead_copies(&mut self) {
        for r in 0..=REPLICAS {
            for t in 0..TENANTS {
                let floor = self.tenants[t].floor;
                let dead = self.markers[r][t].is_some_and(|marker| marker <= floor);
                if dead
                    && self.local_sweeps[r][t]
                    && self.table[r][t].is_none()
                    && self.dirs[r][t] == Dir::Present
                {
                    self.dirs[r][t] = Dir::Maybe;
                }
            }
        }
    }

    /// `Supervisor::sweep_local` on replica `r`: every dead copy not open there goes. How many
    /// it counts depends on how many the background sweeps took first.
    pub(super) fn sweep_local(mut self, r: usize) -> Outcomes {
        if self.lease_down {
            // It reads the floor of every tenant with a directory here that is not open here
            // (an open tenant's copy is live): with none, nothing.
            let dirs = |d: Dir| {
                (0..TENANTS)
                    .filter(|&t| self.dirs[r][t] == d && self.table[r][t].is_none())
                    .count()
            };
            let outcomes = match (dirs(Dir::Present), dirs(Dir::Maybe)) {
                (0, 0) => vec![Res::Count(0)],
                (0, _) => vec![Res::StoreDown, Res::Count(0)],
                _ => vec![Res::StoreDown],
            };
            return outcomes
                .into_iter()
                .map(|o| (vec![o], self.clone()))
                .collect();
        }
        let (mut sure, mut maybe) = (0, 0);
        for t in 0..TENANTS {
            let floor = self.tenants[t].floor;
            let dead = self.markers[r][t].is_some_and(|marker| marker <= floor);
            if !dead || self.table[r][t].is_some() {
                continue;
            }
            match self.dirs[r][t] {
                Dir::Present => sure += 1,
                Dir::Maybe => maybe += 1,
                Dir::Absent => continue,
            }
            self.dirs[r][t] = Dir::Absent;
        }
        (sure..=sure + maybe)
            .map(|n| (vec![Res::Count(n)], self.clone()))
            .collect()
    }
}
