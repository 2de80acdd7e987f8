//! The world of the messages simulation: two replicas sharing a SQLite lease store and a
//! durable directory behind the test kit's fault-injecting wrappers, every clock manual, one
//! tenant addressed by messages; what each caller heard, by command id; and the oracle that
//! restores the tenant's log from the stores.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::durable::dir::DirStore;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::ledger::{LedgerError, LedgerRead, LedgerTx};
use leasehold::testkit::{FaultyLeaseStore, FaultyStore, LeaseOp};
use leasehold::{Error, LeaseKey, LeaseStore, ManualClock, OrgId, ReplicaId, derive_tenant_id};
use leasehold_actors::{
    Breakage, Messages, RuntimeConfig, Supervisor, TenantAddr, TenantMessage, TenantQuery,
};
use serde::{Deserialize, Serialize};
use tempfile::TempDir;
use tokio::sync::oneshot;

use super::MsgOp;

/// Replicas that take messages.
pub const REPLICAS: usize = 2;
/// Lease duration (manual clocks).
pub const TTL_MS: u64 = 10_000;
/// The margin before a lease's end.
const MARGIN_MS: u64 = 2_000;
/// How long a caller waits for a reply (real time).
const ASK: Duration = Duration::from_secs(3);
/// How long a step may wait for another (a hook reached, a query read) before it gives up.
const STEP: Duration = Duration::from_secs(5);

/// Probes of queries that have read (a world waits for its own).
static PROBES: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// A command: one more row of its id; answers how many rows of the id there are after it
/// (1, unless it ran twice).
#[derive(Debug, Serialize, Deserialize)]
struct Credit {
    id: String,
}

impl TenantMessage for Credit {
    type Reply = u32;
    const NAME: &'static str = "sim.credit";

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

/// A query of every row's id; with a probe, says when it has read.
#[derive(Debug, Serialize, Deserialize)]
struct Credits {
    probe: Option<String>,
}

impl TenantQuery for Credits {
    type Reply = Vec<String>;
    const NAME: &'static str = "sim.credits";

    fn query(self, ledger: &LedgerRead<'_>) -> Result<Vec<String>, LedgerError> {
        let ids = ids_in(ledger)?;
        if let Some(probe) = self.probe {
            let mut probes = PROBES.lock().unwrap();
            probes.get_or_insert_with(HashSet::new).insert(probe);
        }
        Ok(ids)
    }
}

fn ids_in(ledger: &LedgerRead<'_>) -> Result<Vec<String>, LedgerError> {
    let exists: i64 = ledger.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE name = 'credits'",
        [],
        |r| r.get(0),
    )?;
    if exists == 0 {
        return Ok(Vec::new());
    }
    let mut stmt = ledger.prepare("SELECT id FROM credits")?;
    let rows = stmt.query_map([], |r| r.get(0))?;
    let ids: Result<Vec<String>, _> = rows.collect();
    Ok(ids?)
}

/// What a caller heard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// A command's reply.
    Credited(u32),
    /// A query's reply.
    Ids(Vec<String>),
    /// Refused: nothing of it was written.
    Refused(String),
    /// The outcome is unknown.
    Unknown(String),
    /// Nothing was sent (nothing to address).
    Skipped,
    /// A lifecycle call (abandon, handoff, renewal) succeeded.
    Done,
    /// Several callers, in order.
    Both(Box<Heard>, Box<Heard>),
}

impl<T> From<Result<T, Error>> for Heard
where
    Heard: From<T>,
{
    fn from(r: Result<T, Error>) -> Self {
        match r {
            Ok(v) => Heard::from(v),
            Err(e) if e.is_outcome_unknown() => Heard::Unknown(e.code().to_string()),
            Err(e) => Heard::Refused(e.code().to_string()),
        }
    }
}

impl From<u32> for Heard {
    fn from(n: u32) -> Self {
        Heard::Credited(n)
    }
}

impl From<Vec<String>> for Heard {
    fn from(ids: Vec<String>) -> Self {
        Heard::Ids(ids)
    }
}

/// What became of one command id, over every delivery of it.
#[derive(Debug, Default, Clone)]
struct Fate {
    /// Sent with its id as its idempotency key.
    keyed: bool,
    /// Some delivery was answered.
    acked: bool,
    /// Some delivery's outcome is unknown.
    unknown: bool,
}

