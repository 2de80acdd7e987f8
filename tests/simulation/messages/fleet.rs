//! Messages across replicas in the simulation (docs/testing.md, "Messages in the simulation"):
//! two replicas with transports on loopback, each behind a fault-injecting proxy
//! (`leasehold::testkit::FaultProxy`, its endpoint what the replica advertises), sharing one
//! SQLite lease store and one durable directory, every lease clock manual. One tenant takes
//! keyed and unkeyed commands sent through either replica — run where it is held, opened where
//! nobody holds it, or forwarded to the holder — retries of keyed ones through either replica,
//! forwards whose answer the network drops (the caller hears an unknown outcome), handoffs with
//! a message sent through the other replica meanwhile (it waits for the tenant to leave, then
//! goes on to the successor or opens it), abandons, renewals and time past the lease (the
//! holder's record dies with it: the tenant is taken over).
//!
//! The oracle is the stores, as in `messages.rs`: after every op the tenant's log is restored at
//! its tip and held against what the callers heard — no command ran twice (each id at most once
//! in the log), an acknowledged one is in it, a definitely refused one is not, every reply is
//! that of the first run; at the end every keyed command not yet answered is retried until it is
//! and is then in the log exactly once. A build that ignores idempotency keys is caught by a
//! lost answer retried through the other replica (`a_build_…_is_caught_across_replicas`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::durable::dir::DirStore;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::ledger::{LedgerError, LedgerTx};
use leasehold::testkit::{FaultProxy, FaultyLeaseStore, FaultyStore};
use leasehold::{Error, LeaseKey, LeaseStore, ManualClock, OrgId, ReplicaId, derive_tenant_id};
use leasehold_actors::{
    Breakage, FleetKey, Messages, RuntimeConfig, Supervisor, TenantAddr, TenantMessage,
    TransportConfig,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
use serde::{Deserialize, Serialize};
use tempfile::TempDir;

/// What the ops of the seeded run came to: `(op kind, heard kind)` → count (printed at its end,
/// so that a run shows it reached forwards, lost answers and waits, not only skips).
static TALLY: std::sync::Mutex<BTreeMap<(String, String), usize>> =
    std::sync::Mutex::new(BTreeMap::new());

/// Replicas of the fleet.
const REPLICAS: usize = 2;
/// Lease duration (manual clocks); a replica's record lives as long.
const TTL_MS: u64 = 10_000;
/// How long a caller waits for a reply (real time).
const ASK: Duration = Duration::from_secs(3);
/// How long a caller waits when the network drops the answer of its forward.
const LOST_ASK: Duration = Duration::from_millis(800);
/// Cases a run generates unless `LEASEHOLD_SIM_FLEET_CASES` says otherwise.
const DEFAULT_CASES: u32 = 16;

/// One step of a fleet case; `r` is the replica the message is sent through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetOp {
    /// A command with a fresh id, keyed (its id is its idempotency key) or not.
    Send { r: usize, keyed: bool },
    /// The `n`-th keyed command sent so far sent again through `r`: a retry.
    Resend { r: usize, n: usize },
    /// A keyed command through the replica that does not hold the tenant: the answer of its
    /// forward to the holder is dropped by the network (the caller hears an unknown outcome).
    LoseAnswer,
    /// The holder hands the tenant off while a keyed command is sent through the other replica.
    HandoffDuring,
    /// The tenant open on `r` is abandoned (a crash: no flush).
    Crash { r: usize },
    /// Time passes on every clock.
    Advance { ms: u64 },
    /// `renew_now` on `r` (its leases and its record).
    Renew { r: usize },
}

fn op() -> impl Strategy<Value = FleetOp> {
    let r = || 0..REPLICAS;
    prop_oneof![
        8 => (r(), any::<bool>()).prop_map(|(r, keyed)| FleetOp::Send { r, keyed }),
        4 => (r(), 0..8usize).prop_map(|(r, n)| FleetOp::Resend { r, n }),
        3 => Just(FleetOp::LoseAnswer),
        3 => Just(FleetOp::HandoffDuring),
        2 => r().prop_map(|r| FleetOp::Crash { r }),
        2 => prop::sample::select(vec![1_000, TTL_MS + 1]).prop_map(|ms| FleetOp::Advance { ms }),
        2 => r().prop_map(|r| FleetOp::Renew { r }),
    ]
}

