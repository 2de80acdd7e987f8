//! `PostgresLeaseStore`: the lease store of a fleet of hosts, one row per key in one PostgreSQL
//! table (feature `postgres`).
//!
//! Every operation is one statement (an `acquire` that is refused reads the holder with a second
//! one, only to name it). Expiry is judged by the database server's clock alone
//! (`clock_timestamp()`); the client's clock never enters a statement. Rows are never deleted,
//! so an epoch is never reused, also not after a forget.
//!
//! ```text
//! acquire         INSERT … ON CONFLICT (key) DO UPDATE … WHERE released OR expired RETURNING …
//! renew           UPDATE … WHERE live(owner, epoch)                     RETURNING …
//! renew_many      UPDATE … FROM unnest($keys, $epochs) WHERE live(…)     RETURNING key, epoch
//! release         UPDATE … SET released WHERE live(owner, epoch)
//! publish_head    UPDATE … SET head WHERE live(owner, epoch) AND epoch > floor AND head.epoch = epoch
//! mark_forgotten  UPDATE … SET floor = epoch, head = NULL WHERE live(owner, epoch)
//! ```
//!
//! A connection that cannot be had, is refused or is lost gives [`StoreError::Unavailable`]: the
//! lease is then unknown, never held. Every call also has a deadline
//! ([`PgOptions::op_timeout`], [`StoreError::Timeout`]) and the server aborts a statement that
//! outlives it (`statement_timeout`). See `docs/operations.md` for the table, the privileges and
//! the clock.
//!
//! The statements and the conversions of values live in `postgres/sql.rs`, the mapping of driver
//! and pool errors in `postgres/errors.rs`.

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio_postgres::{NoTls, Row};

use crate::clock::duration_ms;
use crate::durable::StoreError;
use crate::error::Error;
use crate::ids::LeaseKey;
use crate::layout::ImageRef;
use crate::lease::{LeaseError, LeaseRecord, LeaseStore, RenewOutcome};

mod errors;
mod sql;

use errors::{not_held, pg_error, pool_error};
use sql::{COLUMNS, Statements, get, record, to_i64, ttl_param};

/// The table used when the operator names none.
pub const DEFAULT_TABLE: &str = "leasehold_leases";

/// Pool size, timeouts and deadlines of a [`PostgresLeaseStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// Connections kept open at most (per store, so per replica).
    pub pool_size: usize,
    /// How long opening one connection (TCP, startup, authentication) may take.
    pub connect_timeout: Duration,
    /// How long a call may wait for a free connection of the pool.
    pub wait_timeout: Duration,
    /// The deadline of one whole call, waiting for a connection included. The server aborts a
    /// statement running longer (`statement_timeout`).
    pub op_timeout: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            pool_size: 4,
            connect_timeout: Duration::from_secs(3),
            wait_timeout: Duration::from_secs(3),
            op_timeout: Duration::from_secs(5),
        }
    }
}

impl PgOptions {
    /// Refuses sizes and durations that cannot work.
    fn check(&self) -> Result<(), Error> {
        let bad = |name, reason: &str| {
            Err(Error::InvalidOption {
                name,
                reason: reason.to_string(),
            })
        };
        if self.pool_size == 0 {
            return bad("pool_size", "must be at least 1");
        }
        if self.connect_timeout.is_zero() || self.wait_timeout.is_zero() {
            return bad(
                "connect_timeout",
                "connect and wait timeouts must be above zero",
            );
        }
        if duration_ms(self.op_timeout) == 0 {
            return bad("op_timeout", "must be at least 1 ms");
        }
        Ok(())
    }
}

/// Checks a table name: `[a-z_][a-z0-9_]{0,62}` (a PostgreSQL identifier that needs no quoting
/// and fits its 63-byte limit).
pub fn check_table_name(table: &str) -> Result<(), Error> {
    let mut bytes = table.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_');
    let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if first_ok && rest_ok && table.len() <= 63 {
        Ok(())
    } else {
        Err(Error::InvalidOption {
            name: "table",
            reason: format!("{table:?} is not a table name of the form [a-z_][a-z0-9_]{{0,62}}"),
        })
    }
}

/// The `CREATE TABLE IF NOT EXISTS` statement of the lease table `table`, for operators who
/// create the table beforehand so that replicas need no `CREATE` privilege.
pub fn create_table_sql(table: &str) -> Result<String, Error> {
    check_table_name(table)?;
    Ok(Statements::new(table).create)
}

/// The lease store of a fleet of hosts: one row per lease key in a PostgreSQL table.
///
/// Clones share one connection pool.
#[derive(Clone)]
pub struct PostgresLeaseStore {
    /// The connection pool.
    pool: Pool,
    /// The table's name (validated; no quoting needed, quoted anyway).
    table: String,
    /// The statements, with the table name filled in.
    sql: Statements,
    /// Pool size and deadlines.
    opts: PgOptions,
}

