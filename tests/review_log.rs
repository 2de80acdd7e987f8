//! A hostile review of the change log: each `rvN_…` test pins a promise of docs/guarantees.md
//! ("The change log", "The log tip") that the code under review broke, and was seen failing
//! before its fix (docs/testing.md, "Review of the change log"); each `rv_held_…` test pins an
//! attack that held up. `rv3_…` is ignored only for its cost (a segment over 1 GiB): run it by
//! hand with `cargo test --features "testkit postgres s3" --test review_log -- --ignored`;
//! `rv3_small_…` drives the same finding through the runtime with a small `segment_limit`.

mod common;

use std::time::Duration;

use common::*;
use leasehold::LeaseStore;
use leasehold_actors::Durability;

/// A run that writes about `pages` 4 KiB pages in one batch.
async fn write_pages(t: &leasehold_actors::TenantRef, pages: i64) {
    t.run(move |tx| {
        tx.execute("CREATE TABLE IF NOT EXISTS bulk (b BLOB)", [])?;
        tx.execute("INSERT INTO bulk (b) VALUES (zeroblob(?1))", [pages * 4096])
    })
    .await
    .unwrap();
}

/// Finding 1: an image's read transaction is begun on the tenant's thread and then waits for
/// the publisher's chain lock (held by an earlier image's upload). While it waits it pins the
/// WAL, so the runtime's `wal_checkpoint(TRUNCATE)` (due after 1,000 frames) runs SQLite's
/// busy handler for the full `BUSY_TIMEOUT` (5 s) on the tenant's thread — at every commit.
#[actix_rt::test]
async fn rv1_a_slow_image_upload_does_not_stall_every_commit_for_the_busy_timeout() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    // The first image's upload is held at the store (as a slow S3 put would be).
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_image, held);
    let first = actix_rt::spawn({
        let t = t.clone();
        async move { t.snapshot().await }
    });
    gate.reached().await;
    // A second image begins its read transaction now, and waits for the first.
    let second = actix_rt::spawn({
        let t = t.clone();
        async move { t.snapshot().await }
    });
    insert(&t, "k1").await.unwrap();
    let started = std::time::Instant::now();
    write_pages(&t, 1_100).await; // past CHECKPOINT_FRAMES: a checkpoint is due
    insert(&t, "k2").await.unwrap();
    insert(&t, "k3").await.unwrap();
    let took = started.elapsed();
    gate.open();
    let _ = first.await;
    let _ = second.await;
    assert!(
        took < Duration::from_secs(2),
        "three small writes and one of 4 MiB took {took:?}: the tenant's thread sat in the checkpoint's busy handler"
    );
}

/// Finding 2: an `Images` tenure's images claim the tip it restored as their log position,
/// but hold its own later writes as well. A point-in-time restore to that position picks the
/// newest image "at" it and serves a state the log never had at that position.
#[actix_rt::test]
async fn rv2_point_in_time_restore_to_a_position_never_holds_later_writes() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k1").await.unwrap();
    insert(&t, "k2").await.unwrap();
    t.abandon().await.unwrap();
    let record = fleet.leases.inner().read(&key()).await.unwrap().unwrap();
    let target = record.tip.expect("a tip after two shipped writes");
    // The tenant moves to Images for a while (docs: "a tenant may move between modes").
    let b = fleet.replica_images("b");
    let t2 = b.open().await;
    insert(&t2, "k3-after-the-target").await.unwrap();
    t2.snapshot().await.unwrap().expect("an image");
    t2.abandon().await.unwrap();
    let dest = fleet.dir.path().join("as-of.db");
    let report = restore_as_of(&fleet, target, &dest).await.unwrap();
    assert_eq!(report.position, target);
    let keys = keys_in_file(&dest);
    assert_eq!(
        keys,
        ["k1", "k2"],
        "the state as of {target}, nothing later"
    );
}

