//! Sizes against the store (docs/guarantees.md, the numbers and "Limits"): a restore reads every
//! segment within a deadline grown with its size, however large the segment, and fetches only so
//! many bytes at once that segments sharing one slow link still arrive in time.
//!
//! The store is a [`MemStore`] behind a [`FaultyStore`] whose reads take tokio time in proportion
//! to their bytes ([`Pace`]), behind the runtime's [`Deadline`], on a paused clock: what is
//! measured is exactly the deadline arithmetic, never the machine's speed.

mod log_support;

use std::sync::Arc;
use std::time::Duration;

use leasehold::deadline::Deadline;
use leasehold::durable::{DurableStore, SharedDurableStore};
use leasehold::log::{Restored, restore_log};
use leasehold::testkit::{FaultyStore, MemStore, Pace};
use log_support::{Db, Log, key};

/// A store reading at 10 MiB/s (100 ms per MiB: faster than the 8 MiB/s a deadline allows for),
/// behind a deadline of 500 ms; reads share one link when `shared_link`.
fn slow_store(shared_link: bool) -> (FaultyStore, Deadline<SharedDurableStore>) {
    let faulty = FaultyStore::new(Arc::new(MemStore::new()));
    faulty.set_pace(Pace {
        per_mib_read: Duration::from_millis(100),
        shared_link,
        ..Pace::default()
    });
    let store = Deadline::new(faulty.shared(), Duration::from_millis(500)).unwrap();
    (faulty, store)
}

/// Restores the tenant of `log` (no image) into a fresh file; the file's bytes must be `want`.
async fn restore_and_compare(
    store: &dyn DurableStore,
    log: &Log,
    want: &[u8],
) -> Result<Restored, leasehold::log::LogError> {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("ledger.db");
    let restored = restore_log(store, &key(), None, log.tip, 0, &dest).await?;
    assert_eq!(std::fs::read(&dest).unwrap(), want, "byte-exact");
    Ok(restored)
}

/// Hole 1: a segment's put had a deadline grown with its size, its get did not. An acknowledged
/// batch of 8 MB takes almost 0.8 s to read at 10 MiB/s, longer than `store_deadline` (500 ms): every
/// later open failed with `Timeout { op: "get" }`, and the acknowledged write was out of reach.
#[tokio::test(start_paused = true)]
async fn promise3_an_acknowledged_8_mb_batch_restores_from_a_store_reading_at_10_mib_s() {
    let dir = tempfile::tempdir().unwrap();
    let (faulty, store) = slow_store(false);
    let db = Db::create(dir.path(), "writer.db");
    db.run("CREATE TABLE bulk(b BLOB); INSERT INTO bulk VALUES (randomblob(8000000));");
    let mut log = Log::new();
    let tip = log.ship(faulty.inner().as_ref(), 1, &db.bytes(), 1).await;
    let segment = faulty
        .inner()
        .size(&leasehold::layout::segment_key(&key(), tip))
        .await
        .unwrap()
        .unwrap();
    assert!(segment > 8_000_000, "one segment of {segment} bytes");
    let started = tokio::time::Instant::now();
    let restored = restore_and_compare(&store, &log, &db.bytes()).await;
    let restored = restored.expect("the acknowledged batch restores");
    assert_eq!(restored.segments, 1);
    let took = started.elapsed();
    assert!(
        took > Duration::from_millis(700),
        "the read took its paced time, longer than store_deadline: {took:?}"
    );
}

/// Hole 1, the other half: the restore fetched 16 segments at once. On one slow link they share
/// the bandwidth, so the last of 16 segments of half a MiB arrived after 0.8 s, past its 500 ms:
/// each segment was small, and the restore still failed.
#[tokio::test(start_paused = true)]
async fn promise3_many_small_segments_restore_over_one_shared_slow_link() {
    let dir = tempfile::tempdir().unwrap();
    let (faulty, store) = slow_store(true);
    let db = Db::create(dir.path(), "writer.db");
    db.run("CREATE TABLE t(b BLOB); INSERT INTO t VALUES (randomblob(500000));");
    let mut log = Log::new();
    log.ship(faulty.inner().as_ref(), 1, &db.bytes(), 1).await;
    for i in 0..40 {
        db.run("UPDATE t SET b = randomblob(500000);");
        log.ship(faulty.inner().as_ref(), 1, &db.bytes(), 2 + i)
            .await;
    }
    let restored = restore_and_compare(&store, &log, &db.bytes()).await;
    let restored = restored.expect("41 segments of half a MiB each restore over a 10 MiB/s link");
    assert_eq!(restored.segments, 41);
}
