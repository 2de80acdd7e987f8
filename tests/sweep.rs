//! S — copies of a dead epoch are deleted when the tenant is next opened (promise 5 in docs/guarantees.md),
//! beside the open and never in it; a failed sweep is retried at the next open; a sweep goes page
//! by page and keeps its progress.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use leasehold::DurableStore;
use leasehold::deadline::Deadline;
use leasehold::durable::StoreError;
use leasehold::layout::{image_key, manifest_key};
use leasehold::sweep::{SWEEP_PAGE_KEYS, sweep_dead_epochs};
use leasehold::testkit::{FaultyStore, Hook, MemStore, Pace, StoreOp};
use leasehold_actors::Event;

fn epoch1() -> String {
    format!("{}e00000001/", key().prefix())
}

#[actix_rt::test]
async fn s1_what_a_superseded_owner_uploaded_after_a_forget_is_swept_at_the_next_open_and_nothing_else()
 {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let b = fleet.replica("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.snapshot().await.unwrap();
    t.forget().await.unwrap();
    // The late upload of an owner that did not know it was superseded, beside a neighbour's object.
    let store = fleet.durable.inner();
    store
        .put_if_absent(&format!("{}snap-000009.db", epoch1()), b"late".to_vec())
        .await
        .unwrap();
    store
        .put_if_absent(&format!("{}snap-000009.json", epoch1()), b"{}".to_vec())
        .await
        .unwrap();
    let neighbour = format!("{}e00000001/snap-000001.db", key2().prefix());
    store
        .put_if_absent(&neighbour, b"theirs".to_vec())
        .await
        .unwrap();
    assert_eq!(fleet.stored_of_tenant().await.len(), 2);
    let next = b.open().await;
    assert_eq!(keys_of(&next).await, Vec::<String>::new());
    eventually(3_000, "the dead epoch to be swept", || async {
        fleet.stored(&epoch1()).await.is_empty()
    })
    .await;
    assert_eq!(
        fleet.stored(&key2().prefix()).await,
        [neighbour],
        "another tenant's objects are untouched"
    );
    eventually(3_000, "the sweep to be reported", || {
        b.saw(|e| matches!(e, Event::Swept { objects: 2, .. }))
    })
    .await;
}

#[actix_rt::test]
async fn s2_a_sweep_that_fails_does_not_fail_the_open_and_the_next_open_sweeps_again() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let b = fleet.replica("replica-b");
    let c = fleet.replica("replica-c");
    let first = a.open().await;
    insert(&first, "k-1").await.unwrap();
    first.snapshot().await.unwrap();
    first.forget().await.unwrap();
    let late = format!("{}snap-000009.db", epoch1());
    fleet
        .durable
        .inner()
        .put_if_absent(&late, b"late".to_vec())
        .await
        .unwrap();
    fleet.durable.fail_next_delete();
    let second = b.open().await;
    insert(&second, "k-2").await.unwrap();
    assert_eq!(
        keys_of(&second).await,
        ["k-2"],
        "the tenant serves although its sweep failed"
    );
    eventually(3_000, "the failed sweep to be reported", || {
        b.saw(|e| matches!(e, Event::SweepFailed { .. }))
    })
    .await;
    // The sweep has reported its failure, so it is over: what it left is what it deleted.
    assert_eq!(
        fleet.stored(&epoch1()).await,
        std::slice::from_ref(&late),
        "the failed sweep deleted nothing"
    );
    second.handoff().await.unwrap();
    let third = c.open().await;
    eventually(3_000, "the next open to sweep the dead epoch", || async {
        fleet.stored(&epoch1()).await.is_empty()
    })
    .await;
    assert!(third.is_open().await);
}

