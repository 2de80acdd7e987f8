//! What the image tests share: [`MemStore`], an in-memory durable store with hooks to damage
//! objects and fail reads, and small ledgers and images to take, publish and restore.
//!
//! Used by `tests/image.rs` (taking images, manifests, publishing) and `tests/restore.rs`
//! (fetching along the chain, installing). The hooks that damage objects and fail reads serve the
//! restore tests only, so they allow being unused in `tests/image.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use leasehold::durable::{DurableStore, Put, StoreError};
use leasehold::ids::{LeaseKey, OrgId, TenantId};
use leasehold::image::{ImageError, ImageFile, take_image};
use leasehold::ledger::{Ledger, LedgerOptions, NewEvent};

/// An in-memory durable store that honours `put_if_absent`, with test hooks to damage objects
/// and to make a key's `get` fail like an outage.
#[derive(Debug, Default)]
pub struct MemStore {
    /// The objects by key.
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
    /// Keys whose `get` fails like an outage.
    failing: Mutex<BTreeSet<String>>,
}

impl MemStore {
    /// Overwrites (or creates) the object at `key`.
    #[allow(dead_code)]
    pub fn replace(&self, key: &str, bytes: Vec<u8>) {
        self.objects.lock().unwrap().insert(key.to_string(), bytes);
    }
    /// Deletes the object at `key`, if any.
    pub fn remove(&self, key: &str) {
        self.objects.lock().unwrap().remove(key);
    }
    /// The bytes stored at `key`.
    pub fn object(&self, key: &str) -> Option<Vec<u8>> {
        self.objects.lock().unwrap().get(key).cloned()
    }
    /// Makes every later `get` of `key` fail with `Unavailable`.
    #[allow(dead_code)]
    pub fn fail_gets_of(&self, key: &str) {
        self.failing.lock().unwrap().insert(key.to_string());
    }
}

#[async_trait]
impl DurableStore for MemStore {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        let mut objects = self.objects.lock().unwrap();
        if objects.contains_key(key) {
            return Ok(Put::AlreadyExists);
        }
        objects.insert(key.to_string(), bytes);
        Ok(Put::Created)
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        if self.failing.lock().unwrap().contains(key) {
            return Err(StoreError::Unavailable {
                op: "get",
                message: "injected outage".into(),
            });
        }
        Ok(self.object(key))
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let objects = self.objects.lock().unwrap();
        Ok(objects
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect())
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.remove(key);
        Ok(())
    }
    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        let mut objects = self.objects.lock().unwrap();
        let before = objects.len();
        objects.retain(|k, _| !k.starts_with(prefix));
        Ok(before - objects.len())
    }
}

/// The lease key `acme/t1` every test publishes under.
pub fn key() -> LeaseKey {
    LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t1").unwrap())
}

/// Opens the ledger at `path` with default options.
pub fn ledger_at(path: &Path) -> Ledger {
    Ledger::open(path, &LedgerOptions::default()).unwrap()
}

/// A closed ledger at `<dir>/<name>` holding one event per key.
pub fn ledger_file(dir: &Path, name: &str, keys: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let mut ledger = ledger_at(&path);
    for k in keys {
        ledger
            .run(|tx| tx.insert_event(&NewEvent::new("noted", *k)))
            .unwrap();
    }
    ledger.close().unwrap();
    path
}

/// The idempotency keys of the events in the ledger at `path`, in order.
pub fn keys_in(path: &Path) -> Vec<String> {
    let mut ledger = ledger_at(path);
    let events = ledger.run(|tx| tx.events_after(0, 10_000)).unwrap();
    ledger.close().unwrap();
    events.into_iter().map(|e| e.idem_key).collect()
}

/// An image of a fresh ledger holding `keys`.
pub fn image_of(dir: &Path, name: &str, keys: &[&str]) -> ImageFile {
    let db = ledger_file(dir, &format!("{name}.ledger.db"), keys);
    take_image(&db, &dir.join(format!("{name}.image.db"))).unwrap()
}

/// The `what: reason` of an [`ImageError::Corrupt`]; panics on anything else.
pub fn corrupt_reason(result: Result<impl std::fmt::Debug, ImageError>) -> String {
    match result {
        Err(ImageError::Corrupt { what, reason }) => format!("{what}: {reason}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}