impl fmt::Debug for PostgresLeaseStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.pool.status();
        f.debug_struct("PostgresLeaseStore")
            .field("table", &self.table)
            .field("pool_size", &status.size)
            .field("pool_available", &status.available)
            .field("opts", &self.opts)
            .finish()
    }
}

impl PostgresLeaseStore {
    /// Connects to the server at `url` (`postgres://user[:password]@host:port/db`), creates the
    /// lease table `table` if it is absent, and checks that it has the expected columns.
    ///
    /// A bad table name or URL is [`Error::InvalidOption`]; a server that cannot be reached is
    /// [`Error::Store`] with [`StoreError::Unavailable`].
    pub async fn connect(url: &str, table: &str) -> Result<Self, Error> {
        Self::connect_with(url, table, PgOptions::default()).await
    }

    /// [`PostgresLeaseStore::connect`] with explicit pool size and deadlines.
    pub async fn connect_with(url: &str, table: &str, opts: PgOptions) -> Result<Self, Error> {
        check_table_name(table)?;
        opts.check()?;
        let pool = build_pool(url, &opts)?;
        let store = Self {
            pool,
            table: table.to_string(),
            sql: Statements::new(table),
            opts,
        };
        store.migrate().await?;
        Ok(store)
    }

    /// The table this store keeps its leases in.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Creates the table if it is absent (under an advisory lock, so replicas starting together
    /// do not race on the catalog), then checks its shape with a query that reads no row.
    async fn migrate(&self) -> Result<(), Error> {
        let shape_check = format!("SELECT {COLUMNS} FROM \"{}\" AS l LIMIT 0", self.table);
        let lock_name = format!("leasehold.migrate.{}", self.table);
        let quoted = format!("\"{}\"", self.table);
        let db = |e: tokio_postgres::Error| pg_error("migrate", &e);
        let migrated = self.bounded("migrate", async {
            let mut client = self
                .pool
                .get()
                .await
                .map_err(|e| pool_error("migrate", e))?;
            let tx = client.transaction().await.map_err(db)?;
            let lock = "SELECT pg_advisory_xact_lock(hashtext($1))";
            tx.execute(lock, &[&lock_name]).await.map_err(db)?;
            let exists = "SELECT to_regclass($1) IS NOT NULL";
            let row = tx.query_one(exists, &[&quoted]).await.map_err(db)?;
            if !row.try_get::<_, bool>(0).map_err(db)? {
                tx.batch_execute(&self.sql.create).await.map_err(db)?;
            }
            tx.commit().await.map_err(db)?;
            client.query(&shape_check, &[]).await.map_err(db)
        });
        match migrated.await {
            Ok(_) => Ok(()),
            Err(StoreError::Backend { message, .. }) => Err(Error::InvalidOption {
                name: "table",
                reason: format!(
                    "{:?} cannot serve as the lease table: {message}",
                    self.table
                ),
            }),
            Err(other) => Err(Error::from(other)),
        }
    }

    /// Runs `fut` within [`PgOptions::op_timeout`]; running out is [`StoreError::Timeout`].
    async fn bounded<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.opts.op_timeout, fut).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Timeout {
                op,
                after_ms: duration_ms(self.opts.op_timeout),
            }),
        }
    }

    /// Runs one statement on a pooled connection and returns its rows, within the deadline.
    async fn rows(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        self.bounded(op, async {
            let db = |e: tokio_postgres::Error| pg_error(op, &e);
            let client = self.pool.get().await.map_err(|e| pool_error(op, e))?;
            let stmt = client.prepare_cached(sql).await.map_err(db)?;
            client.query(&stmt, params).await.map_err(db)
        })
        .await
    }

    /// Runs a compare-and-set statement on `(key, owner, epoch)`: its one returned row is the new
    /// record; no row means the lease is not live for that tenure.
    async fn compare_and_set(
        &self,
        op: &'static str,
        sql: &str,
        tenure: (&LeaseKey, &str, u64),
        extra: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<LeaseRecord, LeaseError> {
        let (key, owner, epoch) = tenure;
        let epoch_i = to_i64(op, epoch)?;
        let key_str = key.as_str();
        let mut params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            vec![&key_str, &owner, &epoch_i];
        params.extend_from_slice(extra);
        let rows = self.rows(op, sql, &params).await?;
        match rows.first() {
            Some(row) => Ok(record(op, row)?),
            None => Err(not_held(key, owner, epoch)),
        }
    }
}