/// Finding 3: the codec's 1 GiB limit binds only decoding (bincode 2 does not enforce
/// `with_limit` when encoding). A batch whose pages exceed 1 GiB is cut, encoded, put, its tip
/// moved and its callers told `Ok` — and every restore then refuses the segment as `Corrupt`:
/// the acknowledged write bricks the tenant. The writer must refuse what no reader can read.
#[test]
#[ignore = "finding 3 (fixed: the codec refuses to encode past its limit); needs ~4 GB of RAM and minutes: run by hand"]
fn rv3_a_segment_the_writer_encodes_is_one_the_restore_can_decode() {
    use leasehold::layout::LogPos;
    use leasehold::log::{Changes, Segment};
    let page_size = 65_536u32;
    let pages: u32 = 16_400; // 1.0 GiB + a little, in 64 KiB pages
    let mut changes = Changes {
        page_size,
        db_pages: pages + 1,
        pages: std::collections::BTreeMap::new(),
        sum_before: 0,
        sum_after: 0,
    };
    for pgno in 2..=pages + 1 {
        changes
            .pages
            .insert(pgno, vec![(pgno % 251) as u8; page_size as usize]);
    }
    let pos = LogPos { epoch: 1, seq: 2 };
    let prev = Some(LogPos { epoch: 1, seq: 1 });
    let seg = Segment::from_changes(&key(), pos, prev, changes, 0);
    let encoded = seg.encode();
    drop(seg);
    match encoded {
        // The writer refuses: the runtime can answer the batch with a typed error instead.
        Err(_) => {}
        Ok(bytes) => {
            let decoded = Segment::decode(&bytes, &key(), pos);
            assert!(
                decoded.is_ok(),
                "a {} byte segment was encoded (so it would be shipped and acknowledged) but a restore refuses it: {:?}",
                bytes.len(),
                decoded.err()
            );
        }
    }
}

/// Finding 3, cheaply and end to end (not ignored): with `segment_limit` at its smallest, every
/// segment the runtime ships is within the limit a reader is given and restores; a batch larger
/// than half of it is refused before `COMMIT` (never acknowledged, never shipped), and runs that
/// together pass the limit go as several segments of whole batches.
#[actix_rt::test]
async fn rv3_small_every_segment_the_writer_ships_is_within_the_limit_and_restores() {
    let limit = leasehold_actors::MIN_SEGMENT_LIMIT;
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", |c| c.segment_limit = limit);
    let t = a.open().await;
    let refused = t
        .run(|tx| {
            tx.execute("CREATE TABLE IF NOT EXISTS bulk (b BLOB)", [])?;
            tx.execute("INSERT INTO bulk (b) VALUES (randomblob(40000))", [])
        })
        .await;
    assert!(
        matches!(&refused, Err(e) if e.code() == "LEASEHOLD_BATCH_TOO_LARGE"),
        "{refused:?}"
    );
    for _ in 0..12 {
        write_pages(&t, 2).await;
    }
    insert(&t, "k1").await.unwrap();
    t.handoff().await.unwrap();
    for k in fleet.stored_of_tenant().await {
        if k.ends_with(".seg") {
            let size = fleet.durable.inner().size(&k).await.unwrap().unwrap();
            assert!(size <= limit, "{k}: {size} bytes");
        }
    }
    let b = fleet.replica("b");
    let t2 = b.open().await;
    assert_eq!(keys_of(&t2).await, ["k1"]);
    let rows: i64 = t2
        .run(|tx| tx.query_row("SELECT count(*) FROM bulk", [], |r| r.get(0)))
        .await
        .unwrap();
    assert_eq!(rows, 12);
}

