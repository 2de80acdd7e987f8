//! The reference model: what a correct runtime does with each operation, as a pure function of
//! the model's state — no actors, no stores, no clock. [`State::step`] returns every outcome the
//! operation may legitimately have, each with the state it leads to; an operation whose outcome
//! depends on a race (a write sent beside a handoff) has several, and the checker keeps every
//! state that the observed outcome allows.
//!
//! Time is one number, `now` (ms since the case began): every replica's clock and the lease
//! store's advance together, so a holder's lease holds while `now < valid_until` (sent + ttl −
//! margin) and the store's row is live while `now < expires_at` (sent + ttl).

use std::collections::{BTreeMap, BTreeSet};

use crate::ops::{At, Op};

/// Lease duration (ms).
pub const TTL_MS: u64 = 10_000;
/// Margin before the end of a lease at which its holder stops acting (ms).
pub const MARGIN_MS: u64 = 2_000;
/// Replicas the generator drives; one more, never driven, opens everything at the end.
pub const REPLICAS: usize = 3;
/// Tenants.
pub const TENANTS: usize = 2;

/// What one call came to, reduced to what the model predicts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Res {
    /// `Ok(())`.
    Ok,
    /// An open that returned the tenure of this epoch.
    Epoch(u64),
    /// A read: the tenant's event ids, in order.
    Keys(Vec<String>),
    /// A snapshot: the head `(epoch, seq)` it returned.
    Head(Option<(u64, u64)>),
    /// `Error::Fenced`.
    Fenced,
    /// `Error::Draining`.
    Draining,
    /// `Error::LeaseHeld`.
    LeaseHeld,
    /// `Error::Store(Unavailable)`: an injected outage.
    StoreDown,
    /// `Error::Store(Timeout)`: a call that outlived `store_deadline`.
    StoreTimeout,
    /// No tenure of this tenant was ever opened on the replica: nothing was called.
    Skipped,
    /// Anything else: never predicted.
    Other(String),
}

/// A tenure's place in its life, as far as a sequential observer can see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Serving.
    Serving,
    /// A forget began and has not finished (it failed and may be retried).
    Forgetting,
    /// Handed off.
    Released,
    /// Abandoned or lost.
    Abandoned,
    /// Erased.
    Forgotten,
}

/// One tenure: a tenant's lease at one epoch, held by one replica.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tenure {
    /// The replica that opened it.
    pub replica: usize,
    /// Where it is.
    pub status: Status,
    /// The holder may act while `now < valid_until`.
    pub valid_until: u64,
    /// The tenure ended locally (released, lost, forgotten): it never holds again.
    pub ended: bool,
    /// What its ledger holds, committed, in order.
    pub local: Vec<String>,
    /// Something was committed since the last published image (or the restore).
    pub dirty: bool,
    /// The next image number this tenure will try.
    pub next_seq: u64,
    /// The head as the tenure knows it: the one it restored or last published.
    pub chain_head: Option<(u64, u64)>,
}

/// A tenant's row in the lease store.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Row {
    /// The replica that holds or last held it.
    pub owner: usize,
    /// The last epoch granted.
    pub epoch: u64,
    /// Live while `now < expires_at` and not released.
    pub expires_at: u64,
    /// Handed back.
    pub released: bool,
}

/// The published head: which image, and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Head {
    /// Its epoch.
    pub epoch: u64,
    /// Its number within the epoch.
    pub seq: u64,
    /// The event ids in the image.
    pub content: Vec<String>,
}

/// What the stores hold of one tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct TenantState {
    /// The lease row; `None` until the first acquire.
    pub row: Option<Row>,
    /// The highest forgotten epoch.
    pub floor: u64,
    /// The newest published image.
    pub head: Option<Head>,
    /// Images (each with its manifest) above the floor: exactly these are in the store.
    pub objects: BTreeSet<(u64, u64)>,
    /// Images at or below the floor that a failed forget left: each may still be there until a
    /// sweep (which runs beside an open, in the background) takes it.
    pub leftovers: BTreeSet<(u64, u64)>,
}

