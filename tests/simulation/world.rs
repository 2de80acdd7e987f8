//! The system under test: replicas sharing one SQLite lease store and one durable directory,
//! behind the test kit's fault-injecting wrappers, every clock manual. [`World::exec`] carries
//! out one op and reduces what came back to [`Res`]; [`World::observe`] reads what the stores,
//! the local directories and the tenants say, for the checker to hold against the model.
//!
//! - `world.rs` — the fleet: stores, clocks, supervisors and their configuration, the handles.
//! - `world/exec.rs` — carrying out the everyday ops.
//! - `world/faults.rs` — carrying out the fault classes (late landings, close, crash, lapses…).
//! - `world/calls.rs` — the calls into the runtime, each reduced to a [`Res`].
//! - `world/observe.rs` — reading what the stores, the directories and the tenants say.
//! - `world/passivation.rs` — time passing with idle checks, and handles that re-resolved.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leasehold::durable::dir::DirStore;
use leasehold::lease::LeaseRecord;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::testkit::{FaultyLeaseStore, FaultyStore, Pace};
use leasehold::{Clock, ManualClock, OrgId, ReplicaId, TenantId, derive_tenant_id};
use leasehold_actors::{
    Breakage, Compaction, Durability, EventLog, RuntimeConfig, Supervisor, TenantRef, TenantStatus,
};
use tempfile::TempDir;

use crate::model::{
    COMPACT_SEGMENTS, MARGIN_MS, Mode, PASSIVATE_AFTER_MS, REPLICAS, TENANTS, TTL_MS,
};
use crate::ops::{At, Op, Sizes};

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
/// `put_lifetime` (the replicas' and the lease store's manual clocks): the runtime's default.
/// An erasure is due this long after its forget by the lease store's clock; the end's erasure
/// audit moves every clock past it (`Op::Advance`, through the model too).
pub const PUT_LIFETIME_MS: u64 = 120_000;
/// `Durability::Async { every }` (real time): how often an `Async` tenant ships.
pub const ASYNC_EVERY: Duration = Duration::from_millis(2);
/// `retain` in the change log's cases (real time, the wall clock manifests and segments carry):
/// an image is older than it a few ops after it was published, or after an `Op::Age`.
pub const RETAIN: Duration = Duration::from_millis(30);
/// How fast the durable store reads in a change log's case with `slow` on (`Sizes::Slow`):
/// 70 ms a MiB, so a 4.5 MB segment takes longer than `store_deadline` to get (about 300 ms),
/// and well within a put's allowance for its size (800 ms; docs/guarantees.md: a get of a
/// known size has a put's deadline).
pub const SLOW_READ_PER_MIB: Duration = Duration::from_millis(70);

/// What kind of case a fleet runs (its leading op).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// Periodic snapshots (and, on a logged tenant, compaction checks) every
    /// [`SNAPSHOT_EVERY`].
    pub periodic: bool,
    /// Each replica's durability, the final one's last.
    pub modes: Vec<Mode>,
    /// The change log's cases: compaction every `COMPACT_SEGMENTS`, `retain` [`RETAIN`].
    pub log_case: bool,
    /// The durable store reads at [`SLOW_READ_PER_MIB`].
    pub slow: bool,
    /// The driven replicas passivate tenants idle for `PASSIVATE_AFTER_MS` (`Op::Passivation`);
    /// otherwise no replica passivates.
    pub passivation: bool,
}

impl Case {
    /// The case `ops` runs: from its leading op.
    pub fn of(ops: &[Op]) -> Self {
        let mut case = Case {
            periodic: false,
            modes: vec![Mode::Shipped; REPLICAS + 1],
            log_case: false,
            slow: false,
            passivation: false,
        };
        match ops.first() {
            Some(Op::Periodic) => {
                case.periodic = true;
                case.modes = vec![Mode::Images; REPLICAS + 1];
            }
            Some(Op::Images) => case.modes = vec![Mode::Images; REPLICAS + 1],
            Some(Op::Passivation { images }) => {
                case.passivation = true;
                if *images {
                    case.modes = vec![Mode::Images; REPLICAS + 1];
                }
            }
            Some(Op::Log { modes, sizes }) => {
                case.modes[..REPLICAS].copy_from_slice(modes);
                (case.periodic, case.log_case) = (true, true);
                case.slow = *sizes == Sizes::Slow;
            }
            _ => {}
        }
        case
    }

    /// Whether anything happens in the background after an op that the checker must wait for
    /// (periodic images, compaction, `Async` shipments).
    pub fn background(&self) -> bool {
        self.periodic || self.modes.contains(&Mode::Async)
    }
}