/// Finding 4: retention deletes segments that are minutes old. The plan drops every segment
/// at or below the oldest kept image's position without looking at the segment's age, so the
/// first compaction image erases the log before it although `retain` (24 h) has not passed.
/// docs/guarantees.md promises "a point-in-time restore reaches any moment of the window"
/// (and the issue: delete "once they are older than `retain`").
#[actix_rt::test]
async fn rv4_a_point_in_time_restore_reaches_a_moment_seconds_ago_with_the_default_retention() {
    use leasehold_actors::Event;
    let fleet = Fleet::new().await;
    let a = fleet.replica("a"); // retain: the default 24 h
    let t = a.open().await;
    insert(&t, "k1").await.unwrap();
    let record = fleet.leases.inner().read(&key()).await.unwrap().unwrap();
    let first = record.tip.unwrap();
    insert(&t, "k2").await.unwrap();
    t.snapshot().await.unwrap().expect("an image");
    // Retention runs after the new image; wait until it reported.
    eventually(5_000, "the retention sweep", || async {
        a.saw(|e| matches!(e, Event::Swept { .. } | Event::SweepFailed { .. }))
            .await
    })
    .await;
    let dest = fleet.dir.path().join("a-second-ago.db");
    let restored = restore_as_of(&fleet, first, &dest).await;
    let stored = fleet.stored_of_tenant().await;
    assert!(
        restored.is_ok(),
        "the state after k1, seconds old, is inside a 24 h window: {restored:?}; the store holds {stored:?}"
    );
}

/// Finding 5: an abandon does not wait for the segment in flight. Its tip move lands, but the
/// actor stops before the answer comes back; the dropped reply reaches the caller as `Fenced`
/// ("nothing of it was", `TenantRef::run`), a definite refusal — while the successor serves
/// the write. A host that trusts `Fenced` and does the work again under a new key does it twice.
#[actix_rt::test]
async fn rv5_a_write_the_successor_sees_is_never_answered_with_a_definite_refusal() {
    use leasehold::testkit::LeaseOp;
    let fleet = Fleet::new().await;
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    // The tip move lands at the store; its answer is held on the way back.
    let (reached_tx, reached) = tokio::sync::oneshot::channel::<()>();
    let (open, open_rx) = tokio::sync::oneshot::channel::<()>();
    fleet
        .leases
        .after_next(LeaseOp::MoveTip, move || async move {
            let _ = reached_tx.send(());
            let _ = open_rx.await;
        });
    let written = actix_rt::spawn({
        let t = t.clone();
        async move { insert(&t, "in-the-log").await }
    });
    within(5_000, "the tip move to land", reached)
        .await
        .unwrap();
    t.abandon().await.unwrap();
    let _ = open.send(());
    let written = within(5_000, "the caller's answer", written).await.unwrap();
    let b = fleet.replica("b");
    let keys = keys_of(&b.open().await).await;
    assert!(
        keys.contains(&"in-the-log".to_string()),
        "the tip moved: {keys:?}"
    );
    assert!(
        written.is_ok() || written.as_ref().is_err_and(|e| e.is_outcome_unknown()),
        "the successor serves the write, but its caller heard a definite {written:?}"
    );
}

fn sha_of(path: &std::path::Path) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(std::fs::read(path).unwrap()))
}

async fn content(t: &leasehold_actors::TenantRef) -> (i64, i64, String) {
    t.run(|tx| {
        let (n, sum): (i64, i64) = tx.query_row(
            "SELECT count(*), coalesce(sum(length(b) + v), 0) FROM big",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let check: String = tx.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        Ok::<_, leasehold::ledger::LedgerError>((n, sum, check))
    })
    .await
    .unwrap()
}

/// Held up: batches larger than the page cache (SQLite spills dirty pages into the WAL before
/// `COMMIT` and rewrites them), a run of the same batch that fails after writing a lot (its
/// savepoint rolled back after the spill), and checkpoints with a WAL restart in between all
/// restore byte for byte.
#[actix_rt::test]
async fn rv_held_a_spilling_batch_with_a_rolled_back_run_and_wal_restarts_restores_byte_for_byte() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("a");
    let t = a.open().await;
    t.run(|tx| {
        tx.execute(
            "CREATE TABLE big (id INTEGER PRIMARY KEY, v INTEGER, b BLOB)",
            [],
        )
    })
    .await
    .unwrap();
    for round in 0..2i64 {
        // One mailbox burst: a big insert, a run that writes a lot and fails, a big update.
        let fill = t.run(move |tx| {
            for i in 0..1_500i64 {
                tx.execute(
                    "INSERT INTO big (v, b) VALUES (?1, randomblob(3000))",
                    [round * 10_000 + i],
                )?;
            }
            Ok(())
        });
        let failing = t.run(|tx| {
            for _ in 0..1_500 {
                tx.execute("INSERT INTO big (v, b) VALUES (-1, randomblob(3000))", [])?;
            }
            tx.execute("UPDATE big SET v = v + 1", [])?;
            Err::<(), _>(leasehold::ledger::LedgerError::Sqlite(
                "the host gives up".into(),
            ))
        });
        let update = t.run(move |tx| {
            tx.execute(
                "UPDATE big SET v = v * 2, b = randomblob(2500) WHERE id % 3 = ?1",
                [round],
            )
        });
        let (fill, failing, update) = futures::join!(fill, failing, update);
        fill.unwrap();
        assert!(failing.is_err());
        update.unwrap();
        t.run(|tx| tx.execute("DELETE FROM big WHERE id % 5 = 0", []))
            .await
            .unwrap();
    }
    let before = content(&t).await;
    assert_eq!(before.2, "ok");
    t.abandon().await.unwrap();
    let writer = sha_of(&a.ledger_file());
    let b = fleet.replica("b");
    let t2 = b.open().await;
    assert_eq!(content(&t2).await, before);
    t2.abandon().await.unwrap();
    assert_eq!(sha_of(&b.ledger_file()), writer, "the same bytes");
}

