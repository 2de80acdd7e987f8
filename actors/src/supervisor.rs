//! The supervisor: one per replica. It opens tenants, keeps the table of their addresses, runs
//! handoffs under the drain deadline, closes the replica `close_concurrency` tenants at a time,
//! waits for forgets under way, and owns the arbiters and the lease actor.
//!
//! ```text
//!   host ──> Supervisor (handle) ──> SupervisorActor ──┬──> LeaseActor  (one renewal chain)
//!   host ──> TenantRef ─────────────────────────────┐  └──> TenantActor × n, on arbiters
//!                                                   └────> TenantActor (runs, tickets, snapshots)
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix::prelude::*;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use leasehold::{Error, LeaseKey, OrgId, TenantId};
use tokio::sync::oneshot;

mod addressing;
mod close;
mod fleet;
mod local_sweep;
mod open;
mod where_is;

pub use addressing::MessageRequest;
mod passivate;

use crate::config::RuntimeConfig;
use crate::events::EventSink;
use crate::lease_actor::{LeaseActor, RenewNow, StopRenewals};
use crate::router::{LocalPath, Router};
use crate::runtime::Runtime;
use crate::status::TenantStatus;
use crate::tenant::TenantRef;
use crate::tenant::messages::{ForgetBegun, TenantGone};

type SharedOpen = Shared<BoxFuture<'static, Result<TenantRef, Error>>>;

/// The host's handle to a replica's supervisor tree. Cheap to clone.
///
/// Once `close()` has finished and the last clone is dropped, the replica stops for good: the
/// lease actor, the local-sweep interval, the arbiter threads and every tenant actor on them,
/// and the state root's lock is released (docs/guarantees.md, promise 6). A replica dropped
/// without `close()` keeps serving the tenants hosts still hold (a `TenantRef` or `Ticket` it
/// handed out); once no handle of any kind is left, nothing can reach it, and it stops like a
/// crash: renewals stop, the tenants stop without a flush and their leases run out after `ttl`.
#[derive(Clone)]
pub struct Supervisor {
    /// The supervisor actor.
    addr: Addr<SupervisorActor>,
    /// Carries typed messages to tenant addresses (`crate::router`).
    router: Arc<Router>,
    /// The event sink, for `events_delivered`.
    events: EventSink,
    /// Tells the actor when the last handle goes.
    _owner: Arc<Owner>,
}

/// Shared by every clone of a [`Supervisor`]; its drop is the drop of the last handle.
struct Owner {
    /// The supervisor actor.
    addr: Addr<SupervisorActor>,
    /// How many tenant handles hosts hold, shared with the actor.
    host_handles: Arc<AtomicUsize>,
}

impl Owner {
    /// `tenant`, counted as a handle the host holds.
    fn hand_out(&self, tenant: TenantRef) -> TenantRef {
        tenant.held_by(Arc::new(HostHold::new(
            self.host_handles.clone(),
            self.addr.clone(),
        )))
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.addr.do_send(HandleDropped);
    }
}

/// One tenant handle a host holds (a `TenantRef` that `open` or `tenant` handed out, shared by
/// its clones and its `Ticket`s): while any lives, a replica whose `Supervisor` handles are gone
/// keeps serving; when the last goes, the replica hears it.
struct HostHold {
    /// How many live, shared with the supervisor actor.
    count: Arc<AtomicUsize>,
    /// Told when the count falls to zero.
    addr: Addr<SupervisorActor>,
}

impl HostHold {
    fn new(count: Arc<AtomicUsize>, addr: Addr<SupervisorActor>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self { count, addr }
    }
}

impl crate::tenant::HostHandle for HostHold {
    fn reopen(
        &self,
        key: &LeaseKey,
        passivated_epoch: u64,
    ) -> futures::future::BoxFuture<'static, Result<TenantRef, Error>> {
        Box::pin(passivate::reopen(&self.addr, key, passivated_epoch))
    }
}

impl Drop for HostHold {
    fn drop(&mut self) {
        if self.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.addr.do_send(HostHandlesDropped);
        }
    }
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor").finish_non_exhaustive()
    }
}

