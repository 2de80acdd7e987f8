//! The SQLite lease file's schema: the leases table this build writes (`PRAGMA user_version` =
//! [`SCHEMA_VERSION`]) and the statements that bring an older file up to date (`sqlite/open.rs`
//! runs them in one immediate transaction, keeping the rows; the erasures and replicas tables
//! are made by `sqlite/erasures.rs` and `sqlite/replicas.rs`).

/// The schema version this build writes and reads (`PRAGMA user_version`).
pub(super) const SCHEMA_VERSION: i64 = 5;

pub(super) const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS leases (
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
pub(super) const MIGRATE_1_TO_2: &str = "ALTER TABLE leases ADD COLUMN attempt INTEGER";

/// Brings a schema-2 file to schema 3: the log tip.
pub(super) const MIGRATE_2_TO_3: &str = "ALTER TABLE leases ADD COLUMN tip_epoch INTEGER; \
    ALTER TABLE leases ADD COLUMN tip_seq INTEGER";
