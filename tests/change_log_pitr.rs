//! Point-in-time restore through the runtime (docs/guarantees.md, "Point-in-time restore"): the
//! window's moments stay restorable across retention runs, across changes of durability mode,
//! and when the hosts that wrote the log disagree about the time. Each test was seen failing
//! before its fix (docs/testing.md, "The change log under review").

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use leasehold::layout::{LogPos, image_key, manifest_key, segment_key};
use leasehold::log::{LogError, PitrReport, Target};
use leasehold::testkit::{LeaseOp, StoreOp};
use leasehold::{Clock, LeaseStore, ManualClock};
use leasehold_actors::{Event, TenantRef};

/// A wall-clock reading in 2023, where the manual wall clocks of these tests start.
const WALL: u64 = 1_700_000_000_000;

/// Restores the main tenant as of `target` into `name` in the fleet's directory, and reads the
/// idempotency keys the file holds.
async fn restore(fleet: &Fleet, target: Target, name: &str) -> Result<Vec<String>, LogError> {
    let dest = fleet.dir.path().join(name);
    let report: PitrReport = leasehold::log::restore_to(
        fleet.durable.inner().as_ref(),
        fleet.leases.inner().as_ref(),
        &key(),
        target,
        &dest,
    )
    .await?;
    assert_eq!(report.sha256.len(), 64);
    Ok(keys_in_file(&dest))
}

/// The tip of the main tenant, as the lease store holds it.
async fn tip(fleet: &Fleet) -> LogPos {
    let record = fleet.leases.inner().read(&key()).await.unwrap().unwrap();
    record.tip.expect("a tip")
}

/// Inserts `idem` and returns the tip it left.
async fn write(fleet: &Fleet, t: &TenantRef, idem: &str) -> LogPos {
    insert(t, idem).await.unwrap();
    tip(fleet).await
}

/// Waits until the replica reported `n` retention sweeps (each new image runs one).
async fn sweeps(replica: &Replica, n: usize) {
    eventually(10_000, "the retention sweeps", || async {
        let events = replica.events().await;
        let done = events
            .iter()
            .filter(|e| matches!(e, Event::Swept { .. } | Event::SweepFailed { .. }))
            .count();
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, Event::SweepFailed { .. })),
            "{events:?}"
        );
        done >= n
    })
    .await;
}

/// The storage bound holds after every new image, one published while the retention of an
/// earlier image still runs among them (its listing slow): that retention read the record and
/// took its `now` before the image, so it cannot stand for it; another runs after it. It used
/// to run none until the next image, and the image the window had moved past stayed, with the
/// segments below the new base (docs/guarantees.md, the storage bound).
#[actix_rt::test]
async fn storage_bound_an_image_published_while_retention_runs_gets_a_retention_after_it() {
    let fleet = Fleet::new().await;
    let wall = ManualClock::new(WALL);
    let a = fleet.replica_with("a", "a", |c| {
        c.retain = Duration::from_secs(60);
        c.wall_clock = Arc::new(wall.clone());
    });
    let t = a.open().await;
    write(&fleet, &t, "k1").await;
    t.snapshot().await.unwrap().expect("the first image");
    sweeps(&a, 1).await;
    wall.advance(Duration::from_secs(100));
    write(&fleet, &t, "k2").await;
    // The second image's retention (its `now` 100 s on) is held at its listing.
    let (held, mut gate) = gated();
    fleet.durable.before_next(StoreOp::List, held);
    t.snapshot().await.unwrap().expect("the second image");
    gate.reached().await;
    wall.advance(Duration::from_secs(100));
    write(&fleet, &t, "k3").await;
    let second = tip(&fleet).await;
    t.snapshot().await.unwrap().expect("the third image");
    gate.open();
    // After the third image (cutoff 140 s on) the second is the window's base: the first goes,
    // and so do the segments below the second's position.
    sweeps(&a, 3).await;
    let stored = fleet.stored_of_tenant().await;
    let first = image_key(&key(), 1, 1);
    assert!(!stored.contains(&first), "{stored:?}");
    assert!(stored.contains(&image_key(&key(), 1, 2)), "{stored:?}");
    assert!(
        !stored.contains(&segment_key(&key(), LogPos { epoch: 1, seq: 1 })),
        "{stored:?}"
    );
    assert!(second.seq > 1, "{second:?}");
}

