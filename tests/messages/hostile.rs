//! A hostile reviewer's attacks on addresses on one replica (docs/guarantees.md, promises 6 and
//! 11): a caller who stops waiting for slow queries, a deadline too far to count, queries that
//! try every way to write, idempotency keys at their limits. Each test is named after the
//! promise it would break.

use std::sync::atomic::{AtomicUsize, Ordering};

use leasehold::Error;
use leasehold_actors::config::QUERIES_AT_ONCE;

use super::common::*;
use super::*;

/// Queries of [`Slow`] reading right now, and the most that ever read at once.
static SLOW_NOW: AtomicUsize = AtomicUsize::new(0);
static SLOW_MOST: AtomicUsize = AtomicUsize::new(0);

/// A report that reads for `ms` milliseconds (a slow report), counting how many read at once.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Slow {
    ms: u64,
}

impl TenantQuery for Slow {
    type Reply = ();
    const NAME: &'static str = "test.slow";

    fn query(self, _: &LedgerRead<'_>) -> Result<(), LedgerError> {
        let now = SLOW_NOW.fetch_add(1, Ordering::SeqCst) + 1;
        SLOW_MOST.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(self.ms));
        SLOW_NOW.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }
}

/// The descriptor ceiling counts `QUERIES_AT_ONCE` read connections (docs/guarantees.md, "the
/// numbers": queries at once, most tenants open at once), so a flush always finds descriptors.
/// A caller that stops waiting must not free its query's slot while the query still reads on
/// its read connection: waves of slow queries whose callers give up would otherwise hold any
/// number of read connections (seen: 48 reading at once with a slot count of 16).
#[actix_rt::test]
async fn promise6_a_query_whose_caller_stopped_waiting_keeps_its_read_slot_until_it_has_read() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", |c| {
        c.messages = bank_messages().query::<Slow>().unwrap();
    });
    assert_eq!(a.sup.send(&addr(), deposit("slow", 1)).await, Ok(1));
    for wave in 0..3 {
        let asks: Vec<_> = (0..QUERIES_AT_ONCE)
            .map(|_| {
                a.sup
                    .ask(&addr(), Slow { ms: 3_000 }, Duration::from_millis(400))
            })
            .collect();
        for answer in futures::future::join_all(asks).await {
            assert!(
                matches!(answer, Err(Error::DeadlineExceeded { .. })),
                "wave {wave}: {answer:?}"
            );
        }
    }
    let most = SLOW_MOST.load(Ordering::SeqCst);
    assert!(most >= 1, "some slow query read");
    assert!(
        most <= QUERIES_AT_ONCE,
        "{most} queries read at once on read connections of their own; at most {QUERIES_AT_ONCE}"
    );
    // Once they have read, the slots serve again.
    eventually(10_000, "the slow queries to end", || async {
        SLOW_NOW.load(Ordering::SeqCst) == 0
    })
    .await;
    let after = a
        .sup
        .ask(&addr(), balance_of("slow"), Duration::from_secs(5));
    assert_eq!(after.await, Ok(1));
}

/// Every call settles, and bad input gets a typed error, never a panic: a deadline too far to
/// count (`Duration::MAX`) is a wait without end for practical purposes, not an overflow.
#[actix_rt::test]
async fn promise11_a_deadline_too_far_to_count_is_no_panic() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    let sent = a.sup.clone();
    let answer =
        actix_rt::spawn(async move { sent.ask(&addr(), deposit("far", 2), Duration::MAX).await })
            .await;
    assert!(matches!(answer, Ok(Ok(2))), "{answer:?}");
}

/// A query that tries every way a read connection could write, end its snapshot, reach the
/// runtime's own table or attach another file: each refused, nothing changed.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Attempt {
    sql: String,
}

impl TenantQuery for Attempt {
    type Reply = ();
    const NAME: &'static str = "test.attempt";

    fn query(self, ledger: &LedgerRead<'_>) -> Result<(), LedgerError> {
        let mut statement = ledger.prepare(&self.sql)?;
        let mut rows = statement.raw_query();
        rows.next()
            .map_err(|e| LedgerError::Sqlite(e.to_string()))?;
        Ok(())
    }
}