/// Held up: Shipped → Images → Shipped: the log continues from the Images tenure's image, and
/// a Shipped successor of that serves exactly what was acknowledged on the log and imaged.
#[actix_rt::test]
async fn rv_held_a_tenant_moves_between_modes_and_the_log_continues_from_the_image() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k1").await.unwrap();
    insert(&t, "k2").await.unwrap();
    t.abandon().await.unwrap();
    let b = fleet.replica_images("b");
    let t2 = b.open().await;
    assert_eq!(keys_of(&t2).await, ["k1", "k2"]);
    insert(&t2, "k3").await.unwrap();
    t2.snapshot().await.unwrap().expect("an image");
    insert(&t2, "k4-lost-by-images").await.unwrap();
    t2.abandon().await.unwrap();
    let c = fleet.replica("c");
    let t3 = c.open().await;
    assert_eq!(keys_of(&t3).await, ["k1", "k2", "k3"]);
    insert(&t3, "k5").await.unwrap();
    t3.abandon().await.unwrap();
    let d = fleet.replica("d");
    let t4 = d.open().await;
    assert_eq!(keys_of(&t4).await, ["k1", "k2", "k3", "k5"]);
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Finding 6: every explicit snapshot of a logged tenant opens a read connection (its database
/// and WAL descriptors, measured 2 per snapshot) on the tenant's thread *before* it waits for
/// the publisher, so while one upload is slow each further `snapshot()` holds more
/// descriptors until it gets its turn: unbounded, outside the `max_open` reserve
/// (docs/guarantees.md, "most tenants open at once").
#[actix_rt::test]
async fn rv6_snapshots_waiting_behind_a_slow_upload_hold_a_bounded_number_of_descriptors() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_image, held);
    let first = t.snapshot();
    let first = actix_rt::spawn(first);
    gate.reached().await;
    let before = open_fds();
    let waiting: Vec<_> = (0..40).map(|_| actix_rt::spawn(t.snapshot())).collect();
    // A read-only run queued behind them: once it is answered every snapshot was handled.
    tokio::task::yield_now().await;
    t.run(|tx| tx.query_row("SELECT 1", [], |r| r.get::<_, i64>(0)))
        .await
        .unwrap();
    let during = open_fds();
    gate.open();
    let _ = first.await;
    for w in waiting {
        let _ = w.await;
    }
    assert!(
        during <= before + 6,
        "40 snapshots waiting behind one upload hold {} more descriptors ({before} → {during})",
        during - before
    );
}

/// Holds the next `n` calls of `move_tip`, each for `delay`, one after the other.
fn slow_tip_moves(store: leasehold::testkit::FaultyLeaseStore, n: usize, delay: Duration) {
    let next = store.clone();
    store.before_next(leasehold::testkit::LeaseOp::MoveTip, move || async move {
        if n > 1 {
            slow_tip_moves(next, n - 1, delay);
        }
        tokio::time::sleep(delay).await;
    });
}

