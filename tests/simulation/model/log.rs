//! The model of the change log (`Durability::Shipped`, the default): a batch is acknowledged
//! only once its segment is in the durable store and the lease store moved the tip to it
//! (docs/guarantees.md, the change log). In the simulation every tenant's batches reach it one
//! at a time, so each batch that changes pages is one segment, at the next position after the
//! tenure's tip: the model predicts every segment's key exactly.
//!
//! A segment not shipped answers its caller `Unshipped` (outcome unknown) or `Fenced` (the
//! store refused the tip for a lease it no longer holds) and ends the tenure (Abandoned); what
//! the log holds is then decided by the stores alone — a kept-back tip move that lands later
//! moves the tip by the store's rules, so a write whose caller heard `Unshipped` may yet be
//! restored.
//!
//! `Async` acknowledges at the local commit; what its runs committed is shipped at the next
//! period (a few ms of real time, which the checker waits for: [`State::ship_pending`] runs
//! after every op), and a handoff ships it before it hands the lease back. A shipment that
//! fails ends the tenure, and what it carried is lost — the declared window of `Async`.

use super::{HeldPut, Mode, Pos, Res, Seg, State, Status};
use crate::model::Held;
use crate::ops::Late;

/// How many more times the runtime asks again after a tip move of unknown outcome.
const TIP_RETRIES: u32 = 2;

impl State {
    /// Ships the batch tenure `k` just committed (its ledger now `local`): `Ok` once the tip
    /// moved; otherwise the tenure is lost and the caller hears why.
    pub(super) fn ship(&mut self, k: (usize, u64)) -> Res {
        let (t, epoch) = k;
        let replica = self.tenures[&k].replica;
        let from = self.tenures[&k].tip;
        let to = (epoch, from.map_or(1, |f| f.1 + 1));
        let content = self.tenures[&k].local.clone();
        let after = self.new_state();
        let seg = Seg {
            content,
            before: self.tenures[&k].state,
            after,
            prev: from,
            damaged: false,
            retired: false,
        };
        self.tenure(k).carry = false;
        self.tenure(k).pending = false;
        let out = self.ship_calls((t, replica, epoch), from, to, seg);
        if out == Res::Ok {
            let tenure = self.tenure(k);
            tenure.tip = Some(to);
            tenure.state = after;
            tenure.since_image += 1;
        } else {
            self.lose(k);
        }
        out
    }

    /// The put of the segment at `to`, then the tip's compare-and-set from `from` (asked again
    /// after an answer of unknown outcome).
    fn ship_calls(
        &mut self,
        (t, r, epoch): (usize, usize, u64),
        from: Option<Pos>,
        to: Pos,
        seg: Seg,
    ) -> Res {
        self.successor_steps_in();
        if self.durable_down {
            return Res::Unshipped;
        }
        if self.take_late(Late::SegmentPut) {
            // The put answers a timeout and lands later; the runtime sends it again (the
            // fault is one-shot, so the next try goes through) and ships on.
            self.held_puts.push(HeldPut {
                t,
                image: to,
                segment: Some(seg.content.clone()),
            });
            if self.lapsed_in_call {
                // Sent again only while the lease holds on the replica's clock.
                return Res::Unshipped;
            }
        }
        self.put_segment(t, to, seg);
        let out = self.move_tip_calls((t, r, epoch), from, to);
        if out != Res::Ok {
            self.tenants[t].seg_unconfirmed.insert(to);
        }
        out
    }

    /// The tip's compare-and-set from `from` to `to`, asked again after an answer of unknown
    /// outcome.
    fn move_tip_calls(
        &mut self,
        (t, r, epoch): (usize, usize, u64),
        from: Option<Pos>,
        to: Pos,
    ) -> Res {
        for tries in 0..=TIP_RETRIES {
            if self.lease_down {
                // An outage leaves the outcome unknown: asked again.
                continue;
            }
            if self.take_late(Late::MoveTip) {
                self.held.push(Held::MoveTip {
                    t,
                    r,
                    epoch,
                    from,
                    to,
                });
                continue;
            }
            if !self.store_live(t, r, epoch) || epoch <= self.tenants[t].floor {
                // A first refusal is definite; after an unknown answer, an earlier try may
                // have landed before the lease went.
                return if tries == 0 {
                    Res::Fenced
                } else {
                    Res::Unshipped
                };
            }
            return match self.tenants[t].tip {
                tip if tip == Some(to) => Res::Ok,
                tip if tip == from => {
                    self.tenants[t].tip = Some(to);
                    Res::Ok
                }
                _ => Res::Unshipped,
            };
        }
        Res::Unshipped
    }

    /// A segment's bytes reach the store (if absent): above the floor it is listed until a
    /// forget; at or below it, a leftover for the next sweep.
    pub(super) fn put_segment(&mut self, t: usize, at: Pos, seg: Seg) {
        let ts = &mut self.tenants[t];
        if at.0 > ts.floor {
            ts.links.entry(at).or_insert(seg.prev);
            ts.segments.entry(at).or_insert(seg);
        } else {
            ts.seg_leftovers.insert(at);
        }
    }

    /// A kept-back tip move lands by the store's rules: only for the live tenure above the
    /// floor, only from the tip it saw.
    pub(super) fn land_move_tip(
        &mut self,
        (t, r, epoch): (usize, usize, u64),
        from: Option<Pos>,
        to: Pos,
    ) {
        let live = self.store_live(t, r, epoch) && epoch > self.tenants[t].floor;
        if live && self.tenants[t].tip == from {
            self.tenants[t].tip = Some(to);
        }
    }

    /// `Op::ZombieShip`, at the segment's put: every lease runs out, and a successor opens the
    /// tenant and forgets it (the put, held meanwhile, then goes on).
    fn successor_steps_in(&mut self) {
        let Some((t, r)) = self.successor.take() else {
            return;
        };
        self.now += super::TTL_MS + 1;
        let opened = self.open(r, t);
        let forgot = match opened {
            Res::Epoch(e) => self.forget((t, e)),
            _ => Res::Skipped,
        };
        self.successor_outcomes = Some((opened, forgot));
    }

    /// `Async`: what each serving tenure committed since its last shipment goes now (the
    /// period after the op); a shipment that fails ends the tenure.
    pub(super) fn ship_pending(&mut self) {
        let due: Vec<(usize, u64)> = self
            .tenures
            .iter()
            .filter(|(_, tenure)| {
                tenure.pending && tenure.mode == Mode::Async && tenure.status == Status::Serving
            })
            .map(|(k, _)| *k)
            .collect();
        for k in due {
            let _ = self.ship(k);
        }
    }

    /// `Async`: a batch committed (its lease held at the commit): acknowledged now, shipped at
    /// the next period (or by a handoff's flush).
    pub(super) fn commit_async(&mut self, k: (usize, u64)) -> Res {
        self.tenure(k).pending = true;
        Res::Ok
    }
}
