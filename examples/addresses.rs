//! Tenant addresses: a host sends typed messages to `(org, tenant)` from any replica and never
//! needs to know which replica holds the tenant (docs/guarantees.md, promise 11;
//! docs/architecture.md, "The path of a forwarded message").
//!
//! The host defines two commands (`Deposit`, `Withdraw`) and a query (`Balance`), registers them
//! on two replicas that share one lease store and one durable store and each run a transport on
//! loopback, and sends to one address from both. The first message opens the tenant where it
//! arrives (A); B's messages are forwarded to A. Mid-way A hands the tenant off while B keeps
//! sending: B's messages wait out the handoff and the next one opens the tenant on B; from then
//! on A's messages are forwarded to B. The balance is the same from both replicas throughout.
//!
//! Run: `cargo run --example addresses` (real replicas in one process; two tenant ledgers,
//! a lease file and a durable directory in a temp dir, removed at the end).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::lease::ReplicaView;
use leasehold::ledger::{LedgerError, LedgerRead, LedgerTx};
use leasehold::route::Placement;
use leasehold::{LeaseKey, OrgId, ReplicaId, TenantId};
use leasehold_actors::{
    DirStore, EventLog, FleetKey, LeaseStore, Messages, RuntimeConfig, SqliteLeaseStore,
    Supervisor, TenantAddr, TenantMessage, TenantQuery, TransportConfig,
};
use serde::{Deserialize, Serialize};

type BoxError = Box<dyn std::error::Error>;

/// A command: adds `cents` to `account`; answers the new balance.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Deposit {
    account: String,
    cents: i64,
}

impl TenantMessage for Deposit {
    type Reply = i64;
    const NAME: &'static str = "bank.deposit";

    fn handle(self, ledger: &mut LedgerTx<'_>) -> Result<i64, LedgerError> {
        ledger.execute(
            "CREATE TABLE IF NOT EXISTS accounts (name TEXT PRIMARY KEY, cents INTEGER NOT NULL)",
            [],
        )?;
        ledger.execute(
            "INSERT INTO accounts VALUES (?1, ?2) \
             ON CONFLICT (name) DO UPDATE SET cents = cents + ?2",
            rusqlite::params![self.account, self.cents],
        )?;
        ledger.query_row(
            "SELECT cents FROM accounts WHERE name = ?1",
            [&self.account],
            |r| r.get(0),
        )
    }
}

/// A command: takes `cents` from `account` if it holds them; answers whether it did.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Withdraw {
    account: String,
    cents: i64,
}

impl TenantMessage for Withdraw {
    type Reply = bool;
    const NAME: &'static str = "bank.withdraw";

    fn handle(self, ledger: &mut LedgerTx<'_>) -> Result<bool, LedgerError> {
        let changed = ledger.execute(
            "UPDATE accounts SET cents = cents - ?2 WHERE name = ?1 AND cents >= ?2",
            rusqlite::params![self.account, self.cents],
        )?;
        Ok(changed == 1)
    }
}

/// A read-only query: the balance of `account` (runs on a read connection of its own).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Balance {
    account: String,
}

impl TenantQuery for Balance {
    type Reply = i64;
    const NAME: &'static str = "bank.balance";

    fn query(self, ledger: &LedgerRead<'_>) -> Result<i64, LedgerError> {
        // One row even for an account never seen (the first deposit creates the table).
        ledger.query_row(
            "SELECT coalesce(sum(cents), 0) FROM accounts WHERE name = ?1",
            [&self.account],
            |r| r.get(0),
        )
    }
}

/// The host's placement: where a tenant nobody holds opens. Until the host names a home, where
/// the message arrived (locality, as `Stay`); once it names one (a host moving a tenant, here
/// before the handoff), there — so that the messages waiting out the handoff open the tenant on
/// its new home and not back where they waited. Shared by both replicas of this process; a
/// fleet keeps such a choice where every replica reads it (or uses `Rendezvous`).
#[derive(Debug, Default)]
struct Home(Mutex<Option<String>>);

impl Placement for Home {
    fn place(&self, _: &LeaseKey, me: &str, live: &[ReplicaView]) -> Option<ReplicaView> {
        let home = self.0.lock().ok()?.clone()?;
        (home != me)
            .then(|| live.iter().find(|r| r.id == home).cloned())
            .flatten()
    }
}

/// What every replica of the fleet registers.
fn bank() -> Result<Messages, leasehold::Error> {
    Messages::new()
        .command::<Deposit>()?
        .command::<Withdraw>()?
        .query::<Balance>()
}

