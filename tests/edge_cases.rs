//! Edge cases found by a mutation check of the runtime (52 deliberate bugs, one at a time): each
//! test here kills a mutant the promise-by-promise tests let live. The `mNN` in a name is the
//! mutant's number in the table of docs/testing.md ("Edge cases, mNN"); the doc line says
//! which behaviour it pins.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use leasehold::Error;
use leasehold::testkit::{LeaseOp, StoreOp};
use leasehold_actors::{Event, Observer, TenantStatus};

/// M08: a write acknowledged while a snapshot's image (taken before it) uploads is still dirty:
/// the final flush publishes it.
#[actix_rt::test]
async fn m08_a_write_committed_during_a_snapshot_upload_reaches_the_final_image() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let b = fleet.replica("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_image, held);
    let uploading = actix_rt::spawn(t.snapshot());
    gate.reached().await;
    insert(&t, "k-2").await.unwrap();
    gate.open();
    uploading.await.unwrap().unwrap();
    t.handoff().await.unwrap();
    assert_eq!(keys_of(&b.open().await).await, ["k-1", "k-2"]);
}

/// M11: a forget right after the drain settled overtakes the flush whose final image is
/// uploading: it waits for the upload, then erases it with the rest; the handoff is not flushed.
#[actix_rt::test]
async fn m11_a_forget_right_after_the_drain_settles_wins_and_no_image_outlives_it() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_images("replica-a");
    let b = fleet.replica_images("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let ticket = t.admit().await.unwrap();
    let handing_off = actix_rt::spawn(t.handoff());
    until_status(&t, TenantStatus::Draining).await;
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_image, held);
    drop(ticket); // Retire: the drain settles and the final image's upload begins ...
    gate.reached().await;
    let forgetting = actix_rt::spawn(t.forget()); // ... and a forget overtakes the flush.
    until_status(&t, TenantStatus::Forgetting).await;
    gate.open();
    let forgotten = within(5_000, "the forget", forgetting).await.unwrap();
    assert!(forgotten.is_ok(), "{forgotten:?}");
    let handoff = within(3_000, "the handoff", handing_off).await.unwrap();
    assert!(
        matches!(handoff, Err(ref e) if e.is_draining()),
        "{handoff:?}"
    );
    // The forget waited for the upload it overtook: nothing of the tenant is left.
    assert_eq!(fleet.stored_of_tenant().await, Vec::<String>::new());
    assert!(!a.flushed(&key()).await);
    fleet.advance(TTL + Duration::from_millis(1));
    assert_eq!(keys_of(&b.open().await).await, Vec::<String>::new());
}

/// M14: a flush fenced during its upload ends the tenure; the tenant does not serve again.
#[actix_rt::test]
async fn m14_a_flush_fenced_during_the_upload_ends_the_tenure() {
    let fleet = Arc::new(Fleet::new().await);
    let a = fleet.replica_images("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let f = fleet.clone();
    fleet.durable.before_next_put_matching(
        is_image,
        hook(async move { f.advance(TTL + Duration::from_millis(1)) }),
    );
    let outcome = t.handoff().await;
    assert!(
        matches!(outcome, Err(ref e) if e.is_fenced()),
        "{outcome:?}"
    );
    assert_eq!(t.status().await, TenantStatus::Abandoned);
    assert!(a.saw(|e| matches!(e, Event::Lost { .. })).await);
}

/// M29: "held" is judged by the holder's clock: a flush whose holder passed its margin during
/// the upload is reported failed, even though the store still had the lease.
#[actix_rt::test]
async fn m29_a_flush_past_the_holders_margin_is_failed_though_the_store_still_holds() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_images("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let clock = a.clock.clone().unwrap();
    fleet.durable.before_next_put_matching(
        is_image,
        hook(async move { clock.advance(TTL - MARGIN + Duration::from_millis(1)) }),
    );
    let outcome = t.handoff().await;
    assert!(
        matches!(outcome, Err(ref e) if e.is_fenced()),
        "{outcome:?}"
    );
    assert!(!a.flushed(&key()).await);
}

/// M28: a publish that gets its turn after the lease lapsed uploads nothing.
#[actix_rt::test]
async fn m28_a_snapshot_queued_behind_an_upload_whose_lease_lapsed_uploads_nothing() {
    let fleet = Arc::new(Fleet::new().await);
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_image, held);
    let first = actix_rt::spawn(t.snapshot());
    gate.reached().await;
    insert(&t, "k-2").await.unwrap();
    let second = actix_rt::spawn(t.snapshot()); // admitted now, waits for the publish lock
    t.status().await; // the mailbox is in order: the snapshot was admitted before this answer
    fleet.advance(TTL + Duration::from_millis(1));
    gate.open();
    let _ = first.await.unwrap();
    let second = second.await.unwrap();
    assert!(matches!(second, Err(ref e) if e.is_fenced()), "{second:?}");
    let stored = fleet.stored_of_tenant().await;
    assert!(
        stored.iter().all(|k| !k.contains("snap-000002")),
        "nothing was uploaded after the lapse: {stored:?}"
    );
}

