//! The world carries out one op: [`World::exec`] dispatches it (the fault classes go on to
//! `faults.rs`) and reduces what came back to [`Res`]; the everyday composite ops (an open, a
//! stalled upload, a handoff that drains admitted work, a damaged head) live here too.

use leasehold::Error;
use leasehold_actors::TenantRef;

use super::{
    SLOW_PUT, World, count, insert, key_of, read, res_of, settle, settle_raw, snapshot, tenant_ids,
    ticket_insert, ticket_work, unit, wait_for_drain,
};
use crate::model::{Mode, REPLICAS, Res, TTL_MS};
use crate::ops::{At, Op};

impl World {
    /// Carries out `op`, its writes inserting `ids`; one [`Res`] per call, as the model's.
    /// Handles that a call re-resolved (a passivated tenant reopened) are noted after it.
    pub async fn exec(&mut self, op: &Op, ids: &[String]) -> Vec<Res> {
        let out = self.exec_op(op, ids).await;
        self.note_rebound_handles();
        out
    }

    async fn exec_op(&mut self, op: &Op, ids: &[String]) -> Vec<Res> {
        let id = |i: usize| ids[i].clone();
        let on = |t: usize, at: At| self.handle(t, at);
        match *op {
            Op::Open { r, t } => vec![self.open(r, t).await],
            Op::Write { t, at } => match on(t, at) {
                Some(h) => vec![settle(insert(&h, id(0))).await],
                None => vec![Res::Skipped],
            },
            Op::Read { t, at } => match on(t, at) {
                Some(h) => vec![settle(read(&h)).await],
                None => vec![Res::Skipped],
            },
            Op::Ticket { t, at } => match on(t, at) {
                Some(h) => ticket_work(&h, id(0)).await,
                None => vec![Res::Skipped],
            },
            Op::Snapshot { t, at } => match on(t, at) {
                Some(h) => vec![settle(snapshot(&h)).await],
                None => vec![Res::Skipped],
            },
            Op::Handoff { t, at } => match on(t, at) {
                Some(h) => vec![settle(unit(h.handoff())).await],
                None => vec![Res::Skipped],
            },
            Op::Move { t } => {
                let newest = on(t, At::Newest);
                let r = newest
                    .as_ref()
                    .map_or(0, |h| (self.owners[&(t, h.epoch())] + 1) % REPLICAS);
                let handed = match newest {
                    Some(h) => settle(unit(h.handoff())).await,
                    None => Res::Skipped,
                };
                vec![handed, self.open(r, t).await]
            }
            Op::Stalled { t, at, handoff } => match on(t, at) {
                Some(h) => vec![self.stalled(&h, handoff).await],
                None => vec![Res::Skipped],
            },
            Op::DrainedHandoff {
                t,
                at,
                pause,
                renew,
            } => match on(t, at) {
                Some(h) => {
                    let owner = self.owners[&(t, h.epoch())];
                    let renew = renew.then_some(owner);
                    let covered = self.periodic && self.case.modes[owner] == Mode::Images;
                    (self.drained_handoff(&h, (pause, renew), covered, id(0), id(1))).await
                }
                None => vec![Res::Skipped],
            },
            Op::RaceHandoffWrite { t, at } => match on(t, at) {
                Some(h) => {
                    let handing_off = unit(h.handoff());
                    let writing = insert(&h, id(0));
                    let (h, w) = futures::join!(settle(handing_off), settle(writing));
                    vec![w, h]
                }
                None => vec![Res::Skipped, Res::Skipped],
            },
            Op::RaceHandoffForget { t, at } => match on(t, at) {
                Some(h) => {
                    let handing_off = unit(h.handoff());
                    let forgetting = unit(h.forget());
                    let (h, f) = futures::join!(settle(handing_off), settle(forgetting));
                    vec![f, h]
                }
                None => vec![Res::Skipped, Res::Skipped],
            },
            Op::Abandon { t, at } => match on(t, at) {
                Some(h) => vec![settle(unit(h.abandon())).await],
                None => vec![Res::Skipped],
            },
            Op::Forget { t, at } => match on(t, at) {
                Some(h) => vec![settle(unit(h.forget())).await],
                None => vec![Res::Skipped],
            },
            Op::Advance { ms } | Op::Passivate { ms, .. } => {
                self.pass_time(ms).await;
                vec![Res::Ok]
            }
            Op::RacePassivate { t, at, ms, with } => match on(t, at) {
                Some(h) => vec![self.race_passivate(t, &h, (ms, with), id(0)).await],
                None => vec![Res::Skipped],
            },
            Op::Renew { r } => vec![settle(unit(self.sups[r].renew_now())).await],
            Op::DurableDown(down) => {
                self.durable.set_down(down);
                vec![Res::Ok]
            }
            Op::LeaseDown(down) => {
                self.leases.set_down(down);
                vec![Res::Ok]
            }
            Op::SlowPuts(slow) => {
                match slow {
                    true => self.durable.slow_put(|_| true, SLOW_PUT),
                    false => self.durable.clear_slow_put(),
                }
                vec![Res::Ok]
            }
            Op::CorruptHead { t } => vec![self.corrupt_head(t).await],
            Op::SweepLocal { r } => vec![settle(count(self.sups[r].sweep_local())).await],
            Op::Settle => {
                self.leases.set_down(false);
                self.durable.set_down(false);
                self.durable.clear_slow_put();
                self.leases.disarm_late();
                self.durable.clear_late_puts();
                self.land().await;
                self.pass_time(TTL_MS + 1).await;
                vec![Res::Ok]
            }
            Op::Age
            | Op::BulkWrite { .. }
            | Op::Pitr { .. }
            | Op::PitrAt { .. }
            | Op::Damage { .. }
            | Op::DamageAt { .. }
            | Op::WriteWhileDown { .. } => self.exec_log(op, ids).await,
            _ => self.exec_fault(op, ids).await,
        }
    }

