//! The replica records of the SQLite lease store (`lease/replica.rs`): one row per replica id,
//! its expiry counted on the store's clock in the boot it was written in, like a lease's.
//!
//! ```text
//! replicas(id PRIMARY KEY, endpoint, epoch, incarnation, expires_at_ms, boot_id, withdrawn)
//!                                                                    -- since schema 5
//! ```
//!
//! The rules ([`advertised`], [`renewed`], [`withdrawn`]) are pure functions of the row and the
//! store's time, as the lease rules of `sqlite/rules.rs` are; the functions below them load and
//! save rows inside the caller's transaction.

use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::rules::{StoreTime, Tenure, ends_at};
use super::{attempt_from_sql, attempt_to_sql, get_u64, sql_int};
use crate::clock::duration_ms;
use crate::ids::LeaseKey;
use crate::lease::{LeaseError, Lookup, RenewOutcome, ReplicaRecord, ReplicaRenewal, ReplicaView};

/// Creates the table (schema 5).
pub(super) const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS replicas (
    id            TEXT PRIMARY KEY NOT NULL,
    endpoint      TEXT NOT NULL,
    epoch         INTEGER NOT NULL,
    incarnation   INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    boot_id       TEXT NOT NULL,
    withdrawn     INTEGER NOT NULL
) STRICT";

/// One row of `replicas`, without its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ReplicaRow {
    /// The advertised endpoint.
    pub(super) endpoint: String,
    /// Bumped by every advertise of a new incarnation.
    pub(super) epoch: u64,
    /// The process start that advertised this epoch.
    pub(super) incarnation: u64,
    /// The end of the record, on the store's clock in boot `boot_id`.
    pub(super) expires_at_ms: u64,
    /// The boot `expires_at_ms` counts in.
    pub(super) boot_id: String,
    /// Withdrawn at close.
    pub(super) withdrawn: bool,
}

impl ReplicaRow {
    /// Live: not withdrawn, written in this boot, not yet at its end.
    pub(super) fn is_live(&self, at: &StoreTime) -> bool {
        !self.withdrawn && self.boot_id == *at.boot_id && at.now_ms < self.expires_at_ms
    }

    /// The row as the record of replica `id`.
    pub(super) fn record(&self, id: &str) -> ReplicaRecord {
        ReplicaRecord {
            id: id.to_owned(),
            endpoint: self.endpoint.clone(),
            epoch: self.epoch,
            expires_at_ms: self.expires_at_ms,
            withdrawn: self.withdrawn,
        }
    }

    /// The row as a router sees it at `at`.
    pub(super) fn view(&self, id: &str, at: &StoreTime) -> ReplicaView {
        ReplicaView {
            id: id.to_owned(),
            endpoint: self.endpoint.clone(),
            epoch: self.epoch,
            live: self.is_live(at),
        }
    }
}

/// Advertise: a new incarnation takes the record at the next epoch; the same incarnation
/// refreshes it (same epoch, the new endpoint, never a shorter end); a withdrawn incarnation is
/// spent and keeps its row.
pub(super) fn advertised(
    row: Option<&ReplicaRow>,
    endpoint: &str,
    incarnation: u64,
    ttl_ms: u64,
    at: &StoreTime,
) -> ReplicaRow {
    let fresh = |epoch| ReplicaRow {
        endpoint: endpoint.to_owned(),
        epoch,
        incarnation,
        expires_at_ms: ends_at(ttl_ms, at),
        boot_id: at.boot_id.to_string(),
        withdrawn: false,
    };
    match row {
        None => fresh(1),
        Some(r) if r.incarnation != incarnation => fresh(r.epoch + 1),
        Some(r) if r.withdrawn => r.clone(),
        Some(r) => {
            let mut next = fresh(r.epoch);
            if r.boot_id == *at.boot_id {
                next.expires_at_ms = next.expires_at_ms.max(r.expires_at_ms);
            }
            next
        }
    }
}

/// Renewal of the record at `epoch`: only while it is live at that epoch.
pub(super) fn renewed(
    row: Option<&ReplicaRow>,
    epoch: u64,
    ttl_ms: u64,
    at: &StoreTime,
) -> Option<ReplicaRow> {
    let r = row.filter(|r| r.is_live(at) && r.epoch == epoch)?;
    Some(ReplicaRow {
        expires_at_ms: r.expires_at_ms.max(ends_at(ttl_ms, at)),
        ..r.clone()
    })
}

