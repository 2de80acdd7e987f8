//! The ledger: schema, events and idempotency, the group-commit bracket (savepoint isolation,
//! commit and rollback of a batch), the authorizer that keeps host code inside the bracket
//! (promise 8 in docs/guarantees.md), options, and reopening.

use std::path::{Path, PathBuf};

use leasehold::ledger::{Ledger, LedgerError, LedgerOptions, LedgerTx, NewEvent, Synchronous};
use serde_json::json;

fn open(dir: &Path) -> Ledger {
    Ledger::open(&dir.join("ledger.db"), &LedgerOptions::default()).unwrap()
}

fn insert(tx: &mut LedgerTx<'_>, key: &str) -> Result<Option<i64>, LedgerError> {
    tx.insert_event(&NewEvent::new("noted", key))
}

fn keys(ledger: &mut Ledger) -> Vec<String> {
    ledger
        .run(|tx| tx.events_after(0, 1000))
        .unwrap()
        .into_iter()
        .map(|e| e.idem_key)
        .collect()
}

fn pragma_text(ledger: &mut Ledger, sql: &str) -> String {
    ledger
        .run(|tx| tx.query_row(sql, [], |r| r.get::<_, rusqlite::types::Value>(0)))
        .map(|v| format!("{v:?}"))
        .unwrap()
}

fn refused(result: Result<usize, LedgerError>, word: &str) {
    match result {
        Err(LedgerError::Refused(why)) => assert!(why.contains(word), "{why:?} should name {word}"),
        other => panic!("expected a refusal naming {word}, got {other:?}"),
    }
}

#[test]
fn open_creates_the_events_schema_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    let columns: Vec<(String, String, bool, bool)> = ledger
        .run(|tx| {
            let mut stmt = tx.prepare("PRAGMA table_info(events)")?;
            let rows = stmt.query_map([], |r| {
                Ok((r.get(1)?, r.get(2)?, r.get(3)?, r.get::<_, i64>(5)? > 0))
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .unwrap();
    let expected = [
        ("seq", "INTEGER", false, true),
        ("ts_ms", "INTEGER", true, false),
        ("actor", "TEXT", true, false),
        ("kind", "TEXT", true, false),
        ("subject", "TEXT", false, false),
        ("payload", "TEXT", true, false),
        ("idem_key", "TEXT", true, false),
        ("run_id", "TEXT", false, false),
    ];
    let expected: Vec<_> = expected
        .iter()
        .map(|(n, t, nn, pk)| (n.to_string(), t.to_string(), *nn, *pk))
        .collect();
    assert_eq!(columns, expected);
    assert_eq!(
        pragma_text(&mut ledger, "PRAGMA journal_mode"),
        "Text(\"wal\")"
    );
    assert_eq!(
        pragma_text(&mut ledger, "PRAGMA foreign_keys"),
        "Integer(1)"
    );
    assert_eq!(
        pragma_text(&mut ledger, "PRAGMA synchronous"),
        "Integer(1)",
        "NORMAL by default"
    );
    let autoincrement: i64 = ledger
        .run(|tx| {
            tx.query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'events' AND sql LIKE '%AUTOINCREMENT%'",
                [],
                |r| r.get(0),
            )
        })
        .unwrap();
    assert_eq!(autoincrement, 1);
}

#[test]
fn synchronous_full_is_applied_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let opts = LedgerOptions {
        synchronous: Synchronous::Full,
    };
    let mut ledger = Ledger::open(&dir.path().join("ledger.db"), &opts).unwrap();
    assert_eq!(pragma_text(&mut ledger, "PRAGMA synchronous"), "Integer(2)");
}

#[test]
fn an_event_is_stored_with_every_field_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    let event = NewEvent::new("deposited", "k-1")
        .actor("teller-7")
        .subject("account-42")
        .payload(json!({"amount": 10, "currency": "EUR"}))
        .run_id("run-9");
    assert_eq!(event.actor, "teller-7");
    assert_eq!(NewEvent::new("x", "y").actor, "host");
    let seq = ledger
        .run(|tx| tx.insert_event_at(&event, 1_700_000_000_123))
        .unwrap();
    assert_eq!(seq, Some(1));
    let stored = ledger
        .run(|tx| tx.event_by_idem_key("k-1"))
        .unwrap()
        .unwrap();
    assert_eq!(stored.seq, 1);
    assert_eq!(stored.ts_ms, 1_700_000_000_123);
    assert_eq!(
        (stored.actor.as_str(), stored.kind.as_str()),
        ("teller-7", "deposited")
    );
    assert_eq!(stored.subject.as_deref(), Some("account-42"));
    assert_eq!(stored.payload, json!({"amount": 10, "currency": "EUR"}));
    assert_eq!(stored.run_id.as_deref(), Some("run-9"));
    assert_eq!(ledger.run(|tx| tx.event_by_idem_key("k-2")).unwrap(), None);
}