    pub(super) async fn open(&mut self, r: usize, t: usize) -> Res {
        let (org, tenant) = tenant_ids(t);
        let opened = settle_raw(self.sups[r].open(&org, &tenant)).await;
        let res = self.opened(r, t, opened);
        if matches!(res, Res::Epoch(_)) {
            self.note_open(r, t).await;
        }
        res
    }

    /// Records the tenure an open of `t` on `r` returned, if any.
    pub(super) fn opened(
        &mut self,
        r: usize,
        t: usize,
        opened: Result<Result<TenantRef, Error>, Res>,
    ) -> Res {
        match opened {
            Ok(Ok(handle)) => {
                let epoch = handle.epoch();
                self.handles.entry((t, epoch)).or_insert(handle);
                self.owners.entry((t, epoch)).or_insert(r);
                self.latest[r][t] = Some(epoch);
                Res::Epoch(epoch)
            }
            Ok(Err(e)) => res_of(&e),
            Err(late) => late,
        }
    }

    /// Zeroes the first bytes (the SQLite header) of the head image's file, behind the store's
    /// back: it fails its checksum, however often it is done.
    async fn corrupt_head(&self, t: usize) -> Res {
        let key = key_of(t);
        let record = self.leases.inner().read(&key).await.unwrap();
        let Some(head) = record.and_then(|r| r.head) else {
            return Res::Skipped;
        };
        let object = leasehold::layout::image_key(&key, head.epoch, head.seq);
        let path = object
            .split('/')
            .fold(self.dir.path().join("durable"), |p, s| p.join(s));
        let mut bytes = std::fs::read(&path).unwrap();
        let header = bytes.len().min(16);
        bytes[..header].fill(0);
        std::fs::write(&path, bytes).unwrap();
        Res::Ok
    }

    async fn stalled(&self, h: &TenantRef, handoff: bool) -> Res {
        self.durable.hang_puts(true);
        let outcome = match handoff {
            true => settle(unit(h.handoff())).await,
            false => settle(snapshot(h)).await,
        };
        self.durable.hang_puts(false);
        outcome
    }

    /// Admit; a ticket write; the handoff begins (waited for by status); a plain write, an
    /// admission and a snapshot; time passes, a renewal on `renew`; a second ticket write;
    /// drop; the outcome.
    async fn drained_handoff(
        &self,
        h: &TenantRef,
        (pause, renew): (u64, Option<usize>),
        covered: bool,
        a: String,
        c: String,
    ) -> Vec<Res> {
        let ticket = match settle_raw(h.admit()).await {
            Ok(Ok(ticket)) => ticket,
            Ok(Err(e)) => return vec![res_of(&e)],
            Err(late) => return vec![late],
        };
        let c_id = c.clone();
        let first = settle(ticket_insert(&ticket, a)).await;
        let mut handing_off = Box::pin(unit(h.handoff()));
        let began = wait_for_drain(h).await;
        if !began {
            drop(ticket);
            let outcome = settle(handing_off).await;
            return vec![Res::Ok, first, outcome];
        }
        let plain = settle(insert(h, "refused".into())).await;
        let readmit = match settle_raw(h.admit()).await {
            Ok(Ok(_)) => Res::Ok,
            Ok(Err(e)) => res_of(&e),
            Err(late) => late,
        };
        let snap = settle(snapshot(h)).await;
        let mut out = vec![Res::Ok, first, plain, readmit, snap];
        self.advance(pause);
        if let Some(r) = renew {
            out.push(settle(unit(self.sups[r].renew_now())).await);
        }
        out.push(settle(ticket_insert(&ticket, c)).await);
        if covered && out.last() == Some(&Res::Ok) {
            out.push(Res::Covered(self.covered(h.key(), &c_id).await));
        }
        drop(ticket);
        out.push(settle(&mut handing_off).await);
        out
    }
}