mod calls;
mod exec;
mod faults;
mod log;
mod observe;
mod passivation;
pub(crate) use calls::{
    count, insert, read, settle, settle_raw, snapshot, ticket_insert, ticket_work, unit,
    wait_for_drain,
};
pub use calls::{key_of, res_of};
pub use faults::CRASH_BOUND;
pub use log::wall_ms;

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
    /// In the change log's cases: each tenant's manifests' wall-clock stamps.
    pub stamps: Vec<BTreeMap<(u64, u64), u64>>,
    /// The wall clock when the stores were read (ms since the Unix epoch).
    pub wall_ms: u64,
    /// In the change log's cases: every key a delete reached the store with, and when (wall
    /// clock), oldest first.
    pub deletions: Vec<(String, u64)>,
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
    /// Each replica's events (kept across its restarts), the final one's last.
    events: Vec<EventLog>,
    /// `[replica]`: how many sweeps beside an open (of a tenant above a raised floor) it began,
    /// so that the others it reports are retention's.
    beside: Vec<usize>,
    /// `[replica]`: retention runs given up on (skipped while another ran).
    skipped: Vec<usize>,
    /// Every manifest stamp read so far, by tenant: an image retention deleted since keeps its
    /// stamp for the retention rule.
    stamps_seen: std::sync::Mutex<Vec<BTreeMap<(u64, u64), u64>>>,
    /// Point-in-time restores so far (names their files).
    restores: usize,
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
    /// What kind of case this is.
    case: Case,
    /// Periodic snapshots are on.
    periodic: bool,
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
    pub fn new(breakage: Breakage, case: Case) -> Self {
        let dir = temp_dir();
        let store_clock = ManualClock::new(STORE_BASE_MS);
        let sqlite = SqliteLeaseStore::open_with(
            &dir.path().join("leases.db"),
            Arc::new(store_clock.clone()),
            "boot-1".into(),
        )
        .unwrap();
        let leases = FaultyLeaseStore::new(Arc::new(sqlite));
        // One call per tip move, as the model counts them (`Late(MoveTip)` takes one move's
        // call, absorbed by its retry): on the batched path a late arming may take a batch of
        // another tenant's moves, which the model cannot place. The batched path runs under
        // faults in `tests/late_landings.rs`, the messages simulation and the drill.
        leases.one_move_per_call();
        let durable = FaultyStore::new(Arc::new(
            DirStore::open(&dir.path().join("durable")).unwrap(),
        ));
        if case.slow {
            durable.set_pace(Pace {
                per_mib_read: SLOW_READ_PER_MIB,
                ..Pace::default()
            });
        }
        let mut world = Self {
            dir,
            store_clock,
            clocks: Vec::new(),
            traps: Vec::new(),
            leases,
            durable,
            sups: Vec::new(),
            roots: Vec::new(),
            events: (0..=REPLICAS).map(|_| EventLog::new()).collect(),
            beside: vec![0; REPLICAS + 1],
            skipped: vec![0; REPLICAS + 1],
            stamps_seen: std::sync::Mutex::new(vec![BTreeMap::new(); TENANTS]),
            restores: 0,
            handles: HashMap::new(),
            owners: HashMap::new(),
            latest: vec![vec![None; TENANTS]; REPLICAS + 1],
            finished: BTreeMap::new(),
            crashes: 0,
            breakage,
            periodic: case.periodic,
            case,
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
        // Odd replicas pipeline their segments, even ones ship one at a time (the default):
        // tenants move between both (docs/testing.md, "Pipelined segments").
        cfg.segments_in_flight = if r % 2 == 1 { 4 } else { 1 };
        cfg.durability = match self.case.modes[r] {
            Mode::Shipped => Durability::Shipped,
            Mode::Async => Durability::Async { every: ASYNC_EVERY },
            Mode::Images => Durability::Images,
        };
        if self.case.log_case {
            cfg.compaction = Compaction {
                segments: COMPACT_SEGMENTS,
                bytes: u64::MAX,
            };
            cfg.retain = RETAIN;
        }
        // No passivation the model does not know of: off, unless the case turns it on (then on
        // the driven replicas only; the final one, which opens everything at the end, keeps
        // what it opens).
        cfg.passivate_after = (self.case.passivation && r < REPLICAS)
            .then_some(Duration::from_millis(PASSIVATE_AFTER_MS));
        cfg.drain_timeout = DRAIN_TIMEOUT;
        cfg.store_deadline = STORE_DEADLINE;
        cfg.put_lifetime = Duration::from_millis(PUT_LIFETIME_MS);
        // One arbiter thread per replica: tenants still live off the supervisor's thread, and a
        // case starts in half the time.
        cfg.arbiters = 1;
        cfg.breakage = self.breakage;
        cfg.observer = Some(Arc::new(self.events[r].clone()));
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

    /// Time passes on every clock at once.
    pub(crate) fn advance(&self, ms: u64) {
        let by = Duration::from_millis(ms);
        self.store_clock.advance(by);
        for clock in &self.clocks {
            clock.advance(by);
        }
    }
}
