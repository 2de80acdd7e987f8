//! The runtime tests' fleet: replicas sharing one lease store and one durable store, behind
//! fault-injecting wrappers, with manual clocks that a test moves by hand (or real time where
//! real time is the point).
//!
//! The backends are a matrix: by default a SQLite lease file and a durable directory; with
//! `LEASEHOLD_TEST_BACKEND=postgres-s3` (and the `postgres` and `s3` features) the same tests run
//! on PostgreSQL and S3 (`scripts/test.sh` does both). PostgreSQL judges expiry by its own clock,
//! which a test cannot move: tests that expire a lease in the store ask
//! [`Fleet::store_clock_is_manual`] first and say so when they cannot run.
#![allow(dead_code)]

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use leasehold::clock::SharedClock;
use leasehold::durable::dir::DirStore;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::ledger::{LedgerError, NewEvent};
use leasehold::testkit::{FaultyLeaseStore, FaultyStore, Hook};
use leasehold::{
    Clock, Error, LeaseKey, ManualClock, OrgId, ReplicaId, SystemClock, TenantId, derive_tenant_id,
};
use leasehold_actors::{Event, EventLog, RuntimeConfig, Supervisor, TenantRef};
use tempfile::TempDir;

/// Lease duration of the manual-clock fleets.
pub const TTL: Duration = Duration::from_secs(10);
/// Margin of the manual-clock fleets.
pub const MARGIN: Duration = Duration::from_secs(2);

pub fn org() -> OrgId {
    OrgId::new("acme").unwrap()
}

fn derived(subject: &str) -> TenantId {
    derive_tenant_id(&[9u8; 32], "https://idp.example/acme", subject).unwrap()
}

/// The tenant most tests use.
pub fn tenant() -> TenantId {
    derived("handoff-user")
}

/// A second tenant.
pub fn tenant2() -> TenantId {
    derived("handoff-user-2")
}

pub fn key() -> LeaseKey {
    LeaseKey::new(&org(), &tenant())
}

pub fn key2() -> LeaseKey {
    LeaseKey::new(&org(), &tenant2())
}

/// Replicas sharing a lease file and a durable directory.
pub struct Fleet {
    /// Holds every file of the fleet.
    pub dir: TempDir,
    /// The lease store's clock (manual fleets).
    pub store_clock: ManualClock,
    /// The shared lease store, with its faults.
    pub leases: FaultyLeaseStore,
    /// The shared durable store, with its faults.
    pub durable: FaultyStore,
    /// Every replica's clock, so that time passes everywhere at once.
    clocks: Mutex<Vec<ManualClock>>,
    /// `Some((ttl, margin))` for a fleet on real time.
    real_time: Option<(Duration, Duration)>,
    /// Whether the lease store's clock is `store_clock` (false on PostgreSQL).
    manual_store: bool,
    /// Closes the lease store pool's idle connections (PostgreSQL).
    close_idle: CloseIdle,
}

/// The backend pair the fleet runs on.
fn backend() -> String {
    std::env::var("LEASEHOLD_TEST_BACKEND").unwrap_or_else(|_| "sqlite-dir".into())
}

/// A name no other fleet of this run uses (a table, a bucket prefix).
fn unique_name() -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("f{}_{n}_{nanos}", std::process::id())
}

/// What closes the idle connections the lease store's pool keeps (PostgreSQL).
type CloseIdle = Option<Arc<dyn Fn() + Send + Sync>>;

type Stores = (
    Arc<dyn leasehold::LeaseStore>,
    Arc<dyn leasehold::DurableStore>,
    bool,
    CloseIdle,
);

/// The embedded defaults: a SQLite lease file on `clock` and a durable directory.
fn embedded(dir: &std::path::Path, clock: SharedClock) -> Stores {
    let sqlite =
        SqliteLeaseStore::open_with(&dir.join("leases.db"), clock, "boot-1".into()).unwrap();
    let durable = DirStore::open(&dir.join("durable")).unwrap();
    (Arc::new(sqlite), Arc::new(durable), true, None)
}

