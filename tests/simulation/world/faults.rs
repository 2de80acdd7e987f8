//! The world's side of the fault classes added for the runtime's hardening (docs/testing.md,
//! "fault classes"): late landings, close and crash of a replica with a restart on the same
//! state root, an open in flight when close begins, a lease lapsing before a batch commits or
//! while it commits (a replica clock that passes the TTL at a chosen read), a run blocking past
//! `drain_timeout`, a forget behind a put that hung past its deadline, and the crash-bound
//! check of periodic snapshots, judged from the stores alone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use leasehold::ledger::{LedgerError, NewEvent};
use leasehold::testkit::{LatePuts, LeaseOp};
use leasehold::{Clock, LeaseKey, ManualClock};
use leasehold_actors::{TenantRef, TenantStatus};
use tokio::sync::oneshot;

use super::{
    DRAIN_TIMEOUT, SETTLE, SNAPSHOT_EVERY, STORE_DEADLINE, World, count, res_of, settle,
    settle_raw, snapshot, tenant_ids, unit,
};
use crate::model::{Res, TTL_MS};
use crate::ops::{Late, Op};

/// How long a blocking run holds its actor's thread: past `drain_timeout`.
pub const BLOCK: Duration = Duration::from_millis(DRAIN_TIMEOUT.as_millis() as u64 + 100);

/// The crash bound as the checker applies it: a periodic snapshot is due `snapshot_every`
/// after a write and takes one publish (`store_deadline` at most); the rest is slack for a
/// loaded machine. Well short of `drain_timeout`, so that a drain that publishes nothing is
/// caught before it gives up and serving resumes.
pub const CRASH_BOUND: Duration = Duration::from_millis(
    4 * SNAPSHOT_EVERY.as_millis() as u64 + STORE_DEADLINE.as_millis() as u64 + 300,
);

/// A handoff must answer within `drain_timeout` of its call, plus this much for the flush or
/// the refusal.
const HANDOFF_SLACK: Duration = Duration::from_millis(1_000);

impl World {
    /// Carries out the ops of the fault classes.
    pub(super) async fn exec_fault(&mut self, op: &Op, ids: &[String]) -> Vec<Res> {
        match *op {
            Op::Late(late) => {
                self.arm(late);
                vec![Res::Ok]
            }
            Op::Land => {
                self.land().await;
                vec![Res::Ok]
            }
            Op::LandBeforeRelease => {
                let (leases, durable) = (self.leases.clone(), self.durable.clone());
                self.leases
                    .before_next(LeaseOp::Release, move || async move {
                        leases.land_held().await;
                        let _ = durable.land_late_puts().await;
                    });
                vec![Res::Ok]
            }
            Op::OpenDuringClose { r, t } => self.open_during_close(r, t).await,
            Op::Close { r } => {
                let closed = settle(count(async {
                    self.sups[r].close().await.map(|unflushed| unflushed.len())
                }))
                .await;
                self.restart(r).await;
                vec![closed]
            }
            Op::Crash { r } => {
                self.crash(r).await;
                vec![Res::Ok]
            }
            Op::LapseInCommit { t, at } => match self.handle(t, at) {
                Some(h) => vec![self.lapse_in_commit(&h, ids[0].clone()).await],
                None => vec![Res::Skipped],
            },
            Op::LapseDuringCommit { t, at } => match self.handle(t, at) {
                Some(h) => vec![self.lapse_during_commit(t, &h, ids[0].clone()).await],
                None => vec![Res::Skipped],
            },
            Op::ZombieShip { t, at } => match self.handle(t, at) {
                Some(h) => self.zombie_ship(t, &h, ids[0].clone()).await,
                None => vec![Res::Skipped; 3],
            },
            Op::ForgetBehindHungPut { t, at } => match self.handle(t, at) {
                Some(h) => self.forget_behind_hung_put(&h).await,
                None => vec![Res::Skipped, Res::Skipped],
            },
            Op::BlockingRun { t, at } => match self.handle(t, at) {
                Some(h) => blocking_run(&h, ids[0].clone()).await,
                None => vec![Res::Skipped, Res::Skipped],
            },
            Op::ForgetDuringUpload { t, at } => match self.handle(t, at) {
                Some(h) => self.forget_during_upload(&h).await,
                None => vec![Res::Skipped, Res::Skipped],
            },
            Op::Periodic | Op::Images | Op::Log { .. } | Op::Passivation { .. } => vec![Res::Ok],
            _ => unreachable!("not a fault op: {op:?}"),
        }
    }

