//! The pending erasures of the SQLite lease store: one row per forgotten tenant whose prefix
//! must be swept once more after the longest put has had time to land (docs/guarantees.md, "the
//! erasure bound"). A forget writes its row in the same transaction that raises the floor; any
//! replica's periodic sweep reads the due ones and clears each once swept.
//!
//! ```text
//! erasures(key PRIMARY KEY, floor, forgotten_at_ms, boot_id)    -- since schema 4
//! ```
//!
//! `forgotten_at_ms` counts on the store's clock in boot `boot_id`, like a lease's expiry. A row
//! of an earlier boot was written before this boot began, so it is due once this boot's clock
//! has run the settle time ([`is_due`]).

use rusqlite::{Connection, params};

use super::rules::StoreTime;
use super::{get_u64, sql_int};
use crate::ids::LeaseKey;
use crate::lease::PendingErasure;

/// Creates the table (schema 4).
pub(super) const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS erasures (
    key             TEXT PRIMARY KEY NOT NULL,
    floor           INTEGER NOT NULL,
    forgotten_at_ms INTEGER NOT NULL,
    boot_id         TEXT NOT NULL
) STRICT";

/// A forget of `key` raised the floor to `floor` now: its erasure is pending from now on. The
/// same floor again (a retried forget) keeps its first time.
pub(super) fn record(
    conn: &Connection,
    key: &str,
    floor: u64,
    at: &StoreTime,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO erasures (key, floor, forgotten_at_ms, boot_id) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT(key) DO UPDATE SET floor = excluded.floor, \
         forgotten_at_ms = excluded.forgotten_at_ms, boot_id = excluded.boot_id \
         WHERE erasures.floor <> excluded.floor",
    )?
    .execute(params![
        key,
        sql_int(floor)?,
        sql_int(at.now_ms)?,
        at.boot_id.as_ref()
    ])?;
    Ok(())
}

/// Whether an erasure recorded at `forgotten_at_ms` in boot `boot_id` is due at `at`, after
/// `settled_ms`: on the same boot, once that much time has passed; a row of another boot, once
/// this boot has lasted that long (the forget came before this boot began).
pub(super) fn is_due(forgotten_at_ms: u64, boot_id: &str, at: &StoreTime, settled_ms: u64) -> bool {
    if boot_id == &*at.boot_id {
        at.now_ms >= forgotten_at_ms.saturating_add(settled_ms)
    } else {
        at.now_ms >= settled_ms
    }
}

/// How long ago an erasure recorded at `forgotten_at_ms` in boot `boot_id` was recorded, at
/// `at`: `None` for a row of another boot (its time counts on a clock that has started again).
pub(super) fn age_ms(forgotten_at_ms: u64, boot_id: &str, at: &StoreTime) -> Option<u64> {
    (boot_id == &*at.boot_id).then(|| at.now_ms.saturating_sub(forgotten_at_ms))
}

/// The due erasures at `at`, oldest first (another boot's before this one's), at most `limit`.
pub(super) fn due(
    conn: &Connection,
    at: &StoreTime,
    settled_ms: u64,
    limit: usize,
) -> rusqlite::Result<Vec<PendingErasure>> {
    let mut stmt = conn.prepare_cached(
        "SELECT key, floor, forgotten_at_ms, boot_id FROM erasures ORDER BY forgotten_at_ms, key",
    )?;
    let rows = stmt.query_map([], |r| {
        let key: String = r.get(0)?;
        let boot_id: String = r.get(3)?;
        Ok((key, get_u64(r, 1)?, get_u64(r, 2)?, boot_id))
    })?;
    let mut found = Vec::new();
    for row in rows {
        let (key, floor, forgotten_at_ms, boot_id) = row?;
        if !is_due(forgotten_at_ms, &boot_id, at, settled_ms) {
            continue;
        }
        // A key the store wrote itself always parses; one that does not is skipped, not fatal.
        if let Ok(key) = LeaseKey::parse(&key) {
            let this_boot = boot_id == *at.boot_id;
            found.push((this_boot, forgotten_at_ms, PendingErasure { key, floor }));
        }
    }
    found.sort_by_key(|(this_boot, at, e)| (*this_boot, *at, e.key.to_string()));
    Ok(found.into_iter().take(limit).map(|(_, _, e)| e).collect())
}

/// Clears the pending erasure of `key` at `floor`; another floor's stays.
pub(super) fn done(conn: &Connection, key: &str, floor: u64) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM erasures WHERE key = ?1 AND floor = ?2")?
        .execute(params![key, sql_int(floor)?])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(now_ms: u64, boot: &str) -> StoreTime {
        StoreTime {
            now_ms,
            boot_id: boot.into(),
        }
    }

    #[test]
    fn an_erasure_is_due_once_the_settle_time_has_passed_on_the_stores_clock() {
        assert!(!is_due(1_000, "b1", &at(1_999, "b1"), 1_000));
        assert!(is_due(1_000, "b1", &at(2_000, "b1"), 1_000));
        assert!(is_due(u64::MAX, "b1", &at(u64::MAX, "b1"), 1_000));
    }

    #[test]
    fn an_erasures_age_counts_on_this_boots_clock_and_is_unknown_for_another_boot() {
        assert_eq!(age_ms(1_000, "b1", &at(1_250, "b1")), Some(250));
        assert_eq!(age_ms(1_000, "b1", &at(999, "b1")), Some(0));
        assert_eq!(age_ms(1_000, "b1", &at(5_000, "b2")), None);
    }

    #[test]
    fn an_erasure_of_an_earlier_boot_is_due_once_this_boot_has_lasted_the_settle_time() {
        assert!(!is_due(50_000, "b1", &at(999, "b2"), 1_000));
        assert!(is_due(50_000, "b1", &at(1_000, "b2"), 1_000));
    }

    #[test]
    fn a_retried_forget_keeps_its_first_time_and_done_clears_only_its_floor() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        record(&conn, "acme/t1", 3, &at(1_000, "b1")).unwrap();
        record(&conn, "acme/t1", 3, &at(5_000, "b1")).unwrap();
        let due_at = |now| due(&conn, &at(now, "b1"), 1_000, 10).unwrap();
        assert_eq!(due_at(2_000).len(), 1, "counted from the first forget");
        done(&conn, "acme/t1", 2).unwrap();
        assert_eq!(due_at(2_000).len(), 1, "another floor's done leaves it");
        record(&conn, "acme/t1", 7, &at(6_000, "b1")).unwrap();
        assert!(due_at(2_000).is_empty(), "a later forget starts again");
        assert_eq!(due_at(7_000)[0].floor, 7);
        done(&conn, "acme/t1", 7).unwrap();
        assert!(due_at(u64::MAX).is_empty());
    }
}
