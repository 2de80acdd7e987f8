//! How large the open batch of a logged ledger is, measured **before** `COMMIT`: a run whose
//! pages would not fit its segment of the change log is rolled back in its savepoint and refused
//! ([`LedgerError::TooLarge`]), and the caller closes a batch that has grown large
//! (docs/guarantees.md, "Limits").
//!
//! ```text
//!  SAVEPOINT; run ──► the database fits the run limit whole? ──yes──► RELEASE (nothing to measure)
//!                        │ no
//!                        ▼
//!          flush the dirty pages to the WAL (uncommitted frames); pages written by the run =
//!          SQLITE_DBSTATUS_CACHE_WRITE now − before the run ──► over the limit? ROLLBACK TO : RELEASE
//! ```
//!
//! **What is counted, and the bound.** SQLite writes a page to the WAL when it spills it from a
//! full cache, when the runtime flushes the cache (`sqlite3_db_cacheflush`, after every run
//! while measuring) and at `COMMIT`; within one transaction a page already in the WAL is
//! rewritten in place. The connection's count of page writes (`SQLITE_DBSTATUS_CACHE_WRITE`)
//! taken before and after a run is therefore every page the run changed, **plus** any page it
//! wrote twice (spilled, changed again, flushed) and, at the first measured run of a batch, the
//! pages earlier runs left dirty in the cache (at most the page cache, 2 MiB by default). It
//! never counts less than the run changed, but for page 1, which the open transaction keeps
//! pinned and which is added to every count. A batch is the sum of its runs, so it is never
//! under-counted either. Nothing is measured while the whole database, as one segment, fits
//! the run limit: no run, and no batch, can change more pages than the database has.
//!
//! **Cost.** Nothing for a ledger smaller than the run limit. A larger one writes each run's
//! dirty pages to the WAL when the run ends rather than at the batch's `COMMIT` (pages shared by
//! the runs of a batch are written once per run, in place).

use rusqlite::Connection;

use super::{Ledger, LedgerError};
use crate::log::segment::encoded_bound;

impl Ledger {
    /// From now on, a run whose pages would take more than `bytes` bytes as a segment of the
    /// change log ([`crate::log::segment::encoded_bound`]) is rolled back in its savepoint and
    /// fails with [`LedgerError::TooLarge`] before anything commits; [`Ledger::batch_bytes`] tells
    /// how large the open batch has grown. How it is measured, and the bound:
    /// `src/ledger/batch_size.rs`.
    pub fn limit_runs(&mut self, bytes: u64) {
        self.meter = Some(BatchMeter::new(bytes));
    }

    /// The bytes the open batch's pages take as a segment, as measured after its runs: 0 while
    /// the whole database fits the run limit (nothing needs measuring) or no limit is set.
    pub fn batch_bytes(&self) -> u64 {
        self.meter.as_ref().map_or(0, BatchMeter::batch_bytes)
    }

    /// The last run refused with [`LedgerError::TooLarge`]: its bytes and the limit; taken.
    pub fn take_refused_run(&mut self) -> Option<(u64, u64)> {
        self.meter.as_mut().and_then(BatchMeter::take_refused)
    }

    /// Measures the run that began at `before` (its savepoint still open) against the run limit.
    pub(super) fn measure_run(&mut self, before: u64) -> Result<(), LedgerError> {
        let carried = self
            .capture
            .as_ref()
            .map_or(0, |c| c.cursor.carried_pages());
        match self.meter.as_mut() {
            Some(meter) => meter.after_run(&mut self.conn, before, carried),
            None => Ok(()),
        }
    }
}

/// Measures the open batch of one logged ledger against a run limit.
#[derive(Debug)]
pub(super) struct BatchMeter {
    /// The most bytes one run's pages may take as a segment ([`encoded_bound`]).
    run_limit: u64,
    /// The connection's page writes when the batch began.
    at_begin: u64,
    /// The pages of the batch so far, once measuring began in it; `None` while the database
    /// was small enough for nothing to need measuring.
    batch_pages: Option<u64>,
    /// The database's page size, as of the last measure.
    page_size: u32,
    /// The last run refused for its size: its bytes, and the limit.
    refused: Option<(u64, u64)>,
}

