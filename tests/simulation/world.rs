//! The system under test: replicas sharing one SQLite lease store and one durable directory,
//! behind the test kit's fault-injecting wrappers, every clock manual. [`World::exec`] carries
//! out one op and reduces what came back to [`Res`]; [`World::observe`] reads what the stores,
//! the local directories and the tenants say, for the checker to hold against the model.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use leasehold::durable::dir::DirStore;
use leasehold::lease::LeaseRecord;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::testkit::{FaultyLeaseStore, FaultyStore};
use leasehold::{Clock, Error, ManualClock, OrgId, ReplicaId, TenantId, derive_tenant_id};
use leasehold_actors::{
    Breakage, Durability, Event, EventLog, RuntimeConfig, Supervisor, TenantRef, TenantStatus,
};
use tempfile::TempDir;

use crate::model::{MARGIN_MS, Mode, REPLICAS, Res, TENANTS, TTL_MS};
use crate::ops::{At, Op};

/// The lease store's clock at model time 0.
pub const STORE_BASE_MS: u64 = 1_000_000;
/// Every replica's clock at model time 0.
const REPLICA_BASE_MS: u64 = 5_000;
/// `store_deadline`: a hung put gives up after this long. Every other store call takes a few
/// milliseconds on tmpfs, so the margin is wide.
pub const STORE_DEADLINE: Duration = Duration::from_millis(250);
/// How long slow puts wait: a hundredth of the deadline.
const SLOW_PUT: Duration = Duration::from_millis(2);
/// How long any one call may take before the case fails as "did not settle".
const SETTLE: Duration = Duration::from_secs(10);
/// `snapshot_every` in the cases with periodic snapshots on (real time: actix's intervals).
pub const SNAPSHOT_EVERY: Duration = Duration::from_millis(5);
/// `drain_timeout` (real time): a drain waits this long for admitted work.
pub const DRAIN_TIMEOUT: Duration = Duration::from_millis(1_000);

mod calls;
mod faults;
pub(crate) use calls::{
    count, insert, read, settle, settle_raw, snapshot, ticket_insert, ticket_work, unit,
    wait_for_drain,
};
pub use calls::{key_of, res_of};
pub use faults::CRASH_BOUND;

/// The name of replica `r`.
pub fn replica_name(r: usize) -> String {
    format!("sim-{r}")
}

/// Tenant `t`: each in an org of its own, `acme` and `acme2` (deletes take whole segments).
pub fn tenant_ids(t: usize) -> (OrgId, TenantId) {
    let org = if t == 0 { "acme" } else { "acme2" };
    let tenant = derive_tenant_id(&[7u8; 32], "https://idp.example", &format!("user-{t}"));
    (OrgId::new(org).unwrap(), tenant.unwrap())
}

/// What the checker compares with the model after each op.
#[derive(Debug)]
pub struct Seen {
    /// Each tenant's lease record, read behind the faults.
    pub rows: Vec<Option<LeaseRecord>>,
    /// Each tenant's objects in the durable store, read behind the faults; last, any object
    /// that belongs to no tenant (there should be none).
    pub listings: Vec<Vec<String>>,
    /// `[replica][tenant]`: the tenant's local directory exists.
    pub dirs: Vec<Vec<bool>>,
    /// Every tenure's status, by `(tenant, epoch)`.
    pub statuses: BTreeMap<(usize, u64), TenantStatus>,
}

/// One simulated fleet.
pub struct World {
    /// Holds every file (on tmpfs when there is one).
    dir: TempDir,
    /// The lease store's clock.
    store_clock: ManualClock,
    /// Each replica's clock.
    clocks: Vec<ManualClock>,
    /// Each replica's clock trap (`Op::LapseDuringCommit`).
    traps: Vec<faults::Trap>,
    /// The shared lease store.
    leases: FaultyLeaseStore,
    /// The shared durable store.
    durable: FaultyStore,
    /// Replicas `0..REPLICAS` and the final one.
    sups: Vec<Supervisor>,
    /// Their state roots.
    roots: Vec<PathBuf>,
    /// The final replica's events.
    final_log: EventLog,
    /// Every tenure's handle, by `(tenant, epoch)`.
    handles: HashMap<(usize, u64), TenantRef>,
    /// The replica that opened each tenure.
    owners: HashMap<(usize, u64), usize>,
    /// `[replica][tenant]`: the epoch of the last tenure opened there.
    latest: Vec<Vec<Option<u64>>>,
    /// Tenures seen in a final state, which they never leave: not asked again.
    finished: BTreeMap<(usize, u64), TenantStatus>,
    /// How many crashes so far (names the lock files crashed supervisors keep).
    crashes: usize,
    /// The deliberate bugs every replica runs with.
    breakage: Breakage,
    /// Periodic snapshots are on.
    periodic: bool,
    /// How every replica keeps acknowledged writes.
    mode: Mode,
}