/// Withdrawal of the record at `epoch`; a record of another epoch stays as it is.
pub(super) fn withdrawn(row: Option<&ReplicaRow>, epoch: u64) -> Option<ReplicaRow> {
    let r = row.filter(|r| r.epoch == epoch && !r.withdrawn)?;
    Some(ReplicaRow {
        withdrawn: true,
        ..r.clone()
    })
}

impl super::SqliteLeaseStore {
    /// [`LeaseStore::advertise`](crate::lease::LeaseStore::advertise): one write transaction.
    pub(super) async fn advertise_record(
        &self,
        replica: &str,
        endpoint: &str,
        incarnation: u64,
        ttl: Duration,
    ) -> Result<ReplicaRecord, LeaseError> {
        let (id, endpoint, ttl_ms) = (replica.to_owned(), endpoint.to_owned(), duration_ms(ttl));
        self.write("advertise", move |conn, at| {
            let row = load(conn, &id)?;
            let next = advertised(row.as_ref(), &endpoint, incarnation, ttl_ms, at);
            save(conn, &id, &next)?;
            Ok(Ok(next.record(&id)))
        })
        .await
    }

    /// [`LeaseStore::renew_replica`](crate::lease::LeaseStore::renew_replica): the record and
    /// every lease in one write transaction (one fsync).
    pub(super) async fn renew_record(
        &self,
        replica: &str,
        epoch: u64,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<ReplicaRenewal, LeaseError> {
        let ttl_ms = duration_ms(ttl);
        let id = replica.to_owned();
        let asked: Vec<(String, Tenure)> = leases
            .iter()
            .map(|(key, e)| (key.as_str().to_owned(), Tenure::new(replica, *e)))
            .collect();
        self.write("renew_replica", move |conn, at| {
            let row = load(conn, &id)?;
            let record = match renewed(row.as_ref(), epoch, ttl_ms, at) {
                Some(next) => save(conn, &id, &next).map(|()| RenewOutcome::Renewed)?,
                None => RenewOutcome::Lost,
            };
            let leases = asked
                .iter()
                .map(|(key, tenure)| super::renew_one(conn, key, tenure, ttl_ms, at))
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(Ok(ReplicaRenewal { record, leases }))
        })
        .await
    }

    /// [`LeaseStore::withdraw`](crate::lease::LeaseStore::withdraw).
    pub(super) async fn withdraw_record(
        &self,
        replica: &str,
        epoch: u64,
    ) -> Result<(), LeaseError> {
        let id = replica.to_owned();
        self.write("withdraw", move |conn, _at| {
            if let Some(next) = withdrawn(load(conn, &id)?.as_ref(), epoch) {
                save(conn, &id, &next)?;
            }
            Ok(Ok(()))
        })
        .await
    }

    /// [`LeaseStore::lookup`](crate::lease::LeaseStore::lookup): the lease and its owner's record
    /// in one read transaction, judged at one reading of the store's clock.
    pub(super) async fn lookup_key(&self, key: &LeaseKey) -> Result<Lookup, LeaseError> {
        let key = key.as_str().to_owned();
        self.read_at("lookup", move |conn, at| {
            let Some(lease) = super::load(conn, &key)? else {
                return Ok(Lookup::vacant());
            };
            let holder = load(conn, &lease.owner)?.map(|r| r.view(&lease.owner, at));
            Ok(Lookup {
                lease_left_ms: lease.remaining_ms(at).unwrap_or(0),
                record: Some(lease.record(&key)),
                holder,
            })
        })
        .await
    }

    /// [`LeaseStore::live_replicas`](crate::lease::LeaseStore::live_replicas).
    pub(super) async fn live_records(&self) -> Result<Vec<ReplicaView>, LeaseError> {
        self.read_at("live_replicas", move |conn, at| {
            let rows = all(conn)?;
            Ok(rows
                .iter()
                .filter(|(_, r)| r.is_live(at))
                .map(|(id, r)| r.view(id, at))
                .collect())
        })
        .await
    }

    /// Runs `read` in one read transaction on a blocking thread, with the store's time read
    /// inside it; retried on busy.
    async fn read_at<T: Send + 'static>(
        &self,
        op: &'static str,
        read: impl Fn(&Connection, &StoreTime) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, LeaseError> {
        let (clock, boot_id) = (Arc::clone(&self.clock), Arc::clone(&self.boot_id));
        self.blocking(op, move |conn| {
            let outcome = super::with_retries(|| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Deferred)?;
                let at = StoreTime {
                    now_ms: clock.now_ms(),
                    boot_id: Arc::clone(&boot_id),
                };
                let value = read(&tx, &at)?;
                tx.finish()?;
                Ok(value)
            });
            outcome.map_err(|e| super::store_error(op, &e).into())
        })
        .await
    }
}

