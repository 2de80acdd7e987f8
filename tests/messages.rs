//! Typed messages to tenant addresses on one replica (docs/guarantees.md, promise 11; read it
//! as an example): a host defines its commands and queries as serde types, registers them when
//! the replica starts, and sends them to `(org, tenant)` — never holding a tenant's handle.
//!
//! The bank below has two commands (`Deposit`, `Withdraw`) and a query (`Balance`). The tests
//! in this file follow one story (send, open on the first message, query, a second replica told
//! who holds the tenant, a handoff, a message waiting for it); `gate.rs` pins the output gate
//! (no reply shows a write a crash could take back), `idempotency.rs` exactly-once delivery of
//! keyed commands across handoffs and crashes, `refusals.rs` bad input.

mod common;
#[path = "messages/figures.rs"]
mod figures;
#[path = "messages/gate.rs"]
mod gate;
#[path = "messages/hostile.rs"]
mod hostile;
#[path = "messages/idempotency.rs"]
mod idempotency;
#[path = "messages/refusals.rs"]
mod refusals;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use leasehold::ledger::{LedgerError, LedgerRead, LedgerTx};
use leasehold_actors::{
    Event, Messages, RuntimeConfig, TenantAddr, TenantMessage, TenantQuery, TenantStatus,
};
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------------
// The host's messages.

/// Puts money into an account; answers the balance after it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Deposit {
    pub account: String,
    pub cents: i64,
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
            "INSERT INTO accounts VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET cents = cents + excluded.cents",
            (&self.account, self.cents),
        )?;
        ledger.query_row(
            "SELECT cents FROM accounts WHERE name = ?1",
            [&self.account],
            |r| r.get(0),
        )
    }
}

/// Takes money out of an account, refused (and rolled back) past the balance.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Withdraw {
    pub account: String,
    pub cents: i64,
}

impl TenantMessage for Withdraw {
    type Reply = i64;
    const NAME: &'static str = "bank.withdraw";

    fn handle(self, ledger: &mut LedgerTx<'_>) -> Result<i64, LedgerError> {
        let left = Deposit {
            account: self.account,
            cents: -self.cents,
        }
        .handle(ledger)?;
        if left < 0 {
            // An error rolls back this command's writes only.
            return Err(LedgerError::Host(format!("insufficient funds: {left}")));
        }
        Ok(left)
    }
}

/// An account's balance, read beside the writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Balance {
    pub account: String,
}

impl TenantQuery for Balance {
    type Reply = i64;
    const NAME: &'static str = "bank.balance";

    fn query(self, ledger: &LedgerRead<'_>) -> Result<i64, LedgerError> {
        balance(ledger, &self.account)
    }
}

fn balance(ledger: &LedgerRead<'_>, account: &str) -> Result<i64, LedgerError> {
    let tables: i64 = ledger.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE name = 'accounts'",
        [],
        |r| r.get(0),
    )?;
    if tables == 0 {
        return Ok(0);
    }
    let cents: Option<i64> = ledger.query_row(
        "SELECT sum(cents) FROM accounts WHERE name = ?1",
        [account],
        |r| r.get(0),
    )?;
    Ok(cents.unwrap_or(0))
}

/// The bank's registry: what every replica of the fleet registers.
pub fn bank_messages() -> Messages {
    Messages::new()
        .command::<Deposit>()
        .and_then(Messages::command::<Withdraw>)
        .and_then(Messages::query::<Balance>)
        .and_then(Messages::query::<Report>)
        .and_then(Messages::command::<Scribble>)
        .expect("distinct names")
}

/// A fleet replica with the bank registered.
pub fn bank(c: &mut RuntimeConfig) {
    c.messages = bank_messages();
}

pub fn addr() -> TenantAddr {
    TenantAddr::new(org(), tenant())
}

pub fn deposit(account: &str, cents: i64) -> Deposit {
    Deposit {
        account: account.into(),
        cents,
    }
}

