//! [`FaultyStore`]: a durable store that wraps another and fails, slows or pauses on command.
//!
//! Every call goes through the same steps:
//!
//! ```text
//! call ──► one-shot hook for its op (if any) ──► outage? ──► put: late / slow ──► outage? ──► inner store
//!                                                            delete: fail_next_delete?
//! ```
//!
//! The outage is checked after the hook, so a hook can switch it on for the very call it
//! precedes, and again after a put was held back, so an outage that starts while an upload is
//! "in flight" fails it. The store is `Clone` (an `Arc` inside): a test keeps one handle to
//! steer the faults while the runtime owns another.
//!
//! Two faults model time and late effects (docs/testing.md, "late landings"):
//! - a *late put* ([`LatePuts`], one model for every put that outlives its deadline, in
//!   `faulty_store/late.rs`) is held right after the outage check: answered [`StoreError::Timeout`] at once or
//!   hung in its call, it lands when the test says so ([`FaultyStore::land_late_puts`]);
//! - a *pace* ([`FaultyStore::set_pace`]) makes listings and reads take (tokio) time in
//!   proportion to what they return, alone or sharing one link, so deadlines meet big tenants,
//!   big images and many segments fetched at once.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;

use crate::DurableStore;
use crate::durable::{ListPage, Put, PutsInFlight, SharedDurableStore, StoreError};

mod conflict;
mod late;
pub use late::{LateAnswer, LateLanding, LatePuts};

/// What an injected outage says.
pub const INJECTED_OUTAGE: &str = "injected outage";

/// What an injected delete failure says.
pub const INJECTED_DELETE_FAILURE: &str = "injected delete failure";

/// A one-shot hook: runs (and is awaited) before the call it was set for, which then proceeds.
pub type Hook = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// Which keys a fault applies to.
type KeyMatch = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// A durable-store operation, to name the call a hook runs before.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreOp {
    /// `put_if_absent`.
    Put,
    /// `get`.
    Get,
    /// `size`.
    Size,
    /// `list`.
    List,
    /// `delete`.
    Delete,
    /// `delete_prefix`.
    DeletePrefix,
}

impl StoreOp {
    /// The operation's name as [`StoreError`]s carry it (`put_if_absent`, `get`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            StoreOp::Put => "put_if_absent",
            StoreOp::Get => "get",
            StoreOp::Size => "size",
            StoreOp::List => "list",
            StoreOp::Delete => "delete",
            StoreOp::DeletePrefix => "delete_prefix",
        }
    }
}

/// A hook waiting for its call.
struct PendingHook {
    /// The operation it runs before.
    op: StoreOp,
    /// If set, only a call whose key (or prefix) matches takes the hook.
    matching: Option<KeyMatch>,
    /// The hook.
    hook: Hook,
}

/// Puts of matching keys wait before they go on.
struct SlowPut {
    /// Which keys are slow.
    matching: KeyMatch,
    /// How long they wait.
    delay: Duration,
}

/// How long calls take in proportion to what they return (tokio time, so paused-clock tests
/// see it exactly).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pace {
    /// Added to a `list` or `list_page` per key it returns.
    pub per_listed_key: Duration,
    /// Added to a `get` or `get_sized` per MiB it returns, in proportion.
    pub per_mib_read: Duration,
    /// Reads share one link: each waits for the reads before it to be through (first come,
    /// first served), as gets over one slow network do; otherwise each read is paced alone.
    pub shared_link: bool,
}

impl Pace {
    /// How long a listing of `keys` keys takes.
    fn listing(&self, keys: usize) -> Duration {
        self.per_listed_key
            .saturating_mul(u32::try_from(keys).unwrap_or(u32::MAX))
    }