/// The whole model of one simulated fleet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct State {
    /// Model time, ms.
    pub now: u64,
    /// The lease store is down.
    pub lease_down: bool,
    /// The durable store is down.
    pub durable_down: bool,
    /// Per tenant.
    pub tenants: Vec<TenantState>,
    /// Every tenure ever opened, by `(tenant, epoch)`.
    pub tenures: BTreeMap<(usize, u64), Tenure>,
    /// `[replica][tenant]`: the epoch in the supervisor's table.
    pub table: Vec<Vec<Option<u64>>>,
    /// `[replica][tenant]`: the epoch in the replica's renewal chain.
    pub registered: Vec<Vec<Option<u64>>>,
    /// `[replica][tenant]`: the epoch of the last tenure opened there (what `At::On` addresses).
    pub latest: Vec<Vec<Option<u64>>>,
    /// `[replica][tenant]`: the tenant's local directory exists.
    pub dirs: Vec<Vec<bool>>,
}

type Outcomes = Vec<(Vec<Res>, State)>;

fn grid<T: Clone>(value: T) -> Vec<Vec<T>> {
    vec![vec![value; TENANTS]; REPLICAS + 1]
}

impl State {
    /// An empty fleet at time 0.
    pub fn new() -> Self {
        Self {
            now: 0,
            lease_down: false,
            durable_down: false,
            tenants: vec![TenantState::default(); TENANTS],
            tenures: BTreeMap::new(),
            table: grid(None),
            registered: grid(None),
            latest: grid(None),
            dirs: grid(false),
        }
    }

    /// Every outcome `op` may have, with the state each leads to. `ids` are the unique event ids
    /// the op's writes insert, in order.
    pub fn step(&self, op: &Op, ids: &[String]) -> Outcomes {
        let mut s = self.clone();
        let id = |i: usize| ids[i].clone();
        let single = |out: Vec<Res>, s: State| vec![(out, s)];
        match *op {
            Op::Open { r, t } => {
                let out = s.open(r, t);
                single(vec![out], s)
            }
            Op::Write { t, at } => s.on(t, at, |s, k| vec![s.write(k, id(0))]),
            Op::Read { t, at } => s.on(t, at, |s, k| vec![s.read(k)]),
            Op::Ticket { t, at } => s.on(t, at, |s, k| s.ticket(k, id(0))),
            Op::Snapshot { t, at } => s.on(t, at, |s, k| vec![s.snapshot(k, false)]),
            Op::Handoff { t, at } => s.on(t, at, |s, k| vec![s.handoff(k, false)]),
            Op::Stalled { t, at, handoff } => s.on(t, at, |s, k| {
                vec![if handoff {
                    s.handoff(k, true)
                } else {
                    s.snapshot(k, true)
                }]
            }),
            Op::DrainedHandoff {
                t,
                at,
                pause,
                renew,
            } => s.on(t, at, |s, k| {
                s.drained_handoff(k, (pause, renew), id(0), id(1))
            }),
            Op::RaceHandoffWrite { t, at } => match s.key_of(t, at) {
                None => single(vec![Res::Skipped, Res::Skipped], s),
                Some(k) => s.race_handoff_write(k, id(0)),
            },
            Op::RaceHandoffForget { t, at } => match s.key_of(t, at) {
                None => single(vec![Res::Skipped, Res::Skipped], s),
                Some(k) => s.race_handoff_forget(k),
            },
            Op::Abandon { t, at } => s.on(t, at, |s, k| vec![s.abandon(k)]),
            Op::Forget { t, at } => s.on(t, at, |s, k| vec![s.forget(k)]),
            Op::Advance { ms } => {
                s.now += ms;
                single(vec![Res::Ok], s)
            }
            Op::Renew { r } => {
                let out = s.renew(r);
                single(vec![out], s)
            }
            Op::DurableDown(down) => {
                s.durable_down = down;
                single(vec![Res::Ok], s)
            }
            Op::LeaseDown(down) => {
                s.lease_down = down;
                single(vec![Res::Ok], s)
            }
            Op::SlowPuts(_) => single(vec![Res::Ok], s),
            Op::Settle => {
                s.lease_down = false;
                s.durable_down = false;
                s.now += TTL_MS + 1;
                single(vec![Res::Ok], s)
            }
        }
    }

