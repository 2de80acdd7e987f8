//! Sizes against the store (docs/guarantees.md, the numbers and "Limits"): a restore reads every
//! segment within a deadline grown with its size, however large the segment, and fetches only so
//! many bytes at once that segments sharing one slow link still arrive in time; and a logged
//! ledger measures a batch before `COMMIT`, so that a run too large for a segment is refused
//! before anything of it commits.
//!
//! The store is a [`MemStore`] behind a [`FaultyStore`] whose reads take tokio time in proportion
//! to their bytes ([`Pace`]), behind the runtime's [`Deadline`], on a paused clock: what is
//! measured is exactly the deadline arithmetic, never the machine's speed.

mod log_support;

use std::sync::Arc;
use std::time::Duration;

use leasehold::deadline::Deadline;
use leasehold::durable::{DurableStore, SharedDurableStore};
use leasehold::ledger::{Ledger, LedgerError, LedgerOptions};
use leasehold::log::segment::encoded_bound;
use leasehold::log::{PageSums, Restored, restore_log};
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

// ---- The batch's size before COMMIT (`src/ledger/batch_size.rs`).

/// A logged ledger in `dir` whose runs may take `limit` bytes as a segment, holding a table
/// `t(b BLOB)` with one row of `seed` bytes.
fn limited_ledger(dir: &std::path::Path, limit: u64, seed: usize) -> Ledger {
    let path = dir.join("ledger.db");
    let mut ledger = Ledger::open_logged(&path, &LedgerOptions::default(), &PageSums::empty())
        .expect("a logged ledger");
    ledger
        .run(|tx| {
            tx.execute("CREATE TABLE t(b BLOB)", [])?;
            tx.execute("INSERT INTO t VALUES (randomblob(?1))", [seed as i64])
        })
        .unwrap();
    ledger.take_changes().unwrap();
    ledger.limit_runs(limit);
    ledger
}

/// A run inserting a blob of `bytes` bytes.
fn insert_blob(ledger: &mut Ledger, bytes: usize) -> Result<usize, LedgerError> {
    ledger.run_savepoint(|tx| tx.execute("INSERT INTO t VALUES (randomblob(?1))", [bytes as i64]))
}

fn rows_of(ledger: &mut Ledger) -> i64 {
    ledger
        .run(|tx| tx.query_row("SELECT count(*) FROM t", [], |r| r.get(0)))
        .unwrap()
}

/// A run over the limit is rolled back in its savepoint before anything commits; the runs
/// before and after it in the batch commit, and its pages are in no change.
#[test]
fn a_run_over_the_limit_is_refused_before_commit_and_the_batch_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let limit = 256 << 10;
    let mut ledger = limited_ledger(dir.path(), limit, 400 << 10);
    ledger.begin().unwrap();
    insert_blob(&mut ledger, 1_000).unwrap();
    let refused = insert_blob(&mut ledger, 300 << 10);
    assert!(
        matches!(refused, Err(LedgerError::TooLarge { bytes, limit: l }) if bytes > 300 << 10 && l == limit),
        "{refused:?}"
    );
    assert_eq!(ledger.take_refused_run().map(|(_, l)| l), Some(limit));
    insert_blob(&mut ledger, 2_000).unwrap();
    ledger.commit().unwrap();
    let changes = ledger.take_changes().unwrap().expect("changes");
    let bytes = encoded_bound(changes.page_size, changes.pages.len() as u64);
    assert!(
        bytes < limit,
        "the refused run's pages are not committed: {bytes}"
    );
    assert_eq!(rows_of(&mut ledger), 3, "the seed and the two small runs");
    let error = leasehold::Error::from(refused.unwrap_err());
    assert_eq!(error.code(), "LEASEHOLD_BATCH_TOO_LARGE");
}

/// What is measured before COMMIT is never less than what the batch's changes carry after it,
/// also across cache spills (runs of several MiB against a 2 MiB page cache). It counts each run
/// on its own (a page that several runs change counts once per run, with page 1 every time), so
/// a batch of many small runs is counted high: such a batch closes early, never late.
#[test]
fn the_measure_before_commit_never_counts_less_than_the_committed_changes() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = limited_ledger(dir.path(), 32 << 20, 40 << 20);
    for runs in [&[1_000usize, 5 << 20, 3 << 20][..], &[6 << 20], &[10; 200]] {
        ledger.begin().unwrap();
        for &bytes in runs {
            insert_blob(&mut ledger, bytes).unwrap();
        }
        ledger
            .run_savepoint(|tx| tx.execute("UPDATE t SET b = zeroblob(100) WHERE rowid = 1", []))
            .unwrap();
        let measured = ledger.batch_bytes();
        ledger.commit().unwrap();
        let changes = ledger.take_changes().unwrap().expect("changes");
        let actual = encoded_bound(changes.page_size, changes.pages.len() as u64);
        let n = runs.len() as u64 + 1;
        println!("{n} runs: measured {measured} bytes before COMMIT, the changes take {actual}");
        assert!(measured >= actual, "measured {measured} < {actual}");
        // Per run: its pages, page 1 and the page the row's table and index share.
        let slack = n * 3 * (4096 + 12) + actual / 100;
        assert!(
            measured <= actual + slack,
            "measured {measured}, more than {actual} + {slack}"
        );
    }
}

/// A ledger whose whole database fits the run limit measures nothing (no flush, no count).
#[test]
fn a_database_smaller_than_the_run_limit_is_not_measured() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = limited_ledger(dir.path(), 64 << 20, 1_000);
    ledger.begin().unwrap();
    insert_blob(&mut ledger, 1 << 20).unwrap();
    assert_eq!(ledger.batch_bytes(), 0);
    ledger.commit().unwrap();
}

/// The figure for docs/guarantees.md ("Limits"): what measuring each run costs a ledger larger
/// than the run limit (each run's dirty pages flushed to the WAL at its end), against one that
/// fits it whole (nothing measured). `cargo test --release --test log_sizes -- --ignored
/// --nocapture`.
#[test]
#[ignore]
fn figure_the_cost_of_measuring_each_run() {
    for (name, limit) in [("not measured", 64 << 20), ("measured", 256 << 10)] {
        let dir = tempfile::tempdir().unwrap();
        let mut ledger = limited_ledger(dir.path(), limit, 1 << 20);
        let started = std::time::Instant::now();
        for batch in 0..200 {
            ledger.begin().unwrap();
            for run in 0..100 {
                ledger
                    .run_savepoint(|tx| {
                        tx.insert_event(&leasehold::ledger::NewEvent::new(
                            "test",
                            format!("k-{batch}-{run}"),
                        ))
                    })
                    .unwrap();
            }
            ledger.commit().unwrap();
            ledger.take_changes().unwrap();
        }
        let took = started.elapsed();
        println!(
            "{name}: 20,000 runs of one insert in batches of 100: {:.1} ms, {:.1} µs a run",
            took.as_secs_f64() * 1e3,
            took.as_secs_f64() * 1e6 / 20_000.0
        );
    }
}
