//! [`MemStore`]: a durable store in memory, a real fake for tests that drive time by hand (a
//! directory store's blocking threads would let a paused clock run ahead). It passes
//! [`crate::testkit::durable_store_conformance`].

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;

use crate::DurableStore;
use crate::durable::{ListPage, Put, StoreError, check_key, check_list_prefix, check_prefix};

/// A durable store holding its objects in a sorted map; clones share it.
#[derive(Debug, Clone, Default)]
pub struct MemStore {
    /// The objects by key.
    objects: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn objects(&self) -> MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The keys under `prefix` after `start_after`, in order.
    fn keys_after(&self, prefix: &str, start_after: Option<&str>) -> Vec<String> {
        let objects = self.objects();
        let from = match start_after {
            Some(after) if after >= prefix => Bound::Excluded(after.to_owned()),
            _ => Bound::Included(prefix.to_owned()),
        };
        objects
            .range::<String, _>((from, Bound::Unbounded))
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }
}

#[async_trait]
impl DurableStore for MemStore {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        check_key(key)?;
        let mut objects = self.objects();
        if objects.contains_key(key) {
            return Ok(Put::AlreadyExists);
        }
        objects.insert(key.to_owned(), bytes);
        Ok(Put::Created)
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        check_key(key)?;
        Ok(self.objects().get(key).cloned())
    }

    async fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        check_key(key)?;
        Ok(self.objects().get(key).map(|b| b.len() as u64))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        check_list_prefix(prefix)?;
        Ok(self.keys_after(prefix, None))
    }

    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, StoreError> {
        check_list_prefix(prefix)?;
        let mut keys = self.keys_after(prefix, start_after);
        let max_keys = max_keys.max(1);
        let next = (keys.len() > max_keys).then(|| {
            keys.truncate(max_keys);
            keys[max_keys - 1].clone()
        });
        Ok(ListPage { keys, next })
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        check_key(key)?;
        self.objects().remove(key);
        Ok(())
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        check_prefix(prefix)?;
        let doomed = self.keys_after(prefix, None);
        let mut objects = self.objects();
        Ok(doomed
            .iter()
            .filter(|k| objects.remove(*k).is_some())
            .count())
    }
}
