//! Pipelined segments (docs/guarantees.md, "Pipelined segments"): with `Shipped`, up to
//! `segments_in_flight` (here 4; the default is 1) segments of a tenant are under way at once — a batch committed while a
//! segment is in flight is cut and put at once instead of waiting for it — yet the tip moves
//! strictly in log order, a caller hears `Ok` only once the tip names its segment and every one
//! before it, and a segment whose predecessor was not shipped never moves the tip and is
//! deleted by the reconciliation.

mod common;

use std::time::Duration;

use common::*;
use leasehold::LeaseStore;

/// The tip as the lease store reads it.
async fn tip_seq(fleet: &Fleet) -> u64 {
    let record = fleet.leases.inner().read(&key()).await.unwrap().unwrap();
    record.tip.map_or(0, |t| t.seq)
}

/// Holds the next segment put (of `k1`'s batch) before it reaches the store, then writes `k2`
/// beside it: returns the two writes under way once `k2`'s segment has reached the store.
async fn second_segment_beside_a_held_first(
    fleet: &Fleet,
    t: &leasehold_actors::TenantRef,
) -> (
    Gate,
    tokio::task::JoinHandle<Result<i64, leasehold::Error>>,
    tokio::task::JoinHandle<Result<i64, leasehold::Error>>,
) {
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_segment_key, held);
    let first = actix_rt::spawn({
        let t = t.clone();
        async move { insert(&t, "k1").await }
    });
    gate.reached().await;
    let before = segments_stored(fleet).await;
    let second = actix_rt::spawn({
        let t = t.clone();
        async move { insert(&t, "k2").await }
    });
    // With one segment at a time this never happens: k2's batch would wait for k1's segment.
    // In the store, not only sent: the put counter moves before the bytes land.
    eventually(
        10_000,
        "the second segment in the store while the first is held",
        || async { segments_stored(fleet).await > before },
    )
    .await;
    (gate, first, second)
}

/// How many segments of the main tenant the store holds.
async fn segments_stored(fleet: &Fleet) -> usize {
    let stored = fleet.stored_of_tenant().await;
    stored.iter().filter(|k| is_segment_key(k)).count()
}

/// Four segments in flight at most.
fn pipelined(c: &mut leasehold_actors::RuntimeConfig) {
    c.segments_in_flight = 4;
}

#[actix_rt::test]
async fn pipelined_a_second_segment_is_put_while_the_first_is_held_and_the_tip_names_both_in_order()
{
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", pipelined);
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    assert_eq!(tip_seq(&fleet).await, 1);
    let (gate, first, second) = second_segment_beside_a_held_first(&fleet, &t).await;
    // The second segment is in the store, but its move waits for the first's: the tip does
    // not skip the held segment, and nobody hears `Ok` early.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(tip_seq(&fleet).await, 1, "the tip never skips a segment");
    assert!(!first.is_finished() && !second.is_finished());
    gate.open();
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(tip_seq(&fleet).await, 3, "both named, in order");
    t.abandon().await.unwrap();
    let b = fleet.replica("b");
    assert_eq!(keys_of(&b.open().await).await, ["k0", "k1", "k2"]);
}

#[actix_rt::test]
async fn pipelined_a_segment_after_one_that_was_not_shipped_never_moves_the_tip_and_is_deleted() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", |c| {
        pipelined(c);
        c.store_deadline = Duration::from_millis(300);
    });
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    let (gate, first, second) = second_segment_beside_a_held_first(&fleet, &t).await;
    let stored = fleet.stored_of_tenant().await;
    assert!(
        stored.iter().any(|k| k.ends_with("log-000000000003.seg")),
        "the second segment landed: {stored:?}"
    );
    // The first segment's tip move fails (the lease store is down while it is asked).
    fleet.leases.set_down(true);
    gate.open();
    let first = first.await.unwrap();
    let second = second.await.unwrap();
    fleet.leases.set_down(false);
    assert!(
        matches!(&first, Err(e) if e.is_outcome_unknown()),
        "{first:?}"
    );
    assert!(
        matches!(&second, Err(e) if e.is_outcome_unknown()),
        "{second:?}"
    );
    assert_eq!(tip_seq(&fleet).await, 1, "no move named either segment");
    a.sup.close().await.unwrap();
    let stored = fleet.stored_of_tenant().await;
    assert!(
        !stored.iter().any(|k| k.ends_with("log-000000000003.seg")),
        "the segment after the one not shipped was never named, and went: {stored:?}"
    );
    let b = fleet.replica("b");
    assert_eq!(keys_of(&b.open().await).await, ["k0"]);
}

#[actix_rt::test]
async fn with_one_segment_in_flight_the_default_a_batch_waits_for_the_segment_before_it() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_segment_key, held);
    let first = actix_rt::spawn({
        let t = t.clone();
        async move { insert(&t, "k1").await }
    });
    gate.reached().await;
    let puts = fleet.durable.puts();
    let second = actix_rt::spawn({
        let t = t.clone();
        async move { insert(&t, "k2").await }
    });
    // k2's batch is committed and waits: released, both go as the next two segments.
    until_committed(&a.ledger_file(), 3).await;
    assert_eq!(fleet.durable.puts(), puts, "nothing more was put meanwhile");
    gate.open();
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    assert_eq!(tip_seq(&fleet).await, 3);
}

/// Waits until the tenant's ledger holds `n` events (committed, acknowledged or not), read
/// from the ledger file beside the actor.
async fn until_committed(path: &std::path::Path, n: usize) {
    eventually(10_000, "the batch committed", || async move {
        keys_in_file(path).len() >= n
    })
    .await;
}
