//! [`FaultyLeaseStore`]: a lease store wrapper for the runtime's tests, with an outage switch, a
//! hold on renewals, and one-shot hooks before and after a named operation ([`LeaseOp`]).
//!
//! Every call goes through the same steps, in this order:
//!
//! ```text
//! count (renew, renew_many) -> before-hooks -> wait while renewals are held (renew, renew_many)
//!   -> outage? fail with Unavailable : inner call -> after-hooks -> hand back the inner result
//! ```
//!
//! A hook may itself flip the outage switch, so "go down right before the next publish_head" is
//! one `before_next` call. After-hooks run only when the inner call ran.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use tokio::sync::watch;

use crate::durable::StoreError;
use crate::ids::LeaseKey;
use crate::layout::ImageRef;
use crate::lease::{LeaseError, LeaseRecord, LeaseStore, RenewOutcome, SharedLeaseStore};

/// The operations of a [`LeaseStore`], to name where a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseOp {
    /// [`LeaseStore::read`].
    Read,
    /// [`LeaseStore::acquire`] and [`LeaseStore::acquire_attempt`].
    Acquire,
    /// [`LeaseStore::renew`].
    Renew,
    /// [`LeaseStore::renew_many`].
    RenewMany,
    /// [`LeaseStore::release`].
    Release,
    /// [`LeaseStore::publish_head`].
    PublishHead,
    /// [`LeaseStore::mark_forgotten`].
    MarkForgotten,
}

impl LeaseOp {
    /// Every operation.
    pub const ALL: [LeaseOp; 7] = [
        LeaseOp::Read,
        LeaseOp::Acquire,
        LeaseOp::Renew,
        LeaseOp::RenewMany,
        LeaseOp::Release,
        LeaseOp::PublishHead,
        LeaseOp::MarkForgotten,
    ];

    /// The method's name, as it appears in [`StoreError`]s (`"publish_head"`, …).
    pub fn name(self) -> &'static str {
        match self {
            LeaseOp::Read => "read",
            LeaseOp::Acquire => "acquire",
            LeaseOp::Renew => "renew",
            LeaseOp::RenewMany => "renew_many",
            LeaseOp::Release => "release",
            LeaseOp::PublishHead => "publish_head",
            LeaseOp::MarkForgotten => "mark_forgotten",
        }
    }

    fn is_renewal(self) -> bool {
        matches!(self, LeaseOp::Renew | LeaseOp::RenewMany)
    }
}

/// A one-shot hook: called once, its future awaited in the middle of a store call.
pub type LeaseHook = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// Pending hooks, by operation, in the order they were added.
type Hooks = Mutex<HashMap<LeaseOp, Vec<LeaseHook>>>;

/// The faults shared by every clone of one [`FaultyLeaseStore`].
struct Faults {
    /// While true, every call fails with [`StoreError::Unavailable`].
    down: AtomicBool,
    /// While true, renewals wait.
    renewals_held: watch::Sender<bool>,
    /// How many renew and renew_many calls have started.
    renewals_started: AtomicUsize,
    /// Hooks that run before the next call of their operation.
    before: Hooks,
    /// Hooks that run after the next call of their operation returned.
    after: Hooks,
}

/// A lease store that fails, stalls or pauses on command. Clones share the same faults, so a test
/// keeps one handle while the runtime owns another.
#[derive(Clone)]
pub struct FaultyLeaseStore {
    /// The store that answers when nothing interferes.
    inner: SharedLeaseStore,
    /// The faults, shared by every clone.
    faults: Arc<Faults>,
}

impl fmt::Debug for FaultyLeaseStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyLeaseStore")
            .field("inner", &self.inner)
            .field("down", &self.is_down())
            .field("renewals_held", &*self.faults.renewals_held.borrow())
            .finish_non_exhaustive()
    }
}

impl FaultyLeaseStore {
    /// Wraps `inner`, with no fault switched on.
    pub fn new(inner: SharedLeaseStore) -> Self {
        let (renewals_held, _) = watch::channel(false);
        let faults = Faults {
            down: AtomicBool::new(false),
            renewals_held,
            renewals_started: AtomicUsize::new(0),
            before: Mutex::default(),
            after: Mutex::default(),
        };
        Self {
            inner,
            faults: Arc::new(faults),
        }
    }

    /// This handle as a [`SharedLeaseStore`], to hand to the runtime.
    pub fn shared(&self) -> SharedLeaseStore {
        Arc::new(self.clone())
    }

    /// The wrapped store, to look behind the faults.
    pub fn inner(&self) -> &SharedLeaseStore {
        &self.inner
    }

