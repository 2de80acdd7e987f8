//! `PostgresLeaseStore`: the lease store of a fleet of hosts, one row per key in one PostgreSQL
//! table (feature `postgres`).
//!
//! Every operation is one statement (an `acquire` that is refused reads the holder with a second
//! one, only to name it, under the same deadline). Expiry is judged by the database server's
//! clock alone (`clock_timestamp()`); the client's clock never enters a statement. Rows are never
//! deleted, so an epoch is never reused, also not after a forget.
//!
//! ```text
//! acquire         INSERT … ON CONFLICT (key) DO UPDATE … WHERE released OR expired
//!                                          OR mine(owner, attempt) RETURNING …
//! renew           UPDATE … WHERE live(owner, epoch)                     RETURNING …
//! renew_many      UPDATE … FROM unnest($keys, $epochs) WHERE live(…)     RETURNING key, epoch
//! release         UPDATE … SET released WHERE live(owner, epoch)
//! publish_head    UPDATE … SET head = CASE forward THEN image ELSE head
//!                 WHERE live(owner, epoch) AND epoch > floor AND image.epoch = epoch
//! move_tip        UPDATE … SET tip = CASE tip = from THEN to ELSE tip
//!                 WHERE live(owner, epoch) AND epoch > floor             RETURNING …
//! move_tips       the same, for many keys: UPDATE … FROM unnest($keys, $owners, …) AS m
//!                 (one statement per round of distinct keys: postgres/tips.rs)
//! mark_forgotten  UPDATE … SET floor = epoch, head = NULL, tip = NULL,
//!                 forgotten_at = clock_timestamp(), erasure_floor = epoch WHERE live(owner, epoch)
//! erasures_due    SELECT key, erasure_floor … WHERE forgotten_at <= clock_timestamp() - settle
//! erasure_done    UPDATE … SET erasure_floor = NULL WHERE key AND erasure_floor = floor
//! ```
//!
//! **Late landings** (docs/guarantees.md). `statement_timeout` starts when the server *reads* a
//! statement, so a statement the client gave up on can still run later. Every statement is safe
//! to run late or twice: the head only moves forward (a stale image leaves it and is reported
//! [`LeaseError::Stale`]), the tip moves only from the tip the caller saw (a late move finds it
//! elsewhere: [`LeaseError::TipMoved`]), a repeated forget or renew of the live tenure changes nothing more, and
//! an acquire records its attempt id so that a retry of the same attempt gets its lease back.
//!
//! **No dead connection is reused.** A call that times out or fails discards its connection
//! instead of returning it to the pool (its statement may still be in flight on a flow that went
//! silent), and the socket itself is bounded: keepalives and `tcp_user_timeout` make the kernel
//! give up on a silent peer within about [`PgOptions::op_timeout`] plus
//! [`PgOptions::connect_timeout`].
//!
//! A connection that cannot be had, is refused or is lost gives [`StoreError::Unavailable`]: the
//! lease is then unknown, never held. Every call also has a deadline
//! ([`PgOptions::op_timeout`], [`StoreError::Timeout`]) and the server aborts a statement that
//! outlives it (`statement_timeout`). A login the server refuses is [`Error::AuthFailed`] or
//! [`Error::UnknownDatabase`]. See `docs/operations.md` for the table, the privileges and the
//! clock.
//!
//! The statements and the conversions of values live in `postgres/sql.rs`, the mapping of driver
//! and pool errors in `postgres/errors.rs`, the pool, its socket bounds and the discarding of
//! connections in `postgres/pool.rs`.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::Pool;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::clock::duration_ms;
use crate::durable::StoreError;
use crate::error::Error;
use crate::ids::LeaseKey;
use crate::layout::{ImageRef, LogPos};
use crate::lease::{
    LeaseError, LeaseRecord, LeaseStore, Lookup, RenewOutcome, ReplicaRecord, ReplicaRenewal,
    ReplicaView, TipMove, TipOutcomes,
};

mod errors;
mod listing;
mod migrate;
mod pool;
mod replicas;
mod sql;
mod tips;
pub mod tls;

use crate::io_runtime::IoRuntime;
use errors::{Login, not_held, pool_error};
use pool::{Checkout, build_pool, get_on};
use sql::{Statements, attempt_param, get, record, to_i64, ttl_param};

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

/// The statement that brings a lease table made by an older build up to date: it adds the
/// `attempt` column, the log tip's `tip_epoch` and `tip_seq`, the pending erasure's
/// `forgotten_at` and `erasure_floor`, and the replica records' `endpoint`
/// (`ALTER TABLE … ADD COLUMN IF NOT EXISTS …`; running it twice is harmless).
/// [`PostgresLeaseStore::connect`] runs it itself when its role owns the table; a replica role
/// with only `SELECT, INSERT, UPDATE` needs an operator to run it first.
pub fn upgrade_table_sql(table: &str) -> Result<String, Error> {
    check_table_name(table)?;
    Ok(Statements::new(table).add_columns)
}