/// A command: one more row of its id; answers how many rows of the id there are after it.
#[derive(Debug, Serialize, Deserialize)]
struct Credit {
    id: String,
}

impl TenantMessage for Credit {
    type Reply = u32;
    const NAME: &'static str = "sim.fleet.credit";

    fn handle(self, ledger: &mut LedgerTx<'_>) -> Result<u32, LedgerError> {
        ledger.execute("CREATE TABLE IF NOT EXISTS credits (id TEXT NOT NULL)", [])?;
        ledger.execute("INSERT INTO credits VALUES (?1)", [&self.id])?;
        ledger.query_row(
            "SELECT count(*) FROM credits WHERE id = ?1",
            [&self.id],
            |r| r.get(0),
        )
    }
}

/// What a caller heard.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Heard {
    Credited(u32),
    Refused(String),
    Unknown(String),
    Skipped,
    Done,
}

fn heard(r: Result<u32, Error>) -> Heard {
    match r {
        Ok(n) => Heard::Credited(n),
        Err(e) if e.is_outcome_unknown() => Heard::Unknown(e.code().to_string()),
        Err(e) => Heard::Refused(e.code().to_string()),
    }
}

fn done(r: Result<(), Error>) -> Heard {
    match r {
        Ok(()) => Heard::Done,
        Err(e) => Heard::Refused(e.code().to_string()),
    }
}

/// What became of one command id, over every delivery of it.
#[derive(Debug, Default, Clone)]
struct Fate {
    keyed: bool,
    acked: bool,
    unknown: bool,
}

fn addr() -> TenantAddr {
    let tenant = derive_tenant_id(&[9u8; 32], "https://idp.example", "user-f").unwrap();
    TenantAddr::new(OrgId::new("acme").unwrap(), tenant)
}

fn key() -> LeaseKey {
    addr().key()
}

/// A loopback port free a moment ago (the replica binds it; its proxy forwards to it).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// One simulated fleet.
struct FleetWorld {
    dir: TempDir,
    store_clock: ManualClock,
    clocks: Vec<ManualClock>,
    leases: FaultyLeaseStore,
    durable: FaultyStore,
    sups: Vec<Supervisor>,
    proxies: Vec<FaultProxy>,
    fates: BTreeMap<String, Fate>,
    keyed: Vec<String>,
    replies: Vec<u32>,
    next: usize,
}

