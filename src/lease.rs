//! Leases: the [`LeaseStore`] trait, the [`LeaseRecord`] it keeps, and [`LeaseTerm`], the pure
//! rule that says whether a holder may still act.
//!
//! A lease is `(key, owner, epoch, expires_at, floor, head, tip)`. The store judges expiry by its own
//! clock only. The holder judges it by its own monotonic clock, counting from the moment it
//! *sent* the acquire or renew and stopping `margin` before the end (docs/guarantees.md, promise 1), so a
//! holder always believes its lease ends before the store does.
//!
//! Backends: [`sqlite`] (the embedded default, shared by the processes of one host) and, with the
//! `postgres` feature, `postgres` (a fleet of hosts). Both pass `testkit::lease_store_conformance`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::clock::duration_ms;
use crate::durable::StoreError;
use crate::ids::LeaseKey;
use crate::layout::{ImageRef, LogPos};

mod listing;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod sqlite;

pub use listing::{ErasureEntry, LeaseEntry, LeasePage, page_limit};

/// A lease as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// `<org>/<tenant>`.
    pub key: String,
    /// The replica that holds (or last held) the lease.
    pub owner: String,
    /// Grows by one at every acquisition; never reused, also not after a forget.
    pub epoch: u64,
    /// When the lease ends, in milliseconds of the **store's** clock.
    pub expires_at_ms: u64,
    /// True once the holder released it; a released lease can be acquired at once.
    pub released: bool,
    /// The highest epoch that was forgotten: nothing at or below it may be read again.
    pub floor: u64,
    /// The newest published image, moved only by [`LeaseStore::publish_head`].
    pub head: Option<ImageRef>,
    /// The newest segment of the change log, moved only by [`LeaseStore::move_tip`]: a restore
    /// never reads a segment above it (docs/guarantees.md, "The log tip"). Kept by an acquire,
    /// cleared by a forget.
    pub tip: Option<LogPos>,
}

/// One tip move of a [`LeaseStore::move_tips`] call: the arguments of a
/// [`LeaseStore::move_tip`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TipMove {
    /// The tenant.
    pub key: LeaseKey,
    /// The holder's owner name.
    pub owner: String,
    /// The holder's epoch.
    pub epoch: u64,
    /// The tip the holder last saw.
    pub from: Option<LogPos>,
    /// The position to move to.
    pub to: LogPos,
}

/// What each move of a [`LeaseStore::move_tips`] call came to, in order.
pub type TipOutcomes = Vec<Result<LeaseRecord, LeaseError>>;

/// A forget whose erasure is not known to be complete: the tenant's objects at or below `floor`
/// must be swept once more after every put that could still land has landed
/// ([`LeaseStore::erasures_due`], docs/guarantees.md, "the erasure bound").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingErasure {
    /// The forgotten tenant.
    pub key: LeaseKey,
    /// The floor its forget raised.
    pub floor: u64,
}

/// What one key of a [`LeaseStore::renew_many`] call came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenewOutcome {
    /// The lease was live for `(owner, epoch)` and now runs for another `ttl`.
    Renewed,
    /// The lease is not live for `(owner, epoch)`: expired, released, or taken by another.
    Lost,
}