/// Finding 7: docs/guarantees.md gives the RPO of `Async { every }` as "the writes
/// acknowledged in the last `every` plus one shipping (a put and a tip move, each under
/// `store_deadline`)". But a tip move of unknown outcome is asked three times, each under
/// `store_deadline`, and writes go on being acknowledged meanwhile: a crash-free run loses
/// writes acknowledged over `every` + put + 3 tip moves.
#[actix_rt::test]
async fn rv7_async_loses_no_more_than_the_declared_window() {
    let every = Duration::from_millis(20);
    let deadline = Duration::from_millis(300);
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", |c| {
        c.durability = Durability::Async { every };
        c.store_deadline = deadline;
    });
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    eventually(5_000, "k0 shipped", || async {
        let r = fleet.leases.inner().read(&key()).await.unwrap().unwrap();
        r.tip.is_some()
    })
    .await;
    slow_tip_moves(fleet.leases.clone(), 3, 4 * deadline);
    let started = std::time::Instant::now();
    let mut acked = Vec::new();
    for i in 0.. {
        let k = format!("w{i}");
        match insert(&t, &k).await {
            Ok(_) => acked.push((k, started.elapsed())),
            Err(_) => break,
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the log never failed"
        );
    }
    fleet.advance(TTL + Duration::from_secs(1));
    let b = fleet.replica("b");
    let kept = keys_of(&b.open().await).await;
    let lost: Vec<_> = acked.iter().filter(|(k, _)| !kept.contains(k)).collect();
    let (Some(first), Some(last)) = (lost.first(), lost.last()) else {
        panic!("nothing was lost: {kept:?}");
    };
    let span = last.1 - first.1;
    // docs/guarantees.md: every + up to two shippings (the one in flight and the next), each
    // a put and up to three tip moves under `store_deadline`.
    let declared = every + 2 * (deadline + 3 * deadline);
    assert!(
        span <= declared + Duration::from_millis(100),
        "{} acknowledged writes lost, acknowledged over {span:?}; declared {declared:?}",
        lost.len()
    );
}

/// Finding 8: a new tenure counts the segments since the newest image
/// from zero (`LogShip::new` starts `since_image` empty), although the log it restored may
/// already hold many. A tenant handed off before each tenure ships `compaction.segments`
/// segments (cheap now: a handoff publishes no image) is never compacted: its log, its restore
/// time and the restore's memory ("bounded by compaction", docs/guarantees.md) grow forever.
#[actix_rt::test]
async fn rv8_segments_shipped_by_earlier_tenures_count_toward_compaction() {
    let fleet = Fleet::new().await;
    let tweak = |c: &mut leasehold_actors::RuntimeConfig| {
        c.snapshot_every = Some(Duration::from_millis(10));
        c.compaction.segments = 5;
    };
    let mut n = 0;
    for node in ["a", "b", "c", "d"] {
        let r = fleet.replica_with(node, node, tweak);
        let t = r.open().await;
        for _ in 0..4 {
            insert(&t, &format!("k{n}")).await.unwrap();
            n += 1;
        }
        if node == "d" {
            // 16 segments since the start of the log, compaction every 5: an image is due.
            eventually(
                3_000,
                "a compaction image, 16 segments after the last (none) over four tenures",
                || async { fleet.stored_of_tenant().await.iter().any(|k| is_image(k)) },
            )
            .await;
        }
        t.handoff().await.unwrap();
    }
}