/// Hole 3: the second retention run deleted the window's base that the first kept (an image
/// counted as on the chain only while the segment at its own position was listed; the first
/// run deleted it), so the moments between the base and the next image were lost.
#[actix_rt::test]
async fn cl7_a_moment_of_the_window_is_restorable_after_two_retention_runs() {
    let fleet = Fleet::new().await;
    let wall = ManualClock::new(WALL);
    let a = fleet.replica_with("a", "a", |c| {
        c.retain = Duration::from_secs(60);
        c.wall_clock = Arc::new(wall.clone());
    });
    let t = a.open().await;
    write(&fleet, &t, "k1").await;
    t.snapshot()
        .await
        .unwrap()
        .expect("the window's base, once it is old");
    sweeps(&a, 1).await;
    wall.advance(Duration::from_secs(10));
    let second = write(&fleet, &t, "k2").await;
    // The window is the last 60 s: its first moment (WALL + 50 s) holds k1 and k2.
    wall.advance(Duration::from_secs(100));
    write(&fleet, &t, "k3").await;
    t.snapshot().await.unwrap().expect("a young image");
    sweeps(&a, 2).await;
    write(&fleet, &t, "k4").await;
    t.snapshot().await.unwrap().expect("another young image");
    sweeps(&a, 3).await;
    let start = Target::Time {
        unix_ms: WALL + 50_000,
    };
    let stored = fleet.stored_of_tenant().await;
    for (target, name) in [(Target::Position(second), "at-k2.db"), (start, "start.db")] {
        let restored = restore(&fleet, target, name).await;
        assert_eq!(
            restored.as_deref().map_err(|e| e.to_string()),
            Ok(&["k1".to_string(), "k2".to_string()][..]),
            "{target}; the store holds {stored:?}"
        );
    }
}

/// Hole 4: after `Shipped`, `Images`, `Shipped`, the last tenure's segments apply to the
/// `Images` tenure's image (beyond its log), which point-in-time restore never used: it
/// replayed the older segments and the checksum refused the next one (`OutOfChain`) at every
/// position after the change, the tip included.
#[actix_rt::test]
async fn cl7_every_position_is_restorable_across_changes_of_durability_mode() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("a");
    let t = a.open().await;
    write(&fleet, &t, "k1").await;
    let switch = write(&fleet, &t, "k2").await;
    t.abandon().await.unwrap();
    // A tenure without a log: its image holds k3 beyond the log's position.
    let b = fleet.replica_images("b");
    let t = b.open().await;
    insert(&t, "k3").await.unwrap();
    t.snapshot()
        .await
        .unwrap()
        .expect("an image beyond the log");
    t.abandon().await.unwrap();
    // A log again, continuing from that image; first an image before any segment of its own
    // (after a batch that wrote nothing): it holds k3 too, at the position that held k1, k2.
    let c = fleet.replica("c");
    let t = c.open().await;
    assert_eq!(keys_of(&t).await, ["k1", "k2", "k3"]);
    let image = t
        .snapshot()
        .await
        .unwrap()
        .expect("an image of the restored state");
    assert_eq!(image.epoch, 3, "a new image, not the restored head");
    let after = write(&fleet, &t, "k4").await;
    t.abandon().await.unwrap();
    let d = fleet.replica("d");
    let t = d.open().await;
    let tip = write(&fleet, &t, "k5").await;
    assert_eq!(keys_of(&t).await, ["k1", "k2", "k3", "k4", "k5"]);
    let want = |keys: &[&str]| keys.iter().map(|k| k.to_string()).collect::<Vec<_>>();
    for (at, keys) in [
        (switch, want(&["k1", "k2"])),
        (after, want(&["k1", "k2", "k3", "k4"])),
        (tip, want(&["k1", "k2", "k3", "k4", "k5"])),
    ] {
        let restored = restore(&fleet, Target::Position(at), &format!("at-{}.db", at.seq)).await;
        assert_eq!(
            restored.map_err(|e| e.to_string()),
            Ok(keys),
            "position {at}"
        );
    }
}

