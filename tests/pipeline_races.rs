//! Pipelined segments under races (docs/guarantees.md, "Pipelined segments"; docs/testing.md,
//! "Pipelined segments: each promise and its test"): with four segments of a tenant in flight, a
//! tip move that lands after its segment gave up, a read-only run, a snapshot, a handoff, a forget
//! and a crash each meet several segments under way at once, and `Async` still ships one at a
//! time. Each test holds a segment's put (or a tip move) at the store and lets the others pass it.

mod common;

use std::time::Duration;

use common::*;
use leasehold::LeaseStore;
use leasehold::layout::LogPos;
use leasehold::testkit::LeaseOp;
use leasehold_actors::{Durability, RuntimeConfig, TenantRef, TenantStatus};

/// Past every put and move deadline of a manual fleet's replica.
const PAST_DEADLINES: Duration = Duration::from_secs(120);

/// Four segments in flight at most.
fn pipelined(c: &mut RuntimeConfig) {
    c.segments_in_flight = 4;
}

/// The lease record of the main tenant, read behind the faults.
async fn record(fleet: &Fleet) -> leasehold::lease::LeaseRecord {
    fleet.leases.inner().read(&key()).await.unwrap().unwrap()
}

/// The tip's `seq` (0: none).
async fn tip_seq(fleet: &Fleet) -> u64 {
    record(fleet).await.tip.map_or(0, |t| t.seq)
}

/// Whether the store holds the main tenant's segment at `seq` of epoch `epoch`.
async fn holds_segment(fleet: &Fleet, epoch: u64, seq: u64) -> bool {
    let name = format!("e{epoch:08}/log-{seq:012}.seg");
    fleet
        .stored_of_tenant()
        .await
        .iter()
        .any(|k| k.ends_with(&name))
}

/// How many segments of the main tenant the store holds.
async fn segments_stored(fleet: &Fleet) -> usize {
    let stored = fleet.stored_of_tenant().await;
    stored.iter().filter(|k| is_segment_key(k)).count()
}

/// An insert of `idem` running on its own.
fn spawn_insert(
    t: &TenantRef,
    idem: &str,
) -> tokio::task::JoinHandle<Result<i64, leasehold::Error>> {
    let (t, idem) = (t.clone(), idem.to_string());
    actix_rt::spawn(async move { insert(&t, &idem).await })
}

/// Holds the next segment put (of `first`'s batch) before it reaches the store, then writes each
/// of `then`, one at a time, each once the segment before it has reached the store: the puts of
/// `then` pass the held one (their moves wait for its). Returns the gate and every write.
async fn segments_past_a_held_one(
    fleet: &Fleet,
    t: &TenantRef,
    first: &str,
    then: &[&str],
) -> (
    Gate,
    Vec<tokio::task::JoinHandle<Result<i64, leasehold::Error>>>,
) {
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_segment_key, held);
    let mut writes = vec![spawn_insert(t, first)];
    gate.reached().await;
    for idem in then {
        let before = segments_stored(fleet).await;
        writes.push(spawn_insert(t, idem));
        // In the store, not only sent: the put counter moves before the bytes land.
        eventually(
            10_000,
            "the next segment in the store beside the held one",
            || async { segments_stored(fleet).await > before },
        )
        .await;
    }
    (gate, writes)
}

#[actix_rt::test]
async fn pipelined_a_tip_move_landing_after_its_segment_gave_up_leaves_the_next_one_unnamed_and_deleted()
 {
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica_with("a", "a", pipelined);
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    let (gate, writes) = segments_past_a_held_one(&fleet, &t, "k1", &["k2"]).await;
    assert!(holds_segment(&fleet, 1, 3).await, "k2's segment landed");
    // Every ask of k1's move times out; they land only later.
    for _ in 0..3 {
        fleet.leases.land_late(LeaseOp::MoveTip);
    }
    gate.open();
    for write in writes {
        let outcome = write.await.unwrap();
        assert!(
            matches!(&outcome, Err(e) if e.is_outcome_unknown()),
            "{outcome:?}"
        );
    }
    until_status(&t, TenantStatus::Abandoned).await;
    assert_eq!(fleet.leases.held().len(), 3, "k2's move was never asked");
    fleet.leases.land_held().await;
    assert_eq!(
        tip_seq(&fleet).await,
        2,
        "k1's late move named it, and only it"
    );
    a.clock.as_ref().unwrap().advance(PAST_DEADLINES);
    a.sup.reconcile_now().await.unwrap();
    assert!(holds_segment(&fleet, 1, 2).await, "the tip's segment stays");
    assert!(
        !holds_segment(&fleet, 1, 3).await,
        "the segment above the late tip, never asked to be named, went: {:?}",
        fleet.stored_of_tenant().await
    );
    fleet.advance(TTL + Duration::from_secs(1));
    let b = fleet.replica("b");
    assert_eq!(keys_of(&b.open().await).await, ["k0", "k1"]);
}