#[test]
fn events_after_pages_in_seq_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    ledger
        .run(|tx| (1..=5).try_for_each(|i| insert(tx, &format!("k-{i}")).map(drop)))
        .unwrap();
    let page = ledger.run(|tx| tx.events_after(2, 2)).unwrap();
    assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4]);
    assert_eq!(ledger.run(|tx| tx.events_after(5, 10)).unwrap(), []);
    assert_eq!(ledger.run(|tx| tx.event_count()).unwrap(), 5);
}

#[test]
fn an_idempotency_key_hit_returns_none_and_leaves_the_first_event() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    let first = NewEvent::new("deposited", "k-1").payload(json!({"amount": 10}));
    let again = NewEvent::new("withdrawn", "k-1").payload(json!({"amount": 99}));
    assert_eq!(ledger.run(|tx| tx.insert_event(&first)).unwrap(), Some(1));
    assert_eq!(ledger.run(|tx| tx.insert_event(&again)).unwrap(), None);
    let stored = ledger
        .run(|tx| tx.event_by_idem_key("k-1"))
        .unwrap()
        .unwrap();
    assert_eq!(
        (stored.kind.as_str(), stored.payload.clone()),
        ("deposited", json!({"amount": 10}))
    );
    assert_eq!(ledger.run(|tx| tx.event_count()).unwrap(), 1);
    assert_eq!(ledger.run(|tx| insert(tx, "k-2")).unwrap(), Some(2));
}

#[test]
fn an_idempotency_key_hit_inside_a_call_keeps_the_calls_other_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    ledger.run(|tx| insert(tx, "k-0")).unwrap();
    let seqs = ledger
        .run(|tx| Ok((insert(tx, "k-1")?, insert(tx, "k-0")?, insert(tx, "k-2")?)))
        .unwrap();
    assert_eq!(seqs, (Some(2), None, Some(3)), "no seq is spent on the hit");
    assert_eq!(keys(&mut ledger), ["k-0", "k-1", "k-2"]);
}

#[test]
fn empty_kinds_and_keys_are_refused_by_the_schema() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    assert!(matches!(
        ledger.run(|tx| insert(tx, "")),
        Err(LedgerError::Sqlite(_))
    ));
    let no_kind = NewEvent::new("", "k-1");
    assert!(matches!(
        ledger.run(|tx| tx.insert_event(&no_kind)),
        Err(LedgerError::Sqlite(_))
    ));
    assert_eq!(ledger.run(|tx| tx.event_count()).unwrap(), 0);
}

#[test]
fn a_failing_call_in_a_batch_rolls_back_only_its_own_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    ledger.begin().unwrap();
    assert_eq!(
        ledger.run_savepoint(|tx| insert(tx, "k-1")).unwrap(),
        Some(1)
    );
    let failed = ledger.run_savepoint(|tx| {
        insert(tx, "k-2")?;
        tx.execute("CREATE TABLE scratch (a INTEGER)", [])?;
        Err::<(), _>(LedgerError::Host("changed my mind".into()))
    });
    assert_eq!(failed, Err(LedgerError::Host("changed my mind".into())));
    assert!(
        ledger
            .run_savepoint(|tx| insert(tx, "k-3"))
            .unwrap()
            .is_some()
    );
    ledger.commit().unwrap();
    assert_eq!(keys(&mut ledger), ["k-1", "k-3"]);
    let scratch = ledger.run(|tx| {
        tx.query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'scratch'",
            [],
            |r| r.get::<_, i64>(0),
        )
    });
    assert_eq!(
        scratch,
        Ok(0),
        "the failed call's table went with its savepoint"
    );
}

#[test]
fn a_panicking_call_in_a_batch_rolls_back_only_its_own_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    ledger.begin().unwrap();
    ledger.run_savepoint(|tx| insert(tx, "k-1")).unwrap();
    let panicked = ledger.run_savepoint(|tx| -> Result<(), LedgerError> {
        insert(tx, "k-2")?;
        panic!("host bug");
    });
    assert_eq!(
        panicked,
        Err(LedgerError::Host("panicked: host bug".into()))
    );
    ledger.run_savepoint(|tx| insert(tx, "k-3")).unwrap();
    ledger.commit().unwrap();
    assert_eq!(keys(&mut ledger), ["k-1", "k-3"]);
}

