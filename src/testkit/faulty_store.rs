//! [`FaultyStore`]: a durable store that wraps another and fails, slows or pauses on command.
//!
//! Every call goes through the same steps:
//!
//! ```text
//! call ──► one-shot hook for its op (if any) ──► outage? ──► put: hang / slow ──► outage? ──► inner store
//!                                                            delete: fail_next_delete?
//! ```
//!
//! The outage is checked after the hook, so a hook can switch it on for the very call it
//! precedes, and again after a put was held back, so an outage that starts while an upload is
//! "in flight" fails it. A put armed to land late ([`FaultyStore::land_late_put`], the
//! simulation's) is kept back right after the outage check and answers [`StoreError::Timeout`];
//! it reaches the wrapped store at [`FaultyStore::land_held_puts`]. The store is `Clone` (an
//! `Arc` inside): a test keeps one handle to steer the faults while the runtime owns another.
//!
//! Two faults model time and late effects (docs/testing.md, "late landings"):
//! - a *late put* ([`FaultyStore::land_puts_late`]) answers [`StoreError::Timeout`] at once and
//!   lands when the test says so ([`FaultyStore::release_late_puts`]) — the put that outlived its
//!   deadline; [`LateLanding`] says whether [`DurableStore::settle_puts`] can see it;
//! - a *pace* ([`FaultyStore::set_pace`]) makes listings and reads take (tokio) time in
//!   proportion to what they return, alone or sharing one link, so deadlines meet big tenants,
//!   big images and many segments fetched at once.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::DurableStore;
use crate::durable::{ListPage, Put, PutsInFlight, SharedDurableStore, StoreError};

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

/// Whether [`DurableStore::settle_puts`] can see a late put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateLanding {
    /// The put stays registered until it lands, and `settle_puts` waits for it: a put this
    /// process still runs (a blocking write, a request whose answer is still awaited).
    Tracked,
    /// Nothing in this process knows of it: a request the server completes after the client
    /// gave up. Only a later sweep finds what it leaves.
    Untracked,
}