/// M31: a head image that fails its checksum is skipped for the one its manifest was built on.
#[actix_rt::test]
async fn m31_a_corrupt_head_falls_back_to_its_base_image() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_images("replica-a");
    let b = fleet.replica_images("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.snapshot().await.unwrap();
    insert(&t, "k-2").await.unwrap();
    let head = t.snapshot().await.unwrap().unwrap();
    t.abandon().await.unwrap();
    let object = leasehold::layout::image_key(&key(), head.epoch, head.seq);
    let mut path = fleet.dir.path().join("durable");
    path.extend(object.split('/'));
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&path, perms).unwrap();
    std::fs::write(&path, bytes).unwrap();
    let next = b.sup.open(&org(), &tenant()).await;
    let next = next.expect("the base image is restored");
    assert_eq!(keys_of(&next).await, ["k-1"]);
}

/// M36: `close` returns the unflushed tenants in open order, not in the order they failed.
#[actix_rt::test]
async fn m36_close_reports_unflushed_tenants_in_open_order() {
    let fleet = Fleet::real_time(Duration::from_millis(3_000), Duration::from_millis(300)).await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        images(c);
        c.drain_timeout = Duration::from_millis(800);
        c.renew_every = Some(Duration::from_millis(300));
    });
    let first = a.open().await;
    let second = a.open2().await;
    insert(&first, "k-1").await.unwrap();
    insert(&second, "k-1").await.unwrap();
    let _stuck = first.admit().await.unwrap(); // fails late, at its drain deadline
    fleet.durable.set_down(true); // the second fails at once, at its flush
    let unflushed = within(5_000, "close", a.sup.close()).await.unwrap();
    fleet.durable.set_down(false);
    assert_eq!(unflushed, [key(), key2()]);
}

/// M41: without a head the next open starts empty; an abandoned local file is not recovered.
#[actix_rt::test]
async fn m41_an_abandoned_file_is_not_recovered_when_no_image_was_published() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_images("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.abandon().await.unwrap();
    assert!(a.ledger_file().exists());
    let again = a.open().await;
    assert_eq!(keys_of(&again).await, Vec::<String>::new());
}

/// M42: an open whose restore outlived the lease fails `Fenced` and hands the lease back.
#[actix_rt::test]
async fn m42_an_open_whose_restore_outlives_the_lease_is_fenced() {
    let fleet = Arc::new(Fleet::new().await);
    let a = fleet.replica("replica-a");
    let b = fleet.replica("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.handoff().await.unwrap();
    let f = fleet.clone();
    fleet.durable.before_next(
        StoreOp::Get,
        hook(async move { f.advance(TTL - MARGIN + Duration::from_millis(1)) }),
    );
    let opened = b.sup.open(&org(), &tenant()).await;
    assert!(matches!(opened, Err(ref e) if e.is_fenced()), "{opened:?}");
}

/// M43: an open that fails after the acquire hands the lease back at once.
#[actix_rt::test]
async fn m43_a_failed_open_releases_the_lease() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let b = fleet.replica("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.handoff().await.unwrap();
    fleet.durable.set_down(true);
    assert!(b.sup.open(&org(), &tenant()).await.is_err());
    fleet.durable.set_down(false);
    // No clock moves: only a released lease can be taken.
    assert_eq!(keys_of(&a.open().await).await, ["k-1"]);
}

/// M46: a renewal on request does not start a second renewal chain.
#[actix_rt::test]
async fn m46_renew_now_does_not_double_the_renewal_chain() {
    let fleet = Fleet::real_time(Duration::from_millis(900), Duration::from_millis(100)).await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        c.renew_every = Some(Duration::from_millis(300))
    });
    let t = a.open().await;
    // Renewals on request, spread over one period: a chain each would not coincide.
    for _ in 0..3 {
        a.sup.renew_now().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let renewals = a.renewals_during(Duration::from_millis(1_300)).await;
    assert!(
        (2..=6).contains(&renewals),
        "saw {renewals} renewals in 1.3 s"
    );
    t.handoff().await.unwrap();
}