impl FleetWorld {
    async fn new(breakage: Breakage) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let store_clock = ManualClock::new(1_000_000);
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
        let messages = Messages::new().command::<Credit>().unwrap();
        let (mut clocks, mut sups, mut proxies) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..REPLICAS {
            let port = free_port();
            let proxy = FaultProxy::start(&format!("127.0.0.1:{port}"))
                .await
                .unwrap();
            let clock = ManualClock::new(5_000);
            let mut cfg = RuntimeConfig::new(
                ReplicaId::new(format!("fleet-{r}")).unwrap(),
                dir.path().join(format!("node-{r}")),
                leases.shared(),
                durable.shared(),
            );
            cfg.clock = Arc::new(clock.clone());
            cfg.ttl = Duration::from_millis(TTL_MS);
            cfg.margin = Duration::from_millis(2_000);
            cfg.renew_every = None;
            cfg.snapshot_every = None;
            // No passivation: this model does not know of it.
            cfg.passivate_after = None;
            cfg.reconcile_every = None;
            cfg.store_deadline = Duration::from_millis(250);
            cfg.arbiters = 1;
            cfg.messages = messages.clone();
            cfg.ask_timeout = ASK;
            cfg.breakage = breakage;
            let fleet_key = FleetKey::new(*b"leasehold-sim-fleet-key-32-bytes").unwrap();
            let mut transport =
                TransportConfig::new(SocketAddr::from(([127, 0, 0, 1], port)), fleet_key);
            transport.advertise = Some(format!("http://{}", proxy.addr()));
            transport.workers = 1;
            cfg.transport = Some(transport);
            sups.push(Supervisor::start(cfg).unwrap());
            clocks.push(clock);
            proxies.push(proxy);
        }
        Self {
            dir,
            store_clock,
            clocks,
            leases,
            durable,
            sups,
            proxies,
            fates: BTreeMap::new(),
            keyed: Vec::new(),
            replies: Vec::new(),
            next: 0,
        }
    }

    fn fresh(&mut self) -> String {
        self.next += 1;
        format!("c-{}", self.next)
    }

    fn advance(&self, ms: u64) {
        let by = Duration::from_millis(ms);
        self.store_clock.advance(by);
        for clock in &self.clocks {
            clock.advance(by);
        }
    }

    /// The replica whose lease on the tenant is live, by the store's word.
    async fn holder(&self) -> Option<usize> {
        let seen = self.leases.inner().lookup(&key()).await.ok()?;
        let (id, _) = seen.live_holder()?;
        (0..REPLICAS).find(|r| id == format!("fleet-{r}"))
    }

    fn send(
        &self,
        r: usize,
        id: &str,
        keyed: bool,
        deadline: Duration,
    ) -> impl std::future::Future<Output = Result<u32, Error>> + use<> {
        let request = self.sups[r]
            .request(&addr(), Credit { id: id.into() })
            .deadline(deadline);
        let request = match keyed {
            true => request.idempotency_key(id),
            false => request,
        };
        std::future::IntoFuture::into_future(request)
    }

    fn record(&mut self, id: &str, keyed: bool, heard: &Heard) {
        if keyed && !self.fates.contains_key(id) {
            self.keyed.push(id.to_string());
        }
        let fate = self.fates.entry(id.to_string()).or_default();
        fate.keyed |= keyed;
        match heard {
            Heard::Credited(n) => {
                fate.acked = true;
                self.replies.push(*n);
            }
            Heard::Unknown(_) => fate.unknown = true,
            _ => {}
        }
    }

    async fn credit(&mut self, r: usize, id: String, keyed: bool, deadline: Duration) -> Heard {
        let heard = heard(self.send(r, &id, keyed, deadline).await);
        self.record(&id, keyed, &heard);
        heard
    }

    async fn exec(&mut self, op: &FleetOp) -> Heard {
        self.replies.clear();
        match *op {
            FleetOp::Send { r, keyed } => {
                let id = self.fresh();
                self.credit(r, id, keyed, ASK).await
            }
            FleetOp::Resend { r, n } => match self.keyed.len() {
                0 => Heard::Skipped,
                len => {
                    let id = self.keyed[n % len].clone();
                    self.credit(r, id, true, ASK).await
                }
            },
            FleetOp::LoseAnswer => {
                let Some(other) = self.holder().await else {
                    return Heard::Skipped;
                };
                let r = 1 - other;
                // The pooled connection to the holder's proxy, or the next one, drops the
                // answer of the next request: the forward ran (or not) and nobody hears.
                match self.proxies[other].last_flow() {
                    Some(flow) => flow.drop_next_answer(),
                    None => self.proxies[other].on_next_flow(|f| f.drop_next_answer()),
                }
                let id = self.fresh();
                self.credit(r, id, true, LOST_ASK).await
            }
            FleetOp::HandoffDuring => {
                let Some(r) = self.holder().await else {
                    return Heard::Skipped;
                };
                let Some(tenant) = self.sups[r].tenant(&addr().org, &addr().tenant).await else {
                    return Heard::Skipped;
                };
                let id = self.fresh();
                let sending = actix_rt::spawn(self.send(1 - r, &id, true, ASK));
                let handed = done(tenant.handoff().await);
                let heard = heard(sending.await.unwrap());
                self.record(&id, true, &heard);
                if handed != Heard::Done {
                    return handed;
                }
                heard
            }
            FleetOp::Crash { r } => match self.sups[r].tenant(&addr().org, &addr().tenant).await {
                Some(t) => done(t.abandon().await),
                None => Heard::Skipped,
            },
            FleetOp::Advance { ms } => {
                self.advance(ms);
                Heard::Skipped
            }
            FleetOp::Renew { r } => done(self.sups[r].renew_now().await),
        }
    }

    /// The ids the tenant's log holds, as the stores say: restored at the tip into a new file.
    async fn logged(&mut self) -> Result<Vec<String>, String> {
        let record = self
            .leases
            .inner()
            .read(&key())
            .await
            .map_err(|e| e.to_string())?;
        let Some(tip) = record.and_then(|r| r.tip) else {
            return Ok(Vec::new());
        };
        self.next += 1;
        let dest = self.dir.path().join(format!("restored-{}.db", self.next));
        leasehold::log::restore_to(
            self.durable.inner().as_ref(),
            self.leases.inner().as_ref(),
            &key(),
            leasehold::log::Target::Position(tip),
            &dest,
        )
        .await
        .map_err(|e| format!("the log does not restore: {e}"))?;
        let file = rusqlite::Connection::open(&dest).map_err(|e| e.to_string())?;
        let exists: i64 = file
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'credits'",
                [],
                |r| r.get(0),
            )
            .map_err(|e| e.to_string())?;
        if exists == 0 {
            return Ok(Vec::new());
        }
        let mut stmt = file
            .prepare("SELECT id FROM credits")
            .map_err(|e| e.to_string())?;
        stmt.query_map([], |r| r.get(0))
            .and_then(|rows| rows.collect::<Result<Vec<String>, _>>())
            .map_err(|e| e.to_string())
    }

    /// Holds what the callers heard against the log.
    async fn check(&mut self) -> Result<(), String> {
        let logged = self.logged().await?;
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for id in &logged {
            *count.entry(id).or_default() += 1;
        }
        if let Some((id, n)) = count.iter().find(|(_, n)| **n > 1) {
            return Err(format!(
                "{id} is in the log {n} times: it ran more than once"
            ));
        }
        for (id, fate) in &self.fates {
            let n = count.get(id.as_str()).copied().unwrap_or(0);
            if fate.acked && n == 0 {
                return Err(format!("{id} was acknowledged and is not in the log"));
            }
            if !fate.acked && !fate.unknown && n > 0 {
                return Err(format!("{id} was refused and is in the log"));
            }
        }
        if let Some(n) = self.replies.iter().find(|n| **n != 1) {
            return Err(format!(
                "a command answered {n}: not the reply of its first run"
            ));
        }
        Ok(())
    }

    /// Lets every lease and record run out, then retries every keyed command not yet answered
    /// until it is; each keyed id is then in the log once.
    async fn settle(&mut self) -> Result<(), String> {
        let open: Vec<String> = self
            .fates
            .iter()
            .filter(|(_, f)| f.keyed && !f.acked)
            .map(|(id, _)| id.clone())
            .collect();
        for id in open {
            let mut last = Heard::Skipped;
            for r in (0..REPLICAS).cycle().take(4) {
                for sup in &self.sups {
                    let _ = sup.renew_now().await;
                }
                self.replies.clear();
                last = self.credit(r, id.clone(), true, ASK).await;
                if matches!(last, Heard::Credited(_)) {
                    break;
                }
                self.advance(TTL_MS + 1);
            }
            if last != Heard::Credited(1) {
                return Err(format!("the retry of {id} came to {last:?}"));
            }
        }
        self.check().await?;
        let logged = self.logged().await?;
        for (id, fate) in &self.fates {
            if fate.keyed && !logged.contains(id) {
                return Err(format!("{id}, retried until answered, is not in the log"));
            }
        }
        Ok(())
    }
}

