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

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;
use tokio_postgres::{NoTls, Row};

use crate::clock::duration_ms;
use crate::durable::StoreError;
use crate::error::Error;
use crate::ids::LeaseKey;
use crate::layout::ImageRef;
use crate::lease::{LeaseError, LeaseRecord, LeaseStore, RenewOutcome};

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

/// The columns every statement returns, in the order [`record`] reads them.
const COLUMNS: &str = "l.key, l.owner, l.epoch, \
    floor(extract(epoch FROM l.expires_at) * 1000)::int8 AS expires_ms, \
    l.released, l.floor, l.head_epoch, l.head_seq, l.head_sha256";

/// `clock_timestamp() + ttl`, with the ttl in milliseconds as parameter `$n`.
fn until(n: u8) -> String {
    format!("clock_timestamp() + ${n}::float8 * interval '1 millisecond'")
}

/// The lease of `$1` is live for owner `$2` at epoch `$3`, by the server's clock.
const LIVE: &str = "l.key = $1 AND l.owner = $2 AND l.epoch = $3 \
    AND NOT l.released AND l.expires_at > clock_timestamp()";

/// The SQL of every operation, built once with the table name.
#[derive(Debug, Clone)]
struct Statements {
    /// `CREATE TABLE IF NOT EXISTS`.
    create: String,
    /// The record of one key.
    read: String,
    /// Insert or take over an expired or released lease.
    acquire: String,
    /// Extend one live lease.
    renew: String,
    /// Extend many live leases of one owner.
    renew_many: String,
    /// Hand a live lease back.
    release: String,
    /// Move the head of a live lease.
    publish_head: String,
    /// Raise the floor of a live lease and clear its head.
    mark_forgotten: String,
}

impl Statements {
    fn new(table: &str) -> Self {
        let t = format!("\"{table}\"");
        Self {
            create: format!(
                "CREATE TABLE IF NOT EXISTS {t} (
                    key         text        PRIMARY KEY,
                    owner       text        NOT NULL,
                    epoch       int8        NOT NULL CHECK (epoch >= 1),
                    expires_at  timestamptz NOT NULL,
                    released    boolean     NOT NULL DEFAULT false,
                    floor       int8        NOT NULL DEFAULT 0 CHECK (floor >= 0 AND floor <= epoch),
                    head_epoch  int8,
                    head_seq    int8,
                    head_sha256 text,
                    CHECK ((head_epoch IS NULL) = (head_seq IS NULL)
                       AND (head_seq IS NULL) = (head_sha256 IS NULL))
                )"
            ),
            read: format!("SELECT {COLUMNS} FROM {t} AS l WHERE l.key = $1"),
            acquire: format!(
                "INSERT INTO {t} AS l (key, owner, epoch, expires_at, released, floor)
                 VALUES ($1, $2, 1, {u}, false, 0)
                 ON CONFLICT (key) DO UPDATE
                    SET owner = excluded.owner, epoch = l.epoch + 1,
                        expires_at = {u}, released = false
                    WHERE l.released OR l.expires_at <= clock_timestamp()
                 RETURNING {COLUMNS}",
                u = until(3)
            ),
            renew: format!(
                "UPDATE {t} AS l SET expires_at = greatest(l.expires_at, {u})
                 WHERE {LIVE} RETURNING {COLUMNS}",
                u = until(4)
            ),
            renew_many: format!(
                "UPDATE {t} AS l SET expires_at = greatest(l.expires_at, {u})
                 FROM unnest($1::text[], $2::int8[]) AS r(key, epoch)
                 WHERE l.key = r.key AND l.epoch = r.epoch AND l.owner = $4
                   AND NOT l.released AND l.expires_at > clock_timestamp()
                 RETURNING l.key, l.epoch",
                u = until(3)
            ),
            release: format!("UPDATE {t} AS l SET released = true WHERE {LIVE} RETURNING l.key"),
            publish_head: format!(
                "UPDATE {t} AS l SET head_epoch = $4, head_seq = $5, head_sha256 = $6
                 WHERE {LIVE} AND l.epoch > l.floor AND l.epoch = $4
                 RETURNING {COLUMNS}"
            ),
            mark_forgotten: format!(
                "UPDATE {t} AS l
                    SET floor = l.epoch, head_epoch = NULL, head_seq = NULL, head_sha256 = NULL
                 WHERE {LIVE} RETURNING {COLUMNS}"
            ),
        }
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

    async fn acquire(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
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

/// [`LeaseError::NotHeld`] for this tenure.
fn not_held(key: &LeaseKey, owner: &str, epoch: u64) -> LeaseError {
    LeaseError::NotHeld {
        key: key.to_string(),
        owner: owner.to_string(),
        epoch,
    }
}

/// A ttl as the `float8` milliseconds the statements add to the server's clock.
fn ttl_param(ttl: Duration) -> f64 {
    ttl.as_secs_f64() * 1_000.0
}

/// An epoch or sequence number as a PostgreSQL `int8`.
fn to_i64(op: &'static str, n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::Backend {
        op,
        message: format!("{n} does not fit a PostgreSQL int8"),
    })
}

