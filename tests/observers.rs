//! O — an observer that panics or blocks cannot hold a lease (promise 9 in docs/guarantees.md).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use leasehold_actors::{Event, Observer};

struct Panicking;

impl Observer for Panicking {
    fn on_event(&self, _event: &Event) {
        panic!("observer bug");
    }
}

struct Blocking;

impl Observer for Blocking {
    fn on_event(&self, _event: &Event) {
        std::thread::sleep(Duration::from_secs(3_600));
    }
}

#[actix_rt::test]
async fn o1_an_observer_that_panics_or_blocks_cannot_hold_a_lease() {
    let fleet = Fleet::new().await;
    let observers: [(&str, Arc<dyn Observer>); 2] = [
        ("replica-panics", Arc::new(Panicking)),
        ("replica-blocks", Arc::new(Blocking)),
    ];
    for (id, observer) in observers {
        let a = fleet.replica_with(id, id, |c| c.observer = Some(observer));
        let t = a.open().await;
        assert!(t.is_open().await, "{id}: the tenant opens");
        insert(&t, id).await.unwrap();
        a.sup.renew_now().await.unwrap();
        within(3_000, "a handoff beside a bad observer", t.handoff())
            .await
            .unwrap();
    }
    let b = fleet.replica("replica-b");
    assert_eq!(
        keys_of(&b.open().await).await,
        ["replica-panics", "replica-blocks"]
    );
}