    /// The tenure of tenant `t` that `at` addresses.
    pub fn key_of(&self, t: usize, at: At) -> Option<(usize, u64)> {
        match at {
            At::Newest => self.tenures.keys().filter(|k| k.0 == t).max().copied(),
            At::On(r) => self.latest[r][t].map(|e| (t, e)),
            At::Older(n) => self
                .tenures
                .keys()
                .filter(|k| k.0 == t)
                .rev()
                .nth(n)
                .copied(),
        }
    }

    /// Runs `f` on the tenure `at` addresses, or skips the op when there is none.
    fn on(
        mut self,
        t: usize,
        at: At,
        f: impl FnOnce(&mut State, (usize, u64)) -> Vec<Res>,
    ) -> Outcomes {
        let out = match self.key_of(t, at) {
            Some(k) => f(&mut self, k),
            None => vec![Res::Skipped],
        };
        vec![(out, self)]
    }

    fn tenure(&mut self, k: (usize, u64)) -> &mut Tenure {
        self.tenures.get_mut(&k).expect("a tenure the model opened")
    }

    /// Whether the tenure's holder may act now.
    pub fn holds(&self, k: (usize, u64)) -> bool {
        let t = &self.tenures[&k];
        !t.ended && self.now < t.valid_until
    }

    /// Whether the store's row of tenant `t` is live for `(owner, epoch)`.
    fn store_live(&self, t: usize, owner: usize, epoch: u64) -> bool {
        self.tenants[t].row.as_ref().is_some_and(|row| {
            !row.released && self.now < row.expires_at && row.owner == owner && row.epoch == epoch
        })
    }

    fn row_live(&self, t: usize) -> bool {
        let row = self.tenants[t].row.as_ref();
        row.is_some_and(|row| !row.released && self.now < row.expires_at)
    }

    /// `Supervisor::open`.
    fn open(&mut self, r: usize, t: usize) -> Res {
        if let Some(epoch) = self.table[r][t] {
            return Res::Epoch(epoch);
        }
        if self.lease_down {
            return Res::StoreDown;
        }
        if self.row_live(t) {
            return Res::LeaseHeld;
        }
        let now = self.now;
        let ts = &mut self.tenants[t];
        let epoch = ts.row.as_ref().map_or(0, |row| row.epoch) + 1;
        ts.row = Some(Row {
            owner: r,
            epoch,
            expires_at: now + TTL_MS,
            released: false,
        });
        self.dirs[r][t] = true;
        let head = ts.head.clone();
        if head.is_some() && self.durable_down {
            // The restore cannot read the head: the open fails and hands the lease back.
            if let Some(row) = ts.row.as_mut() {
                row.released = true;
            }
            return Res::StoreDown;
        }
        let tenure = Tenure {
            replica: r,
            status: Status::Serving,
            valid_until: now + TTL_MS - MARGIN_MS,
            ended: false,
            local: head.as_ref().map_or_else(Vec::new, |h| h.content.clone()),
            dirty: false,
            next_seq: 1,
            chain_head: head.map(|h| (h.epoch, h.seq)),
        };
        self.tenures.insert((t, epoch), tenure);
        self.table[r][t] = Some(epoch);
        self.registered[r][t] = Some(epoch);
        self.latest[r][t] = Some(epoch);
        Res::Epoch(epoch)
    }

    /// Whether a call may run on a serving tenant: the lease must hold.
    fn admission(&self, k: (usize, u64)) -> Result<(), Res> {
        match self.tenures[&k].status {
            Status::Serving => {}
            Status::Forgetting => return Err(Res::Draining),
            _ => return Err(Res::Fenced),
        }
        if self.holds(k) {
            Ok(())
        } else {
            Err(Res::Fenced)
        }
    }

    /// A run inserting event `id`.
    fn write(&mut self, k: (usize, u64), id: String) -> Res {
        if let Err(e) = self.admission(k) {
            return e;
        }
        let tenure = self.tenure(k);
        tenure.local.push(id);
        tenure.dirty = true;
        Res::Ok
    }

    /// A run reading every event id; it commits an (empty) batch like any run.
    fn read(&mut self, k: (usize, u64)) -> Res {
        if let Err(e) = self.admission(k) {
            return e;
        }
        let tenure = self.tenure(k);
        tenure.dirty = true;
        Res::Keys(tenure.local.clone())
    }

    /// Admit, one ticket run, drop the ticket.
    fn ticket(&mut self, k: (usize, u64), id: String) -> Vec<Res> {
        if let Err(e) = self.admission(k) {
            return vec![e];
        }
        vec![Res::Ok, self.write(k, id)]
    }

