//! The model of the faults added for the runtime's hardening (docs/testing.md, "fault
//! classes"): store calls that time out for their caller and land later, close and crash of a
//! replica (each followed by a restart on the same state root), an open in flight when close
//! begins, a lease lapsing before a batch commits, a run blocking past `drain_timeout`, and
//! periodic snapshots.
//!
//! A late call lands by the store's own rules as they must hold (docs/guarantees.md, promise
//! 2 and "delete means delete"): a head only moves forward, and an image put that lands after
//! its epoch was forgotten leaves nothing behind.

use super::{Dir, Res, Row, State, Status, TENANTS, TTL_MS};
use crate::ops::Late;

/// A lease-store call kept back: who made it and with what.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Held {
    /// `acquire` of tenant `t` by replica `r`; `own` is the epoch its open's retry got under
    /// the same attempt id, if it got one.
    Acquire {
        t: usize,
        r: usize,
        own: Option<u64>,
    },
    /// `renew_many` by replica `r` of these `(tenant, epoch)`.
    Renew { r: usize, batch: Vec<(usize, u64)> },
    /// `release` of `(t, epoch)` by `r`.
    Release { t: usize, r: usize, epoch: u64 },
    /// `publish_head` of `image` by `(t, epoch)` of `r`.
    PublishHead {
        t: usize,
        r: usize,
        epoch: u64,
        image: (u64, u64),
    },
    /// `mark_forgotten` of `(t, epoch)` by `r`.
    MarkForgotten { t: usize, r: usize, epoch: u64 },
    /// `move_tip` of `(t, epoch)` by `r` from `from` to `to`.
    MoveTip {
        t: usize,
        r: usize,
        epoch: u64,
        from: Option<super::Pos>,
        to: super::Pos,
    },
}

/// A put kept back: tenant `t`'s image `(epoch, seq)`, or its segment at that position.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HeldPut {
    /// The tenant.
    pub t: usize,
    /// The image (or the segment's position).
    pub image: (u64, u64),
    /// A segment's put: the ledger's content after it.
    pub segment: Option<Vec<String>>,
}

impl State {
    /// Takes one armed late landing of `late`, if there is one.
    pub(super) fn take_late(&mut self, late: Late) -> bool {
        match self.armed.get_mut(&late) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }

    /// Keeps `call` back and says what its caller hears.
    pub(super) fn hold(&mut self, call: Held) -> Res {
        self.held.push(call);
        Res::StoreTimeout
    }

    /// Every call kept back lands: lease calls first, then puts, each oldest first.
    pub(super) fn land_all(&mut self) {
        for call in std::mem::take(&mut self.held) {
            self.land(call);
        }
        for put in std::mem::take(&mut self.held_puts) {
            if put.segment.is_some() {
                // A segment still in the store (its retry landed first) is not put again.
                // Otherwise, one that lands with no tip moved to it is never read, and its
                // replica takes it back (before or after it lands), or the forget's erasure
                // does below the floor: it may be there or not.
                let ts = &mut self.tenants[put.t];
                if put.image.0 <= ts.floor || !ts.segments.contains_key(&put.image) {
                    ts.seg_maybe.insert(put.image);
                }
                continue;
            }
            let ts = &mut self.tenants[put.t];
            // A put this process no longer runs (a request the server completes after the
            // client gave up) cannot be waited for: below the floor it is a leftover that the
            // next sweep takes (docs/guarantees.md, "Erasure of late puts").
            // Above the floor it is an image no manifest names: its replica's reconciliation
            // takes it back once the put has settled, and retention by listing once seen for
            // `put_lifetime` (docs/guarantees.md, "Reconciling puts of unknown outcome"), so it
            // may be there or not from the moment it lands.
            if put.image.0 > ts.floor {
                ts.lone_retired.insert(put.image);
            } else {
                ts.leftovers.insert(put.image);
            }
        }
    }

