//! The output gate (docs/guarantees.md, promise 11, "No dirty replies"): a reply — of a command
//! or of a query — leaves the replica only once every write it could have observed is
//! acknowledged; on `Shipped`, once that write's segment is in the durable store and the tip
//! moved. Each test stops a write between its local commit and its tip (a store hook), crashes
//! the tenant there (`abandon`: nothing more ships), and holds what the caller heard against
//! what the log holds — restored from the stores, never asked of the runtime. (A caller may
//! also hear a reply from the tenant opened again after the crash: a message the crash
//! refused ran nothing, so the router sends it on; that reply is the log's state.)

use std::time::Duration;

use leasehold::testkit::LeaseOp;
use leasehold_actors::{Breakage, RuntimeConfig};

use super::common::*;
use super::*;

/// Crashes the tenant open on `r` (abandon: no flush, the lease handed back).
async fn crash(r: &Replica) {
    let t = r.sup.tenant(&org(), &tenant()).await.unwrap();
    t.abandon().await.unwrap();
}

/// The balance of `account` in the log as the stores hold it: the tenant restored at its tip
/// into a plain file (`log::restore_to`), read with SQLite.
async fn restored_balance(fleet: &Fleet, account: &str) -> i64 {
    let record = fleet.leases.inner().read(&key()).await.unwrap();
    let Some(tip) = record.and_then(|r| r.tip) else {
        return 0;
    };
    let dest = fleet
        .dir
        .path()
        .join(format!("restored-{account}-{}.db", tip.seq));
    restore_as_of(fleet, tip, &dest).await.unwrap();
    let file = rusqlite::Connection::open(&dest).unwrap();
    file.query_row(
        "SELECT coalesce(sum(cents), 0) FROM accounts WHERE name = ?1",
        [account],
        |r| r.get(0),
    )
    .unwrap()
}

/// Waits until the log's tip names a segment: every write acknowledged so far is in it (also
/// on a build that answers at the local commit).
async fn until_logged(fleet: &Fleet) {
    eventually(5_000, "the first write in the log", || async {
        let record = fleet.leases.inner().read(&key()).await.unwrap();
        record.and_then(|r| r.tip).is_some()
    })
    .await;
}

/// A command whose tip move is held, and a crash there.
async fn command_crashed_before_its_tip(
    tweak: impl FnOnce(&mut RuntimeConfig),
) -> (Result<i64, leasehold::Error>, i64) {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", |c| {
        bank(c);
        tweak(c);
    });
    a.sup.send(&addr(), deposit("dave", 100)).await.unwrap();
    until_logged(&fleet).await;
    let (held, mut gate) = gated();
    fleet.leases.before_next(LeaseOp::MoveTip, held);
    let sending = actix_rt::spawn({
        let sup = a.sup.clone();
        async move { sup.send(&addr(), deposit("dave", 5)).await }
    });
    // Committed locally, its segment put; the tip has not moved.
    gate.reached().await;
    crash(&a).await;
    gate.open();
    let heard = within(5_000, "the command's caller", sending)
        .await
        .unwrap();
    (heard, restored_balance(&fleet, "dave").await)
}

#[actix_rt::test]
async fn promise11_a_commands_reply_waits_for_its_tip_and_a_crash_before_the_tip_delivers_none() {
    let (heard, restored) = command_crashed_before_its_tip(|_| {}).await;
    assert_eq!(restored, 100, "the write the log never got is not restored");
    assert!(
        matches!(heard, Err(ref e) if e.is_outcome_unknown() || e.is_fenced()),
        "no reply may show a write the log does not hold: {heard:?}"
    );
}

/// The harness can fail: a build that answers at the local commit delivers the reply of a write
/// the crash took back.
#[actix_rt::test]
async fn fault_switch_a_reply_at_the_local_commit_shows_a_write_a_crash_takes_back() {
    let (heard, restored) = command_crashed_before_its_tip(|c| {
        c.breakage = Breakage {
            ack_before_tip: true,
            ..Breakage::default()
        }
    })
    .await;
    assert_eq!(heard, Ok(105), "the broken build answered");
    assert_eq!(restored, 100, "and the successor has not got it");
}

