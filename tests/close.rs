//! Closing a replica with many tenants: every one handed off, progress reported as it goes.

mod common;

use common::*;
use leasehold::testkit::LeaseOp;
use leasehold::{Error, LeaseKey, TenantId};
use leasehold_actors::Event;

#[actix_rt::test]
async fn close_of_many_tenants_hands_each_off_and_reports_progress_in_order() {
    const N: usize = 40;
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let b = fleet.replica("replica-b");
    let mut tenants = Vec::new();
    for i in 0..N {
        let id = TenantId::new(format!("t{i:03}")).unwrap();
        let t = a.sup.open(&org(), &id).await.unwrap();
        insert(&t, &format!("k-{i}")).await.unwrap();
        tenants.push(id);
    }
    let unflushed = a.sup.close().await.unwrap();
    assert!(unflushed.is_empty(), "{unflushed:?}");
    let progress: Vec<usize> = a
        .events()
        .await
        .iter()
        .filter_map(|e| match e {
            Event::CloseProgress { done, total, .. } => {
                assert_eq!(*total, N);
                Some(*done)
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        progress,
        (1..=N).collect::<Vec<_>>(),
        "one progress event per tenant, counting up"
    );
    let opened = a.sup.open(&org(), &tenants[0]).await;
    assert!(opened.is_err(), "a closing replica opens nothing");
    for (i, id) in tenants.iter().enumerate() {
        assert!(a.flushed(&LeaseKey::new(&org(), id)).await);
        let t = b.sup.open(&org(), id).await.unwrap();
        assert_eq!(keys_of(&t).await, [format!("k-{i}")]);
    }
}

/// Hole 1 (promise 6): an open whose acquire is still in flight when `close()` begins is either
/// refused (`Closed`) or handed off by that close. Either way no acknowledged write is lost: a
/// fresh replica restores every write the closing replica acknowledged.
#[actix_rt::test]
async fn hole1_an_open_in_flight_when_close_begins_is_refused_or_handed_off() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let (held, mut gate) = gated();
    fleet.leases.before_next(LeaseOp::Acquire, held);
    let opening = actix_rt::spawn(a.sup.open(&org(), &tenant()));
    gate.reached().await;
    let closing = actix_rt::spawn(a.sup.close());
    // Messages reach the supervisor in order: once this open is refused, close has begun.
    let later = a.sup.open(&org(), &tenant2()).await;
    assert!(matches!(later, Err(Error::Closed(_))), "{later:?}");
    gate.open();
    let opened = within(5_000, "the open", opening).await.unwrap();
    let mut acknowledged = Vec::new();
    if let Ok(t) = &opened
        && insert(t, "w-1").await.is_ok()
    {
        acknowledged.push("w-1".to_string());
    }
    let unflushed = within(5_000, "close", closing).await.unwrap().unwrap();
    assert!(
        matches!(opened, Err(Error::Closed(_))) || unflushed.is_empty(),
        "an open that served after close began must be refused: {opened:?}, {unflushed:?}"
    );
    let b = fleet.replica("replica-b");
    let t = within(5_000, "the successor's open", b.sup.open(&org(), &tenant()))
        .await
        .unwrap();
    assert_eq!(keys_of(&t).await, acknowledged);
}
