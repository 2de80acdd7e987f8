//! The listing of the PostgreSQL lease store ([`LeaseStore::list`](crate::LeaseStore::list)):
//! one statement, so a page is one snapshot; the time each lease still runs and each pending
//! erasure's age are computed by the server from one reading of its clock, the only clock the
//! table's times count on.

use std::time::Duration;

use super::PostgresLeaseStore;
use super::sql::{REMAINING_COLUMN, get, record, to_i64};
use crate::durable::StoreError;
use crate::ids::LeaseKey;
use crate::lease::{ErasureEntry, LeaseEntry, LeaseError, LeasePage, page_limit};

/// One page of at most `limit` entries from `from`.
pub(super) async fn list(
    store: &PostgresLeaseStore,
    from: Option<&LeaseKey>,
    limit: usize,
) -> Result<LeasePage, LeaseError> {
    let op = "list";
    let limit = page_limit(limit);
    let asked = to_i64(op, limit as u64 + 1)?;
    let from = from.map(LeaseKey::as_str);
    let rows = store.rows(op, &store.sql.list, &[&from, &asked]).await?;
    let mut page = LeasePage::default();
    for row in &rows {
        if page.entries.len() == limit {
            let key: String = get(op, row, 0)?;
            let next = LeaseKey::parse(&key).map_err(|e| StoreError::Backend {
                op,
                message: format!("the lease table holds a key that is no lease key, {key:?}: {e}"),
            })?;
            page.next = Some(next);
            break;
        }
        let millis = |idx| -> Result<Option<Duration>, StoreError> {
            let value: Option<i64> = get(op, row, idx)?;
            Ok(value.map(|ms| Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
        };
        let floor: Option<i64> = get(op, row, REMAINING_COLUMN + 1)?;
        let erasure = match floor {
            Some(floor) => Some(ErasureEntry {
                floor: u64::try_from(floor).unwrap_or(0),
                age: millis(REMAINING_COLUMN + 2)?,
            }),
            None => None,
        };
        page.entries.push(LeaseEntry {
            record: record(op, row)?,
            remaining: millis(REMAINING_COLUMN)?,
            erasure,
        });
    }
    Ok(page)
}