/// Hole 13: a segment was stamped with its host's wall clock, and a restore by time took the
/// newest segment stamped at or before the target. Host A writes w1–w3 and hands off; host B,
/// whose clock is 60 s behind, writes w4–w6: a restore to the time of A's second segment must
/// not hold B's writes.
#[actix_rt::test]
async fn cl7_a_restore_by_time_holds_no_later_write_when_the_hosts_clocks_differ() {
    let fleet = Fleet::new().await;
    let (wall_a, wall_b) = (ManualClock::new(WALL), ManualClock::new(WALL - 60_000));
    let a = fleet.replica_with("a", "a", |c| c.wall_clock = Arc::new(wall_a.clone()));
    let t = a.open().await;
    let mut times = Vec::new();
    for w in ["w1", "w2", "w3"] {
        times.push(wall_a.now_ms());
        insert(&t, w).await.unwrap();
        wall_a.advance(Duration::from_secs(1));
        wall_b.advance(Duration::from_secs(1));
    }
    t.handoff().await.unwrap();
    let b = fleet.replica_with("b", "b", |c| c.wall_clock = Arc::new(wall_b.clone()));
    let t = b.open().await;
    for w in ["w4", "w5", "w6"] {
        insert(&t, w).await.unwrap();
        wall_b.advance(Duration::from_secs(1));
    }
    let target = Target::Time { unix_ms: times[1] };
    let restored = restore(&fleet, target, "as-of-w2.db").await.unwrap();
    assert_eq!(restored, ["w1", "w2"], "{target}");
    let restored = restore(&fleet, Target::Time { unix_ms: u64::MAX }, "now.db")
        .await
        .unwrap();
    assert_eq!(restored, ["w1", "w2", "w3", "w4", "w5", "w6"]);
}

/// Hole 13, retention's side: retention judges an image old by its manifest's time against the
/// running host's wall clock, while a restore by time reads the segments' stamps. An image taken
/// by a host whose clock lags the stamps of the position it holds looked older than that
/// position: retention made it the window's base and deleted the segments before it, though the
/// window's first moment (by the stamps) lies before it. Host A writes w1, w2; host C, 100 s
/// ahead, writes w3; host B takes an image of w3 (at its 30 s), writes w4 and takes another at
/// 60 s, with `retain` 15 s: the moment 45 s holds w1, w2 by the stamps and must restore.
#[actix_rt::test]
async fn cl7_a_moment_of_the_window_is_restorable_when_an_image_was_taken_by_a_host_behind_the_log()
{
    let fleet = Fleet::new().await;
    let wall = |offset_s: u64| ManualClock::new(WALL + offset_s * 1_000);
    let (wall_a, wall_b, wall_c) = (wall(0), wall(30), wall(120));
    let host = |id: &str, clock: &ManualClock| {
        let clock = clock.clone();
        fleet.replica_with(id, id, move |c| {
            c.retain = Duration::from_secs(15);
            c.wall_clock = Arc::new(clock);
        })
    };
    let a = host("a", &wall_a);
    let t = a.open().await;
    write(&fleet, &t, "w1").await;
    wall_a.advance(Duration::from_secs(10));
    write(&fleet, &t, "w2").await;
    t.handoff().await.unwrap();
    let c = host("c", &wall_c);
    let t = c.open().await;
    write(&fleet, &t, "w3").await;
    t.handoff().await.unwrap();
    let b = host("b", &wall_b);
    let t = b.open().await;
    assert_eq!(keys_of(&t).await, ["w1", "w2", "w3"]);
    t.snapshot()
        .await
        .unwrap()
        .expect("an image of w3, at B's 30 s");
    sweeps(&b, 1).await;
    wall_b.advance(Duration::from_secs(30));
    write(&fleet, &t, "w4").await;
    t.snapshot()
        .await
        .unwrap()
        .expect("an image of w4, at B's 60 s");
    sweeps(&b, 2).await;
    let target = Target::Time {
        unix_ms: WALL + 45_000,
    };
    let stored = fleet.stored_of_tenant().await;
    let restored = restore(&fleet, target, "at-45s.db").await;
    assert_eq!(
        restored.map_err(|e| e.to_string()),
        Ok(vec!["w1".to_string(), "w2".to_string()]),
        "{target}; the store holds {stored:?}"
    );
}

