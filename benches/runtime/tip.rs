//! The lease-store round trips of the change log, alone: `move_tip` one segment at a time on
//! one lease, and for comparison `renew` of one lease against `renew_many` of 32 leases in one
//! round trip (what coalescing the tip moves of a replica's tenants would look like), and the
//! durable store's `put_if_absent` of a segment-sized object (the other half of shipping).

use std::path::Path;
use std::time::Duration;

use leasehold::layout::LogPos;
use leasehold::{LeaseKey, OrgId, TenantId};

use crate::backend::{Backend, stores};
use crate::measure::{Figure, concurrent_async, sequential_async};

/// The figures of the lease-store round trips.
pub struct TipFigures {
    /// `move_tip`, one at a time.
    pub move_tip: Figure,
    /// `renew` of one lease.
    pub renew: Figure,
    /// `renew_many` of `many` leases.
    pub renew_many: Figure,
    /// How many leases each `renew_many` renewed.
    pub many: usize,
    /// `put_if_absent` of a 16 KiB object (about a one-event segment: a few pages and a header).
    pub put: Figure,
    /// `move_tip` by `many` callers at once, each on its own lease (what `Shipped` with one
    /// writer per tenant asks of the lease store).
    pub move_tip_many: Figure,
    /// `put_if_absent` of 16 KiB by `many` callers at once.
    pub put_many: Figure,
}

/// Measures each round trip for `span`.
pub async fn measure(backend: Backend, dir: &Path, many: usize, span: Duration) -> TipFigures {
    let s = stores(backend, dir, "tip").await;
    let org = OrgId::new("tip").expect("org");
    let ttl = Duration::from_secs(600);
    let keys: Vec<LeaseKey> = (0..many)
        .map(|i| LeaseKey::new(&org, &TenantId::new(format!("t{i:03}")).expect("id")))
        .collect();
    let mut leases = Vec::new();
    for k in &keys {
        let r = s.leases.acquire(k, "bench", ttl).await.expect("acquire");
        leases.push((k.clone(), r.epoch));
    }
    let (key, epoch) = leases[0].clone();
    println!("  move_tip for {span:?} ...");
    let move_tip = sequential_async(span, |i| {
        let (leases, key) = (s.leases.clone(), key.clone());
        async move {
            let from = (i > 0).then_some(LogPos {
                epoch,
                seq: i as u64,
            });
            let to = LogPos {
                epoch,
                seq: i as u64 + 1,
            };
            leases
                .move_tip(&key, "bench", epoch, from, to)
                .await
                .expect("move_tip");
        }
    })
    .await;
    println!("  renew for {span:?} ...");
    let renew = sequential_async(span, |_| {
        let (leases, key) = (s.leases.clone(), key.clone());
        async move {
            leases
                .renew(&key, "bench", epoch, ttl)
                .await
                .expect("renew");
        }
    })
    .await;
    println!("  renew_many of {many} leases for {span:?} ...");
    let renew_many = sequential_async(span, |_| {
        let (store, leases) = (s.leases.clone(), leases.clone());
        async move {
            store
                .renew_many("bench", &leases, ttl)
                .await
                .expect("renew_many");
        }
    })
    .await;
    println!("  put_if_absent of 16 KiB for {span:?} ...");
    let bytes = vec![7u8; 16 << 10];
    let put = sequential_async(span, |i| {
        let (store, bytes) = (s.durable.clone(), bytes.clone());
        let k = format!("tip/put/e00000001/obj-{i:012}.bin");
        async move {
            store.put_if_absent(&k, bytes).await.expect("put");
        }
    })
    .await;
    println!("  move_tip by {many} callers at once, one lease each, for {span:?} ...");
    // Leases of their own: the tip of the first one moved above.
    let mut fresh = Vec::new();
    for i in 0..many {
        let k = LeaseKey::new(&org, &TenantId::new(format!("m{i:03}")).expect("id"));
        let r = s.leases.acquire(&k, "bench", ttl).await.expect("acquire");
        fresh.push((k, r.epoch));
    }
    let store = &s.leases;
    let leases_ref = &fresh;
    let move_tip_many = concurrent_async(many, span, |c, i| {
        let (key, epoch) = leases_ref[c].clone();
        let store = store.clone();
        async move {
            let from = (i > 0).then_some(LogPos {
                epoch,
                seq: i as u64,
            });
            let to = LogPos {
                epoch,
                seq: i as u64 + 1,
            };
            store
                .move_tip(&key, "bench", epoch, from, to)
                .await
                .expect("move_tip");
        }
    })
    .await;
    println!("  put_if_absent of 16 KiB by {many} callers at once for {span:?} ...");
    let durable = &s.durable;
    let bytes_ref = &bytes;
    let put_many = concurrent_async(many, span, |c, i| {
        let (store, bytes) = (durable.clone(), bytes_ref.clone());
        let k = format!("tip/many/e00000001/obj-{c:03}-{i:012}.bin");
        async move {
            store.put_if_absent(&k, bytes).await.expect("put");
        }
    })
    .await;
    TipFigures {
        move_tip_many,
        put_many,
        move_tip,
        renew,
        renew_many,
        many,
        put,
    }
}