pub fn balance_of(account: &str) -> Balance {
    Balance {
        account: account.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Test-only messages: a query the tests can watch and hold, a command that breaks the rules.

/// Accounts whose `Report` has read (a test waits for its own).
static READ: Mutex<Vec<String>> = Mutex::new(Vec::new());
/// Accounts whose held `Report` may return.
static RELEASED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// [`Balance`], which says when it has read and, with `hold`, then waits until released.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub account: String,
    pub hold: bool,
}

impl TenantQuery for Report {
    type Reply = i64;
    const NAME: &'static str = "test.report";

    fn query(self, ledger: &LedgerRead<'_>) -> Result<i64, LedgerError> {
        let cents = balance(ledger, &self.account)?;
        READ.lock().unwrap().push(self.account.clone());
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while self.hold && std::time::Instant::now() < until {
            let released = RELEASED.lock().unwrap();
            if released.as_ref().is_some_and(|r| r.contains(&self.account)) {
                break;
            }
            drop(released);
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(cents)
    }
}

/// Waits (bounded) until a `Report` of `account` has read.
pub async fn report_has_read(account: &str) {
    eventually(5_000, "the report to have read", || async {
        READ.lock().unwrap().iter().any(|a| a == account)
    })
    .await;
}

/// Lets the held `Report` of `account` return.
pub fn release_report(account: &str) {
    RELEASED
        .lock()
        .unwrap()
        .get_or_insert_with(HashSet::new)
        .insert(account.into());
}

/// A command that runs the SQL it carries: how tests reach the runtime's own table.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scribble {
    pub sql: String,
}

impl TenantMessage for Scribble {
    type Reply = usize;
    const NAME: &'static str = "test.scribble";

    fn handle(self, ledger: &mut LedgerTx<'_>) -> Result<usize, LedgerError> {
        ledger.execute(&self.sql, [])
    }
}

// ---------------------------------------------------------------------------------------------
// The story.

#[actix_rt::test]
async fn promise11_a_message_to_an_address_opens_the_tenant_runs_and_is_queried_beside_the_writes()
{
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    // Nobody holds the tenant: the first message opens it here.
    assert_eq!(a.sup.send(&addr(), deposit("alice", 500)).await, Ok(500));
    assert!(a.sup.tenant(&org(), &tenant()).await.is_some(), "open here");
    assert_eq!(a.sup.send(&addr(), deposit("alice", 250)).await, Ok(750));
    // A refused command rolls back its own writes only.
    let refused = a
        .sup
        .send(
            &addr(),
            Withdraw {
                account: "alice".into(),
                cents: 1_000,
            },
        )
        .await;
    assert!(
        matches!(refused, Err(ref e) if e.code() == "LEASEHOLD_LEDGER"),
        "{refused:?}"
    );
    assert_eq!(a.sup.send(&addr(), balance_of("alice")).await, Ok(750));
    // A second replica is told who holds it (forwarding comes with the transport).
    let b = fleet.replica_with("b", "b", bank);
    let held = b.sup.send(&addr(), balance_of("alice")).await;
    assert!(
        matches!(held, Err(leasehold::Error::LeaseHeld { ref owner, .. }) if owner == "a"),
        "{held:?}"
    );
    // Handed off, nobody holds it: b's next message opens it there, with everything.
    let t = a.sup.tenant(&org(), &tenant()).await.unwrap();
    t.handoff().await.unwrap();
    assert_eq!(
        b.sup
            .ask(&addr(), balance_of("alice"), Duration::from_secs(5))
            .await,
        Ok(750)
    );
    assert_eq!(b.sup.send(&addr(), deposit("alice", 1)).await, Ok(751));
}

#[actix_rt::test]
async fn promise11_a_slow_query_does_not_hold_up_writes_and_reads_the_state_it_began_on() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    let account = "slow-report";
    a.sup.send(&addr(), deposit(account, 10)).await.unwrap();
    let report = actix_rt::spawn({
        let sup = a.sup.clone();
        async move {
            let held = Report {
                account: account.into(),
                hold: true,
            };
            sup.send(&addr(), held).await
        }
    });
    report_has_read(account).await;
    // The report is still reading (held); writes go on beside it.
    let written = within(3_000, "a write beside a held query", async {
        a.sup.send(&addr(), deposit(account, 5)).await
    })
    .await;
    assert_eq!(written, Ok(15));
    assert!(!report.is_finished(), "the report is still held");
    release_report(account);
    let read = within(5_000, "the report", report).await.unwrap();
    assert_eq!(read, Ok(10), "the state committed when the query began");
}

#[actix_rt::test]
async fn promise11_a_query_never_answers_on_a_replica_whose_lease_does_not_hold() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    let account = "lapsing";
    a.sup.send(&addr(), deposit(account, 10)).await.unwrap();
    // The lease runs out while the query reads: checked again before it answers.
    let report = actix_rt::spawn({
        let sup = a.sup.clone();
        async move {
            let held = Report {
                account: account.into(),
                hold: true,
            };
            sup.send(&addr(), held).await
        }
    });
    report_has_read(account).await;
    a.clock.as_ref().unwrap().advance(TTL);
    release_report(account);
    let read = within(5_000, "the report", report).await.unwrap();
    assert!(
        matches!(read, Err(ref e) if e.is_fenced()),
        "a lapse during the query: {read:?}"
    );
    // And before: refused at once.
    let later = a.sup.send(&addr(), balance_of(account)).await;
    assert!(matches!(later, Err(ref e) if e.is_fenced()), "{later:?}");
}