#[actix_rt::test]
async fn pipelined_a_read_only_run_is_answered_only_once_the_newest_segment_in_flight_is_the_tip() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", pipelined);
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    let (gate, writes) = segments_past_a_held_one(&fleet, &t, "k1", &["k2"]).await;
    let read = actix_rt::spawn({
        let t = t.clone();
        async move { keys_of(&t).await }
    });
    // k1's move goes through and arms a hold on the next one: k2's.
    let (held, mut second) = gated();
    let leases = fleet.leases.clone();
    fleet
        .leases
        .before_next(LeaseOp::MoveTip, move || async move {
            leases.before_next(LeaseOp::MoveTip, held);
        });
    gate.open();
    second.reached().await;
    assert_eq!(tip_seq(&fleet).await, 2, "k1 is the tip, k2's move is held");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !read.is_finished(),
        "the read saw k2: it waits until k2's segment is the tip"
    );
    second.open();
    for write in writes {
        write.await.unwrap().unwrap();
    }
    assert_eq!(read.await.unwrap(), ["k0", "k1", "k2"]);
    assert_eq!(tip_seq(&fleet).await, 3);
}

#[actix_rt::test]
async fn pipelined_a_snapshot_holds_the_newest_cut_and_moves_the_head_only_once_the_tip_is_there() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", pipelined);
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    let (gate, writes) = segments_past_a_held_one(&fleet, &t, "k1", &["k2", "k3"]).await;
    let puts = fleet.durable.puts();
    let snapshot = actix_rt::spawn(t.snapshot());
    eventually(10_000, "the image and its manifest put", || async {
        fleet.durable.puts() >= puts + 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!snapshot.is_finished(), "the head waits for the tip");
    assert_eq!(record(&fleet).await.head, None, "no head past the tip");
    assert_eq!(tip_seq(&fleet).await, 1);
    gate.open();
    for write in writes {
        write.await.unwrap().unwrap();
    }
    let image = snapshot.await.unwrap().unwrap().expect("a new image");
    let record = record(&fleet).await;
    assert_eq!(record.head.as_ref(), Some(&image));
    assert_eq!(record.tip.map(|t| t.seq), Some(4));
    let manifest = leasehold::layout::manifest_key(&key(), image.epoch, image.seq);
    let bytes = fleet.durable.inner().get(&manifest).await.unwrap().unwrap();
    let manifest =
        leasehold::image::parse_manifest(&bytes, &key(), image.epoch, image.seq).unwrap();
    assert_eq!(
        manifest.log,
        Some(LogPos { epoch: 1, seq: 4 }),
        "the image holds k3: the newest segment cut, not the tip when it was taken"
    );
    t.abandon().await.unwrap();
    let b = fleet.replica("b");
    assert_eq!(keys_of(&b.open().await).await, ["k0", "k1", "k2", "k3"]);
}

#[actix_rt::test]
async fn pipelined_a_handoff_waits_for_every_segment_in_flight_and_for_the_batches_behind_them() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", pipelined);
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    // k1 held, k2..k4 put beside it: four in flight; k5 waits for room.
    let (gate, mut writes) = segments_past_a_held_one(&fleet, &t, "k1", &["k2", "k3", "k4"]).await;
    writes.push(spawn_insert(&t, "k5"));
    eventually(10_000, "k5 committed", || async {
        keys_in_file(&a.ledger_file()).len() >= 6
    })
    .await;
    let handoff = actix_rt::spawn(t.handoff());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !handoff.is_finished(),
        "the flush waits for the held segment"
    );
    assert_eq!(tip_seq(&fleet).await, 1);
    gate.open();
    for write in writes {
        write.await.unwrap().unwrap();
    }
    within(10_000, "the handoff", handoff)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tip_seq(&fleet).await, 6);
    assert!(a.flushed(&key()).await);
    let b = fleet.replica("b");
    assert_eq!(
        keys_of(&b.open().await).await,
        ["k0", "k1", "k2", "k3", "k4", "k5"]
    );
}

#[actix_rt::test]
async fn pipelined_a_forget_with_segments_in_flight_leaves_nothing_once_they_settle() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", pipelined);
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    t.snapshot().await.unwrap();
    let (gate, writes) = segments_past_a_held_one(&fleet, &t, "k1", &["k2", "k3"]).await;
    let forget = actix_rt::spawn(t.forget());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !forget.is_finished(),
        "the floor rises only once no segment is in flight"
    );
    gate.open();
    for write in writes {
        // Shipped before the floor rose, or refused: either way, erased below.
        let _ = write.await.unwrap();
    }
    within(10_000, "the forget", forget).await.unwrap().unwrap();
    let stored = fleet.stored_of_tenant().await;
    assert!(stored.is_empty(), "the forget left {stored:?}");
    let record = record(&fleet).await;
    assert_eq!((record.tip, record.head), (None, None));
}

