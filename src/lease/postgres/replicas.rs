//! The replica records of the PostgreSQL lease store (`lease/replica.rs`): one row per replica
//! in the **lease table itself**, under the key `replica:<id>` (a key no tenant can have: a
//! tenant's is `<org>/<tenant>` of `[A-Za-z0-9_-]`), with the column `endpoint`.
//!
//! ```text
//! key = 'replica:<id>'  owner = <id>  epoch  expires_at  released (= withdrawn)
//!                       attempt (= incarnation)  endpoint
//! ```
//!
//! Why in the lease table rather than a table beside it: a record is a lease of the replica on
//! its own name, live by the same rule (`NOT released AND expires_at > clock_timestamp()`), so
//!
//! - renewing it folds into `renew_many`'s one `UPDATE … FROM unnest(…)` (its key and epoch
//!   added to the arrays): the lease actor's tick stays one round trip;
//! - `lookup` is one statement, a self-join of the tenant's row with its owner's record, both
//!   judged at one reading of the server's clock;
//! - an existing table upgrades with one more `ADD COLUMN IF NOT EXISTS endpoint`, and a
//!   replica role granted `SELECT, INSERT, UPDATE` on the lease table needs no new grant.
//!
//! Every statement is safe to land late or twice: an advertise of the same incarnation
//! refreshes (a withdrawn one is spent and changes nothing), a renewal or withdrawal names the
//! epoch.

use std::collections::HashSet;
use std::time::Duration;

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use super::PostgresLeaseStore;
use super::sql::{COLUMNS, attempt_param, get, record, to_i64, ttl_param};
use crate::durable::StoreError;
use crate::ids::LeaseKey;
use crate::lease::{LeaseError, Lookup, RenewOutcome, ReplicaRecord, ReplicaRenewal, ReplicaView};

/// The key of replica `id`'s record in the lease table.
pub(super) fn record_key(id: &str) -> String {
    format!("replica:{id}")
}

/// The statements of replica records, built once with the table name.
#[derive(Debug, Clone)]
pub(super) struct ReplicaStatements {
    /// Take or refresh a record: `$1` key, `$2` id, `$3` ttl ms, `$4` incarnation, `$5`
    /// endpoint.
    pub(super) advertise: String,
    /// The record of key `$1`, unchanged.
    pub(super) read: String,
    /// Withdraw the record `$1` of `$2` at epoch `$3`.
    pub(super) withdraw: String,
    /// The lease of `$1`, how long it still runs, and its owner's record.
    pub(super) lookup: String,
    /// Every live record.
    pub(super) live: String,
}

impl ReplicaStatements {
    /// The statements of the lease table `table`.
    pub(super) fn new(table: &str) -> Self {
        let t = format!("\"{table}\"");
        let until = "clock_timestamp() + $3::float8 * interval '1 millisecond'";
        let same = "l.attempt IS NOT DISTINCT FROM excluded.attempt";
        let record = "l.owner, l.endpoint, l.epoch, \
            floor(extract(epoch FROM l.expires_at) * 1000)::int8, l.released";
        Self {
            advertise: format!(
                "INSERT INTO {t} AS l (key, owner, epoch, expires_at, released, floor, attempt, endpoint)
                 VALUES ($1, $2, 1, {until}, false, 0, $4, $5)
                 ON CONFLICT (key) DO UPDATE
                    SET epoch = CASE WHEN {same} THEN l.epoch ELSE l.epoch + 1 END,
                        expires_at = CASE WHEN {same} AND NOT l.released
                                     THEN greatest(l.expires_at, {until}) ELSE {until} END,
                        owner = excluded.owner, endpoint = excluded.endpoint,
                        attempt = excluded.attempt, released = false
                    WHERE NOT (l.released AND {same})
                 RETURNING {record}"
            ),
            read: format!("SELECT {record} FROM {t} AS l WHERE l.key = $1"),
            withdraw: format!(
                "UPDATE {t} AS l SET released = true
                 WHERE l.key = $1 AND l.owner = $2 AND l.epoch = $3 AND NOT l.released"
            ),
            lookup: format!(
                "WITH now AS (SELECT clock_timestamp() AS t)
                 SELECT {COLUMNS},
                    CASE WHEN NOT l.released AND l.expires_at > now.t
                         THEN greatest(1, ceil(extract(epoch FROM l.expires_at - now.t) * 1000))::int8
                         ELSE 0::int8 END,
                    r.endpoint, r.epoch,
                    (r.key IS NOT NULL AND NOT r.released AND r.expires_at > now.t)
                 FROM {t} AS l CROSS JOIN now
                 LEFT JOIN {t} AS r ON r.key = 'replica:' || l.owner AND r.endpoint IS NOT NULL
                 WHERE l.key = $1"
            ),
            live: format!(
                "SELECT l.owner, l.endpoint, l.epoch FROM {t} AS l
                 WHERE l.endpoint IS NOT NULL AND l.key LIKE 'replica:%'
                   AND NOT l.released AND l.expires_at > clock_timestamp()
                 ORDER BY l.owner"
            ),
        }
    }
}