    /// One kept-back lease call lands, by the store's rules.
    fn land(&mut self, call: Held) {
        let now = self.now;
        match call {
            Held::Acquire { t, r, own } => {
                let same_attempt = self.tenants[t]
                    .row
                    .as_ref()
                    .is_some_and(|row| Some(row.epoch) == own && row.owner == r);
                if same_attempt && self.row_live(t) {
                    // The store recognises its own attempt: the lease runs on, same epoch.
                    if let Some(row) = self.tenants[t].row.as_mut() {
                        row.expires_at = now + TTL_MS;
                    }
                } else if same_attempt {
                    // Its tenure is over: an attempt starts at most one tenure.
                } else if !self.row_live(t) {
                    let ts = &mut self.tenants[t];
                    let epoch = ts.row.as_ref().map_or(0, |row| row.epoch) + 1;
                    ts.row = Some(Row {
                        owner: r,
                        epoch,
                        expires_at: now + TTL_MS,
                        released: false,
                    });
                }
            }
            Held::Renew { r, batch } => {
                for (t, epoch) in batch {
                    if self.store_live(t, r, epoch)
                        && let Some(row) = self.tenants[t].row.as_mut()
                    {
                        row.expires_at = now + TTL_MS;
                    }
                }
            }
            Held::Release { t, r, epoch } => {
                if self.store_live(t, r, epoch)
                    && let Some(row) = self.tenants[t].row.as_mut()
                {
                    row.released = true;
                }
            }
            Held::PublishHead { t, r, epoch, image } => {
                let ts = &self.tenants[t];
                // Forward only: an older image never replaces a newer head.
                let forward = ts.head.is_none_or(|head| image > head);
                if self.store_live(t, r, epoch) && epoch > ts.floor && forward {
                    self.tenants[t].head = Some(image);
                }
            }
            Held::MarkForgotten { t, r, epoch } => {
                if self.store_live(t, r, epoch) {
                    self.raise_floor(t, epoch);
                }
            }
            Held::MoveTip {
                t,
                r,
                epoch,
                from,
                to,
            } => self.land_move_tip((t, r, epoch), from, to),
        }
    }

    /// The floor rises to `epoch`: the head and the tip go, every image and segment at or
    /// below it is dead (left for a sweep).
    pub(super) fn raise_floor(&mut self, t: usize, epoch: u64) {
        let ts = &mut self.tenants[t];
        ts.floor = ts.floor.max(epoch);
        ts.head = None;
        ts.tip = None;
        let floor = ts.floor;
        let dead: Vec<_> = ts
            .segments
            .keys()
            .filter(|o| o.0 <= floor)
            .copied()
            .collect();
        for o in dead {
            ts.segments.remove(&o);
            ts.seg_leftovers.insert(o);
        }
        let dead: Vec<_> = ts
            .objects
            .keys()
            .filter(|o| o.0 <= floor)
            .copied()
            .collect();
        for o in dead {
            ts.objects.remove(&o);
            ts.leftovers.insert(o);
        }
        let lone: Vec<_> = ts.lone.iter().filter(|o| o.0 <= floor).copied().collect();
        for o in lone {
            ts.lone.remove(&o);
            ts.leftovers.insert(o);
        }
        let lone: Vec<_> = (ts.lone_retired.iter())
            .filter(|o| o.0 <= floor)
            .copied()
            .collect();
        for o in lone {
            ts.lone_retired.remove(&o);
            ts.leftovers.insert(o);
        }
        ts.links.retain(|o, _| o.0 > floor);
        ts.deleted.retain(|o| o.0 > floor);
        let stray: Vec<_> = ts.stray.iter().filter(|o| o.0 <= floor).copied().collect();
        for o in stray {
            ts.stray.remove(&o);
            ts.leftovers.insert(o);
        }
    }

    /// The hook of `LandBeforeRelease`: the calls kept back land before this release.
    pub(super) fn before_release(&mut self) {
        if std::mem::take(&mut self.land_before_release) {
            self.land_all();
        }
    }

    /// `close` on `r`, in every order its concurrent handoffs may reach the stores (which of
    /// them takes an armed late landing depends on it); then `r` restarts.
    pub(super) fn close_and_restart(&self, r: usize) -> super::Outcomes {
        let mut open: Vec<(usize, u64)> = (0..TENANTS)
            .filter_map(|t| self.table[r][t].map(|e| (t, e)))
            .collect();
        let mut orders = vec![open.clone()];
        if open.len() == 2 {
            open.reverse();
            orders.push(open);
        }
        orders
            .into_iter()
            .map(|order| {
                let mut s = self.clone();
                let out = s.close_in_order(r, order);
                s.restart(r);
                (vec![out], s)
            })
            .collect()
    }

    fn close_in_order(&mut self, r: usize, open: Vec<(usize, u64)>) -> Res {
        let mut unflushed = 0;
        for k in open {
            if self.handoff(k, false) != Res::Ok {
                unflushed += 1;
            }
        }
        if !self.lease_down {
            for t in 0..TENANTS {
                let floor = self.tenants[t].floor;
                let dead = self.markers[r][t].is_some_and(|marker| marker <= floor);
                if dead && self.table[r][t].is_none() {
                    self.dirs[r][t] = Dir::Absent;
                }
            }
        }
        Res::Count(unflushed)
    }

