//! [`AcquireTimes`]: a lease store wrapper that notes, for each tenure a replica acquired, the
//! replica's own monotonic time ([`now_ms`]) when the store's answer came back.
//!
//! That is a time by which the lease was surely acquired (the store granted it before it
//! answered), read on the clock every drill timestamp uses, whatever clock the store judges
//! expiry by. It bounds a tenure's start more tightly than the end of the open (which also
//! fetches and installs the head image), and on PostgreSQL it is the only bound the drill has:
//! the record's `expires_at` is the server's wall clock there.
//!
//! ```text
//!  runtime ─> FaultyLeaseStore ─> AcquireTimes ─> SqliteLeaseStore | PostgresLeaseStore
//!                                   └─ key → (epoch, now_ms() after its acquire returned Ok)
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use leasehold::LeaseKey;
use leasehold::layout::{ImageRef, LogPos};
use leasehold::lease::{
    LeaseError, LeaseRecord, LeaseStore, RenewOutcome, SharedLeaseStore, TipMove, TipOutcomes,
};

use crate::protocol::now_ms;

/// The latest acquisition of each key: `key → (epoch, returned at)`. One entry per key, so it
/// stays as small as the run's tenants.
type Latest = HashMap<String, (u64, u64)>;

/// A lease store that notes when each acquire returned. Clones share the notes.
#[derive(Debug, Clone)]
pub struct AcquireTimes {
    /// The store every call goes to.
    inner: SharedLeaseStore,
    /// The notes.
    latest: Arc<Mutex<Latest>>,
}

impl AcquireTimes {
    /// Wraps `inner`.
    pub fn new(inner: SharedLeaseStore) -> Self {
        Self {
            inner,
            latest: Arc::default(),
        }
    }

    /// When the acquire of `(key, epoch)` returned on this replica, if it was this replica's
    /// latest acquisition of `key`.
    pub fn returned_at(&self, key: &LeaseKey, epoch: u64) -> Option<u64> {
        let latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        latest
            .get(&key.to_string())
            .filter(|&&(e, _)| e == epoch)
            .map(|&(_, at)| at)
    }

    /// Notes that the acquire of `record` returned now.
    fn note(&self, key: &LeaseKey, record: LeaseRecord) -> LeaseRecord {
        let at = now_ms();
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        latest.insert(key.to_string(), (record.epoch, at));
        record
    }
}

#[async_trait]
impl LeaseStore for AcquireTimes {
    async fn read(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        self.inner.read(key).await
    }
    async fn acquire(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        let record = self.inner.acquire(key, owner, ttl).await?;
        Ok(self.note(key, record))
    }
    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
        attempt: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        let record = self.inner.acquire_attempt(key, owner, ttl, attempt).await?;
        Ok(self.note(key, record))
    }
    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        self.inner.renew(key, owner, epoch, ttl).await
    }
    async fn renew_many(
        &self,
        owner: &str,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError> {
        self.inner.renew_many(owner, leases, ttl).await
    }
    async fn release(&self, key: &LeaseKey, owner: &str, epoch: u64) -> Result<(), LeaseError> {
        self.inner.release(key, owner, epoch).await
    }
    async fn publish_head(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        image: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError> {
        self.inner.publish_head(key, owner, epoch, image).await
    }
    async fn move_tip(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        from: Option<LogPos>,
        to: LogPos,
    ) -> Result<LeaseRecord, LeaseError> {
        self.inner.move_tip(key, owner, epoch, from, to).await
    }
    async fn move_tips(&self, moves: &[TipMove]) -> Result<TipOutcomes, LeaseError> {
        // The backend's own batch (one transaction on SQLite), as the runtime would use it.
        self.inner.move_tips(moves).await
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
        self.inner.mark_forgotten(key, owner, epoch).await
    }
    async fn erasures_due(
        &self,
        settled_for: Duration,
        limit: usize,
    ) -> Result<Vec<leasehold::lease::PendingErasure>, LeaseError> {
        self.inner.erasures_due(settled_for, limit).await
    }
    async fn erasure_done(&self, key: &LeaseKey, floor: u64) -> Result<(), LeaseError> {
        self.inner.erasure_done(key, floor).await
    }
    async fn list(
        &self,
        from: Option<&LeaseKey>,
        limit: usize,
    ) -> Result<leasehold::lease::LeasePage, LeaseError> {
        self.inner.list(from, limit).await
    }
}