impl BatchMeter {
    /// A meter that refuses runs whose pages take more than `run_limit` bytes as a segment.
    pub(super) fn new(run_limit: u64) -> Self {
        Self {
            run_limit,
            at_begin: 0,
            batch_pages: None,
            page_size: 0,
            refused: None,
        }
    }

    /// A batch begins.
    pub(super) fn begin(&mut self, conn: &Connection) -> Result<(), LedgerError> {
        self.at_begin = pages_written(conn)?;
        self.batch_pages = None;
        Ok(())
    }

    /// The count to pass to [`BatchMeter::after_run`] for a run about to start.
    pub(super) fn before_run(&self, conn: &Connection) -> Result<u64, LedgerError> {
        pages_written(conn)
    }

    /// A run that started at `before` succeeded and its savepoint is still open: measures it, and
    /// refuses it if its pages take more than the run limit. `carried` are pages the next
    /// changes carry from before the capture began (they ride with this batch).
    pub(super) fn after_run(
        &mut self,
        conn: &mut Connection,
        before: u64,
        carried: u64,
    ) -> Result<(), LedgerError> {
        let page_size = pragma(conn, "page_size")?;
        let db_pages = pragma(conn, "page_count")?;
        self.page_size = u32::try_from(page_size).unwrap_or(u32::MAX);
        if self.batch_pages.is_none() && encoded_bound(self.page_size, db_pages) <= self.run_limit {
            return Ok(());
        }
        conn.cache_flush()?;
        let now = pages_written(conn)?;
        // Page 1 stays pinned by the open transaction, so it is never flushed: counted always.
        let run = now.saturating_sub(before) + 1;
        let bytes = encoded_bound(self.page_size, run);
        if bytes > self.run_limit {
            self.refused = Some((bytes, self.run_limit));
            return Err(LedgerError::TooLarge {
                bytes,
                limit: self.run_limit,
            });
        }
        self.batch_pages = Some(match self.batch_pages {
            Some(pages) => pages.saturating_add(run),
            None => now.saturating_sub(self.at_begin) + 1 + carried,
        });
        Ok(())
    }

    /// The bytes the open batch's pages take as a segment, as measured so far: 0 while nothing
    /// needed measuring (the whole database fits the run limit).
    pub(super) fn batch_bytes(&self) -> u64 {
        self.batch_pages
            .map_or(0, |pages| encoded_bound(self.page_size, pages))
    }

    /// The last run refused for its size (its bytes and the limit), taken.
    pub(super) fn take_refused(&mut self) -> Option<(u64, u64)> {
        self.refused.take()
    }
}

/// A numeric pragma's value.
fn pragma(conn: &Connection, name: &str) -> Result<u64, LedgerError> {
    let value: i64 = conn.pragma_query_value(None, name, |r| r.get(0))?;
    Ok(u64::try_from(value).unwrap_or(0))
}

/// How many pages this connection has written since it was opened
/// (`SQLITE_DBSTATUS_CACHE_WRITE`: spilled, flushed and committed pages, WAL frames in WAL mode).
fn pages_written(conn: &Connection) -> Result<u64, LedgerError> {
    use rusqlite::ffi;
    let (mut current, mut highwater): (i64, i64) = (0, 0);
    // SAFETY: `handle` is the live `sqlite3*` of `conn`, which this thread holds by reference for
    // the length of the call; `sqlite3_db_status64` only reads the connection's counters into the
    // two locals and keeps no pointer (https://sqlite.org/c3ref/db_status.html).
    let rc = unsafe {
        ffi::sqlite3_db_status64(
            conn.handle(),
            ffi::SQLITE_DBSTATUS_CACHE_WRITE,
            &mut current,
            &mut highwater,
            0,
        )
    };
    if rc != ffi::SQLITE_OK {
        return Err(LedgerError::Sqlite(format!(
            "sqlite3_db_status64(CACHE_WRITE) answered {rc}"
        )));
    }
    Ok(u64::try_from(current).unwrap_or(0))
}
