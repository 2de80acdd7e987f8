//! Conflicting creates: S3 answers a conditional create (`If-None-Match: *`) of a key another
//! write of which is still under way with `409 ConditionalRequestConflict`, which
//! `object_store` reports as `AlreadyExists` for `PutMode::Create` and `S3Store::put_if_absent`
//! as [`Put::AlreadyExists`](crate::durable::Put::AlreadyExists) — with nothing there yet. A
//! put sent again while its first try still runs meets exactly that
//! ([`FaultyStore::conflict_on_concurrent_creates`](super::FaultyStore::conflict_on_concurrent_creates)).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::lock;

/// The switch, the puts under way by key, and how many conflicts were answered.
#[derive(Debug, Default)]
pub(super) struct Conflicts {
    /// Conflicts are answered while set.
    pub(super) on: AtomicBool,
    /// Puts under way (hooks and holds included), by key.
    running: Mutex<HashMap<String, usize>>,
    /// Conflicts answered so far.
    pub(super) answered: AtomicUsize,
}

/// A put under way; it leaves the count when dropped (its call ended).
pub(super) struct Running<'a> {
    conflicts: &'a Conflicts,
    key: String,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        let mut running = lock(&self.conflicts.running);
        if let Some(n) = running.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.key);
            }
        }
    }
}

impl Conflicts {
    /// A put of `key` begins: `None` when it must be answered a conflict (another put of the
    /// key is under way and the switch is on), else its entry while it runs.
    pub(super) fn begin(&self, key: &str) -> Option<Running<'_>> {
        let mut running = lock(&self.running);
        let n = running.entry(key.to_owned()).or_insert(0);
        if *n > 0 && self.on.load(Ordering::SeqCst) {
            self.answered.fetch_add(1, Ordering::SeqCst);
            return None;
        }
        *n += 1;
        Some(Running {
            conflicts: self,
            key: key.to_owned(),
        })
    }
}