/// Runs `ops` on a fresh fleet; what each op's callers heard, or `Err` naming the first op after
/// which the stores and the callers disagree.
fn run_case(ops: &[FleetOp], breakage: Breakage) -> Result<Vec<Heard>, String> {
    let system = actix::System::new();
    let verdict = system.block_on(async {
        let mut world = FleetWorld::new(breakage).await;
        let mut verdict = Ok(());
        let mut heards = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let heard = world.exec(op).await;
            tally(op, &heard);
            heards.push(heard.clone());
            if let Err(why) = world.check().await {
                verdict = Err(format!("op #{i} {op:?} (heard {heard:?}): {why}"));
                break;
            }
        }
        if verdict.is_ok() {
            verdict = world.settle().await.map_err(|why| format!("end: {why}"));
        }
        let verdict = verdict.map(|()| heards);
        drop(world);
        actix::System::current().stop();
        verdict
    });
    let _ = system.run();
    verdict
}

fn tally(op: &FleetOp, heard: &Heard) {
    // The variants' names, as `Debug` writes them.
    let name = |d: String| d.split([' ', '(']).next().unwrap_or_default().to_string();
    if let Ok(mut t) = TALLY.lock() {
        *t.entry((name(format!("{op:?}")), name(format!("{heard:?}"))))
            .or_default() += 1;
    }
}

