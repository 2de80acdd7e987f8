//! [`FaultyLeaseStore`]: a lease store wrapper for the runtime's tests, with an outage switch, a
//! hold on renewals, and one-shot hooks before and after a named operation ([`LeaseOp`]).
//!
//! Every call goes through the same steps, in this order:
//!
//! ```text
//! count (renewals) -> before-hooks -> wait while renewals are held (renew, renew_many,
//!   renew_replica)
//!   -> outage? fail with Unavailable : inner call -> after-hooks -> hand back the inner result
//! ```
//!
//! A hook may itself flip the outage switch, so "go down right before the next publish_head" is
//! one `before_next` call. After-hooks run only when the inner call ran.
//!
//! **Late landings** (docs/testing.md, "fault classes"): [`FaultyLeaseStore::land_late`] makes
//! the next call of an operation answer [`StoreError::Timeout`] at once while its effect is
//! kept back, and [`FaultyLeaseStore::land_held`] lets every call kept back reach the inner
//! store, in the order they were made — a statement that outlived its caller's deadline and
//! still lands, as one sent on a PostgreSQL connection does. Such a call is decided after the
//! outage check, so an outage still refuses it outright.
//!
//! **Batched tip moves**: [`LeaseStore::move_tips`] and [`LeaseStore::batches_tip_moves`] are
//! forwarded, so a store that moves many tips in one round trip (SQLite, PostgreSQL) is driven
//! through its batched path under faults, as the runtime's tip batcher drives it. A `move_tips`
//! call is one call of [`LeaseOp::MoveTips`] and also a tip move: the faults armed for
//! [`LeaseOp::MoveTip`] (its hooks, its late landing) take it as they take one `move_tip` call,
//! so a fault "on the next tip move" holds whichever path the runtime takes. A late batch
//! answers one [`StoreError::Timeout`] for all its moves and lands whole.
//! [`FaultyLeaseStore::one_move_per_call`] turns batching off (a store that makes one call per
//! move).

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
use crate::layout::{ImageRef, LogPos};
use crate::lease::{
    LeaseError, LeaseRecord, LeaseStore, Lookup, RenewOutcome, ReplicaRecord, ReplicaRenewal,
    ReplicaView, SharedLeaseStore, TipMove, TipOutcomes,
};

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
    /// [`LeaseStore::move_tip`].
    MoveTip,
    /// [`LeaseStore::move_tips`] (a batch of tip moves in one call; it obeys the faults of
    /// [`LeaseOp::MoveTip`] too).
    MoveTips,
    /// [`LeaseStore::mark_forgotten`].
    MarkForgotten,
    /// [`LeaseStore::erasures_due`].
    ErasuresDue,
    /// [`LeaseStore::erasure_done`].
    ErasureDone,
    /// [`LeaseStore::list`].
    List,
    /// [`LeaseStore::advertise`].
    Advertise,
    /// [`LeaseStore::renew_replica`]: a renewal, held by [`FaultyLeaseStore::hold_renewals`]
    /// like `renew_many`.
    RenewReplica,
    /// [`LeaseStore::withdraw`].
    Withdraw,
    /// [`LeaseStore::lookup`].
    Lookup,
    /// [`LeaseStore::live_replicas`].
    LiveReplicas,
}