    /// Takes, uploads and publishes an image (the publisher); `hung`: puts never answer.
    fn publish(&mut self, k: (usize, u64), hung: bool) -> Result<(), Res> {
        if !self.holds(k) {
            return Err(Res::Fenced);
        }
        let (t, epoch) = k;
        let seq = {
            let tenure = self.tenure(k);
            tenure.next_seq += 1;
            tenure.next_seq - 1
        };
        if self.durable_down {
            return Err(Res::StoreDown);
        }
        if hung {
            return Err(Res::StoreTimeout);
        }
        self.tenants[t].objects.insert((epoch, seq));
        if self.lease_down {
            return Err(Res::StoreDown);
        }
        let replica = self.tenures[&k].replica;
        if !self.store_live(t, replica, epoch) || epoch <= self.tenants[t].floor {
            return Err(Res::Fenced);
        }
        let content = self.tenures[&k].local.clone();
        self.tenants[t].head = Some(Head {
            epoch,
            seq,
            content,
        });
        let tenure = self.tenure(k);
        tenure.chain_head = Some((epoch, seq));
        tenure.dirty = false;
        Ok(())
    }

    /// `TenantRef::snapshot`.
    fn snapshot(&mut self, k: (usize, u64), hung: bool) -> Res {
        if let Err(e) = self.admission(k) {
            return e;
        }
        if !self.tenures[&k].dirty {
            return Res::Head(self.tenures[&k].chain_head);
        }
        match self.publish(k, hung) {
            Ok(()) => Res::Head(self.tenures[&k].chain_head),
            Err(e) => e,
        }
    }

    /// Ends the tenure locally and hands its lease back (when the store still has it live).
    fn release(&mut self, k: (usize, u64)) {
        let (t, epoch) = k;
        let replica = self.tenures[&k].replica;
        self.end(k);
        if !self.lease_down
            && self.store_live(t, replica, epoch)
            && let Some(row) = self.tenants[t].row.as_mut()
        {
            row.released = true;
        }
    }

    /// The tenure never holds again and leaves the renewal chain.
    fn end(&mut self, k: (usize, u64)) {
        let (t, epoch) = k;
        let replica = self.tenures[&k].replica;
        self.tenure(k).ended = true;
        if self.registered[replica][t] == Some(epoch) {
            self.registered[replica][t] = None;
        }
    }

    /// Enters a final state and leaves the supervisor's table.
    fn finish(&mut self, k: (usize, u64), status: Status) {
        let (t, epoch) = k;
        let replica = self.tenures[&k].replica;
        self.tenure(k).status = status;
        if self.table[replica][t] == Some(epoch) {
            self.table[replica][t] = None;
        }
    }

    /// The lease was lost: nothing flushed, the local file kept.
    fn lose(&mut self, k: (usize, u64)) {
        self.end(k);
        self.finish(k, Status::Abandoned);
    }

    /// The flush of a handoff whose drain is over.
    fn flush(&mut self, k: (usize, u64), hung: bool) -> Res {
        if self.tenures[&k].dirty
            && let Err(e) = self.publish(k, hung)
        {
            if e == Res::Fenced {
                self.lose(k);
            }
            return e;
        }
        self.release(k);
        let (t, _) = k;
        let replica = self.tenures[&k].replica;
        self.dirs[replica][t] = false;
        self.finish(k, Status::Released);
        Res::Ok
    }

    /// `TenantRef::handoff` with no admitted work.
    fn handoff(&mut self, k: (usize, u64), hung: bool) -> Res {
        if let Err(e) = self.begin_drain(k) {
            return e;
        }
        self.flush(k, hung)
    }

    fn begin_drain(&self, k: (usize, u64)) -> Result<(), Res> {
        match self.tenures[&k].status {
            Status::Serving if self.holds(k) => Ok(()),
            Status::Serving => Err(Res::Fenced),
            Status::Forgetting => Err(Res::Draining),
            _ => Err(Res::Fenced),
        }
    }