    /// How long a read of `bytes` bytes takes: `per_mib_read` in proportion.
    fn read(&self, bytes: usize) -> Duration {
        let nanos = self.per_mib_read.as_nanos() * bytes as u128 / (1024 * 1024);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// The faults and counters every clone of one [`FaultyStore`] shares.
struct Faults {
    /// The wrapped store.
    inner: SharedDurableStore,
    /// Every call fails with [`INJECTED_OUTAGE`] while set.
    down: AtomicBool,
    /// The next `delete` or `delete_prefix` fails and deletes nothing.
    fail_next_delete: AtomicBool,
    /// Puts of matching keys sleep first.
    slow_put: Mutex<Option<SlowPut>>,
    /// Late puts: the rules and the puts held.
    late: late::LateState,
    /// Creates of a key another put of which is under way (S3's 409).
    conflicts: conflict::Conflicts,
    /// The tracked late puts not landed yet, for `settle_puts`.
    late_tracked: PutsInFlight,
    /// How long listings and reads take.
    pace: Mutex<Pace>,
    /// When the shared link is through with the reads handed to it so far.
    link_free_at: Mutex<Option<tokio::time::Instant>>,
    /// One-shot hooks, in the order they were set.
    hooks: Mutex<Vec<PendingHook>>,
    /// Puts handed to the wrapped store.
    puts: AtomicUsize,
    /// Deletes (`delete` and `delete_prefix`) handed to the wrapped store.
    deletes: AtomicUsize,
    /// Every key (or prefix) a delete handed to the wrapped store, with the wall-clock time
    /// (ms since the Unix epoch) it was handed over.
    deleted: Mutex<Vec<(String, u64)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A durable store with an outage switch, slow and hanging puts, a failing delete and one-shot
/// hooks before named operations. See the module docs for the order of the steps.
#[derive(Clone)]
pub struct FaultyStore {
    /// The shared state of every clone.
    faults: Arc<Faults>,
}

impl fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let faults = &self.faults;
        f.debug_struct("FaultyStore")
            .field("inner", &faults.inner)
            .field("down", &faults.down.load(Ordering::SeqCst))
            .field("late_puts_held", &self.late_puts_held())
            .field("pending_hooks", &lock(&faults.hooks).len())
            .field("puts", &self.puts())
            .field("deletes", &self.deletes())
            .finish()
    }
}

impl FaultyStore {
    /// Wraps `inner`, with no fault set.
    pub fn new(inner: SharedDurableStore) -> Self {
        let faults = Faults {
            inner,
            down: AtomicBool::new(false),
            fail_next_delete: AtomicBool::new(false),
            slow_put: Mutex::new(None),
            late: late::LateState::default(),
            conflicts: conflict::Conflicts::default(),
            late_tracked: PutsInFlight::new(),
            pace: Mutex::new(Pace::default()),
            link_free_at: Mutex::new(None),
            hooks: Mutex::new(Vec::new()),
            puts: AtomicUsize::new(0),
            deletes: AtomicUsize::new(0),
            deleted: Mutex::new(Vec::new()),
        };
        Self {
            faults: Arc::new(faults),
        }
    }

    /// Another handle to this store, as the runtime takes it.
    pub fn shared(&self) -> SharedDurableStore {
        Arc::new(self.clone())
    }

    /// While `on`, a put of a key another put of which is still under way through this store
    /// (held by a hook, slow, or running) answers `AlreadyExists` and writes nothing, as
    /// `S3Store` answers S3's `409 ConditionalRequestConflict`.
    pub fn conflict_on_concurrent_creates(&self, on: bool) {
        self.faults.conflicts.on.store(on, Ordering::SeqCst);
    }

    /// How many puts were answered a conflict.
    pub fn conflicts(&self) -> usize {
        self.faults.conflicts.answered.load(Ordering::SeqCst)
    }

    /// The wrapped store, to look behind the faults.
    pub fn inner(&self) -> &SharedDurableStore {
        &self.faults.inner
    }

    /// While `down`, every call fails with [`StoreError::Unavailable`] saying [`INJECTED_OUTAGE`].
    pub fn set_down(&self, down: bool) {
        self.faults.down.store(down, Ordering::SeqCst);
    }

    /// Puts of keys for which `matching` is true sleep `delay` (real time) before they go on.
    pub fn slow_put(
        &self,
        matching: impl Fn(&str) -> bool + Send + Sync + 'static,
        delay: Duration,
    ) {
        *lock(&self.faults.slow_put) = Some(SlowPut {
            matching: Arc::new(matching),
            delay,
        });
    }