/// Why a lease operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// `acquire` found a live lease of another tenure.
    #[error("lease {key} is held by {owner} at epoch {epoch}")]
    Held {
        /// The key.
        key: String,
        /// The current holder.
        owner: String,
        /// Its epoch.
        epoch: u64,
    },
    /// The lease is not live for this `(owner, epoch)`: it expired, was released, was taken over,
    /// or (for `publish_head`) its epoch was forgotten.
    #[error("lease {key} is not held by {owner} at epoch {epoch}")]
    NotHeld {
        /// The key.
        key: String,
        /// The caller's owner name.
        owner: String,
        /// The caller's epoch.
        epoch: u64,
    },
    /// `publish_head` offered an image that is not newer than the current head: the head only
    /// moves forward (docs/guarantees.md, promise 4). The lease is still held; nothing changed.
    /// This is what a publish that lands late (after a newer one) hears, so it must not be taken
    /// for a lost lease.
    #[error("lease {key}: head is already at {head:?}, not moving it back to {image:?}")]
    Stale {
        /// The key.
        key: String,
        /// The current head, at or past `image`.
        head: ImageRef,
        /// The image the caller offered.
        image: ImageRef,
    },
    /// `move_tip` found the tip elsewhere than `from` (and not already at `to`): another move
    /// came first, or the caller's view is old. The lease may still be held; nothing changed.
    #[error("lease {key}: the log tip is at {tip:?}, not at {from:?}; not moving it to {to}")]
    TipMoved {
        /// The key.
        key: String,
        /// The current tip.
        tip: Option<LogPos>,
        /// The tip the caller expected.
        from: Option<LogPos>,
        /// The position the caller offered.
        to: LogPos,
    },
    /// `move_tip` offered a `to` that is not the next position of the caller's tenure after
    /// `from`: `to.epoch` must be the caller's epoch and `to.seq` one above `from`'s (1 when
    /// `from` is `None`). Checked before the store is asked; nothing changed.
    #[error(
        "lease {key}: {to} does not follow {from:?} in epoch {epoch} (the tip moves by exactly one segment of the caller's epoch)"
    )]
    TipOutOfOrder {
        /// The key.
        key: String,
        /// The caller's epoch.
        epoch: u64,
        /// The tip the caller expected.
        from: Option<LogPos>,
        /// The position the caller offered.
        to: LogPos,
    },
    /// The store could not be asked, or did not answer. For a write the outcome is **unknown**:
    /// it may have applied, or may still apply later (see [`LeaseError::outcome_unknown`]); for
    /// a lease, it must be treated as unknown, never as held.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl LeaseError {
    /// True when the call's effect on the store is unknown: it may have applied, or may still
    /// apply later (a [`StoreError::Timeout`] always; an `Unavailable` or `Io` when a connection
    /// or a file was lost after the statement went out). The caller must not conclude that
    /// nothing happened: read the record, or retry the same call, which every operation is safe
    /// to repeat (docs/guarantees.md, "Late landings"). A refusal (`Held`, `NotHeld`, `Stale`,
    /// `TipMoved`, `TipOutOfOrder`) is definite: nothing changed.
    pub fn outcome_unknown(&self) -> bool {
        match self {
            LeaseError::Store(e) => store_outcome_unknown(e),
            LeaseError::Held { .. }
            | LeaseError::NotHeld { .. }
            | LeaseError::Stale { .. }
            | LeaseError::TipMoved { .. }
            | LeaseError::TipOutOfOrder { .. } => false,
        }
    }
}

/// Whether `to` is the next log position of the tenure of `epoch` after `from`: of that epoch,
/// and one segment above `from` (segment 1 when there is no tip yet). Every store checks it
/// before it is asked to [`LeaseStore::move_tip`]; `Err` is [`LeaseError::TipOutOfOrder`].
pub fn check_tip_step(
    key: &LeaseKey,
    epoch: u64,
    from: Option<LogPos>,
    to: LogPos,
) -> Result<(), LeaseError> {
    let next_seq = from.map_or(Some(1), |f| f.seq.checked_add(1));
    if to.epoch == epoch && Some(to.seq) == next_seq {
        return Ok(());
    }
    Err(LeaseError::TipOutOfOrder {
        key: key.to_string(),
        epoch,
        from,
        to,
    })
}

/// Whether a store error leaves a write's outcome unknown: everything but a refused key, an
/// object too large for one put, a missing store or one that is not private (all checked
/// before any write). Conservative on purpose: an
/// `Unavailable` that never reached the backend is also reported unknown, which costs a
/// re-read; the opposite mistake would lose a write.
pub fn store_outcome_unknown(e: &StoreError) -> bool {
    !matches!(
        e,
        StoreError::InvalidKey { .. }
            | StoreError::TooLarge { .. }
            | StoreError::Missing { .. }
            | StoreError::NotPrivate { .. }
    )
}