    /// Admit; a ticket write; a handoff begins; a plain write, an admission and a snapshot are
    /// refused; time passes and the owner may renew; a second ticket write; the ticket goes;
    /// the handoff ends — or was settled as overtaken when the renewal found the lease lost.
    fn drained_handoff(
        &mut self,
        k: (usize, u64),
        (pause, renew): (u64, bool),
        a: String,
        c: String,
    ) -> Vec<Res> {
        if let Err(e) = self.admission(k) {
            return vec![e];
        }
        let first = self.write(k, a);
        if let Err(e) = self.begin_drain(k) {
            return vec![Res::Ok, first, e];
        }
        let mut out = vec![Res::Ok, first, Res::Draining, Res::Draining, Res::Draining];
        self.now += pause;
        if renew {
            let replica = self.tenures[&k].replica;
            out.push(self.renew(replica));
        }
        let lost = self.tenures[&k].status != Status::Serving;
        out.push(if !lost && self.holds(k) {
            let tenure = self.tenure(k);
            tenure.local.push(c);
            tenure.dirty = true;
            Res::Ok
        } else {
            Res::Fenced
        });
        out.push(if lost {
            Res::Draining
        } else {
            self.flush(k, false)
        });
        out
    }

    /// A handoff and a write sent at once: the write reaches the tenant before the drain
    /// begins, while it drains or flushes, or after the handoff is over.
    fn race_handoff_write(&self, k: (usize, u64), id: String) -> Outcomes {
        let mut before = self.clone();
        let w = before.write(k, id.clone());
        let h = before.handoff(k, false);
        let mut outcomes = vec![(vec![w, h], before)];
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
    /// lease is being released (refused), or after the handoff is over.
    fn race_handoff_forget(&self, k: (usize, u64)) -> Outcomes {
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
        } else {
            let h = first.handoff(k, false);
            outcomes.push((vec![f, h], first));
        }
        if self.begin_drain(k).is_ok() {
            let mut during = self.clone();
            let f = during.forget(k);
            outcomes.push((vec![f, Res::Draining], during));
            if self.tenures[&k].dirty {
                let mut uploading = self.clone();
                let _ = uploading.publish(k, false);
                let f = uploading.forget(k);
                outcomes.push((vec![f, Res::Draining], uploading));
            }
            let mut after = self.clone();
            let h = after.handoff(k, false);
            if h == Res::Ok {
                outcomes.push((vec![Res::Draining, Res::Ok], after.clone()));
            }
            let f = after.forget(k);
            outcomes.push((vec![f, h], after));
        }
        outcomes
    }

    /// `TenantRef::abandon`.
    fn abandon(&mut self, k: (usize, u64)) -> Res {
        if self.tenures[&k].status == Status::Serving {
            self.release(k);
            self.finish(k, Status::Abandoned);
        }
        Res::Ok
    }

    /// `TenantRef::forget`.
    fn forget(&mut self, k: (usize, u64)) -> Res {
        let (t, epoch) = k;
        match self.tenures[&k].status {
            Status::Serving | Status::Forgetting => {}
            _ => return Res::Fenced,
        }
        let replica = self.tenures[&k].replica;
        // The tenant leaves the table as the forget begins; the ledger closes.
        self.tenure(k).status = Status::Forgetting;
        if self.table[replica][t] == Some(epoch) {
            self.table[replica][t] = None;
        }
        if self.lease_down {
            return Res::StoreDown;
        }
        if !self.store_live(t, replica, epoch) {
            return Res::Fenced;
        }
        let ts = &mut self.tenants[t];
        ts.floor = ts.floor.max(epoch);
        ts.head = None;
        let floor = ts.floor;
        let dead: Vec<_> = ts
            .objects
            .iter()
            .filter(|o| o.0 <= floor)
            .cloned()
            .collect();
        for o in dead {
            ts.objects.remove(&o);
            ts.leftovers.insert(o);
        }
        if self.durable_down {
            return Res::StoreDown;
        }
        ts.leftovers.clear();
        self.dirs[replica][t] = false;
        self.release(k);
        self.finish(k, Status::Forgotten);
        Res::Ok
    }

    /// `Supervisor::renew_now` on replica `r`.
    fn renew(&mut self, r: usize) -> Res {
        let batch: Vec<(usize, u64)> = (0..TENANTS)
            .filter_map(|t| self.registered[r][t].map(|e| (t, e)))
            .collect();
        if batch.is_empty() {
            return Res::Ok;
        }
        if self.lease_down {
            return Res::StoreDown;
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
}
