//! V — host code reaches the ledger only inside the bracket (promise 8 in docs/guarantees.md); T — `run`
//! takes a synchronous closure.
//!
//! In Rust most of the predecessor's V and T checks are facts of the type system: the
//! `compile_fail` doctests on `leasehold_actors::TenantRef` show that neither the guarded ledger,
//! a statement prepared on it, nor an async block using it can leave a `run`. The tests here pin
//! the runtime half: what host code can still try from inside the bracket changes nothing of
//! the runtime's connection, and a lease that is gone cannot be bypassed.

mod common;

use common::*;
use leasehold::Error;
use leasehold::ledger::LedgerError;

#[actix_rt::test]
async fn v1_nothing_handed_to_host_code_outlives_the_lease_so_a_lost_lease_cannot_be_bypassed() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    t.run(|l| l.execute("CREATE TABLE probe (a INTEGER)", []))
        .await
        .unwrap();
    // The replica's own clock passes the end of the lease: from here every call has to fail.
    a.clock.as_ref().unwrap().advance(TTL);
    let read = t
        .run(|l| l.query_row("SELECT count(*) FROM probe", [], |r| r.get::<_, i64>(0)))
        .await;
    assert!(matches!(read, Err(Error::Fenced { .. })), "got {read:?}");
    let write = t
        .run(|l| l.execute("INSERT INTO probe(a) VALUES (1)", []))
        .await;
    assert!(matches!(write, Err(Error::Fenced { .. })), "got {write:?}");
    let ticket = t.admit().await;
    assert!(
        matches!(ticket, Err(Error::Fenced { .. })),
        "no ticket either: {ticket:?}"
    );
}

#[actix_rt::test]
async fn v2_host_sql_cannot_close_end_or_replace_the_runtimes_connection() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    for sql in [
        "COMMIT",
        "ROLLBACK",
        "BEGIN",
        "SAVEPOINT x",
        "RELEASE x",
        "ATTACH DATABASE ':memory:' AS other",
        "DETACH DATABASE main",
        "PRAGMA journal_mode=DELETE",
        "VACUUM",
    ] {
        let tried = t.run(move |l| l.execute(sql, [])).await;
        assert!(
            matches!(tried, Err(Error::Ledger(LedgerError::Refused(_)))),
            "{sql} is refused inside the bracket, got {tried:?}"
        );
    }
    insert(&t, "k-1").await.unwrap();
    assert_eq!(
        keys_of(&t).await,
        ["k-1"],
        "the runtime's connection is still open and the write is there"
    );
    t.handoff().await.unwrap();
}

#[actix_rt::test]
async fn v3_a_closure_that_fails_or_panics_rolls_back_only_itself_and_leaves_the_ledger_as_it_was()
{
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let failed = t
        .run(|l| {
            l.insert_event(&leasehold::ledger::NewEvent::new("test", "doomed-1"))?;
            Err::<(), _>(LedgerError::Host("changed my mind".into()))
        })
        .await;
    assert!(
        matches!(failed, Err(Error::Ledger(LedgerError::Host(_)))),
        "got {failed:?}"
    );
    let panicked = t
        .run(|l| -> Result<(), LedgerError> {
            l.insert_event(&leasehold::ledger::NewEvent::new("test", "doomed-2"))?;
            panic!("host bug")
        })
        .await;
    assert!(
        matches!(panicked, Err(Error::Ledger(_))),
        "a panic is an error of that run only: {panicked:?}"
    );
    insert(&t, "k-2").await.unwrap();
    assert_eq!(keys_of(&t).await, ["k-1", "k-2"]);
}

#[actix_rt::test]
async fn t1_run_takes_a_synchronous_closure_and_what_it_returns_cannot_reach_the_ledger() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    // A future may come back out of the bracket only as plain data: it cannot borrow the ledger
    // (see the compile_fail doctest on `TenantRef`), so nothing it does later escapes the lease.
    let later = t.run(|_| Ok(async { 42 })).await.unwrap();
    assert_eq!(later.await, 42);
    // Long work takes a ticket and comes back through it, inside the lease and the drain.
    let ticket = t.admit().await.unwrap();
    let handing_off = actix_rt::spawn(t.handoff());
    until_status(&t, leasehold_actors::TenantStatus::Draining).await;
    let event = leasehold::ledger::NewEvent::new("test", "k-1");
    ticket.run(move |l| l.insert_event(&event)).await.unwrap();
    drop(ticket);
    within(3_000, "the handoff", handing_off)
        .await
        .unwrap()
        .unwrap();
}
