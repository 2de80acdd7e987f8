//! The SQL of the PostgreSQL lease store: the lease table's `CREATE TABLE`, one statement per
//! operation (built once, with the table name filled in), and the conversions of epochs, ttls and
//! rows between Rust values and the statements' parameters and columns.
//!
//! Every statement judges expiry by the server's clock (`clock_timestamp()`) alone.

use std::time::Duration;

use tokio_postgres::Row;

use crate::durable::StoreError;
use crate::layout::{ImageRef, LogPos};
use crate::lease::LeaseRecord;

use super::errors::pg_error;

/// The columns every statement returns, in the order [`record`] reads them.
pub(super) const COLUMNS: &str = "l.key, l.owner, l.epoch, \
    floor(extract(epoch FROM l.expires_at) * 1000)::int8 AS expires_ms, \
    l.released, l.floor, l.head_epoch, l.head_seq, l.head_sha256, l.tip_epoch, l.tip_seq";

/// `clock_timestamp() + ttl`, with the ttl in milliseconds as parameter `$n`.
fn until(n: u8) -> String {
    format!("clock_timestamp() + ${n}::float8 * interval '1 millisecond'")
}

/// The image `($4, $5)` is newer than the row's head (or there is none): the head only moves
/// forward (docs/guarantees.md, promise 4).
const FORWARD: &str = "(l.head_epoch IS NULL OR (l.head_epoch, l.head_seq) < ($4::int8, $5::int8))";

/// The tip is at `from` = `($6, $7)` (both NULL for no tip): the compare of `move_tip`
/// (docs/guarantees.md, "The log tip").
const AT_FROM: &str = "(l.tip_epoch IS NOT DISTINCT FROM $6::int8 \
    AND l.tip_seq IS NOT DISTINCT FROM $7::int8)";

/// The tip is at the move's `from` (`m.from_epoch`, `m.from_seq`; both NULL for no tip): the
/// compare of `move_tips`, move by move, as [`AT_FROM`] is `move_tip`'s.
const AT_MOVE_FROM: &str = "(l.tip_epoch IS NOT DISTINCT FROM m.from_epoch \
    AND l.tip_seq IS NOT DISTINCT FROM m.from_seq)";

/// Where the move's index is among the columns `move_tips` returns: after [`COLUMNS`].
pub(super) const MOVE_INDEX_COLUMN: usize = 11;

/// The row is live for the caller's own acquire attempt: same owner, same attempt.
const MINE: &str = "(NOT l.released AND l.expires_at > clock_timestamp() \
    AND l.owner = excluded.owner AND l.attempt = excluded.attempt)";

/// The row's tenure was started by the caller's own attempt and is over: an attempt starts at
/// most one tenure, so a late landing of it takes nothing (docs/guarantees.md, "Late landings").
const SPENT: &str = "(l.owner = excluded.owner AND l.attempt IS NOT DISTINCT FROM excluded.attempt \
    AND (l.released OR l.expires_at <= clock_timestamp()))";

/// The lease of `$1` is live for owner `$2` at epoch `$3`, by the server's clock.
const LIVE: &str = "l.key = $1 AND l.owner = $2 AND l.epoch = $3 \
    AND NOT l.released AND l.expires_at > clock_timestamp()";

/// The SQL of every operation, built once with the table name.
#[derive(Debug, Clone)]
pub(super) struct Statements {
    /// `CREATE TABLE IF NOT EXISTS`.
    pub(super) create: String,
    /// Adds the columns a table created by an older build lacks (`attempt`, the log tip).
    pub(super) add_columns: String,
    /// The record of one key.
    pub(super) read: String,
    /// Insert or take over an expired or released lease.
    pub(super) acquire: String,
    /// Extend one live lease.
    pub(super) renew: String,
    /// Extend many live leases of one owner.
    pub(super) renew_many: String,
    /// Hand a live lease back.
    pub(super) release: String,
    /// Move the head of a live lease.
    pub(super) publish_head: String,
    /// Move the log tip of a live lease from `from` to `to`.
    pub(super) move_tip: String,
    /// Move the log tips of many live leases, each from its `from` to its `to`, in one statement
    /// (no key twice: see `postgres/tips.rs`).
    pub(super) move_tips: String,
    /// Raise the floor of a live lease and clear its head; record its pending erasure.
    pub(super) mark_forgotten: String,
    /// The pending erasures old enough by the server's clock (`$1` ms), oldest first, `$2` at most.
    pub(super) erasures_due: String,
    /// Clear the pending erasure of `$1` at floor `$2`.
    pub(super) erasure_done: String,
    /// The rows at or after `$1` (all when NULL: `''` sorts first in every collation) in key
    /// order, `$2` of them (an index range scan), each with the time it still runs and its
    /// pending erasure's age, by one reading of the server's clock.
    pub(super) list: String,
}

/// Where the time left is among the columns of `list`: after [`COLUMNS`]; the erasure's floor
/// and age follow it.
pub(super) const REMAINING_COLUMN: usize = 11;

