//! H — graceful handoff (promises 1, 2, 4 in docs/guarantees.md): writes after the final image are refused,
//! the lease outlives the drain and the upload, a flush whose lease lapsed is reported failed,
//! a failed flush resumes service, an abandon stays abandoned.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use leasehold::Error;
use leasehold_actors::{Event, TenantStatus};

#[actix_rt::test]
async fn h1_a_write_after_the_final_image_is_taken_is_refused_so_nothing_acknowledged_is_lost() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_images("replica-a");
    let b = fleet.replica_images("replica-b");
    let t = a.open().await;
    let mut acknowledged = vec!["before-1".to_string(), "before-2".to_string()];
    for k in &acknowledged {
        insert(&t, k).await.unwrap();
    }
    let late: Arc<Mutex<Option<Result<i64, Error>>>> = Arc::default();
    let (writer, seen) = (t.clone(), late.clone());
    // Runs inside the final upload, after the image was taken: where a late writer slipped in.
    fleet.durable.before_next_put_matching(
        is_image,
        hook(async move {
            let outcome = insert(&writer, "late-1").await;
            *seen.lock().unwrap() = Some(outcome);
        }),
    );
    t.handoff().await.unwrap();
    let late = late
        .lock()
        .unwrap()
        .take()
        .expect("the hook ran during the final upload");
    if late.is_ok() {
        acknowledged.push("late-1".into());
    }
    let restored = keys_of(&b.open().await).await;
    for k in &acknowledged {
        assert!(
            restored.contains(k),
            "{k} was acknowledged; the successor holds {restored:?}"
        );
    }
    assert!(
        matches!(late, Err(ref e) if e.is_draining()),
        "the late write is refused with Draining, got {late:?}"
    );
}

#[actix_rt::test]
async fn h2_reads_are_refused_during_the_final_flush_and_work_again_when_the_flush_fails() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_images("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let read: Arc<Mutex<Option<Result<u64, Error>>>> = Arc::default();
    let (reader, seen, durable) = (t.clone(), read.clone(), fleet.durable.clone());
    fleet.durable.before_next_put_matching(
        is_image,
        hook(async move {
            let outcome = reader.run(|l| l.event_count()).await;
            *seen.lock().unwrap() = Some(outcome);
            durable.set_down(true);
        }),
    );
    let failed = t.handoff().await;
    assert!(
        matches!(failed, Err(Error::Store(_))),
        "the flush fails for want of a store: {failed:?}"
    );
    let read = read.lock().unwrap().take().expect("the hook ran");
    assert!(
        matches!(read, Err(ref e) if e.is_draining()),
        "a read during the flush is refused with Draining, got {read:?}"
    );
    fleet.durable.set_down(false);
    assert_eq!(
        t.status().await,
        TenantStatus::Serving,
        "a failed flush leaves the tenant serving"
    );
    insert(&t, "k-2").await.unwrap();
    assert_eq!(keys_of(&t).await, ["k-1", "k-2"]);
    let ticket = t.admit().await.unwrap();
    ticket
        .run(|l| l.insert_event(&leasehold::ledger::NewEvent::new("test", "k-3")))
        .await
        .unwrap();
    drop(ticket);
    t.handoff().await.unwrap();
}