impl Supervisor {
    /// Validates `config` and starts the supervisor, the lease actor and the arbiters tenants
    /// live on. Call it inside a running actix system (`#[leasehold_actors::main]`, `System`).
    pub fn start(config: RuntimeConfig) -> Result<Self, Error> {
        let arbiters = config.arbiters;
        let rt = Runtime::new(config)?;
        // Bound before any actor starts: an address that cannot be had refuses the start.
        let fleet = rt.transport.clone().map(fleet::Fleet::bind).transpose()?;
        let events = rt.events.clone();
        let lease_actor = LeaseActor::new(rt.clone()).start();
        let arbiters = (0..arbiters).map(|_| Arbiter::new()).collect();
        let host_handles = Arc::new(AtomicUsize::new(0));
        let addr = SupervisorActor {
            rt: rt.clone(),
            lease_actor,
            arbiters,
            next_arbiter: 0,
            table: HashMap::new(),
            next_order: 0,
            opening: HashMap::new(),
            attempts: HashMap::new(),
            forgets: Vec::new(),
            closing: false,
            closed: false,
            closed_with: None,
            close_waiters: Vec::new(),
            handle_dropped: false,
            host_handles: host_handles.clone(),
            fleet: None,
            recency: crate::passivation::Recency::default(),
            idle_timer: None,
        }
        .start();
        // The router holds the actor's address, not a handle: it must not keep the replica up.
        let tenants = Arc::new(where_is::SupervisorTenants { addr: addr.clone() });
        let local = LocalPath::new(rt.clone(), tenants);
        let fleet_router = fleet.as_ref().map(|f| f.router(&rt, local.clone()));
        let router = Arc::new(Router::new(rt.ask_timeout, local, fleet_router));
        if let Some(fleet) = fleet {
            addr.do_send(fleet::JoinFleet(fleet));
        }
        // Copies a crash left behind of tenants forgotten meanwhile go first.
        addr.do_send(local_sweep::SweepLocal);
        let owner = Arc::new(Owner {
            addr: addr.clone(),
            host_handles,
        });
        Ok(Self {
            addr,
            router,
            events,
            _owner: owner,
        })
    }

    /// Opens a tenant: acquires its lease, restores its head, and returns its handle. Opening a
    /// tenant that is already open here returns the same tenant.
    pub fn open(
        &self,
        org: &OrgId,
        tenant: &TenantId,
    ) -> impl Future<Output = Result<TenantRef, Error>> + use<> {
        let request = self.addr.send(Open::new(LeaseKey::new(org, tenant)));
        let owner = self._owner.clone();
        async move {
            let tenant = request.await.map_err(|_| stopped())??;
            Ok(owner.hand_out(tenant))
        }
    }

    /// The handle of a tenant open on this replica, if any.
    pub async fn tenant(&self, org: &OrgId, tenant: &TenantId) -> Option<TenantRef> {
        let key = LeaseKey::new(org, tenant);
        let found = self.addr.send(Lookup { key }).await.ok().flatten();
        found.map(|tenant| self._owner.hand_out(tenant))
    }

    /// Every tenant open on this replica now, with its epoch, sorted by key: what an operator
    /// lists (the reference service's `GET /admin/tenants`). A tenant leaving (handing off,
    /// forgetting) stays listed until its tenure has ended.
    pub async fn open_tenants(&self) -> Result<Vec<(LeaseKey, u64)>, Error> {
        self.addr.send(ListOpen).await.map_err(|_| stopped())
    }

    /// Hands off every open tenant, `close_concurrency` at a time, and waits for forgets under
    /// way. Returns the tenants it could not flush, in the order they were opened; those stay
    /// open until the last handle is dropped. Opens are refused from now on; an open already
    /// under way is waited for, and a tenant it opened is handed off with the others while its
    /// caller hears `Closed` (docs/guarantees.md, promise 6).
    pub fn close(&self) -> impl Future<Output = Result<Vec<LeaseKey>, Error>> + use<> {
        let request = self.addr.send(Close);
        async move { request.await.map_err(|_| stopped())? }
    }

    /// Runs one renewal of every lease now, or waits for the one under way. For tests with a
    /// manual clock and for operators; the renewal chain does this by itself every `renew_every`.
    pub async fn renew_now(&self) -> Result<(), Error> {
        let lease_actor = self.addr.send(GetLeaseActor).await.map_err(|_| stopped())?;
        lease_actor.send(RenewNow).await.map_err(|_| stopped())?
    }

