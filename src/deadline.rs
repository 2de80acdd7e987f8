//! [`Deadline`]: every call of the wrapped lease or durable store settles within a limit
//! (promise 6 in docs/guarantees.md, "every store call has a deadline").
//!
//! `Deadline<S>` is a [`LeaseStore`] when `S` is one and a [`DurableStore`] when `S` is one, so it
//! stacks on any backend or wrapper, including `Arc<dyn LeaseStore>` and `Arc<dyn DurableStore>`.
//! A call that has not answered when the limit runs out is dropped and reported as
//! [`StoreError::Timeout`]; its effect on the backend is unknown (it may still land later:
//! [`LeaseError::outcome_unknown`], docs/guarantees.md "Late landings"), and a lease must then be
//! treated as not held. A retried acquire passes the same attempt id
//! ([`LeaseStore::acquire_attempt`]), which this wrapper forwards.
//!
//! A put carries its payload, so its deadline grows with it: `limit` plus one second per
//! [`MIN_PUT_BYTES_PER_SEC`] bytes. A 1 GiB image on a 10 s limit gets 10 s + 128 s; a store
//! slower than 8 MiB/s is treated as not answering. A get of an object whose size the caller
//! knows ([`DurableStore::get_sized`]) gets the same allowance.
//!
//! ## Late puts
//! A put that outlives its deadline is not dropped: it runs on to its end on a task of its own
//! (the caller hears [`StoreError::Timeout`], outcome unknown), registered in a
//! [`PutsInFlight`] until it settles, so that [`DurableStore::settle_puts`] can wait for every
//! put under a tenant's prefix before a sweep (docs/guarantees.md, promise 5, "erasure of late
//! puts"). How long such a put can live is the backend's bound, not this wrapper's: a
//! [`crate::durable::dir::DirStore`] put runs on a blocking thread until the disk answers; an
//! `S3Store` put is cut at its `S3Limits::op_timeout` (120 s by default). A task dropped with its
//! runtime leaves the registry then.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::clock::duration_ms;
use crate::durable::{DurableStore, ListPage, Put, PutsInFlight, StoreError};
use crate::error::Error;
use crate::ids::LeaseKey;
use crate::layout::{ImageRef, LogPos};
use crate::lease::{LeaseError, LeaseRecord, LeaseStore, RenewOutcome};

/// The slowest upload rate a put is given time for: 8 MiB/s.
pub const MIN_PUT_BYTES_PER_SEC: u64 = 8 * 1024 * 1024;

/// The slowest rate a bulk delete is given time for: 100 keys a second. A page of a sweep (500
/// keys) gets `limit` + 5 s.
pub const MIN_DELETE_KEYS_PER_SEC: u64 = 100;

/// The deadline of a [`DurableStore::delete_keys`] of `keys` keys on a store whose calls get
/// `limit`: `limit` plus one second per [`MIN_DELETE_KEYS_PER_SEC`] keys, so a bulk delete is
/// not cut short for carrying many keys (docs/guarantees.md, "the erasure bound").
pub fn delete_deadline(limit: Duration, keys: usize) -> Duration {
    let keys = u64::try_from(keys).unwrap_or(u64::MAX);
    limit.saturating_add(Duration::from_millis(
        keys.saturating_mul(1_000) / MIN_DELETE_KEYS_PER_SEC,
    ))
}

/// The deadline of a put of `bytes` bytes on a store whose calls get `limit`, and of a get of an
/// object of that size ([`DurableStore::get_sized`]).
pub fn put_deadline(limit: Duration, bytes: usize) -> Duration {
    let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
    limit.saturating_add(Duration::from_millis(
        bytes.saturating_mul(1_000) / MIN_PUT_BYTES_PER_SEC,
    ))
}

/// A store whose every call settles within `limit`.
#[derive(Debug)]
pub struct Deadline<S> {
    /// The wrapped store; shared with the tasks of puts that outlive their caller.
    inner: Arc<S>,
    /// How long one call may take; never zero.
    limit: Duration,
    /// The puts still running, so that a forget can wait for them before it sweeps.
    puts: PutsInFlight,
}

impl<S> Clone for Deadline<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            limit: self.limit,
            puts: self.puts.clone(),
        }
    }
}

