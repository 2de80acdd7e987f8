//! The lease actor: owns the replica's one renewal chain (docs/guarantees.md, promise 10).
//!
//! Every tick renews all of the replica's leases in one `renew_many` round trip, then schedules
//! the next tick — so a renewal under way is never doubled, whatever else happens. Each tenant's
//! [`LeaseCell`] is the shared, lock-free answer to "may I still act?": the lease actor extends
//! it on renewal, ends it on loss and tells the tenant.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use actix::prelude::*;
use leasehold::lease::{LeaseTerm, RenewOutcome};
use leasehold::{Error, LeaseKey};
use tokio::sync::oneshot;

use crate::events::Event;
use crate::runtime::Runtime;

/// Tenures alive in this process: one per tenant actor (which holds its tenure's cell until it
/// is dropped), counted for the leak checks of docs/testing.md.
static LIVE_TENURES: AtomicUsize = AtomicUsize::new(0);

/// How many tenant actors (tenures) of any replica are alive in this process. After `close()`
/// and the drop of every `Supervisor` handle it comes back to where it was (docs/guarantees.md,
/// promise 6).
pub fn live_tenants() -> usize {
    LIVE_TENURES.load(Ordering::SeqCst)
}

/// Counts one live tenure from its creation to its drop.
#[derive(Debug)]
struct Live;

impl Live {
    fn new() -> Self {
        LIVE_TENURES.fetch_add(1, Ordering::SeqCst);
        Live
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE_TENURES.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One tenure's standing, shared by the lease actor (which writes it) and the tenant actor
/// (which reads it before every run and commit).
#[derive(Debug)]
pub(crate) struct LeaseCell {
    /// `<org>/<tenant>`.
    pub(crate) key: LeaseKey,
    /// The epoch of this tenure.
    pub(crate) epoch: u64,
    /// The term of the last granted acquire or renew (ttl and margin are fixed per tenure).
    term: LeaseTerm,
    /// `term.valid_until_ms()` of the latest grant, on the holder's clock.
    valid_until_ms: AtomicU64,
    /// Set once the tenure is over (lost, released, forgotten): never holds again.
    ended: AtomicBool,
    /// Counts this tenure as live while the cell exists.
    _live: Live,
}

impl LeaseCell {
    /// A cell for a tenure granted by a call sent at `term.sent_at_ms`.
    pub(crate) fn new(key: LeaseKey, epoch: u64, term: LeaseTerm) -> Self {
        Self {
            key,
            epoch,
            term,
            valid_until_ms: AtomicU64::new(term.valid_until_ms()),
            ended: AtomicBool::new(false),
            _live: Live::new(),
        }
    }

    /// Whether the holder may act at `now_ms` (its own clock).
    pub(crate) fn holds(&self, now_ms: u64) -> bool {
        !self.ended.load(Ordering::SeqCst) && now_ms < self.valid_until_ms.load(Ordering::SeqCst)
    }

    /// The holder-clock millisecond (exclusive) until which the tenure holds.
    pub(crate) fn valid_until_ms(&self) -> u64 {
        self.valid_until_ms.load(Ordering::SeqCst)
    }

    /// Extends the tenure by a renewal sent at `sent_at_ms`; never shortens it.
    pub(crate) fn extend(&self, sent_at_ms: u64) {
        let until = self.term.renewed(sent_at_ms).valid_until_ms();
        self.valid_until_ms.fetch_max(until, Ordering::SeqCst);
    }

    /// Ends the tenure for good.
    /// Whether the tenure was ended (it never holds again).
    pub(crate) fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    pub(crate) fn end(&self) {
        self.ended.store(true, Ordering::SeqCst);
    }
}

/// Tells a tenant that its lease was found gone at renewal.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct LeaseLost;

/// Adds a tenure to the renewal chain.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Register {
    /// The tenure's cell.
    pub(crate) cell: Arc<LeaseCell>,
    /// Who to tell if the lease is lost.
    pub(crate) on_lost: Recipient<LeaseLost>,
}

/// Takes a tenure out of the renewal chain (before it is released or after it ended).
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Unregister {
    /// The key.
    pub(crate) key: LeaseKey,
    /// The epoch; a newer registration of the same key is left alone.
    pub(crate) epoch: u64,
}

/// Renews now, or waits for the renewal under way: never a second round trip at once.
#[derive(Message)]
#[rtype(result = "Result<(), Error>")]
pub(crate) struct RenewNow;

/// Stops the lease actor for good: its tick ends and it reads the lease store no more. Sent by
/// the supervisor when it stops.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct StopRenewals;

struct Registered {
    cell: Arc<LeaseCell>,
    on_lost: Recipient<LeaseLost>,
}

/// The actor owning the renewal chain of one replica.
pub(crate) struct LeaseActor {
    /// Stores, clock, timings, events.
    rt: Arc<Runtime>,
    /// The tenures being renewed.
    leases: HashMap<LeaseKey, Registered>,
    /// True while a `renew_many` is under way.
    in_flight: bool,
    /// Callers of `RenewNow` waiting for the renewal under way.
    waiters: Vec<oneshot::Sender<Result<(), Error>>>,
    /// The next tick of the chain, if scheduled.
    next_tick: Option<SpawnHandle>,
}

impl LeaseActor {
    /// A lease actor for the replica described by `rt`.
    pub(crate) fn new(rt: Arc<Runtime>) -> Self {
        Self {
            rt,
            leases: HashMap::new(),
            in_flight: false,
            waiters: Vec::new(),
            next_tick: None,
        }
    }

