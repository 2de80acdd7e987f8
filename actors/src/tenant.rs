//! The tenant's public handle, [`TenantRef`], and [`Ticket`], the pass for long work.
//!
//! Every method sends its message at once, when it is called, not when its future is first
//! polled: calls made one after another reach the tenant in that order.

use std::future::Future;

use actix::prelude::*;
use leasehold::layout::ImageRef;
use leasehold::ledger::{LedgerError, LedgerTx};
use leasehold::{Error, LeaseKey};
use tokio::sync::oneshot;

mod actor;
mod lifecycle;
pub(crate) mod messages;
pub(crate) mod publish;

pub(crate) use actor::{TenantActor, TenantParts};
use messages::*;

use crate::status::TenantStatus;
use crate::supervisor::{Handoff, SupervisorActor};

fn closed(key: &LeaseKey) -> Error {
    Error::Closed(format!("tenant {key} has stopped"))
}

/// A host's handle to one open tenant. Cheap to clone; every clone talks to the same actor.
///
/// Host code reaches the ledger only inside [`TenantRef::run`] or [`Ticket::run`], through a
/// [`LedgerTx`] that cannot leave the closure (CONTRACT promise 8). Neither the transaction nor
/// a statement can be kept:
///
/// ```compile_fail
/// # async fn f(tenant: leasehold_actors::TenantRef) {
/// // V1/V3: the closure must return something 'static, so the guarded ledger cannot escape it.
/// let kept = tenant.run(|ledger| Ok(ledger)).await;
/// # }
/// ```
///
/// ```compile_fail
/// # async fn f(tenant: leasehold_actors::TenantRef) {
/// // V1: nor can a statement prepared on it.
/// let stmt = tenant.run(|ledger| ledger.prepare("SELECT 1")).await;
/// # }
/// ```
///
/// ```compile_fail
/// # async fn f(tenant: leasehold_actors::TenantRef) {
/// // T1: an async block that uses the ledger later cannot be returned from the bracket either:
/// // work that outlives a run must take a `Ticket` and run again.
/// let later = tenant.run(|ledger| Ok(async move { ledger.event_count() })).await;
/// # }
/// ```
#[derive(Clone)]
pub struct TenantRef {
    /// `<org>/<tenant>`.
    key: LeaseKey,
    /// The epoch of the tenure this handle belongs to.
    epoch: u64,
    /// The tenant actor.
    addr: Addr<TenantActor>,
    /// The supervisor, which runs handoffs.
    supervisor: Addr<SupervisorActor>,
}

impl std::fmt::Debug for TenantRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantRef")
            .field("key", &self.key)
            .field("epoch", &self.epoch)
            .finish()
    }
}

impl TenantRef {
    pub(crate) fn new(
        key: LeaseKey,
        epoch: u64,
        addr: Addr<TenantActor>,
        supervisor: Addr<SupervisorActor>,
    ) -> Self {
        Self {
            key,
            epoch,
            addr,
            supervisor,
        }
    }

    pub(crate) fn addr(&self) -> &Addr<TenantActor> {
        &self.addr
    }

