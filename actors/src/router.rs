//! Tenant addresses: a host sends a typed message to `(org, tenant)` ([`TenantAddr`]) through
//! its replica ([`Supervisor::send`], [`Supervisor::ask`], [`Supervisor::request`]) and never
//! holds a tenant's handle.
//!
//! ```text
//!   send(addr, msg) ── encode ──> deliver(addr, ErasedRequest, deadline)
//!     the tenant is open here and serving ─────────────> run it here (TenantRef)
//!     it is leaving here (draining, flushing, forgotten) ─> wait for it to leave, decide again
//!     nobody holds it (free, released, expired) ────────> open it here, run it
//!     another replica holds it ─────────────────────────> the holder-elsewhere path
//!                                                         (today: LeaseHeld { owner })
//!   <── decode the reply
//! ```
//!
//! Every step is bounded by the request's deadline (`ask_timeout` unless the caller gives one):
//! a deadline that passes once a command reached its tenant is an unknown outcome
//! (`DeadlineExceeded { outcome_unknown: true }`), before that nothing ran. A tenant that
//! refuses a command with `Draining` ran nothing of it, so it is routed again.
//!
//! "Nobody holds it" is decided by the lease store itself: the open's acquire succeeds exactly
//! when no live lease is held (the store's clock), and is refused with the holder otherwise.
//! The path for a holder elsewhere is [`HolderElsewhere`], where forwarding plugs in
//! (docs/architecture.md, the path of a message).

use std::collections::HashMap;
use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use leasehold::clock::duration_ms;
use leasehold::{Error, LeaseKey, OrgId, TenantId};
use tokio::time::Instant;

use crate::events::Event;
use crate::message::{ErasedRequest, MessageKind, Prepared, Sendable, TenantMessage, kind};
use crate::runtime::Runtime;
use crate::status::TenantStatus;
use crate::supervisor::Supervisor;
use crate::tenant::TenantRef;

/// The address of a tenant: its organization and tenant id. Any replica of the fleet takes a
/// message for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenantAddr {
    /// The organization.
    pub org: OrgId,
    /// The tenant.
    pub tenant: TenantId,
}

impl TenantAddr {
    /// The address of `tenant` of `org`.
    pub fn new(org: OrgId, tenant: TenantId) -> Self {
        Self { org, tenant }
    }

    /// `<org>/<tenant>`: the tenant's lease key.
    pub fn key(&self) -> LeaseKey {
        LeaseKey::new(&self.org, &self.tenant)
    }
}

impl std::fmt::Display for TenantAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.org, self.tenant)
    }
}

/// The replica that holds a tenant's live lease, as the lease store said when this replica
/// tried to open it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    /// The holding replica's id.
    pub(crate) owner: String,
    /// Its tenure's epoch.
    pub(crate) epoch: u64,
}

/// Where a message goes when another replica holds its tenant: forwarding plugs in here
/// ([`Supervisor::set_holder_elsewhere`]). Without it, the caller hears `LeaseHeld { owner }`.
pub(crate) trait HolderElsewhere: Send + Sync + 'static {
    /// Delivers `req` for `addr` to `holder` (or wherever the tenant is by then) and returns
    /// its reply, within `deadline`.
    fn deliver(
        &self,
        addr: TenantAddr,
        req: ErasedRequest,
        deadline: Instant,
        holder: Holder,
    ) -> BoxFuture<'static, Result<Vec<u8>, Error>>;
}

/// Where a tenant stands on this replica.
enum Here {
    /// Open and serving: run it here.
    Serving(TenantRef),
    /// Open and leaving (draining, flushing, abandoning, forgetting): wait until it has left.
    Leaving(TenantRef),
    /// Not open here.
    Absent,
}

/// A replica's router: one per [`Supervisor`], shared by its clones.
pub(crate) struct Router {
    /// The shared runtime: the registry, the deadlines, the events.
    rt: Arc<Runtime>,
    /// Handles of tenants open here, asked without a hop to the supervisor while they serve.
    known: Mutex<HashMap<LeaseKey, TenantRef>>,
    /// The path for a tenant another replica holds.
    elsewhere: RwLock<Option<Arc<dyn HolderElsewhere>>>,
}

impl Router {
    /// The router of the replica whose runtime is `rt`.
    pub(crate) fn new(rt: Arc<Runtime>) -> Self {
        Self {
            rt,
            known: Mutex::default(),
            elsewhere: RwLock::default(),
        }
    }
}

