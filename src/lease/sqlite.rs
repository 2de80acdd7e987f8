//! [`SqliteLeaseStore`]: the embedded lease store, one SQLite file shared by the processes of one
//! host.
//!
//! How it keeps the "Lease store" section of the contract:
//!
//! - **One clock.** Expiry is judged by the store's clock only: by default the host's
//!   `CLOCK_MONOTONIC` ([`SystemClock`]), which every process on the host reads alike. That clock
//!   starts again at every boot, so each row also records the boot it was written in
//!   ([`current_boot_id`]); a row of another boot counts as expired.
//! - **One writer at a time.** Every write runs in `BEGIN IMMEDIATE`, which takes the file's write
//!   lock *before* the row is read, so read–check–update is atomic across processes. The clock is
//!   read after the lock is taken.
//! - **Epochs survive a crash.** WAL with `synchronous=FULL`: a granted epoch is on disk before the
//!   caller hears of it, so a power cut never lets the same epoch be granted twice. Rows are never
//!   deleted, also not after a forget.
//! - **Bounded waits.** A busy timeout of [`BUSY_TIMEOUT`] and at most [`MAX_ATTEMPTS`] attempts on
//!   `SQLITE_BUSY`/`SQLITE_LOCKED`; then the call fails with [`StoreError::Unavailable`].
//! - **Off the async threads.** Every SQLite call runs in `tokio::task::spawn_blocking`.
//!
//! The decisions (who may take, renew, release, publish or forget) are pure functions of the row
//! and the store's time, in the private `rules` module (`sqlite/rules.rs`); the store only loads
//! and saves rows.
//!
//! A `ttl` is not validated here: a zero `ttl` grants a lease that is already expired. The runtime
//! validates its `ttl` option before it calls a store.
//!
//! ```text
//! leases(key PRIMARY KEY, owner, epoch, expires_at_ms, boot_id, released, floor,
//!        head_epoch, head_seq, head_sha256, attempt,
//!        tip_epoch, tip_seq)                          -- PRAGMA user_version = 4
//! erasures(key PRIMARY KEY, floor, forgotten_at_ms, boot_id)     -- pending erasures
//! replicas(id PRIMARY KEY, endpoint, epoch, incarnation, expires_at_ms, boot_id, withdrawn)
//!                                                      -- replica records, PRAGMA user_version = 5
//! ```
//!
//! Schema 1 lacked `attempt` (the id of the acquire that started the tenure, so that a retry of
//! that acquire recognises its own success), schema 2 the log tip (`tip_epoch`, `tip_seq`,
//! docs/guarantees.md, "The log tip"), schema 3 the pending erasures (`sqlite/erasures.rs`),
//! schema 4 the replica records (`sqlite/replicas.rs`);
//! opening an older file adds what is missing (`ALTER TABLE … ADD COLUMN`, `CREATE TABLE`) and
//! keeps its rows.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::clock::{SharedClock, SystemClock, duration_ms};
use crate::durable::StoreError;
use crate::ids::LeaseKey;
use crate::layout::{ImageRef, LogPos};
use crate::lease::{
    LeaseError, LeasePage, LeaseRecord, LeaseStore, Lookup, RenewOutcome, ReplicaRecord,
    ReplicaRenewal, ReplicaView, check_tip_step, page_limit,
};

mod erasures;
#[cfg(feature = "testkit")]
mod hold;
mod listing;
mod open;
mod plumbing;
mod replicas;
mod rules;
mod schema;

#[cfg(feature = "testkit")]
pub use hold::ConnectionHold;
pub use open::LeaseFileOptions;

use plumbing::{store_error, with_retries};

use rules::{
    Decision, LeaseRow, StoreTime, Tenure, advance_tip, extend, forget, hand_back, move_head, take,
};

/// Where Linux publishes the id of the current boot.
pub const BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";

/// The boot id used when [`BOOT_ID_PATH`] cannot be read. Every store that falls back to it
/// believes it runs in the same boot, so after a reboot the leases of the previous boot are judged
/// by the new monotonic clock alone: they look live until that clock passes their end. That delays
/// a takeover; it never lets two holders overlap, because the old holders died with the boot.
pub const UNKNOWN_BOOT_ID: &str = "unknown-boot";