    /// Runs one reconciliation pass now (or waits for the one under way, then runs one): the
    /// puts of unknown outcome whose work let go of them and whose deadline has passed, the
    /// orphan candidates due, and the forgotten tenants whose erasure is due, whoever forgot
    /// them (docs/guarantees.md, "Reconciling puts of unknown outcome"). Runs by itself every
    /// `reconcile_every`, when a put let go of was answered, and at `close`.
    pub async fn reconcile_now(&self) -> Result<crate::ReconcileReport, Error> {
        self.addr.send(ReconcileNow).await.map_err(|_| stopped())
    }

    /// Drops this replica's local copies of tenants forgotten elsewhere (their recorded tenure is
    /// at or below the floor). Runs by itself at start and whenever a tenure here ends without a
    /// handoff; returns how many copies went.
    pub async fn sweep_local(&self) -> Result<usize, Error> {
        self.addr
            .send(local_sweep::SweepLocal)
            .await
            .map_err(|_| stopped())?
    }

    /// Waits until the observer has seen every event emitted so far (at most `limit`).
    pub async fn events_delivered(&self, limit: Duration) -> bool {
        self.events.delivered(limit).await
    }

    /// How many events the observer missed because it was too slow.
    pub fn events_dropped(&self) -> u64 {
        self.events.dropped()
    }
}

pub(crate) fn stopped() -> Error {
    Error::Closed("the supervisor has stopped".into())
}

fn closed_while_opening(key: &LeaseKey) -> Error {
    Error::Closed(format!(
        "the replica began closing while {key} opened; close hands it off"
    ))
}

/// A tenant in the table.
#[derive(Clone)]
struct Entry {
    /// Its handle.
    tenant: TenantRef,
    /// When it was opened, for `close`'s order.
    order: u64,
}

/// The supervisor actor; hosts use [`Supervisor`].
pub struct SupervisorActor {
    /// The shared runtime.
    rt: Arc<Runtime>,
    /// The renewal chain.
    lease_actor: Addr<LeaseActor>,
    /// Where tenant actors live, round robin.
    arbiters: Vec<Arbiter>,
    /// The next arbiter to place a tenant on.
    next_arbiter: usize,
    /// Open tenants.
    table: HashMap<LeaseKey, Entry>,
    /// The next open's order number.
    next_order: u64,
    /// The acquire attempt of each key whose last open's outcome is unknown (or is under way).
    attempts: HashMap<LeaseKey, u64>,
    /// Opens under way, shared by concurrent callers of the same tenant.
    opening: HashMap<LeaseKey, SharedOpen>,
    /// Forgets under way: `close` waits for them. With the handle of the tenant, to stop its
    /// actor when it is over.
    forgets: Vec<Forgetting>,
    /// Set by `close`: no more opens.
    closing: bool,
    /// Set when `close` has finished.
    closed: bool,
    /// What the close answered, for a close called again.
    closed_with: Option<Result<Vec<LeaseKey>, Error>>,
    /// Closes called while one is under way: they hear its answer.
    close_waiters: Vec<oneshot::Sender<Result<Vec<LeaseKey>, Error>>>,
    /// Set when the last [`Supervisor`] handle was dropped.
    handle_dropped: bool,
    /// How many tenant handles hosts hold ([`HostHold`]): with no `Supervisor` handle and none
    /// of these, nothing can reach the replica.
    host_handles: Arc<AtomicUsize>,
    /// The transport to the fleet's other replicas, if configured (`supervisor/fleet.rs`).
    fleet: Option<fleet::Fleet>,
    /// The tenants of the table in the order of their last noted activity: who is idle, who is
    /// the least recently used (docs/architecture.md, "Passivation").
    recency: crate::passivation::Recency<LeaseKey>,
    /// The next idle check, when armed.
    idle_timer: Option<SpawnHandle>,
}

/// A forget under way: its tenure, the signal that it is over, and the tenant's handle.
type Forgetting = (
    (LeaseKey, u64),
    Option<oneshot::Receiver<()>>,
    Option<TenantRef>,
);