/// PostgreSQL and S3, from the servers `scripts/test.sh` starts; each fleet gets its own table
/// and bucket prefix.
#[cfg(all(feature = "postgres", feature = "s3"))]
async fn servers() -> Stores {
    use leasehold::durable::s3::{S3Config, S3Store};
    use leasehold::lease::postgres::PostgresLeaseStore;
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run scripts/test.sh"))
    };
    let name = unique_name();
    let leases = PostgresLeaseStore::connect(&var("LEASEHOLD_TEST_PG_URL"), &name)
        .await
        .unwrap();
    let durable = S3Store::new(S3Config {
        endpoint: Some(var("LEASEHOLD_TEST_S3_ENDPOINT")),
        region: "us-east-1".into(),
        bucket: var("LEASEHOLD_TEST_S3_BUCKET"),
        prefix: format!("{name}/"),
        access_key_id: Some("test".into()),
        secret_access_key: Some("test".into()),
        allow_http: true,
    })
    .unwrap();
    let pool = leases.clone();
    let close_idle: CloseIdle = Some(Arc::new(move || pool.drop_idle_connections()));
    (Arc::new(leases), Arc::new(durable), false, close_idle)
}

#[cfg(not(all(feature = "postgres", feature = "s3")))]
async fn servers() -> Stores {
    panic!("LEASEHOLD_TEST_BACKEND=postgres-s3 needs the postgres and s3 features")
}

/// One replica of a fleet.
pub struct Replica {
    /// Its supervisor.
    pub sup: Supervisor,
    /// Its clock, on a manual fleet.
    pub clock: Option<ManualClock>,
    /// Its state root.
    pub state_root: PathBuf,
    /// Every event it emitted.
    pub log: EventLog,
}

impl Fleet {
    /// A fleet on manual clocks: nothing renews or snapshots unless a test says so.
    pub async fn new() -> Self {
        Self::build(None, false).await
    }

    /// A manual fleet whose lease store's clock the test moves: on PostgreSQL + S3 the leases
    /// live in the SQLite store on the fleet's manual clock (a server's clock cannot be moved)
    /// and the images in S3, so a test that expires a lease in the store runs on every backend.
    pub async fn with_store_clock() -> Self {
        Self::build(None, true).await
    }

    /// A fleet on real time with the given lease timings.
    pub async fn real_time(ttl: Duration, margin: Duration) -> Self {
        Self::build(Some((ttl, margin)), false).await
    }

    async fn build(real_time: Option<(Duration, Duration)>, store_clock_needed: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store_clock = ManualClock::new(1_000_000);
        let clock: SharedClock = match real_time {
            Some(_) => Arc::new(SystemClock),
            None => Arc::new(store_clock.clone()),
        };
        let (leases, durable, manual, close_idle) = match backend().as_str() {
            "postgres-s3" if store_clock_needed => {
                let (leases, _, manual, _) = embedded(dir.path(), clock);
                let (_, durable, _, _) = servers().await;
                (leases, durable, manual, None)
            }
            "postgres-s3" => servers().await,
            "sqlite-dir" => embedded(dir.path(), clock),
            other => panic!("unknown LEASEHOLD_TEST_BACKEND {other:?}: sqlite-dir or postgres-s3"),
        };
        Self {
            dir,
            store_clock,
            leases: FaultyLeaseStore::new(leases),
            durable: FaultyStore::new(durable),
            clocks: Mutex::new(Vec::new()),
            real_time,
            manual_store: manual && real_time.is_none(),
            close_idle,
        }
    }

    /// Closes the idle connections of the lease store's pool (PostgreSQL; nothing on the
    /// embedded store): what the host's store keeps open is not the replicas', and a count of
    /// what closed replicas left behind leaves it out.
    pub fn close_idle_connections(&self) {
        if let Some(close) = &self.close_idle {
            close();
        }
    }

    /// Asserts that the lease store's clock moves with [`Fleet::advance`]: a test that expires
    /// a lease in the store builds its fleet with [`Fleet::with_store_clock`] and never skips.
    pub fn assert_store_clock_is_manual(&self) {
        assert!(
            self.manual_store,
            "this test moves the store's clock: build the fleet with Fleet::with_store_clock"
        );
    }

    /// A replica with the fleet's defaults, its state root named after it.
    pub fn replica(&self, id: &str) -> Replica {
        self.replica_with(id, id, |_| {})
    }

    /// A replica with the fleet's defaults and no change log (`Durability::Images`): for the
    /// tests that pin how images carry a tenant (docs/testing.md, durability modes).
    pub fn replica_images(&self, id: &str) -> Replica {
        self.replica_with(id, id, images)
    }

