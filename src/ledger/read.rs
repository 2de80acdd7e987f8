//! Reading the ledger: the read calls host code has in a bracket ([`LedgerTx`]) and in a query
//! ([`LedgerRead`]), and [`ReadLedger`], the read connection a query runs on beside the write
//! batch.
//!
//! ```text
//!   ReadLedger::begin(path)    a read-only connection (SQLITE_OPEN_READ_ONLY), WAL;
//!                              BEGIN + a first read: the snapshot is fixed here
//!   ReadLedger::run(f)         f(&LedgerRead) with a read-only authorizer up; COMMIT; close
//! ```
//!
//! A query never holds up the tenant's writer: in WAL a reader and the writer do not wait for
//! each other (the runtime's checkpoints are passive while a reader holds the WAL). What it
//! reads is exactly what was committed when it began; the runtime answers it only once every
//! batch it could have seen is acknowledged (docs/guarantees.md, the output gate).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::Arc;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use super::event::{event_from_row, read_event_row};
use super::guard::{self, HostGuard};
use super::{EVENT_COLUMNS, Event, LedgerError};

/// A read-only connection to a tenant's ledger with its read transaction open: the snapshot of
/// what was committed when [`ReadLedger::begin`] returned. Blocking to open and to run; a query
/// runs it on a blocking thread.
#[derive(Debug)]
pub struct ReadLedger {
    /// The connection; never handed out.
    conn: Connection,
    /// Refuses everything but reads while host code runs.
    guard: Arc<HostGuard>,
}

/// Host code's read-only view of the ledger for the length of one query: the reads of
/// [`LedgerTx`](super::LedgerTx), on a snapshot, with every write refused (by the
/// authorizer, and by the connection, opened read-only). Like a `LedgerTx`, neither it nor a
/// statement prepared on it can leave the call:
///
/// ```compile_fail,E0521
/// # fn demo(read: leasehold::ledger::ReadLedger) {
/// let mut kept = None;
/// let _ = read.run(|ledger| {
///     kept = Some(ledger.prepare("SELECT 1")?); // a statement cannot leave the query
///     Ok(())
/// });
/// # }
/// ```
pub struct LedgerRead<'a> {
    /// The read connection, borrowed for one query.
    conn: &'a Connection,
    /// Turns the authorizer's refusals into [`LedgerError::Refused`].
    guard: &'a HostGuard,
}

impl ReadLedger {
    /// Opens a read-only connection to the ledger at `path` and begins its read transaction
    /// now (a first read fixes the snapshot). The file must exist: a ledger that is gone (its
    /// tenure over, its directory dropped) is an error, never a new empty database.
    pub fn begin(path: &Path) -> Result<Self, LedgerError> {
        let mut conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(super::BUSY_TIMEOUT)?;
        let guard = Arc::new(HostGuard::read_only());
        let hook_guard = Arc::clone(&guard);
        conn.authorizer(Some(move |ctx: rusqlite::hooks::AuthContext<'_>| {
            hook_guard.authorize(&ctx.action)
        }))?;
        conn.execute_batch("BEGIN")?;
        let _: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
        Ok(Self { conn, guard })
    }

    /// Runs `f` on the snapshot, then ends the read transaction and closes the connection. A
    /// panic in `f` becomes [`LedgerError::Host`]`("panicked: …")`.
    pub fn run<R>(
        self,
        f: impl FnOnce(&LedgerRead<'_>) -> Result<R, LedgerError>,
    ) -> Result<R, LedgerError> {
        let view = LedgerRead {
            conn: &self.conn,
            guard: &self.guard,
        };
        self.guard.enter();
        let outcome = catch_unwind(AssertUnwindSafe(|| f(&view)));
        self.guard.leave();
        let outcome = outcome.unwrap_or_else(|panic| {
            Err(LedgerError::Host(format!(
                "panicked: {}",
                super::panic_text(&*panic)
            )))
        });
        let _ = self.conn.execute_batch("COMMIT");
        let _ = self.conn.close();
        outcome
    }
}

impl LedgerRead<'_> {
    /// Up to `limit` events with `seq > after_seq`, oldest first.
    pub fn events_after(&self, after_seq: i64, limit: usize) -> Result<Vec<Event>, LedgerError> {
        events_after(self.conn, self.guard, after_seq, limit)
    }

    /// How many events the ledger holds.
    pub fn event_count(&self) -> Result<u64, LedgerError> {
        event_count(self.conn, self.guard)
    }

    /// The event stored under `idem_key`, if any.
    pub fn event_by_idem_key(&self, idem_key: &str) -> Result<Option<Event>, LedgerError> {
        event_by_idem_key(self.conn, self.guard, idem_key)
    }

    /// Runs one query of host SQL and maps its first row with `f`.
    pub fn query_row<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, LedgerError> {
        query_row(self.conn, self.guard, sql, params, f)
    }

    /// Prepares one statement of host SQL (a read: anything else is refused when it is
    /// prepared). The statement borrows this view, so it cannot outlive the query.
    pub fn prepare(&self, sql: &str) -> Result<rusqlite::Statement<'_>, LedgerError> {
        prepare(self.conn, self.guard, sql)
    }
}

