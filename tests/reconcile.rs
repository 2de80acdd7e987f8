//! Reconciling every put of unknown outcome, and erasure that finishes (docs/guarantees.md,
//! promise 5, "Reconciling puts of unknown outcome" and "the erasure bound").
//!
//! Each test is named after the promise it pins and plays one hole of the change log's review:
//! a put whose answer was lost (a timeout, a refusal after a timeout, a future dropped with its
//! actor) lands and nothing takes it back, or an erasure that failed once is never finished. The
//! store is judged behind its faults (`Fleet::stored`), never by the runtime's own account; the
//! replica's reconciliation runs when the test asks (`Supervisor::reconcile_now`), on the
//! fleet's manual clocks.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use common::*;
use leasehold::durable::{ListPage, Put, SharedDurableStore, StoreError};
use leasehold::layout::LogPos;
use leasehold::testkit::{LatePuts, LeaseOp};
use leasehold::{DurableStore, Error};
use leasehold_actors::TenantStatus;

/// Longer than any deadline of a put and of the move that names it in these tests
/// (`store_deadline` 10 s, small payloads: a segment's put and three tip moves of 21 s each).
const PAST_DEADLINES: Duration = Duration::from_secs(120);

/// Moves replica `r`'s clock only (the lease store's stays).
fn advance_replica(r: &Replica, by: Duration) {
    r.clock.as_ref().expect("a manual fleet").advance(by);
}

/// The objects of the main tenant's epoch `epoch`.
async fn in_epoch(fleet: &Fleet, epoch: u64) -> Vec<String> {
    let prefix = format!("{}e{epoch:08}/", key().prefix());
    fleet
        .stored_of_tenant()
        .await
        .into_iter()
        .filter(|k| k.starts_with(&prefix))
        .collect()
}

/// The image keys of the main tenant that have no manifest beside them.
async fn lone_images(fleet: &Fleet) -> Vec<String> {
    let stored = fleet.stored_of_tenant().await;
    stored
        .iter()
        .filter(|k| is_image(k))
        .filter(|k| !stored.contains(&k.replace(".db", ".json")))
        .cloned()
        .collect()
}

/// A zombie: replica `a` holds the tenant (and one write) while the store's clock let its
/// lease run out, and replica `b` acquired and forgot it (floor 2).
async fn zombie_after_a_forget(fleet: &Fleet) -> (Replica, leasehold_actors::TenantRef) {
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k1").await.unwrap();
    fleet.store_clock.advance(TTL + Duration::from_secs(1));
    let b = fleet.replica("b");
    b.open().await.forget().await.unwrap();
    (a, t)
}

#[actix_rt::test]
async fn promise5_a_slow_image_put_landing_after_a_handoff_and_the_successors_forget_is_taken_back()
{
    // Hole 5: a healthy replica hands off while an image put is slow (a logged handoff waits
    // only for the log); the successor forgets; the put lands in the forgotten epoch.
    let fleet = Fleet::new().await;
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k1").await.unwrap();
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_image, held);
    let snapshot = t.snapshot();
    gate.reached().await;
    t.handoff().await.unwrap();
    assert!(snapshot.await.is_err(), "the publish went with its tenure");
    let b = fleet.replica("b");
    b.open().await.forget().await.unwrap();
    gate.open();
    eventually(3_000, "the slow image put to land", || async {
        !lone_images(&fleet).await.is_empty()
    })
    .await;
    fleet.advance(PAST_DEADLINES);
    a.sup.reconcile_now().await.unwrap();
    let left = fleet.stored_of_tenant().await;
    assert!(left.is_empty(), "the forgotten tenant kept {left:?}");
}

#[actix_rt::test]
async fn promise5_a_zombies_segment_whose_first_tip_move_timed_out_is_taken_back_after_a_forget() {
    // Hole 6: the segment lands at or below the floor; its first tip move times out and the
    // retry is refused as not held: only a first refusal used to take the segment back.
    let fleet = Fleet::with_store_clock().await;
    let (a, t) = zombie_after_a_forget(&fleet).await;
    fleet.leases.land_late(LeaseOp::MoveTip);
    let puts = fleet.durable.puts();
    let zombie = insert(&t, "zombie").await;
    assert!(zombie.is_err(), "never acknowledged: {zombie:?}");
    assert_eq!(fleet.durable.puts(), puts + 1, "the segment landed");
    advance_replica(&a, PAST_DEADLINES);
    a.sup.reconcile_now().await.unwrap();
    let left = in_epoch(&fleet, 1).await;
    assert!(left.is_empty(), "the forgotten epoch kept {left:?}");
}