/// The row of replica `id`.
pub(super) fn load(conn: &Connection, id: &str) -> rusqlite::Result<Option<ReplicaRow>> {
    conn.prepare_cached(
        "SELECT endpoint, epoch, incarnation, expires_at_ms, boot_id, withdrawn \
         FROM replicas WHERE id = ?1",
    )?
    .query_row([id], from_sql)
    .optional()
}

/// Every row, by id.
pub(super) fn all(conn: &Connection) -> rusqlite::Result<Vec<(String, ReplicaRow)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT endpoint, epoch, incarnation, expires_at_ms, boot_id, withdrawn, id \
         FROM replicas ORDER BY id",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(6)?, from_sql(r)?)))?;
    rows.collect()
}

/// Saves the row of replica `id`.
pub(super) fn save(conn: &Connection, id: &str, row: &ReplicaRow) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO replicas (id, endpoint, epoch, incarnation, expires_at_ms, boot_id, withdrawn) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(id) DO UPDATE SET \
         endpoint = excluded.endpoint, epoch = excluded.epoch, incarnation = excluded.incarnation, \
         expires_at_ms = excluded.expires_at_ms, boot_id = excluded.boot_id, \
         withdrawn = excluded.withdrawn",
    )?
    .execute(params![
        id,
        row.endpoint,
        sql_int(row.epoch)?,
        attempt_to_sql(row.incarnation),
        sql_int(row.expires_at_ms)?,
        row.boot_id,
        row.withdrawn,
    ])?;
    Ok(())
}

fn from_sql(r: &rusqlite::Row<'_>) -> rusqlite::Result<ReplicaRow> {
    Ok(ReplicaRow {
        endpoint: r.get(0)?,
        epoch: get_u64(r, 1)?,
        incarnation: attempt_from_sql(r.get(2)?),
        expires_at_ms: get_u64(r, 3)?,
        boot_id: r.get(4)?,
        withdrawn: r.get(5)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(now_ms: u64) -> StoreTime {
        StoreTime {
            now_ms,
            boot_id: "boot-1".into(),
        }
    }

    #[test]
    fn a_new_incarnation_bumps_the_epoch_and_the_same_one_refreshes() {
        let first = advertised(None, "http://a", 7, 100, &at(10));
        assert_eq!((first.epoch, first.expires_at_ms), (1, 110));
        let again = advertised(Some(&first), "http://b", 7, 100, &at(50));
        assert_eq!((again.epoch, again.endpoint.as_str()), (1, "http://b"));
        assert_eq!(again.expires_at_ms, 150);
        let late = advertised(Some(&again), "http://b", 7, 10, &at(60));
        assert_eq!(
            late.expires_at_ms, 150,
            "a refresh never shortens the record"
        );
        let restart = advertised(Some(&again), "http://c", 8, 100, &at(60));
        assert_eq!(restart.epoch, 2);
    }

    #[test]
    fn a_withdrawn_incarnation_is_spent_and_a_new_one_takes_the_next_epoch() {
        let first = advertised(None, "http://a", 7, 100, &at(10));
        let gone = withdrawn(Some(&first), 1).unwrap();
        assert!(!gone.is_live(&at(11)));
        assert_eq!(advertised(Some(&gone), "http://a", 7, 100, &at(12)), gone);
        assert_eq!(
            advertised(Some(&gone), "http://a", 8, 100, &at(12)).epoch,
            2
        );
        assert_eq!(withdrawn(Some(&gone), 1), None, "withdrawn once");
    }

    #[test]
    fn only_a_live_record_of_its_epoch_is_renewed_and_withdrawn() {
        let first = advertised(None, "http://a", 7, 100, &at(10));
        assert_eq!(
            renewed(Some(&first), 1, 100, &at(60))
                .unwrap()
                .expires_at_ms,
            160
        );
        assert_eq!(renewed(Some(&first), 2, 100, &at(60)), None);
        assert_eq!(renewed(Some(&first), 1, 100, &at(110)), None, "it ran out");
        assert_eq!(withdrawn(Some(&first), 2), None);
        let other_boot = StoreTime {
            now_ms: 20,
            boot_id: "boot-2".into(),
        };
        assert!(!first.is_live(&other_boot), "a row of another boot is dead");
        assert_eq!(renewed(Some(&first), 1, 100, &other_boot), None);
    }
}