    /// A replica whose state root is `node` (two replicas given one node share it) and whose
    /// configuration `tweak` adjusts.
    pub fn replica_with(
        &self,
        id: &str,
        node: &str,
        tweak: impl FnOnce(&mut RuntimeConfig),
    ) -> Replica {
        self.try_replica_with(id, node, tweak).unwrap()
    }

    /// [`Fleet::replica_with`], with the start's refusal for the test to look at.
    pub fn try_replica_with(
        &self,
        id: &str,
        node: &str,
        tweak: impl FnOnce(&mut RuntimeConfig),
    ) -> Result<Replica, Error> {
        let state_root = self.dir.path().join("nodes").join(node);
        let mut cfg = RuntimeConfig::new(
            ReplicaId::new(id).unwrap(),
            &state_root,
            self.leases.shared(),
            self.durable.shared(),
        );
        let clock = match self.real_time {
            Some((ttl, margin)) => {
                cfg.ttl = ttl;
                cfg.margin = margin;
                cfg.renew_every = Some((ttl - margin) / 3);
                None
            }
            None => {
                let clock = ManualClock::new(5_000);
                self.clocks.lock().unwrap().push(clock.clone());
                cfg.clock = Arc::new(clock.clone());
                cfg.ttl = TTL;
                cfg.margin = MARGIN;
                cfg.renew_every = None;
                // Reconciliation passes run when a test asks (`reconcile_now`), on its clock.
                cfg.reconcile_every = None;
                Some(clock)
            }
        };
        cfg.snapshot_every = None;
        cfg.arbiters = 2;
        let log = EventLog::new();
        cfg.observer = Some(Arc::new(log.clone()));
        tweak(&mut cfg);
        Ok(Replica {
            sup: Supervisor::start(cfg)?,
            clock,
            state_root,
            log,
        })
    }

    /// Time passes everywhere: the store's clock and every replica's. On PostgreSQL only the
    /// replicas' clocks move (the server's clock is its own).
    pub fn advance(&self, by: Duration) {
        self.store_clock.advance(by);
        for clock in self.clocks.lock().unwrap().iter() {
            clock.advance(by);
        }
    }

    /// Every key the durable store holds under `prefix`, looked at behind the faults.
    /// (On S3 the fleet's own bucket prefix is implied.)
    pub async fn stored(&self, prefix: &str) -> Vec<String> {
        self.durable.inner().list(prefix).await.unwrap()
    }

    /// Every key of the main tenant in the durable store.
    pub async fn stored_of_tenant(&self) -> Vec<String> {
        self.stored(&key().prefix()).await
    }
}

impl Replica {
    /// Opens the main tenant.
    pub async fn open(&self) -> TenantRef {
        self.sup.open(&org(), &tenant()).await.unwrap()
    }

    /// Opens the second tenant.
    pub async fn open2(&self) -> TenantRef {
        self.sup.open(&org(), &tenant2()).await.unwrap()
    }

    /// Every event so far, once the observer has caught up.
    pub async fn events(&self) -> Vec<Event> {
        assert!(self.sup.events_delivered(Duration::from_secs(5)).await);
        self.log.events()
    }

    /// Whether any event so far satisfies `pred`.
    pub async fn saw(&self, pred: impl Fn(&Event) -> bool) -> bool {
        self.events().await.iter().any(pred)
    }

    /// How many renewal round trips this replica made during the next `window` (real time):
    /// one renewal chain makes one per `renew_every`.
    pub async fn renewals_during(&self, window: Duration) -> usize {
        self.events().await;
        self.log.clear();
        tokio::time::sleep(window).await;
        self.events()
            .await
            .iter()
            .filter(|e| matches!(e, Event::Renewed { .. }))
            .count()
    }

    /// Whether a `released { flushed: true }` of `key` was emitted.
    pub async fn flushed(&self, key: &LeaseKey) -> bool {
        let key = key.to_string();
        self.saw(|e| matches!(e, Event::Released { key: k, flushed: true, .. } if *k == key))
            .await
    }

    /// The local ledger file of the main tenant.
    pub fn ledger_file(&self) -> PathBuf {
        leasehold::paths::ledger_path(&self.state_root, &org(), &tenant())
    }
}

/// Restores the main tenant as of log position `at` into a new file `dest`
/// (`leasehold::log::restore_to`, with the fleet's stores behind their faults).
pub async fn restore_as_of(
    fleet: &Fleet,
    at: leasehold::layout::LogPos,
    dest: &std::path::Path,
) -> Result<leasehold::log::PitrReport, leasehold::log::LogError> {
    leasehold::log::restore_to(
        fleet.durable.inner().as_ref(),
        fleet.leases.inner().as_ref(),
        &key(),
        leasehold::log::Target::Position(at),
        dest,
    )
    .await
}