/// A message on its way to a tenant's address, with its options; `.await` it.
#[must_use = "a request goes when it is awaited"]
pub struct MessageRequest<K, M> {
    /// The replica it goes through.
    sup: Supervisor,
    /// Where it goes.
    addr: TenantAddr,
    /// The message.
    msg: M,
    /// The caller's idempotency key (commands).
    key: Option<String>,
    /// How long the caller waits; `ask_timeout` if `None`.
    deadline: Option<Duration>,
    /// Command or query.
    _kind: PhantomData<fn() -> K>,
}

impl<M: TenantMessage> MessageRequest<kind::Command, M> {
    /// The command's idempotency key: a second delivery with the same key (a retry after a
    /// lost answer, an unknown outcome) returns the reply stored with the first without running
    /// it again, within `idempotency_window` (docs/guarantees.md, promise 11). 1 to 256 bytes;
    /// one key, one command.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

impl<K, M: Sendable<K>> MessageRequest<K, M> {
    /// How long the caller waits for the reply, everything included (an open, a handoff under
    /// way, the output gate); `ask_timeout` if not given.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }
}

impl<K: 'static, M: Sendable<K>> IntoFuture for MessageRequest<K, M> {
    type Output = Result<M::Reply, Error>;
    type IntoFuture = BoxFuture<'static, Result<M::Reply, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        let MessageRequest {
            sup,
            addr,
            msg,
            key,
            deadline,
            ..
        } = self;
        let limit = deadline.unwrap_or(sup.router.rt.ask_timeout);
        Box::pin(async move {
            let deadline = Instant::now() + limit;
            let req = ErasedRequest::of(&msg, key)?;
            let reply = sup.deliver(&addr, req, deadline).await?;
            leasehold::codec::decode_message(&reply).map_err(|e| Error::BadMessage {
                reason: format!(
                    "the reply of {} version {} does not decode: {e}",
                    M::NAME,
                    M::VERSION
                ),
            })
        })
    }
}

impl Supervisor {
    /// A message to the tenant at `addr`, to adjust (`.idempotency_key(..)`, `.deadline(..)`)
    /// and `.await`. The message must be registered (`RuntimeConfig::messages`).
    pub fn request<K, M: Sendable<K>>(&self, addr: &TenantAddr, msg: M) -> MessageRequest<K, M> {
        MessageRequest {
            sup: self.clone(),
            addr: addr.clone(),
            msg,
            key: None,
            deadline: None,
            _kind: PhantomData,
        }
    }

