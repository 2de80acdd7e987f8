//! The baselines: plain rusqlite, one commit per insert, as a careful user writes it (a cached
//! `INSERT`, autocommit), in three journal settings; and the raw ledger (`Ledger::run`). With
//! many callers, the callers share one connection behind a mutex — one-commit-per-insert
//! cannot share a commit, so this is the most raw rusqlite can do with callers in flight (32
//! connections of their own would add lock waits and busy-handler sleeps).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::ledger::{Ledger, LedgerOptions, NewEvent};
use rusqlite::Connection;

use crate::measure::{Figure, sequential};

/// A journal setting of the raw baseline.
#[derive(Debug, Clone, Copy)]
pub struct RawKind {
    /// Its name in the output.
    pub name: &'static str,
    /// The pragmas run after opening (empty: rusqlite's and SQLite's defaults).
    pub pragmas: &'static str,
}

/// The baselines: SQLite's defaults (rollback journal `DELETE`, `synchronous=FULL`: every
/// commit fsyncs the journal and the database), WAL with `FULL` (a commit fsyncs the WAL; as
/// durable on the host as the defaults), and WAL with `NORMAL` (the ledger's own setting; a
/// power loss may take the last commits).
pub const RAW_KINDS: [RawKind; 3] = [
    RawKind {
        name: "rusqlite defaults (journal_mode=DELETE, synchronous=FULL)",
        pragmas: "",
    },
    RawKind {
        name: "rusqlite WAL + synchronous=FULL",
        pragmas: "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;",
    },
    RawKind {
        name: "rusqlite WAL + synchronous=NORMAL (the ledger's setting)",
        pragmas: "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    },
];

const SCHEMA: &str = "CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ts_ms INTEGER NOT NULL, actor TEXT NOT NULL, kind TEXT NOT NULL, subject TEXT,
    payload TEXT NOT NULL, idem_key TEXT NOT NULL UNIQUE, run_id TEXT);";

const INSERT: &str = "INSERT INTO events (ts_ms, actor, kind, payload, idem_key) \
    VALUES (?1, 'host', 'bench', '{}', ?2)";

fn open(path: &Path, kind: RawKind) -> Connection {
    let conn = Connection::open(path).expect("open raw");
    conn.execute_batch(kind.pragmas).expect("pragmas");
    conn.execute_batch(SCHEMA).expect("schema");
    conn
}

fn insert(conn: &Connection, idem: &str, i: usize) {
    conn.prepare_cached(INSERT)
        .and_then(|mut s| s.execute(rusqlite::params![i as i64, idem]))
        .expect("insert");
}

/// One caller, one commit per insert, for `span`.
pub fn one_caller(dir: &Path, kind: RawKind, tag: &str, span: Duration) -> Figure {
    let conn = open(&dir.join(format!("raw-{tag}-1.db")), kind);
    sequential(span, |i| insert(&conn, &format!("k-{i}"), i))
}

/// `callers` threads sharing one connection, one commit per insert each, for `span`.
pub fn many_callers(
    dir: &Path,
    kind: RawKind,
    tag: &str,
    callers: usize,
    span: Duration,
) -> Figure {
    let conn = Arc::new(Mutex::new(open(
        &dir.join(format!("raw-{tag}-{callers}.db")),
        kind,
    )));
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let threads: Vec<_> = (0..callers)
        .map(|c| {
            let (conn, done) = (conn.clone(), done.clone());
            std::thread::spawn(move || {
                let mut i = 0;
                while started.elapsed() < span {
                    let conn = conn.lock().expect("raw connection");
                    insert(&conn, &format!("c-{c}-{i}"), i);
                    drop(conn);
                    done.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("raw caller");
    }
    Figure {
        ops: done.load(Ordering::Relaxed),
        took: started.elapsed(),
        latencies: Vec::new(),
    }
}

/// The raw ledger: `Ledger::run` per event, one caller, for `span`.
pub fn ledger(dir: &Path, span: Duration) -> Figure {
    let mut ledger =
        Ledger::open(&dir.join("raw-ledger.db"), &LedgerOptions::default()).expect("open");
    sequential(span, |i| {
        ledger
            .run(|l| l.insert_event(&NewEvent::new("bench", format!("k-{i}"))))
            .expect("run");
    })
}