#[actix_rt::test]
async fn promise11_a_message_for_a_tenant_draining_here_waits_for_it_to_leave_then_opens_it_again()
{
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    a.sup.send(&addr(), deposit("carol", 7)).await.unwrap();
    let t = a.sup.tenant(&org(), &tenant()).await.unwrap();
    let ticket = t.admit().await.unwrap();
    let handoff = actix_rt::spawn({
        let t = t.clone();
        async move { t.handoff().await }
    });
    until_status(&t, TenantStatus::Draining).await;
    let waiting = actix_rt::spawn({
        let sup = a.sup.clone();
        async move { sup.send(&addr(), deposit("carol", 1)).await }
    });
    // Time for the message to reach the draining tenant and start waiting (the event below
    // says it did: a slower start fails this test, it cannot pass it).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "it waits while the tenant drains");
    // Admitted work finishes; the handoff releases the lease; the message, which waited
    // meanwhile, finds nobody holding the tenant and opens it here again.
    ticket.run(|_| Ok(())).await.unwrap();
    drop(ticket);
    handoff.await.unwrap().unwrap();
    assert_eq!(
        within(5_000, "the waiting message", waiting).await.unwrap(),
        Ok(8)
    );
    let reopened = a.sup.tenant(&org(), &tenant()).await.unwrap();
    assert!(reopened.epoch() > t.epoch(), "a new tenure");
    assert!(
        a.saw(|e| matches!(e, Event::MessageWaited { .. })).await,
        "the wait is told"
    );
}

/// A tenant the first message opened (no host ever held a handle of it) is handed off by
/// `close()` like any other: flushed, its lease released, nothing reported unflushed.
#[actix_rt::test]
async fn promise6_close_hands_off_a_tenant_a_message_opened() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    assert_eq!(a.sup.send(&addr(), deposit("alice", 500)).await, Ok(500));
    let unflushed = a.sup.close().await.unwrap();
    assert!(unflushed.is_empty(), "unflushed at close: {unflushed:?}");
    let b = fleet.replica_with("b", "b", bank);
    assert_eq!(b.sup.send(&addr(), balance_of("alice")).await, Ok(500));
}

/// Where a replica found a tenant held elsewhere is remembered only until it opens the tenant
/// itself (docs/architecture.md, "The path of a forwarded message"): after b hands the tenant
/// off and a opens it, a's next message runs here, and neither a nor b forwards anything —
/// the memory of b would have sent it to b, which would have sent it back.
#[actix_rt::test]
async fn promise11_a_tenant_opened_here_is_no_longer_sent_where_it_was_found_before() {
    use std::net::SocketAddr;

    use leasehold_actors::{FleetKey, TransportConfig};

    let fleet = Fleet::new().await;
    let fleet_member = |c: &mut RuntimeConfig| {
        bank(c);
        let key = FleetKey::new(vec![5; 32]).unwrap();
        let bind = SocketAddr::from(([127, 0, 0, 1], 0));
        c.transport = Some(TransportConfig::new(bind, key));
    };
    let a = fleet.replica_with("a", "a", fleet_member);
    let b = fleet.replica_with("b", "b", fleet_member);
    let forwards = |events: Vec<Event>| {
        events
            .iter()
            .filter(|e| matches!(e, Event::Forwarded { .. }))
            .count()
    };
    assert_eq!(b.sup.send(&addr(), deposit("dora", 1)).await, Ok(1));
    assert_eq!(a.sup.send(&addr(), deposit("dora", 2)).await, Ok(3));
    assert_eq!(
        forwards(a.events().await),
        1,
        "forwarded to b, which a now remembers"
    );
    let t = b.sup.tenant(&org(), &tenant()).await.unwrap();
    t.handoff().await.unwrap();
    drop(t);
    let here = a.sup.open(&org(), &tenant()).await.unwrap();
    assert_eq!(a.sup.send(&addr(), deposit("dora", 4)).await, Ok(7));
    assert_eq!(forwards(a.events().await), 1, "run here, not sent to b");
    assert_eq!(forwards(b.events().await), 0, "nothing came back through b");
    drop(here);
    for r in [&a, &b] {
        assert!(r.sup.close().await.unwrap().is_empty());
    }
}