    /// `<org>/<tenant>`.
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// The epoch of this tenure.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Runs `f` in the ledger, atomically: its own savepoint of a group commit that commits only
    /// if the lease still holds (CONTRACT promise 1). `Ok` means committed; `Fenced` means
    /// nothing of it was; an `Err` from `f` (or a panic in it) rolls back only its own writes.
    pub fn run<R, F>(&self, f: F) -> impl Future<Output = Result<R, Error>> + use<R, F>
    where
        F: FnOnce(&mut LedgerTx<'_>) -> Result<R, LedgerError> + Send + 'static,
        R: Send + 'static,
    {
        send_run(&self.addr, &self.key, None, f)
    }

    /// Admits long work: the returned [`Ticket`] may run while the tenant drains, and a handoff
    /// waits (up to its deadline) until every ticket is dropped. Refused with `Draining` once a
    /// handoff, abandon or forget has begun.
    pub fn admit(&self) -> impl Future<Output = Result<Ticket, Error>> + use<> {
        let request = self.addr.send(Admit);
        let tenant = self.clone();
        async move {
            let id = request.await.map_err(|_| closed(&tenant.key))??;
            Ok(Ticket { id, tenant })
        }
    }

    /// Publishes an image of what is committed now; returns the head (unchanged when nothing
    /// was written since the last image).
    pub fn snapshot(&self) -> impl Future<Output = Result<Option<ImageRef>, Error>> + use<> {
        let request = self.addr.send(Snapshot);
        let key = self.key.clone();
        async move { request.await.map_err(|_| closed(&key))? }
    }

    /// Hands the tenant off gracefully: drain admitted work (up to the drain deadline), freeze,
    /// publish the final image, release the lease, drop the local copy. On `DrainTimeout` or a
    /// store failure the tenant serves again; on `Draining` an abandon or forget overtook it.
    pub fn handoff(&self) -> impl Future<Output = Result<(), Error>> + use<> {
        let request = self.supervisor.send(Handoff {
            tenant: self.clone(),
        });
        let key = self.key.clone();
        async move { request.await.map_err(|_| closed(&key))? }
    }

    /// Stops like a crash: nothing is flushed, the local file stays until the next open of this
    /// tenant on this replica, and the lease is handed back. A no-op while a forget runs.
    pub fn abandon(&self) -> impl Future<Output = Result<(), Error>> + use<> {
        let request = self.addr.send(Abandon);
        let key = self.key.clone();
        async move { request.await.map_err(|_| closed(&key))? }
    }

    /// Erases the tenant: raises the floor to this epoch, deletes every image, manifest and
    /// local file at or below it, and releases the lease (CONTRACT promise 5). Wins over a
    /// handoff whose upload is under way.
    pub fn forget(&self) -> impl Future<Output = Result<(), Error>> + use<> {
        let request = self.addr.send(Forget);
        let key = self.key.clone();
        async move { request.await.map_err(|_| closed(&key))? }
    }

    /// Where the tenant is in its life. A stopped actor reads as `Released`.
    pub fn status(&self) -> impl Future<Output = TenantStatus> + use<> {
        let request = self.addr.send(GetStatus);
        async move { request.await.unwrap_or(TenantStatus::Released) }
    }

    /// Whether the tenant is serving.
    pub async fn is_open(&self) -> bool {
        self.status().await == TenantStatus::Serving
    }
}

fn send_run<R, F>(
    addr: &Addr<TenantActor>,
    key: &LeaseKey,
    ticket: Option<u64>,
    f: F,
) -> impl Future<Output = Result<R, Error>> + use<R, F>
where
    F: FnOnce(&mut LedgerTx<'_>) -> Result<R, LedgerError> + Send + 'static,
    R: Send + 'static,
{
    let (reply, answer) = oneshot::channel();
    let job = Box::new(TypedJob { f, reply });
    let request = addr.send(Run { ticket, job });
    let key = key.clone();
    async move {
        request.await.map_err(|_| closed(&key))?;
        answer.await.map_err(|_| closed(&key))?
    }
}

/// A pass for admitted long work. While it lives, a handoff's drain waits for it (up to the drain
/// deadline), and [`Ticket::run`] is accepted even though the tenant refuses new work. Drop it
/// when the work is done.
pub struct Ticket {
    /// The ticket's id within its tenure.
    id: u64,
    /// The tenant it was admitted by.
    tenant: TenantRef,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("id", &self.id)
            .field("tenant", &self.tenant.key)
            .finish()
    }
}

impl Ticket {
    /// Runs `f` like [`TenantRef::run`], also while the tenant drains.
    pub fn run<R, F>(&self, f: F) -> impl Future<Output = Result<R, Error>> + use<R, F>
    where
        F: FnOnce(&mut LedgerTx<'_>) -> Result<R, LedgerError> + Send + 'static,
        R: Send + 'static,
    {
        send_run(&self.tenant.addr, &self.tenant.key, Some(self.id), f)
    }

    /// The tenant this ticket was admitted by.
    pub fn tenant(&self) -> &TenantRef {
        &self.tenant
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.tenant.addr.do_send(Retire { ticket: self.id });
    }
}