/// A row of the advertise or read statement as a record.
fn replica_record(op: &'static str, row: &Row) -> Result<ReplicaRecord, StoreError> {
    Ok(ReplicaRecord {
        id: get(op, row, 0)?,
        endpoint: get::<Option<String>>(op, row, 1)?.unwrap_or_default(),
        epoch: non_negative(op, get(op, row, 2)?)?,
        expires_at_ms: non_negative(op, get(op, row, 3)?)?,
        withdrawn: get(op, row, 4)?,
    })
}

fn non_negative(op: &'static str, n: i64) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| StoreError::Backend {
        op,
        message: format!("negative value {n} in the lease table"),
    })
}

impl PostgresLeaseStore {
    /// [`LeaseStore::advertise`](crate::lease::LeaseStore::advertise): one statement, and a read
    /// only when the incarnation is spent (to return the record unchanged).
    pub(super) async fn advertise_record(
        &self,
        replica: &str,
        endpoint: &str,
        incarnation: u64,
        ttl: Duration,
    ) -> Result<ReplicaRecord, LeaseError> {
        let op = "advertise";
        let (key, ttl_ms, inc) = (
            record_key(replica),
            ttl_param(ttl),
            attempt_param(incarnation),
        );
        let params: [&(dyn ToSql + Sync); 5] = [&key, &replica, &ttl_ms, &inc, &endpoint];
        let rows = self.rows(op, &self.replica_sql.advertise, &params).await?;
        let rows = match rows.is_empty() {
            true => self.rows(op, &self.replica_sql.read, &[&key]).await?,
            false => rows,
        };
        let row = rows.first().ok_or_else(|| StoreError::Backend {
            op,
            message: format!("the record of {replica} was refused but has no row"),
        })?;
        Ok(replica_record(op, row)?)
    }

