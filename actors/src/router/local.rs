//! The local path: a message delivered on this replica ([`LocalPath`]) — run on its tenant if
//! it is open and serving here, opened here if nobody holds it, after a wait if it is leaving
//! here; `LeaseHeld { owner }` if another replica holds it (the fleet's router then routes it
//! again). It is also the fleet router's seam with the tenants ([`LocalDelivery`]), and it
//! reaches the supervisor only through [`Tenants`], which holds no handle that keeps the replica
//! up.
//!
//! "Nobody holds it" is decided by the lease store itself: the open's acquire succeeds exactly
//! when no live lease is held (the store's clock), and is refused with the holder otherwise.
//! A tenant that refuses a command with `Draining` ran nothing of it, so it is routed again.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use leasehold::clock::duration_ms;
use leasehold::route::LocalState;
use leasehold::{Error, LeaseKey};
use tokio::time::Instant;

use crate::events::Event;
use crate::message::{ErasedRequest, MessageKind, Prepared, check_idempotency_key};
use crate::runtime::Runtime;
use crate::status::TenantStatus;
use crate::tenant::TenantRef;

/// What the fleet's router needs of this replica's tenants.
pub(crate) trait LocalDelivery: Send + Sync + 'static {
    /// Refuses a message this replica does not know (unknown name or schema version,
    /// [`Error::UnknownMessage`]) or whose idempotency key is not allowed: nothing runs,
    /// nothing is opened, nothing is forwarded. Its kind otherwise.
    fn check(&self, req: &ErasedRequest) -> Result<MessageKind, Error>;

    /// Where the tenant of `key` stands here.
    fn local_state(&self, key: &LeaseKey) -> BoxFuture<'static, LocalState>;

    /// Where the tenant of `key` stands here, when known without asking the supervisor
    /// (serving or leaving through a handle the local path keeps); `None`: ask
    /// [`LocalDelivery::local_state`].
    fn known_state(&self, key: &LeaseKey) -> Option<LocalState>;

    /// Runs `req` here within `deadline`: on the tenant if it is open and serving, after
    /// opening it if nobody holds it. A refusal that means "not here" (`LeaseHeld`, `Fenced`,
    /// `Draining`) ran nothing: the router routes the message again.
    fn deliver_local(
        &self,
        key: &LeaseKey,
        req: ErasedRequest,
        deadline: Instant,
    ) -> BoxFuture<'static, Result<Vec<u8>, Error>>;
}

/// What the local path asks of the supervisor (`supervisor/where_is.rs`). An implementation
/// holds the supervisor's address, never a `Supervisor` handle: a router kept by the replica's
/// own server must not keep the replica up.
pub(crate) trait Tenants: Send + Sync + 'static {
    /// Opens the tenant of `key` here (or joins its open under way); its handle is not counted
    /// as one a host holds. `reactivates`: the epoch of a tenure of it passivated here, whose
    /// handle the router held (the open says `reactivated`).
    fn open(
        &self,
        key: &LeaseKey,
        reactivates: Option<u64>,
    ) -> BoxFuture<'static, Result<TenantRef, Error>>;

    /// The supervisor's own handle of the tenant of `key` in its table (serving, leaving, or
    /// just ended), if any.
    fn find(&self, key: &LeaseKey) -> BoxFuture<'static, Result<Option<TenantRef>, Error>>;

    /// Where the tenant of `key` stands here (an open under way included).
    fn state_of(&self, key: &LeaseKey) -> BoxFuture<'static, LocalState>;
}

/// Where a tenant stands on this replica, with its handle.
enum Here {
    /// Open and serving: run it here.
    Serving(TenantRef),
    /// Open and leaving (draining, flushing, abandoning, forgetting): wait until it has left.
    Leaving(TenantRef),
    /// Not open here (with the epoch of its tenure passivated here, if the router knew one).
    Absent(Option<u64>),
}

/// The local path of one replica. Cheap to clone.
#[derive(Clone)]
pub(crate) struct LocalPath {
    /// The shared runtime: the registry, the limits, the events.
    rt: Arc<Runtime>,
    /// The supervisor's side.
    tenants: Arc<dyn Tenants>,
    /// Handles of tenants open here, asked without a hop to the supervisor while they serve.
    known: Arc<Mutex<HashMap<LeaseKey, TenantRef>>>,
}

impl LocalPath {
    /// The local path of the replica whose runtime is `rt`.
    pub(crate) fn new(rt: Arc<Runtime>, tenants: Arc<dyn Tenants>) -> Self {
        Self {
            rt,
            tenants,
            known: Arc::default(),
        }
    }

    /// Delivers `req` on this replica, within `deadline`. Unknown names and bodies that do not
    /// decode are refused before anything else.
    pub(crate) fn deliver(
        &self,
        key: &LeaseKey,
        req: ErasedRequest,
        deadline: Instant,
    ) -> impl Future<Output = Result<Vec<u8>, Error>> + Send + use<> {
        let (path, key) = (self.clone(), key.clone());
        let started = Instant::now();
        async move {
            let kind = path.rt.messages.kind_of(&req.name, req.version);
            let reached = Arc::new(AtomicBool::new(false));
            let work = path.route_here(&key, req, deadline, reached.clone());
            match tokio::time::timeout_at(deadline, work).await {
                Ok(answer) => answer,
                Err(_) => Err(Error::DeadlineExceeded {
                    key: key.to_string(),
                    after_ms: duration_ms(deadline.saturating_duration_since(started)),
                    outcome_unknown: kind == Some(MessageKind::Command)
                        && reached.load(Ordering::SeqCst),
                }),
            }
        }
    }

