//! F — forget (promise 5 in docs/guarantees.md): an upload under way cannot leave the tenant's image behind,
//! forget wins against a handoff, and deletes only what is at or below the floor it raised.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use leasehold::LeaseStore;
use leasehold::testkit::LeaseOp;
use leasehold_actors::{Event, TenantRef};

/// A forget waiting behind a snapshot whose image upload is held at the store.
struct ForgetBehindUpload {
    /// The snapshot.
    uploading:
        actix_rt::task::JoinHandle<Result<Option<leasehold::layout::ImageRef>, leasehold::Error>>,
    /// The forget, sent while the upload was held.
    forgetting: actix_rt::task::JoinHandle<Result<(), leasehold::Error>>,
    /// Lets the upload go on.
    gate: Gate,
}

/// Starts a snapshot of `t`, waits until its image is held at the store, then starts a forget.
async fn forget_behind_held_upload(fleet: &Fleet, t: &TenantRef) -> ForgetBehindUpload {
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_image, held);
    let uploading = actix_rt::spawn(t.snapshot());
    gate.reached().await;
    let forgetting = actix_rt::spawn(t.forget());
    ForgetBehindUpload {
        uploading,
        forgetting,
        gate,
    }
}

#[actix_rt::test]
async fn f1_a_snapshot_upload_under_way_cannot_outlive_forget() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let ForgetBehindUpload {
        uploading,
        forgetting,
        gate,
    } = forget_behind_held_upload(&fleet, &t).await;
    gate.open();
    let _ = within(3_000, "the snapshot", uploading).await;
    within(3_000, "forget", forgetting).await.unwrap().unwrap();
    assert_eq!(
        fleet.stored_of_tenant().await,
        Vec::<String>::new(),
        "no image or manifest is left"
    );
    let root = leasehold::ids::tenant_root(&a.state_root, &org(), &tenant());
    assert!(!root.exists(), "and no local file");
}

#[actix_rt::test]
async fn f2_a_snapshot_requested_after_forget_has_begun_is_refused_and_uploads_nothing() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let forgetting = t.forget();
    let snapshot = t.snapshot().await;
    assert!(
        matches!(snapshot, Err(ref e) if e.is_draining()),
        "got {snapshot:?}"
    );
    forgetting.await.unwrap();
    assert_eq!(fleet.stored_of_tenant().await, Vec::<String>::new());
}

#[actix_rt::test]
async fn f3_forget_during_the_final_flush_wins_and_nothing_of_the_tenant_stays() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_images("replica-a");
    let b = fleet.replica_images("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    insert(&t, "k-2").await.unwrap();
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_image, held);
    let handing_off = actix_rt::spawn(t.handoff());
    gate.reached().await; // the final image is in flight
    let forgetting = actix_rt::spawn(t.forget());
    until_status(&t, leasehold_actors::TenantStatus::Forgetting).await;
    gate.open();
    let handoff = within(3_000, "the handoff", handing_off).await.unwrap();
    let forgotten = within(3_000, "forget", forgetting).await.unwrap();
    assert!(forgotten.is_ok(), "forget resolved: {forgotten:?}");
    assert!(
        matches!(handoff, Err(ref e) if e.is_draining()),
        "the handoff is refused with Draining: {handoff:?}"
    );
    assert_eq!(
        fleet.stored_of_tenant().await,
        Vec::<String>::new(),
        "nothing of the tenant is left"
    );
    assert!(
        !a.flushed(&key()).await,
        "nothing claims the tenant was flushed"
    );
    assert_eq!(
        keys_of(&b.open().await).await,
        Vec::<String>::new(),
        "the successor starts empty"
    );
}

#[actix_rt::test]
async fn f4_forget_keeps_the_lease_renewed_while_it_waits_for_a_slow_upload() {
    let fleet = Fleet::real_time(Duration::from_millis(1_000), Duration::from_millis(150)).await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        c.renew_every = Some(Duration::from_millis(250))
    });
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.snapshot().await.unwrap();
    insert(&t, "k-2").await.unwrap();
    fleet
        .durable
        .slow_put(is_image, Duration::from_millis(2_000));
    let uploading = actix_rt::spawn(t.snapshot());
    let forgotten = within(10_000, "forget over a slow upload", t.forget()).await;
    let _ = uploading.await;
    assert!(forgotten.is_ok(), "forget resolved: {forgotten:?}");
    assert_eq!(
        fleet.stored_of_tenant().await,
        Vec::<String>::new(),
        "the image that was uploading went with the rest"
    );
}