impl Actor for SupervisorActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        if let Some(every) = self.rt.reconcile_every {
            ctx.run_interval(every, |act, ctx| {
                let cx = act.rt.reconcile.clone();
                ctx.spawn(actix::fut::wrap_future(async move {
                    crate::reconcile::pass::run(&cx, false).await;
                }));
            });
        }
        // A put let go of is reconciled when it falls due (at once when its answer came and
        // nothing can name it any more), not only at the next period.
        let cx = self.rt.reconcile.clone();
        ctx.spawn(actix::fut::wrap_future(crate::reconcile::run_when_due(cx)));
        if let Some(every) = self.rt.local_sweep_every {
            ctx.run_interval(every, |act, ctx| {
                ctx.spawn(act.sweep_all_local().map(|swept, _, _| {
                    if let Err(e) = swept {
                        tracing::warn!(error = %e, "the periodic local sweep failed");
                    }
                }));
            });
        }
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        // Tenant actors live on the arbiters: they go with them (promise 6).
        self.lease_actor.do_send(StopRenewals);
        // The server stops with the replica (its record runs out after `ttl`).
        self.fleet = None;
        self.table.clear();
        self.forgets.clear();
        let running = Arc::new(AtomicUsize::new(self.arbiters.len()));
        for arbiter in self.arbiters.drain(..) {
            arbiter.stop();
            // Joined off this thread: an arbiter busy in a host closure must not block it.
            let ended = Arc::clone(&running);
            let joined = std::thread::Builder::new()
                .name("leasehold-join".into())
                .spawn(move || {
                    let _ = arbiter.join();
                    ended.fetch_sub(1, Ordering::SeqCst);
                });
            if joined.is_err() {
                running.fetch_sub(1, Ordering::SeqCst);
            }
        }
        // Puts of unknown outcome are reconciled a while longer — those in the ledger now and
        // those a tenant's work on a still running arbiter enters after this — by a task that
        // holds only the stores (not the state root, the threads or the tenants); it ends at
        // once when there are none.
        actix::spawn(crate::reconcile::linger(self.rt.reconcile.clone(), running));
    }
}

impl SupervisorActor {
    /// Stops the replica once no `Supervisor` handle is left and either `close` has finished or
    /// no host holds a tenant handle either (nothing can reach it: it stops like a crash, its
    /// leases run out after `ttl`; docs/guarantees.md, promise 6).
    fn stop_if_done(&mut self, ctx: &mut Context<Self>) {
        // A forget still erasing keeps the replica up: stopping would cut it off half done.
        if !self.handle_dropped || !self.forgets.is_empty() {
            return;
        }
        if self.closed {
            ctx.stop();
            return;
        }
        // A close under way is waited for: its caller may still await it.
        if !self.closing && self.host_handles.load(Ordering::SeqCst) == 0 {
            let tenants = self.table.len();
            self.rt
                .events
                .emit(crate::events::Event::ReplicaDropped { tenants });
            ctx.stop();
        }
    }
}

/// The last [`Supervisor`] handle was dropped.
#[derive(Message)]
#[rtype(result = "()")]
struct HandleDropped;

/// The last tenant handle a host held was dropped.
#[derive(Message)]
#[rtype(result = "()")]
struct HostHandlesDropped;

impl Handler<HostHandlesDropped> for SupervisorActor {
    type Result = ();

    fn handle(&mut self, _msg: HostHandlesDropped, ctx: &mut Context<Self>) {
        self.stop_if_done(ctx);
    }
}

impl Handler<HandleDropped> for SupervisorActor {
    type Result = ();

    fn handle(&mut self, _msg: HandleDropped, ctx: &mut Context<Self>) {
        self.handle_dropped = true;
        self.stop_if_done(ctx);
    }
}

/// Opens a tenant.
#[derive(Message)]
#[rtype(result = "Result<TenantRef, Error>")]
struct Open {
    /// The tenant.
    key: LeaseKey,
    /// The epoch of a tenure of it passivated here, when the open reactivates it (a handle's
    /// call, a message to its address): said by a `reactivated` event.
    reactivates: Option<u64>,
    /// Tenants this open has passivated already to make room at `max_open`.
    evictions: u32,
    /// Victims whose passivation failed for this open (they serve on): not asked again by it.
    spared: Vec<LeaseKey>,
    /// The epoch of a passivated tenure of this tenant whose end the open waited for: the open
    /// that comes back must not find it in the table (`open_after_passivation`).
    waited_for: Option<u64>,
}

impl Open {
    /// An open of `key`.
    fn new(key: LeaseKey) -> Self {
        Self::reactivating(key, None)
    }

    /// An open of `key` that reactivates the tenure `reactivates` passivated here.
    fn reactivating(key: LeaseKey, reactivates: Option<u64>) -> Self {
        Self {
            key,
            reactivates,
            evictions: 0,
            spared: Vec::new(),
            waited_for: None,
        }
    }
}