impl<S> Deadline<S> {
    /// Wraps `inner` so that each call gets at most `limit`. A zero `limit` would fail every call
    /// and is refused with [`Error::InvalidOption`] (`store_deadline`).
    pub fn new(inner: S, limit: Duration) -> Result<Self, Error> {
        if limit.is_zero() {
            return Err(Error::InvalidOption {
                name: "store_deadline",
                reason: "must be greater than zero".to_owned(),
            });
        }
        Ok(Self {
            inner: Arc::new(inner),
            limit,
            puts: PutsInFlight::new(),
        })
    }

    /// How long one call may take.
    pub fn limit(&self) -> Duration {
        self.limit
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The wrapped store, shared with the puts still running.
    pub fn into_inner(self) -> Arc<S> {
        self.inner
    }

    /// How many puts of keys under `prefix` still run (some perhaps past their caller's
    /// deadline).
    pub fn puts_running(&self, prefix: &str) -> usize {
        self.puts.running(prefix)
    }

    /// Runs `call`, or gives up with [`StoreError::Timeout`] once `limit` has passed.
    async fn settle<T, E: From<StoreError>>(
        &self,
        op: &'static str,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        settle_within(self.limit, op, call).await
    }
}

/// Runs `call`, or gives up with [`StoreError::Timeout`] once `limit` has passed.
async fn settle_within<T, E: From<StoreError>>(
    limit: Duration,
    op: &'static str,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    match tokio::time::timeout(limit, call).await {
        Ok(answer) => answer,
        Err(_elapsed) => Err(StoreError::Timeout {
            op,
            after_ms: duration_ms(limit),
        }
        .into()),
    }
}

#[async_trait]
impl<S: DurableStore> DurableStore for Deadline<S> {
    /// Runs the put on a task of its own, registered until it settles; the caller waits for it
    /// at most [`put_deadline`]. See the module docs, "Late puts".
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        let limit = put_deadline(self.limit, bytes.len());
        let (inner, owned_key) = (Arc::clone(&self.inner), key.to_owned());
        let entry = self.puts.enter(key);
        let put = tokio::spawn(async move {
            let _running = entry;
            inner.put_if_absent(&owned_key, bytes).await
        });
        let joined = async {
            put.await.map_err(|e| StoreError::Backend {
                op: "put_if_absent",
                message: format!("the put's task did not finish: {e}"),
            })?
        };
        settle_within(limit, "put_if_absent", joined).await
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.settle("get", self.inner.get(key)).await
    }
    async fn get_sized(&self, key: &str, expected: u64) -> Result<Option<Vec<u8>>, StoreError> {
        let bytes = usize::try_from(expected).unwrap_or(usize::MAX);
        let limit = put_deadline(self.limit, bytes);
        settle_within(limit, "get", self.inner.get_sized(key, expected)).await
    }
    /// A size carries no payload: one call's `limit`.
    async fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        self.settle("size", self.inner.size(key)).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.settle("list", self.inner.list(prefix)).await
    }
    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, StoreError> {
        let page = self.inner.list_page(prefix, start_after, max_keys);
        self.settle("list_page", page).await
    }
    /// Waits for this wrapper's own puts under `prefix`, then for the wrapped store's, all
    /// within `limit`.
    async fn settle_puts(&self, prefix: &str, limit: Duration) -> Result<(), StoreError> {
        let started = tokio::time::Instant::now();
        self.puts.settle(prefix, limit).await?;
        let left = limit.saturating_sub(started.elapsed());
        self.inner.settle_puts(prefix, left).await
    }
    /// Waits for this wrapper's own puts of exactly `key`, then for the wrapped store's.
    async fn settle_put(&self, key: &str, limit: Duration) -> Result<(), StoreError> {
        let started = tokio::time::Instant::now();
        self.puts.settle_key(key, limit).await?;
        let left = limit.saturating_sub(started.elapsed());
        self.inner.settle_put(key, left).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.settle("delete", self.inner.delete(key)).await
    }
    /// Gets [`delete_deadline`]: more time for more keys.
    async fn delete_keys(&self, keys: &[String]) -> Result<(), StoreError> {
        let limit = delete_deadline(self.limit, keys.len());
        settle_within(limit, "delete_keys", self.inner.delete_keys(keys)).await
    }
    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        self.settle("delete_prefix", self.inner.delete_prefix(prefix))
            .await
    }
}