/// [`upgrade_table_sql`], under the name it had when it added only the `attempt` column.
pub fn add_attempt_column_sql(table: &str) -> Result<String, Error> {
    upgrade_table_sql(table)
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
    /// The statements of replica records (rows of the same table, `postgres/replicas.rs`).
    replica_sql: replicas::ReplicaStatements,
    /// Pool size and deadlines.
    opts: PgOptions,
    /// The user and database of the URL, to name them when the server refuses the login.
    login: Login,
    /// The thread every connection is opened on, so that its I/O runs whatever runtime a call
    /// comes from (`src/io_runtime.rs`).
    io: IoRuntime,
}

impl fmt::Debug for PostgresLeaseStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.pool.status();
        f.debug_struct("PostgresLeaseStore")
            .field("table", &self.table)
            .field("pool_size", &status.size)
            .field("pool_available", &status.available)
            .field("opts", &self.opts)
            .field("login", &self.login)
            .finish()
    }
}

impl PostgresLeaseStore {
    /// Connects to the server at `url` (`postgres://user[:password]@host:port/db`), creates the
    /// lease table `table` if it is absent, and checks that it has the expected columns.
    ///
    /// A bad table name or URL is [`Error::InvalidOption`]; a server that cannot be reached is
    /// [`Error::Store`] with [`StoreError::Unavailable`]; refused credentials are
    /// [`Error::AuthFailed`] and a database that does not exist [`Error::UnknownDatabase`].
    pub async fn connect(url: &str, table: &str) -> Result<Self, Error> {
        Self::connect_with(url, table, PgOptions::default()).await
    }

    /// [`PostgresLeaseStore::connect`] with explicit pool size and deadlines.
    pub async fn connect_with(url: &str, table: &str, opts: PgOptions) -> Result<Self, Error> {
        Self::connect_as(url, table, opts, true).await
    }

    /// Connects to an **existing** lease table, as an operator command does: a table that is
    /// absent is [`Error::StoreMissing`] and one made by an older build (without the columns
    /// [`upgrade_table_sql`] adds) is [`Error::InvalidOption`] (`table`); neither is created nor
    /// changed.
    pub async fn connect_existing(url: &str, table: &str, opts: PgOptions) -> Result<Self, Error> {
        Self::connect_as(url, table, opts, false).await
    }

    async fn connect_as(
        url: &str,
        table: &str,
        opts: PgOptions,
        create: bool,
    ) -> Result<Self, Error> {
        check_table_name(table)?;
        opts.check()?;
        let (pool, login) = build_pool(url, &opts)?;
        let store = Self {
            pool,
            table: table.to_string(),
            sql: Statements::new(table),
            replica_sql: replicas::ReplicaStatements::new(table),
            opts,
            login,
            io: IoRuntime::start("postgres")?,
        };
        store.migrate(create).await?;
        Ok(store)
    }

    /// The URL's `sslmode`: whether the connections are encrypted, and what is checked of the
    /// server's certificate (docs/operations.md, "TLS").
    pub fn sslmode(&self) -> tls::SslMode {
        self.login.sslmode
    }

