//! Opening the SQLite lease file: created private (the file 0600, its missing directories
//! 0700: SQLite gives its `-wal` and `-shm` the file's own mode) or, for an operator command,
//! only an existing lease file; one that lets the group or others in is refused unless accepted
//! (docs/operations.md, "File permissions"). Then WAL with full syncs, and the schema.

use std::path::Path;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::plumbing::{store_error, with_retries};
use super::{BUSY_TIMEOUT, MIGRATE_1_TO_2, MIGRATE_2_TO_3, SCHEMA, SCHEMA_VERSION, erasures};
use crate::durable::StoreError;
use crate::private;

/// How [`SqliteLeaseStore::open_with_options`](super::SqliteLeaseStore::open_with_options)
/// treats the lease file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseFileOptions {
    /// Create the file (0600, and its missing directories 0700) and its schema when missing.
    /// Default true. False (what an operator command uses: it opens existing stores only): a
    /// missing file, or a file that is no lease file, is [`StoreError::Missing`] and nothing is
    /// created or written (a lease file of an older schema is brought up to date, as a
    /// replica's open would).
    pub create: bool,
    /// Accept an existing lease file that lets the group or others in. Default false: such a
    /// file is refused with [`StoreError::NotPrivate`].
    pub accept_shared_permissions: bool,
}

impl Default for LeaseFileOptions {
    fn default() -> Self {
        Self {
            create: true,
            accept_shared_permissions: false,
        }
    }
}

/// Opens the file as `options` say, switches it to WAL with full syncs, and creates the schema
/// if absent (or, when it may not create, checks that the file is a lease file first).
pub(super) fn open_connection(
    path: &Path,
    options: LeaseFileOptions,
) -> Result<Connection, StoreError> {
    let fail = |e: rusqlite::Error| store_error("open", &e);
    let io = |e: std::io::Error| StoreError::Io {
        op: "open",
        message: format!("{}: {e}", path.display()),
    };
    let existed = path.exists();
    if !existed && !options.create {
        return Err(StoreError::Missing {
            store: "lease file",
            location: path.display().to_string(),
        });
    }
    if !existed {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            private::create_dir_all(dir).map_err(io)?;
        }
        private::create_sqlite_file(path).map_err(io)?;
    } else if let Err(mode) =
        private::check_private(path, options.accept_shared_permissions).map_err(io)?
    {
        return Err(StoreError::NotPrivate {
            path: path.display().to_string(),
            mode,
        });
    }
    let flags = if options.create {
        OpenFlags::default()
    } else {
        OpenFlags::default() - OpenFlags::SQLITE_OPEN_CREATE
    };
    let mut conn = Connection::open_with_flags(path, flags).map_err(fail)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(fail)?;
    let current = if options.create {
        false
    } else {
        check_lease_file(&conn, path)? == SCHEMA_VERSION
    };
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
    if !current {
        with_retries(|| create_schema(&mut conn)).map_err(fail)??;
    }
    Ok(conn)
}

/// Refuses a file that is no lease file (no schema version, or no `leases` table) before
/// anything is written to it; its schema version otherwise.
fn check_lease_file(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
    let fail = |e: rusqlite::Error| store_error("open", &e);
    let version: i64 = with_retries(|| conn.pragma_query_value(None, "user_version", |r| r.get(0)))
        .map_err(fail)?;
    let has_table: bool = with_retries(|| {
        conn.query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'leases'",
            [],
            |r| r.get(0),
        )
    })
    .map_err(fail)?;
    if version < 1 || !has_table {
        return Err(StoreError::Missing {
            store: "lease table",
            location: format!("{} (a file with no lease table)", path.display()),
        });
    }
    Ok(version)
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
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(Ok(()))
}
