//! The model of passivation (docs/guarantees.md, promise 12), written from the documented
//! rules: a tenant idle for `passivate_after` — nothing asked of it since (a run, an admission,
//! a ticket's end, a snapshot; its open counts as activity) — is let go by its replica's idle
//! check like a handoff with no caller and no successor: the flush of a handoff (the final
//! image on `Images`; on `Shipped` everything acknowledged is in the log already), the local
//! copy dropped, the lease released, the tenure ended `Passivated`. A flush that fails leaves it
//! serving, used as of the check (the next check that finds it idle again tries again); one
//! whose lease is gone ends it lost.
//!
//! A handle the host kept re-resolves: a run, admission, snapshot or forget on a passivated
//! tenure reopens the tenant on the same replica (a new epoch, restored from the stores) and
//! goes there, the handle — and every clone of it — bound to the new tenure from then on; the
//! reopen's refusal is the call's answer (`Closed` once that replica's supervisor has closed). A handoff of a passivated tenure answers `Ok` (it is
//! flushed and released already) and an abandon does nothing.
//!
//! ```text
//!   time passes ──> every driven replica's idle check: each serving tenure of its table idle
//!                   for passivate_after ──> flush (as a handoff's) ── ok ──> Passivated
//!                                                 │ fenced ──> lost (Abandoned)
//!                                                 └ failed ──> serves on, used as of now
//!   a call on a passivated tenure's handle ──> open on its replica ──> the call runs there
//! ```

use super::{Outcomes, REPLICAS, Res, State, Status, TENANTS};
use crate::ops::{At, Racer};

/// `passivate_after` of the driven replicas in the passivation cases (ms, the replicas'
/// manual clocks): shorter than a lease's term less its margin, so that a tenure opened or
/// renewed last goes idle while its lease still holds.
pub const PASSIVATE_AFTER_MS: u64 = 4_000;

impl State {
    /// The key whose binding the handle recorded under `k` shares.
    fn binding(&self, k: (usize, u64)) -> (usize, u64) {
        self.shares.get(&k).copied().unwrap_or(k)
    }

    /// The tenure the handle recorded under `k` is bound to.
    pub(super) fn target(&self, k: (usize, u64)) -> (usize, u64) {
        let binding = self.binding(k);
        (k.0, self.bound.get(&binding).copied().unwrap_or(binding.1))
    }

    /// The tenure a call on the handle of `k` reaches: its bound tenure, or — once that was
    /// passivated — the tenant reopened on the same replica (a table hit when it is open there
    /// already), to which the handle is bound from then on. The reopen's refusal is the call's.
    pub(super) fn reach(&mut self, k: (usize, u64)) -> Result<(usize, u64), Res> {
        let target = self.target(k);
        if self.tenures[&target].status != Status::Passivated {
            return Ok(target);
        }
        let (t, _) = k;
        let replica = self.tenures[&target].replica;
        if self.tenures[&target].generation != self.generations[replica] {
            // The supervisor that handed the handle out has closed since.
            return Err(Res::Closed);
        }
        let newest = self.tenures.keys().filter(|n| n.0 == t).map(|n| n.1).max();
        match self.open(replica, t) {
            Res::Epoch(epoch) => {
                let binding = self.binding(k);
                self.bound.insert(binding, epoch);
                if newest.is_none_or(|n| epoch > n) {
                    // The world knows the new tenure only through this handle.
                    self.shares.insert((t, epoch), binding);
                }
                Ok((t, epoch))
            }
            refused => Err(refused),
        }
    }

    /// Whether the handle of `k` is bound to a passivated tenure.
    pub(super) fn passivated(&self, k: (usize, u64)) -> bool {
        self.tenures[&self.target(k)].status == Status::Passivated
    }

    /// Tenure `k` was asked something now: its last activity.
    pub(super) fn touch(&mut self, k: (usize, u64)) {
        let now = self.now;
        if let Some(tenure) = self.tenures.get_mut(&k) {
            tenure.last_touch = now;
        }
    }

    /// How long until the tenure the handle `at` of `t` is bound to has been idle for
    /// `passivate_after` (0 when it does not serve, or passivation is off).
    pub fn idle_in(&self, t: usize, at: At) -> u64 {
        let Some(after) = self.passivate_after else {
            return 0;
        };
        let Some(k) = self.key_of(t, at).map(|k| self.target(k)) else {
            return 0;
        };
        let tenure = &self.tenures[&k];
        if tenure.status != Status::Serving {
            return 0;
        }
        (tenure.last_touch + after).saturating_sub(self.now)
    }

    /// Time passes, `ms` on every clock, and each driven replica runs its idle check.
    pub(super) fn pass_time(&mut self, ms: u64) {
        self.now += ms;
        self.idle_checks(None);
    }

    /// Every driven replica's idle check: each serving tenure in its table, idle for
    /// `passivate_after`, is passivated — but `spare`, whose passivation another call overtook.
    pub(super) fn idle_checks(&mut self, spare: Option<(usize, u64)>) {
        for r in 0..REPLICAS {
            for t in 0..TENANTS {
                let Some(epoch) = self.table[r][t] else {
                    continue;
                };
                let k = (t, epoch);
                if Some(k) != spare && self.idle(k) {
                    self.passivate(k);
                }
            }
        }
    }

    /// Whether tenure `k` serves and has been idle for `passivate_after` (never, with
    /// passivation off).
    fn idle(&self, k: (usize, u64)) -> bool {
        let tenure = &self.tenures[&k];
        self.passivate_after.is_some_and(|after| {
            tenure.status == Status::Serving && tenure.last_touch + after <= self.now
        })
    }