    /// The table this store keeps its leases in.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Closes every idle connection of the pool (testkit): the next call opens a new one.
    #[cfg(feature = "testkit")]
    pub fn drop_idle_connections(&self) {
        self.pool.retain(|_, _| false);
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

    /// A pooled connection, discarded unless the call [keeps](Checkout::keep) it.
    async fn checkout(&self, op: &'static str) -> Result<Checkout, StoreError> {
        let client = get_on(&self.io, &self.pool)
            .await
            .map_err(|e| pool_error(op, e))?;
        Ok(Checkout::new(client))
    }

    /// Runs one statement on a pooled connection and returns its rows, within the deadline.
    async fn rows(
        &self,
        op: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, StoreError> {
        self.bounded(op, async {
            let mut lease = self.checkout(op).await?;
            let rows = lease.query(op, sql, params).await?;
            lease.keep();
            Ok(rows)
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
        extra: &[&(dyn ToSql + Sync)],
    ) -> Result<LeaseRecord, LeaseError> {
        let (key, owner, epoch) = tenure;
        let epoch_i = to_i64(op, epoch)?;
        let key_str = key.as_str();
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&key_str, &owner, &epoch_i];
        params.extend_from_slice(extra);
        let rows = self.rows(op, sql, &params).await?;
        match rows.first() {
            Some(row) => Ok(record(op, row)?),
            None => Err(not_held(key, owner, epoch)),
        }
    }
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
        attempt: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        let (op, key_str) = ("acquire", key.as_str());
        let (ttl_ms, attempt_i) = (ttl_param(ttl), attempt_param(attempt));
        // One deadline for the whole operation: the take and, if refused, the read that names
        // the holder.
        let (taken, holder) = self
            .bounded(op, async {
                let mut lease = self.checkout(op).await?;
                let params: [&(dyn ToSql + Sync); 4] = [&key_str, &owner, &ttl_ms, &attempt_i];
                let taken = lease.query(op, &self.sql.acquire, &params).await?;
                let holder = match taken.is_empty() {
                    true => lease.query(op, &self.sql.read, &[&key_str]).await?,
                    false => Vec::new(),
                };
                lease.keep();
                Ok((taken, holder))
            })
            .await?;
        if let Some(row) = taken.first() {
            return Ok(record(op, row)?);
        }
        match holder.first().map(|row| record(op, row)).transpose()? {
            Some(holder) => Err(LeaseError::Held {
                key: key.to_string(),
                owner: holder.owner,
                epoch: holder.epoch,
            }),
            None => Err(StoreError::Backend {
                op,
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
        let epochs: Vec<u64> = leases.iter().map(|(_, e)| *e).collect();
        self.renew_keys(owner, &keys, &epochs, ttl).await
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
        let extra: [&(dyn ToSql + Sync); 3] = [&head_epoch, &head_seq, &image.sha256];
        let tenure = (key, owner, epoch);
        let sql = &self.sql.publish_head;
        let after = self
            .compare_and_set("publish_head", sql, tenure, &extra)
            .await?;
        // The statement keeps a head that is at or past `image`; it moved (or already was
        // `image`, a retry) exactly when the head is now `image`.
        match after.head.clone() {
            Some(head) if head == *image => Ok(after),
            Some(head) => Err(LeaseError::Stale {
                key: key.to_string(),
                head,
                image: image.clone(),
            }),
            None => Err(StoreError::Backend {
                op: "publish_head",
                message: format!("lease {key} has no head after a publish"),
            }
            .into()),
        }
    }

    async fn move_tip(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        from: Option<LogPos>,
        to: LogPos,
    ) -> Result<LeaseRecord, LeaseError> {
        tips::move_tip(self, (key, owner, epoch), from, to).await
    }

    fn batches_tip_moves(&self) -> bool {
        true
    }

    async fn move_tips(&self, moves: &[TipMove]) -> Result<TipOutcomes, LeaseError> {
        tips::move_tips(self, moves).await
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

    async fn erasures_due(
        &self,
        settled_for: Duration,
        limit: usize,
    ) -> Result<Vec<crate::lease::PendingErasure>, LeaseError> {
        let op = "erasures_due";
        let (settle_ms, limit) = (ttl_param(settled_for), to_i64(op, limit as u64)?);
        let rows = self
            .rows(op, &self.sql.erasures_due, &[&settle_ms, &limit])
            .await?;
        rows.iter()
            .map(|row| {
                let key = LeaseKey::parse(&get::<String>(op, row, 0)?).map_err(|e| {
                    StoreError::Backend {
                        op,
                        message: format!("a key in the lease table does not parse: {e}"),
                    }
                })?;
                let floor = u64::try_from(get::<i64>(op, row, 1)?).unwrap_or(0);
                Ok(crate::lease::PendingErasure { key, floor })
            })
            .collect()
    }

    async fn erasure_done(&self, key: &LeaseKey, floor: u64) -> Result<(), LeaseError> {
        let floor = to_i64("erasure_done", floor)?;
        let sql = &self.sql.erasure_done;
        self.rows("erasure_done", sql, &[&key.as_str(), &floor])
            .await?;
        Ok(())
    }

    async fn list(
        &self,
        from: Option<&LeaseKey>,
        limit: usize,
    ) -> Result<crate::lease::LeasePage, LeaseError> {
        listing::list(self, from, limit).await
    }

    async fn advertise(
        &self,
        replica: &str,
        endpoint: &str,
        incarnation: u64,
        ttl: Duration,
    ) -> Result<ReplicaRecord, LeaseError> {
        self.advertise_record(replica, endpoint, incarnation, ttl)
            .await
    }

    async fn renew_replica(
        &self,
        replica: &str,
        epoch: u64,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<ReplicaRenewal, LeaseError> {
        self.renew_record(replica, epoch, leases, ttl).await
    }

    async fn withdraw(&self, replica: &str, epoch: u64) -> Result<(), LeaseError> {
        self.withdraw_record(replica, epoch).await
    }

    async fn lookup(&self, key: &LeaseKey) -> Result<Lookup, LeaseError> {
        self.lookup_key(key).await
    }

    async fn live_replicas(&self) -> Result<Vec<ReplicaView>, LeaseError> {
        self.live_records().await
    }
}

#[cfg(test)]
mod tests;