/// One simulated fleet.
pub struct MsgWorld {
    /// Every file.
    dir: TempDir,
    /// The lease store's clock.
    store_clock: ManualClock,
    /// Each replica's clock.
    clocks: Vec<ManualClock>,
    /// The shared lease store.
    leases: FaultyLeaseStore,
    /// The shared durable store.
    durable: FaultyStore,
    /// The replicas.
    sups: Vec<Supervisor>,
    /// Every command id, with what its callers heard.
    fates: BTreeMap<String, Fate>,
    /// Keyed ids in the order they were first sent.
    keyed: Vec<String>,
    /// Ids acknowledged before the current op began (a query must show them).
    acked_before: HashSet<String>,
    /// The query replies of the current op (checked against the log after it).
    reads: Vec<Vec<String>>,
    /// Replies of commands of the current op.
    replies: Vec<u32>,
    /// Numbers fresh ids and restored files.
    next: usize,
}

fn addr() -> TenantAddr {
    let tenant = derive_tenant_id(&[7u8; 32], "https://idp.example", "user-m").unwrap();
    TenantAddr::new(OrgId::new("acme").unwrap(), tenant)
}

fn key() -> LeaseKey {
    addr().key()
}

fn is_segment(key: &str) -> bool {
    key.ends_with(".seg")
}

impl MsgWorld {
    /// Two replicas with `breakage`, inside an actix system.
    pub fn new(breakage: Breakage) -> Self {
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
        let messages = Messages::new()
            .command::<Credit>()
            .and_then(Messages::query::<Credits>)
            .unwrap();
        let mut clocks = Vec::new();
        let mut sups = Vec::new();
        for r in 0..REPLICAS {
            let clock = ManualClock::new(5_000);
            let mut cfg = RuntimeConfig::new(
                ReplicaId::new(format!("msg-{r}")).unwrap(),
                dir.path().join(format!("node-{r}")),
                leases.shared(),
                durable.shared(),
            );
            cfg.clock = Arc::new(clock.clone());
            cfg.ttl = Duration::from_millis(TTL_MS);
            cfg.margin = Duration::from_millis(MARGIN_MS);
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
            sups.push(Supervisor::start(cfg).unwrap());
            clocks.push(clock);
        }
        Self {
            dir,
            store_clock,
            clocks,
            leases,
            durable,
            sups,
            fates: BTreeMap::new(),
            keyed: Vec::new(),
            acked_before: HashSet::new(),
            reads: Vec::new(),
            replies: Vec::new(),
            next: 0,
        }
    }

    fn fresh(&mut self, what: &str) -> String {
        self.next += 1;
        format!("{what}-{}", self.next)
    }

    /// Carries out `op`.
    pub async fn exec(&mut self, op: &MsgOp) -> Heard {
        self.acked_before = self
            .fates
            .iter()
            .filter(|(_, f)| f.acked)
            .map(|(id, _)| id.clone())
            .collect();
        self.reads.clear();
        self.replies.clear();
        match *op {
            MsgOp::Send { r, keyed } => {
                let id = self.fresh("c");
                self.credit(r, id, keyed).await
            }
            MsgOp::Resend { r, n } => match self.keyed.len() {
                0 => Heard::Skipped,
                len => {
                    let id = self.keyed[n % len].clone();
                    self.credit(r, id, true).await
                }
            },
            MsgOp::Query { r } => self.query(r, None).await,
            MsgOp::LoseAnswer { r } => {
                (0..3).for_each(|_| self.leases.land_late(LeaseOp::MoveTip));
                let id = self.fresh("c");
                let heard = self.credit(r, id, true).await;
                self.leases.disarm_late();
                heard
            }
            MsgOp::Land => {
                self.leases.land_held().await;
                Heard::Skipped
            }
            MsgOp::Gated { r, crash } => self.gated(r, crash).await,
            MsgOp::Crash { r } => match self.sups[r].tenant(&addr().org, &addr().tenant).await {
                Some(t) => done(t.abandon().await),
                None => Heard::Skipped,
            },
            MsgOp::Handoff { r } => match self.sups[r].tenant(&addr().org, &addr().tenant).await {
                Some(t) => done(t.handoff().await),
                None => Heard::Skipped,
            },
            MsgOp::Advance { ms } => {
                self.advance(ms);
                Heard::Skipped
            }
            MsgOp::Renew { r } => done(self.sups[r].renew_now().await),
        }
    }

    fn advance(&self, ms: u64) {
        let by = Duration::from_millis(ms);
        self.store_clock.advance(by);
        for clock in &self.clocks {
            clock.advance(by);
        }
    }

    /// Sends `Credit { id }` through replica `r`, keyed by its id or not, and records the fate.
    async fn credit(&mut self, r: usize, id: String, keyed: bool) -> Heard {
        let sent = self.send_credit(r, &id, keyed);
        let heard = Heard::from(sent.await);
        self.record(&id, keyed, &heard);
        heard
    }