#[actix_rt::test]
async fn f5_while_forget_waits_for_an_upload_every_call_is_refused_with_draining() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let ForgetBehindUpload {
        uploading,
        forgetting,
        gate,
    } = forget_behind_held_upload(&fleet, &t).await;
    let write = insert(&t, "late-1").await;
    assert!(
        matches!(write, Err(ref e) if e.is_draining()),
        "a write: {write:?}"
    );
    let untouched = t.run(|_| Ok(1)).await;
    assert!(
        matches!(untouched, Err(ref e) if e.is_draining()),
        "a closure that never touches the ledger: {untouched:?}"
    );
    let admitted = t.admit().await;
    assert!(
        matches!(admitted, Err(ref e) if e.is_draining()),
        "an admission: {admitted:?}"
    );
    gate.open();
    let _ = uploading.await;
    within(3_000, "forget", forgetting).await.unwrap().unwrap();
}

#[actix_rt::test]
async fn f6_while_forget_waits_an_abandon_does_not_take_the_lease_and_a_second_forget_is_refused() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let ForgetBehindUpload {
        uploading,
        forgetting,
        gate,
    } = forget_behind_held_upload(&fleet, &t).await;
    t.abandon().await.unwrap();
    let second = within(1_000, "a second forget", t.forget()).await;
    assert!(
        matches!(second, Err(ref e) if e.is_draining()),
        "got {second:?}"
    );
    gate.open();
    let _ = uploading.await;
    let forgotten = within(3_000, "forget", forgetting).await.unwrap();
    assert!(
        forgotten.is_ok(),
        "forget finished what it began: {forgotten:?}"
    );
    assert_eq!(fleet.stored_of_tenant().await, Vec::<String>::new());
}

#[actix_rt::test]
async fn f7_forget_deletes_only_at_or_below_its_floor_and_a_successor_keeps_what_it_wrote() {
    let fleet = Arc::new(Fleet::with_store_clock().await);
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica("replica-a");
    let b = Arc::new(fleet.replica("replica-b"));
    let c = fleet.replica("replica-c");
    let t = a.open().await;
    insert(&t, "a-1").await.unwrap();
    t.snapshot().await.unwrap();
    let successor: Arc<Mutex<Option<TenantRef>>> = Arc::default();
    let (f, b2, slot) = (fleet.clone(), b.clone(), successor.clone());
    // The forgetting owner pauses right after raising the floor, past its lease; a successor
    // takes over, writes and publishes above the floor.
    fleet
        .leases
        .after_next(LeaseOp::MarkForgotten, move || async move {
            f.advance(TTL + Duration::from_millis(1));
            let s = b2.open().await;
            insert(&s, "b-1").await.unwrap();
            s.snapshot().await.unwrap();
            *slot.lock().unwrap() = Some(s);
        });
    t.forget().await.unwrap();
    let successor = successor
        .lock()
        .unwrap()
        .take()
        .expect("the successor took over");
    let kept = fleet.stored(&format!("{}e00000002/", key().prefix())).await;
    assert!(
        kept.iter().any(|k| is_image(k)),
        "the successor's image is still there: {kept:?}"
    );
    let dead = fleet.stored(&format!("{}e00000001/", key().prefix())).await;
    assert_eq!(
        dead,
        Vec::<String>::new(),
        "what the forgotten tenure left is gone"
    );
    successor.abandon().await.unwrap();
    assert_eq!(
        keys_of(&c.open().await).await,
        ["b-1"],
        "the successor's crash loses nothing it published"
    );
}

#[actix_rt::test]
async fn f8_closing_waits_for_a_forget_under_way_though_the_tenant_left_the_table() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let ForgetBehindUpload {
        uploading,
        forgetting,
        gate,
    } = forget_behind_held_upload(&fleet, &t).await;
    // Judged when close returns, not after a wait: the forget must be over by then (its floor
    // raised). The gate opens once the Close has been handled (an open behind it is refused), so
    // a close that did not wait returns while the forget still has its upload, its floor and its
    // deletes ahead of it.
    let closing = actix_rt::spawn({
        let (close, leases) = (a.sup.close(), fleet.leases.clone());
        async move {
            let unflushed = close.await;
            let floor = leases.read(&key()).await.unwrap().map(|r| r.floor);
            (unflushed, floor)
        }
    });
    let refused = a.sup.open(&org(), &tenant2()).await;
    assert!(refused.is_err(), "the Close was handled: {refused:?}");
    gate.open();
    let (unflushed, floor) = within(3_000, "close", closing).await.unwrap();
    let unflushed = unflushed.unwrap();
    assert!(unflushed.is_empty(), "nothing unflushed: {unflushed:?}");
    assert_eq!(
        floor,
        Some(t.epoch()),
        "the forget raised the floor before close returned"
    );
    assert_eq!(
        fleet.stored_of_tenant().await,
        Vec::<String>::new(),
        "the forget finished before close returned"
    );
    assert!(
        a.saw(|e| matches!(e, Event::Released { flushed: false, .. }))
            .await,
        "and it handed the lease back"
    );
    within(3_000, "forget", forgetting).await.unwrap().unwrap();
    let _ = uploading.await;
}