    /// [`LeaseStore::renew_replica`](crate::lease::LeaseStore::renew_replica): `renew_many`'s
    /// one statement, with the record's key and epoch added to its arrays.
    pub(super) async fn renew_record(
        &self,
        replica: &str,
        epoch: u64,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<ReplicaRenewal, LeaseError> {
        let own = record_key(replica);
        let mut keys: Vec<&str> = leases.iter().map(|(k, _)| k.as_str()).collect();
        keys.push(&own);
        let mut asked = leases.iter().map(|(_, e)| *e).collect::<Vec<_>>();
        asked.push(epoch);
        let mut outcomes = self.renew_keys(replica, &keys, &asked, ttl).await?;
        let record = outcomes.pop().unwrap_or(RenewOutcome::Lost);
        Ok(ReplicaRenewal {
            record,
            leases: outcomes,
        })
    }

    /// `renew_many`'s statement for `keys` at `epochs` of `owner`: what became of each, in
    /// order.
    pub(super) async fn renew_keys(
        &self,
        owner: &str,
        keys: &[&str],
        epochs: &[u64],
        ttl: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError> {
        let op = "renew_many";
        let epochs = epochs
            .iter()
            .map(|e| to_i64(op, *e))
            .collect::<Result<Vec<i64>, _>>()?;
        let ttl_ms = ttl_param(ttl);
        let sql = &self.sql.renew_many;
        let rows = self
            .rows(op, sql, &[&keys, &epochs, &ttl_ms, &owner])
            .await?;
        let renewed = rows
            .iter()
            .map(|row| Ok((get::<String>(op, row, 0)?, get::<i64>(op, row, 1)?)))
            .collect::<Result<HashSet<(String, i64)>, StoreError>>()?;
        Ok(keys
            .iter()
            .zip(&epochs)
            .map(|(k, e)| match renewed.contains(&(k.to_string(), *e)) {
                true => RenewOutcome::Renewed,
                false => RenewOutcome::Lost,
            })
            .collect())
    }

    /// [`LeaseStore::withdraw`](crate::lease::LeaseStore::withdraw).
    pub(super) async fn withdraw_record(
        &self,
        replica: &str,
        epoch: u64,
    ) -> Result<(), LeaseError> {
        let op = "withdraw";
        let (key, epoch) = (record_key(replica), to_i64(op, epoch)?);
        let sql = &self.replica_sql.withdraw;
        self.rows(op, sql, &[&key, &replica, &epoch]).await?;
        Ok(())
    }

    /// [`LeaseStore::lookup`](crate::lease::LeaseStore::lookup): one statement.
    pub(super) async fn lookup_key(&self, key: &LeaseKey) -> Result<Lookup, LeaseError> {
        let op = "lookup";
        let rows = self
            .rows(op, &self.replica_sql.lookup, &[&key.as_str()])
            .await?;
        let Some(row) = rows.first() else {
            return Ok(Lookup::vacant());
        };
        let lease = record(op, row)?;
        let left = non_negative(op, get(op, row, 11)?)?;
        let endpoint: Option<String> = get(op, row, 12)?;
        let holder = match endpoint {
            Some(endpoint) => Some(ReplicaView {
                id: lease.owner.clone(),
                endpoint,
                epoch: non_negative(op, get(op, row, 13)?)?,
                live: get(op, row, 14)?,
            }),
            None => None,
        };
        Ok(Lookup {
            record: Some(lease),
            lease_left_ms: left,
            holder,
        })
    }

    /// [`LeaseStore::live_replicas`](crate::lease::LeaseStore::live_replicas).
    pub(super) async fn live_records(&self) -> Result<Vec<ReplicaView>, LeaseError> {
        let op = "live_replicas";
        let rows = self.rows(op, &self.replica_sql.live, &[]).await?;
        rows.iter()
            .map(|row| {
                Ok(ReplicaView {
                    id: get(op, row, 0)?,
                    endpoint: get(op, row, 1)?,
                    epoch: non_negative(op, get(op, row, 2)?)?,
                    live: true,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()
            .map_err(LeaseError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_statements_judge_by_the_server_clock_and_name_the_epoch() {
        let s = ReplicaStatements::new("my_leases");
        for sql in [&s.advertise, &s.lookup, &s.live] {
            assert!(sql.contains("\"my_leases\""), "{sql}");
            assert!(sql.contains("clock_timestamp()"), "{sql}");
            assert!(!sql.contains("now()"), "{sql}");
        }
        assert!(s.withdraw.contains("l.epoch = $3"));
        assert!(
            s.advertise.contains("WHERE NOT (l.released AND"),
            "a withdrawn incarnation is spent"
        );
        assert!(s.lookup.contains("WITH now AS"), "one reading of the clock");
        assert_eq!(record_key("r1"), "replica:r1");
    }
}