#[actix_rt::test]
async fn promise11_a_query_cannot_write_end_its_snapshot_or_read_the_replies_by_any_statement() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", |c| {
        c.messages = bank_messages().query::<Attempt>().unwrap();
    });
    let keyed = a
        .sup
        .request(&addr(), deposit("kept", 7))
        .idempotency_key("k1");
    assert_eq!(keyed.await, Ok(7));
    let dir = fleet.dir.path().display().to_string();
    let attempts = [
        "INSERT INTO accounts VALUES ('thief', 1000000)".to_owned(),
        "UPDATE accounts SET cents = 0".to_owned(),
        "DELETE FROM accounts".to_owned(),
        "DROP TABLE accounts".to_owned(),
        "CREATE TEMP TABLE t (x)".to_owned(),
        "PRAGMA user_version = 9".to_owned(),
        "PRAGMA journal_mode = DELETE".to_owned(),
        "PRAGMA wal_checkpoint(TRUNCATE)".to_owned(),
        "PRAGMA writable_schema = ON".to_owned(),
        "COMMIT".to_owned(),
        "ROLLBACK".to_owned(),
        "SAVEPOINT s".to_owned(),
        "BEGIN IMMEDIATE".to_owned(),
        "VACUUM".to_owned(),
        format!("VACUUM INTO '{dir}/copy.db'"),
        format!("ATTACH DATABASE '{dir}/attached.db' AS x"),
        "ATTACH DATABASE ':memory:' AS m".to_owned(),
        "SELECT reply FROM _leasehold_replies".to_owned(),
        "SELECT * FROM main._leasehold_replies".to_owned(),
        "DELETE FROM _leasehold_replies".to_owned(),
        "SELECT load_extension('/nonexistent')".to_owned(),
    ];
    for sql in attempts {
        let refused = a.sup.send(&addr(), Attempt { sql: sql.clone() }).await;
        assert!(
            matches!(refused, Err(Error::Ledger(_))),
            "{sql}: {refused:?}"
        );
    }
    assert!(!fleet.dir.path().join("attached.db").exists());
    assert!(!fleet.dir.path().join("copy.db").exists());
    assert_eq!(a.sup.send(&addr(), balance_of("kept")).await, Ok(7));
    assert_eq!(a.sup.send(&addr(), balance_of("thief")).await, Ok(0));
    // The stored reply is still there: a retry replays it, nothing runs again.
    let retry = a
        .sup
        .request(&addr(), deposit("kept", 7))
        .idempotency_key("k1");
    assert_eq!(retry.await, Ok(7));
    assert_eq!(a.sup.send(&addr(), balance_of("kept")).await, Ok(7));
}

/// Idempotency keys at their limits: 256 bytes is a key, 257 and none are not; keys that differ
/// only after a NUL are different keys (a text compared to its first NUL would replay one
/// command's reply for another).
#[actix_rt::test]
async fn promise11_idempotency_keys_at_their_limits_run_once_each() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    let max = "m".repeat(leasehold_actors::message::MAX_IDEMPOTENCY_KEY);
    for _ in 0..2 {
        let once = a
            .sup
            .request(&addr(), deposit("limits", 1))
            .idempotency_key(max.clone());
        assert_eq!(once.await, Ok(1), "256 bytes: once");
    }
    let over = a
        .sup
        .request(&addr(), deposit("limits", 100))
        .idempotency_key(format!("{max}m"));
    assert!(matches!(over.await, Err(Error::BadMessage { .. })));
    let empty = a
        .sup
        .request(&addr(), deposit("limits", 100))
        .idempotency_key("");
    assert!(matches!(empty.await, Err(Error::BadMessage { .. })));
    let first = a
        .sup
        .request(&addr(), deposit("limits", 10))
        .idempotency_key("a\0b");
    assert_eq!(first.await, Ok(11));
    let second = a
        .sup
        .request(&addr(), deposit("limits", 10))
        .idempotency_key("a\0c");
    assert_eq!(
        second.await,
        Ok(21),
        "a key differing after a NUL is its own"
    );
    let multibyte = "é".repeat(128); // 256 bytes, 128 characters
    for _ in 0..2 {
        let once = a
            .sup
            .request(&addr(), deposit("limits", 5))
            .idempotency_key(multibyte.clone());
        assert_eq!(once.await, Ok(26));
    }
    assert_eq!(a.sup.send(&addr(), balance_of("limits")).await, Ok(26));
}

