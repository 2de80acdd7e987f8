//! The model of the ops made of several calls: a handoff that drains admitted work, and the
//! two races (a handoff beside a write, a handoff beside a forget), whose outcomes depend on
//! the order in which their messages reach the tenant — every order is an outcome.

use super::{Outcomes, Res, State, Status};

impl State {
    /// Admit; a ticket write; a handoff begins; a plain write and an admission are refused, a
    /// snapshot publishes the ticket's write (the crash bound holds while draining); time passes and the owner may renew; a second ticket write; the ticket goes;
    /// the handoff ends — or was settled as overtaken when the renewal found the lease lost.
    ///
    /// With periodic snapshots on, the first write may be published before the drain begins
    /// (`tick`), and the second must be in the head image within the crash bound, drain or no
    /// drain (docs/guarantees.md, promise 3): its outcome is followed by `Covered(true)`.
    pub(super) fn drained_handoff(
        &mut self,
        k: (usize, u64),
        (pause, renew): (u64, bool),
        (a, c): (String, String),
        tick: bool,
    ) -> Vec<Res> {
        if let Err(e) = self.admission(k) {
            return vec![e];
        }
        let first = self.write(k, a);
        if tick {
            let _ = self.publish(k, false);
        }
        if let Err(e) = self.begin_drain(k) {
            return vec![Res::Ok, first, e];
        }
        let mut out = vec![Res::Ok, first, Res::Draining, Res::Draining];
        out.push(self.snapshot(k, false));
        self.now += pause;
        if renew {
            let replica = self.tenures[&k].replica;
            out.push(self.renew(replica));
        }
        let lost = self.tenures[&k].status != Status::Serving;
        let second = if !lost && self.holds(k) {
            self.commit_write(k, c)
        } else {
            Res::Fenced
        };
        out.push(second.clone());
        if self.periodic_images(k) && second == Res::Ok {
            out.push(Res::Covered(self.publish(k, false).is_ok()));
        }
        // A segment not shipped ends the tenure and answers the handoff with its error.
        let unshipped = !lost && self.tenures[&k].status != Status::Serving;
        out.push(if lost {
            Res::Draining
        } else if unshipped {
            second
        } else {
            self.flush(k, false)
        });
        out
    }

    /// A handoff and a write sent at once: the write reaches the tenant before the drain
    /// begins, while it drains or flushes, or after the handoff is over.
    pub(super) fn race_handoff_write(&self, k: (usize, u64), id: String) -> Outcomes {
        let mut before = self.clone();
        let w = before.write(k, id.clone());
        let mut ticked = before.clone();
        let h = before.handoff(k, false);
        let mut outcomes = vec![(vec![w.clone(), h], before)];
        if self.periodic_images(k) && w == Res::Ok {
            // A periodic snapshot of the write was still uploading when the flush began: the
            // flush publishes the same content once more.
            let _ = ticked.publish(k, false);
            ticked.tenure(k).dirty = true;
            let h = ticked.handoff(k, false);
            outcomes.push((vec![w, h], ticked));
        }
        if self.begin_drain(k).is_ok() {
            let mut during = self.clone();
            let h = during.handoff(k, false);
            outcomes.push((vec![Res::Draining, h], during));
        }
        let mut after = self.clone();
        let h = after.handoff(k, false);
        let w = after.write(k, id);
        outcomes.push((vec![w, h], after));
        outcomes
    }

    /// A handoff and a forget sent at once (outcomes `[forget, handoff]`). The forget reaches
    /// the tenant before the drain begins, while it drains, during the final upload, while the
    /// lease is being released (refused), or after the handoff is over (or was refused).
    pub(super) fn race_handoff_forget(&self, k: (usize, u64)) -> Outcomes {
        let mut outcomes = Vec::new();
        let mut first = self.clone();
        let f = first.forget(k);
        if matches!(
            self.tenures[&k].status,
            Status::Serving | Status::Forgetting
        ) {
            // The drain request finds the forget under way, or the tenant already forgotten.
            let refused = first.begin_drain(k).err().unwrap_or(Res::Draining);
            outcomes.push((vec![f.clone(), Res::Draining], first.clone()));
            outcomes.push((vec![f, refused], first));
        }
        let mut after = self.clone();
        let h = after.handoff(k, false);
        if h == Res::Ok {
            outcomes.push((vec![Res::Draining, Res::Ok], after.clone()));
        }
        let f = after.forget(k);
        outcomes.push((vec![f, h], after));
        if self.begin_drain(k).is_ok() {
            let mut during = self.clone();
            let f = during.forget(k);
            outcomes.push((vec![f, Res::Draining], during));
            if self.tenures[&k].dirty && !self.logged(k) {
                let mut uploading = self.clone();
                let _ = uploading.publish(k, false);
                let f = uploading.forget(k);
                outcomes.push((vec![f, Res::Draining], uploading));
            }
        }
        outcomes
    }
}