/// Looks a tenant up in the table.
#[derive(Message)]
#[rtype(result = "Option<TenantRef>")]
struct Lookup {
    key: LeaseKey,
}

/// Lists the table: every open tenant and its epoch.
#[derive(Message)]
#[rtype(result = "Vec<(LeaseKey, u64)>")]
struct ListOpen;

/// Closes the replica.
#[derive(Message)]
#[rtype(result = "Result<Vec<LeaseKey>, Error>")]
struct Close;

/// Runs one reconciliation pass.
#[derive(Message)]
#[rtype(result = "crate::ReconcileReport")]
struct ReconcileNow;

impl Handler<ReconcileNow> for SupervisorActor {
    type Result = ResponseFuture<crate::ReconcileReport>;

    fn handle(&mut self, _msg: ReconcileNow, _ctx: &mut Context<Self>) -> Self::Result {
        let cx = self.rt.reconcile.clone();
        Box::pin(async move { crate::reconcile::pass::run(&cx, false).await })
    }
}

/// The lease actor's address.
#[derive(Message)]
#[rtype(result = "Addr<LeaseActor>")]
struct GetLeaseActor;

impl Handler<Open> for SupervisorActor {
    type Result = ResponseActFuture<Self, Result<TenantRef, Error>>;

    fn handle(&mut self, msg: Open, ctx: &mut Context<Self>) -> Self::Result {
        let key = msg.key.clone();
        if self.closing {
            return Box::pin(actix::fut::ready(Err(Error::Closed(
                "the replica is closing".into(),
            ))));
        }
        if let Some(entry) = self.table.get(&key) {
            let now = entry.tenant.status_now();
            if matches!(now, TenantStatus::Passivating | TenantStatus::Passivated) {
                // Being let go, or let go with its `TenantGone` still queued behind this open:
                // the host must not notice (promise 12). Open again once it has left.
                let tenant = entry.tenant.clone();
                return self.open_after_passivation(tenant, msg, ctx);
            }
            if now.is_leaving() || now.is_final() {
                // Its handle is about to stop serving: open again once it has left (or, after a
                // drain that timed out, once it serves again).
                return Box::pin(actix::fut::ready(Err(Error::Draining {
                    key: key.to_string(),
                    state: now.as_str().into(),
                })));
            }
            return Box::pin(actix::fut::ready(Ok(entry.tenant.clone())));
        }
        if self.forgets.iter().any(|((k, _), _, _)| k == &key) {
            // Its erase still deletes this replica's directory of the tenant: a new tenure here
            // would lose its files to it. Open again once the forget is over.
            return Box::pin(actix::fut::ready(Err(Error::Draining {
                key: key.to_string(),
                state: "forgetting".into(),
            })));
        }
        if let Some(shared) = self.opening.get(&key) {
            return Box::pin(shared.clone().into_actor(self).map(|opened, act, _| {
                let tenant = opened?;
                if act.closing {
                    return Err(closed_while_opening(tenant.key()));
                }
                Ok(tenant)
            }));
        }
        let open_now = self.table.len() + self.opening.len() + self.forgets.len();
        if open_now >= self.rt.max_open {
            return self.evict_for(msg, ctx);
        }
        let reactivates = msg.reactivates;
        let arbiter = self.arbiters[self.next_arbiter % self.arbiters.len()].handle();
        self.next_arbiter += 1;
        let attempt = *self
            .attempts
            .entry(key.clone())
            .or_insert_with(leasehold::lease::fresh_attempt);
        let plan = open::OpenPlan {
            rt: self.rt.clone(),
            key: key.clone(),
            arbiter,
            lease_actor: self.lease_actor.clone(),
            supervisor: ctx.address(),
            attempt,
        };
        let shared = open::open_tenant(plan).boxed().shared();
        // A holder elsewhere the router remembers is no longer where to send this tenant's
        // messages once it opens here (the router then asks this actor where it stands).
        self.rt.holders.forget(&key);
        self.opening.insert(key.clone(), shared.clone());
        Box::pin(shared.into_actor(self).map(move |opened, act, ctx| {
            act.opening.remove(&key);
            // An acquire that timed out may land later: the next open of this key asks again
            // under the same attempt, which the store recognises. Any other end spends it.
            let acquire_timed_out = matches!(
                &opened,
                Err(Error::Store(leasehold::durable::StoreError::Timeout {
                    op: "acquire",
                    ..
                }))
            );
            if !acquire_timed_out {
                act.attempts.remove(&key);
            }
            if act.closing {
                // The close that began meanwhile hands this tenant off (hole 1, promise 6).
                let tenant = opened?;
                return Err(closed_while_opening(tenant.key()));
            }
            if opened.is_ok() {
                // What a crashed process left in this tenant goes once seen long enough.
                crate::reconcile::orphans::look_soon(&act.rt.reconcile, key.clone());
            }
            if let Ok(tenant) = &opened {
                let order = act.next_order;
                act.next_order += 1;
                act.table.insert(
                    key.clone(),
                    Entry {
                        tenant: tenant.clone(),
                        order,
                    },
                );
                act.note_activity(&key, None, ctx);
                if let Some(passivated_epoch) = reactivates {
                    act.rt.events.emit(crate::events::Event::Reactivated {
                        key: key.to_string(),
                        epoch: tenant.epoch(),
                        passivated_epoch,
                    });
                }
            }
            opened
        }))
    }
}