/// Hole 10: a tenant too big to list within one call's deadline is swept page by page, each
/// page under its own deadline, and a sweep cut short keeps what its pages deleted.
#[tokio::test(start_paused = true)]
async fn s3_a_sweep_longer_than_one_calls_deadline_keeps_the_progress_of_each_page() {
    let faulty = FaultyStore::new(Arc::new(MemStore::new()));
    let inner = faulty.inner().clone();
    for seq in 1..=1_250 {
        for key in [image_key(&key(), 1, seq), manifest_key(&key(), 1, seq)] {
            inner.put_if_absent(&key, vec![1]).await.unwrap();
        }
    }
    let live = [image_key(&key(), 2, 1), manifest_key(&key(), 2, 1)];
    for key in &live {
        inner.put_if_absent(key, vec![2]).await.unwrap();
    }
    faulty.set_pace(Pace {
        per_listed_key: Duration::from_millis(1),
        ..Pace::default()
    });
    let store = Deadline::new(faulty.shared(), Duration::from_secs(1)).unwrap();
    let prefix = key().prefix();
    let listing = store.list(&prefix).await;
    assert!(
        matches!(listing, Err(StoreError::Timeout { .. })),
        "one listing of 2,502 keys takes 2.5 s, longer than a call may: {listing:?}"
    );
    // The store goes down before the third page is listed.
    let noop = || -> Hook { Box::new(|| Box::pin(async {})) };
    faulty.before_next(StoreOp::List, noop());
    faulty.before_next(StoreOp::List, noop());
    let switch = faulty.clone();
    faulty.before_next(
        StoreOp::List,
        Box::new(move || {
            switch.set_down(true);
            Box::pin(async {})
        }),
    );
    let cut = sweep_dead_epochs(&store, &key(), 1).await;
    assert!(cut.is_err(), "{cut:?}");
    assert_eq!(
        inner.list(&prefix).await.unwrap().len(),
        2_502 - 2 * SWEEP_PAGE_KEYS,
        "the two pages listed before the outage were deleted"
    );
    faulty.set_down(false);
    assert_eq!(sweep_dead_epochs(&store, &key(), 1).await, Ok(1_500));
    assert_eq!(inner.list(&prefix).await.unwrap(), live.to_vec());
}

/// A store read at 10 MiB/s behind a 500 ms deadline (paused time), and its unbounded inside.
fn slow_link() -> (Deadline<FaultyStore>, Arc<dyn DurableStore>) {
    let faulty = FaultyStore::new(Arc::new(MemStore::new()));
    faulty.set_pace(Pace {
        per_mib_read: Duration::from_millis(100),
        ..Pace::default()
    });
    let inner = faulty.inner().clone();
    let store = Deadline::new(faulty, Duration::from_millis(500)).unwrap();
    (store, inner)
}

/// Puts `bytes` at `key` in `store`, which must take them.
async fn put_on(store: &Arc<dyn DurableStore>, key: String, bytes: Vec<u8>) {
    store.put_if_absent(&key, bytes).await.unwrap();
}

/// The record of a tenant released by epoch 2, whose head is image (2, 1) of the bytes `page`.
fn released_with_head_2_1() -> leasehold::lease::LeaseRecord {
    leasehold::lease::LeaseRecord {
        key: key().to_string(),
        owner: "a".into(),
        epoch: 2,
        expires_at_ms: 0,
        released: true,
        floor: 0,
        head: Some(leasehold::layout::ImageRef {
            epoch: 2,
            seq: 1,
            sha256: leasehold::image::sha256_hex(b"page"),
        }),
        tip: None,
    }
}

/// A manifest with the head's fields, for retention's reads.
fn manifest_json(epoch: u64, seq: u64, created_at_ms: u64) -> Vec<u8> {
    leasehold::image::Manifest {
        format: leasehold::image::FORMAT_VERSION,
        key: key().to_string(),
        epoch,
        seq,
        size: 4,
        sha256: leasehold::image::sha256_hex(b"page"),
        base: None,
        created_at_ms,
        log: None,
        beyond_log: false,
    }
    .to_json()
    .unwrap()
}

