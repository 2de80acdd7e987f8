//! Closing a replica with many tenants: every one handed off, progress reported as it goes.

mod common;

use common::*;
use leasehold::{LeaseKey, TenantId};
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
