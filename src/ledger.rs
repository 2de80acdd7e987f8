//! The tenant's ledger: one SQLite file (WAL), its `events` table, and the bracket host code runs in.
//!
//! STUB — to be written (foundation issue). The signatures below are the agreed API.
#![allow(missing_docs, unused_variables)]

use std::path::{Path, PathBuf};

/// Why a ledger call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LedgerError {
    /// SQLite returned an error.
    #[error("sqlite: {0}")]
    Sqlite(String),
    /// The statement is not allowed inside a host bracket (transaction control, ATTACH, PRAGMA…).
    #[error("refused: {0}")]
    Refused(String),
    /// The host's closure gave up; its savepoint was rolled back.
    #[error("aborted by host: {0}")]
    Host(String),
    /// A local I/O error.
    #[error("i/o: {0}")]
    Io(String),
}

impl From<rusqlite::Error> for LedgerError {
    fn from(e: rusqlite::Error) -> Self {
        LedgerError::Sqlite(e.to_string())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    #[default]
    Normal,
    Full,
}

#[derive(Debug, Clone, Default)]
pub struct LedgerOptions {
    pub synchronous: Synchronous,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub actor: String,
    pub kind: String,
    pub subject: Option<String>,
    pub payload: serde_json::Value,
    pub idem_key: String,
    pub run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub seq: i64,
    pub ts_ms: i64,
    pub actor: String,
    pub kind: String,
    pub subject: Option<String>,
    pub payload: serde_json::Value,
    pub idem_key: String,
    pub run_id: Option<String>,
}

#[derive(Debug)]
pub struct Ledger {
    conn: rusqlite::Connection,
    path: PathBuf,
}

pub struct LedgerTx<'a> {
    conn: &'a rusqlite::Connection,
}

impl Ledger {
    pub fn open(path: &Path, opts: &LedgerOptions) -> Result<Self, LedgerError> {
        todo!()
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn begin(&mut self) -> Result<(), LedgerError> {
        todo!()
    }
    pub fn run_savepoint<R>(
        &mut self,
        f: impl FnOnce(&mut LedgerTx<'_>) -> Result<R, LedgerError>,
    ) -> Result<R, LedgerError> {
        todo!()
    }
    pub fn commit(&mut self) -> Result<(), LedgerError> {
        todo!()
    }
    pub fn rollback(&mut self) -> Result<(), LedgerError> {
        todo!()
    }
    pub fn run<R>(
        &mut self,
        f: impl FnOnce(&mut LedgerTx<'_>) -> Result<R, LedgerError>,
    ) -> Result<R, LedgerError> {
        todo!()
    }
    pub fn close(self) -> Result<(), LedgerError> {
        todo!()
    }
}

impl LedgerTx<'_> {
    pub fn insert_event(&mut self, e: &NewEvent) -> Result<Option<i64>, LedgerError> {
        todo!()
    }
    pub fn events_after(&self, after_seq: i64, limit: usize) -> Result<Vec<Event>, LedgerError> {
        todo!()
    }
    pub fn execute(&mut self, sql: &str, params: impl rusqlite::Params) -> Result<usize, LedgerError> {
        todo!()
    }
    pub fn query_row<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<T, LedgerError> {
        todo!()
    }
    pub fn prepare(&self, sql: &str) -> Result<rusqlite::Statement<'_>, LedgerError> {
        todo!()
    }
}