/// Hole 6b of the change log's final review: the first image's head move timed out but landed;
/// its tenure, not knowing, built its next image on no head, so that head passes the first one
/// by. Retention, run after the second image, took the first (then the only old one) as the
/// window's base and deleted the segment below it; the replica's reconciliation then took the
/// base back (the head's chain of bases passes it by), and the window's first moment could no
/// longer be restored. The reconciliation now keeps an image the head moved past and leaves it
/// to retention, which deletes it once an image on the head's chain replaces it as the base.
#[actix_rt::test]
async fn final_review_hole6b_a_base_the_head_passed_by_stays_until_retention_replaces_it() {
    let fleet = Fleet::new().await;
    let wall = ManualClock::new(WALL);
    let a = fleet.replica_with("a", "a", |c| {
        c.retain = Duration::from_secs(60);
        c.wall_clock = Arc::new(wall.clone());
        // The image's entry falls due at its put's deadline, on the replica's clock: short, so
        // that the clock passes it well within the lease.
        c.store_deadline = Duration::from_secs(1);
    });
    let t = a.open().await;
    write(&fleet, &t, "k1").await;
    let second = write(&fleet, &t, "k2").await;
    // Image (1, 1) at k2's position: its head move's answer is lost, and the move lands.
    fleet.leases.land_late(LeaseOp::PublishHead);
    assert!(t.snapshot().await.is_err(), "the head move timed out");
    fleet.leases.land_held().await;
    let head = |r: leasehold::lease::LeaseRecord| r.head.map(|h| (h.epoch, h.seq));
    let record = fleet.leases.inner().read(&key()).await.unwrap().unwrap();
    assert_eq!(head(record), Some((1, 1)), "the move landed");
    // 100 s later the window (60 s) starts after (1, 1): it is the old image, the base.
    wall.advance(Duration::from_secs(100));
    write(&fleet, &t, "k3").await;
    let image = t.snapshot().await.unwrap().expect("an image on no head");
    assert_eq!((image.epoch, image.seq), (1, 2));
    sweeps(&a, 1).await;
    let first_segment = segment_key(&key(), LogPos { epoch: 1, seq: 1 });
    let base = image_key(&key(), 1, 1);
    let stored = fleet.stored_of_tenant().await;
    assert!(
        !stored.contains(&first_segment),
        "below the base: {stored:?}"
    );
    assert!(stored.contains(&base), "the base: {stored:?}");
    // The image's entry falls due; the reconciliation judges it with the head past it.
    a.clock.as_ref().unwrap().advance(Duration::from_secs(5));
    a.sup.reconcile_now().await.unwrap();
    let stored = fleet.stored_of_tenant().await;
    assert!(stored.contains(&base), "the base stays: {stored:?}");
    let start = Target::Time {
        unix_ms: WALL + 50_000,
    };
    let want = |keys: &[&str]| keys.iter().map(|k| k.to_string()).collect::<Vec<_>>();
    for (target, name) in [(Target::Position(second), "at-k2.db"), (start, "start.db")] {
        let restored = restore(&fleet, target, name).await;
        assert_eq!(
            restored.map_err(|e| e.to_string()),
            Ok(want(&["k1", "k2"])),
            "{target}; the store holds {stored:?}"
        );
    }
    // Once (1, 2), on the head's chain, is old too, it is the base, and (1, 1) goes.
    wall.advance(Duration::from_secs(100));
    write(&fleet, &t, "k4").await;
    t.snapshot().await.unwrap().expect("a young image");
    sweeps(&a, 2).await;
    let stored = fleet.stored_of_tenant().await;
    assert!(!stored.contains(&base), "retention took it: {stored:?}");
    assert!(
        !stored.contains(&manifest_key(&key(), 1, 1)),
        "its manifest too: {stored:?}"
    );
    let start = Target::Time {
        unix_ms: WALL + 150_000,
    };
    let restored = restore(&fleet, start, "later-start.db").await;
    assert_eq!(
        restored.map_err(|e| e.to_string()),
        Ok(want(&["k1", "k2", "k3"]))
    );
}