    /// Starts (`true`) or ends (`false`) an outage: meanwhile every call fails with
    /// [`StoreError::Unavailable`] and never reaches the inner store.
    pub fn set_down(&self, down: bool) {
        self.faults.down.store(down, Ordering::SeqCst);
    }

    /// Whether an outage is on.
    pub fn is_down(&self) -> bool {
        self.faults.down.load(Ordering::SeqCst)
    }

    /// From now on, renew and renew_many calls wait (after counting themselves) until
    /// [`FaultyLeaseStore::release_renewals`].
    pub fn hold_renewals(&self) {
        self.faults.renewals_held.send_replace(true);
    }

    /// Lets held and later renewals through.
    pub fn release_renewals(&self) {
        self.faults.renewals_held.send_replace(false);
    }

    /// How many renew and renew_many calls have started, held or not.
    pub fn renewals_started(&self) -> usize {
        self.faults.renewals_started.load(Ordering::SeqCst)
    }

    /// Runs `hook` once, at the start of the next `op` call, before it reaches the inner store.
    /// Several hooks for one `op` all run at its next call, in the order they were added.
    pub fn before_next<F, Fut>(&self, op: LeaseOp, hook: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        add_hook(&self.faults.before, op, hook);
    }

    /// Runs `hook` once, when the next `op` call has returned from the inner store and before its
    /// result is handed back ("after mark_forgotten, pause while a successor takes over").
    pub fn after_next<F, Fut>(&self, op: LeaseOp, hook: F)
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        add_hook(&self.faults.after, op, hook);
    }

    /// Puts `call` (the inner store's answer to `op`) through the faults.
    async fn call<T>(
        &self,
        op: LeaseOp,
        call: impl Future<Output = Result<T, LeaseError>>,
    ) -> Result<T, LeaseError> {
        if op.is_renewal() {
            self.faults.renewals_started.fetch_add(1, Ordering::SeqCst);
        }
        run_hooks(&self.faults.before, op).await;
        if op.is_renewal() {
            self.wait_while_renewals_held().await;
        }
        if self.is_down() {
            return Err(LeaseError::Store(StoreError::Unavailable {
                op: op.name(),
                message: "outage injected by FaultyLeaseStore".to_owned(),
            }));
        }
        let result = call.await;
        run_hooks(&self.faults.after, op).await;
        result
    }

    async fn wait_while_renewals_held(&self) {
        let mut held = self.faults.renewals_held.subscribe();
        // The sender lives as long as `self`, so this cannot fail while we wait.
        let _ = held.wait_for(|held| !held).await;
    }
}

fn add_hook<F, Fut>(hooks: &Hooks, op: LeaseOp, hook: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let boxed: LeaseHook = Box::new(move || -> BoxFuture<'static, ()> { Box::pin(hook()) });
    let mut pending = hooks.lock().unwrap_or_else(PoisonError::into_inner);
    pending.entry(op).or_default().push(boxed);
}

/// Takes every pending hook of `op` and runs them one after the other.
async fn run_hooks(hooks: &Hooks, op: LeaseOp) {
    let due = {
        let mut pending = hooks.lock().unwrap_or_else(PoisonError::into_inner);
        pending.remove(&op).unwrap_or_default()
    };
    for hook in due {
        hook().await;
    }
}

#[async_trait]
impl LeaseStore for FaultyLeaseStore {
    async fn read(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        self.call(LeaseOp::Read, self.inner.read(key)).await
    }
    async fn acquire(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        self.call(LeaseOp::Acquire, self.inner.acquire(key, owner, ttl))
            .await
    }
    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
        attempt: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        let call = self.inner.acquire_attempt(key, owner, ttl, attempt);
        self.call(LeaseOp::Acquire, call).await
    }
    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        self.call(LeaseOp::Renew, self.inner.renew(key, owner, epoch, ttl))
            .await
    }
    async fn renew_many(
        &self,
        owner: &str,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError> {
        let call = self.inner.renew_many(owner, leases, ttl);
        self.call(LeaseOp::RenewMany, call).await
    }
    async fn release(&self, key: &LeaseKey, owner: &str, epoch: u64) -> Result<(), LeaseError> {
        self.call(LeaseOp::Release, self.inner.release(key, owner, epoch))
            .await
    }
    async fn publish_head(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        image: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError> {
        let call = self.inner.publish_head(key, owner, epoch, image);
        self.call(LeaseOp::PublishHead, call).await
    }
    async fn mark_forgotten(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        let call = self.inner.mark_forgotten(key, owner, epoch);
        self.call(LeaseOp::MarkForgotten, call).await
    }
}