/// How long one SQLite call waits for another connection's lock before it reports `SQLITE_BUSY`.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(2);

/// How many times a call is tried on `SQLITE_BUSY`/`SQLITE_LOCKED` before it fails.
pub const MAX_ATTEMPTS: u32 = 3;

/// The pause before the second attempt; it grows linearly with the attempt number.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

const SELECT_ROW: &str = "SELECT owner, epoch, expires_at_ms, boot_id, released, floor, \
    head_epoch, head_seq, head_sha256, attempt, tip_epoch, tip_seq FROM leases WHERE key = ?1";

const UPSERT_ROW: &str = "INSERT INTO leases (key, owner, epoch, expires_at_ms, boot_id, \
    released, floor, head_epoch, head_seq, head_sha256, attempt, tip_epoch, tip_seq) \
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) \
    ON CONFLICT(key) DO UPDATE SET owner = excluded.owner, epoch = excluded.epoch, \
    expires_at_ms = excluded.expires_at_ms, boot_id = excluded.boot_id, \
    released = excluded.released, floor = excluded.floor, head_epoch = excluded.head_epoch, \
    head_seq = excluded.head_seq, head_sha256 = excluded.head_sha256, \
    attempt = excluded.attempt, tip_epoch = excluded.tip_epoch, tip_seq = excluded.tip_seq";

/// The id of the current boot, from [`BOOT_ID_PATH`]; [`UNKNOWN_BOOT_ID`] if it cannot be read.
pub fn current_boot_id() -> String {
    match std::fs::read_to_string(BOOT_ID_PATH) {
        Ok(text) if !text.trim().is_empty() => text.trim().to_owned(),
        other => {
            tracing::warn!(
                path = BOOT_ID_PATH,
                error = ?other.err(),
                "cannot read the boot id; leases of an earlier boot will be judged by this boot's clock"
            );
            UNKNOWN_BOOT_ID.to_owned()
        }
    }
}

/// The embedded lease store: one SQLite file, shared safely by the processes of one host.
///
/// Clones share one connection. See the module documentation for how it keeps the contract.
#[derive(Clone)]
pub struct SqliteLeaseStore {
    /// The connection; one call at a time, always on a blocking thread.
    conn: Arc<Mutex<Connection>>,
    /// The store's clock, which alone judges expiry.
    clock: SharedClock,
    /// The boot the clock counts in; rows of another boot are expired.
    boot_id: Arc<str>,
    /// The database file, for `Debug`.
    path: Arc<Path>,
}

impl fmt::Debug for SqliteLeaseStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteLeaseStore")
            .field("path", &self.path)
            .field("boot_id", &self.boot_id)
            .finish_non_exhaustive()
    }
}

impl SqliteLeaseStore {
    /// Opens (creating if needed: the file 0600, its missing directories 0700) the lease file at
    /// `path`, judging expiry by the host's `CLOCK_MONOTONIC` in the current boot; an existing
    /// file that lets the group or others in is refused ([`LeaseFileOptions`]). Blocks briefly
    /// while it opens the file.
    pub fn open(path: &Path) -> Result<Self, LeaseError> {
        Self::open_with(path, Arc::new(SystemClock), current_boot_id())
    }

    /// Opens the lease file at `path` with an injected clock and boot id (tests move the clock
    /// by hand and simulate reboots). Every store sharing a file must read the same clock.
    pub fn open_with(path: &Path, clock: SharedClock, boot_id: String) -> Result<Self, LeaseError> {
        Self::open_with_options(path, clock, boot_id, LeaseFileOptions::default())
    }

    /// Opens the lease file at `path` as `options` say (whether to create it, whether to
    /// accept one that lets the group or others in), with the host's `CLOCK_MONOTONIC` in the
    /// current boot, as [`SqliteLeaseStore::open`] does. Without `create` (an operator
    /// command) the file must be a lease file of this build's schema: an older one is refused,
    /// never upgraded (the replicas of the older build would refuse it at their next start).
    pub fn open_existing(path: &Path, options: LeaseFileOptions) -> Result<Self, LeaseError> {
        Self::open_with_options(path, Arc::new(SystemClock), current_boot_id(), options)
    }

