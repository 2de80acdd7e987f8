//! [`PutsInFlight`]: the puts a store still runs on its own, by key, so that a caller can wait
//! for those under a prefix to settle ([`crate::DurableStore::settle_puts`]).
//!
//! A put whose caller was told [`StoreError::Timeout`] may still land (docs/guarantees.md,
//! promise 5, "erasure of late puts"): a directory put runs on a blocking thread that cannot be
//! cancelled, and an S3 request already sent may complete. A store that keeps such a put running
//! registers it here for as long as it runs; the entry goes when the put settles or its task is
//! dropped.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use super::{StoreError, check_list_prefix};
use crate::clock::duration_ms;

/// The keys of the puts still running, shared by every clone.
#[derive(Debug, Clone)]
pub struct PutsInFlight {
    /// Numbers the entries, so two puts of one key are two entries.
    next_id: Arc<AtomicU64>,
    /// Running puts by entry number; waiters watch it.
    keys: Arc<watch::Sender<BTreeMap<u64, String>>>,
}

impl Default for PutsInFlight {
    fn default() -> Self {
        Self {
            next_id: Arc::new(AtomicU64::new(0)),
            keys: Arc::new(watch::Sender::new(BTreeMap::new())),
        }
    }
}

/// One registered put; it leaves the registry when this is dropped.
#[derive(Debug)]
pub struct PutEntry {
    /// The registry it is in.
    registry: PutsInFlight,
    /// Its number there.
    id: u64,
}

impl Drop for PutEntry {
    fn drop(&mut self) {
        self.registry.keys.send_modify(|keys| {
            keys.remove(&self.id);
        });
    }
}

impl PutsInFlight {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a put of `key`; it counts as running until the entry is dropped.
    pub fn enter(&self, key: &str) -> PutEntry {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.keys.send_modify(|keys| {
            keys.insert(id, key.to_owned());
        });
        PutEntry {
            registry: self.clone(),
            id,
        }
    }

    /// How many registered puts have a key under `prefix`.
    pub fn running(&self, prefix: &str) -> usize {
        self.keys
            .borrow()
            .values()
            .filter(|k| k.starts_with(prefix))
            .count()
    }

    /// Waits until no registered put has a key under `prefix` (`""` or ending with `/`), for at
    /// most `limit`: running out is [`StoreError::Timeout`] (`settle_puts`).
    pub async fn settle(&self, prefix: &str, limit: Duration) -> Result<(), StoreError> {
        check_list_prefix(prefix)?;
        let mut watching = self.keys.subscribe();
        let settled = watching.wait_for(|keys| !keys.values().any(|k| k.starts_with(prefix)));
        match tokio::time::timeout(limit, settled).await {
            // The sender lives in `self`, so waiting cannot end with it gone.
            Ok(_) => Ok(()),
            Err(_elapsed) => Err(StoreError::Timeout {
                op: "settle_puts",
                after_ms: duration_ms(limit),
            }),
        }
    }
}

impl PutsInFlight {
    /// How many registered puts are of exactly `key`.
    pub fn running_key(&self, key: &str) -> usize {
        self.keys.borrow().values().filter(|k| *k == key).count()
    }

    /// Waits until no registered put is of exactly `key`, for at most `limit`: running out is
    /// [`StoreError::Timeout`] (`settle_puts`).
    pub async fn settle_key(&self, key: &str, limit: Duration) -> Result<(), StoreError> {
        super::check_key(key)?;
        let mut watching = self.keys.subscribe();
        let settled = watching.wait_for(|keys| !keys.values().any(|k| k == key));
        match tokio::time::timeout(limit, settled).await {
            Ok(_) => Ok(()),
            Err(_elapsed) => Err(StoreError::Timeout {
                op: "settle_puts",
                after_ms: duration_ms(limit),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn settling_waits_for_the_puts_under_its_prefix_only() {
        let puts = PutsInFlight::new();
        let mine = puts.enter("acme/t1/e00000001/snap-000001.db");
        let theirs = puts.enter("acme/t2/e00000001/snap-000001.db");
        assert_eq!(puts.running("acme/t1/"), 1);
        let limit = Duration::from_secs(1);
        assert_eq!(
            puts.settle("acme/t1/", limit).await,
            Err(StoreError::Timeout {
                op: "settle_puts",
                after_ms: 1_000
            })
        );
        drop(mine);
        assert_eq!(puts.settle("acme/t1/", limit).await, Ok(()));
        assert!(puts.settle("", limit).await.is_err(), "t2's put still runs");
        drop(theirs);
        assert_eq!(puts.settle("", limit).await, Ok(()));
        assert!(puts.settle("acme", limit).await.is_err(), "a bad prefix");
    }

    #[tokio::test(start_paused = true)]
    async fn settling_one_key_waits_for_that_key_only() {
        let puts = PutsInFlight::new();
        let segment = puts.enter("acme/t1/e00000001/log-000000000002.seg");
        let image = puts.enter("acme/t1/e00000001/snap-000001.db");
        let limit = Duration::from_secs(1);
        assert_eq!(puts.running_key("acme/t1/e00000001/snap-000001.db"), 1);
        assert!(
            puts.settle_key("acme/t1/e00000001/snap-000001.db", limit)
                .await
                .is_err()
        );
        drop(image);
        assert_eq!(
            puts.settle_key("acme/t1/e00000001/snap-000001.db", limit)
                .await,
            Ok(()),
            "the segment of the same tenure still runs and is not waited for"
        );
        assert!(
            puts.settle_key("acme/t1/", limit).await.is_err(),
            "not a key"
        );
        drop(segment);
    }
}
