//! A lease store that counts the calls made of it, by operation, and times `renew_many` and the
//! tip moves: the figure "lease-store calls per renewal tick" and the tip-move stage of a
//! `Shipped` batch are read through it, from outside the runtime.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use leasehold::LeaseKey;
use leasehold::layout::{ImageRef, LogPos};
use leasehold::lease::{
    LeaseError, LeasePage, LeaseRecord, LeaseStore, PendingErasure, RenewOutcome, SharedLeaseStore,
    TipMove, TipOutcomes,
};

/// What was counted since the last [`Counting::take`].
#[derive(Debug, Default, Clone)]
pub struct Counted {
    /// Calls by operation.
    pub calls: BTreeMap<&'static str, u64>,
    /// How long each `renew_many` took.
    pub renewals: Vec<Duration>,
    /// How many leases the `renew_many` calls carried, in all.
    pub renewed_leases: u64,
    /// How long each tip-moving call (`move_tip`, `move_tips`) took.
    pub tip_moves: Vec<Duration>,
}

impl Counted {
    /// All calls.
    pub fn total(&self) -> u64 {
        self.calls.values().sum()
    }

    /// Calls of `op`.
    pub fn of(&self, op: &str) -> u64 {
        self.calls.get(op).copied().unwrap_or(0)
    }
}

/// Counts every call made of the store it wraps.
#[derive(Debug)]
pub struct Counting {
    /// The store.
    inner: SharedLeaseStore,
    /// The counts.
    counted: Mutex<Counted>,
}

impl Counting {
    /// Counts the calls made of `inner`.
    pub fn new(inner: SharedLeaseStore) -> Self {
        Self {
            inner,
            counted: Mutex::new(Counted::default()),
        }
    }

    /// What was counted since the last take; starts over.
    pub fn take(&self) -> Counted {
        std::mem::take(&mut *self.counted.lock().unwrap())
    }

    fn timed_tip(&self, took: Duration) {
        self.counted.lock().unwrap().tip_moves.push(took);
    }

    fn count(&self, op: &'static str) {
        *self.counted.lock().unwrap().calls.entry(op).or_default() += 1;
    }
}

#[async_trait]
impl LeaseStore for Counting {
    async fn read(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        self.count("read");
        self.inner.read(key).await
    }
    async fn acquire(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        self.count("acquire");
        self.inner.acquire(key, owner, ttl).await
    }
    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
        attempt: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        self.count("acquire");
        self.inner.acquire_attempt(key, owner, ttl, attempt).await
    }
    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        self.count("renew");
        self.inner.renew(key, owner, epoch, ttl).await
    }
    async fn renew_many(
        &self,
        owner: &str,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError> {
        self.count("renew_many");
        let started = Instant::now();
        let renewed = self.inner.renew_many(owner, leases, ttl).await;
        let mut counted = self.counted.lock().unwrap();
        counted.renewals.push(started.elapsed());
        counted.renewed_leases += leases.len() as u64;
        renewed
    }
    async fn release(&self, key: &LeaseKey, owner: &str, epoch: u64) -> Result<(), LeaseError> {
        self.count("release");
        self.inner.release(key, owner, epoch).await
    }
    async fn publish_head(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        image: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError> {
        self.count("publish_head");
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
        self.count("move_tip");
        let started = Instant::now();
        let moved = self.inner.move_tip(key, owner, epoch, from, to).await;
        self.timed_tip(started.elapsed());
        moved
    }
    async fn move_tips(&self, moves: &[TipMove]) -> Result<TipOutcomes, LeaseError> {
        self.count("move_tips");
        let started = Instant::now();
        let moved = self.inner.move_tips(moves).await;
        self.timed_tip(started.elapsed());
        moved
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
        self.count("mark_forgotten");
        self.inner.mark_forgotten(key, owner, epoch).await
    }
    async fn erasures_due(
        &self,
        settled_for: Duration,
        limit: usize,
    ) -> Result<Vec<PendingErasure>, LeaseError> {
        self.count("erasures_due");
        self.inner.erasures_due(settled_for, limit).await
    }
    async fn erasure_done(&self, key: &LeaseKey, floor: u64) -> Result<(), LeaseError> {
        self.count("erasure_done");
        self.inner.erasure_done(key, floor).await
    }
    async fn list(&self, from: Option<&LeaseKey>, limit: usize) -> Result<LeasePage, LeaseError> {
        self.count("list");
        self.inner.list(from, limit).await
    }
}
