//! The tenant's public handle, [`TenantRef`], and [`Ticket`], the pass for long work.
//!
//! Every method sends its message at once, when it is called, not when its future is first
//! polled: calls made one after another reach the tenant in that order.

use std::future::Future;
use std::sync::Arc;

use actix::prelude::*;
use leasehold::layout::ImageRef;
use leasehold::ledger::{LedgerError, LedgerTx};
use leasehold::{Error, LeaseKey};
use tokio::sync::oneshot;
use tracing::Instrument;

mod actor;
mod delivery;
mod effects;
pub(crate) mod log;
pub(crate) mod messages;
pub(crate) mod publish;
mod shipping;
pub(crate) mod tenure;

pub(crate) use actor::{TenantActor, TenantParts};
use messages::*;

use crate::runtime::Runtime;
use crate::status::TenantStatus;

/// What a call to a tenant whose actor has stopped gets: its tenure is over, so the call is
/// fenced (promise 1 in docs/guarantees.md); nothing of it ran.
fn closed(key: &LeaseKey) -> Error {
    Error::Fenced {
        key: key.to_string(),
    }
}

/// A host's handle to one open tenant. Cheap to clone; every clone talks to the same actor.
///
/// Host code reaches the ledger only inside [`TenantRef::run`] or [`Ticket::run`], through a
/// [`LedgerTx`] that cannot leave the closure (promise 8 in docs/guarantees.md). Neither the transaction nor
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
    /// How long a handoff's caller waits for the drain. (A handle holds nothing else of the
    /// replica: an old handle keeps neither its stores, its observer, nor its root's lock.)
    drain_timeout: std::time::Duration,
    /// The status the actor last recorded; the final one once it has stopped.
    ended: Arc<crate::status::StatusCell>,
    /// Counts this handle as one a host holds (those `open` handed out; the supervisor's own
    /// have none): a replica whose `Supervisor` handles are gone serves while any is left.
    _host: Option<crate::supervisor::HostHold>,
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
        rt: &Runtime,
        ended: Arc<crate::status::StatusCell>,
    ) -> Self {
        Self {
            key,
            epoch,
            addr,
            drain_timeout: rt.drain_timeout,
            ended,
            _host: None,
        }
    }

    /// This handle, counted as one a host holds.
    pub(crate) fn held_by(self, host: crate::supervisor::HostHold) -> Self {
        Self {
            _host: Some(host),
            ..self
        }
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
    /// if the lease still holds (promise 1 in docs/guarantees.md). `Ok` means committed; `Fenced` means
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
    /// publish the final image, drop the local copy, release the lease. On `DrainTimeout` or a
    /// store failure the tenant serves again; on `Draining` an abandon or forget overtook it.
    ///
    /// The drain deadline is counted from this call, on the caller's side: a tenant whose
    /// thread is held by a blocking run cannot stretch it (promise 6 in docs/guarantees.md).
    /// A drain that the tenant finishes in the last instant may still flush after the caller
    /// heard `DrainTimeout`: the handoff then reports a failure it did not have, never the
    /// other way round.
    pub fn handoff(&self) -> impl Future<Output = Result<(), Error>> + use<> {
        let limit = self.drain_timeout;
        let deadline = tokio::time::Instant::now() + limit;
        let (drained, drained_rx) = oneshot::channel();
        let (done, done_rx) = oneshot::channel();
        // Sent now, never deferred by a full mailbox: it keeps its place among later calls.
        self.addr.do_send(Handoff {
            deadline,
            drained,
            done,
        });
        let key = self.key.clone();
        let addr = self.addr.clone();
        let span = tracing::info_span!("handoff", key = %self.key, epoch = self.epoch);
        let started = std::time::Instant::now();
        let handoff = async move {
            let after_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
            let drain = match tokio::time::timeout_at(deadline, drained_rx).await {
                Err(_deadline) => {
                    // Whatever the tenant is doing, what is sent after this sees it serving.
                    addr.do_send(DrainOver { deadline });
                    Err(Error::DrainTimeout {
                        key: key.to_string(),
                        after_ms,
                    })
                }
                Ok(answer) => answer.map_err(|_| closed(&key))?,
            };
            let flush_bound = drain?;
            match tokio::time::timeout(flush_bound, done_rx).await {
                Ok(done) => done.map_err(|_| closed(&key))?,
                // The tenant's thread is held up (a neighbour's blocking run) or its store is
                // slow: the caller hears it now; the tenant may still hand off (outcome unknown).
                Err(_) => Err(Error::Store(leasehold::durable::StoreError::Timeout {
                    op: "flush",
                    after_ms: u64::try_from(flush_bound.as_millis()).unwrap_or(u64::MAX),
                })),
            }
        };
        async move {
            let outcome = handoff.instrument(span).await;
            crate::metrics::handed_off(outcome.is_ok(), started.elapsed());
            outcome
        }
    }

    /// Stops like a crash: nothing is flushed, the local file stays until the next open of this
    /// tenant on this replica, and the lease is handed back. A no-op while a forget runs, and
    /// once the tenure is over.
    pub fn abandon(&self) -> impl Future<Output = Result<(), Error>> + use<> {
        let (reply, answer) = oneshot::channel();
        self.addr.do_send(Abandon { reply });
        async move { answer.await.unwrap_or(Ok(())) }
    }

    /// Erases the tenant: raises the floor to this epoch, deletes every image, manifest and
    /// local file at or below it, and releases the lease (promise 5 in docs/guarantees.md).
    /// Wins over a handoff whose upload is under way.
    pub fn forget(&self) -> impl Future<Output = Result<(), Error>> + use<> {
        let (reply, answer) = oneshot::channel();
        self.addr.do_send(Forget { reply });
        let key = self.key.clone();
        let span = tracing::info_span!("forget", key = %self.key, epoch = self.epoch);
        async move { answer.await.map_err(|_| closed(&key))? }.instrument(span)
    }

    /// Where the tenant is in its life. A stopped actor reads as the final state it reached.
    pub fn status(&self) -> impl Future<Output = TenantStatus> + use<> {
        let request = self.addr.send(GetStatus);
        let ended = self.ended.clone();
        async move {
            match request.await {
                Ok(status) => status,
                Err(_) => ended.get(),
            }
        }
    }

    /// The status the tenant last recorded, read without a message (the supervisor asks it
    /// without waiting on a busy tenant).
    pub(crate) fn status_now(&self) -> TenantStatus {
        self.ended.get()
    }

    /// Waits while the tenant's status satisfies `pred`, at most until `deadline`.
    pub(crate) async fn wait_while_status(
        &self,
        pred: impl Fn(TenantStatus) -> bool,
        deadline: tokio::time::Instant,
    ) -> TenantStatus {
        self.ended.wait_while(pred, deadline).await
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