fn temp_dir() -> TempDir {
    let shm = std::path::Path::new("/dev/shm");
    let builder = tempfile::Builder::new().prefix("leasehold-sim-").clone();
    match shm.is_dir() {
        true => builder.tempdir_in(shm).or_else(|_| builder.tempdir()),
        false => builder.tempdir(),
    }
    .expect("a temporary directory")
}

impl World {
    /// A fleet of `REPLICAS + 1` replicas, each with `breakage` switched on. Inside an actix
    /// system.
    pub fn new(breakage: Breakage, periodic: bool, mode: Mode) -> Self {
        let dir = temp_dir();
        let store_clock = ManualClock::new(STORE_BASE_MS);
        let sqlite = SqliteLeaseStore::open_with(
            &dir.path().join("leases.db"),
            Arc::new(store_clock.clone()),
            "boot-1".into(),
        )
        .unwrap();
        let leases = FaultyLeaseStore::new(Arc::new(sqlite));
        let durable = FaultyStore::new(Arc::new(
            DirStore::open(&dir.path().join("durable")).unwrap(),
        ));
        let final_log = EventLog::new();
        let mut world = Self {
            dir,
            store_clock,
            clocks: Vec::new(),
            traps: Vec::new(),
            leases,
            durable,
            sups: Vec::new(),
            roots: Vec::new(),
            final_log,
            handles: HashMap::new(),
            owners: HashMap::new(),
            latest: vec![vec![None; TENANTS]; REPLICAS + 1],
            finished: BTreeMap::new(),
            crashes: 0,
            breakage,
            periodic,
            mode,
        };
        for r in 0..=REPLICAS {
            world.start_replica(r);
        }
        world
    }

    fn start_replica(&mut self, r: usize) {
        let root = self.dir.path().join("nodes").join(replica_name(r));
        let clock = ManualClock::new(REPLICA_BASE_MS + self.now());
        self.traps.push(faults::Trap::default());
        self.sups.push(self.supervisor(r, &root, &clock));
        self.clocks.push(clock);
        self.roots.push(root);
    }

    /// A supervisor for replica `r` on `root`, reading `clock`.
    fn supervisor(&self, r: usize, root: &std::path::Path, clock: &ManualClock) -> Supervisor {
        self.try_supervisor(r, root, clock).unwrap()
    }

    /// [`World::supervisor`], with the start's refusal (a root still locked).
    fn try_supervisor(
        &self,
        r: usize,
        root: &std::path::Path,
        clock: &ManualClock,
    ) -> Result<Supervisor, leasehold::Error> {
        let mut cfg = RuntimeConfig::new(
            ReplicaId::new(replica_name(r)).unwrap(),
            root,
            self.leases.shared(),
            self.durable.shared(),
        );
        cfg.clock = Arc::new(faults::TrapClock {
            base: clock.clone(),
            trap: self.traps[r].clone(),
        });
        cfg.ttl = Duration::from_millis(TTL_MS);
        cfg.margin = Duration::from_millis(MARGIN_MS);
        cfg.renew_every = None;
        cfg.snapshot_every = self.periodic.then_some(SNAPSHOT_EVERY);
        cfg.durability = match self.mode {
            Mode::Shipped => Durability::Shipped,
            Mode::Images => Durability::Images,
        };
        cfg.drain_timeout = DRAIN_TIMEOUT;
        cfg.store_deadline = STORE_DEADLINE;
        // One arbiter thread per replica: tenants still live off the supervisor's thread, and a
        // case starts in half the time.
        cfg.arbiters = 1;
        cfg.breakage = self.breakage;
        if r == REPLICAS {
            cfg.observer = Some(Arc::new(self.final_log.clone()));
        }
        Supervisor::start(cfg)
    }

    /// Model time.
    fn now(&self) -> u64 {
        self.store_clock.now_ms() - STORE_BASE_MS
    }

    /// The handle of the tenure of tenant `t` that `at` addresses, as the model picks it.
    fn handle(&self, t: usize, at: At) -> Option<TenantRef> {
        let epoch = match at {
            At::Newest => self
                .handles
                .keys()
                .filter(|k| k.0 == t)
                .map(|k| k.1)
                .max()?,
            At::On(r) => self.latest[r][t]?,
            At::Older(n) => {
                let mut epochs: Vec<u64> = self
                    .handles
                    .keys()
                    .filter(|k| k.0 == t)
                    .map(|k| k.1)
                    .collect();
                epochs.sort_unstable();
                *epochs.iter().rev().nth(n)?
            }
        };
        self.handles.get(&(t, epoch)).cloned()
    }