#[async_trait]
impl<S: LeaseStore> LeaseStore for Deadline<S> {
    async fn read(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        self.settle("read", self.inner.read(key)).await
    }
    async fn acquire(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        self.settle("acquire", self.inner.acquire(key, owner, ttl))
            .await
    }
    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
        attempt: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        let call = self.inner.acquire_attempt(key, owner, ttl, attempt);
        self.settle("acquire", call).await
    }
    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        self.settle("renew", self.inner.renew(key, owner, epoch, ttl))
            .await
    }
    async fn renew_many(
        &self,
        owner: &str,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError> {
        self.settle("renew_many", self.inner.renew_many(owner, leases, ttl))
            .await
    }
    async fn release(&self, key: &LeaseKey, owner: &str, epoch: u64) -> Result<(), LeaseError> {
        self.settle("release", self.inner.release(key, owner, epoch))
            .await
    }
    async fn publish_head(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        image: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError> {
        self.settle(
            "publish_head",
            self.inner.publish_head(key, owner, epoch, image),
        )
        .await
    }
    async fn move_tip(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        from: Option<LogPos>,
        to: LogPos,
    ) -> Result<LeaseRecord, LeaseError> {
        let call = self.inner.move_tip(key, owner, epoch, from, to);
        self.settle("move_tip", call).await
    }
    async fn move_tips(
        &self,
        moves: &[crate::lease::TipMove],
    ) -> Result<crate::lease::TipOutcomes, LeaseError> {
        if self.inner.batches_tip_moves() {
            // One round trip: one deadline.
            return self.settle("move_tips", self.inner.move_tips(moves)).await;
        }
        // One call per move: each under its own deadline, each failure its own.
        let mut outcomes = Vec::with_capacity(moves.len());
        for m in moves {
            outcomes.push(self.move_tip(&m.key, &m.owner, m.epoch, m.from, m.to).await);
        }
        Ok(outcomes)
    }
    fn batches_tip_moves(&self) -> bool {
        self.inner.batches_tip_moves()
    }
    async fn mark_forgotten(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        self.settle(
            "mark_forgotten",
            self.inner.mark_forgotten(key, owner, epoch),
        )
        .await
    }
    async fn erasures_due(
        &self,
        settled_for: Duration,
        limit: usize,
    ) -> Result<Vec<crate::lease::PendingErasure>, LeaseError> {
        let call = self.inner.erasures_due(settled_for, limit);
        self.settle("erasures_due", call).await
    }
    async fn erasure_done(&self, key: &LeaseKey, floor: u64) -> Result<(), LeaseError> {
        self.settle("erasure_done", self.inner.erasure_done(key, floor))
            .await
    }
    async fn list(
        &self,
        from: Option<&LeaseKey>,
        limit: usize,
    ) -> Result<crate::lease::LeasePage, LeaseError> {
        self.settle("list", self.inner.list(from, limit)).await
    }
}

#[cfg(test)]
mod put_deadline_tests {
    use super::*;

    #[test]
    fn hole11_a_bulk_deletes_deadline_grows_with_its_keys() {
        let limit = Duration::from_secs(1);
        assert_eq!(delete_deadline(limit, 0), limit);
        assert_eq!(delete_deadline(limit, 1), Duration::from_millis(1_010));
        assert_eq!(delete_deadline(limit, 500), Duration::from_secs(6));
        assert_eq!(delete_deadline(limit, 1_000), Duration::from_secs(11));
        assert!(delete_deadline(limit, usize::MAX) > limit);
    }

    #[test]
    fn a_puts_deadline_grows_with_its_payload() {
        let limit = Duration::from_secs(10);
        assert_eq!(put_deadline(limit, 0), limit);
        assert_eq!(
            put_deadline(limit, 8 * 1024 * 1024),
            Duration::from_secs(11)
        );
        assert_eq!(put_deadline(limit, 1 << 30), Duration::from_secs(138));
        assert_eq!(
            put_deadline(limit, usize::MAX),
            put_deadline(limit, usize::MAX)
        );
    }
}

#[cfg(test)]
mod tests;
