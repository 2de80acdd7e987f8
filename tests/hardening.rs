//! The holes the hardening closed, each pinned at the public API by a test named after the hole
//! and the promise it broke (docs/guarantees.md, docs/testing.md "Hardening"). Real time is the
//! point of the bounds tested here, so they run with margins of several hundred ms.

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold::LeaseStore;
use leasehold_actors::TenantStatus;

#[actix_rt::test]
async fn hole5_promise6_a_blocking_run_cannot_stretch_a_handoff_past_its_drain_deadline() {
    let fleet = Fleet::real_time(Duration::from_millis(4_000), Duration::from_millis(400)).await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        c.drain_timeout = Duration::from_millis(300);
        c.arbiters = 1; // both tenants share one thread
    });
    let busy = a.open().await;
    let idle = a.open2().await;
    insert(&busy, "k-1").await.unwrap();
    let blocked = block_thread(&busy, 2_000).await;

    for t in [&busy, &idle] {
        let began = Instant::now();
        let err = within(3_000, "a handoff beside a blocking run", t.handoff())
            .await
            .expect_err("the drain cannot finish in time");
        assert_eq!(err.code(), "LEASEHOLD_DRAIN_TIMEOUT", "got {err}");
        assert!(
            began.elapsed() < Duration::from_millis(1_200),
            "the deadline counts from the call: {:?}",
            began.elapsed()
        );
    }
    blocked.await.unwrap();
    assert_eq!(busy.status().await, TenantStatus::Serving, "serves again");
    assert_eq!(idle.status().await, TenantStatus::Serving, "serves again");
    within(3_000, "a handoff once the thread is free", idle.handoff())
        .await
        .expect("the idle tenant hands off");
}

#[actix_rt::test]
async fn hole5_promise6_a_blocking_run_cannot_stretch_close_past_its_bound() {
    let fleet = Fleet::real_time(Duration::from_millis(4_000), Duration::from_millis(400)).await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        c.drain_timeout = Duration::from_millis(300);
        c.arbiters = 1;
    });
    let busy = a.open().await;
    insert(&busy, "k-1").await.unwrap();
    let blocked = block_thread(&busy, 2_000).await;
    let began = Instant::now();
    let unflushed = within(3_000, "close beside a blocking run", a.sup.close())
        .await
        .unwrap();
    assert!(
        began.elapsed() < Duration::from_millis(1_200),
        "close is bounded by the drain deadline: {:?}",
        began.elapsed()
    );
    assert_eq!(
        unflushed,
        [key()],
        "the blocked tenant is reported, not lost"
    );
    blocked.await.unwrap();
    assert_eq!(busy.status().await, TenantStatus::Serving);
}

#[actix_rt::test]
async fn hole4_promise3_a_write_acknowledged_while_draining_is_published_by_the_periodic_snapshot()
{
    let fleet = Fleet::real_time(Duration::from_millis(4_000), Duration::from_millis(400)).await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        images(c);
        c.drain_timeout = Duration::from_secs(20);
        c.snapshot_every = Some(Duration::from_millis(100));
    });
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.snapshot().await.unwrap();
    let published = fleet.leases.read(&key()).await.unwrap().unwrap().head;
    let ticket = t.admit().await.unwrap();
    let handoff = actix_rt::spawn(t.handoff());
    until_status(&t, TenantStatus::Draining).await;
    let write = leasehold::ledger::NewEvent::new("test", "k-2");
    ticket
        .run(move |l| l.insert_event(&write))
        .await
        .expect("a ticket write is acknowledged while draining");
    // Nothing else was dirty: the next image is taken after the write. Judged from the store.
    eventually(3_000, "an image published while draining", || async {
        fleet.leases.read(&key()).await.unwrap().unwrap().head != published
    })
    .await;
    // A crash now (the drain still waits for the ticket) loses nothing acknowledged.
    t.abandon().await.unwrap();
    drop(ticket);
    assert!(handoff.await.unwrap().is_err(), "the abandon overtook it");
    let b = fleet.replica_images("replica-b");
    let successor = b.open().await;
    assert_eq!(keys_of(&successor).await, ["k-1", "k-2"]);
}