pub(super) fn events_after(
    conn: &Connection,
    guard: &HostGuard,
    after_seq: i64,
    limit: usize,
) -> Result<Vec<Event>, LedgerError> {
    let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE seq > ?1 ORDER BY seq LIMIT ?2");
    let mut stmt = conn.prepare_cached(&sql).map_err(|e| guard.error(e))?;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = stmt
        .query_map(rusqlite::params![after_seq, limit], read_event_row)
        .map_err(|e| guard.error(e))?;
    let mut events = Vec::new();
    for row in rows {
        events.push(event_from_row(row.map_err(|e| guard.error(e))?)?);
    }
    Ok(events)
}

pub(super) fn event_count(conn: &Connection, guard: &HostGuard) -> Result<u64, LedgerError> {
    let n: i64 = conn
        .prepare_cached("SELECT count(*) FROM events")
        .and_then(|mut s| s.query_row([], |r| r.get(0)))
        .map_err(|e| guard.error(e))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

pub(super) fn event_by_idem_key(
    conn: &Connection,
    guard: &HostGuard,
    idem_key: &str,
) -> Result<Option<Event>, LedgerError> {
    let sql = format!("SELECT {EVENT_COLUMNS} FROM events WHERE idem_key = ?1");
    let row = conn
        .prepare_cached(&sql)
        .and_then(|mut s| s.query_row([idem_key], read_event_row).optional())
        .map_err(|e| guard.error(e))?;
    row.map(event_from_row).transpose()
}

pub(super) fn query_row<T>(
    conn: &Connection,
    guard: &HostGuard,
    sql: &str,
    params: impl rusqlite::Params,
    f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<T, LedgerError> {
    guard::refuse_unguarded(sql)?;
    conn.query_row(sql, params, f).map_err(|e| guard.error(e))
}

pub(super) fn prepare<'c>(
    conn: &'c Connection,
    guard: &HostGuard,
    sql: &str,
) -> Result<rusqlite::Statement<'c>, LedgerError> {
    guard::refuse_unguarded(sql)?;
    conn.prepare(sql).map_err(|e| guard.error(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Ledger, LedgerOptions, NewEvent};

    #[test]
    fn a_query_reads_its_snapshot_while_the_writer_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let mut writer = Ledger::open(&path, &LedgerOptions::default()).unwrap();
        writer
            .run(|tx| tx.insert_event(&NewEvent::new("a", "k1")))
            .unwrap();
        let read = ReadLedger::begin(&path).unwrap();
        writer
            .run(|tx| tx.insert_event(&NewEvent::new("a", "k2")))
            .unwrap();
        assert_eq!(
            read.run(|l| l.event_count()),
            Ok(1),
            "the snapshot at begin"
        );
    }

    #[test]
    fn a_query_cannot_write_or_end_its_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        Ledger::open(&path, &LedgerOptions::default()).unwrap();
        for sql in [
            "INSERT INTO events (ts_ms, actor, kind, payload, idem_key) VALUES (1, 'a', 'k', '{}', 'x')",
            "CREATE TABLE t (x)",
            "CREATE TEMP TABLE t (x)",
            "COMMIT",
            "BEGIN",
            "PRAGMA user_version = 3",
            "SELECT * FROM _leasehold_replies",
        ] {
            let read = ReadLedger::begin(&path).unwrap();
            let refused = read.run(|l| {
                let mut stmt = l.prepare(sql)?;
                stmt.raw_execute()
                    .map_err(|e| LedgerError::Sqlite(e.to_string()))
            });
            assert!(
                matches!(refused, Err(LedgerError::Refused(_))),
                "{sql}: {refused:?}"
            );
        }
    }

    #[test]
    fn a_ledger_that_is_gone_is_an_error_not_a_new_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        assert!(ReadLedger::begin(&path).is_err());
        assert!(!path.exists());
    }

    #[test]
    fn a_panicking_query_is_a_host_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        Ledger::open(&path, &LedgerOptions::default()).unwrap();
        let read = ReadLedger::begin(&path).unwrap();
        let outcome: Result<(), _> = read.run(|_| panic!("boom"));
        assert_eq!(outcome, Err(LedgerError::Host("panicked: boom".into())));
    }
}