/// A write committed locally with its segment's put held, a query that reads it, and a crash
/// there: what the query's caller heard, and what a successor restores.
async fn query_crashed_before_the_write_it_saw(
    tweak: impl FnOnce(&mut RuntimeConfig),
    account: &str,
) -> (
    Result<i64, leasehold::Error>,
    Result<i64, leasehold::Error>,
    i64,
) {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", |c| {
        bank(c);
        tweak(c);
    });
    a.sup.send(&addr(), deposit(account, 100)).await.unwrap();
    until_logged(&fleet).await;
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_segment_key, held);
    let writing = actix_rt::spawn({
        let sup = a.sup.clone();
        let d = deposit(account, 5);
        async move { sup.send(&addr(), d).await }
    });
    gate.reached().await;
    let reading = actix_rt::spawn({
        let sup = a.sup.clone();
        let report = Report {
            account: account.into(),
            hold: false,
        };
        async move { sup.send(&addr(), report).await }
    });
    // The query has read the state with the unshipped write in it.
    report_has_read(account).await;
    crash(&a).await;
    gate.open();
    let read = within(5_000, "the query's caller", reading).await.unwrap();
    let wrote = within(5_000, "the command's caller", writing)
        .await
        .unwrap();
    (read, wrote, restored_balance(&fleet, account).await)
}

#[actix_rt::test]
async fn promise11_a_query_that_saw_an_unshipped_write_is_not_answered_when_a_crash_takes_it_back()
{
    let (read, wrote, restored) = query_crashed_before_the_write_it_saw(|_| {}, "erin").await;
    assert_eq!(restored, 100);
    assert!(wrote.is_err(), "{wrote:?}");
    assert!(
        read.is_err() || read == Ok(restored),
        "the query saw 105, which the log never got; it must not answer so: {read:?}"
    );
}

#[actix_rt::test]
async fn fault_switch_a_query_answered_before_the_log_shows_a_write_a_crash_takes_back() {
    let broken = |c: &mut RuntimeConfig| {
        c.breakage = Breakage {
            reply_before_log: true,
            ..Breakage::default()
        }
    };
    let (read, _, restored) = query_crashed_before_the_write_it_saw(broken, "frank").await;
    assert_eq!(read, Ok(105), "the broken build answered a dirty read");
    assert_eq!(restored, 100);
}

#[actix_rt::test]
async fn promise11_a_query_is_answered_once_the_write_it_saw_is_in_the_log() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    let account = "gina";
    a.sup.send(&addr(), deposit(account, 100)).await.unwrap();
    let (held, mut gate) = gated();
    fleet.leases.before_next(LeaseOp::MoveTip, held);
    let writing = actix_rt::spawn({
        let sup = a.sup.clone();
        async move { sup.send(&addr(), deposit(account, 5)).await }
    });
    gate.reached().await;
    let reading = actix_rt::spawn({
        let sup = a.sup.clone();
        let report = Report {
            account: account.into(),
            hold: false,
        };
        async move { sup.send(&addr(), report).await }
    });
    report_has_read(account).await;
    // The tip moves: the write is acknowledged, and so is the read that saw it.
    gate.open();
    assert_eq!(within(5_000, "the write", writing).await.unwrap(), Ok(105));
    assert_eq!(within(5_000, "the read", reading).await.unwrap(), Ok(105));
}

#[actix_rt::test]
async fn promise11_a_deadline_that_passes_while_a_command_waits_for_its_tip_is_an_unknown_outcome()
{
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    a.sup.send(&addr(), deposit("hana", 1)).await.unwrap();
    let (held, mut gate) = gated();
    fleet.leases.before_next(LeaseOp::MoveTip, held);
    let sending = actix_rt::spawn({
        let sup = a.sup.clone();
        async move {
            sup.ask(&addr(), deposit("hana", 1), Duration::from_millis(300))
                .await
        }
    });
    gate.reached().await;
    let heard = within(5_000, "the caller", sending).await.unwrap();
    assert!(
        matches!(
            heard,
            Err(leasehold::Error::DeadlineExceeded {
                outcome_unknown: true,
                ..
            })
        ),
        "{heard:?}"
    );
    gate.open();
    // It did commit and ship after all: an unknown outcome, not a refusal.
    assert_eq!(a.sup.send(&addr(), balance_of("hana")).await, Ok(2));
}