/// A replica: its own state root, the shared stores, a transport on a free loopback port.
fn replica(
    dir: &Path,
    id: &str,
    leases: &Arc<SqliteLeaseStore>,
    durable: &Arc<DirStore>,
    log: &EventLog,
    home: &Arc<Home>,
) -> Result<Supervisor, BoxError> {
    let mut c = RuntimeConfig::new(
        ReplicaId::new(id)?,
        dir.join(id),
        leases.clone(),
        durable.clone(),
    );
    c.messages = bank()?;
    // Every replica of a fleet shares the key; use random bytes (`openssl rand -hex 32`).
    let key = FleetKey::new(*b"example-fleet-key-of-32-bytes!!!")?;
    let mut transport = TransportConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), key);
    transport.placement = home.clone();
    c.transport = Some(transport);
    c.observer = Some(Arc::new(log.clone()));
    Ok(Supervisor::start(c)?)
}

/// Who holds the tenant, by the lease store's word.
async fn holder(leases: &SqliteLeaseStore, addr: &TenantAddr) -> Result<String, BoxError> {
    let seen = leases.lookup(&addr.key()).await?;
    Ok(match seen.live_holder() {
        Some((id, epoch)) => format!("{id} (epoch {epoch})"),
        None => "nobody".into(),
    })
}

/// How many events of `kind` `log`'s replica emitted.
fn count(log: &EventLog, kind: &str) -> usize {
    log.events().iter().filter(|e| e.kind() == kind).count()
}

/// How many messages `log`'s replica forwarded.
fn forwarded(log: &EventLog) -> usize {
    count(log, "forwarded")
}

async fn run() -> Result<(), BoxError> {
    let dir = tempfile::tempdir()?;
    let leases = Arc::new(SqliteLeaseStore::open(&dir.path().join("leases.db"))?);
    let durable = Arc::new(DirStore::open(&dir.path().join("durable"))?);
    let (log_a, log_b) = (EventLog::new(), EventLog::new());
    let home = Arc::new(Home::default());
    let a = replica(dir.path(), "replica-a", &leases, &durable, &log_a, &home)?;
    let b = replica(dir.path(), "replica-b", &leases, &durable, &log_b, &home)?;
    let (org, tenant) = (OrgId::new("acme")?, TenantId::new("alice")?);
    let addr = TenantAddr::new(org.clone(), tenant.clone());
    let account = || "checking".to_string();
    let deposit = |cents| Deposit {
        account: account(),
        cents,
    };

    let now = a.send(&addr, deposit(100)).await?;
    println!(
        "A: deposit 100 -> balance {now}; nobody held the tenant, so it opened where the message \
         arrived: held by {}",
        holder(&leases, &addr).await?
    );
    let now = b.send(&addr, deposit(50)).await?;
    println!(
        "B: deposit 50 -> balance {now}; B forwarded it to the holder ({} forward by B)",
        forwarded(&log_b)
    );
    let seen_a = a.send(&addr, Balance { account: account() }).await?;
    let seen_b = b.send(&addr, Balance { account: account() }).await?;
    println!("balance asked through A: {seen_a}, through B: {seen_b}");

    // Mid-way: A hands the tenant off while B keeps sending deposits of 1.
    let sender = {
        let (b, addr) = (b.clone(), addr.clone());
        actix_rt::spawn(async move {
            let mut sent = 0;
            for _ in 0..20 {
                let deposit = Deposit {
                    account: "checking".into(),
                    cents: 1,
                };
                // A deadline longer than the handoff: a message waits for the successor.
                b.ask(&addr, deposit, Duration::from_secs(10)).await?;
                sent += 1;
                actix_rt::time::sleep(Duration::from_millis(5)).await;
            }
            Ok::<_, leasehold::Error>(sent)
        })
    };
    actix_rt::time::sleep(Duration::from_millis(30)).await;
    if let Ok(mut home) = home.0.lock() {
        *home = Some("replica-b".into());
    }
    if let Some(held) = a.tenant(&org, &tenant).await {
        held.handoff().await?;
        println!(
            "A handed the tenant off (final image written, lease released); the host named B \
             its new home"
        );
    }
    let sent = sender.await??;
    println!(
        "B: {sent} deposits of 1 sent across the handoff, every one answered ({} forwarded to A \
         in all, {} waits for the handoff to end, at A or B); the tenant is now held by {}",
        forwarded(&log_b),
        count(&log_a, "message_waited") + count(&log_b, "message_waited"),
        holder(&leases, &addr).await?
    );

    let took = a
        .send(
            &addr,
            Withdraw {
                account: account(),
                cents: 70,
            },
        )
        .await?;
    println!(
        "A: withdraw 70 -> {took}; A forwarded it to the new holder ({} forwards by A in all)",
        forwarded(&log_a)
    );
    let seen_a = a.send(&addr, Balance { account: account() }).await?;
    let seen_b = b.send(&addr, Balance { account: account() }).await?;
    println!("balance asked through A: {seen_a}, through B: {seen_b} (100 + 50 + {sent} - 70)");
    let expected = 100 + 50 + sent - 70;
    if seen_a != expected || seen_b != expected {
        return Err(format!("balance {seen_a}/{seen_b}, expected {expected}").into());
    }
    a.close().await?;
    b.close().await?;
    println!("both replicas closed");
    Ok(())
}

fn main() -> Result<(), BoxError> {
    leasehold_actors::System::new().block_on(run())
}