impl LeaseOp {
    /// Every operation.
    pub const ALL: [LeaseOp; 17] = [
        LeaseOp::Read,
        LeaseOp::Acquire,
        LeaseOp::Renew,
        LeaseOp::RenewMany,
        LeaseOp::Release,
        LeaseOp::PublishHead,
        LeaseOp::MoveTip,
        LeaseOp::MoveTips,
        LeaseOp::MarkForgotten,
        LeaseOp::ErasuresDue,
        LeaseOp::ErasureDone,
        LeaseOp::List,
        LeaseOp::Advertise,
        LeaseOp::RenewReplica,
        LeaseOp::Withdraw,
        LeaseOp::Lookup,
        LeaseOp::LiveReplicas,
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
            LeaseOp::MoveTip => "move_tip",
            LeaseOp::MoveTips => "move_tips",
            LeaseOp::MarkForgotten => "mark_forgotten",
            LeaseOp::ErasuresDue => "erasures_due",
            LeaseOp::ErasureDone => "erasure_done",
            LeaseOp::List => "list",
            LeaseOp::Advertise => "advertise",
            LeaseOp::RenewReplica => "renew_replica",
            LeaseOp::Withdraw => "withdraw",
            LeaseOp::Lookup => "lookup",
            LeaseOp::LiveReplicas => "live_replicas",
        }
    }

    fn is_renewal(self) -> bool {
        matches!(
            self,
            LeaseOp::Renew | LeaseOp::RenewMany | LeaseOp::RenewReplica
        )
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
    /// How many calls of each operation have started.
    started: Mutex<HashMap<LeaseOp, usize>>,
    /// Hooks that run before the next call of their operation.
    before: Hooks,
    /// Hooks that run after the next call of their operation returned.
    after: Hooks,
    /// Calls answered with a timeout whose effect is still to land.
    late: LateCalls,
    /// While true, `batches_tip_moves` answers false whatever the inner store does.
    one_move_per_call: AtomicBool,
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
            started: Mutex::default(),
            before: Mutex::default(),
            after: Mutex::default(),
            late: LateCalls::default(),
            one_move_per_call: AtomicBool::new(false),
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

    /// From now on the store says it does not batch tip moves (`batches_tip_moves` is false),
    /// so the runtime makes one `move_tip` call per move, as on a store without a batched path.
    /// Set it before the store is handed to the runtime.
    pub fn one_move_per_call(&self) {
        self.faults.one_move_per_call.store(true, Ordering::SeqCst);
    }

    /// How many renew and renew_many calls have started, held or not.
    pub fn renewals_started(&self) -> usize {
        self.faults.renewals_started.load(Ordering::SeqCst)
    }

    /// How many calls of `op` have started, whatever they came to.
    pub fn started(&self, op: LeaseOp) -> usize {
        self.faults
            .started
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&op)
            .copied()
            .unwrap_or(0)
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
        self.before_inner(op).await?;
        let result = call.await;
        run_hooks(&self.faults.after, op).await;
        result
    }

    /// The steps before the inner store: count, before-hooks, the renewal hold, the outage.
    async fn before_inner(&self, op: LeaseOp) -> Result<(), LeaseError> {
        if op.is_renewal() {
            self.faults.renewals_started.fetch_add(1, Ordering::SeqCst);
        }
        *self
            .faults
            .started
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(op)
            .or_default() += 1;
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
        Ok(())
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

/// A call kept back: it reaches the inner store when run.
type HeldCall = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// The late-landing fault: which operations answer their next call with a timeout, and the
/// calls kept back so far.
#[derive(Default)]
struct LateCalls {
    /// Each operation's count of next calls to keep back.
    armed: Mutex<HashMap<LeaseOp, usize>>,
    /// The calls kept back, oldest first.
    held: Mutex<Vec<(LeaseOp, HeldCall)>>,
}

impl FaultyLeaseStore {
    /// The next call of `op` answers [`StoreError::Timeout`] at once and its effect lands only
    /// at [`FaultyLeaseStore::land_held`]. Called twice, the next two calls are kept back.
    pub fn land_late(&self, op: LeaseOp) {
        let mut armed = self
            .faults
            .late
            .armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *armed.entry(op).or_default() += 1;
    }

    /// Disarms every [`FaultyLeaseStore::land_late`] not yet taken by a call.
    pub fn disarm_late(&self) {
        let mut armed = self
            .faults
            .late
            .armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        armed.clear();
    }

    /// The operations of the calls kept back, oldest first.
    pub fn held(&self) -> Vec<LeaseOp> {
        let held = self
            .faults
            .late
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        held.iter().map(|(op, _)| *op).collect()
    }

    /// Lets every call kept back reach the inner store now, oldest first (their answers go
    /// nowhere: their callers heard a timeout long ago); returns their operations.
    pub async fn land_held(&self) -> Vec<LeaseOp> {
        let due = {
            let mut held = self
                .faults
                .late
                .held
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            std::mem::take(&mut *held)
        };
        let mut landed = Vec::with_capacity(due.len());
        for (op, call) in due {
            call().await;
            landed.push(op);
        }
        landed
    }

    /// Whether the next call of `op` is to be kept back (and counts it taken).
    fn takes_late(&self, op: LeaseOp) -> bool {
        let mut armed = self
            .faults
            .late
            .armed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match armed.get_mut(&op) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }

    /// Runs `call` through the faults, unless the next call of `op` is to land late: then it is
    /// kept back and the caller hears a timeout. The before-hooks and the outage come first: a
    /// call refused by an outage leaves the late landing armed for the next one.
    async fn call_or_hold<T, F, Fut>(&self, op: LeaseOp, make: F) -> Result<T, LeaseError>
    where
        F: FnOnce(SharedLeaseStore) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, LeaseError>> + Send + 'static,
        T: Send + 'static,
    {
        self.call_or_hold_as(op, &[], make).await
    }

    /// [`FaultyLeaseStore::call_or_hold`] for a call that is also an `also` call: their hooks
    /// run after `op`'s, and a late landing armed for any of them takes it (one only).
    async fn call_or_hold_as<T, F, Fut>(
        &self,
        op: LeaseOp,
        also: &[LeaseOp],
        make: F,
    ) -> Result<T, LeaseError>
    where
        F: FnOnce(SharedLeaseStore) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, LeaseError>> + Send + 'static,
        T: Send + 'static,
    {
        for &other in also {
            run_hooks(&self.faults.before, other).await;
        }
        self.before_inner(op).await?;
        let late = self.takes_late(op) || also.iter().any(|&other| self.takes_late(other));
        if !late {
            let result = make(self.inner.clone()).await;
            run_hooks(&self.faults.after, op).await;
            for &other in also {
                run_hooks(&self.faults.after, other).await;
            }
            return result;
        }
        let inner = self.inner.clone();
        let kept: HeldCall = Box::new(move || -> BoxFuture<'static, ()> {
            Box::pin(async move {
                let _ = make(inner).await;
            })
        });
        let mut held = self
            .faults
            .late
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        held.push((op, kept));
        Err(LeaseError::Store(StoreError::Timeout {
            op: op.name(),
            after_ms: 0,
        }))
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
        // One fresh attempt, through the same faults as any other.
        self.acquire_attempt(key, owner, ttl, crate::lease::fresh_attempt())
            .await
    }
    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
        attempt: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        let (key, owner) = (key.clone(), owner.to_owned());
        self.call_or_hold(LeaseOp::Acquire, move |s| async move {
            s.acquire_attempt(&key, &owner, ttl, attempt).await
        })
        .await
    }
    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        let (key, owner) = (key.clone(), owner.to_owned());
        self.call_or_hold(LeaseOp::Renew, move |s| async move {
            s.renew(&key, &owner, epoch, ttl).await
        })
        .await
    }
    async fn renew_many(
        &self,
        owner: &str,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError> {
        let (owner, leases) = (owner.to_owned(), leases.to_vec());
        self.call_or_hold(LeaseOp::RenewMany, move |s| async move {
            s.renew_many(&owner, &leases, ttl).await
        })
        .await
    }
    async fn release(&self, key: &LeaseKey, owner: &str, epoch: u64) -> Result<(), LeaseError> {
        let (key, owner) = (key.clone(), owner.to_owned());
        self.call_or_hold(LeaseOp::Release, move |s| async move {
            s.release(&key, &owner, epoch).await
        })
        .await
    }
    async fn publish_head(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        image: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError> {
        let (key, owner, image) = (key.clone(), owner.to_owned(), image.clone());
        self.call_or_hold(LeaseOp::PublishHead, move |s| async move {
            s.publish_head(&key, &owner, epoch, &image).await
        })
        .await
    }
    async fn move_tip(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        from: Option<LogPos>,
        to: LogPos,
    ) -> Result<LeaseRecord, LeaseError> {
        let (key, owner) = (key.clone(), owner.to_owned());
        self.call_or_hold(LeaseOp::MoveTip, move |s| async move {
            s.move_tip(&key, &owner, epoch, from, to).await
        })
        .await
    }
    async fn move_tips(&self, moves: &[TipMove]) -> Result<TipOutcomes, LeaseError> {
        let moves = moves.to_vec();
        self.call_or_hold_as(
            LeaseOp::MoveTips,
            &[LeaseOp::MoveTip],
            move |s| async move { s.move_tips(&moves).await },
        )
        .await
    }
    fn batches_tip_moves(&self) -> bool {
        !self.faults.one_move_per_call.load(Ordering::SeqCst) && self.inner.batches_tip_moves()
    }
    async fn mark_forgotten(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        let (key, owner) = (key.clone(), owner.to_owned());
        self.call_or_hold(LeaseOp::MarkForgotten, move |s| async move {
            s.mark_forgotten(&key, &owner, epoch).await
        })
        .await
    }
    async fn erasures_due(
        &self,
        settled_for: Duration,
        limit: usize,
    ) -> Result<Vec<crate::lease::PendingErasure>, LeaseError> {
        let call = self.inner.erasures_due(settled_for, limit);
        self.call(LeaseOp::ErasuresDue, call).await
    }
    async fn erasure_done(&self, key: &LeaseKey, floor: u64) -> Result<(), LeaseError> {
        let key = key.clone();
        self.call_or_hold(LeaseOp::ErasureDone, move |s| async move {
            s.erasure_done(&key, floor).await
        })
        .await
    }
    async fn list(
        &self,
        from: Option<&LeaseKey>,
        limit: usize,
    ) -> Result<crate::lease::LeasePage, LeaseError> {
        self.call(LeaseOp::List, self.inner.list(from, limit)).await
    }
    async fn advertise(
        &self,
        replica: &str,
        endpoint: &str,
        incarnation: u64,
        ttl: Duration,
    ) -> Result<ReplicaRecord, LeaseError> {
        let (replica, endpoint) = (replica.to_owned(), endpoint.to_owned());
        self.call_or_hold(LeaseOp::Advertise, move |s| async move {
            s.advertise(&replica, &endpoint, incarnation, ttl).await
        })
        .await
    }
    async fn renew_replica(
        &self,
        replica: &str,
        epoch: u64,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<ReplicaRenewal, LeaseError> {
        let (replica, leases) = (replica.to_owned(), leases.to_vec());
        self.call_or_hold(LeaseOp::RenewReplica, move |s| async move {
            s.renew_replica(&replica, epoch, &leases, ttl).await
        })
        .await
    }
    async fn withdraw(&self, replica: &str, epoch: u64) -> Result<(), LeaseError> {
        let replica = replica.to_owned();
        self.call_or_hold(LeaseOp::Withdraw, move |s| async move {
            s.withdraw(&replica, epoch).await
        })
        .await
    }
    async fn lookup(&self, key: &LeaseKey) -> Result<Lookup, LeaseError> {
        self.call(LeaseOp::Lookup, self.inner.lookup(key)).await
    }
    async fn live_replicas(&self) -> Result<Vec<ReplicaView>, LeaseError> {
        self.call(LeaseOp::LiveReplicas, self.inner.live_replicas())
            .await
    }
}
