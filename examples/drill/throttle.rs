//! Slow backends, switched on for a whole run (every replica and the final checker alike):
//!
//! * [`Link`]: the durable store behind a link of a given throughput (`--store-mib-per-sec`).
//!   Every put and get moves its bytes through the link, which the transfers of one process
//!   share fairly (each of `n` transfers under way moves at `rate / n`), so a restore that
//!   fetches many segments at once is as slow as their bytes together. Listings and deletes
//!   carry no payload and pass at once. The runtime's deadlines grow with a put's size (and an
//!   image's sized get) for a store of at least 8 MiB/s (docs/guarantees.md, the longest store
//!   call); a link at that rate or faster is a store the runtime promises to work with.
//! * [`SlowLeases`]: every lease-store call waits a fixed time first (`--lease-delay-ms`), a
//!   healthy but slow database: the time a statement takes on the server, paid once per call
//!   (a batch of tip moves that is one statement pays it once).
//!
//! ```text
//!  runtime ─> Deadline ─> FaultyStore ─> LatePuts ─> Link ─> DirStore | S3Store
//!  runtime ─> Deadline ─> FaultyLeaseStore ─> SlowLeases ─> AcquireTimes ─> SQLite | PostgreSQL
//! ```

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use leasehold::LeaseKey;
use leasehold::durable::{DurableStore, ListPage, Put, SharedDurableStore, StoreError};
use leasehold::layout::{ImageRef, LogPos};
use leasehold::lease::{
    LeaseError, LeaseRecord, LeaseStore, RenewOutcome, SharedLeaseStore, TipMove, TipOutcomes,
};

/// How often a transfer on a shared link looks again at how many share it.
const TICK: Duration = Duration::from_millis(10);

/// A durable store behind a link of `bytes_per_sec`, shared fairly by the transfers under way.
#[derive(Debug, Clone)]
pub struct Link {
    /// The store every call goes to.
    inner: SharedDurableStore,
    /// The link's throughput.
    bytes_per_sec: f64,
    /// How many transfers are under way.
    active: Arc<Mutex<usize>>,
}

/// One transfer registered on the link; leaving it (dropped, also when its caller gives up)
/// frees its share.
struct Transfer<'a> {
    /// The link's counter.
    active: &'a Mutex<usize>,
}

impl Drop for Transfer<'_> {
    fn drop(&mut self) {
        let mut n = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        *n = n.saturating_sub(1);
    }
}

impl Link {
    /// `inner` behind a link of `mib_per_sec` MiB/s.
    pub fn new(inner: SharedDurableStore, mib_per_sec: f64) -> Self {
        Self {
            inner,
            bytes_per_sec: mib_per_sec.max(0.001) * 1024.0 * 1024.0,
            active: Arc::default(),
        }
    }

    /// Takes as long as moving `bytes` through the link while sharing it with the transfers
    /// under way (counted again every [`TICK`]).
    async fn transfer(&self, bytes: usize) {
        let _share = {
            let mut n = self.active.lock().unwrap_or_else(PoisonError::into_inner);
            *n += 1;
            Transfer {
                active: &self.active,
            }
        };
        let mut left = bytes as f64;
        while left > 0.0 {
            let sharing = (*self.active.lock().unwrap_or_else(PoisonError::into_inner)).max(1);
            let rate = self.bytes_per_sec / sharing as f64;
            let needed = Duration::from_secs_f64(left / rate);
            if needed <= TICK {
                tokio::time::sleep(needed).await;
                break;
            }
            tokio::time::sleep(TICK).await;
            left -= rate * TICK.as_secs_f64();
        }
    }
}