    /// Whether tenure `k` is in its replica's table.
    fn in_table(&self, k: (usize, u64)) -> bool {
        let (t, epoch) = k;
        self.table[self.tenures[&k].replica][t] == Some(epoch)
    }

    /// The passivation of tenure `k`: a handoff's flush; `Passivated` once it is released.
    fn passivate(&mut self, k: (usize, u64)) {
        match self.flush(k, false) {
            Res::Ok => self.tenure(k).status = Status::Passivated,
            // The flush failed: it serves on, noted as used now (its idle check asks again once
            // it has been idle that long).
            _ if self.tenures[&k].status == Status::Serving => self.touch(k),
            // Its lease was gone: lost.
            _ => {}
        }
    }

    /// A write on the handle of `k`, as the host sends it: it reaches the bound tenure or the
    /// tenant reopened after a passivation.
    pub(super) fn write_through(&mut self, k: (usize, u64), id: String) -> Res {
        match self.reach(k) {
            Ok(k) => {
                self.touch(k);
                self.write(k, id)
            }
            Err(refused) => refused,
        }
    }

    /// `Op::RacePassivate`: time passes `ms`, every other replica's idle check, then the idle
    /// check of the tenure's replica and, the moment it has begun its passivations, `with` —
    /// a call that meets the flush under way or the tenure let go:
    /// - a write or a forget on the handle waits for the passivation to end and reopens the
    ///   tenant (a flush that failed leaves the tenure serving: the call goes there); one that
    ///   lost the lease refuses a write — `Draining` while under way, `Fenced` once ended;
    ///   a forget may also overtake the flush (while its final image uploads: the forget
    ///   waits for it and erases it), as it overtakes a handoff's;
    /// - an open of the tenant on that replica waits for the passivation to end and opens a new
    ///   tenure (or finds the tenure serving on);
    /// - a handoff answers `Ok` once the tenure is passivated; refused (`Draining`) while the
    ///   passivation was under way if it then serves on, or hands off if it came after;
    /// - an abandon may overtake the flush (the tenure abandoned, the lease handed back: on
    ///   `Images` the final image may or may not have moved the head first), or come once the
    ///   tenure let go (a no-op), or meet a tenure whose flush failed (abandoned then).
    pub(super) fn race_passivate(
        &self,
        k: (usize, u64),
        ms: u64,
        with: Racer,
        id: String,
    ) -> Outcomes {
        let mut base = self.clone();
        base.now += ms;
        let before = base.target(k);
        let serving = base.tenures[&before].status == Status::Serving;
        let mut s = base.clone();
        s.idle_checks(None);
        let after = s.tenures[&before].status;
        let chosen = serving && base.in_table(before) && base.idle(before);
        let lost = chosen && after == Status::Abandoned;
        let served_on = chosen && after == Status::Serving;
        let mut outcomes = Vec::new();
        match with {
            Racer::Write => {
                if lost {
                    outcomes.push((vec![Res::Draining], s.clone()));
                }
                let written = s.write_through(k, id);
                outcomes.push((vec![written], s));
            }
            Racer::Open => {
                let (t, _) = before;
                let opened = s.open(base.tenures[&before].replica, t);
                outcomes.push((vec![opened], s));
            }
            Racer::Handoff => {
                if served_on || lost {
                    outcomes.push((vec![Res::Draining], s.clone()));
                }
                let handed = s.handoff(before, false);
                outcomes.push((vec![handed], s));
            }
            Racer::Forget => {
                if chosen {
                    // The forget overtakes the flush: it never let go.
                    let mut overtaken = base.clone();
                    overtaken.idle_checks(Some(before));
                    if overtaken.tenures[&before].dirty && !overtaken.logged(before) {
                        // During the final image's upload: the forget waits for it.
                        let mut uploading = overtaken.clone();
                        let _ = uploading.publish(before, false);
                        let forgot = uploading.forget(before);
                        outcomes.push((vec![forgot], uploading));
                    }
                    let forgot = overtaken.forget(before);
                    outcomes.push((vec![forgot], overtaken));
                }
                let forgot = match s.reach(k) {
                    Ok(k) => s.forget(k),
                    Err(refused) => refused,
                };
                outcomes.push((vec![forgot], s));
            }
            Racer::Abandon => {
                if chosen {
                    // The abandon overtakes the flush: nothing more is flushed.
                    let mut overtaken = base.clone();
                    overtaken.idle_checks(Some(before));
                    if overtaken.tenures[&before].dirty && !overtaken.logged(before) {
                        // During the final image's upload: the head may have moved first.
                        let mut uploading = overtaken.clone();
                        let _ = uploading.publish(before, false);
                        let abandoned = uploading.abandon(before);
                        outcomes.push((vec![abandoned], uploading));
                        // Or not: the image's put may still land, named by nothing (the
                        // reconciliation deletes it).
                        let (t, epoch) = before;
                        let seq = overtaken.tenures[&before].next_seq;
                        overtaken.tenants[t].stray.insert((epoch, seq));
                    }
                    let abandoned = overtaken.abandon(before);
                    outcomes.push((vec![abandoned], overtaken));
                }
                // On the tenure the handle is bound to: a no-op once it is over.
                let abandoned = s.abandon(before);
                outcomes.push((vec![abandoned], s));
            }
        }
        outcomes
    }
}