/// The idempotency keys of the events in the plain SQLite file at `path`, in order.
pub fn keys_in_file(path: &std::path::Path) -> Vec<String> {
    let file = rusqlite::Connection::open(path).unwrap();
    let mut stmt = file
        .prepare("SELECT idem_key FROM events ORDER BY seq")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Switches a replica's configuration to `Durability::Images` (no change log).
pub fn images(c: &mut RuntimeConfig) {
    c.durability = leasehold_actors::Durability::Images;
}

/// Inserts one test event with idempotency key `idem`.
pub async fn insert(t: &TenantRef, idem: &str) -> Result<i64, Error> {
    let event = NewEvent::new("test", idem);
    t.run(move |l| {
        l.insert_event(&event)?
            .ok_or_else(|| LedgerError::Host("duplicate".into()))
    })
    .await
}

/// The idempotency keys of the tenant's test events, in order.
pub async fn keys_of(t: &TenantRef) -> Vec<String> {
    t.run(|l| {
        Ok(l.events_after(0, 10_000)?
            .into_iter()
            .map(|e| e.idem_key)
            .collect())
    })
    .await
    .unwrap()
}

/// `fut`, which has to settle within `ms`: the test fails with `what` instead of hanging.
pub async fn within<T>(ms: u64, what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(Duration::from_millis(ms), fut).await {
        Ok(v) => v,
        Err(_) => panic!("{what} did not settle within {ms} ms"),
    }
}

/// Waits (real time, polling) until `cond` holds, failing after `ms`.
pub async fn eventually<F, Fut>(ms: u64, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let until = std::time::Instant::now() + Duration::from_millis(ms);
    while !cond().await {
        assert!(
            std::time::Instant::now() < until,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A store hook from an async block.
pub fn hook<F>(f: F) -> Hook
where
    F: Future<Output = ()> + Send + 'static,
{
    Box::new(move || f.boxed())
}

/// Where a [`gated`] hook stands: `reached` resolves when the hooked call has arrived at the
/// store, and the call goes on once `open` is called.
pub struct Gate {
    reached: tokio::sync::oneshot::Receiver<()>,
    open: tokio::sync::oneshot::Sender<()>,
}

impl Gate {
    /// Waits until the hooked call is held at the store.
    pub async fn reached(&mut self) {
        within(5_000, "the hooked store call", &mut self.reached)
            .await
            .unwrap();
    }

    /// Lets the hooked call go on.
    pub fn open(self) {
        let _ = self.open.send(());
    }
}

/// A hook that holds its store call until the [`Gate`] is opened.
pub fn gated() -> (Hook, Gate) {
    let (reached_tx, reached) = tokio::sync::oneshot::channel::<()>();
    let (open, open_rx) = tokio::sync::oneshot::channel::<()>();
    let held = hook(async move {
        let _ = reached_tx.send(());
        let _ = open_rx.await;
    });
    (held, Gate { reached, open })
}

/// Waits until the tenant is in `status` (real time, polling).
pub async fn until_status(t: &TenantRef, status: leasehold_actors::TenantStatus) {
    eventually(3_000, &format!("the tenant to be {status}"), || async {
        t.status().await == status
    })
    .await;
}

/// True for image keys.
pub fn is_image(key: &str) -> bool {
    key.ends_with(".db")
}

/// True for segment keys.
pub fn is_segment_key(key: &str) -> bool {
    key.ends_with(".seg")
}

/// The clock type used in assertions.
pub fn now(c: &ManualClock) -> u64 {
    c.now_ms()
}

/// A run that holds its tenant's thread for `ms` (a blocking closure); resolves once the closure
/// has begun, with the run's own end to await.
pub async fn block_thread(t: &TenantRef, ms: u64) -> tokio::task::JoinHandle<()> {
    let (began, begun) = tokio::sync::oneshot::channel();
    let run = t.run(move |_| {
        let _ = began.send(());
        std::thread::sleep(Duration::from_millis(ms));
        Ok(())
    });
    let done = actix_rt::spawn(async move {
        let _ = run.await;
    });
    within(3_000, "the blocking run to begin", begun)
        .await
        .unwrap();
    done
}
