//! A durable store that counts what is asked of it — requests by operation, bytes put, the time
//! of each put — and passes every call on: "durable bytes and store requests per 1,000 writes"
//! and the put stage of a `Shipped` batch are read through it, from outside the runtime.
//!
//! `LEASEHOLD_BENCH_PUT_LATENCY_MS=N` adds N ms to every put before it reaches the store, puts
//! overlapping freely: a model of a store far away (an S3 region's ~10–30 ms per `PUT`), the
//! case pipelined segments are for; the output says when it is on.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use leasehold::durable::{DurableStore, ListPage, Put, SharedDurableStore, StoreError};

/// What was counted since the last [`CountingDurable::take`].
#[derive(Debug, Default, Clone)]
pub struct Counted {
    /// Requests by operation.
    pub calls: BTreeMap<&'static str, u64>,
    /// Bytes given to `put_if_absent`.
    pub put_bytes: u64,
    /// How long each `put_if_absent` took.
    pub puts: Vec<Duration>,
}

impl Counted {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.calls.values().sum()
    }

    /// Requests of `op`.
    pub fn of(&self, op: &str) -> u64 {
        self.calls.get(op).copied().unwrap_or(0)
    }
}

/// `LEASEHOLD_BENCH_PUT_LATENCY_MS`, if set: the latency added to every put.
pub fn added_put_latency() -> Option<Duration> {
    std::env::var("LEASEHOLD_BENCH_PUT_LATENCY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_millis)
}

/// Counts every request made of the store it wraps.
pub struct CountingDurable {
    /// The store.
    inner: SharedDurableStore,
    /// The counts.
    counted: Mutex<Counted>,
}

impl fmt::Debug for CountingDurable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingDurable").finish_non_exhaustive()
    }
}

impl CountingDurable {
    /// Counts the requests made of `inner`.
    pub fn new(inner: SharedDurableStore) -> Self {
        Self {
            inner,
            counted: Mutex::new(Counted::default()),
        }
    }

    /// What was counted since the last take; starts over.
    pub fn take(&self) -> Counted {
        std::mem::take(&mut *self.counted.lock().unwrap())
    }

    fn count(&self, op: &'static str) {
        *self.counted.lock().unwrap().calls.entry(op).or_default() += 1;
    }
}

#[async_trait]
impl DurableStore for CountingDurable {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        self.count("put");
        let len = bytes.len() as u64;
        let started = Instant::now();
        if let Some(latency) = added_put_latency() {
            tokio::time::sleep(latency).await;
        }
        let put = self.inner.put_if_absent(key, bytes).await;
        let mut counted = self.counted.lock().unwrap();
        counted.put_bytes += len;
        counted.puts.push(started.elapsed());
        put
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.count("get");
        self.inner.get(key).await
    }
    async fn get_sized(&self, key: &str, expected: u64) -> Result<Option<Vec<u8>>, StoreError> {
        self.count("get");
        self.inner.get_sized(key, expected).await
    }
    async fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        self.count("size");
        self.inner.size(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.count("list");
        self.inner.list(prefix).await
    }
    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, StoreError> {
        self.count("list");
        self.inner.list_page(prefix, start_after, max_keys).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.count("delete");
        self.inner.delete(key).await
    }
    async fn delete_keys(&self, keys: &[String]) -> Result<(), StoreError> {
        self.count("delete");
        self.inner.delete_keys(keys).await
    }
    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        self.count("delete");
        self.inner.delete_prefix(prefix).await
    }
    async fn settle_puts(&self, prefix: &str, limit: Duration) -> Result<(), StoreError> {
        self.inner.settle_puts(prefix, limit).await
    }
    async fn settle_put(&self, key: &str, limit: Duration) -> Result<(), StoreError> {
        self.inner.settle_put(key, limit).await
    }
}