#[actix_rt::test]
async fn a_forget_that_cannot_delete_still_ends_the_tenure_and_the_leftovers_are_swept() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let b = fleet.replica("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.snapshot().await.unwrap();
    fleet.durable.set_down(true);
    let forgotten = t.forget().await;
    assert!(
        matches!(forgotten, Err(leasehold::Error::Store(_))),
        "the caller hears the deletes failed: {forgotten:?}"
    );
    assert_eq!(
        t.status().await,
        leasehold_actors::TenantStatus::Forgotten,
        "the floor was raised: the tenant is forgotten"
    );
    eventually(3_000, "the dead local copy to go", || async {
        !a.ledger_file().exists()
    })
    .await;
    fleet.durable.set_down(false);
    // The lease was handed back: a successor opens at once, empty, and sweeps the leftovers.
    let next = b.open().await;
    assert_eq!(keys_of(&next).await, Vec::<String>::new());
    eventually(3_000, "the leftovers to be swept", || async {
        fleet
            .stored(&format!("{}e00000001/", key().prefix()))
            .await
            .is_empty()
    })
    .await;
}

/// Promise 5: once the floor is raised the forgetting replica's own copy is dead, whatever the
/// durable store answered. A forget whose erasure failed (the store down, or on PostgreSQL + S3
/// a sweep one key at a time past its deadline) removed the local directory only if the erasure
/// succeeded, and left it to the local sweep otherwise — which skips a tenant still in the
/// replica's table, so the drill found the copy at its end (`forgetter-copy`, docs/testing.md).
/// Failed before the fix: `ledger.db` was still there when the forget answered.
#[actix_rt::test]
async fn promise5_a_forget_whose_erasure_failed_leaves_no_local_copy_when_it_answers() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    fleet.durable.set_down(true);
    let forgotten = t.forget().await;
    assert!(
        matches!(forgotten, Err(leasehold::Error::Store(_))),
        "the caller hears the deletes failed: {forgotten:?}"
    );
    assert!(
        !a.ledger_file().exists(),
        "the forgetting replica's local copy is gone when the forget answers"
    );
    fleet.durable.set_down(false);
}

#[actix_rt::test]
async fn a_forget_that_cannot_raise_the_floor_ends_the_tenure_like_an_abandon() {
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica("replica-a");
    let b = fleet.replica("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.snapshot().await.unwrap();
    fleet.leases.set_down(true);
    let forgotten = t.forget().await;
    assert!(
        matches!(forgotten, Err(leasehold::Error::Store(_))),
        "{forgotten:?}"
    );
    assert_eq!(
        t.status().await,
        leasehold_actors::TenantStatus::Abandoned,
        "nothing was forgotten"
    );
    fleet.leases.set_down(false);
    // No renewal keeps the lease alive for a tenant nobody can use: it expires.
    let started = fleet.leases.renewals_started();
    a.sup.renew_now().await.unwrap();
    assert_eq!(
        fleet.leases.renewals_started(),
        started,
        "the tenure left the renewal chain"
    );
    fleet.advance(TTL + Duration::from_millis(1));
    assert_eq!(
        keys_of(&b.open().await).await,
        ["k-1"],
        "the tenant was not forgotten"
    );
}

#[actix_rt::test]
async fn an_open_on_the_replica_while_its_forget_runs_is_refused_and_works_once_it_is_over() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let ForgetBehindUpload {
        uploading,
        forgetting,
        gate,
    } = forget_behind_held_upload(&fleet, &t).await;
    until_status(&t, leasehold_actors::TenantStatus::Forgetting).await;
    // The erase will delete this replica's directory of the tenant: no new tenure may use it yet.
    let early = a.sup.open(&org(), &tenant()).await;
    assert!(
        matches!(early, Err(ref e) if e.is_draining()),
        "got {early:?}"
    );
    gate.open();
    within(3_000, "forget", forgetting).await.unwrap().unwrap();
    let _ = uploading.await;
    let again = a.open().await;
    assert_eq!(keys_of(&again).await, Vec::<String>::new());
    insert(&again, "k-2").await.unwrap();
    assert!(
        a.ledger_file().exists(),
        "the new tenure's files are in place"
    );
}