    /// Sends `msg` to the tenant at `addr` and returns its reply, within `ask_timeout`: run
    /// here if this replica holds the tenant, opened here if nobody does. A command runs in the
    /// tenant's group commit like `TenantRef::run`; a query reads beside it. Either way the reply
    /// leaves only once everything it could have seen is acknowledged (docs/guarantees.md,
    /// promise 11).
    pub fn send<K: 'static, M: Sendable<K>>(
        &self,
        addr: &TenantAddr,
        msg: M,
    ) -> impl Future<Output = Result<M::Reply, Error>> + use<K, M> {
        self.request(addr, msg).into_future()
    }

    /// [`Supervisor::send`] with a deadline of its own.
    pub fn ask<K: 'static, M: Sendable<K>>(
        &self,
        addr: &TenantAddr,
        msg: M,
        deadline: Duration,
    ) -> impl Future<Output = Result<M::Reply, Error>> + use<K, M> {
        self.request(addr, msg).deadline(deadline).into_future()
    }

    /// Plugs in the path for a message whose tenant another replica holds (forwarding).
    #[allow(dead_code)] // the transport's entry point
    pub(crate) fn set_holder_elsewhere(&self, path: Arc<dyn HolderElsewhere>) {
        let mut slot = self
            .router
            .elsewhere
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        *slot = Some(path);
    }

    /// Delivers an erased request to the tenant at `addr`, wherever it is: the entry point of
    /// every message this replica routes (its host's, and later those forwarded to it).
    pub(crate) fn deliver(
        &self,
        addr: &TenantAddr,
        req: ErasedRequest,
        deadline: Instant,
    ) -> impl Future<Output = Result<Vec<u8>, Error>> + use<> {
        self.deliver_local(addr, req, deadline)
    }

    /// Delivers an erased request on this replica: run here if the tenant is open and serving
    /// here, opened here if nobody holds it, after a wait if it is leaving here; a tenant
    /// another replica holds goes to the holder-elsewhere path ([`HolderElsewhere`]), else
    /// `LeaseHeld { owner }`. Unknown names and bodies that do not decode are refused before
    /// anything else. Everything within `deadline`.
    pub(crate) fn deliver_local(
        &self,
        addr: &TenantAddr,
        req: ErasedRequest,
        deadline: Instant,
    ) -> impl Future<Output = Result<Vec<u8>, Error>> + use<> {
        let (sup, addr) = (self.clone(), addr.clone());
        let started = Instant::now();
        async move {
            let kind = sup.router.rt.messages.kind_of(&req.name, req.version);
            let reached = Arc::new(AtomicBool::new(false));
            let work = sup.route_here(&addr, req, deadline, reached.clone());
            match tokio::time::timeout_at(deadline, work).await {
                Ok(answer) => answer,
                Err(_) => Err(Error::DeadlineExceeded {
                    key: addr.key().to_string(),
                    after_ms: duration_ms(deadline.saturating_duration_since(started)),
                    outcome_unknown: kind == Some(MessageKind::Command)
                        && reached.load(Ordering::SeqCst),
                }),
            }
        }
    }

    /// The decisions of [`Supervisor::deliver_local`], until one ends in an answer.
    async fn route_here(
        &self,
        addr: &TenantAddr,
        req: ErasedRequest,
        deadline: Instant,
        reached: Arc<AtomicBool>,
    ) -> Result<Vec<u8>, Error> {
        let rt = self.router.rt.clone();
        let key = addr.key();
        let mut prepared = Some(rt.messages.prepare(&req)?);
        let mut backoff = Duration::from_millis(5);
        loop {
            match self.here(&key).await? {
                Here::Serving(tenant) => {
                    let prepared = match prepared.take() {
                        Some(p) => p,
                        None => rt.messages.prepare(&req)?,
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
                Here::Absent => match self.open_here(&key).await {
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
                    Err(Error::LeaseHeld { owner, epoch, .. }) => {
                        tracing::debug!(%key, %owner, epoch, message = %req.name,
                            "another replica holds the tenant");
                        let holder = Holder { owner, epoch };
                        return self.elsewhere(addr, req, deadline, holder).await;
                    }
                    Err(e) => return Err(e),
                },
            }
        }
    }

    /// Where the tenant of `key` stands here: the known handle while it serves, else the
    /// supervisor's table.
    async fn here(&self, key: &LeaseKey) -> Result<Here, Error> {
        let known = self.known_handle(key);
        let tenant = match known {
            Some(tenant) if !tenant.status_now().is_final() => Some(tenant),
            _ => self.lookup(key).await?,
        };
        Ok(match tenant {
            None => Here::Absent,
            Some(t) if t.status_now() == TenantStatus::Serving => {
                self.remember(t.clone());
                Here::Serving(t)
            }
            // Over, and about to leave the table: an open waits for that (`Draining`).
            Some(t) if t.status_now().is_final() => Here::Absent,
            Some(t) => Here::Leaving(t),
        })
    }

    fn known_handle(&self, key: &LeaseKey) -> Option<TenantRef> {
        let known = self
            .router
            .known
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        known.get(key).cloned()
    }

    /// Keeps `tenant`'s handle for the next message; handles of tenures over go.
    fn remember(&self, tenant: TenantRef) {
        let mut known = self
            .router
            .known
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if known.len() >= self.router.rt.max_open.saturating_mul(2) {
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
        self.router.rt.events.emit(Event::MessageWaited {
            key: tenant.key().to_string(),
            waited_ms: duration_ms(began.elapsed()),
        });
        let mut known = self
            .router
            .known
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if known
            .get(tenant.key())
            .is_some_and(|t| t.epoch() == tenant.epoch())
        {
            known.remove(tenant.key());
        }
    }

    /// The holder-elsewhere path, or `LeaseHeld { owner }` without one.
    async fn elsewhere(
        &self,
        addr: &TenantAddr,
        req: ErasedRequest,
        deadline: Instant,
        holder: Holder,
    ) -> Result<Vec<u8>, Error> {
        let path = self
            .router
            .elsewhere
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        match path {
            Some(path) => path.deliver(addr.clone(), req, deadline, holder).await,
            None => Err(Error::LeaseHeld {
                key: addr.key().to_string(),
                owner: holder.owner,
                epoch: holder.epoch,
            }),
        }
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