    /// Schedules the chain's next tick, replacing any scheduled one: there is only ever one.
    fn schedule(&mut self, ctx: &mut Context<Self>) {
        if let Some(handle) = self.next_tick.take() {
            ctx.cancel_future(handle);
        }
        if let Some(every) = self.rt.renew_every {
            self.next_tick = Some(ctx.run_later(every, |act, ctx| {
                act.next_tick = None;
                act.renew(ctx);
            }));
        }
    }

    /// Starts one renewal round trip unless one is under way.
    fn renew(&mut self, ctx: &mut Context<Self>) {
        if self.in_flight {
            return;
        }
        let batch: Vec<(LeaseKey, u64)> = self
            .leases
            .values()
            .map(|r| (r.cell.key.clone(), r.cell.epoch))
            .collect();
        if batch.is_empty() {
            self.settle_waiters(Ok(()));
            self.schedule(ctx);
            return;
        }
        self.in_flight = true;
        let rt = self.rt.clone();
        let sent_at = rt.now_ms();
        let started = std::time::Instant::now();
        let call = async move {
            let outcomes = rt
                .leases
                .renew_many(rt.replica.as_str(), &batch, rt.ttl)
                .await;
            (batch, outcomes)
        };
        ctx.spawn(
            call.into_actor(self)
                .map(move |(batch, outcomes), act, ctx| {
                    act.in_flight = false;
                    match outcomes {
                        Ok(outcomes) => {
                            crate::metrics::renewed(started.elapsed());
                            act.apply(sent_at, &batch, &outcomes)
                        }
                        Err(e) => {
                            let error = Error::from(e);
                            act.rt.events.emit(Event::RenewFailed {
                                error: error.to_string(),
                            });
                            act.settle_waiters(Err(error));
                        }
                    }
                    act.schedule(ctx);
                }),
        );
    }

    /// Extends renewed tenures and ends lost ones. Tenures unregistered meanwhile are skipped.
    fn apply(&mut self, sent_at: u64, batch: &[(LeaseKey, u64)], outcomes: &[RenewOutcome]) {
        let mut renewed = 0;
        for ((key, epoch), outcome) in batch.iter().zip(outcomes) {
            let current = self.leases.get(key).is_some_and(|r| r.cell.epoch == *epoch);
            if !current {
                continue;
            }
            match outcome {
                RenewOutcome::Renewed => {
                    if let Some(r) = self.leases.get(key) {
                        r.cell.extend(sent_at);
                        renewed += 1;
                    }
                }
                RenewOutcome::Lost => {
                    if let Some(r) = self.leases.remove(key) {
                        r.cell.end();
                        r.on_lost.do_send(LeaseLost);
                        self.rt.events.emit(Event::Lost {
                            key: key.to_string(),
                            epoch: *epoch,
                        });
                    }
                }
            }
        }
        self.rt.events.emit(Event::Renewed { leases: renewed });
        self.settle_waiters(Ok(()));
    }

    fn settle_waiters(&mut self, outcome: Result<(), Error>) {
        for waiter in self.waiters.drain(..) {
            let _ = waiter.send(outcome.clone());
        }
    }
}

impl Actor for LeaseActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.schedule(ctx);
    }
}

impl Handler<Register> for LeaseActor {
    type Result = ();

    fn handle(&mut self, msg: Register, _ctx: &mut Context<Self>) {
        let key = msg.cell.key.clone();
        self.leases.insert(
            key,
            Registered {
                cell: msg.cell,
                on_lost: msg.on_lost,
            },
        );
    }
}

impl Handler<Unregister> for LeaseActor {
    type Result = ();

    fn handle(&mut self, msg: Unregister, _ctx: &mut Context<Self>) {
        if self
            .leases
            .get(&msg.key)
            .is_some_and(|r| r.cell.epoch == msg.epoch)
        {
            self.leases.remove(&msg.key);
        }
    }
}

impl Handler<StopRenewals> for LeaseActor {
    type Result = ();

    fn handle(&mut self, _msg: StopRenewals, ctx: &mut Context<Self>) {
        self.leases.clear();
        self.settle_waiters(Err(Error::Closed("the lease actor stopped".into())));
        ctx.stop();
    }
}

impl Handler<RenewNow> for LeaseActor {
    type Result = ResponseFuture<Result<(), Error>>;

    fn handle(&mut self, _msg: RenewNow, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.waiters.push(tx);
        self.renew(ctx);
        Box::pin(async move {
            rx.await
                .unwrap_or_else(|_| Err(Error::Closed("the lease actor stopped".into())))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold::{OrgId, TenantId};
    use std::time::Duration;

    fn cell() -> LeaseCell {
        let key = LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t").unwrap());
        let term = LeaseTerm {
            sent_at_ms: 1_000,
            ttl: Duration::from_millis(10_000),
            margin: Duration::from_millis(2_000),
        };
        LeaseCell::new(key, 1, term)
    }

    #[test]
    fn a_cell_holds_until_its_term_and_renewals_extend_it() {
        let c = cell();
        assert!(c.holds(8_999));
        assert!(!c.holds(9_000));
        c.extend(5_000);
        assert!(c.holds(12_999));
        c.extend(2_000);
        assert!(c.holds(12_999), "an older renewal never shortens the term");
    }

    #[test]
    fn an_ended_cell_never_holds_again() {
        let c = cell();
        c.end();
        assert!(!c.holds(1_000));
        c.extend(5_000);
        assert!(!c.holds(5_001));
    }
}
