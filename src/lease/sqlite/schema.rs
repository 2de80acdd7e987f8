//! The SQLite lease file's schema: the tables this build writes (`PRAGMA user_version` =
//! [`SCHEMA_VERSION`]), opening a file in WAL with full syncs, and bringing an older file up to
//! date in one immediate transaction (`ALTER TABLE … ADD COLUMN`, `CREATE TABLE`), keeping its
//! rows.

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

use super::{BUSY_TIMEOUT, erasures, replicas, store_error, with_retries};
use crate::durable::StoreError;

/// The schema version this build writes and reads (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 5;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS leases (
    key           TEXT PRIMARY KEY NOT NULL,
    owner         TEXT NOT NULL,
    epoch         INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    boot_id       TEXT NOT NULL,
    released      INTEGER NOT NULL,
    floor         INTEGER NOT NULL,
    head_epoch    INTEGER,
    head_seq      INTEGER,
    head_sha256   TEXT,
    attempt       INTEGER,
    tip_epoch     INTEGER,
    tip_seq       INTEGER
) STRICT";

/// Brings a schema-1 file to schema 2.
const MIGRATE_1_TO_2: &str = "ALTER TABLE leases ADD COLUMN attempt INTEGER";

/// Brings a schema-2 file to schema 3: the log tip.
const MIGRATE_2_TO_3: &str = "ALTER TABLE leases ADD COLUMN tip_epoch INTEGER; \
    ALTER TABLE leases ADD COLUMN tip_seq INTEGER";

/// Opens the file, switches it to WAL with full syncs, and creates the schema if absent.
pub(super) fn open_connection(path: &Path) -> Result<Connection, StoreError> {
    let fail = |e: rusqlite::Error| store_error("open", &e);
    let mut conn = Connection::open(path).map_err(fail)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
    let mode: String = with_retries(|| {
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
    })
    .map_err(fail)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Backend {
            op: "open",
            message: format!(
                "{}: journal_mode is {mode:?}, WAL is required",
                path.display()
            ),
        });
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(fail)?;
    with_retries(|| create_schema(&mut conn)).map_err(fail)??;
    Ok(conn)
}

/// Creates the table in one immediate transaction; refuses a file of a newer schema.
fn create_schema(conn: &mut Connection) -> rusqlite::Result<Result<(), StoreError>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
    if version > SCHEMA_VERSION {
        return Ok(Err(StoreError::Backend {
            op: "open",
            message: format!(
                "the lease file has schema {version}; this build knows {SCHEMA_VERSION}"
            ),
        }));
    }
    if version <= 0 {
        tx.execute_batch(SCHEMA)?;
    }
    if version == 1 {
        tx.execute_batch(MIGRATE_1_TO_2)?;
    }
    if (1..=2).contains(&version) {
        tx.execute_batch(MIGRATE_2_TO_3)?;
    }
    if version <= 3 {
        tx.execute_batch(erasures::SCHEMA)?;
    }
    if version <= 4 {
        tx.execute_batch(replicas::SCHEMA)?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(Ok(()))
}
