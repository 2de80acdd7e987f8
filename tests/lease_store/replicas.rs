//! Replica records on SQLite (docs/guarantees.md, promise 11): the suite catches a store that
//! trusts a dead replica's endpoint, and a lease file of schema 4 gains the records.

use std::sync::Arc;

use leasehold::clock::ManualClock;
use leasehold::lease::LeaseStore;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::testkit;

use super::model::{Flaw, ModelStore};
use super::{TTL, harness, key, make_private, violation};

#[tokio::test]
async fn the_suite_fails_a_store_that_trusts_a_dead_replicas_endpoint() {
    let clock = ManualClock::new(0);
    let model = ModelStore::new(&clock, Flaw::DeadReplicaLive);
    let h = harness(Arc::new(model), &clock, "m");
    let message = violation(testkit::conformance_a_dead_replicas_endpoint_is_not_trusted(&h)).await;
    assert!(
        message.contains("a dead replica's endpoint is not trusted"),
        "{message}"
    );
}

#[tokio::test]
async fn a_schema_4_lease_file_gains_the_replica_records_and_keeps_its_leases() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let old = rusqlite::Connection::open(&path).unwrap();
    old.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE leases (key TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL,
            epoch INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL, boot_id TEXT NOT NULL,
            released INTEGER NOT NULL, floor INTEGER NOT NULL, head_epoch INTEGER,
            head_seq INTEGER, head_sha256 TEXT, attempt INTEGER, tip_epoch INTEGER,
            tip_seq INTEGER) STRICT;
         CREATE TABLE erasures (key TEXT PRIMARY KEY NOT NULL, floor INTEGER NOT NULL,
            forgotten_at_ms INTEGER NOT NULL, boot_id TEXT NOT NULL) STRICT;
         INSERT INTO leases VALUES ('acme/t1', 'r1', 4, 500, 'boot-1', 0, 2, NULL, NULL, NULL, 7,
            4, 9);
         PRAGMA user_version = 4;",
    )
    .unwrap();
    drop(old);
    make_private(&path);
    let clock = ManualClock::new(10);
    let store =
        SqliteLeaseStore::open_with(&path, Arc::new(clock.clone()), "boot-1".into()).unwrap();
    let k = key("acme", "t1");
    let before = store.lookup(&k).await.unwrap();
    assert_eq!(
        before.record.as_ref().map(|r| r.epoch),
        Some(4),
        "the lease is kept"
    );
    assert_eq!((before.lease_left_ms, before.holder), (490, None));
    let record = store.advertise("r1", "http://r1", 5, TTL).await.unwrap();
    assert_eq!(record.epoch, 1);
    let after = store.lookup(&k).await.unwrap();
    assert_eq!(after.live_endpoint(), Some("http://r1"));
    drop(store);
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, 5);
}