#[actix_rt::test]
async fn pipelined_a_crash_with_segments_above_the_tip_restores_the_tip_and_the_orphans_go() {
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica_with("a", "a", pipelined);
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    let (gate, writes) = segments_past_a_held_one(&fleet, &t, "k1", &["k2", "k3"]).await;
    assert!(holds_segment(&fleet, 1, 3).await && holds_segment(&fleet, 1, 4).await);
    // The replica goes as in a crash: no close, no renewal, its held put never lands.
    drop((t, writes));
    drop(a);
    fleet.advance(TTL + Duration::from_secs(1));
    let b = fleet.replica_with("b", "b", pipelined);
    let t = b.open().await;
    assert_eq!(keys_of(&t).await, ["k0"], "never a segment above the tip");
    insert(&t, "k4").await.unwrap();
    assert_eq!(record(&fleet).await.tip, Some(LogPos { epoch: 2, seq: 2 }));
    // The look after the open noted the dead tenure's segments above the tip; they go once
    // seen for the longest a put lives.
    b.sup.reconcile_now().await.unwrap();
    b.clock.as_ref().unwrap().advance(PAST_DEADLINES);
    b.sup.reconcile_now().await.unwrap();
    let left: Vec<String> = fleet
        .stored_of_tenant()
        .await
        .into_iter()
        .filter(|k| k.contains("e00000001/") && is_segment_key(k))
        .collect();
    assert_eq!(left.len(), 1, "only epoch 1's k0 segment stays: {left:?}");
    drop(t);
    b.sup.close().await.unwrap();
    fleet.advance(TTL + Duration::from_secs(1));
    let c = fleet.replica("c");
    assert_eq!(keys_of(&c.open().await).await, ["k0", "k4"]);
    drop(gate);
}

#[actix_rt::test]
async fn async_ships_one_segment_at_a_time_whatever_segments_in_flight_says() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", |c| {
        pipelined(c);
        c.durability = Durability::Async {
            every: Duration::from_millis(10),
        };
    });
    let t = a.open().await;
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_segment_key, held);
    insert(&t, "k1").await.unwrap();
    gate.reached().await;
    let puts = fleet.durable.puts();
    for i in 2..5 {
        insert(&t, &format!("k{i}")).await.unwrap();
    }
    // Many periods pass: nothing more is put while the first segment is held.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fleet.durable.puts(), puts, "one segment at a time on Async");
    gate.open();
    eventually(10_000, "everything shipped", || async {
        tip_seq(&fleet).await == 2
    })
    .await;
    t.handoff().await.unwrap();
    let b = fleet.replica("b");
    assert_eq!(keys_of(&b.open().await).await, ["k1", "k2", "k3", "k4"]);
}

#[actix_rt::test]
async fn pipelined_a_forget_erases_a_segment_whose_put_lands_after_its_segment_gave_up() {
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica_with("a", "a", |c| {
        pipelined(c);
        c.store_deadline = Duration::from_millis(300);
    });
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    t.snapshot().await.unwrap();
    // k1's put held at the store; k2's put (every try) outlives its deadline beside it.
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_segment_key, held);
    let first = spawn_insert(&t, "k1");
    gate.reached().await;
    fleet
        .durable
        .late_puts(leasehold::testkit::LatePuts::every(is_segment_key).hanging());
    let second = spawn_insert(&t, "k2");
    eventually(10_000, "k2's put under way", || async {
        fleet.durable.late_puts_held() > 0
    })
    .await;
    let forget = actix_rt::spawn(t.forget());
    gate.open();
    let _ = first.await.unwrap();
    let second = second.await.unwrap();
    assert!(second.is_err(), "k2 was never acknowledged: {second:?}");
    fleet.durable.clear_late_puts();
    // The put lands only once the forget has had every chance to sweep without it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!forget.is_finished(), "the forget waits for the late put");
    fleet.durable.land_late_puts().await.unwrap();
    within(10_000, "the forget", forget).await.unwrap().unwrap();
    let stored = fleet.stored_of_tenant().await;
    assert!(stored.is_empty(), "the forget left {stored:?}");
}

#[actix_rt::test]
async fn pipelined_a_passivation_settles_every_segment_in_flight_before_it_lets_go() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", |c| {
        pipelined(c);
        c.passivate_after = Some(Duration::from_secs(5));
    });
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    let (gate, writes) = segments_past_a_held_one(&fleet, &t, "k1", &["k2", "k3"]).await;
    // Idle past `passivate_after` (a renewal at each step keeps the lease).
    for _ in 0..2 {
        fleet.advance(Duration::from_secs(3));
        a.sup.renew_now().await.unwrap();
    }
    assert_eq!(a.sup.passivate_idle_now().await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !record(&fleet).await.released,
        "not let go while segments are in flight"
    );
    gate.open();
    for write in writes {
        write.await.unwrap().unwrap();
    }
    until_status(&t, TenantStatus::Passivated).await;
    let record = record(&fleet).await;
    assert!(record.released);
    assert_eq!(record.tip.map(|t| t.seq), Some(4));
    let b = fleet.replica("b");
    assert_eq!(keys_of(&b.open().await).await, ["k0", "k1", "k2", "k3"]);
}