    /// [`SqliteLeaseStore::open_with`] as `options` say.
    pub fn open_with_options(
        path: &Path,
        clock: SharedClock,
        boot_id: String,
        options: LeaseFileOptions,
    ) -> Result<Self, LeaseError> {
        let conn = open::open_connection(path, options)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
            clock,
            boot_id: boot_id.into(),
            path: path.into(),
        })
    }

    /// The lease file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The boot id this store writes and judges rows by.
    pub fn boot_id(&self) -> &str {
        &self.boot_id
    }

    /// Runs `work` on a blocking thread with the connection.
    async fn blocking<T: Send + 'static>(
        &self,
        op: &'static str,
        work: impl FnOnce(&mut Connection) -> Result<T, LeaseError> + Send + 'static,
    ) -> Result<T, LeaseError> {
        let conn = Arc::clone(&self.conn);
        let joined = tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(PoisonError::into_inner);
            work(&mut guard)
        })
        .await;
        joined.map_err(|e| StoreError::Backend {
            op,
            message: format!("the blocking SQLite task failed: {e}"),
        })?
    }

    /// Runs `step` in a `BEGIN IMMEDIATE` transaction, retried on busy; commits only if `step`
    /// returns `Ok(Ok(_))`. `step` reads the store's time inside the transaction.
    async fn write<T: Send + 'static>(
        &self,
        op: &'static str,
        step: impl Fn(&Connection, &StoreTime) -> rusqlite::Result<Result<T, LeaseError>>
        + Send
        + 'static,
    ) -> Result<T, LeaseError> {
        let clock = Arc::clone(&self.clock);
        let boot_id = Arc::clone(&self.boot_id);
        self.blocking(op, move |conn| {
            let outcome = with_retries(|| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let at = StoreTime {
                    now_ms: clock.now_ms(),
                    boot_id: Arc::clone(&boot_id),
                };
                let outcome = step(&tx, &at)?;
                if outcome.is_ok() {
                    tx.commit()?;
                }
                Ok(outcome)
            });
            outcome.map_err(|e| store_error(op, &e))?
        })
        .await
    }

    /// Loads the row of `key`, applies `rule` for the caller's `tenure`, saves and returns the
    /// new record, or refuses and changes nothing.
    async fn transition(
        &self,
        op: &'static str,
        key: &LeaseKey,
        tenure: Tenure,
        rule: impl Fn(Option<&LeaseRow>, &Tenure, &StoreTime) -> Decision + Send + 'static,
    ) -> Result<LeaseRecord, LeaseError> {
        let key = key.as_str().to_owned();
        self.write(op, move |conn, at| {
            let row = load(conn, &key)?;
            match rule(row.as_ref(), &tenure, at) {
                Ok(next) => {
                    save(conn, &key, &next)?;
                    Ok(Ok(next.record(&key)))
                }
                Err(refusal) => Ok(Err(refusal.into_error(&key, &tenure))),
            }
        })
        .await
    }
}

