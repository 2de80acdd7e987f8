//! [`LatePuts`]: a durable store wrapper whose puts, while switched on, take effect late — after
//! their caller gave up. The put runs on a task of its own that waits, then writes; the caller
//! awaits that task, and when its deadline drops the wait the task still writes. That is how an
//! S3 PUT already sent, or a `DirStore` put on a blocking thread, lands after a timeout (every
//! store call may land late), which `FaultyStore`'s stalls (they drop the call) do not model.
//!
//! ```text
//!  runtime ─> FaultyStore ─> LatePuts ─> DirStore | S3Store
//!                              └─ on: put = spawn(sleep(late); inner.put) — awaited, never cancelled
//! ```
//!
//! Every other call goes to the wrapped store as it is, its own version included (a bulk
//! delete, a paged listing, a sized get): the runtime meets the backend's calls, not the trait's
//! defaults — except a bulk delete with `--delete-one-by-one`, which goes one key at a time, as
//! on a backend without one (the trait's default, `DirStore`'s).
//!
//! Only images and manifests land late; segments of the change log go at once. A segment that
//! outlives its deadline ends the tenure (its callers hear `LEASEHOLD_UNSHIPPED`), so with
//! `Shipped` no forget could follow on the owner; the fault is about a late image landing after
//! a forget (`forget-late-put`, docs/testing.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use leasehold::durable::{DurableStore, ListPage, Put, SharedDurableStore, StoreError};

/// A durable store whose puts may land late. Clones share the switch.
#[derive(Debug, Clone)]
pub struct LatePuts {
    /// The store every call goes to.
    inner: SharedDurableStore,
    /// How long each put waits before it writes, in ms; 0 when off.
    late_ms: Arc<AtomicU64>,
    /// A bulk delete goes to the store one key at a time (a backend without one).
    one_by_one: bool,
}

impl LatePuts {
    /// Wraps `inner`, switched off; `one_by_one`: a bulk delete is one call per key.
    pub fn new(inner: SharedDurableStore, one_by_one: bool) -> Self {
        Self {
            inner,
            late_ms: Arc::default(),
            one_by_one,
        }
    }

    /// Every put of an image or manifest from now on writes `ms` after it was called (0: at once).
    pub fn set(&self, ms: u64) {
        self.late_ms.store(ms, Ordering::SeqCst);
    }
}

#[async_trait]
impl DurableStore for LatePuts {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        let late = self.late_ms.load(Ordering::SeqCst);
        if late == 0 || key.ends_with(".seg") {
            return self.inner.put_if_absent(key, bytes).await;
        }
        let (inner, key) = (self.inner.clone(), key.to_string());
        let landing = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(late)).await;
            inner.put_if_absent(&key, bytes).await
        });
        landing.await.map_err(|e| StoreError::Unavailable {
            op: "put_if_absent",
            message: format!("the late put's task failed: {e}"),
        })?
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get(key).await
    }
    async fn get_sized(&self, key: &str, expected: u64) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get_sized(key, expected).await
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
        if self.one_by_one {
            // A backend without a bulk delete (the trait's default): one call per key.
            keys.iter()
                .try_for_each(|k| leasehold::durable::check_key(k))?;
            for key in keys {
                self.inner.delete(key).await?;
            }
            return Ok(());
        }
        // The backend's bulk delete (one `DeleteObjects` on S3), as the runtime would use it.
        self.inner.delete_keys(keys).await
    }
    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        self.inner.delete_prefix(prefix).await
    }
    async fn settle_puts(&self, prefix: &str, limit: Duration) -> Result<(), StoreError> {
        self.inner.settle_puts(prefix, limit).await
    }
    async fn settle_put(&self, key: &str, limit: Duration) -> Result<(), StoreError> {
        self.inner.settle_put(key, limit).await
    }
    async fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        self.inner.size(key).await
    }
}
