//! The runtime's table of stored replies, `_leasehold_replies`: what makes a command sent with
//! an idempotency key run once however often it is delivered (docs/guarantees.md, promise 11).
//!
//! ```text
//!   run_keyed(key, f)
//!     a reply stored under key? ──yes──> Stored { name, reply }     (nothing runs)
//!          │ no
//!          ▼
//!     SAVEPOINT lh_call; f (host code, guard up) → reply;
//!     INSERT INTO _leasehold_replies (key, name, reply, at_ms)   (the runtime, guard down)
//!     RELEASE                                            → Ran(reply)
//! ```
//!
//! The reply is written in the **same savepoint** as the command's effect, so the two commit or
//! roll back together: a batch that commits holds both, one that is fenced or rolled back holds
//! neither. The table is part of the ledger, so it travels in the change log and in images: a
//! successor after a handoff or a crash finds the replies of every command the log holds.
//! Host code can neither read nor write it (the authorizer, `guard.rs`). A command that fails
//! stores nothing: nothing of it was committed, so a retry runs it again. Rows older than the
//! idempotency window are pruned, a bounded number at a time ([`Ledger::prune_replies`]).

use rusqlite::{Connection, OptionalExtension};

use super::{Ledger, LedgerError, LedgerTx};

/// Creates the table and its index on age, if absent (at every open).
pub(super) const CREATE_REPLIES: &str = "
    CREATE TABLE IF NOT EXISTS _leasehold_replies (
        key   TEXT PRIMARY KEY NOT NULL,
        name  TEXT NOT NULL,
        reply BLOB NOT NULL,
        at_ms INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS _leasehold_replies_at ON _leasehold_replies (at_ms);";

const FIND: &str = "SELECT name, reply FROM _leasehold_replies WHERE key = ?1";

const INSERT: &str =
    "INSERT INTO _leasehold_replies (key, name, reply, at_ms) VALUES (?1, ?2, ?3, ?4)";

const PRUNE: &str = "DELETE FROM _leasehold_replies WHERE key IN (
        SELECT key FROM _leasehold_replies WHERE at_ms < ?1 ORDER BY at_ms LIMIT ?2)";

/// Where a command's reply is stored: its idempotency key, the message's name, and when
/// (milliseconds since the Unix epoch, the host's wall clock: the window is judged by it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyKey {
    /// The idempotency key the caller gave.
    pub key: String,
    /// The name of the message it was given for.
    pub name: String,
    /// When the command ran.
    pub at_ms: i64,
}

/// What a keyed run came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keyed {
    /// The command ran, in its own savepoint, and its reply was stored beside its effect.
    Ran(Vec<u8>),
    /// A reply was stored under the key already: nothing ran.
    Stored {
        /// The name of the message it was stored for (another name than the caller's is the
        /// caller's mistake: one key, one command).
        name: String,
        /// The stored reply.
        reply: Vec<u8>,
    },
}

impl Ledger {
    /// The reply stored under idempotency key `key`, with the name of its message, if any. Sees
    /// the open batch (a second delivery in the same batch finds the first).
    pub fn stored_reply(&self, key: &str) -> Result<Option<(String, Vec<u8>)>, LedgerError> {
        let row = self
            .conn
            .prepare_cached(FIND)?
            .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        Ok(row)
    }