/// Retention and damaged manifests (docs/guarantees.md, the storage bound): a manifest that does
/// not parse names an image no restore can use, so it goes with its image — it was kept for
/// ever before, as if published at every run's `now`. The head's stays (an open names it
/// `Corrupt`, and an operator looks at it); so does a manifest of a newer format, which a
/// replica of the newer build reads.
#[tokio::test]
async fn retention_deletes_a_damaged_manifest_and_its_image_but_not_the_heads_or_a_newer_formats() {
    let store = MemStore::new();
    let put = |k: String, v: Vec<u8>| {
        let store = store.clone();
        async move { store.put_if_absent(&k, v).await.unwrap() }
    };
    // (1, 1): damaged; (1, 2): a newer format; (2, 1): the head, damaged too.
    put(image_key(&key(), 1, 1), b"page".to_vec()).await;
    put(
        manifest_key(&key(), 1, 1),
        b"{\"format\": 1, trunc".to_vec(),
    )
    .await;
    let mut newer: serde_json::Value = serde_json::from_slice(&manifest_json(1, 2, 10)).unwrap();
    newer["format"] = serde_json::json!(leasehold::image::FORMAT_VERSION + 1);
    put(image_key(&key(), 1, 2), b"page".to_vec()).await;
    put(
        manifest_key(&key(), 1, 2),
        serde_json::to_vec(&newer).unwrap(),
    )
    .await;
    put(image_key(&key(), 2, 1), b"page".to_vec()).await;
    put(manifest_key(&key(), 2, 1), b"garbage".to_vec()).await;
    let record = released_with_head_2_1();
    let went = leasehold::sweep::sweep_retention(
        &store,
        &key(),
        &record,
        1_000_000,
        Duration::from_secs(1),
    )
    .await
    .unwrap();
    let left = store.list(&key().prefix()).await.unwrap();
    assert_eq!(went, 2, "the damaged manifest and its image: {left:?}");
    assert_eq!(
        left,
        vec![
            image_key(&key(), 1, 2),
            manifest_key(&key(), 1, 2),
            image_key(&key(), 2, 1),
            manifest_key(&key(), 2, 1),
        ],
    );
}

/// Review (hostile): an object far larger than a manifest at a manifest's key is damage
/// (docs/guarantees.md, the storage bound: "more than 64 KiB is damage too, refused before it
/// is parsed"), so retention should delete it with its image. But retention downloads it whole
/// (twice) before the bound is checked: on a store behind a deadline whose link carries it in
/// more than the deadline, every run answers `Timeout` and retention of the tenant never runs
/// again (nothing of it is ever deleted: the storage bound breaks), and on one that carries it,
/// it is read into memory whole on every run.
#[tokio::test(start_paused = true)]
async fn review_an_oversized_object_at_a_manifest_key_does_not_wedge_retention() {
    let (store, inner) = slow_link();
    // (1, 1): an image whose manifest key holds 8 MiB (800 ms on this link); (2, 1): the head.
    put_on(&inner, image_key(&key(), 1, 1), b"page".to_vec()).await;
    put_on(&inner, manifest_key(&key(), 1, 1), vec![b' '; 8 << 20]).await;
    put_on(&inner, image_key(&key(), 2, 1), b"page".to_vec()).await;
    put_on(&inner, manifest_key(&key(), 2, 1), manifest_json(2, 1, 10)).await;
    let record = released_with_head_2_1();
    let went = leasehold::sweep::sweep_retention(
        &store,
        &key(),
        &record,
        1_000_000,
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        went,
        Ok(2),
        "the oversized manifest is damage: it and its image go, and retention is not wedged"
    );
}

/// Review (hostile), the same root on the restore side: docs/guarantees.md says a damaged head
/// manifest makes an open fail `Corrupt` naming it, and that more than 64 KiB is damage. An
/// oversized object at the head's manifest key is downloaded whole before the bound is
/// checked: on a link that carries it in more than the store deadline, the open answers a
/// store `Timeout` — an outage, retried for ever — instead of `Corrupt`.
#[tokio::test(start_paused = true)]
async fn review_an_oversized_head_manifest_is_corrupt_not_a_timeout() {
    let (store, inner) = slow_link();
    put_on(&inner, image_key(&key(), 2, 1), b"page".to_vec()).await;
    put_on(&inner, manifest_key(&key(), 2, 1), vec![b' '; 8 << 20]).await;
    let head = leasehold::layout::ImageRef {
        epoch: 2,
        seq: 1,
        sha256: leasehold::image::sha256_hex(b"page"),
    };
    let restored = leasehold::image::fetch_restorable(&store, &key(), Some(&head), 0).await;
    assert!(
        matches!(restored, Err(leasehold::image::ImageError::Corrupt { .. })),
        "an oversized head manifest is damage: {:?}",
        restored.map(|r| r.map(|(m, _)| m))
    );
}