#[test]
fn a_panic_in_run_rolls_the_call_back_and_the_ledger_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    let panicked = ledger.run(|tx| -> Result<(), LedgerError> {
        insert(tx, "k-1")?;
        panic!("{}", String::from("formatted bug"));
    });
    assert_eq!(
        panicked,
        Err(LedgerError::Host("panicked: formatted bug".into()))
    );
    assert!(!ledger.in_batch());
    ledger.run(|tx| insert(tx, "k-2")).unwrap();
    assert_eq!(keys(&mut ledger), ["k-2"]);
}

#[test]
fn rolling_back_a_batch_drops_every_call_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    ledger.run(|tx| insert(tx, "k-0")).unwrap();
    ledger.begin().unwrap();
    ledger.run_savepoint(|tx| insert(tx, "k-1")).unwrap();
    ledger.run_savepoint(|tx| insert(tx, "k-2")).unwrap();
    ledger.rollback().unwrap();
    assert!(!ledger.in_batch());
    assert_eq!(keys(&mut ledger), ["k-0"]);
}

#[test]
fn run_commits_on_ok_and_rolls_back_on_err() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    ledger.run(|tx| insert(tx, "k-1")).unwrap();
    let failed = ledger.run(|tx| {
        insert(tx, "k-2")?;
        Err::<(), _>(LedgerError::Host("no".into()))
    });
    assert!(failed.is_err());
    assert_eq!(keys(&mut ledger), ["k-1"]);
}

#[test]
fn the_bracket_is_used_as_it_is_meant_to_be() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    assert!(
        ledger.run_savepoint(|tx| insert(tx, "k-1")).is_err(),
        "no batch is open"
    );
    assert!(ledger.commit().is_err(), "no batch is open");
    assert_eq!(ledger.rollback(), Ok(()), "rolling back nothing is a no-op");
    ledger.begin().unwrap();
    assert!(ledger.begin().is_err(), "a batch is already open");
    assert!(ledger.checkpoint().is_err(), "not during a batch");
    ledger.rollback().unwrap();
    assert_eq!(keys(&mut ledger), Vec::<String>::new());
}

#[test]
fn a_host_commit_is_refused_and_the_bracket_still_rolls_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    let outcome = ledger.run(|tx| {
        insert(tx, "k-1")?;
        refused(tx.execute("COMMIT", []), "COMMIT");
        refused(tx.execute("END", []), "COMMIT");
        Err::<(), _>(LedgerError::Host("give up after the refusal".into()))
    });
    assert!(outcome.is_err());
    assert_eq!(
        keys(&mut ledger),
        Vec::<String>::new(),
        "k-1 was not committed by the host"
    );
}

#[test]
fn a_host_commit_is_refused_and_the_bracket_still_commits() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    ledger.begin().unwrap();
    ledger
        .run_savepoint(|tx| {
            insert(tx, "k-1")?;
            refused(tx.execute("COMMIT", []), "COMMIT");
            insert(tx, "k-2")
        })
        .unwrap();
    assert!(
        ledger.in_batch(),
        "the batch is still open after the refused COMMIT"
    );
    ledger.run_savepoint(|tx| insert(tx, "k-3")).unwrap();
    ledger.commit().unwrap();
    assert_eq!(keys(&mut ledger), ["k-1", "k-2", "k-3"]);
}

#[test]
fn host_transaction_control_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    ledger
        .run(|tx| {
            insert(tx, "k-1")?;
            refused(tx.execute("BEGIN", []), "BEGIN");
            refused(tx.execute("BEGIN IMMEDIATE", []), "BEGIN");
            refused(tx.execute("ROLLBACK", []), "ROLLBACK");
            refused(tx.execute("SAVEPOINT mine", []), "SAVEPOINT mine");
            refused(tx.execute("RELEASE lh_call", []), "RELEASE lh_call");
            refused(tx.execute("ROLLBACK TO lh_call", []), "ROLLBACK");
            Ok(())
        })
        .unwrap();
    assert_eq!(
        keys(&mut ledger),
        ["k-1"],
        "the runtime's own savepoint and commit still worked"
    );
}

#[test]
fn refusals_reach_prepare_and_query_row_too() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    ledger
        .run(|tx| {
            assert!(
                matches!(tx.prepare("COMMIT"), Err(LedgerError::Refused(m)) if m.contains("COMMIT"))
            );
            let q = tx.query_row("PRAGMA journal_mode=DELETE", [], |r| r.get::<_, String>(0));
            assert!(matches!(q, Err(LedgerError::Refused(m)) if m.contains("journal_mode")));
            Ok(())
        })
        .unwrap();
}

#[test]
fn attach_and_detach_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other.db");
    let mut ledger = open(dir.path());
    ledger
        .run(|tx| {
            let sql = format!("ATTACH DATABASE '{}' AS other", other.display());
            refused(tx.execute(&sql, []), "ATTACH");
            refused(tx.execute("DETACH DATABASE main", []), "DETACH");
            Ok(())
        })
        .unwrap();
    assert!(!other.exists(), "the attach never ran");
}