/// A forget erases the tenant's stored replies with everything else (promise 5 wins): a command
/// sent again with its idempotency key after a forget — a late retry, or a captured forward
/// played back — is not replayed but runs on the tenant opened afresh, even within the
/// idempotency window. docs/guarantees.md said a replay within the window "runs nothing"
/// without this exception; it says so now. Pinned so that a change either way is seen.
#[actix_rt::test]
async fn promise11_a_forget_ends_the_idempotency_window_of_its_tenant() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    assert_eq!(a.sup.send(&addr(), deposit("erased", 3)).await, Ok(3));
    let keyed = a
        .sup
        .request(&addr(), deposit("erased", 5))
        .idempotency_key("once");
    assert_eq!(keyed.await, Ok(8));
    let again = a
        .sup
        .request(&addr(), deposit("erased", 5))
        .idempotency_key("once");
    assert_eq!(again.await, Ok(8), "within the window: the stored reply");
    let t = a.sup.tenant(&org(), &tenant()).await.unwrap();
    t.forget().await.unwrap();
    let after = a
        .sup
        .request(&addr(), deposit("erased", 5))
        .idempotency_key("once");
    assert_eq!(
        after.await,
        Ok(5),
        "after a forget it runs again, on the tenant afresh"
    );
    assert_eq!(a.sup.send(&addr(), balance_of("erased")).await, Ok(5));
}

/// A command that writes a row and answers `bytes` bytes.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Bloat {
    bytes: usize,
}

impl TenantMessage for Bloat {
    type Reply = String;
    const NAME: &'static str = "test.bloat";

    fn handle(self, ledger: &mut LedgerTx<'_>) -> Result<String, LedgerError> {
        ledger.execute("CREATE TABLE IF NOT EXISTS bloat (x INTEGER)", [])?;
        ledger.execute("INSERT INTO bloat VALUES (1)", [])?;
        Ok("x".repeat(self.bytes))
    }
}

/// How many rows `Bloat` left, and a reply of `bytes` bytes (a query).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct BloatRows {
    bytes: usize,
}

impl TenantQuery for BloatRows {
    type Reply = (i64, String);
    const NAME: &'static str = "test.bloat_rows";

    fn query(self, ledger: &LedgerRead<'_>) -> Result<(i64, String), LedgerError> {
        let tables: i64 = ledger.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name = 'bloat'",
            [],
            |r| r.get(0),
        )?;
        let rows = match tables {
            0 => 0,
            _ => ledger.query_row("SELECT count(*) FROM bloat", [], |r| r.get(0))?,
        };
        Ok((rows, "y".repeat(self.bytes)))
    }
}

/// A reply over the message limit (docs/guarantees.md, "message size"): a command's rolls the
/// command back — its row is not written, its key stores nothing, so a retry runs it — and a
/// query's is refused; both `TooLarge`, and the tenant serves on.
#[actix_rt::test]
async fn promise11_a_reply_over_the_limit_rolls_its_command_back_and_stores_nothing() {
    use leasehold::codec::MESSAGE_LIMIT;
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", |c| {
        c.messages = bank_messages()
            .command::<Bloat>()
            .and_then(|m| m.query::<BloatRows>())
            .unwrap();
    });
    let rows = |bytes| a.sup.send(&addr(), BloatRows { bytes });
    assert_eq!(rows(0).await.map(|r| r.0), Ok(0));
    let big = Bloat {
        bytes: MESSAGE_LIMIT + 1,
    };
    let refused = a.sup.request(&addr(), big).idempotency_key("big").await;
    assert!(
        matches!(refused, Err(Error::TooLarge { .. })),
        "{refused:?}"
    );
    assert_eq!(rows(0).await.map(|r| r.0), Ok(0), "rolled back");
    let retry = a
        .sup
        .request(&addr(), Bloat { bytes: 3 })
        .idempotency_key("big")
        .await;
    assert_eq!(
        retry,
        Ok("xxx".to_owned()),
        "nothing was stored under the key"
    );
    assert_eq!(rows(0).await.map(|r| r.0), Ok(1));
    let query = rows(MESSAGE_LIMIT + 1).await;
    assert!(matches!(query, Err(Error::TooLarge { .. })), "{query:?}");
    assert_eq!(rows(0).await.map(|r| r.0), Ok(1), "the tenant serves on");
}