#[actix_rt::test]
async fn promise5_a_zombies_image_whose_head_move_timed_out_is_taken_back_after_a_forget() {
    // Hole 7: only a refused head move used to take the image back, never one that timed out.
    let fleet = Fleet::with_store_clock().await;
    let (a, t) = zombie_after_a_forget(&fleet).await;
    fleet.leases.land_late(LeaseOp::PublishHead);
    let puts = fleet.durable.puts();
    assert!(t.snapshot().await.is_err());
    assert_eq!(fleet.durable.puts(), puts + 2, "image and manifest landed");
    advance_replica(&a, PAST_DEADLINES);
    a.sup.reconcile_now().await.unwrap();
    let left = in_epoch(&fleet, 1).await;
    assert!(left.is_empty(), "the forgotten epoch kept {left:?}");
}

#[actix_rt::test]
async fn promise5_a_live_tenants_image_put_that_timed_out_and_landed_later_is_taken_back() {
    // Hole 8: the image lands without its manifest; retention plans from manifests, so the
    // live tenant kept it for ever.
    let fleet = Fleet::new().await;
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k1").await.unwrap();
    fleet.durable.late_puts(LatePuts::every(is_image));
    assert!(t.snapshot().await.is_err(), "the image put timed out");
    fleet.durable.clear_late_puts();
    assert_eq!(t.status().await, TenantStatus::Serving);
    fleet.durable.land_late_puts().await.unwrap();
    eventually(3_000, "the late image put to land", || async {
        !lone_images(&fleet).await.is_empty()
    })
    .await;
    fleet.advance(PAST_DEADLINES);
    a.sup.reconcile_now().await.unwrap();
    assert_eq!(lone_images(&fleet).await, Vec::<String>::new());
    assert!(
        fleet.stored_of_tenant().await.iter().all(|k| !is_image(k)),
        "no image was ever published"
    );
}

#[actix_rt::test]
async fn promise5_an_orphan_image_a_crashed_replica_left_goes_once_seen_for_the_put_lifetime() {
    // The crash case of hole 8: the process that put it died, so no replica remembers it; the
    // next tenure's look by listing finds it in a dead epoch.
    let fleet = Fleet::new().await;
    let lifetime = Duration::from_secs(20);
    let with_lifetime = |c: &mut leasehold_actors::RuntimeConfig| c.put_lifetime = lifetime;
    let a = fleet.replica_with("a", "a", with_lifetime);
    let t = a.open().await;
    insert(&t, "k1").await.unwrap();
    let orphan = format!("{}e00000001/snap-000009.db", key().prefix());
    let landed = fleet.durable.inner().put_if_absent(&orphan, b"x".to_vec());
    assert_eq!(landed.await, Ok(Put::Created));
    t.abandon().await.unwrap();
    let b = fleet.replica_with("b", "b", with_lifetime);
    let t2 = b.open().await;
    b.sup.reconcile_now().await.unwrap();
    assert_eq!(
        lone_images(&fleet).await,
        vec![orphan.clone()],
        "seen once: not yet"
    );
    for _ in 0..4 {
        fleet.advance(lifetime / 4);
        b.sup.renew_now().await.unwrap();
    }
    b.sup.reconcile_now().await.unwrap();
    assert_eq!(lone_images(&fleet).await, Vec::<String>::new());
    assert_eq!(
        keys_of(&t2).await,
        vec!["k1"],
        "the live tenant keeps its log"
    );
}

#[actix_rt::test]
async fn promise5_a_segment_put_in_flight_when_the_lease_is_found_lost_is_taken_back() {
    // Hole 10 (found by the drill's forget-paused fault): the actor stops with its ship future
    // in flight, the put lands, and the take-back that lived inside the ship never ran.
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k1").await.unwrap();
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_segment_key, held);
    let in_flight = {
        let t = t.clone();
        actix_rt::spawn(async move { insert(&t, "in-flight").await })
    };
    gate.reached().await;
    fleet.store_clock.advance(TTL + Duration::from_secs(1));
    let b = fleet.replica("b");
    b.open().await.forget().await.unwrap();
    a.sup.renew_now().await.unwrap();
    until_status(&t, TenantStatus::Abandoned).await;
    assert!(in_flight.await.unwrap().is_err());
    gate.open();
    eventually(3_000, "the segment put to land", || async {
        !in_epoch(&fleet, 1).await.is_empty()
    })
    .await;
    fleet.advance(PAST_DEADLINES);
    a.sup.reconcile_now().await.unwrap();
    let left = in_epoch(&fleet, 1).await;
    assert!(left.is_empty(), "the forgotten epoch kept {left:?}");
}

