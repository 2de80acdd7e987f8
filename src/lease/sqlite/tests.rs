//! Tests of the SQLite store's plumbing: saturation, error mapping, retries, durability.

use super::rules::{LAST_MS, ends_at};
use super::*;

#[test]
fn expiries_saturate_at_what_sqlite_can_store() {
    let at = StoreTime {
        now_ms: 5,
        boot_id: "boot-1".into(),
    };
    assert_eq!(ends_at(u64::MAX, &at), LAST_MS);
    assert!(
        sql_int(u64::MAX).is_err(),
        "an out-of-range value is refused, never wrapped"
    );
}

fn sqlite_failure(code: std::ffi::c_int) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
}

#[test]
fn busy_and_locked_become_unavailable_and_file_errors_become_io() {
    use rusqlite::ffi::{SQLITE_BUSY, SQLITE_CORRUPT, SQLITE_IOERR, SQLITE_LOCKED};
    let unavailable = |e| matches!(e, StoreError::Unavailable { op: "acquire", .. });
    assert!(unavailable(store_error(
        "acquire",
        &sqlite_failure(SQLITE_BUSY)
    )));
    assert!(unavailable(store_error(
        "acquire",
        &sqlite_failure(SQLITE_LOCKED)
    )));
    let io = store_error("renew", &sqlite_failure(SQLITE_IOERR));
    assert!(matches!(io, StoreError::Io { op: "renew", .. }));
    let corrupt = store_error("read", &sqlite_failure(SQLITE_CORRUPT));
    assert!(matches!(corrupt, StoreError::Backend { op: "read", .. }));
}

#[test]
fn retries_stop_after_max_attempts() {
    let mut calls = 0;
    let busy = with_retries(|| -> rusqlite::Result<()> {
        calls += 1;
        Err(sqlite_failure(rusqlite::ffi::SQLITE_BUSY))
    });
    assert!(busy.is_err());
    assert_eq!(calls, MAX_ATTEMPTS);
}

#[test]
fn p4_a_commit_of_the_lease_file_is_synced_before_it_returns() {
    // WAL with synchronous=NORMAL may lose the last commits on power loss; a tip move must
    // be as durable as the directory store's fsynced put (docs/guarantees.md, "The log tip").
    let dir = tempfile::tempdir().unwrap();
    let conn =
        open::open_connection(&dir.path().join("leases.db"), LeaseFileOptions::default()).unwrap();
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    let sync: i64 = conn
        .pragma_query_value(None, "synchronous", |r| r.get(0))
        .unwrap();
    assert_eq!(
        (mode.as_str(), sync),
        ("wal", 2),
        "WAL with synchronous=FULL"
    );
}

#[test]
fn the_boot_id_is_never_empty() {
    assert!(!current_boot_id().is_empty());
}