fn cases() -> u32 {
    let env = std::env::var("LEASEHOLD_SIM_FLEET_CASES").ok();
    env.and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_CASES)
}

#[test]
fn seeded_fleet_simulation_runs_every_forwarded_command_once() {
    let seed = crate::seed();
    let started = Instant::now();
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        max_shrink_iters: 256,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&prop::collection::vec(op(), 4..=12), |ops| {
        run_case(&ops, Breakage::default())
            .map(drop)
            .map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    eprintln!("{} fleet cases in {:?}", cases(), started.elapsed());
    if let Ok(t) = TALLY.lock() {
        eprintln!("what the ops came to: {t:?}");
    }
}

/// A forward whose answer is lost (the caller hears an unknown outcome), a handoff with a
/// message sent through the other replica meanwhile (it waits, then is answered), retries of
/// the lost command through both replicas after the move and after the lease ran out: each
/// answers the stored reply of its one run.
#[test]
fn a_lost_forward_answer_retried_after_a_move_runs_once() {
    use FleetOp::*;
    let ops = [
        Send { r: 0, keyed: true },
        LoseAnswer,
        HandoffDuring,
        Resend { r: 0, n: 1 },
        Resend { r: 1, n: 1 },
        Advance { ms: TTL_MS + 1 },
        // The renewals find the leases that ran out (without them a tenant whose lease lapsed
        // unseen refuses until the deadline: `LEASEHOLD_DEADLINE_EXCEEDED`, nothing ran).
        Renew { r: 0 },
        Renew { r: 1 },
        Resend { r: 0, n: 1 },
    ];
    let heard = run_case(&ops, Breakage::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(heard[0], Heard::Credited(1), "{heard:?}");
    assert!(
        matches!(heard[1], Heard::Unknown(_)),
        "the forward's answer was lost: {heard:?}"
    );
    assert_eq!(
        heard[2],
        Heard::Credited(1),
        "sent through 1 while 0 handed the tenant off: {heard:?}"
    );
    assert_eq!(
        heard[3..5],
        [Heard::Credited(1), Heard::Credited(1)],
        "{heard:?}"
    );
    assert_eq!(
        heard[8],
        Heard::Credited(1),
        "the stored reply, after the lease ran out: {heard:?}"
    );
}

/// The same sequence catches a build that ignores idempotency keys: the retry of the lost
/// forward runs again.
#[test]
fn a_build_that_ignores_idempotency_keys_is_caught_across_replicas() {
    use FleetOp::*;
    let ops = [
        Send { r: 0, keyed: true },
        LoseAnswer,
        Resend { r: 1, n: 1 },
    ];
    let breakage = Breakage {
        ignore_idempotency_keys: true,
        ..Breakage::default()
    };
    match run_case(&ops, breakage) {
        Err(why) => eprintln!("caught: {why}"),
        Ok(_) => panic!("a build that ignores idempotency keys was not caught"),
    }
}