#[async_trait]
impl LeaseStore for SqliteLeaseStore {
    async fn read(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        let key = key.as_str().to_owned();
        self.blocking("read", move |conn| {
            let row = with_retries(|| load(conn, &key)).map_err(|e| store_error("read", &e))?;
            Ok(row.map(|row| row.record(&key)))
        })
        .await
    }

    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
        attempt: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        let ttl_ms = duration_ms(ttl);
        let tenure = Tenure::new(owner, 0);
        let rule = move |row: Option<&_>, t: &_, at: &_| take(row, t, ttl_ms, attempt, at);
        self.transition("acquire", key, tenure, rule).await
    }

    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        let ttl_ms = duration_ms(ttl);
        let tenure = Tenure::new(owner, epoch);
        let rule = move |row: Option<&_>, t: &_, at: &_| extend(row, t, ttl_ms, at);
        self.transition("renew", key, tenure, rule).await
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
        let ttl_ms = duration_ms(ttl);
        let asked: Vec<(String, Tenure)> = leases
            .iter()
            .map(|(key, epoch)| (key.as_str().to_owned(), Tenure::new(owner, *epoch)))
            .collect();
        self.write("renew_many", move |conn, at| {
            let outcomes = asked
                .iter()
                .map(|(key, tenure)| renew_one(conn, key, tenure, ttl_ms, at))
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(Ok(outcomes))
        })
        .await
    }

    async fn release(&self, key: &LeaseKey, owner: &str, epoch: u64) -> Result<(), LeaseError> {
        let tenure = Tenure::new(owner, epoch);
        self.transition("release", key, tenure, hand_back)
            .await
            .map(|_| ())
    }

    async fn publish_head(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        image: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError> {
        let image = image.clone();
        let tenure = Tenure::new(owner, epoch);
        let rule = move |row: Option<&_>, t: &_, at: &_| move_head(row, t, &image, at);
        self.transition("publish_head", key, tenure, rule).await
    }

    async fn move_tip(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        from: Option<LogPos>,
        to: LogPos,
    ) -> Result<LeaseRecord, LeaseError> {
        check_tip_step(key, epoch, from, to)?;
        let tenure = Tenure::new(owner, epoch);
        let rule = move |row: Option<&_>, t: &_, at: &_| advance_tip(row, t, from, to, at);
        self.transition("move_tip", key, tenure, rule).await
    }

    fn batches_tip_moves(&self) -> bool {
        true
    }

    async fn move_tips(
        &self,
        moves: &[crate::lease::TipMove],
    ) -> Result<crate::lease::TipOutcomes, LeaseError> {
        if moves.is_empty() {
            return Ok(Vec::new());
        }
        let moves = moves.to_vec();
        // One transaction (one fsync) for every move, each decided by the same rule as
        // `move_tip`, in order.
        self.write("move_tips", move |conn, at| {
            let mut outcomes = Vec::with_capacity(moves.len());
            for m in &moves {
                if let Err(refused) = check_tip_step(&m.key, m.epoch, m.from, m.to) {
                    outcomes.push(Err(refused));
                    continue;
                }
                let tenure = Tenure::new(&m.owner, m.epoch);
                let key = m.key.as_str();
                let row = load(conn, key)?;
                match advance_tip(row.as_ref(), &tenure, m.from, m.to, at) {
                    Ok(next) => {
                        save(conn, key, &next)?;
                        outcomes.push(Ok(next.record(key)));
                    }
                    Err(refusal) => outcomes.push(Err(refusal.into_error(key, &tenure))),
                }
            }
            Ok(Ok(outcomes))
        })
        .await
    }

    /// Raises the floor and records the pending erasure in one transaction.
    async fn mark_forgotten(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        let tenure = Tenure::new(owner, epoch);
        let key = key.as_str().to_owned();
        self.write("mark_forgotten", move |conn, at| {
            let row = load(conn, &key)?;
            match forget(row.as_ref(), &tenure, at) {
                Ok(next) => {
                    save(conn, &key, &next)?;
                    erasures::record(conn, &key, next.floor, at)?;
                    Ok(Ok(next.record(&key)))
                }
                Err(refusal) => Ok(Err(refusal.into_error(&key, &tenure))),
            }
        })
        .await
    }

    async fn erasures_due(
        &self,
        settled_for: Duration,
        limit: usize,
    ) -> Result<Vec<crate::lease::PendingErasure>, LeaseError> {
        let settled_ms = duration_ms(settled_for);
        self.write("erasures_due", move |conn, at| {
            Ok(Ok(erasures::due(conn, at, settled_ms, limit)?))
        })
        .await
    }

    async fn erasure_done(&self, key: &LeaseKey, floor: u64) -> Result<(), LeaseError> {
        let key = key.as_str().to_owned();
        self.write("erasure_done", move |conn, _at| {
            Ok(Ok(erasures::done(conn, &key, floor)?))
        })
        .await
    }

    /// One statement (a snapshot), judged by the store's clock read beside it.
    async fn list(&self, from: Option<&LeaseKey>, limit: usize) -> Result<LeasePage, LeaseError> {
        let from = from.map(|k| k.as_str().to_owned());
        let (clock, boot_id) = (Arc::clone(&self.clock), Arc::clone(&self.boot_id));
        self.blocking("list", move |conn| {
            let page = with_retries(|| {
                let at = StoreTime {
                    now_ms: clock.now_ms(),
                    boot_id: Arc::clone(&boot_id),
                };
                listing::page(conn, from.as_deref(), page_limit(limit), &at)
            });
            page.map_err(|e| store_error("list", &e))?
        })
        .await
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

// ---------------------------------------------------------------------------------------------
// SQLite plumbing

fn load(conn: &Connection, key: &str) -> rusqlite::Result<Option<LeaseRow>> {
    conn.prepare_cached(SELECT_ROW)?
        .query_row([key], row_from_sql)
        .optional()
}

fn row_from_sql(r: &rusqlite::Row<'_>) -> rusqlite::Result<LeaseRow> {
    let head = match (opt_u64(r, 6)?, opt_u64(r, 7)?, r.get(8)?) {
        (Some(epoch), Some(seq), Some(sha256)) => Some(ImageRef { epoch, seq, sha256 }),
        _ => None,
    };
    Ok(LeaseRow {
        owner: r.get(0)?,
        epoch: get_u64(r, 1)?,
        expires_at_ms: get_u64(r, 2)?,
        boot_id: r.get(3)?,
        released: r.get(4)?,
        floor: get_u64(r, 5)?,
        head,
        attempt: r.get::<_, Option<i64>>(9)?.map(attempt_from_sql),
        tip: match (opt_u64(r, 10)?, opt_u64(r, 11)?) {
            (Some(epoch), Some(seq)) => Some(LogPos { epoch, seq }),
            _ => None,
        },
    })
}

fn save(conn: &Connection, key: &str, row: &LeaseRow) -> rusqlite::Result<()> {
    let head = row.head.as_ref();
    conn.prepare_cached(UPSERT_ROW)?.execute(params![
        key,
        row.owner,
        sql_int(row.epoch)?,
        sql_int(row.expires_at_ms)?,
        row.boot_id,
        row.released,
        sql_int(row.floor)?,
        head.map(|h| sql_int(h.epoch)).transpose()?,
        head.map(|h| sql_int(h.seq)).transpose()?,
        head.map(|h| h.sha256.as_str()),
        row.attempt.map(attempt_to_sql),
        row.tip.map(|p| sql_int(p.epoch)).transpose()?,
        row.tip.map(|p| sql_int(p.seq)).transpose()?,
    ])?;
    Ok(())
}

/// An attempt id as a SQLite integer: the same 64 bits (any `u64` is a valid id, so none is
/// refused).
fn attempt_to_sql(attempt: u64) -> i64 {
    i64::from_ne_bytes(attempt.to_ne_bytes())
}

/// The attempt id stored by [`attempt_to_sql`].
fn attempt_from_sql(stored: i64) -> u64 {
    u64::from_ne_bytes(stored.to_ne_bytes())
}

/// A `u64` as a SQLite integer; values above `i64::MAX` are refused, never wrapped.
fn sql_int(value: u64) -> rusqlite::Result<i64> {
    i64::try_from(value).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

/// A nullable column holding a non-negative integer.
fn opt_u64(r: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<Option<u64>> {
    let value: Option<i64> = r.get(idx)?;
    value.map(|v| non_negative(idx, v)).transpose()
}

/// A non-null column holding a non-negative integer.
fn get_u64(r: &rusqlite::Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    non_negative(idx, r.get(idx)?)
}

fn non_negative(idx: usize, value: i64) -> rusqlite::Result<u64> {
    u64::try_from(value)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(idx, Type::Integer, Box::new(e)))
}

fn renew_one(
    conn: &Connection,
    key: &str,
    tenure: &Tenure,
    ttl_ms: u64,
    at: &StoreTime,
) -> rusqlite::Result<RenewOutcome> {
    let row = load(conn, key)?;
    match extend(row.as_ref(), tenure, ttl_ms, at) {
        Ok(next) => save(conn, key, &next).map(|()| RenewOutcome::Renewed),
        Err(_) => Ok(RenewOutcome::Lost),
    }
}

#[cfg(test)]
mod tests;