    /// The decisions of [`LocalPath::deliver`], until one ends in an answer.
    async fn route_here(
        &self,
        key: &LeaseKey,
        req: ErasedRequest,
        deadline: Instant,
        reached: Arc<AtomicBool>,
    ) -> Result<Vec<u8>, Error> {
        let mut prepared = Some(self.rt.messages.prepare(&req)?);
        let mut backoff = Duration::from_millis(5);
        loop {
            match self.here(key).await? {
                Here::Serving(tenant) => {
                    let prepared = match prepared.take() {
                        Some(p) => p,
                        None => self.rt.messages.prepare(&req)?,
                    };
                    match run_on(&tenant, prepared, &reached).await {
                        // Refused at admission (it began leaving meanwhile), or committed in a
                        // batch its leaving tenure never shipped: nothing of it is in the log.
                        Err(e) if e.is_draining() => {
                            reached.store(false, Ordering::SeqCst);
                            self.wait_until_gone(&tenant, deadline).await;
                        }
                        answer => return answer,
                    }
                }
                Here::Leaving(tenant) => self.wait_until_gone(&tenant, deadline).await,
                Here::Absent(passivated) => match self.tenants.open(key, passivated).await {
                    Ok(tenant) => {
                        tracing::debug!(%key, epoch = tenant.epoch(), message = %req.name,
                            "nobody held the tenant: opened here for a message");
                        self.remember(tenant);
                    }
                    // A forget under way here, or a tenant that has just left: decide again.
                    Err(e) if e.is_draining() => {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_millis(100));
                    }
                    // Another replica holds it: `LeaseHeld { owner }` (the fleet's router
                    // routes it again).
                    Err(e) => return Err(e),
                },
            }
        }
    }

    /// Where the tenant of `key` stands here: the known handle while it serves, else the
    /// supervisor's table.
    async fn here(&self, key: &LeaseKey) -> Result<Here, Error> {
        let known = self.known_handle(key);
        let passivated = known
            .as_ref()
            .and_then(|t| (t.status_now() == TenantStatus::Passivated).then(|| t.epoch()));
        let tenant = match known {
            Some(tenant) if !tenant.status_now().is_final() => Some(tenant),
            _ => self.tenants.find(key).await?,
        };
        Ok(match tenant {
            None => Here::Absent(passivated),
            Some(t) if t.status_now() == TenantStatus::Serving => {
                self.remember(t.clone());
                Here::Serving(t)
            }
            // Over, and about to leave the table: an open waits for that (`Draining`).
            Some(t) if t.status_now().is_final() => Here::Absent(passivated),
            Some(t) => Here::Leaving(t),
        })
    }

    fn known_handle(&self, key: &LeaseKey) -> Option<TenantRef> {
        let known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.get(key).cloned()
    }

    /// Keeps `tenant`'s handle for the next message; handles of tenures over go.
    fn remember(&self, tenant: TenantRef) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        if known.len() >= self.rt.max_open.saturating_mul(2) {
            known.retain(|_, t| !t.status_now().is_final());
        }
        known.insert(tenant.key().clone(), tenant);
    }

    /// Waits (until `deadline`) while `tenant` is leaving this replica; says so once it has.
    async fn wait_until_gone(&self, tenant: &TenantRef, deadline: Instant) {
        let began = Instant::now();
        tenant
            .wait_while_status(TenantStatus::is_leaving, deadline)
            .await;
        self.rt.events.emit(Event::MessageWaited {
            key: tenant.key().to_string(),
            waited_ms: duration_ms(began.elapsed()),
        });
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        if known
            .get(tenant.key())
            .is_some_and(|t| t.epoch() == tenant.epoch())
        {
            known.remove(tenant.key());
        }
    }
}

impl LocalDelivery for LocalPath {
    fn check(&self, req: &ErasedRequest) -> Result<MessageKind, Error> {
        let kind = self
            .rt
            .messages
            .kind_of(&req.name, req.version)
            .ok_or_else(|| Error::UnknownMessage {
                name: req.name.clone(),
                version: req.version,
            })?;
        if let Some(key) = &req.idempotency_key {
            check_idempotency_key(key)?;
        }
        Ok(kind)
    }

    fn local_state(&self, key: &LeaseKey) -> BoxFuture<'static, LocalState> {
        match self.known_state(key) {
            Some(state) => Box::pin(async move { state }),
            None => self.tenants.state_of(key),
        }
    }

    fn known_state(&self, key: &LeaseKey) -> Option<LocalState> {
        match self.known_handle(key).map(|t| t.status_now()) {
            Some(TenantStatus::Serving) => Some(LocalState::Serving),
            Some(s) if s.is_leaving() => Some(LocalState::Leaving),
            _ => None,
        }
    }

    fn deliver_local(
        &self,
        key: &LeaseKey,
        req: ErasedRequest,
        deadline: Instant,
    ) -> BoxFuture<'static, Result<Vec<u8>, Error>> {
        Box::pin(self.deliver(key, req, deadline))
    }
}

/// Runs a prepared message on `tenant`; `reached` is set once a command is handed to it (from
/// then on a lapsed deadline is an unknown outcome).
async fn run_on(
    tenant: &TenantRef,
    prepared: Prepared,
    reached: &AtomicBool,
) -> Result<Vec<u8>, Error> {
    match prepared {
        Prepared::Command { name, key, call } => {
            reached.store(true, Ordering::SeqCst);
            tenant.command(name, key, call).await
        }
        Prepared::Query { call } => tenant.query(call).await,
    }
}
