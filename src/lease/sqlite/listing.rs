//! The listing of the SQLite lease store ([`LeaseStore::list`](crate::LeaseStore::list)): one
//! statement joins each lease row to its pending erasure, so a page is one consistent snapshot;
//! the time left and the erasure's age are judged by the store's clock ([`StoreTime`]) with the
//! same rules as every write (`rules.rs`, `erasures.rs`).

use std::time::Duration;

use rusqlite::{Connection, params};

use super::erasures;
use super::rules::StoreTime;
use super::{get_u64, row_from_sql, sql_int};
use crate::durable::StoreError;
use crate::ids::LeaseKey;
use crate::lease::{ErasureEntry, LeaseEntry, LeaseError, LeasePage};

/// The lease rows at or after `?1` (all when NULL), bytewise in key order, `?2` of them; the
/// row's columns first, in the order `row_from_sql` reads them, then the key and the erasure.
const SELECT_PAGE: &str = "SELECT l.owner, l.epoch, l.expires_at_ms, l.boot_id, l.released, \
    l.floor, l.head_epoch, l.head_seq, l.head_sha256, l.attempt, l.tip_epoch, l.tip_seq, \
    l.key, e.floor, e.forgotten_at_ms, e.boot_id \
    FROM leases AS l LEFT JOIN erasures AS e ON e.key = l.key \
    WHERE ?1 IS NULL OR l.key >= ?1 ORDER BY l.key LIMIT ?2";

/// The column of the key in [`SELECT_PAGE`].
const KEY_COLUMN: usize = 12;

/// One page of at most `limit` entries from `from`, judged at `at`. An inner `Err` is a key
/// in the file that is no lease key (never written by this store), which would stop the paging.
pub(super) fn page(
    conn: &Connection,
    from: Option<&str>,
    limit: usize,
    at: &StoreTime,
) -> rusqlite::Result<Result<LeasePage, LeaseError>> {
    let asked = sql_int(limit as u64 + 1)?;
    let mut stmt = conn.prepare_cached(SELECT_PAGE)?;
    let rows = stmt.query_map(params![from, asked], |r| {
        let row = row_from_sql(r)?;
        let key: String = r.get(KEY_COLUMN)?;
        let erasure = match r.get::<_, Option<i64>>(KEY_COLUMN + 1)? {
            Some(_) => Some((
                get_u64(r, KEY_COLUMN + 1)?,
                get_u64(r, KEY_COLUMN + 2)?,
                r.get::<_, String>(KEY_COLUMN + 3)?,
            )),
            None => None,
        };
        Ok((key, row, erasure))
    })?;
    let mut entries = Vec::new();
    let mut next = None;
    for found in rows {
        let (key, row, erasure) = found?;
        if entries.len() == limit {
            next = Some(key);
            break;
        }
        let erasure = erasure.map(|(floor, forgotten_at_ms, boot_id)| ErasureEntry {
            floor,
            age: erasures::age_ms(forgotten_at_ms, &boot_id, at).map(Duration::from_millis),
        });
        entries.push(LeaseEntry {
            remaining: row.remaining_ms(at).map(Duration::from_millis),
            record: row.record(&key),
            erasure,
        });
    }
    let next = match next.map(|key| LeaseKey::parse(&key).map_err(|e| (key, e))) {
        None => None,
        Some(Ok(key)) => Some(key),
        Some(Err((key, e))) => {
            return Ok(Err(StoreError::Backend {
                op: "list",
                message: format!("the lease file holds a key that is no lease key, {key:?}: {e}"),
            }
            .into()));
        }
    };
    Ok(Ok(LeasePage { entries, next }))
}
