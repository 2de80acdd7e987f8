//! The tenant's public handle, [`TenantRef`], and [`Ticket`], the pass for long work.
//!
//! Every method sends its message at once, when it is called, not when its future is first
//! polled: calls made one after another reach the tenant in that order.
//!
//! A handle a host holds re-resolves: a call that finds its tenure passivated (or being
//! passivated) waits for it to end, reopens the tenant through the supervisor and runs there
//! (docs/architecture.md, "Passivation"). A run refused that way ran nothing, and its closure
//! comes back to the handle with the refusal ([`RunOutcome`]). A tenure that ended any other
//! way (handed off, forgotten, abandoned, lost) answers as it always did: `Fenced`, `Draining`.

use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

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
pub(crate) use messages::RunOutcome;
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
    /// What every clone of this handle shares: the key, the tenure it is bound to.
    shared: Arc<Shared>,
    /// Counts this handle as one a host holds (those `open` handed out; the supervisor's own
    /// have none): a replica whose `Supervisor` handles are gone serves while any is left. It
    /// is also the handle's way back to its supervisor: only a handle a host holds reopens a
    /// passivated tenant.
    _host: Option<Arc<dyn HostHandle>>,
}

/// What the clones of one handle share.
struct Shared {
    /// `<org>/<tenant>`.
    key: LeaseKey,
    /// The tenure the handle is bound to now: a host's handle is bound again when its tenure
    /// was passivated and a call reopened the tenant (never after any other end).
    bound: RwLock<Bound>,
    /// How long a handoff's caller waits for the drain. (A handle holds nothing else of the
    /// replica: an old handle keeps neither its stores, its observer, nor its root's lock.)
    drain_timeout: Duration,
    /// How long a call waits for a passivation under way to end before it reopens the tenant.
    leave_limit: Duration,
}

/// What a handle a host holds keeps of the supervisor that handed it out: its place in the count
/// of handles hosts hold (dropped with the last clone), and the way back to reopen a passivated
/// tenant. The supervisor implements it; the tenant names no supervisor type (no circle).
pub(crate) trait HostHandle: Send + Sync + 'static {
    /// Opens `key` again after its tenure `passivated_epoch` was passivated here.
    fn reopen(
        &self,
        key: &LeaseKey,
        passivated_epoch: u64,
    ) -> futures::future::BoxFuture<'static, Result<TenantRef, Error>>;
}

/// One tenure a handle talks to.
#[derive(Clone)]
pub(crate) struct Bound {
    /// Its epoch.
    pub(crate) epoch: u64,
    /// Its actor.
    pub(crate) addr: Addr<TenantActor>,
    /// The status its actor last recorded; the final one once it has stopped.
    pub(crate) ended: Arc<crate::status::StatusCell>,
    /// Its activity, which the supervisor reads to find idle tenants.
    pub(crate) activity: Arc<crate::passivation::Activity>,
}

/// How many times one call reopens a passivated tenant before it gives up (a tenant passivated
/// again and again under it: each time its answer was a refusal, nothing ran).
const REOPENS: usize = 3;

/// What a call does after its tenure refused it or was found stopped.
enum Next {
    /// Go again, on the tenure the handle is bound to now.
    Again,
    /// The refusal stands: the tenure ended otherwise than by passivation.
    Stop,
}

impl std::fmt::Debug for TenantRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TenantRef")
            .field("key", &self.shared.key)
            .field("epoch", &self.epoch())
            .finish()
    }
}

impl TenantRef {
    pub(crate) fn new(key: LeaseKey, bound: Bound, rt: &Runtime) -> Self {
        Self {
            shared: Arc::new(Shared {
                key,
                bound: RwLock::new(bound),
                drain_timeout: rt.drain_timeout,
                leave_limit: rt.leave_limit(),
            }),
            _host: None,
        }
    }

    /// This handle, counted as one a host holds, with a binding of its own (the supervisor's
    /// handle stays bound to its tenure whatever the host's does).
    pub(crate) fn held_by(self, host: Arc<dyn HostHandle>) -> Self {
        Self {
            shared: Arc::new(Shared {
                key: self.shared.key.clone(),
                bound: RwLock::new(self.bound()),
                drain_timeout: self.shared.drain_timeout,
                leave_limit: self.shared.leave_limit,
            }),
            _host: Some(host),
        }
    }