    /// Puts go at full speed again.
    pub fn clear_slow_put(&self) {
        *lock(&self.faults.slow_put) = None;
    }

    /// The next `delete` or `delete_prefix` fails with [`StoreError::Unavailable`] and deletes
    /// nothing.
    pub fn fail_next_delete(&self) {
        self.faults.fail_next_delete.store(true, Ordering::SeqCst);
    }

    /// Runs `hook` before the next call of `op`, which then proceeds. Hooks for one op run one
    /// per call, in the order they were set.
    pub fn before_next(&self, op: StoreOp, hook: Hook) {
        self.push_hook(op, None, hook);
    }

    /// Runs `hook` before the next put whose key matches `matching` (an image `.db`, say); puts
    /// of other keys pass it by.
    pub fn before_next_put_matching(
        &self,
        matching: impl Fn(&str) -> bool + Send + Sync + 'static,
        hook: Hook,
    ) {
        self.push_hook(StoreOp::Put, Some(Arc::new(matching)), hook);
    }

    /// Listings and reads take time in proportion to what they return.
    pub fn set_pace(&self, pace: Pace) {
        *lock(&self.faults.pace) = pace;
    }

    /// How many puts reached the wrapped store.
    pub fn puts(&self) -> usize {
        self.faults.puts.load(Ordering::SeqCst)
    }

    /// How many `delete` and `delete_prefix` calls reached the wrapped store.
    pub fn deletes(&self) -> usize {
        self.faults.deletes.load(Ordering::SeqCst)
    }

    /// Every key (or prefix, for `delete_prefix`) a delete handed to the wrapped store, oldest
    /// first, with the wall-clock time (ms since the Unix epoch) it was handed over: a harness
    /// judges from it when a background deletion ran.
    pub fn deletions(&self) -> Vec<(String, u64)> {
        lock(&self.faults.deleted).clone()
    }

    fn push_hook(&self, op: StoreOp, matching: Option<KeyMatch>, hook: Hook) {
        lock(&self.faults.hooks).push(PendingHook { op, matching, hook });
    }
}

impl Faults {
    /// The first pending hook for `op` whose key filter (if any) accepts `key`, taken.
    fn take_hook(&self, op: StoreOp, key: &str) -> Option<Hook> {
        let mut hooks = lock(&self.hooks);
        let at = hooks
            .iter()
            .position(|h| h.op == op && h.matching.as_ref().is_none_or(|m| m(key)))?;
        Some(hooks.remove(at).hook)
    }

    /// Runs the call's hook, then checks the outage.
    async fn enter(&self, op: StoreOp, key: &str) -> Result<(), StoreError> {
        if let Some(hook) = self.take_hook(op, key) {
            hook().await;
        }
        self.check_up(op)
    }

    fn check_up(&self, op: StoreOp) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(unavailable(op, INJECTED_OUTAGE));
        }
        Ok(())
    }

    /// Holds a put back for its slow-put delay.
    async fn slow_down(&self, key: &str) {
        let delay = lock(&self.slow_put)
            .as_ref()
            .filter(|slow| (slow.matching)(key))
            .map(|slow| slow.delay);
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
    }

    /// Waits as long as the pace asks for a listing of `keys` keys.
    async fn pace_listing(&self, keys: usize) {
        let wait = lock(&self.pace).listing(keys);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// Waits as long as the pace asks for a read that returned `found`.
    async fn pace_read(&self, found: &Result<Option<Vec<u8>>, StoreError>) {
        let bytes = found
            .as_ref()
            .ok()
            .and_then(Option::as_ref)
            .map_or(0, Vec::len);
        let pace = *lock(&self.pace);
        let wait = pace.read(bytes);
        if !pace.shared_link {
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            return;
        }
        let done = {
            let mut free_at = lock(&self.link_free_at);
            let now = tokio::time::Instant::now();
            let start = free_at.filter(|t| *t > now).unwrap_or(now);
            *free_at = Some(start + wait);
            start + wait
        };
        tokio::time::sleep_until(done).await;
    }

    /// Fails the call if a failed delete was asked for.
    fn check_delete(&self, op: StoreOp, keys: &[&str]) -> Result<(), StoreError> {
        if self.fail_next_delete.swap(false, Ordering::SeqCst) {
            return Err(unavailable(op, INJECTED_DELETE_FAILURE));
        }
        self.deletes.fetch_add(1, Ordering::SeqCst);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        lock(&self.deleted).extend(keys.iter().map(|k| ((*k).to_owned(), now)));
        Ok(())
    }
}