impl Statements {
    /// The statements of the lease table `table` (a name [`super::check_table_name`] accepted).
    pub(super) fn new(table: &str) -> Self {
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
                    attempt     int8,
                    tip_epoch   int8,
                    tip_seq     int8,
                    forgotten_at  timestamptz,
                    erasure_floor int8,
                    CHECK ((head_epoch IS NULL) = (head_seq IS NULL)
                       AND (head_seq IS NULL) = (head_sha256 IS NULL)),
                    CHECK ((tip_epoch IS NULL) = (tip_seq IS NULL))
                )"
            ),
            add_columns: format!(
                "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS attempt int8, \
                 ADD COLUMN IF NOT EXISTS tip_epoch int8, ADD COLUMN IF NOT EXISTS tip_seq int8, \
                 ADD COLUMN IF NOT EXISTS forgotten_at timestamptz, \
                 ADD COLUMN IF NOT EXISTS erasure_floor int8"
            ),
            read: format!("SELECT {COLUMNS} FROM {t} AS l WHERE l.key = $1"),
            acquire: format!(
                "INSERT INTO {t} AS l (key, owner, epoch, expires_at, released, floor, attempt)
                 VALUES ($1, $2, 1, {u}, false, 0, $4)
                 ON CONFLICT (key) DO UPDATE
                    SET epoch = CASE WHEN {MINE} THEN l.epoch ELSE l.epoch + 1 END,
                        expires_at = CASE WHEN {MINE} THEN greatest(l.expires_at, {u}) ELSE {u} END,
                        owner = excluded.owner, released = false, attempt = excluded.attempt
                    WHERE (l.released OR l.expires_at <= clock_timestamp() OR {MINE}) AND NOT {SPENT}
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
                "UPDATE {t} AS l
                    SET head_epoch = CASE WHEN {FORWARD} THEN $4 ELSE l.head_epoch END,
                        head_seq = CASE WHEN {FORWARD} THEN $5 ELSE l.head_seq END,
                        head_sha256 = CASE WHEN {FORWARD} THEN $6 ELSE l.head_sha256 END
                 WHERE {LIVE} AND l.epoch > l.floor AND l.epoch = $4
                 RETURNING {COLUMNS}"
            ),
            move_tip: format!(
                "UPDATE {t} AS l
                    SET tip_epoch = CASE WHEN {AT_FROM} THEN $4 ELSE l.tip_epoch END,
                        tip_seq = CASE WHEN {AT_FROM} THEN $5 ELSE l.tip_seq END
                 WHERE {LIVE} AND l.epoch > l.floor
                 RETURNING {COLUMNS}"
            ),
            move_tips: format!(
                "UPDATE {t} AS l
                    SET tip_epoch = CASE WHEN {AT_MOVE_FROM} THEN m.to_epoch ELSE l.tip_epoch END,
                        tip_seq = CASE WHEN {AT_MOVE_FROM} THEN m.to_seq ELSE l.tip_seq END
                 FROM unnest($1::int8[], $2::text[], $3::text[], $4::int8[], $5::int8[],
                             $6::int8[], $7::int8[], $8::int8[])
                      AS m(idx, key, owner, epoch, from_epoch, from_seq, to_epoch, to_seq)
                 WHERE l.key = m.key AND l.owner = m.owner AND l.epoch = m.epoch
                   AND NOT l.released AND l.expires_at > clock_timestamp() AND l.epoch > l.floor
                 RETURNING {COLUMNS}, m.idx"
            ),
            // A retried forget (the floor already at the epoch) keeps its first time.
            mark_forgotten: format!(
                "UPDATE {t} AS l
                    SET floor = l.epoch, head_epoch = NULL, head_seq = NULL, head_sha256 = NULL,
                        tip_epoch = NULL, tip_seq = NULL,
                        forgotten_at = CASE WHEN l.floor = l.epoch AND l.forgotten_at IS NOT NULL
                                       THEN l.forgotten_at ELSE clock_timestamp() END,
                        erasure_floor = l.epoch
                 WHERE {LIVE} RETURNING {COLUMNS}"
            ),
            erasures_due: format!(
                "SELECT l.key, l.erasure_floor FROM {t} AS l
                 WHERE l.erasure_floor IS NOT NULL
                   AND l.forgotten_at <= clock_timestamp() - $1::float8 * interval '1 millisecond'
                 ORDER BY l.forgotten_at, l.key LIMIT $2"
            ),
            erasure_done: format!(
                "UPDATE {t} AS l SET erasure_floor = NULL
                 WHERE l.key = $1 AND l.erasure_floor = $2"
            ),
            list: format!(
                "SELECT {COLUMNS},
                    CASE WHEN NOT l.released AND l.expires_at > n.t
                         THEN floor(extract(epoch FROM l.expires_at - n.t) * 1000)::int8 END,
                    l.erasure_floor,
                    CASE WHEN l.erasure_floor IS NOT NULL
                         THEN greatest(0, floor(extract(epoch FROM n.t - l.forgotten_at) * 1000))::int8
                    END
                 FROM {t} AS l, (SELECT clock_timestamp() AS t) AS n
                 WHERE l.key >= coalesce($1::text, '')
                 ORDER BY l.key LIMIT $2"
            ),
        }
    }
}