    /// The tenures on replica `r` that have not reached a final state.
    fn unended_on(&self, r: usize) -> Vec<(usize, u64)> {
        self.tenures
            .iter()
            .filter(|(_, tenure)| {
                tenure.replica == r
                    && !matches!(
                        tenure.status,
                        Status::Released
                            | Status::Abandoned
                            | Status::Forgotten
                            | Status::Passivated
                    )
            })
            .map(|(k, _)| *k)
            .collect()
    }

    /// A new supervisor on `r`'s state root: an empty table and renewal chain; its start-up
    /// local sweep may drop dead copies in the background.
    pub(super) fn restart(&mut self, r: usize) {
        // What close could not flush stops with the replica, like a crash: no flush, no
        // release; its handles answer `Fenced` (docs/guarantees.md, `close()`).
        let stopped = self.unended_on(r);
        for k in stopped {
            self.end(k);
            self.finish(k, Status::Abandoned);
        }
        for t in 0..TENANTS {
            self.table[r][t] = None;
            self.registered[r][t] = None;
            self.local_sweeps[r][t] = true;
        }
        self.generations[r] += 1;
    }

    /// Replica `r` crashes: its serving tenures are never addressed again (and never flush,
    /// renew or release); their leases run out in the store. Then it restarts.
    pub(super) fn crash(&mut self, r: usize) {
        let gone = self.unended_on(r);
        for k in gone {
            self.tenures.remove(&k);
        }
        // `latest` stays: the tenure marker in the local directory does, and the restarted
        // replica's local sweep reads it.
        self.restart(r);
    }

    /// An open of `t` on `r` whose acquire is in flight when close begins (outcomes `[open,
    /// close]`); then `r` restarts. Close either refuses the open (handing its lease back) or
    /// hands the new tenure off with the rest: never leaves it serving unreported.
    pub(super) fn open_during_close(&self, r: usize, t: usize) -> super::Outcomes {
        let mut outcomes = Vec::new();
        if self.table[r][t].is_some() || self.lease_down || self.row_live(t) {
            // The open does not reach an acquire: the close is as any other.
            let mut s = self.clone();
            let opened = s.open(r, t);
            for (closed, s) in s.close_variants(r) {
                outcomes.push((vec![opened.clone(), closed], s));
            }
            return outcomes;
        }
        // Handed off with the rest.
        let mut opening = self.clone();
        let opened = opening.open(r, t);
        for (closed, handed) in opening.close_variants(r) {
            outcomes.push((vec![opened.clone(), closed.clone()], handed.clone()));
            // Handed off with the rest, its caller told `Closed`: the open had completed when
            // the close took it, so its tenure is flushed and its caller never served from it.
            if let Res::Epoch(epoch) = opened {
                // The host never got a handle: the tenure is the close's alone.
                let mut handed = handed;
                handed.tenures.remove(&(t, epoch));
                handed.latest[r][t] = self.latest[r][t];
                outcomes.push((vec![Res::Closed, closed], handed));
            }
        }
        for (closed, mut refused) in self.close_variants(r) {
            // Refused: the lease it acquired goes back, nothing else changes.
            let ts = &mut refused.tenants[t];
            let epoch = ts.row.as_ref().map_or(0, |row| row.epoch) + 1;
            ts.row = Some(Row {
                owner: r,
                epoch,
                expires_at: refused.now + TTL_MS,
                released: true,
            });
            if refused.dirs[r][t] == Dir::Absent {
                refused.dirs[r][t] = Dir::Maybe;
            }
            outcomes.push((vec![Res::Closed, closed.clone()], refused));
        }
        // Refused before its acquire reached the store: nothing of it is left.
        for (closed, cancelled) in self.close_variants(r) {
            outcomes.push((vec![Res::Closed, closed], cancelled));
        }
        outcomes
    }

    /// Every way `close` on `r` (then a restart) may end: its result and the state after.
    fn close_variants(&self, r: usize) -> Vec<(Res, State)> {
        self.close_and_restart(r)
            .into_iter()
            .map(|(mut out, s)| (out.remove(0), s))
            .collect()
    }