    /// Carries out `op`, its writes inserting `ids`; one [`Res`] per call, as the model's.
    pub async fn exec(&mut self, op: &Op, ids: &[String]) -> Vec<Res> {
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
                    self.drained_handoff(&h, (pause, renew), id(0), id(1)).await
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
            Op::Advance { ms } => {
                self.advance(ms);
                vec![Res::Ok]
            }
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
                self.durable.disarm_late_puts();
                self.land().await;
                self.advance(TTL_MS + 1);
                vec![Res::Ok]
            }
            _ => self.exec_fault(op, ids).await,
        }
    }

    /// Time passes on every clock at once.
    pub(crate) fn advance(&self, ms: u64) {
        let by = Duration::from_millis(ms);
        self.store_clock.advance(by);
        for clock in &self.clocks {
            clock.advance(by);
        }
    }

    async fn open(&mut self, r: usize, t: usize) -> Res {
        let (org, tenant) = tenant_ids(t);
        let opened = settle_raw(self.sups[r].open(&org, &tenant)).await;
        self.opened(r, t, opened)
    }

    /// Records the tenure an open of `t` on `r` returned, if any.
    fn opened(&mut self, r: usize, t: usize, opened: Result<Result<TenantRef, Error>, Res>) -> Res {
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
        if self.periodic && out.last() == Some(&Res::Ok) {
            out.push(Res::Covered(self.covered(h.key(), &c_id).await));
        }
        drop(ticket);
        out.push(settle(&mut handing_off).await);
        out
    }

    /// Reads what the stores, the directories and the tenants say now (all at once).
    pub async fn observe(&mut self) -> Seen {
        let (leases, durable) = (&self.leases, &self.durable);
        let rows = join_all(
            (0..TENANTS).map(|t| async move { leases.inner().read(&key_of(t)).await.unwrap() }),
        );
        // One walk of the whole store: each tenant's objects, and nothing that is no tenant's.
        let listings = async move {
            let all = durable.inner().list("").await.unwrap();
            let mut by_tenant = vec![Vec::new(); TENANTS + 1];
            for key in all {
                let t = (0..TENANTS).find(|&t| key.starts_with(&key_of(t).prefix()));
                by_tenant[t.unwrap_or(TENANTS)].push(key);
            }
            by_tenant
        };
        // A tenure that ended on a failed segment hands its lease back after its caller heard
        // why: the statuses settle first (bounded), then the stores are read.
        let settle_until = std::time::Instant::now() + Duration::from_secs(2);
        let statuses = loop {
            let finished = &self.finished;
            let statuses: Vec<_> = join_all(
                self.handles
                    .iter()
                    .filter(|(k, _)| !finished.contains_key(k))
                    .map(|(k, h)| async move { (*k, h.status().await) }),
            )
            .await;
            let settling = statuses.iter().any(|(_, s)| *s == TenantStatus::Abandoning);
            if !settling || std::time::Instant::now() > settle_until {
                break statuses;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let (rows, listings) = futures::join!(rows, listings);
        let dirs = self
            .roots
            .iter()
            .map(|root| {
                (0..TENANTS)
                    .map(|t| {
                        let (org, tenant) = tenant_ids(t);
                        leasehold::ids::tenant_root(root, &org, &tenant).exists()
                    })
                    .collect()
            })
            .collect();
        for (k, status) in &statuses {
            if status.is_final() {
                self.finished.insert(*k, *status);
            }
        }
        let mut statuses: BTreeMap<_, _> = statuses.into_iter().collect();
        statuses.extend(self.finished.iter().map(|(k, s)| (*k, *s)));
        Seen {
            rows,
            listings,
            dirs,
            statuses,
        }
    }

    /// Waits until the final replica reports the sweep beside its open of tenant `t`; `true`
    /// if it swept, `false` if the sweep failed or never came.
    pub async fn final_sweep(&self, t: usize) -> bool {
        let key = key_of(t).to_string();
        let until = Instant::now() + SETTLE;
        while Instant::now() < until {
            let _ = self.sups[REPLICAS]
                .events_delivered(Duration::from_secs(1))
                .await;
            for event in self.final_log.events() {
                match event {
                    Event::Swept { key: k, .. } if k == key => return true,
                    Event::SweepFailed { key: k, .. } if k == key => return false,
                    _ => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        false
    }
}