#[actix_rt::test]
async fn h3_a_flush_whose_lease_lapsed_during_the_upload_is_reported_failed_not_flushed() {
    let fleet = Arc::new(Fleet::new().await);
    let a = fleet.replica_images("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let f = fleet.clone();
    // The upload outlasts the lease: when it lands, the replica no longer provably holds the tenant.
    fleet.durable.before_next_put_matching(
        is_image,
        hook(async move { f.advance(TTL + Duration::from_millis(1)) }),
    );
    let outcome = t.handoff().await;
    assert!(
        matches!(outcome, Err(ref e) if e.is_fenced()),
        "got {outcome:?}"
    );
    assert!(
        !a.flushed(&key()).await,
        "nothing claims the tenant was flushed"
    );
    assert!(
        a.saw(|e| matches!(e, Event::SnapshotFailed { .. })).await,
        "the failed snapshot is told apart"
    );
}

#[actix_rt::test]
async fn h3b_a_successor_that_took_over_during_the_upload_keeps_what_it_pinned() {
    let fleet = Arc::new(Fleet::with_store_clock().await);
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica_images("replica-a");
    let b = Arc::new(fleet.replica_images("replica-b"));
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.snapshot().await.unwrap();
    insert(&t, "k-2").await.unwrap();
    insert(&t, "k-3").await.unwrap();
    let successor: Arc<Mutex<Option<leasehold_actors::TenantRef>>> = Arc::default();
    let (f, b2, slot) = (fleet.clone(), b.clone(), successor.clone());
    fleet.durable.before_next_put_matching(
        is_image,
        hook(async move {
            f.advance(TTL + Duration::from_millis(1));
            *slot.lock().unwrap() = Some(b2.open().await);
        }),
    );
    let outcome = t.handoff().await;
    assert!(
        matches!(outcome, Err(ref e) if e.is_fenced()),
        "got {outcome:?}"
    );
    assert!(
        !a.flushed(&key()).await,
        "nothing claims the tenant was flushed"
    );
    let successor = successor
        .lock()
        .unwrap()
        .take()
        .expect("the successor took over");
    assert_eq!(
        keys_of(&successor).await,
        ["k-1"],
        "the late image is above the pinned head and is never read"
    );
}

#[actix_rt::test]
async fn h4_the_lease_is_renewed_while_a_handoff_drains_so_work_longer_than_the_lease_is_flushed() {
    let fleet = Fleet::real_time(Duration::from_millis(1_200), Duration::from_millis(200)).await;
    let a = fleet.replica("replica-a");
    let b = fleet.replica("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let ticket = t.admit().await.unwrap();
    let work = actix_rt::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2_000)).await;
        let done = insert_with(&ticket, "k-2").await;
        drop(ticket);
        done
    });
    within(10_000, "the handoff", t.handoff()).await.unwrap();
    work.await.unwrap().unwrap();
    assert!(
        !a.saw(|e| matches!(e, Event::Lost { .. })).await,
        "the lease was never lost while the drain waited"
    );
    assert_eq!(
        keys_of(&b.open().await).await,
        ["k-1", "k-2"],
        "the work that outlived the lease is in the final image"
    );
}

async fn insert_with(ticket: &leasehold_actors::Ticket, idem: &str) -> Result<Option<i64>, Error> {
    let event = leasehold::ledger::NewEvent::new("test", idem);
    ticket.run(move |l| l.insert_event(&event)).await
}

#[actix_rt::test]
async fn h5_a_handoff_that_resumes_service_after_a_failed_flush_does_not_double_the_renewals() {
    let fleet = Fleet::real_time(Duration::from_millis(900), Duration::from_millis(100)).await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        images(c);
        c.renew_every = Some(Duration::from_millis(300))
    });
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    for _ in 0..3 {
        fleet.durable.set_down(true);
        assert!(t.handoff().await.is_err());
        fleet.durable.set_down(false);
    }
    let renewals = a.renewals_during(Duration::from_millis(1_300)).await;
    assert!(
        (2..=6).contains(&renewals),
        "one chain renews every 300 ms: saw {renewals} renewals in 1.3 s"
    );
    t.handoff().await.unwrap();
}

#[actix_rt::test]
async fn h6_a_handoff_overtaken_by_an_abandon_stays_abandoned_and_flushes_nothing() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let ticket = t.admit().await.unwrap();
    let handing_off = actix_rt::spawn(t.handoff());
    until_status(&t, TenantStatus::Draining).await;
    t.abandon().await.unwrap();
    drop(ticket);
    let outcome = within(3_000, "the handoff", handing_off).await.unwrap();
    assert!(
        matches!(outcome, Err(ref e) if e.is_draining()),
        "got {outcome:?}"
    );
    assert!(
        !t.is_open().await,
        "the abandoned tenant does not serve again"
    );
    assert!(a.sup.tenant(&org(), &tenant()).await.is_none());
    let stored = fleet.stored_of_tenant().await;
    assert!(
        stored.iter().all(|k| !k.contains("snap-")),
        "nothing was flushed after the abandon: {stored:?}"
    );
}