    /// The next call of `late` answers a timeout and lands later.
    fn arm(&self, late: Late) {
        let op = match late {
            Late::Acquire => LeaseOp::Acquire,
            Late::Renew => LeaseOp::RenewMany,
            Late::Release => LeaseOp::Release,
            Late::PublishHead => LeaseOp::PublishHead,
            Late::MarkForgotten => LeaseOp::MarkForgotten,
            Late::MoveTip => LeaseOp::MoveTip,
            Late::Put => {
                self.durable
                    .late_puts(LatePuts::next(|key| key.ends_with(".db")).untracked());
                return;
            }
            Late::SegmentPut => {
                self.durable
                    .late_puts(LatePuts::next(|key| key.ends_with(".seg")).untracked());
                return;
            }
        };
        self.leases.land_late(op);
    }

    /// Every call kept back lands: lease calls, then puts.
    pub(super) async fn land(&self) {
        self.leases.land_held().await;
        self.durable
            .land_late_puts()
            .await
            .expect("the directory store takes a late put");
    }

    /// A new supervisor on replica `r`'s state root and clock, in place of the old one.
    async fn restart(&mut self, r: usize) {
        let (root, clock) = (self.roots[r].clone(), self.clocks[r].clone());
        // The old supervisor releases the root's lock once it has stopped, after its close and
        // the drop of its last handle (docs/guarantees.md, assumption 5).
        let stopped = self.sups.remove(r);
        drop(stopped);
        let until = std::time::Instant::now() + Duration::from_secs(10);
        let started = loop {
            match self.try_supervisor(r, &root, &clock) {
                Ok(sup) => break sup,
                Err(e) if e.code() == "LEASEHOLD_STATE_ROOT_LOCKED" => {
                    assert!(std::time::Instant::now() < until, "replica {r}: {e}");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                Err(e) => panic!("replica {r} did not restart: {e}"),
            }
        };
        self.sups.insert(r, started);
    }

    /// Replica `r` crashes: the handles of its tenures that have not ended are never used
    /// again (their actors are left as a dead process's would be: never heard from); it
    /// restarts.
    async fn crash(&mut self, r: usize) {
        let gone: Vec<(usize, u64)> = self
            .owners
            .iter()
            .filter(|(k, owner)| **owner == r && !self.finished.contains_key(k))
            .map(|(k, _)| *k)
            .collect();
        for k in &gone {
            self.handles.remove(k);
            self.owners.remove(k);
        }
        // A dead process's lock dies with it. The crashed supervisor's actors live on here
        // (never addressed again), so its lock file is moved aside, as the kernel would drop it.
        let lock = self.roots[r].join(leasehold::paths::LOCK_FILE);
        let _ = std::fs::rename(
            &lock,
            lock.with_extension(format!("crashed-{}", self.crashes)),
        );
        self.crashes += 1;
        self.restart(r).await;
    }

    /// An open of `t` on `r` held at its acquire while `close()` begins on `r`; then the
    /// acquire goes on; outcomes `[open, close]`; then `r` restarts.
    async fn open_during_close(&mut self, r: usize, t: usize) -> Vec<Res> {
        let (entered_tx, entered) = oneshot::channel::<()>();
        let (go, go_rx) = oneshot::channel::<()>();
        self.leases
            .before_next(LeaseOp::Acquire, move || async move {
                let _ = entered_tx.send(());
                let _ = go_rx.await;
            });
        let sup = self.sups[r].clone();
        let (org, tenant) = tenant_ids(t);
        let mut opening = Box::pin(settle_raw(sup.open(&org, &tenant)));
        // The open runs until its acquire is held (or it ends without one).
        let early = tokio::select! {
            _ = entered => None,
            res = &mut opening => Some(res),
        };
        if let Some(res) = early {
            let opened = self.opened(r, t, res);
            if matches!(opened, Res::Epoch(_)) {
                self.note_open(r, t).await;
            }
            let closed = settle(count(async { sup.close().await.map(|u| u.len()) })).await;
            drop(sup);
            self.restart(r).await;
            return vec![opened, closed];
        }
        let closing = sup.close();
        // The close is on its way; the acquire goes on once the supervisor has taken it.
        let closing = tokio::spawn(async move { closing.await.map(|u| u.len()) });
        tokio::time::sleep(Duration::from_millis(1)).await;
        let _ = go.send(());
        let opened = opening.await;
        let opened = self.opened(r, t, opened);
        if matches!(opened, Res::Epoch(_)) {
            self.note_open(r, t).await;
        }
        let closed = match tokio::time::timeout(SETTLE, closing).await {
            Ok(Ok(Ok(n))) => Res::Count(n),
            Ok(Ok(Err(e))) => res_of(&e),
            _ => Res::Other("the close did not settle".into()),
        };
        drop(sup);
        self.restart(r).await;
        vec![opened, closed]
    }

    /// A snapshot while every put hangs, then a forget; the hung put is let go 100 ms after
    /// the forget's `mark_forgotten` returned (well within `drain_timeout`, which bounds how
    /// long a forget waits for its replica's puts). A forget that sweeps without waiting finds
    /// nothing yet, and the put lands after it. Outcomes `[snapshot, forget]`.
    async fn forget_behind_hung_put(&self, h: &TenantRef) -> Vec<Res> {
        self.durable.hang_puts(true);
        let snap = settle(snapshot(h)).await;
        let active = Arc::new(AtomicBool::new(true));
        let (armed, durable) = (active.clone(), self.durable.clone());
        self.leases
            .after_next(LeaseOp::MarkForgotten, move || async move {
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    // A hook left over from an op whose forget never raised the floor lets go
                    // of nothing.
                    if armed.load(Ordering::SeqCst) {
                        durable.hang_puts(false);
                    }
                });
            });
        let forgot = settle(unit(h.forget())).await;
        active.store(false, Ordering::SeqCst);
        self.durable.hang_puts(false);
        vec![snap, forgot]
    }

    /// A write on a `Shipped` tenure whose segment put, once reached, waits while every clock
    /// moves past the TTL and a successor on the next replica opens the tenant and forgets it;
    /// the tip's first move then times out (a late landing), its retry refused. Outcomes
    /// `[write, open, forget]`.
    async fn zombie_ship(&mut self, t: usize, h: &TenantRef, id: String) -> Vec<Res> {
        let owner = self.owners[&(t, h.epoch())];
        if self.case.modes[owner] != crate::model::Mode::Shipped {
            return vec![Res::Skipped; 3];
        }
        let next = (owner + 1) % crate::model::REPLICAS;
        self.leases.land_late(LeaseOp::MoveTip);
        let active = Arc::new(AtomicBool::new(true));
        let (sent, heard) = oneshot::channel();
        // Taken back when the hook never fires: a supervisor kept by a hook would never stop,
        // and its replica could not restart on its root.
        let successor = Arc::new(Mutex::new(Some(self.sups[next].clone())));
        let (sup, armed) = (successor.clone(), active.clone());
        let (clocks, store_clock) = (self.clocks.clone(), self.store_clock.clone());
        let hook = move || -> BoxFuture<'static, ()> {
            Box::pin(async move {
                let sup = sup.lock().unwrap().take();
                let (true, Some(sup)) = (armed.swap(false, Ordering::SeqCst), sup) else {
                    return;
                };
                let by = Duration::from_millis(TTL_MS + 1);
                store_clock.advance(by);
                for clock in &clocks {
                    clock.advance(by);
                }
                let (org, tenant) = tenant_ids(t);
                let opened = settle_raw(sup.open(&org, &tenant)).await;
                let forgot = match &opened {
                    Ok(Ok(successor)) => settle(unit(successor.forget())).await,
                    _ => Res::Skipped,
                };
                let _ = sent.send((opened, forgot));
            })
        };
        let live = active.clone();
        let matching = move |key: &str| key.ends_with(".seg") && live.load(Ordering::SeqCst);
        self.durable
            .before_next_put_matching(matching, Box::new(hook));
        let written = settle(super::insert(h, id)).await;
        if active.swap(false, Ordering::SeqCst) {
            // The write never reached its put (and the hook never matches again).
            successor.lock().unwrap().take();
            return vec![written, Res::Skipped, Res::Skipped];
        }
        match heard.await {
            Ok((opened, forgot)) => {
                let opened = self.opened(next, t, opened);
                if matches!(opened, Res::Epoch(_)) {
                    self.note_open(next, t).await;
                }
                vec![written, opened, forgot]
            }
            Err(_) => vec![written, Res::Other("the successor never answered".into())],
        }
    }

    /// A snapshot whose image put, once reached, sends a forget and waits until the tenant
    /// says it is forgetting before it goes on; outcomes `[snapshot, forget]`. A snapshot that
    /// uploads nothing is followed by the forget.
    async fn forget_during_upload(&self, h: &TenantRef) -> Vec<Res> {
        let active = Arc::new(AtomicBool::new(true));
        let (sent, forgot) = oneshot::channel::<Res>();
        let (tenant, armed) = (h.clone(), active.clone());
        let hook = move || -> BoxFuture<'static, ()> {
            Box::pin(async move {
                if !armed.swap(false, Ordering::SeqCst) {
                    return;
                }
                let forgetting = tenant.forget();
                tokio::spawn(async move {
                    let _ = sent.send(settle(unit(forgetting)).await);
                });
                let until = Instant::now() + SETTLE;
                while tenant.status().await == TenantStatus::Serving && Instant::now() < until {
                    tokio::time::sleep(Duration::from_micros(200)).await;
                }
            })
        };
        // Once the op is over, an unfired hook matches no put again.
        let live = active.clone();
        let matching = move |key: &str| key.ends_with(".db") && live.load(Ordering::SeqCst);
        self.durable
            .before_next_put_matching(matching, Box::new(hook));
        let snap = settle(snapshot(h)).await;
        if active.swap(false, Ordering::SeqCst) {
            // Nothing was uploaded: the forget follows the snapshot.
            return vec![snap, settle(unit(h.forget())).await];
        }
        let forgot = match tokio::time::timeout(SETTLE, forgot).await {
            Ok(Ok(res)) => res,
            _ => Res::Other("the forget did not settle".into()),
        };
        vec![snap, forgot]
    }

    /// A run that inserts `id` and sets its replica's clock to pass the TTL at the second read
    /// from then on: the first is the check before COMMIT, the second the check after it. The
    /// other clocks follow once the run has answered. A run refused at admission never runs its
    /// closure, so every clock moves after it.
    async fn lapse_during_commit(&self, t: usize, h: &TenantRef, id: String) -> Res {
        let r = self.owners[&(t, h.epoch())];
        let trap = self.traps[r].clone();
        let armed = trap.clone();
        let ran = Arc::new(AtomicBool::new(false));
        let ran_inside = ran.clone();
        let run = h.run(move |l| {
            ran_inside.store(true, Ordering::SeqCst);
            l.insert_event(&NewEvent::new("sim", id))?
                .ok_or_else(|| LedgerError::Host("a duplicate event id".into()))?;
            *armed.lock().unwrap() = Some(1);
            Ok(Res::Ok)
        });
        let outcome = settle(run).await;
        // Still armed: the runtime read its clock fewer than twice after the run; the model
        // then sees the outcome it did not expect.
        let sprung = trap.lock().unwrap().take().is_none();
        let by = Duration::from_millis(TTL_MS + 1);
        self.store_clock.advance(by);
        for (i, clock) in self.clocks.iter().enumerate() {
            if i != r || !(ran.load(Ordering::SeqCst) && sprung) {
                clock.advance(by);
            }
        }
        outcome
    }

    /// A run that inserts `id`, then (inside its transaction) moves every clock past the TTL;
    /// a run refused at admission never runs its closure, so time moves after it.
    async fn lapse_in_commit(&self, h: &TenantRef, id: String) -> Res {
        let clocks: Vec<_> = self.clocks.clone();
        let store_clock = self.store_clock.clone();
        let by = Duration::from_millis(TTL_MS + 1);
        let ran = Arc::new(AtomicBool::new(false));
        let ran_inside = ran.clone();
        let run = h.run(move |l| {
            ran_inside.store(true, Ordering::SeqCst);
            l.insert_event(&NewEvent::new("sim", id))?
                .ok_or_else(|| LedgerError::Host("a duplicate event id".into()))?;
            store_clock.advance(by);
            for clock in &clocks {
                clock.advance(by);
            }
            Ok(Res::Ok)
        });
        let outcome = settle(run).await;
        if !ran.load(Ordering::SeqCst) {
            self.advance(TTL_MS + 1);
        }
        outcome
    }

    /// Whether the head image of `key` holds event `id`, polled until it does or the crash
    /// bound passes. Judged from the stores alone: the lease store's head, the image's bytes.
    pub(super) async fn covered(&self, key: &LeaseKey, id: &str) -> bool {
        let until = Instant::now() + CRASH_BOUND;
        loop {
            if self.head_holds(key, id).await {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    async fn head_holds(&self, key: &LeaseKey, id: &str) -> bool {
        let Ok(Some(record)) = self.leases.inner().read(key).await else {
            return false;
        };
        let Some(head) = record.head else {
            return false;
        };
        let object = leasehold::layout::image_key(key, head.epoch, head.seq);
        let Ok(Some(bytes)) = self.durable.inner().get(&object).await else {
            return false;
        };
        let path = self
            .dir
            .path()
            .join(format!("probe-{}.db", std::process::id()));
        let found = (|| -> Option<bool> {
            std::fs::write(&path, &bytes).ok()?;
            let db = rusqlite::Connection::open(&path).ok()?;
            let hits: i64 = db
                .query_row(
                    "SELECT count(*) FROM events WHERE idem_key = ?1",
                    [id],
                    |row| row.get(0),
                )
                .ok()?;
            Some(hits > 0)
        })();
        let _ = std::fs::remove_file(&path);
        found.unwrap_or(false)
    }
}

/// A run that blocks its actor's thread for [`BLOCK`], then a handoff sent right after it:
/// outcomes `[run, handoff]`; a handoff that answers later than `drain_timeout` and the
/// slack after its call is reported as such.
async fn blocking_run(h: &TenantRef, id: String) -> Vec<Res> {
    let run = h.run(move |l| {
        std::thread::sleep(BLOCK);
        l.insert_event(&NewEvent::new("sim", id))?
            .ok_or_else(|| LedgerError::Host("a duplicate event id".into()))?;
        Ok(Res::Ok)
    });
    let started = Instant::now();
    let handing_off = async {
        let outcome = settle(unit(h.handoff())).await;
        let took = started.elapsed();
        if took > DRAIN_TIMEOUT + HANDOFF_SLACK {
            return Res::Other(format!(
                "the handoff answered {took:?} after its call (drain_timeout {DRAIN_TIMEOUT:?})"
            ));
        }
        outcome
    };
    let (w, h) = futures::join!(settle(run), handing_off);
    vec![w, h]
}

/// Arms a replica's [`TrapClock`]: the number of reads it still answers before it passes the
/// TTL (`None`: never).
pub(crate) type Trap = Arc<Mutex<Option<u32>>>;

/// A replica's clock: its [`ManualClock`], which moves by `TTL + 1` ms at the read its
/// [`Trap`] names (`Op::LapseDuringCommit`).
#[derive(Debug)]
pub(crate) struct TrapClock {
    /// The replica's clock, shared with the world.
    pub(crate) base: ManualClock,
    /// When to jump.
    pub(crate) trap: Trap,
}

impl Clock for TrapClock {
    fn now_ms(&self) -> u64 {
        let mut trap = self.trap.lock().unwrap();
        match trap.as_mut() {
            Some(0) => {
                *trap = None;
                self.base.advance(Duration::from_millis(TTL_MS + 1));
            }
            Some(left) => *left -= 1,
            None => {}
        }
        self.base.now_ms()
    }
}