/// A fresh attempt id for [`LeaseStore::acquire`]: random per process, then counted, so two
/// attempts (also of two processes using one owner name) practically never share one.
pub fn fresh_attempt() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEED: OnceLock<std::collections::hash_map::RandomState> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let mut hasher = SEED
        .get_or_init(std::collections::hash_map::RandomState::new)
        .build_hasher();
    hasher.write_u64(COUNT.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// Where leases live. Every method is one round trip (one statement or one short transaction).
///
/// `renew`, `release`, `publish_head`, `move_tip` and `mark_forgotten` succeed only for the `(owner, epoch)`
/// of a lease that is live by the store's clock; otherwise they return [`LeaseError::NotHeld`]
/// and change nothing.
///
/// **Every call may land late** (docs/guarantees.md, "Late landings"): a call reported as
/// [`StoreError::Timeout`] may still take effect afterwards (a statement already sent to a
/// server runs when the server reads it). So every write is safe to land late and to repeat:
/// heads and tips only move forward, a repeated `mark_forgotten`, `renew`, `publish_head` of the
/// current head or `move_tip` to the current tip returns the record, and a retried [`LeaseStore::acquire_attempt`] recognises its own
/// earlier success. [`LeaseError::outcome_unknown`] says when a caller cannot know.
///
/// A wrapper must forward both `acquire` and `acquire_attempt` (the provided `acquire` would
/// otherwise bypass the wrapped store's own `acquire`).
#[async_trait]
pub trait LeaseStore: Send + Sync + fmt::Debug + 'static {
    /// The record of `key`, live or not; `None` if it was never acquired.
    async fn read(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError>;

    /// [`LeaseStore::acquire_attempt`] with a [`fresh_attempt`]: a call that is never retried.
    async fn acquire(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        self.acquire_attempt(key, owner, ttl, fresh_attempt()).await
    }

    /// Takes the lease if it is free, released or expired by the store's clock: bumps the epoch,
    /// sets the owner and `expires_at = now + ttl`, records `attempt`, keeps floor, head and tip, and
    /// returns the record. The caller reads the head it must restore from this same record.
    ///
    /// **A retry recognises its own success.** If the lease is live for `owner` *and* was taken
    /// by this same `attempt` (an earlier call of this attempt that timed out but landed), the
    /// store does not refuse it as [`LeaseError::Held`]: it renews it (`expires_at` becomes at
    /// least `now + ttl`, so the caller may count its term from this call) and returns it at the
    /// same epoch. Epochs stay unique and no other tenure is touched: only the caller that
    /// chose `attempt` can name it. A caller retrying after a [`StoreError::Timeout`] passes the
    /// same `attempt`; a new, unrelated acquisition passes a new one ([`fresh_attempt`]).
    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
        attempt: u64,
    ) -> Result<LeaseRecord, LeaseError>;

    /// Extends a live lease of `(owner, epoch)` to `now + ttl`.
    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError>;

    /// Renews many leases of one owner in one round trip; the outcomes follow `leases` in order.
    /// Only a failure to reach the store is an `Err`; a lease that is gone is [`RenewOutcome::Lost`].
    async fn renew_many(
        &self,
        owner: &str,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError>;

    /// Hands a live lease back: it can be acquired at once, at the next epoch.
    async fn release(&self, key: &LeaseKey, owner: &str, epoch: u64) -> Result<(), LeaseError>;

    /// Moves the head to `image`: a compare-and-set that succeeds only while `(owner, epoch)` holds
    /// a live lease, `epoch` is above the floor, and `image.epoch == epoch` (docs/guarantees.md,
    /// promise 4); otherwise [`LeaseError::NotHeld`].
    ///
    /// The head only moves forward: an image whose `(epoch, seq)` is not above the current
    /// head's is refused with [`LeaseError::Stale`], except that publishing exactly the current
    /// head again (same epoch, seq and sha256) succeeds, so a retry recognises its own success.
    async fn publish_head(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        image: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError>;

    /// Moves the log tip from `from` to `to`: a compare-and-set (docs/guarantees.md, "The log
    /// tip") that succeeds only while
    ///
    /// - `(owner, epoch)` holds a live lease by the store's clock, and `epoch` is above the floor
    ///   (otherwise [`LeaseError::NotHeld`]);
    /// - `to` is the next position of this tenure after `from`: `to.epoch == epoch` and
    ///   `to.seq == from.map_or(1, |f| f.seq + 1)` (otherwise [`LeaseError::TipOutOfOrder`],
    ///   checked before the store is asked);
    /// - the current tip equals `from` (otherwise [`LeaseError::TipMoved`], naming the tip).
    ///
    /// It returns the record with the tip at `to`. The tip never moves back nor skips a segment,
    /// and only the live tenure above the floor moves it, so a zombie's move is refused.
    ///
    /// **A retry recognises its own success**: if the tip already equals `to` (a move of this
    /// tenure that landed late) and the lease is still live for `(owner, epoch)` above the floor,
    /// the call succeeds and returns the record unchanged. Only this tenure can have put a
    /// position of its own epoch there, since epochs are never reused.
    ///
    /// A new tenure continues the tip its acquire returned: `from` is that tip (of the older
    /// epoch), `to` is `(its epoch, tip.seq + 1)`. Refusals are definite: nothing changed.
    async fn move_tip(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        from: Option<LogPos>,
        to: LogPos,
    ) -> Result<LeaseRecord, LeaseError>;

    /// Moves the tips of many tenants in one round trip (the runtime coalesces the tip moves of
    /// a replica's tenants this way, as `renew_many` does for renewals). Each outcome is what
    /// [`LeaseStore::move_tip`] would have answered for that move, the moves applied one after
    /// another in order; an outer `Err` (a store that batches and could not be reached) makes
    /// the outcome of every move unknown (each is safe to repeat).
    ///
    /// The provided version makes one `move_tip` call per move; a store that can, makes one
    /// round trip of them (the SQLite store: one transaction). A wrapper forwards it.
    async fn move_tips(&self, moves: &[TipMove]) -> Result<TipOutcomes, LeaseError> {
        let mut outcomes = Vec::with_capacity(moves.len());
        for m in moves {
            // One move's failure is its own: the others are still tried.
            outcomes.push(self.move_tip(&m.key, &m.owner, m.epoch, m.from, m.to).await);
        }
        Ok(outcomes)
    }

    /// Whether [`LeaseStore::move_tips`] is one round trip (then a deadline wrapper bounds
    /// the whole call once; otherwise each move under its own deadline). The provided version
    /// says no.
    fn batches_tip_moves(&self) -> bool {
        false
    }

    /// Raises the floor to `epoch` and clears the head and the tip, for the live `(owner, epoch)`; the lease
    /// stays held so the caller can delete and then release. Repeating it for the same live
    /// tenure (a retry after a timeout that landed) returns the record again.
    ///
    /// It also records a **pending erasure** of `key` at that floor, stamped with the store's
    /// clock (a repeat keeps the first stamp), which [`LeaseStore::erasures_due`] reports once
    /// enough time has passed and [`LeaseStore::erasure_done`] clears.
    async fn mark_forgotten(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
    ) -> Result<LeaseRecord, LeaseError>;

    /// The pending erasures whose forget is at least `settled_for` old by the **store's** clock
    /// (oldest first, at most `limit`): the tenants whose prefix any replica should sweep once
    /// more now that every put sent before the forget has landed or failed. A store that cannot
    /// tell how long ago a forget was (a row of an earlier boot) reports it once its clock has
    /// run `settled_for` since it started.
    async fn erasures_due(
        &self,
        settled_for: Duration,
        limit: usize,
    ) -> Result<Vec<PendingErasure>, LeaseError>;

    /// Clears the pending erasure of `key` at `floor` (a sweep after it was due left nothing at
    /// or below the floor). A pending erasure of another floor (a later forget) stays; clearing
    /// one that is not pending is no error. Needs no lease: any replica may sweep a floor.
    async fn erasure_done(&self, key: &LeaseKey, floor: u64) -> Result<(), LeaseError>;

    /// One page of every lease the store keeps, live or not: the keys at or after `from` (all
    /// keys when `None`), in the store's order of keys, at most `limit` of them (at least one,
    /// [`page_limit`]); [`LeasePage::next`] names where the next page starts. Each entry carries
    /// how long the lease still runs and its pending erasure, both judged by the store's own
    /// clock at the call ([`LeaseEntry`]). A read: it changes nothing and needs no lease. One
    /// key's entry is the first of `list(Some(key), 1)`, if that is the key.
    async fn list(&self, from: Option<&LeaseKey>, limit: usize) -> Result<LeasePage, LeaseError>;
}

/// Shared handle to a lease store.
pub type SharedLeaseStore = Arc<dyn LeaseStore>;

#[async_trait]
impl<S: LeaseStore + ?Sized> LeaseStore for Arc<S> {
    async fn read(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        (**self).read(key).await
    }
    async fn acquire(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        (**self).acquire(key, owner, ttl).await
    }
    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
        attempt: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        (**self).acquire_attempt(key, owner, ttl, attempt).await
    }
    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        (**self).renew(key, owner, epoch, ttl).await
    }
    async fn renew_many(
        &self,
        owner: &str,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError> {
        (**self).renew_many(owner, leases, ttl).await
    }
    async fn release(&self, key: &LeaseKey, owner: &str, epoch: u64) -> Result<(), LeaseError> {
        (**self).release(key, owner, epoch).await
    }
    async fn publish_head(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        image: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError> {
        (**self).publish_head(key, owner, epoch, image).await
    }
    async fn move_tip(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        from: Option<LogPos>,
        to: LogPos,
    ) -> Result<LeaseRecord, LeaseError> {
        (**self).move_tip(key, owner, epoch, from, to).await
    }
    async fn move_tips(&self, moves: &[TipMove]) -> Result<TipOutcomes, LeaseError> {
        (**self).move_tips(moves).await
    }
    fn batches_tip_moves(&self) -> bool {
        (**self).batches_tip_moves()
    }
    async fn mark_forgotten(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        (**self).mark_forgotten(key, owner, epoch).await
    }
    async fn erasures_due(
        &self,
        settled_for: Duration,
        limit: usize,
    ) -> Result<Vec<PendingErasure>, LeaseError> {
        (**self).erasures_due(settled_for, limit).await
    }
    async fn erasure_done(&self, key: &LeaseKey, floor: u64) -> Result<(), LeaseError> {
        (**self).erasure_done(key, floor).await
    }
    async fn list(&self, from: Option<&LeaseKey>, limit: usize) -> Result<LeasePage, LeaseError> {
        (**self).list(from, limit).await
    }
}

/// The holder's view of one tenure: whether it may still act, judged by its own clock.
///
/// `valid_until = sent_at + ttl − margin`, where `sent_at` is the holder's monotonic time when it
/// sent the acquire or renew that the store granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerm {
    /// Holder's monotonic time (ms) when the granting call was sent.
    pub sent_at_ms: u64,
    /// The lease duration asked of the store.
    pub ttl: Duration,
    /// How long before the end the holder stops acting.
    pub margin: Duration,
}

impl LeaseTerm {
    /// The last holder-clock millisecond (exclusive) at which the holder may act.
    pub fn valid_until_ms(&self) -> u64 {
        self.sent_at_ms
            .saturating_add(duration_ms(self.ttl))
            .saturating_sub(duration_ms(self.margin))
    }

    /// Whether the holder may still act at `now_ms` (its own clock).
    pub fn holds_at(&self, now_ms: u64) -> bool {
        now_ms < self.valid_until_ms()
    }

    /// The term a renewal sent at `sent_at_ms` gives, never shorter than this one.
    pub fn renewed(&self, sent_at_ms: u64) -> Self {
        Self {
            sent_at_ms: sent_at_ms.max(self.sent_at_ms),
            ..*self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(sent: u64) -> LeaseTerm {
        LeaseTerm {
            sent_at_ms: sent,
            ttl: Duration::from_millis(10_000),
            margin: Duration::from_millis(2_000),
        }
    }

    #[test]
    fn a_lease_holds_until_margin_before_its_end_counted_from_sending() {
        let t = term(5_000);
        assert_eq!(t.valid_until_ms(), 13_000);
        assert!(t.holds_at(5_000));
        assert!(t.holds_at(12_999));
        assert!(!t.holds_at(13_000));
        assert!(!t.holds_at(20_000));
    }

    #[test]
    fn a_renewal_never_shortens_the_term() {
        let t = term(5_000);
        assert_eq!(t.renewed(7_000).valid_until_ms(), 15_000);
        assert_eq!(
            t.renewed(1_000),
            t,
            "a late answer to an older renewal changes nothing"
        );
    }

    #[test]
    fn a_margin_longer_than_the_ttl_never_holds() {
        let t = LeaseTerm {
            sent_at_ms: 0,
            ttl: Duration::from_millis(1),
            margin: Duration::from_millis(5),
        };
        assert!(!t.holds_at(0));
    }
}