#[async_trait]
impl DurableStore for Link {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        self.transfer(bytes.len()).await;
        self.inner.put_if_absent(key, bytes).await
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let found = self.inner.get(key).await?;
        self.transfer(found.as_ref().map_or(0, Vec::len)).await;
        Ok(found)
    }
    async fn get_sized(&self, key: &str, expected: u64) -> Result<Option<Vec<u8>>, StoreError> {
        let found = self.inner.get_sized(key, expected).await?;
        self.transfer(found.as_ref().map_or(0, Vec::len)).await;
        Ok(found)
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.inner.list(prefix).await
    }
    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, StoreError> {
        self.inner.list_page(prefix, start_after, max_keys).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.inner.delete(key).await
    }
    async fn delete_keys(&self, keys: &[String]) -> Result<(), StoreError> {
        self.inner.delete_keys(keys).await
    }
    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        self.inner.delete_prefix(prefix).await
    }
    async fn settle_puts(&self, prefix: &str, limit: Duration) -> Result<(), StoreError> {
        self.inner.settle_puts(prefix, limit).await
    }
    async fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        // One small request (a stat, a HEAD): no payload crosses the link.
        self.inner.size(key).await
    }
    async fn settle_put(&self, key: &str, limit: Duration) -> Result<(), StoreError> {
        self.inner.settle_put(key, limit).await
    }
}

/// A lease store each of whose calls waits `delay` before it goes to the store.
#[derive(Debug, Clone)]
pub struct SlowLeases {
    /// The store every call goes to.
    inner: SharedLeaseStore,
    /// The wait of each call.
    delay: Duration,
}

impl SlowLeases {
    /// `inner`, each call `delay` slower.
    pub fn new(inner: SharedLeaseStore, delay: Duration) -> Self {
        Self { inner, delay }
    }

    async fn wait(&self) {
        tokio::time::sleep(self.delay).await;
    }
}

#[async_trait]
impl LeaseStore for SlowLeases {
    async fn read(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        self.wait().await;
        self.inner.read(key).await
    }
    async fn acquire(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        self.wait().await;
        self.inner.acquire(key, owner, ttl).await
    }
    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
        attempt: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        self.wait().await;
        self.inner.acquire_attempt(key, owner, ttl, attempt).await
    }
    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        self.wait().await;
        self.inner.renew(key, owner, epoch, ttl).await
    }
    async fn renew_many(
        &self,
        owner: &str,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError> {
        self.wait().await;
        self.inner.renew_many(owner, leases, ttl).await
    }
    async fn release(&self, key: &LeaseKey, owner: &str, epoch: u64) -> Result<(), LeaseError> {
        self.wait().await;
        self.inner.release(key, owner, epoch).await
    }
    async fn publish_head(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        image: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError> {
        self.wait().await;
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
        self.wait().await;
        self.inner.move_tip(key, owner, epoch, from, to).await
    }
    async fn move_tips(&self, moves: &[TipMove]) -> Result<TipOutcomes, LeaseError> {
        if !self.inner.batches_tip_moves() {
            // One statement per move: each pays the wait.
            let mut outcomes = Vec::with_capacity(moves.len());
            for m in moves {
                outcomes.push(self.move_tip(&m.key, &m.owner, m.epoch, m.from, m.to).await);
            }
            return Ok(outcomes);
        }
        self.wait().await;
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
        self.wait().await;
        self.inner.mark_forgotten(key, owner, epoch).await
    }
    async fn erasures_due(
        &self,
        settled_for: Duration,
        limit: usize,
    ) -> Result<Vec<leasehold::lease::PendingErasure>, LeaseError> {
        self.wait().await;
        self.inner.erasures_due(settled_for, limit).await
    }
    async fn erasure_done(&self, key: &LeaseKey, floor: u64) -> Result<(), LeaseError> {
        self.wait().await;
        self.inner.erasure_done(key, floor).await
    }
    async fn list(
        &self,
        from: Option<&LeaseKey>,
        limit: usize,
    ) -> Result<leasehold::lease::LeasePage, LeaseError> {
        self.wait().await;
        self.inner.list(from, limit).await
    }
}