/// M47: a renewal on request while one is under way waits for it; no second round trip.
#[actix_rt::test]
async fn m47_renew_now_during_a_renewal_under_way_waits_for_it() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let _t = a.open().await;
    fleet.leases.hold_renewals();
    let sup = a.sup.clone();
    let first = actix_rt::spawn(async move { sup.renew_now().await });
    eventually(1_000, "the first renewal", || async {
        fleet.leases.renewals_started() == 1
    })
    .await;
    // Drive the second call by hand until its RenewNow is queued at the lease actor, ahead of
    // the first renewal's completion: one poll asks the supervisor for the lease actor, a
    // supervisor round trip behind that question makes sure the answer is back, and one more
    // poll sends RenewNow.
    let sup = a.sup.clone();
    let mut second = Box::pin(async move { sup.renew_now().await });
    assert!(futures::poll!(&mut second).is_pending());
    let _ = a.sup.tenant(&org(), &tenant()).await;
    assert!(futures::poll!(&mut second).is_pending());
    fleet.leases.release_renewals();
    first.await.unwrap().unwrap();
    within(3_000, "the second renewal", second).await.unwrap();
    // No timer renews on a manual fleet: every round trip is one of these two calls.
    assert_eq!(
        fleet.leases.renewals_started(),
        1,
        "the second call joined the renewal under way"
    );
}

/// M48: a blocked observer whose queue is full costs events, never progress.
#[actix_rt::test]
async fn m48_a_blocked_observer_with_a_full_queue_drops_events_and_holds_nothing() {
    struct Blocking;
    impl Observer for Blocking {
        fn on_event(&self, _event: &Event) {
            std::thread::sleep(Duration::from_secs(3_600));
        }
    }
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        c.observer = Some(Arc::new(Blocking))
    });
    let t = a.open().await;
    let filling = async {
        for _ in 0..10_000 + 50 {
            a.sup.renew_now().await.unwrap();
        }
    };
    within(60_000, "renewals beside a full observer queue", filling).await;
    assert!(a.sup.events_dropped() > 0);
    within(3_000, "a handoff", t.handoff()).await.unwrap();
}

/// M50: a lease-store call that never returns is bounded by the store deadline too.
#[actix_rt::test]
async fn m50_a_hung_lease_store_call_is_bounded_by_its_deadline() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        c.store_deadline = Duration::from_millis(200)
    });
    let _t = a.open().await;
    fleet.leases.hold_renewals();
    let renewed = within(
        3_000,
        "a renewal over a hung lease store",
        a.sup.renew_now(),
    )
    .await;
    fleet.leases.release_renewals();
    assert!(renewed.is_err(), "{renewed:?}");
    assert!(a.saw(|e| matches!(e, Event::RenewFailed { .. })).await);
}

/// M51: an abandon after the final image is published and the lease is being handed back is a
/// no-op: the tenure ends once, flushed.
#[actix_rt::test]
async fn m51_an_abandon_during_the_release_of_a_flushed_handoff_is_a_no_op() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_images("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let (held, gate) = gated();
    fleet.leases.before_next(LeaseOp::Release, held);
    let handing_off = actix_rt::spawn(t.handoff());
    // The final image is published: the flush is handing the lease back (held at the gate).
    eventually(3_000, "the final image", || {
        a.saw(|e| matches!(e, Event::SnapshotPublished { .. }))
    })
    .await;
    t.abandon().await.unwrap();
    gate.open();
    within(3_000, "the handoff", handing_off)
        .await
        .unwrap()
        .unwrap();
    let released: Vec<_> = a
        .events()
        .await
        .into_iter()
        .filter(|e| matches!(e, Event::Released { .. }))
        .collect();
    assert_eq!(released.len(), 1, "{released:?}");
    assert!(a.flushed(&key()).await);
}

/// M52: a handoff of a tenant whose lease lapsed is fenced, even with nothing left to upload.
#[actix_rt::test]
async fn m52_a_handoff_after_the_lease_lapsed_is_fenced_even_when_nothing_is_dirty() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.snapshot().await.unwrap();
    a.clock.as_ref().unwrap().advance(TTL);
    let outcome = t.handoff().await;
    assert!(
        matches!(outcome, Err(ref e) if e.is_fenced()),
        "{outcome:?}"
    );
    assert!(!a.flushed(&key()).await);
}

#[allow(dead_code)]
fn _unused(_: Error) {}
