//! S — copies of a dead epoch are deleted when the tenant is next opened (CONTRACT promise 5),
//! beside the open and never in it; a failed sweep is retried at the next open.

mod common;

use common::*;
use leasehold::DurableStore;
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