impl Handler<Lookup> for SupervisorActor {
    type Result = Option<TenantRef>;

    fn handle(&mut self, msg: Lookup, _ctx: &mut Context<Self>) -> Self::Result {
        self.table.get(&msg.key).map(|e| e.tenant.clone())
    }
}

impl Handler<ListOpen> for SupervisorActor {
    type Result = Vec<(LeaseKey, u64)>;

    fn handle(&mut self, _msg: ListOpen, _ctx: &mut Context<Self>) -> Self::Result {
        let mut open: Vec<_> = self
            .table
            .iter()
            .map(|(key, e)| (key.clone(), e.tenant.epoch()))
            .collect();
        open.sort();
        open
    }
}

impl Handler<GetLeaseActor> for SupervisorActor {
    type Result = Addr<LeaseActor>;

    fn handle(&mut self, _msg: GetLeaseActor, _ctx: &mut Context<Self>) -> Self::Result {
        self.lease_actor.clone()
    }
}

impl Handler<TenantGone> for SupervisorActor {
    type Result = ();

    fn handle(&mut self, msg: TenantGone, ctx: &mut Context<Self>) {
        let tenure = (msg.key.clone(), msg.epoch);
        if self
            .table
            .get(&msg.key)
            .is_some_and(|e| e.tenant.epoch() == msg.epoch)
        {
            self.table.remove(&msg.key);
            self.recency.remove(&msg.key);
            // It may have been the oldest, skipped while it left: the next check falls at the
            // next oldest's time.
            if self.idle_timer.is_some() {
                self.arm_idle_check(ctx);
            }
        }
        // A forget of this tenure, if any, is over (the tenant actor has stopped by itself).
        self.forgets.retain(|(t, _, _)| *t != tenure);
        self.stop_if_done(ctx);
        if !matches!(
            msg.status,
            TenantStatus::Released | TenantStatus::Passivated
        ) {
            // An abandoned copy stays for the next open, unless a successor forgets the tenant;
            // one a failed forget could not delete is dead already.
            let check = self.sweep_local(vec![msg.key]).map(|outcome, _, _| {
                if let Err(e) = outcome {
                    tracing::warn!(error = %e, "checking a local copy against its floor failed");
                }
            });
            ctx.spawn(check);
        }
    }
}

impl Handler<ForgetBegun> for SupervisorActor {
    type Result = ();

    fn handle(&mut self, msg: ForgetBegun, _ctx: &mut Context<Self>) {
        // The tenure leaves the table now: a tenant being forgotten is not handed off by `close`.
        // A retried forget of an older tenure leaves a newer one alone.
        let mut tenant = None;
        if self
            .table
            .get(&msg.key)
            .is_some_and(|e| e.tenant.epoch() == msg.epoch)
        {
            tenant = self.table.remove(&msg.key).map(|e| e.tenant);
            self.recency.remove(&msg.key);
        }
        let tenure = (msg.key, msg.epoch);
        if let Some(i) = self.forgets.iter().position(|(t, _, _)| t == &tenure) {
            let (_, _, earlier) = self.forgets.remove(i);
            tenant = tenant.or(earlier);
        }
        self.forgets.push((tenure, Some(msg.done), tenant));
    }
}