/// A ttl as the `float8` milliseconds the statements add to the server's clock.
pub(super) fn ttl_param(ttl: Duration) -> f64 {
    ttl.as_secs_f64() * 1_000.0
}

/// An epoch or sequence number as a PostgreSQL `int8`.
pub(super) fn to_i64(op: &'static str, n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::Backend {
        op,
        message: format!("{n} does not fit a PostgreSQL int8"),
    })
}

/// An attempt id as a PostgreSQL `int8`: the same 64 bits, so every id fits.
pub(super) fn attempt_param(attempt: u64) -> i64 {
    i64::from_ne_bytes(attempt.to_ne_bytes())
}

/// An `int8` column read back as an epoch, sequence number or time.
fn to_u64(op: &'static str, n: i64) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| StoreError::Backend {
        op,
        message: format!("negative value {n} in the lease table"),
    })
}

/// Column `idx` of `row`, typed.
pub(super) fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    op: &'static str,
    row: &'a Row,
    idx: usize,
) -> Result<T, StoreError> {
    row.try_get(idx).map_err(|e| pg_error(op, &e))
}

/// A row of [`COLUMNS`] as a [`LeaseRecord`].
pub(super) fn record(op: &'static str, row: &Row) -> Result<LeaseRecord, StoreError> {
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
        tip: tip(op, get(op, row, 9)?, get(op, row, 10)?)?,
    })
}

/// The tip columns as a position; `None` unless both are set.
fn tip(
    op: &'static str,
    epoch: Option<i64>,
    seq: Option<i64>,
) -> Result<Option<LogPos>, StoreError> {
    match (epoch, seq) {
        (Some(epoch), Some(seq)) => Ok(Some(LogPos {
            epoch: to_u64(op, epoch)?,
            seq: to_u64(op, seq)?,
        })),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_name_the_table_and_use_only_the_server_clock() {
        let s = Statements::new("my_leases");
        for sql in [
            &s.acquire,
            &s.renew,
            &s.renew_many,
            &s.release,
            &s.publish_head,
            &s.move_tip,
            &s.move_tips,
            &s.mark_forgotten,
        ] {
            assert!(sql.contains("\"my_leases\""), "{sql}");
            assert!(sql.contains("clock_timestamp()"), "{sql}");
            assert!(!sql.contains("now()"), "{sql}");
        }
    }

    #[test]
    fn hole2_the_publish_statement_moves_the_head_only_forward() {
        let s = Statements::new("my_leases");
        assert!(s.publish_head.contains(FORWARD), "{}", s.publish_head);
        assert!(s.acquire.contains("l.attempt = excluded.attempt"));
        assert!(
            s.acquire.contains("AND NOT (l.owner = excluded.owner"),
            "a spent attempt takes nothing"
        );
        assert_eq!(attempt_param(u64::MAX), -1, "every attempt id fits an int8");
    }

    #[test]
    fn the_tip_statement_compares_with_from_above_the_floor_and_a_forget_clears_the_tip() {
        let s = Statements::new("my_leases");
        assert!(s.move_tip.contains(AT_FROM), "{}", s.move_tip);
        assert!(s.move_tip.contains("l.epoch > l.floor"), "{}", s.move_tip);
        assert!(s.move_tips.contains(AT_MOVE_FROM), "{}", s.move_tips);
        assert!(s.move_tips.contains("l.epoch > l.floor"), "{}", s.move_tips);
        assert!(
            s.move_tips
                .contains("l.owner = m.owner AND l.epoch = m.epoch"),
            "{}",
            s.move_tips
        );
        assert!(s.mark_forgotten.contains("tip_seq = NULL"));
        assert!(s.create.contains("tip_seq") && s.add_columns.contains("tip_seq"));
    }

    #[test]
    fn a_forget_records_its_pending_erasure_by_the_server_clock() {
        let s = Statements::new("my_leases");
        assert!(s.mark_forgotten.contains("erasure_floor = l.epoch"));
        assert!(s.erasures_due.contains("clock_timestamp()"));
        assert!(!s.erasures_due.contains("now()"));
        assert!(s.erasure_done.contains("l.erasure_floor = $2"));
        assert!(s.create.contains("erasure_floor") && s.add_columns.contains("erasure_floor"));
    }

    #[test]
    fn the_listing_judges_every_row_by_one_reading_of_the_server_clock() {
        let s = Statements::new("my_leases");
        assert!(s.list.contains("\"my_leases\""));
        assert_eq!(s.list.matches("clock_timestamp()").count(), 1, "{}", s.list);
        assert!(!s.list.contains("now()"));
        assert!(s.list.contains("ORDER BY l.key LIMIT $2"));
    }
}