fn unavailable(op: StoreOp, message: &str) -> StoreError {
    StoreError::Unavailable {
        op: op.as_str(),
        message: message.to_string(),
    }
}

#[async_trait]
impl DurableStore for FaultyStore {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        let faults = &self.faults;
        let Some(_running) = faults.conflicts.begin(key) else {
            return Ok(Put::AlreadyExists);
        };
        faults.enter(StoreOp::Put, key).await?;
        if let late::Late::Held = faults.late_step(key, &bytes).await {
            return Err(StoreError::Timeout {
                op: StoreOp::Put.as_str(),
                after_ms: 0,
            });
        }
        faults.slow_down(key).await;
        faults.check_up(StoreOp::Put)?;
        faults.puts.fetch_add(1, Ordering::SeqCst);
        faults.inner.put_if_absent(key, bytes).await
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.faults.enter(StoreOp::Get, key).await?;
        let found = self.faults.inner.get(key).await;
        self.faults.pace_read(&found).await;
        found
    }

    async fn get_sized(&self, key: &str, expected: u64) -> Result<Option<Vec<u8>>, StoreError> {
        self.faults.enter(StoreOp::Get, key).await?;
        let found = self.faults.inner.get_sized(key, expected).await;
        self.faults.pace_read(&found).await;
        found
    }

    /// Takes the hooks of `size`; a size carries no payload, so no pace.
    async fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        self.faults.enter(StoreOp::Size, key).await?;
        self.faults.inner.size(key).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.faults.enter(StoreOp::List, prefix).await?;
        let listed = self.faults.inner.list(prefix).await?;
        self.faults.pace_listing(listed.len()).await;
        Ok(listed)
    }

    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, StoreError> {
        self.faults.enter(StoreOp::List, prefix).await?;
        let page = (self.faults.inner)
            .list_page(prefix, start_after, max_keys)
            .await?;
        self.faults.pace_listing(page.keys.len()).await;
        Ok(page)
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.faults.enter(StoreOp::Delete, key).await?;
        self.faults.check_delete(StoreOp::Delete, &[key])?;
        self.faults.inner.delete(key).await
    }

    /// Takes the hooks and the failure of a `delete` (keyed by the first key).
    async fn delete_keys(&self, keys: &[String]) -> Result<(), StoreError> {
        let first = keys.first().map_or("", String::as_str);
        self.faults.enter(StoreOp::Delete, first).await?;
        let named: Vec<&str> = keys.iter().map(String::as_str).collect();
        self.faults.check_delete(StoreOp::Delete, &named)?;
        self.faults.inner.delete_keys(keys).await
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        self.faults.enter(StoreOp::DeletePrefix, prefix).await?;
        self.faults.check_delete(StoreOp::DeletePrefix, &[prefix])?;
        self.faults.inner.delete_prefix(prefix).await
    }

    /// Waits for the tracked late puts under `prefix`, then for the wrapped store's puts.
    async fn settle_puts(&self, prefix: &str, limit: Duration) -> Result<(), StoreError> {
        let started = tokio::time::Instant::now();
        self.faults.late_tracked.settle(prefix, limit).await?;
        let left = limit.saturating_sub(started.elapsed());
        self.faults.inner.settle_puts(prefix, left).await
    }

    /// Waits for the tracked late puts of `key`, then for the wrapped store's.
    async fn settle_put(&self, key: &str, limit: Duration) -> Result<(), StoreError> {
        let started = tokio::time::Instant::now();
        self.faults.late_tracked.settle_key(key, limit).await?;
        let left = limit.saturating_sub(started.elapsed());
        self.faults.inner.settle_put(key, left).await
    }
}