#[actix_rt::test]
async fn promise5_a_forget_whose_erasure_failed_after_the_floor_rose_is_finished_by_a_periodic_sweep()
 {
    // Hole 11 (found by the drill on PostgreSQL + S3): the floor rose, the erasure failed, the
    // next open's sweep failed the same way, and nobody swept again.
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let lifetime = Duration::from_secs(20);
    let a = fleet.replica_with("a", "a", |c| c.put_lifetime = lifetime);
    let t = a.open().await;
    for i in 0..3 {
        insert(&t, &format!("k{i}")).await.unwrap();
    }
    let durable = fleet.durable.clone();
    fleet
        .leases
        .after_next(LeaseOp::MarkForgotten, move || async move {
            durable.set_down(true)
        });
    let forgotten = t.forget().await;
    assert!(forgotten.is_err(), "the erasure failed: {forgotten:?}");
    fleet.durable.set_down(false);
    assert_eq!(in_epoch(&fleet, 1).await.len(), 3, "three segments left");
    // Any replica's periodic pass, once every put sent before the forget has had time to land.
    let c = fleet.replica_with("c", "c", |c| c.put_lifetime = lifetime);
    c.sup.reconcile_now().await.unwrap();
    assert_eq!(in_epoch(&fleet, 1).await.len(), 3, "not due yet");
    fleet.advance(lifetime);
    let report = c.sup.reconcile_now().await.unwrap();
    assert_eq!(report.erasures_done, 1, "{report:?}");
    let left = fleet.stored_of_tenant().await;
    assert!(left.is_empty(), "the forgotten tenant kept {left:?}");
    let again = c.sup.reconcile_now().await.unwrap();
    assert_eq!(again.erasures_done, 0, "done once: {again:?}");
}

#[actix_rt::test]
async fn promise5_after_a_forget_a_put_no_replica_tracked_goes_once_the_resweep_is_due() {
    // The erasure bound with a late landing no process can wait for (an S3 request completed
    // by the server after its client gave up): the forget's own sweep cannot see it.
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let lifetime = Duration::from_secs(20);
    let a = fleet.replica_with("a", "a", |c| c.put_lifetime = lifetime);
    let t = a.open().await;
    insert(&t, "k1").await.unwrap();
    fleet
        .durable
        .late_puts(LatePuts::next(is_image).untracked());
    assert!(t.snapshot().await.is_err());
    t.forget().await.unwrap();
    assert_eq!(fleet.durable.land_late_puts().await.unwrap().len(), 1);
    assert_eq!(
        in_epoch(&fleet, 1).await.len(),
        1,
        "it landed after the forget"
    );
    let c = fleet.replica_with("c", "c", |c| c.put_lifetime = lifetime);
    fleet.advance(lifetime);
    let report = c.sup.reconcile_now().await.unwrap();
    assert_eq!(report.erasures_done, 1, "{report:?}");
    let left = fleet.stored_of_tenant().await;
    assert!(left.is_empty(), "the forgotten tenant kept {left:?}");
}

#[actix_rt::test]
async fn promise3_a_segment_whose_tip_move_timed_out_but_landed_is_kept() {
    // The reconciliation must never take back what the tip names: a move that timed out three
    // times landed after all, and the successor restores the write.
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k1").await.unwrap();
    for _ in 0..3 {
        fleet.leases.land_late(LeaseOp::MoveTip);
    }
    assert!(insert(&t, "k2").await.is_err(), "outcome unknown");
    until_status(&t, TenantStatus::Abandoned).await;
    fleet.leases.land_held().await;
    advance_replica(&a, PAST_DEADLINES);
    let report = a.sup.reconcile_now().await.unwrap();
    assert_eq!((report.deleted, report.waiting), (0, 0), "{report:?}");
    assert_eq!(in_epoch(&fleet, 1).await.len(), 2, "both segments stay");
    fleet.advance(TTL + Duration::from_secs(1));
    let b = fleet.replica("b");
    assert_eq!(keys_of(&b.open().await).await, vec!["k1", "k2"]);
}