    /// Runs a command keyed by `key` in the open batch: the stored reply if there is one (and
    /// nothing runs), else `f` in its own savepoint with its reply stored in that same
    /// savepoint. An `Err` from `f` rolls back its savepoint and stores nothing.
    pub fn run_keyed(
        &mut self,
        key: &ReplyKey,
        f: impl FnOnce(&mut LedgerTx<'_>) -> Result<Vec<u8>, LedgerError>,
    ) -> Result<Keyed, LedgerError> {
        if let Some((name, reply)) = self.stored_reply(&key.key)? {
            return Ok(Keyed::Stored { name, reply });
        }
        let reply = self.savepoint(f, |conn, reply| store(conn, key, reply))?;
        Ok(Keyed::Ran(reply))
    }

    /// Deletes at most `at_most` stored replies older than `before_ms` (oldest first), in a
    /// savepoint of the open batch: the pruning commits with the batch, under its lease check,
    /// and travels in the log like any write. Returns how many went.
    pub fn prune_replies(&mut self, before_ms: i64, at_most: u32) -> Result<usize, LedgerError> {
        let mut pruned = 0;
        self.savepoint(
            |_| Ok(()),
            |conn, ()| {
                pruned = conn
                    .prepare_cached(PRUNE)?
                    .execute(rusqlite::params![before_ms, at_most])?;
                Ok(())
            },
        )?;
        Ok(pruned)
    }
}

/// Stores `reply` under `key` (the runtime's statement, the guard down).
fn store(conn: &Connection, key: &ReplyKey, reply: &[u8]) -> Result<(), LedgerError> {
    conn.prepare_cached(INSERT)?
        .execute(rusqlite::params![key.key, key.name, reply, key.at_ms])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::LedgerOptions;

    fn ledger(dir: &std::path::Path) -> Ledger {
        Ledger::open(&dir.join("ledger.db"), &LedgerOptions::default()).unwrap()
    }

    fn key(k: &str, at_ms: i64) -> ReplyKey {
        ReplyKey {
            key: k.into(),
            name: "bank.deposit".into(),
            at_ms,
        }
    }

    fn deposit(tx: &mut LedgerTx<'_>) -> Result<Vec<u8>, LedgerError> {
        tx.execute("CREATE TABLE IF NOT EXISTS t (x)", [])?;
        tx.execute("INSERT INTO t VALUES (1)", [])?;
        Ok(vec![
            tx.query_row("SELECT count(*) FROM t", [], |r| r.get::<_, i64>(0))? as u8,
        ])
    }

    fn rows(l: &mut Ledger) -> i64 {
        l.run(|tx| tx.query_row("SELECT count(*) FROM t", [], |r| r.get(0)))
            .unwrap()
    }

    #[test]
    fn a_second_delivery_returns_the_stored_reply_and_runs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = ledger(dir.path());
        l.begin().unwrap();
        assert_eq!(l.run_keyed(&key("k1", 1), deposit), Ok(Keyed::Ran(vec![1])));
        // The same batch: the second delivery sees the first.
        let again = l.run_keyed(&key("k1", 2), deposit).unwrap();
        assert_eq!(
            again,
            Keyed::Stored {
                name: "bank.deposit".into(),
                reply: vec![1]
            }
        );
        l.commit().unwrap();
        l.begin().unwrap();
        assert_eq!(
            l.run_keyed(&key("k2", 3), deposit),
            Ok(Keyed::Ran(vec![2])),
            "another key runs"
        );
        l.commit().unwrap();
        assert_eq!(rows(&mut l), 2);
    }

    #[test]
    fn the_reply_rolls_back_with_the_effect() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = ledger(dir.path());
        l.begin().unwrap();
        assert_eq!(l.run_keyed(&key("k1", 1), deposit), Ok(Keyed::Ran(vec![1])));
        l.rollback().unwrap();
        assert_eq!(l.stored_reply("k1"), Ok(None), "rolled back with the batch");
        l.begin().unwrap();
        let failed = l.run_keyed(&key("k2", 1), |tx| {
            deposit(tx)?;
            Err(LedgerError::Host("no".into()))
        });
        assert_eq!(failed, Err(LedgerError::Host("no".into())));
        assert_eq!(
            l.stored_reply("k2"),
            Ok(None),
            "a failed command stores nothing"
        );
        l.commit().unwrap();
    }

    #[test]
    fn pruning_takes_the_oldest_first_and_at_most_so_many() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = ledger(dir.path());
        l.begin().unwrap();
        for (k, at) in [("a", 10), ("b", 20), ("c", 30), ("d", 40)] {
            l.run_keyed(&key(k, at), deposit).unwrap();
        }
        assert_eq!(l.prune_replies(35, 2), Ok(2));
        assert_eq!(l.prune_replies(35, 2), Ok(1));
        assert_eq!(l.prune_replies(35, 2), Ok(0));
        l.commit().unwrap();
        assert_eq!(l.stored_reply("c"), Ok(None));
        assert!(l.stored_reply("d").unwrap().is_some());
    }

    #[test]
    fn host_code_cannot_forge_read_or_drop_a_stored_reply() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = ledger(dir.path());
        l.begin().unwrap();
        l.run_keyed(&key("k1", 1), deposit).unwrap();
        l.commit().unwrap();
        for sql in [
            "INSERT INTO _leasehold_replies VALUES ('k9', 'bank.deposit', x'00', 1)",
            "UPDATE _leasehold_replies SET reply = x'07'",
            "DELETE FROM _leasehold_replies",
            "DROP TABLE _leasehold_replies",
            "DROP INDEX _leasehold_replies_at",
            "CREATE TRIGGER forge AFTER INSERT ON _leasehold_replies BEGIN SELECT 1; END",
            "ALTER TABLE _leasehold_replies RENAME TO mine",
            "SELECT reply FROM _leasehold_replies",
            "SELECT count(*) FROM _leasehold_replies",
        ] {
            let refused = l.run(|tx| tx.execute(sql, []));
            assert!(
                matches!(refused, Err(LedgerError::Refused(ref why)) if why.contains("_leasehold_")),
                "{sql}: {refused:?}"
            );
        }
        assert_eq!(
            l.stored_reply("k1"),
            Ok(Some(("bank.deposit".into(), vec![1])))
        );
    }
}