    /// The tenure this handle talks to now.
    pub(crate) fn bound(&self) -> Bound {
        self.shared
            .bound
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// `<org>/<tenant>`.
    pub fn key(&self) -> &LeaseKey {
        &self.shared.key
    }

    /// The epoch of the tenure this handle talks to (a newer one once a call reopened a
    /// passivated tenant).
    pub fn epoch(&self) -> u64 {
        self.shared
            .bound
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .epoch
    }

    /// Runs `f` in the ledger, atomically: its own savepoint of a group commit that commits only
    /// if the lease still holds (promise 1 in docs/guarantees.md). `Ok` means committed; `Fenced` means
    /// nothing of it was; an `Err` from `f` (or a panic in it) rolls back only its own writes.
    /// If the tenure was passivated, the tenant is reopened here and `f` runs there (promise 12).
    pub fn run<R, F>(&self, f: F) -> impl Future<Output = Result<R, Error>> + use<R, F>
    where
        F: FnOnce(&mut LedgerTx<'_>) -> Result<R, LedgerError> + Send + 'static,
        R: Send + 'static,
    {
        let mut tried = self.bound();
        let first = send_run(&tried.addr, None, f);
        let this = self.clone();
        async move {
            let mut outcome = first.await;
            for _ in 0..REOPENS {
                let (error, f) = match outcome {
                    RunOutcome::Ran(answer) => return answer,
                    RunOutcome::Refused(error, f) => (error, f),
                    RunOutcome::Undelivered(f) => (closed(this.key()), f),
                };
                match this.re_resolve(&tried, &error).await? {
                    Next::Stop => return Err(error),
                    Next::Again => {
                        tried = this.bound();
                        outcome = send_run(&tried.addr, None, f).await;
                    }
                }
            }
            outcome.into_answer(this.key())
        }
    }

    /// Admits long work: the returned [`Ticket`] may run while the tenant drains, and a handoff
    /// waits (up to its deadline) until every ticket is dropped. Refused with `Draining` once a
    /// handoff, abandon or forget has begun. A live ticket keeps its tenant from being
    /// passivated; a passivated tenant is reopened here.
    pub fn admit(&self) -> impl Future<Output = Result<Ticket, Error>> + use<> {
        let tried = self.bound();
        let request = tried.addr.send(Admit);
        let this = self.clone();
        async move {
            let mut request = request;
            let mut tried = tried;
            let mut reopens = 0;
            loop {
                match request
                    .await
                    .map_err(|_| closed(this.key()))
                    .and_then(|r| r)
                {
                    Ok(id) => {
                        let tenant = this.clone();
                        return Ok(Ticket {
                            id,
                            tenant,
                            tenure: tried,
                        });
                    }
                    Err(error) if reopens < REOPENS => {
                        reopens += 1;
                        if let Next::Stop = this.re_resolve(&tried, &error).await? {
                            return Err(error);
                        }
                        tried = this.bound();
                        request = tried.addr.send(Admit);
                    }
                    Err(error) => return Err(error),
                }
            }
        }
    }

    /// Publishes an image of what is committed now; returns the head (unchanged when nothing
    /// was written since the last image). A passivated tenant is reopened here first.
    pub fn snapshot(&self) -> impl Future<Output = Result<Option<ImageRef>, Error>> + use<> {
        let tried = self.bound();
        let request = tried.addr.send(Snapshot);
        let this = self.clone();
        async move {
            let mut request = request;
            let mut tried = tried;
            let mut reopens = 0;
            loop {
                match request
                    .await
                    .map_err(|_| closed(this.key()))
                    .and_then(|r| r)
                {
                    Err(error) if reopens < REOPENS => {
                        reopens += 1;
                        if let Next::Stop = this.re_resolve(&tried, &error).await? {
                            return Err(error);
                        }
                        tried = this.bound();
                        request = tried.addr.send(Snapshot);
                    }
                    answer => return answer,
                }
            }
        }
    }

    /// Hands the tenant off gracefully: drain admitted work (up to the drain deadline), freeze,
    /// publish the final image, drop the local copy, release the lease. On `DrainTimeout` or a
    /// store failure the tenant serves again; on `Draining` an abandon or forget overtook it.
    /// A tenant passivated (or being passivated) is flushed and released already: `Ok`.
    ///
    /// The drain deadline is counted from this call, on the caller's side: a tenant whose
    /// thread is held by a blocking run cannot stretch it (promise 6 in docs/guarantees.md).
    /// A drain that the tenant finishes in the last instant may still flush after the caller
    /// heard `DrainTimeout`: the handoff then reports a failure it did not have, never the
    /// other way round.
    pub fn handoff(&self) -> impl Future<Output = Result<(), Error>> + use<> {
        let limit = self.shared.drain_timeout;
        let deadline = tokio::time::Instant::now() + limit;
        let (drained, drained_rx) = oneshot::channel();
        let (done, done_rx) = oneshot::channel();
        let tried = self.bound();
        // Sent now, never deferred by a full mailbox: it keeps its place among later calls.
        tried.addr.do_send(Handoff {
            deadline,
            drained,
            done,
        });
        let key = self.key().clone();
        let addr = tried.addr.clone();
        let span = tracing::info_span!("handoff", key = %key, epoch = tried.epoch);
        let started = std::time::Instant::now();
        let leave_limit = self.shared.leave_limit;
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
            let mut outcome = handoff.instrument(span).await;
            if outcome
                .as_ref()
                .is_err_and(|e| e.is_draining() || e.is_fenced())
                && passivated(&tried, leave_limit).await
            {
                // Let go by a passivation: flushed and released, as a handoff would leave it.
                outcome = Ok(());
            }
            crate::metrics::handed_off(outcome.is_ok(), started.elapsed());
            outcome
        }
    }

    /// Stops like a crash: nothing is flushed, the local file stays until the next open of this
    /// tenant on this replica, and the lease is handed back. A no-op while a forget runs, and
    /// once the tenure is over (passivated included).
    pub fn abandon(&self) -> impl Future<Output = Result<(), Error>> + use<> {
        let (reply, answer) = oneshot::channel();
        self.bound().addr.do_send(Abandon { reply });
        async move { answer.await.unwrap_or(Ok(())) }
    }

    /// Erases the tenant: raises the floor to this epoch, deletes every image, manifest and
    /// local file at or below it, and releases the lease (promise 5 in docs/guarantees.md).
    /// Wins over a handoff whose upload is under way. A passivated tenant is reopened here to be
    /// erased.
    pub fn forget(&self) -> impl Future<Output = Result<(), Error>> + use<> {
        let tried = self.bound();
        let send = |tried: &Bound| {
            let (reply, answer) = oneshot::channel();
            tried.addr.do_send(Forget { reply });
            answer
        };
        let answer = send(&tried);
        let span = tracing::info_span!("forget", key = %self.key(), epoch = tried.epoch);
        let this = self.clone();
        async move {
            let mut answer = answer;
            let mut tried = tried;
            let mut reopens = 0;
            loop {
                match answer.await.map_err(|_| closed(this.key())).and_then(|r| r) {
                    Err(error) if reopens < REOPENS => {
                        reopens += 1;
                        if let Next::Stop = this.re_resolve(&tried, &error).await? {
                            return Err(error);
                        }
                        tried = this.bound();
                        answer = send(&tried);
                    }
                    outcome => return outcome,
                }
            }
        }
        .instrument(span)
    }

    /// Where the tenant is in its life. A stopped actor reads as the final state it reached
    /// (`Passivated` for a tenure let go for being idle: the next call reopens it).
    pub fn status(&self) -> impl Future<Output = TenantStatus> + use<> {
        let bound = self.bound();
        let request = bound.addr.send(GetStatus);
        async move {
            match request.await {
                Ok(status) => status,
                Err(_) => bound.ended.get(),
            }
        }
    }

    /// The status the tenant last recorded, read without a message (the supervisor asks it
    /// without waiting on a busy tenant).
    pub(crate) fn status_now(&self) -> TenantStatus {
        self.bound().ended.get()
    }

    /// Waits while the tenant's status satisfies `pred`, at most until `deadline`.
    pub(crate) async fn wait_while_status(
        &self,
        pred: impl Fn(TenantStatus) -> bool,
        deadline: tokio::time::Instant,
    ) -> TenantStatus {
        let ended = self.bound().ended;
        ended.wait_while(pred, deadline).await
    }

    /// Whether the tenant is serving.
    pub async fn is_open(&self) -> bool {
        self.status().await == TenantStatus::Serving
    }

    /// Asks the tenure to let go (crate internal: the supervisor's idle check and eviction).
    pub(crate) fn passivate(
        &self,
        reason: crate::passivation::PassivationReason,
        judged: u64,
        idle_ms: u64,
    ) -> impl Future<Output = Result<(), Error>> + use<> {
        let request = self.bound().addr.send(Passivate {
            reason,
            judged,
            idle_ms,
        });
        let key = self.key().clone();
        async move { request.await.map_err(|_| closed(&key)).and_then(|r| r) }
    }

    /// After a call on the tenure `tried` was refused with `error` or found it stopped: waits while that
    /// tenure passivates; then [`Next::Again`] when the call may go once more — the tenure
    /// serves again (its passivation failed), or it was passivated and this handle is now bound
    /// to the tenant reopened here (another clone may have done it) — and [`Next::Stop`] when
    /// it ended any other way: a handle of a tenure handed off, forgotten, abandoned or lost
    /// keeps answering as it did. Only a handle a host holds reopens (promise 12 in
    /// docs/guarantees.md); a failed reopen is the call's answer.
    async fn re_resolve(&self, tried: &Bound, error: &Error) -> Result<Next, Error> {
        let Some(host) = self._host.as_ref() else {
            return Ok(Next::Stop);
        };
        if self.epoch() != tried.epoch {
            return Ok(Next::Again); // a clone reopened it already
        }
        let passivating = TenantStatus::Passivating;
        let refused_by_passivation =
            matches!(error, Error::Draining { state, .. } if state == passivating.as_str());
        let now = tried.ended.get();
        if !refused_by_passivation && now != passivating && now != TenantStatus::Passivated {
            return Ok(Next::Stop); // refused by a serving tenure, or one that ended otherwise
        }
        let until = tokio::time::Instant::now() + self.shared.leave_limit;
        match tried
            .ended
            .wait_while(|s| s == TenantStatus::Passivating, until)
            .await
        {
            TenantStatus::Serving => return Ok(Next::Again),
            TenantStatus::Passivated => {}
            _ => return Ok(Next::Stop),
        }
        let reopened = host.reopen(self.key(), tried.epoch).await?;
        let mut bound = self
            .shared
            .bound
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if bound.epoch == tried.epoch {
            *bound = reopened.bound();
        }
        Ok(Next::Again)
    }
}

/// Whether the tenure `tried` was let go by a passivation (waiting, at most `limit`, for one
/// under way to end).
async fn passivated(tried: &Bound, limit: Duration) -> bool {
    let until = tokio::time::Instant::now() + limit;
    let status = tried
        .ended
        .wait_while(|s| s == TenantStatus::Passivating, until)
        .await;
    status == TenantStatus::Passivated
}

/// Sends a run to `addr` now; its future says what came of it, with the closure back when it
/// did not run.
fn send_run<R, F>(
    addr: &Addr<TenantActor>,
    ticket: Option<u64>,
    f: F,
) -> impl Future<Output = RunOutcome<R, F>> + use<R, F>
where
    F: FnOnce(&mut LedgerTx<'_>) -> Result<R, LedgerError> + Send + 'static,
    R: Send + 'static,
{
    let (reply, answer) = oneshot::channel();
    let job = Box::new(TypedJob::new(f, reply));
    let request = addr.send(Run { ticket, job });
    async move {
        // Delivered or not, the job answers: a job dropped undelivered hands its closure back.
        let _ = request.await;
        answer.await.unwrap_or_else(|_| {
            RunOutcome::Ran(Err(Error::Closed("the run's answer was lost".into())))
        })
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
    /// The tenure it was admitted by: its runs go there, never to a tenure reopened later.
    tenure: Bound,
}

impl std::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("id", &self.id)
            .field("tenant", self.tenant.key())
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
        let outcome = send_run(&self.tenure.addr, Some(self.id), f);
        let key = self.tenant.key().clone();
        async move { outcome.await.into_answer(&key) }
    }

    /// The tenant this ticket was admitted by.
    pub fn tenant(&self) -> &TenantRef {
        &self.tenant
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.tenure.addr.do_send(Retire { ticket: self.id });
    }
}