#[test]
fn writing_pragmas_are_refused_and_reading_ones_pass() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    ledger
        .run(|tx| {
            refused(
                tx.execute("PRAGMA journal_mode=DELETE", []),
                "journal_mode=DELETE",
            );
            refused(tx.execute("PRAGMA main.synchronous=OFF", []), "synchronous");
            refused(tx.execute("PRAGMA foreign_keys=OFF", []), "foreign_keys");
            refused(tx.execute("PRAGMA user_version = 7", []), "user_version");
            refused(tx.execute("PRAGMA wal_checkpoint", []), "wal_checkpoint");
            refused(
                tx.execute("PRAGMA writable_schema=ON", []),
                "writable_schema",
            );
            let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            assert_eq!(version, 0);
            let fk: i64 = tx.query_row(
                "SELECT count(*) FROM pragma_table_info('events')",
                [],
                |r| r.get(0),
            )?;
            assert_eq!(fk, 8);
            Ok(())
        })
        .unwrap();
    assert_eq!(
        pragma_text(&mut ledger, "PRAGMA journal_mode"),
        "Text(\"wal\")"
    );
    assert_eq!(
        pragma_text(&mut ledger, "PRAGMA foreign_keys"),
        "Integer(1)"
    );
}

#[test]
fn vacuum_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let into = dir.path().join("copy.db");
    let mut ledger = open(dir.path());
    ledger
        .run(|tx| {
            refused(tx.execute("VACUUM", []), "VACUUM");
            refused(
                tx.execute(
                    &format!("/* sneaky */ vacuum INTO '{}'", into.display()),
                    [],
                ),
                "VACUUM",
            );
            Ok(())
        })
        .unwrap();
    assert!(!into.exists());
}

#[test]
fn the_events_table_is_append_only_for_host_code() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    ledger
        .run(|tx| {
            insert(tx, "k-1")?;
            refused(tx.execute("UPDATE events SET kind = 'forged'", []), "events");
            refused(tx.execute("DELETE FROM events", []), "events");
            refused(tx.execute("DROP TABLE events", []), "events");
            refused(tx.execute("ALTER TABLE events RENAME TO old_events", []), "events");
            refused(tx.execute("UPDATE sqlite_sequence SET seq = 0", []), "sqlite_sequence");
            let sql = "INSERT INTO events (ts_ms, actor, kind, payload, idem_key) VALUES (1, 'h', 'raw', '{}', 'k-raw')";
            assert_eq!(tx.execute(sql, [])?, 1, "appending by SQL is allowed");
            Ok(())
        })
        .unwrap();
    assert_eq!(keys(&mut ledger), ["k-1", "k-raw"]);
}

#[test]
fn host_tables_are_the_hosts() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = open(dir.path());
    ledger
        .run(|tx| {
            tx.execute(
                "CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)",
                [],
            )?;
            tx.execute(
                "INSERT INTO accounts VALUES (?1, ?2)",
                rusqlite::params!["a", 10],
            )?;
            tx.execute(
                "UPDATE accounts SET balance = balance + 5 WHERE id = 'a'",
                [],
            )?;
            tx.execute("CREATE INDEX accounts_balance ON accounts (balance)", [])?;
            tx.execute("INSERT INTO accounts VALUES ('b', 0)", [])?;
            tx.execute("DELETE FROM accounts WHERE id = 'b'", [])
        })
        .unwrap();
    let balance: i64 = ledger
        .run(|tx| {
            tx.query_row("SELECT balance FROM accounts WHERE id = 'a'", [], |r| {
                r.get(0)
            })
        })
        .unwrap();
    assert_eq!(balance, 15);
}

#[test]
fn reopening_keeps_committed_events_and_continues_the_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("ledger.db");
    let mut ledger = Ledger::open(&path, &LedgerOptions::default()).unwrap();
    assert_eq!(ledger.path(), path);
    ledger.run(|tx| insert(tx, "k-1")).unwrap();
    ledger.run(|tx| insert(tx, "k-2")).unwrap();
    ledger.begin().unwrap();
    ledger
        .run_savepoint(|tx| insert(tx, "k-uncommitted"))
        .unwrap();
    ledger.close().unwrap();
    for suffix in ["-wal", "-shm"] {
        let side = dir.path().join(format!("ledger.db{suffix}"));
        assert!(
            !side.exists() || side.metadata().unwrap().len() == 0,
            "{suffix} is empty after close"
        );
    }
    let mut again = Ledger::open(&path, &LedgerOptions::default()).unwrap();
    assert_eq!(keys(&mut again), ["k-1", "k-2"]);
    assert_eq!(again.run(|tx| insert(tx, "k-3")).unwrap(), Some(3));
}