/// Finding 9: an image taken while a segment is in flight waits for the tip only
/// `store_deadline` after its upload, although the segment may take a put *and* a tip move,
/// each up to `store_deadline`. A segment that ships slowly but well makes the image fail with
/// `Fenced` while the lease is held and the tenant serves on: a false "fenced" to the caller,
/// and compaction never succeeds against a store that is merely slow.
#[actix_rt::test]
async fn rv9_a_snapshot_while_a_segment_ships_slowly_is_not_fenced() {
    let deadline = Duration::from_millis(400);
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", |c| c.store_deadline = deadline);
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    // The next segment: its put and its tip move each take 3/4 of the deadline.
    let (reached_tx, reached) = tokio::sync::oneshot::channel::<()>();
    let slow = deadline * 3 / 4;
    fleet.durable.before_next_put_matching(
        |k| k.ends_with(".seg"),
        hook(async move {
            let _ = reached_tx.send(());
            tokio::time::sleep(slow).await;
        }),
    );
    slow_tip_moves(fleet.leases.clone(), 1, slow);
    let written = actix_rt::spawn({
        let t = t.clone();
        async move { insert(&t, "slow-but-fine").await }
    });
    // The segment is in flight; the image holds its position.
    within(5_000, "the segment put", reached).await.unwrap();
    let image = t.snapshot().await;
    assert!(written.await.unwrap().is_ok(), "the segment shipped");
    assert_eq!(t.status().await, leasehold_actors::TenantStatus::Serving);
    assert!(
        image.is_ok(),
        "the lease is held and the log shipped, yet the snapshot answered {image:?}"
    );
}

/// Held up: `close()` while a segment is in flight waits for it: the write's caller hears `Ok`
/// and the successor serves it.
#[actix_rt::test]
async fn rv_held_close_with_a_segment_in_flight_keeps_the_answer_and_the_log_in_step() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    let (held, mut gate) = gated();
    fleet
        .durable
        .before_next_put_matching(|k| k.ends_with(".seg"), held);
    let written = actix_rt::spawn({
        let t = t.clone();
        async move { insert(&t, "in-flight").await }
    });
    gate.reached().await;
    let closing = actix_rt::spawn(a.sup.close());
    tokio::task::yield_now().await;
    gate.open();
    let written = within(10_000, "the write's answer", written).await.unwrap();
    let _ = within(10_000, "close", closing).await;
    let b = fleet.replica("b");
    let keys = keys_of(&b.open().await).await;
    let in_log = keys.contains(&"in-flight".to_string());
    let answer_fits = if in_log {
        written.is_ok() || written.as_ref().is_err_and(|e| e.is_outcome_unknown())
    } else {
        written.is_err()
    };
    assert!(answer_fits, "answer {written:?}, successor {keys:?}");
}

/// Held up: a zombie (its own clock says it holds; the store gave the lease to a successor)
/// commits locally and puts its segment, but its tip move is refused: it answers `Fenced`, the
/// successor never reads the zombie's segment, and the successor's own next segment takes the
/// same number in its epoch.
#[actix_rt::test]
async fn rv_held_a_zombies_segment_is_never_read_and_its_write_is_refused() {
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k1").await.unwrap();
    // Only the store's clock moves: replica a still believes it holds the lease.
    fleet.store_clock.advance(TTL + Duration::from_secs(1));
    let b = fleet.replica("b");
    let t2 = b.open().await;
    let zombie = insert(&t, "zombie").await;
    assert!(zombie.is_err(), "{zombie:?}");
    insert(&t2, "k2").await.unwrap();
    let keys = keys_of(&t2).await;
    assert_eq!(keys, ["k1", "k2"]);
    t2.abandon().await.unwrap();
    let c = fleet.replica("c");
    assert_eq!(keys_of(&c.open().await).await, ["k1", "k2"]);
}

/// Held up: a forget while a segment is in flight waits for it, then erases every object.
#[actix_rt::test]
async fn rv_held_a_forget_racing_a_segment_in_flight_leaves_nothing() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("a");
    let t = a.open().await;
    insert(&t, "k0").await.unwrap();
    t.snapshot().await.unwrap();
    let (held, mut gate) = gated();
    fleet
        .durable
        .before_next_put_matching(|k| k.ends_with(".seg"), held);
    let written = actix_rt::spawn({
        let t = t.clone();
        async move { insert(&t, "in-flight").await }
    });
    gate.reached().await;
    let forget = actix_rt::spawn(t.forget());
    tokio::task::yield_now().await;
    gate.open();
    let _ = within(5_000, "the write", written).await;
    within(5_000, "the forget", forget).await.unwrap().unwrap();
    let stored = fleet.stored_of_tenant().await;
    assert!(stored.is_empty(), "the forget left {stored:?}");
}