    /// A snapshot and a forget that arrives while its upload is in flight (outcomes
    /// `[snapshot, forget]`). The forget waits for the upload, so the publish ends first; the
    /// snapshot then hears that its tenant is leaving (`Draining`) or, if the forget ended the
    /// tenure before the head moved, `Fenced` — the stores end the same either way. With
    /// nothing to upload, the snapshot answers and the forget follows.
    pub(super) fn forget_during_upload(&self, k: (usize, u64)) -> super::Outcomes {
        let mut s = self.clone();
        if s.admission(k).is_err() || !s.tenures[&k].dirty {
            let snap = s.snapshot(k, false);
            let f = s.forget(k);
            return vec![(vec![snap, f], s)];
        }
        let published = s.publish(k, false);
        let f = s.forget(k);
        let snaps = match published {
            // Published, but the forget took the tenant meanwhile: the caller hears that it is
            // leaving, never a head about to be erased (with a log as with images).
            Ok(()) => vec![Res::Draining, Res::Fenced],
            Err(e) => vec![e],
        };
        snaps
            .into_iter()
            .map(|snap| (vec![snap, f.clone()], s.clone()))
            .collect()
    }

    /// A run whose closure lets every lease lapse before its batch commits: refused, and the
    /// clocks have moved on.
    pub(super) fn lapse_in_commit(&mut self, k: (usize, u64)) -> Res {
        let admitted = self.admission(k);
        self.now += TTL_MS + 1;
        match admitted {
            Ok(()) => Res::Fenced,
            Err(e) => e,
        }
    }

    /// A run whose lease lapses while its batch commits (after the check before COMMIT): the
    /// commit stands in the local file only, the caller hears `Fenced` and the tenure ends,
    /// its writes in no image (promise 1).
    ///
    /// Under `Shipped` no check follows the commit: the tip's compare-and-set in the lease
    /// store (whose clock has not moved yet) is the authority, and the write is acknowledged.
    ///
    /// The trap springs at the replica's second clock read after the run, and another reader
    /// may take the first (the tenant's orphan listing, the supervisor's idle check): the trap
    /// then springs at the check before COMMIT, the batch is rolled back and answered
    /// `Fenced`, and the tenure serves on with its lease lapsed until something notices. Every
    /// mode may see that (outcomes: either).
    pub(super) fn lapse_during_commit(&self, k: (usize, u64), id: String) -> super::Outcomes {
        let mut early = self.clone();
        let refused = early.admission(k).err().unwrap_or(Res::Fenced);
        early.now += TTL_MS + 1;
        let mut after = self.clone();
        let out = if self.logged(k) {
            after.lapsed_in_call = true;
            let out = after.write(k, id);
            after.lapsed_in_call = false;
            out
        } else {
            match after.admission(k) {
                Ok(()) => {
                    after.lose(k);
                    Res::Fenced
                }
                Err(e) => e,
            }
        };
        after.now += TTL_MS + 1;
        vec![(vec![out], after), (vec![refused], early)]
    }

    /// A run blocking its actor past `drain_timeout`, then a handoff (outcomes `[run,
    /// handoff]`): the run commits, the handoff gives up at its deadline and the tenure serves;
    /// or (ledger work off the actor's thread) the handoff flushes what was committed without
    /// waiting, and the run still under way is refused.
    pub(super) fn blocking_run(&self, k: (usize, u64), id: String) -> super::Outcomes {
        let mut gave_up = self.clone();
        if let Err(w) = gave_up.admission(k) {
            let h = gave_up.handoff(k, false);
            return vec![(vec![w, h], gave_up)];
        }
        // The handoff is handled (and given up) before the run's segment comes back: a
        // segment not shipped ends the tenure after the handoff's answer.
        let w = gave_up.commit_write(k, id);
        let mut flushed = self.clone();
        let h = flushed.handoff(k, false);
        // Refused while the tenant leaves, or once it is gone.
        let mut outcomes = vec![(vec![w, Res::DrainTimeout], gave_up)];
        for refused in [Res::Draining, Res::Fenced] {
            outcomes.push((vec![refused, h.clone()], flushed.clone()));
        }
        outcomes
    }

    /// With periodic snapshots on, every serving tenure whose lease holds and that has
    /// unpublished writes publishes them (the checker waits, within the crash bound, for it).
    pub(super) fn publish_periodically(&mut self) {
        if !self.periodic {
            return;
        }
        let due: Vec<(usize, u64)> = self
            .tenures
            .iter()
            .filter(|(k, tenure)| {
                tenure.status == Status::Serving
                    && tenure.mode == super::Mode::Images
                    && tenure.dirty
                    && self.holds(**k)
                    && self.store_live(k.0, tenure.replica, k.1)
                    && k.1 > self.tenants[k.0].floor
            })
            .map(|(k, _)| *k)
            .collect();
        for k in due {
            let _ = self.publish(k, false);
        }
    }
}
