//! Exactly-once delivery of keyed commands (docs/guarantees.md, promise 11, the idempotency
//! window): a command sent again with its idempotency key — a retry after a lost answer or an
//! unknown outcome — returns the reply stored with its first delivery and runs nothing, on this
//! replica or a successor after a handoff or a crash (the stored reply travels in the log).
//! Host code cannot touch the stored replies; they are pruned after `idempotency_window`.

use std::sync::Arc;
use std::time::Duration;

use leasehold::ManualClock;
use leasehold::testkit::LeaseOp;
use leasehold_actors::Breakage;

use super::common::*;
use super::*;

/// A keyed deposit.
async fn keyed(r: &Replica, key: &str, cents: i64) -> Result<i64, leasehold::Error> {
    r.sup
        .request(&addr(), deposit("ivan", cents))
        .idempotency_key(key)
        .await
}

async fn balance_on(r: &Replica) -> i64 {
    r.sup.send(&addr(), balance_of("ivan")).await.unwrap()
}

#[actix_rt::test]
async fn promise11_a_command_delivered_twice_with_one_key_runs_once_and_answers_the_same() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    assert_eq!(keyed(&a, "k-1", 10).await, Ok(10));
    assert_eq!(keyed(&a, "k-2", 10).await, Ok(20), "another key runs");
    assert_eq!(keyed(&a, "k-1", 10).await, Ok(10), "the stored reply");
    assert_eq!(balance_on(&a).await, 20, "k-1 ran once");
    assert!(
        a.saw(|e| matches!(e, Event::ReplyReplayed { name, .. } if name == "bank.deposit"))
            .await
    );
    // One key, one command: the same key for another message is refused, nothing runs.
    let reused = a
        .sup
        .request(
            &addr(),
            Withdraw {
                account: "ivan".into(),
                cents: 1,
            },
        )
        .idempotency_key("k-1")
        .await;
    assert!(
        matches!(reused, Err(leasehold::Error::BadMessage { ref reason }) if reason.contains("bank.deposit")),
        "{reused:?}"
    );
    assert_eq!(balance_on(&a).await, 20);
}

#[actix_rt::test]
async fn promise11_the_stored_reply_travels_with_the_log_across_a_handoff_and_a_crash() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    assert_eq!(keyed(&a, "k-1", 10).await, Ok(10));
    let t = a.sup.tenant(&org(), &tenant()).await.unwrap();
    t.handoff().await.unwrap();
    let b = fleet.replica_with("b", "b", bank);
    assert_eq!(keyed(&b, "k-1", 10).await, Ok(10), "after a handoff");
    assert_eq!(keyed(&b, "k-2", 5).await, Ok(15));
    // A crash: no flush; the log holds what was acknowledged, stored replies included.
    let t = b.sup.tenant(&org(), &tenant()).await.unwrap();
    t.abandon().await.unwrap();
    let c = fleet.replica_with("c", "c", bank);
    assert_eq!(keyed(&c, "k-2", 5).await, Ok(15), "after a crash");
    assert_eq!(keyed(&c, "k-1", 10).await, Ok(10));
    assert_eq!(balance_on(&c).await, 15, "each ran once");
    assert!(c.saw(|e| matches!(e, Event::ReplyReplayed { .. })).await);
}

/// A command whose tip moves all fail with an unknown outcome: its caller hears so and the
/// tenure ends. `land`: the moves timed out and land later (the write is in the log); else the
/// lease store was unreachable and none applied (it is not).
async fn retried_after_an_unknown_outcome(land: bool) -> (i64, i64) {
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica_with("a", "a", bank);
    assert_eq!(keyed(&a, "k-0", 100).await, Ok(100));
    match land {
        true => (0..3).for_each(|_| fleet.leases.land_late(LeaseOp::MoveTip)),
        false => fleet.leases.set_down(true),
    }
    let lost = keyed(&a, "k-1", 10).await;
    assert!(
        matches!(lost, Err(ref e) if e.is_outcome_unknown()),
        "the answer is lost: {lost:?}"
    );
    match land {
        true => assert_eq!(fleet.leases.land_held().await.len(), 3),
        false => fleet.leases.set_down(false),
    }
    // The failed tenure's lease is not handed back: it runs out.
    fleet.advance(TTL + Duration::from_secs(1));
    let b = fleet.replica_with("b", "b", bank);
    let retried = keyed(&b, "k-1", 10).await.unwrap();
    (retried, balance_on(&b).await)
}

#[actix_rt::test]
async fn promise11_a_retry_after_an_unknown_outcome_that_landed_returns_the_stored_reply() {
    assert_eq!(retried_after_an_unknown_outcome(true).await, (110, 110));
}

#[actix_rt::test]
async fn promise11_a_retry_after_an_unknown_outcome_that_never_landed_runs_it_once() {
    assert_eq!(retried_after_an_unknown_outcome(false).await, (110, 110));
}

#[actix_rt::test]
async fn fault_switch_a_build_that_ignores_idempotency_keys_runs_a_retry_twice() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", |c| {
        bank(c);
        c.breakage = Breakage {
            ignore_idempotency_keys: true,
            ..Breakage::default()
        };
    });
    assert_eq!(keyed(&a, "k-1", 10).await, Ok(10));
    assert_eq!(
        keyed(&a, "k-1", 10).await,
        Ok(20),
        "the broken build ran it again"
    );
}

#[actix_rt::test]
async fn promise11_host_code_cannot_forge_or_erase_a_stored_reply() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    assert_eq!(keyed(&a, "k-1", 10).await, Ok(10));
    for sql in [
        "DELETE FROM _leasehold_replies",
        "UPDATE _leasehold_replies SET reply = x'0000000000000000'",
        "INSERT INTO _leasehold_replies VALUES ('k-2', 'bank.deposit', x'0700000000000000', 0)",
        "DROP TABLE _leasehold_replies",
    ] {
        let scribble = Scribble { sql: sql.into() };
        let refused = a.sup.send(&addr(), scribble).await;
        assert!(
            matches!(refused, Err(ref e) if e.to_string().contains("_leasehold_replies")),
            "{sql}: {refused:?}"
        );
    }
    // A closure cannot either.
    let t = a.sup.tenant(&org(), &tenant()).await.unwrap();
    let refused = t
        .run(|l| l.execute("DELETE FROM _leasehold_replies", []))
        .await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(keyed(&a, "k-1", 10).await, Ok(10), "still stored");
    assert_eq!(keyed(&a, "k-2", 1).await, Ok(11), "k-2 was never forged");
}

#[actix_rt::test]
async fn promise11_a_reply_is_kept_for_the_idempotency_window_then_pruned() {
    let fleet = Fleet::new().await;
    let wall = ManualClock::new(1_700_000_000_000);
    let a = fleet.replica_with("a", "a", |c| {
        bank(c);
        c.wall_clock = Arc::new(wall.clone());
        c.idempotency_window = Duration::from_secs(3_600);
    });
    assert_eq!(keyed(&a, "k-1", 10).await, Ok(10));
    wall.advance(Duration::from_secs(3_599));
    assert_eq!(keyed(&a, "k-1", 10).await, Ok(10), "within the window");
    wall.advance(Duration::from_secs(3_602));
    // The next batch prunes what is older than the window; the key is spent.
    assert_eq!(keyed(&a, "k-2", 1).await, Ok(11));
    assert_eq!(
        keyed(&a, "k-1", 10).await,
        Ok(21),
        "a retry later than the window runs again"
    );
}