#[actix_rt::test]
async fn promise5_a_segment_whose_tip_move_never_landed_is_taken_back_once_its_tenure_is_fenced() {
    // The same, but the move never lands: the replica fences its ended tenure by releasing its
    // lease (so no late move can land), then finds the segment above the tip and deletes it.
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k1").await.unwrap();
    for _ in 0..3 {
        fleet.leases.land_late(LeaseOp::MoveTip);
    }
    assert!(insert(&t, "k2").await.is_err());
    until_status(&t, TenantStatus::Abandoned).await;
    let report = a.sup.reconcile_now().await.unwrap();
    assert_eq!(
        report.waiting, 1,
        "not before the moves' deadline: {report:?}"
    );
    advance_replica(&a, PAST_DEADLINES);
    let report = a.sup.reconcile_now().await.unwrap();
    assert_eq!((report.deleted, report.waiting), (1, 0), "{report:?}");
    let left: Vec<String> = in_epoch(&fleet, 1).await;
    assert_eq!(left.len(), 1, "segment 1 stays, segment 2 went: {left:?}");
    let record = fleet.leases.inner().read(&key()).await.unwrap().unwrap();
    assert!(record.released, "fenced by a release");
    assert_eq!(record.tip, Some(LogPos { epoch: 1, seq: 1 }));
    fleet.leases.land_held().await;
    let b = fleet.replica("b");
    assert_eq!(
        keys_of(&b.open().await).await,
        vec!["k1"],
        "a successor opens at once"
    );
}

/// A durable store whose image puts land and then answer `AlreadyExists`, as an S3 client does
/// when it repeats a `PUT` whose connection was cut after the server applied it.
#[derive(Debug)]
struct RetriedImagePuts {
    inner: SharedDurableStore,
}

#[async_trait]
impl DurableStore for RetriedImagePuts {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        if is_image(key) {
            self.inner.put_if_absent(key, bytes.clone()).await?;
        }
        self.inner.put_if_absent(key, bytes).await
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.inner.list(prefix).await
    }
    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, StoreError> {
        self.inner.list_page(prefix, start_after, max_keys).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.inner.delete(key).await
    }
    async fn delete_keys(&self, keys: &[String]) -> Result<(), StoreError> {
        self.inner.delete_keys(keys).await
    }
    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        self.inner.delete_prefix(prefix).await
    }
    async fn settle_puts(&self, prefix: &str, limit: Duration) -> Result<(), StoreError> {
        self.inner.settle_puts(prefix, limit).await
    }
    async fn settle_put(&self, key: &str, limit: Duration) -> Result<(), StoreError> {
        self.inner.settle_put(key, limit).await
    }
}

#[actix_rt::test]
async fn promise5_an_image_put_answered_already_exists_for_its_own_bytes_is_its_own() {
    // Triaged suspicion: the retry's AlreadyExists failed the publish and left the image, which
    // no manifest named, for ever.
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", |c| {
        c.durable = Arc::new(RetriedImagePuts {
            inner: c.durable.clone(),
        })
    });
    let t = a.open().await;
    insert(&t, "k1").await.unwrap();
    let published = t.snapshot().await;
    let image = match published {
        Ok(Some(image)) => image,
        other => panic!("the publish took its own landing for another writer's: {other:?}"),
    };
    let record = fleet.leases.inner().read(&key()).await.unwrap().unwrap();
    assert_eq!(record.head, Some(image));
    assert_eq!(lone_images(&fleet).await, Vec::<String>::new());
}

#[actix_rt::test]
async fn promise5_an_image_put_answered_already_exists_with_other_bytes_is_never_taken_back() {
    // The other side of the suspicion: an object of another writer's bytes under the key is
    // never the replica's to delete.
    let fleet = Fleet::new().await;
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k1").await.unwrap();
    let theirs = format!("{}e00000001/snap-000001.db", key().prefix());
    let put = fleet
        .durable
        .inner()
        .put_if_absent(&theirs, b"theirs".to_vec());
    assert_eq!(put.await, Ok(Put::Created));
    let refused = t.snapshot().await;
    assert!(matches!(refused, Err(Error::Corrupt(_))), "{refused:?}");
    fleet.advance(PAST_DEADLINES);
    a.sup.reconcile_now().await.unwrap();
    let kept = fleet.durable.inner().get(&theirs).await.unwrap();
    assert_eq!(kept.as_deref(), Some(&b"theirs"[..]));
}
