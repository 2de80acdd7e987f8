//! A durable store that counts what passes through it: requests by kind (puts, gets, sizes,
//! lists, deletes) and the bytes put, segments apart from the rest, and keeps the segments put
//! (the real segments the codec measurement compresses). Every call is passed on unchanged.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use leasehold::durable::{DurableStore, ListPage, Put, SharedDurableStore, StoreError};

/// What a [`Counting`] store saw, from its start or between two [`Counts`] taken.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// `put_if_absent` calls (one PUT each on S3).
    pub puts: u64,
    /// Of which segments (`.seg`).
    pub segment_puts: u64,
    /// Bytes put, every object.
    pub put_bytes: u64,
    /// Bytes put in segments.
    pub segment_bytes: u64,
    /// `get` and `get_sized` calls (one GET each).
    pub gets: u64,
    /// `size` calls (one HEAD each).
    pub sizes: u64,
    /// `list` and `list_page` calls (at least one LIST each).
    pub lists: u64,
    /// `delete`, `delete_keys` and `delete_prefix` calls (one DELETE or one bulk delete each,
    /// per 1,000 keys on S3).
    pub deletes: u64,
}

impl Counts {
    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: Counts) -> Counts {
        Counts {
            puts: self.puts - earlier.puts,
            segment_puts: self.segment_puts - earlier.segment_puts,
            put_bytes: self.put_bytes - earlier.put_bytes,
            segment_bytes: self.segment_bytes - earlier.segment_bytes,
            gets: self.gets - earlier.gets,
            sizes: self.sizes - earlier.sizes,
            lists: self.lists - earlier.lists,
            deletes: self.deletes - earlier.deletes,
        }
    }
}

/// The counting wrapper.
#[derive(Debug)]
pub struct Counting {
    inner: SharedDurableStore,
    puts: AtomicU64,
    segment_puts: AtomicU64,
    put_bytes: AtomicU64,
    segment_bytes: AtomicU64,
    gets: AtomicU64,
    sizes: AtomicU64,
    lists: AtomicU64,
    deletes: AtomicU64,
    /// Segments put, up to [`KEEP`] of them.
    kept: Mutex<Vec<(String, Vec<u8>)>>,
}

/// How many segments a counting store keeps for the codec measurement.
const KEEP: usize = 400;

impl Counting {
    /// Counts the calls made to `inner`.
    pub fn new(inner: SharedDurableStore) -> Self {
        Self {
            inner,
            puts: AtomicU64::new(0),
            segment_puts: AtomicU64::new(0),
            put_bytes: AtomicU64::new(0),
            segment_bytes: AtomicU64::new(0),
            gets: AtomicU64::new(0),
            sizes: AtomicU64::new(0),
            lists: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
            kept: Mutex::new(Vec::new()),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counts {
            puts: get(&self.puts),
            segment_puts: get(&self.segment_puts),
            put_bytes: get(&self.put_bytes),
            segment_bytes: get(&self.segment_bytes),
            gets: get(&self.gets),
            sizes: get(&self.sizes),
            lists: get(&self.lists),
            deletes: get(&self.deletes),
        }
    }

    /// The segments put so far (key and bytes), at most [`KEEP`].
    pub fn kept_segments(&self) -> Vec<(String, Vec<u8>)> {
        self.kept.lock().map(|k| k.clone()).unwrap_or_default()
    }
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

#[async_trait]
impl DurableStore for Counting {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        let len = bytes.len() as u64;
        bump(&self.puts, 1);
        bump(&self.put_bytes, len);
        if key.ends_with(".seg") {
            bump(&self.segment_puts, 1);
            bump(&self.segment_bytes, len);
            if let Ok(mut kept) = self.kept.lock()
                && kept.len() < KEEP
            {
                kept.push((key.to_string(), bytes.clone()));
            }
        }
        self.inner.put_if_absent(key, bytes).await
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        bump(&self.gets, 1);
        self.inner.get(key).await
    }
    async fn get_sized(&self, key: &str, expected: u64) -> Result<Option<Vec<u8>>, StoreError> {
        bump(&self.gets, 1);
        self.inner.get_sized(key, expected).await
    }
    async fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        bump(&self.sizes, 1);
        self.inner.size(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        bump(&self.lists, 1);
        self.inner.list(prefix).await
    }
    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, StoreError> {
        bump(&self.lists, 1);
        self.inner.list_page(prefix, start_after, max_keys).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        bump(&self.deletes, 1);
        self.inner.delete(key).await
    }
    async fn delete_keys(&self, keys: &[String]) -> Result<(), StoreError> {
        bump(&self.deletes, 1);
        self.inner.delete_keys(keys).await
    }
    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        bump(&self.deletes, 1);
        self.inner.delete_prefix(prefix).await
    }
    async fn settle_puts(&self, prefix: &str, limit: Duration) -> Result<(), StoreError> {
        self.inner.settle_puts(prefix, limit).await
    }
    async fn settle_put(&self, key: &str, limit: Duration) -> Result<(), StoreError> {
        self.inner.settle_put(key, limit).await
    }
}