/// An `int8` column read back as an epoch, sequence number or time.
fn to_u64(op: &'static str, n: i64) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| StoreError::Backend {
        op,
        message: format!("negative value {n} in the lease table"),
    })
}

/// Column `idx` of `row`, typed.
fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    op: &'static str,
    row: &'a Row,
    idx: usize,
) -> Result<T, StoreError> {
    row.try_get(idx).map_err(|e| pg_error(op, &e))
}

/// A row of [`COLUMNS`] as a [`LeaseRecord`].
fn record(op: &'static str, row: &Row) -> Result<LeaseRecord, StoreError> {
    let head_epoch: Option<i64> = get(op, row, 6)?;
    let head_seq: Option<i64> = get(op, row, 7)?;
    let head_sha256: Option<String> = get(op, row, 8)?;
    let head = match (head_epoch, head_seq, head_sha256) {
        (Some(epoch), Some(seq), Some(sha256)) => Some(ImageRef {
            epoch: to_u64(op, epoch)?,
            seq: to_u64(op, seq)?,
            sha256,
        }),
        _ => None,
    };
    Ok(LeaseRecord {
        key: get(op, row, 0)?,
        owner: get(op, row, 1)?,
        epoch: to_u64(op, get(op, row, 2)?)?,
        expires_at_ms: to_u64(op, get(op, row, 3)?)?,
        released: get(op, row, 4)?,
        floor: to_u64(op, get(op, row, 5)?)?,
        head,
    })
}

/// SQL states that say the server or the connection is gone or refusing, not that the statement
/// is wrong: class 08 (connection exception), 53 (insufficient resources), 57P0x (shutdown),
/// 57014 (cancelled by `statement_timeout`: rolled back, so nothing changed).
fn is_unavailable_state(state: &SqlState) -> bool {
    let code = state.code();
    code.starts_with("08")
        || code.starts_with("53")
        || matches!(code, "57P01" | "57P02" | "57P03" | "57014")
}

/// A driver error as a [`StoreError`]: no connection, or a lost one, is `Unavailable` (the lease
/// is then unknown, never held); a statement the server refused is `Backend`.
fn pg_error(op: &'static str, e: &tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) if is_unavailable_state(db.code()) => StoreError::Unavailable {
            op,
            message: format!("{}: {}", db.code().code(), db.message()),
        },
        Some(db) => StoreError::Backend {
            op,
            message: format!("{}: {}", db.code().code(), db.message()),
        },
        None if is_connection_loss(e) => StoreError::Unavailable {
            op,
            message: with_cause(e),
        },
        None => StoreError::Backend {
            op,
            message: with_cause(e),
        },
    }
}

/// Whether the driver lost or never had its connection: the socket failed (refused, reset,
/// timed out) or the connection closed. The driver's error kinds are private; its `Display`
/// prints the kind alone, so the kind is read from there.
fn is_connection_loss(e: &tokio_postgres::Error) -> bool {
    const LOSS: [&str; 4] = [
        "error communicating with the server",
        "error connecting to server",
        "connection closed",
        "timeout waiting for server",
    ];
    e.is_closed() || LOSS.contains(&e.to_string().as_str()) || has_io_source(e)
}

/// Whether an `std::io::Error` is among the causes of `e`.
fn has_io_source(e: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<std::io::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// The error and its cause, as one line.
fn with_cause(e: &tokio_postgres::Error) -> String {
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// A pool error as a [`StoreError`]: no connection within the wait or connect timeout is
/// `Unavailable`.
fn pool_error(op: &'static str, e: PoolError) -> StoreError {
    match e {
        PoolError::Backend(pg) => pg_error(op, &pg),
        PoolError::Timeout(kind) => StoreError::Unavailable {
            op,
            message: format!("no database connection: pool {kind:?} timeout"),
        },
        PoolError::Closed => StoreError::Unavailable {
            op,
            message: "the connection pool is closed".to_string(),
        },
        other => StoreError::Backend {
            op,
            message: other.to_string(),
        },
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

    #[test]
    fn connection_states_are_unavailable_and_statement_errors_are_not() {
        assert!(is_unavailable_state(&SqlState::CONNECTION_FAILURE));
        assert!(is_unavailable_state(&SqlState::TOO_MANY_CONNECTIONS));
        assert!(is_unavailable_state(&SqlState::ADMIN_SHUTDOWN));
        assert!(!is_unavailable_state(&SqlState::UNIQUE_VIOLATION));
        assert!(!is_unavailable_state(&SqlState::INSUFFICIENT_PRIVILEGE));
    }

    #[test]
    fn statements_name_the_table_and_use_only_the_server_clock() {
        let s = Statements::new("my_leases");
        for sql in [
            &s.acquire,
            &s.renew,
            &s.renew_many,
            &s.release,
            &s.publish_head,
        ] {
            assert!(sql.contains("\"my_leases\""), "{sql}");
            assert!(sql.contains("clock_timestamp()"), "{sql}");
            assert!(!sql.contains("now()"), "{sql}");
        }
    }
}