/// Builds the pool: the URL's settings plus connect timeout, keepalives, an application name
/// and a `statement_timeout` equal to the call deadline.
fn build_pool(url: &str, opts: &PgOptions) -> Result<Pool, Error> {
    let mut cfg = tokio_postgres::Config::from_str(url).map_err(|e| Error::InvalidOption {
        name: "url",
        // The URL may hold a password: name the problem, never echo the URL.
        reason: format!("not a PostgreSQL connection URL: {e}"),
    })?;
    cfg.connect_timeout(opts.connect_timeout).keepalives(true);
    if cfg.get_application_name().is_none() {
        cfg.application_name("leasehold");
    }
    let timeout = format!("-c statement_timeout={}", duration_ms(opts.op_timeout));
    let options = match cfg.get_options() {
        Some(given) => format!("{given} {timeout}"),
        None => timeout,
    };
    cfg.options(options);
    let manager_config = ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    let manager = Manager::from_config(cfg, NoTls, manager_config);
    Pool::builder(manager)
        .max_size(opts.pool_size)
        .wait_timeout(Some(opts.wait_timeout))
        .create_timeout(Some(opts.connect_timeout))
        .recycle_timeout(Some(opts.connect_timeout))
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|e| Error::InvalidOption {
            name: "url",
            reason: format!("cannot build the connection pool: {e}"),
        })
}

#[async_trait]
impl LeaseStore for PostgresLeaseStore {
    async fn read(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        let rows = self.rows("read", &self.sql.read, &[&key.as_str()]).await?;
        match rows.first() {
            Some(row) => Ok(Some(record("read", row)?)),
            None => Ok(None),
        }
    }

    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
        _attempt: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        let ttl_ms = ttl_param(ttl);
        let rows = self
            .rows(
                "acquire",
                &self.sql.acquire,
                &[&key.as_str(), &owner, &ttl_ms],
            )
            .await?;
        if let Some(row) = rows.first() {
            return Ok(record("acquire", row)?);
        }
        // Refused: the row exists and is live. Read it only to name the holder.
        match self.read(key).await? {
            Some(holder) => Err(LeaseError::Held {
                key: key.to_string(),
                owner: holder.owner,
                epoch: holder.epoch,
            }),
            None => Err(StoreError::Backend {
                op: "acquire",
                message: format!("lease {key} was refused but has no row"),
            }
            .into()),
        }
    }

    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        let ttl_ms = ttl_param(ttl);
        self.compare_and_set("renew", &self.sql.renew, (key, owner, epoch), &[&ttl_ms])
            .await
    }

    async fn renew_many(
        &self,
        owner: &str,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<&str> = leases.iter().map(|(k, _)| k.as_str()).collect();
        let epochs = leases
            .iter()
            .map(|(_, e)| to_i64("renew_many", *e))
            .collect::<Result<Vec<i64>, _>>()?;
        let ttl_ms = ttl_param(ttl);
        let rows = self
            .rows(
                "renew_many",
                &self.sql.renew_many,
                &[&keys, &epochs, &ttl_ms, &owner],
            )
            .await?;
        let renewed = rows
            .iter()
            .map(|row| {
                Ok((
                    get::<String>("renew_many", row, 0)?,
                    get::<i64>("renew_many", row, 1)?,
                ))
            })
            .collect::<Result<HashSet<(String, i64)>, StoreError>>()?;
        Ok(keys
            .iter()
            .zip(&epochs)
            .map(|(k, e)| {
                if renewed.contains(&(k.to_string(), *e)) {
                    RenewOutcome::Renewed
                } else {
                    RenewOutcome::Lost
                }
            })
            .collect())
    }

    async fn release(&self, key: &LeaseKey, owner: &str, epoch: u64) -> Result<(), LeaseError> {
        let epoch_i = to_i64("release", epoch)?;
        let rows = self
            .rows(
                "release",
                &self.sql.release,
                &[&key.as_str(), &owner, &epoch_i],
            )
            .await?;
        if rows.is_empty() {
            Err(not_held(key, owner, epoch))
        } else {
            Ok(())
        }
    }

    async fn publish_head(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        image: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError> {
        if image.epoch != epoch {
            return Err(not_held(key, owner, epoch));
        }
        let head_epoch = to_i64("publish_head", image.epoch)?;
        let head_seq = to_i64("publish_head", image.seq)?;
        let extra: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&head_epoch, &head_seq, &image.sha256];
        self.compare_and_set(
            "publish_head",
            &self.sql.publish_head,
            (key, owner, epoch),
            &extra,
        )
        .await
    }

    async fn mark_forgotten(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        let sql = &self.sql.mark_forgotten;
        self.compare_and_set("mark_forgotten", sql, (key, owner, epoch), &[])
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_plain_lowercase_identifiers() {
        for good in ["leases", "_x", "a1_b2", &"a".repeat(63)] {
            assert_eq!(check_table_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "1abc",
            "Leases",
            "a-b",
            "a.b",
            "a;drop",
            "a\"b",
            &"a".repeat(64),
        ] {
            assert!(
                matches!(
                    check_table_name(bad),
                    Err(Error::InvalidOption { name: "table", .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn options_that_cannot_work_are_refused() {
        let zero_pool = PgOptions {
            pool_size: 0,
            ..PgOptions::default()
        };
        assert!(zero_pool.check().is_err());
        let zero_deadline = PgOptions {
            op_timeout: Duration::from_micros(10),
            ..PgOptions::default()
        };
        assert!(zero_deadline.check().is_err());
        assert_eq!(PgOptions::default().check(), Ok(()));
    }
}
