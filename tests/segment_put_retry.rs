//! A segment put that timed out is sent again (docs/guarantees.md, "When shipping fails"):
//! what the retry may meet — its first try still in flight on a store whose conditional put
//! answers a concurrent create with a conflict (S3 answers `If-None-Match: *` racing another
//! write of the key with `409 ConditionalRequestConflict`, which `object_store` turns into
//! `AlreadyExists` for `PutMode::Create`, and `S3Store::put_if_absent` into
//! `Put::AlreadyExists`) — and when it may not be sent at all (the lease lapsed).
//! `a_segment_put_answered_late_once_is_sent_again_and_the_tenure_serves_on` in
//! `tests/change_log.rs` is the plain case.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use leasehold::LeaseStore;

/// The first try of a segment put is held past its deadline; the retry meets it in flight and
/// hears the conflict (S3's 409, `AlreadyExists` here); the first try then lands. Promised:
/// a segment that no tip names is taken back by the replica that put it (docs/guarantees.md,
/// "Erasure covers the log", "Reconciling puts of unknown outcome"), and one put answered late
/// does not end the tenure. Seen failing when an `AlreadyExists` with
/// nothing there was taken for another writer's bytes: the tenure ended and the first try,
/// landing later, was left untracked above the tip.
#[actix_rt::test]
async fn a_retry_that_meets_its_first_try_in_flight_waits_for_it_and_leaves_no_untracked_segment() {
    let fleet = Fleet::new().await;
    fleet.durable.conflict_on_concurrent_creates(true);
    let a = fleet.replica_with("a", "a", |c| {
        c.store_deadline = Duration::from_millis(200);
    });
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_segment_key, held);
    let write = actix_rt::spawn({
        let t = t.clone();
        async move { insert(&t, "k1").await }
    });
    gate.reached().await;
    eventually(5_000, "the retry to meet the first try", || async {
        fleet.durable.conflicts() > 0
    })
    .await;
    gate.open(); // the first try lands now
    let answer = within(5_000, "the write", write).await.unwrap();
    let first =
        leasehold::layout::segment_key(&key(), leasehold::layout::LogPos { epoch: 1, seq: 2 });
    eventually(5_000, "the first try to land", || async {
        fleet.durable.inner().get(&first).await.unwrap().is_some()
    })
    .await;
    // Every put has settled; let every deadline pass and reconcile.
    fleet.advance(Duration::from_secs(2));
    a.sup.reconcile_now().await.unwrap();
    let record = fleet.leases.inner().read(&key()).await.unwrap().unwrap();
    let unnamed: Vec<String> = fleet
        .stored_of_tenant()
        .await
        .into_iter()
        .filter(|k| {
            leasehold::layout::segment_of(&key(), k).is_some_and(|p| {
                record
                    .tip
                    .is_none_or(|tip| (p.epoch, p.seq) > (tip.epoch, tip.seq))
            })
        })
        .collect();
    assert!(
        unnamed.is_empty(),
        "segments above the tip {:?} left after every put settled and a pass ran: {unnamed:?} \
         (the write answered {answer:?})",
        record.tip
    );
    assert!(
        answer.is_ok(),
        "one put answered late ended the tenure: {answer:?}"
    );
}

/// `Shipped`: a retry comes one or two put deadlines after the commit's lease check, so it is
/// sent only while the lease cell still holds on the holder's clock — the erasure bound's
/// assumption (4) (docs/guarantees.md) counts a `Shipped` segment as sent right after a lease
/// check. Seen failing when a retry asked only that the tenure had not ended.
#[actix_rt::test]
async fn a_shipped_retry_is_not_sent_after_the_lease_lapsed() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica_with("a", "a", |c| {
        c.store_deadline = Duration::from_millis(200);
    });
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_segment_key, held);
    let write = actix_rt::spawn({
        let t = t.clone();
        async move { insert(&t, "k1").await }
    });
    gate.reached().await;
    // The lease lapses everywhere while the first try is held (no renewal on a manual fleet).
    fleet.advance(TTL + Duration::from_secs(1));
    let resent = Arc::new(AtomicBool::new(false));
    fleet.durable.before_next_put_matching(is_segment_key, {
        let resent = resent.clone();
        hook(async move { resent.store(true, Ordering::SeqCst) })
    });
    let answer = within(5_000, "the write", write).await.unwrap();
    gate.open();
    assert!(answer.is_err(), "the lease lapsed: {answer:?}");
    assert!(
        !resent.load(Ordering::SeqCst),
        "a segment put was sent again after the lease had lapsed (the write answered {answer:?})"
    );
}