/// Puts of matching keys land late.
struct LatePuts {
    /// Which keys.
    matching: KeyMatch,
    /// Whether `settle_puts` sees them.
    landing: LateLanding,
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
    /// Puts wait while this holds `true`.
    hang_puts: watch::Sender<bool>,
    /// Puts of matching keys sleep first.
    slow_put: Mutex<Option<SlowPut>>,
    /// Puts of matching keys answer `Timeout` at once and land when released.
    late_puts: Mutex<Option<LatePuts>>,
    /// Bumped to land the late puts held so far.
    late_release: watch::Sender<u64>,
    /// Late puts not landed yet.
    late_held: AtomicUsize,
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
    /// Puts answered with a timeout whose effect is still to land.
    held_puts: HeldPuts,
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
            .field("hang_puts", &*faults.hang_puts.borrow())
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
            hang_puts: watch::Sender::new(false),
            slow_put: Mutex::new(None),
            late_puts: Mutex::new(None),
            late_release: watch::Sender::new(0),
            late_held: AtomicUsize::new(0),
            late_tracked: PutsInFlight::new(),
            pace: Mutex::new(Pace::default()),
            link_free_at: Mutex::new(None),
            hooks: Mutex::new(Vec::new()),
            puts: AtomicUsize::new(0),
            deletes: AtomicUsize::new(0),
            held_puts: HeldPuts::default(),
        };
        Self {
            faults: Arc::new(faults),
        }
    }

    /// Another handle to this store, as the runtime takes it.
    pub fn shared(&self) -> SharedDurableStore {
        Arc::new(self.clone())
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

    /// While `hang`, puts do not return; those waiting go on when it is cleared.
    pub fn hang_puts(&self, hang: bool) {
        self.faults.hang_puts.send_replace(hang);
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

    /// From now on, puts of keys for which `matching` is true answer [`StoreError::Timeout`] at
    /// once (outcome unknown) and land in the wrapped store only when
    /// [`FaultyStore::release_late_puts`] is called: the put that outlived its deadline. With
    /// [`LateLanding::Tracked`], `settle_puts` waits for them to land.
    pub fn land_puts_late(
        &self,
        matching: impl Fn(&str) -> bool + Send + Sync + 'static,
        landing: LateLanding,
    ) {
        *lock(&self.faults.late_puts) = Some(LatePuts {
            matching: Arc::new(matching),
            landing,
        });
    }

    /// New puts land on time again; those held stay held until released.
    pub fn clear_late_puts(&self) {
        *lock(&self.faults.late_puts) = None;
    }

    /// The late puts held so far go on to the wrapped store.
    pub fn release_late_puts(&self) {
        self.faults.late_release.send_modify(|n| *n += 1);
    }

    /// How many late puts have not landed yet.
    pub fn late_puts_held(&self) -> usize {
        self.faults.late_held.load(Ordering::SeqCst)
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

    /// Holds a put back while puts hang, then for its slow-put delay.
    async fn hold_put(&self, key: &str) {
        let mut hang = self.hang_puts.subscribe();
        // The sender lives as long as `self`, so this only returns once puts no longer hang.
        let _ = hang.wait_for(|hanging| !*hanging).await;
        let delay = lock(&self.slow_put)
            .as_ref()
            .filter(|slow| (slow.matching)(key))
            .map(|slow| slow.delay);
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
    }

    /// The landing of a late put of `key`, if puts of it land late.
    fn late_landing(&self, key: &str) -> Option<LateLanding> {
        lock(&self.late_puts)
            .as_ref()
            .filter(|late| (late.matching)(key))
            .map(|late| late.landing)
    }

    /// Holds the put back on a task of its own until the late puts are released, then lands it.
    fn spawn_late_put(self: &Arc<Self>, key: &str, bytes: Vec<u8>, landing: LateLanding) {
        let faults = Arc::clone(self);
        let key = key.to_owned();
        let entry = (landing == LateLanding::Tracked).then(|| faults.late_tracked.enter(&key));
        let mut release = faults.late_release.subscribe();
        let before = *release.borrow_and_update();
        faults.late_held.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let _tracked = entry;
            // The sender lives as long as `faults`, so this only returns once released.
            let _ = release.wait_for(|n| *n > before).await;
            faults.puts.fetch_add(1, Ordering::SeqCst);
            let _ = faults.inner.put_if_absent(&key, bytes).await;
            faults.late_held.fetch_sub(1, Ordering::SeqCst);
        });
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
    fn check_delete(&self, op: StoreOp) -> Result<(), StoreError> {
        if self.fail_next_delete.swap(false, Ordering::SeqCst) {
            return Err(unavailable(op, INJECTED_DELETE_FAILURE));
        }
        self.deletes.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn unavailable(op: StoreOp, message: &str) -> StoreError {
    StoreError::Unavailable {
        op: op.as_str(),
        message: message.to_string(),
    }
}

// ---- Late landings (docs/testing.md, "fault classes"): a put that times out for its caller
// and still lands later, as a PUT already sent to S3 does. Kept apart from the faults above.

/// A put kept back: the key, its bytes.
type HeldPut = (String, Vec<u8>);

/// The late-landing fault of puts: which keys the next late puts match, and the puts kept back.
#[derive(Default)]
struct HeldPuts {
    /// One entry per put still to keep back: which keys it may take.
    armed: Mutex<Vec<KeyMatch>>,
    /// The puts kept back, oldest first.
    held: Mutex<Vec<HeldPut>>,
}

impl FaultyStore {
    /// The next put of a key for which `matching` is true answers [`StoreError::Timeout`] at
    /// once; its bytes reach the wrapped store only at [`FaultyStore::land_held_puts`].
    pub fn land_late_put(&self, matching: impl Fn(&str) -> bool + Send + Sync + 'static) {
        lock(&self.faults.held_puts.armed).push(Arc::new(matching));
    }

    /// Disarms every [`FaultyStore::land_late_put`] not yet taken by a put.
    pub fn disarm_late_puts(&self) {
        lock(&self.faults.held_puts.armed).clear();
    }

    /// The keys of the puts kept back, oldest first.
    pub fn held_puts(&self) -> Vec<String> {
        let held = lock(&self.faults.held_puts.held);
        held.iter().map(|(key, _)| key.clone()).collect()
    }

    /// Lets every put kept back reach the wrapped store now (if-absent, as any put), oldest
    /// first; returns the keys of those that wrote their object.
    pub async fn land_held_puts(&self) -> Result<Vec<String>, StoreError> {
        let due = std::mem::take(&mut *lock(&self.faults.held_puts.held));
        let mut landed = Vec::new();
        for (key, bytes) in due {
            self.faults.puts.fetch_add(1, Ordering::SeqCst);
            if self.faults.inner.put_if_absent(&key, bytes).await? == Put::Created {
                landed.push(key);
            }
        }
        Ok(landed)
    }
}

impl Faults {
    /// Keeps the put of `key` back if a late landing is armed for it; `true` if it did.
    fn keeps_back(&self, key: &str, bytes: &[u8]) -> bool {
        let mut armed = lock(&self.held_puts.armed);
        let Some(at) = armed.iter().position(|m| m(key)) else {
            return false;
        };
        armed.remove(at);
        lock(&self.held_puts.held).push((key.to_owned(), bytes.to_vec()));
        true
    }
}

// ---- End of late landings.

#[async_trait]
impl DurableStore for FaultyStore {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        let faults = &self.faults;
        faults.enter(StoreOp::Put, key).await?;
        if faults.keeps_back(key, &bytes) {
            return Err(StoreError::Timeout {
                op: StoreOp::Put.as_str(),
                after_ms: 0,
            });
        }
        if let Some(landing) = faults.late_landing(key) {
            faults.spawn_late_put(key, bytes, landing);
            return Err(StoreError::Timeout {
                op: StoreOp::Put.as_str(),
                after_ms: 0,
            });
        }
        faults.hold_put(key).await;
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
        self.faults.check_delete(StoreOp::Delete)?;
        self.faults.inner.delete(key).await
    }

    /// Takes the hooks and the failure of a `delete` (keyed by the first key).
    async fn delete_keys(&self, keys: &[String]) -> Result<(), StoreError> {
        let first = keys.first().map_or("", String::as_str);
        self.faults.enter(StoreOp::Delete, first).await?;
        self.faults.check_delete(StoreOp::Delete)?;
        self.faults.inner.delete_keys(keys).await
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        self.faults.enter(StoreOp::DeletePrefix, prefix).await?;
        self.faults.check_delete(StoreOp::DeletePrefix)?;
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