    fn send_credit(
        &self,
        r: usize,
        id: &str,
        keyed: bool,
    ) -> impl std::future::Future<Output = Result<u32, Error>> + use<> {
        let request = self.sups[r].request(&addr(), Credit { id: id.into() });
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

    async fn query(&mut self, r: usize, probe: Option<String>) -> Heard {
        let sent = self.sups[r].send(&addr(), Credits { probe });
        let heard = Heard::from(sent.await);
        if let Heard::Ids(ids) = &heard {
            self.reads.push(ids.clone());
        }
        heard
    }

    /// A keyed command held between its commit and its segment, a query that reads it, a crash
    /// there with `crash`, then the put goes on.
    async fn gated(&mut self, r: usize, crash: bool) -> Heard {
        let (reached_tx, reached) = oneshot::channel::<()>();
        let (open, open_rx) = oneshot::channel::<()>();
        self.durable.before_next_put_matching(
            is_segment,
            Box::new(move || {
                Box::pin(async move {
                    let _ = reached_tx.send(());
                    let _ = open_rx.await;
                })
            }),
        );
        let id = self.fresh("g");
        let mut sending = actix_rt::spawn(self.send_credit(r, &id, true));
        // The put is reached, or the command was refused before it (another replica holds the
        // tenant, a lapsed lease) and its caller has heard.
        let reached = tokio::select! {
            reached = tokio::time::timeout(STEP, reached) => matches!(reached, Ok(Ok(()))),
            heard = &mut sending => {
                drop(open);
                let heard = Heard::from(heard.unwrap());
                self.record(&id, true, &heard);
                return heard;
            }
        };
        if !reached {
            // Refused before its put (another replica holds the tenant, a lapsed lease).
            drop(open);
            let heard = Heard::from(sending.await.unwrap());
            self.record(&id, true, &heard);
            return heard;
        }
        let probe = fresh_probe();
        let reading = actix_rt::spawn(self.sups[r].send(
            &addr(),
            Credits {
                probe: Some(probe.clone()),
            },
        ));
        let until = tokio::time::Instant::now() + STEP;
        while !has_read(&probe) && !reading.is_finished() && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if crash && let Some(t) = self.sups[r].tenant(&addr().org, &addr().tenant).await {
            let _ = t.abandon().await;
        }
        let _ = open.send(());
        let wrote = Heard::from(sending.await.unwrap());
        self.record(&id, true, &wrote);
        let read = Heard::from(reading.await.unwrap());
        if let Heard::Ids(ids) = &read {
            self.reads.push(ids.clone());
        }
        Heard::Both(Box::new(wrote), Box::new(read))
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
    pub async fn check(&mut self) -> Result<(), String> {
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
        for read in &self.reads {
            let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
            for id in read {
                *shown.entry(id).or_default() += 1;
            }
            if let Some((id, _)) = shown
                .iter()
                .find(|(id, n)| count.get(*id).copied().unwrap_or(0) < **n)
            {
                return Err(format!(
                    "a query showed {id}, which the log does not hold: {read:?}"
                ));
            }
            if let Some(id) = self
                .acked_before
                .iter()
                .find(|id| !shown.contains_key(id.as_str()))
            {
                return Err(format!(
                    "a query missed {id}, acknowledged before it was sent: {read:?}"
                ));
            }
        }
        Ok(())
    }

    /// Clears every fault, lands what was held, lets every lease run out, and retries every
    /// keyed command not yet answered until it is; then each keyed id is in the log once.
    pub async fn settle(&mut self) -> Result<(), String> {
        self.leases.disarm_late();
        self.leases.set_down(false);
        self.leases.land_held().await;
        self.advance(TTL_MS + 1);
        let open: Vec<String> = self
            .fates
            .iter()
            .filter(|(_, f)| f.keyed && !f.acked)
            .map(|(id, _)| id.clone())
            .collect();
        for id in open {
            let mut heard = Heard::Skipped;
            for r in (0..REPLICAS).cycle().take(4) {
                // Renewals find the leases that ran out: their tenants stop, and the tenant
                // can be opened again.
                for sup in &self.sups {
                    let _ = sup.renew_now().await;
                }
                self.replies.clear();
                heard = self.credit(r, id.clone(), true).await;
                if matches!(heard, Heard::Credited(_)) {
                    break;
                }
                self.advance(TTL_MS + 1);
            }
            if !matches!(heard, Heard::Credited(1)) {
                return Err(format!("the retry of {id} came to {heard:?}"));
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

/// What a lifecycle call came to.
fn done(r: Result<(), Error>) -> Heard {
    match r {
        Ok(()) => Heard::Done,
        Err(e) => Heard::from(Err::<u32, _>(e)),
    }
}

/// A probe no other world of this process uses.
fn fresh_probe() -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    format!("probe-{}-{n}", std::process::id())
}

fn has_read(probe: &str) -> bool {
    PROBES
        .lock()
        .unwrap()
        .as_ref()
        .is_some_and(|p| p.contains(probe))
}
