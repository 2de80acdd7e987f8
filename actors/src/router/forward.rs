//! [`FleetRouter`]: carries out `leasehold::route::decide` for one message until it has an
//! answer, within the message's deadline.
//!
//! ```text
//!  loop: where the tenant stands here (+ a lookup, one round trip, if absent) ── decide ──┐
//!    RunHere / OpenHere ─> LocalDelivery::deliver_local ─ "not here" ─> loop │
//!    Place ─> live replicas + Placement ─> decide again                     │
//!    Forward ─> Envelope (time left, hop + 1, same idempotency key) ─> POST  │
//!        answered ─> the reply │ not sent ─> holder unreachable ─> loop      │
//!        answer lost ─> ForwardLost, loop: sent again with the same key      │
//!        "not there" (moved, fenced, draining, held) ─> loop                 │
//!    WaitForSuccessor / WaitForLeaseEnd ─> sleep, loop (then TakenOver)      │
//!    Unavailable / Moved ─> the caller's error  <────────────────────────────┘
//! ```
//!
//! The lookup before a forward of a host's own message may be one this replica made less than
//! `holder_cache` ago ([`Holders`], `leasehold::route::recall`): only ever a place to forward
//! to, forgotten when a forward there comes back without the holder's answer, and then the
//! message is routed again at once from a fresh lookup (the stale hop not counted).
//!
//! One hop — the envelope, the request, what came back — is `forward/hop.rs`.
//!
//! Every forward is a `tracing` span (`forward`: key, epoch, from, to, hop) and an observer
//! event; so are moves, refusals, waits and takeovers. A forward whose answer was lost may have
//! run: the same idempotency key on every retry and hop makes running it again a replay of the
//! stored reply (docs/guarantees.md, promise 11). If the deadline passes after such a loss of a
//! command the caller hears `ForwardFailed`: the outcome is unknown; a deadline that passes with
//! nothing sent (or only queries, or only refusals that ran nothing) is `DeadlineExceeded`
//! with `outcome_unknown: false`.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use leasehold::clock::duration_ms;
use leasehold::codec::Envelope;
use leasehold::lease::{Lookup, ReplicaView, SharedLeaseStore};
use leasehold::route::{self, LocalState, Placement, Route, RouteInput};
use leasehold::{Error, LeaseKey, OrgId, TenantId};
use tokio::time::Instant;

use super::LocalDelivery;
use crate::events::{Event, EventSink};
use crate::holders::Holders;
use crate::message::{ErasedRequest, MessageKind};
use crate::transport::wire::routes_again;
use crate::transport::{ForwardClient, Inbound};

mod hop;

/// The longest pause between two tries of a message that was refused as "not here".
const MAX_BACKOFF: Duration = Duration::from_millis(100);

/// The least time left worth a forward: with less, the message would reach the holder after
/// its caller stopped waiting, and nothing is sent.
const MIN_FORWARD_TIME: Duration = Duration::from_millis(1);

/// One replica's router. Cheap to clone.
#[derive(Clone)]
pub(crate) struct FleetRouter {
    /// This replica's id.
    me: Arc<str>,
    /// Where tenants are (lookups, live replicas), every call bounded.
    leases: SharedLeaseStore,
    /// This replica's tenants.
    local: Arc<dyn LocalDelivery>,
    /// The pooled client forwards go through.
    client: ForwardClient,
    /// Who opens a tenant nobody holds.
    placement: Arc<dyn Placement>,
    /// The most forwards a message takes.
    max_hops: u8,
    /// Where events go.
    events: EventSink,
    /// Where tenants held elsewhere were found lately.
    holders: Arc<Holders>,
}

/// A replica a forward could not reach.
#[derive(Debug)]
struct Unreachable {
    /// Its id.
    id: String,
    /// The endpoint that refused.
    endpoint: String,
    /// When the first lookup after the refusal was made, and how long its lease had left then.
    seen: Option<(Instant, u64)>,
}

/// How much longer than expected a lease must run to count as renewed (the store's clock and
/// this replica's are compared over a few hundred milliseconds).
const RENEWED_SLACK_MS: u64 = 100;

/// What one message's routing has learnt so far.
#[derive(Debug)]
struct Trip {
    /// When its routing began here, for the deadline it reports.
    started: Instant,
    /// Command or query: a query whose answer was lost wrote nothing.
    kind: MessageKind,
    /// Forwards so far, those before it reached this replica included.
    hops: u8,
    /// A replica that could not be reached (nothing was sent to it): tried again once it
    /// advertises another endpoint or renews its lease ([`forget_unreachable_if_alive`]).
    unreachable: Option<Unreachable>,
    /// The last forward whose answer was lost: to whom, and why.
    lost: Option<(String, String)>,
    /// The holder whose lease is being waited out.
    waiting_out: Option<String>,
    /// When the current wait began.
    waiting_since: Option<Instant>,
    /// The pause before the next try after a "not here".
    backoff: Duration,
    /// Routings so far: only the first may use a remembered lookup.
    tries: u32,
    /// The current routing's lookup was a remembered one.
    recalled: bool,
}

impl FleetRouter {
    /// The router of replica `me`.
    pub(crate) fn new(
        me: &str,
        leases: SharedLeaseStore,
        local: Arc<dyn LocalDelivery>,
        client: ForwardClient,
        placement: Arc<dyn Placement>,
        max_hops: u8,
        events: EventSink,
    ) -> Self {
        Self {
            me: me.into(),
            leases,
            local,
            client,
            placement,
            max_hops,
            events,
            holders: Arc::new(Holders::new(None)),
        }
    }

    /// The same router, trusting where `holders` says tenants held elsewhere were found lately
    /// (the runtime's, `transport.holder_cache`) instead of looking before every forward.
    pub(crate) fn remembering(mut self, holders: Arc<Holders>) -> Self {
        self.holders = holders;
        self
    }

    /// Routes a message a host of this replica sent (`Supervisor::send`).
    pub(crate) async fn send(
        &self,
        key: &LeaseKey,
        req: ErasedRequest,
        deadline: Instant,
    ) -> Result<Vec<u8>, Error> {
        self.route(key, req, deadline, 0, false).await
    }

    /// Routes a message that took `hops` forwards to get here; `open` when the sender's
    /// placement chose this replica to open its tenant.
    pub(crate) async fn route(
        &self,
        key: &LeaseKey,
        mut req: ErasedRequest,
        deadline: Instant,
        hops: u8,
        open: bool,
    ) -> Result<Vec<u8>, Error> {
        let kind = self.local.check(&req)?;
        let mut trip = Trip {
            started: Instant::now(),
            kind,
            hops,
            unreachable: None,
            lost: None,
            waiting_out: None,
            waiting_since: None,
            backoff: Duration::from_millis(5),
            tries: 0,
            recalled: false,
        };
        loop {
            if Instant::now() >= deadline {
                return Err(self.expired(key, &trip, deadline));
            }
            // A holder elsewhere remembered, on the first routing of a host's own message.
            let recalled = match trip.tries {
                0 => self.holders.recall(key, &self.me, trip.hops),
                _ => None,
            };
            trip.tries += 1;
            // Where the tenant stands here first: a tenant serving or leaving here needs no
            // lookup (`route::decide` reads the store's answer only for a tenant absent here).
            // The handles the local path knows, then the supervisor's mailbox (on the thread the
            // replica started on: bounded too) — not asked when a holder elsewhere is
            // remembered, since an open here forgets it.
            let local = match (self.local.known_state(key), recalled.is_some()) {
                (Some(state), _) => state,
                (None, true) => LocalState::Absent,
                (None, false) => {
                    let asked =
                        tokio::time::timeout_at(deadline, self.local.local_state(key)).await;
                    let Ok(local) = asked else {
                        return Err(self.expired(key, &trip, deadline));
                    };
                    local
                }
            };
            trip.recalled = false;
            let lookup = match (local, recalled) {
                (LocalState::Absent, Some(remembered)) => {
                    trip.recalled = true;
                    remembered
                }
                (LocalState::Absent, None) => self.where_is(key, deadline, &trip).await?,
                _ => Lookup::vacant(),
            };
            let left = duration_ms(deadline.saturating_duration_since(Instant::now()));
            forget_unreachable_if_alive(&mut trip, &lookup);
            let mut input = RouteInput {
                me: &self.me,
                local,
                lookup: &lookup,
                hops: trip.hops,
                max_hops: self.max_hops,
                time_left_ms: left,
                open,
                unreachable: trip.unreachable.as_ref().map(|u| u.id.as_str()),
                placed: None,
            };
            let mut decision = route::decide(&input);
            let placed;
            if decision == Route::Place {
                placed = self.place(key, deadline, &trip).await?;
                input.placed = Some(&placed);
                decision = route::decide(&input);
            }
            let epoch = lookup.record.as_ref().map_or(0, |r| r.epoch);
            let step = self.carry_out(key, &mut req, deadline, decision, epoch, &mut trip);
            if let Some(answer) = step.await {
                return self.settled(key, answer, &trip);
            }
        }
    }

    /// The caller's answer. A refusal that came after a command's forward whose answer was
    /// lost speaks only of the later attempt: the lost one may have run, so the outcome is
    /// unknown ([`Error::ForwardFailed`]; retry with the same key).
    fn settled(
        &self,
        key: &LeaseKey,
        answer: Result<Vec<u8>, Error>,
        trip: &Trip,
    ) -> Result<Vec<u8>, Error> {
        match (answer, &trip.lost) {
            (Err(e), Some((to, reason)))
                if trip.kind == MessageKind::Command && !e.is_outcome_unknown() =>
            {
                let e = Error::ForwardFailed {
                    key: key.to_string(),
                    to: to.clone(),
                    reason: format!("{reason}; then {e}"),
                };
                self.refused(key, &e);
                Err(e)
            }
            (answer, _) => answer,
        }
    }

    /// Does what `decision` says; `None` when the message must be routed again.
    async fn carry_out(
        &self,
        key: &LeaseKey,
        req: &mut ErasedRequest,
        deadline: Instant,
        decision: Route,
        epoch: u64,
        trip: &mut Trip,
    ) -> Option<Result<Vec<u8>, Error>> {
        let waiting = matches!(
            decision,
            Route::WaitForSuccessor { .. } | Route::WaitForLeaseEnd { .. }
        );
        if !waiting {
            self.end_wait(key, trip);
        }
        match decision {
            Route::RunHere | Route::OpenHere => {
                if let (Route::OpenHere, Some(holder)) = (&decision, trip.waiting_out.take()) {
                    self.events.emit(Event::TakenOver {
                        key: key.to_string(),
                        holder,
                    });
                }
                let answer = self.local.deliver_local(key, req.clone(), deadline).await;
                match answer {
                    Err(e) if routes_again(&e) => self.pause(trip, deadline).await,
                    answer => Some(answer),
                }
            }
            Route::Forward { to, endpoint, open } => {
                if deadline.saturating_duration_since(Instant::now()) < MIN_FORWARD_TIME {
                    // Too little time left for a hop: nothing is sent.
                    tokio::time::sleep_until(deadline).await;
                    return None;
                }
                let envelope = self.envelope(key, req, deadline, trip.hops, open);
                // Every later retry, hop and run here carries the key this forward carried.
                req.idempotency_key = Some(envelope.idempotency_key.clone());
                self.forward(key, envelope, &to, &endpoint, epoch, deadline, trip)
                    .await
            }
            Route::WaitForSuccessor { wait_ms } | Route::WaitForLeaseEnd { wait_ms, .. } => {
                if let Route::WaitForLeaseEnd { holder, .. } = &decision {
                    trip.waiting_out = Some(holder.clone());
                }
                trip.waiting_since.get_or_insert_with(Instant::now);
                let wake = (Instant::now() + Duration::from_millis(wait_ms.max(1))).min(deadline);
                tokio::time::sleep_until(wake).await;
                None
            }
            Route::Unavailable {
                holder,
                lease_left_ms,
            } => {
                let e = Error::Unavailable {
                    key: key.to_string(),
                    holder,
                    lease_left_ms,
                };
                self.refused(key, &e);
                Some(Err(e))
            }
            Route::Moved { holder } => {
                self.events.emit(Event::MessageMoved {
                    key: key.to_string(),
                    holder: holder.clone(),
                });
                Some(Err(Error::Moved {
                    key: key.to_string(),
                    holder,
                }))
            }
            Route::Place => Some(Err(Error::Closed(
                "the placement gave no answer".to_owned(),
            ))),
        }
    }

    /// Where the tenant is: one lookup, remembered if it names a live holder elsewhere.
    async fn where_is(
        &self,
        key: &LeaseKey,
        deadline: Instant,
        trip: &Trip,
    ) -> Result<Lookup, Error> {
        let at = Instant::now();
        let found = self.lookup(key, deadline, trip).await?;
        self.holders.remember(key, &found, at, &self.me);
        Ok(found)
    }

    /// One lookup, within the deadline.
    async fn lookup(
        &self,
        key: &LeaseKey,
        deadline: Instant,
        trip: &Trip,
    ) -> Result<Lookup, Error> {
        match tokio::time::timeout_at(deadline, self.leases.lookup(key)).await {
            Ok(found) => Ok(found?),
            Err(_) => Err(self.expired(key, trip, deadline)),
        }
    }

    /// The placement's choice for a tenant nobody holds (this replica when it says none).
    async fn place(
        &self,
        key: &LeaseKey,
        deadline: Instant,
        trip: &Trip,
    ) -> Result<ReplicaView, Error> {
        let live = match self.placement.needs_live_replicas() {
            true => match tokio::time::timeout_at(deadline, self.leases.live_replicas()).await {
                Ok(live) => live?,
                Err(_) => return Err(self.expired(key, trip, deadline)),
            },
            false => Vec::new(),
        };
        let me = ReplicaView {
            id: self.me.to_string(),
            endpoint: String::new(),
            epoch: 0,
            live: true,
        };
        Ok(self.placement.place(key, &self.me, &live).unwrap_or(me))
    }

    /// Waits a little (growing) before the message is routed again; `None` to go on.
    async fn pause(&self, trip: &mut Trip, deadline: Instant) -> Option<Result<Vec<u8>, Error>> {
        let wake = (Instant::now() + trip.backoff).min(deadline);
        tokio::time::sleep_until(wake).await;
        trip.backoff = (trip.backoff * 2).min(MAX_BACKOFF);
        None
    }

    /// Says how long the message waited, once it goes on.
    fn end_wait(&self, key: &LeaseKey, trip: &mut Trip) {
        if let Some(since) = trip.waiting_since.take() {
            self.events.emit(Event::MessageWaited {
                key: key.to_string(),
                waited_ms: duration_ms(since.elapsed()),
            });
        }
    }

    fn refused(&self, key: &LeaseKey, e: &Error) {
        self.events.emit(Event::MessageRefused {
            key: Some(key.to_string()),
            code: e.code().to_owned(),
        });
    }

    /// What the caller hears when the deadline passed before an answer: the outcome is unknown
    /// after a command's forward whose answer was lost ([`Error::ForwardFailed`]), else nothing
    /// ran ([`Error::DeadlineExceeded`], `outcome_unknown: false`).
    fn expired(&self, key: &LeaseKey, trip: &Trip, deadline: Instant) -> Error {
        let e = match &trip.lost {
            Some((to, reason)) if trip.kind == MessageKind::Command => Error::ForwardFailed {
                key: key.to_string(),
                to: to.clone(),
                reason: reason.clone(),
            },
            _ => Error::DeadlineExceeded {
                key: key.to_string(),
                after_ms: duration_ms(deadline.saturating_duration_since(trip.started)),
                outcome_unknown: false,
            },
        };
        self.refused(key, &e);
        e
    }
}

/// Forgets that the holder could not be reached once it shows it is alive: the lease store
/// names another endpoint for it (its transport moved, a new process of it advertised), or its
/// lease runs longer than it did when it refused (it renewed: a dead holder never does). So a
/// holder that refused one connection and can be reached again is forwarded to, not waited out
/// until the caller's deadline (`promise11_a_holder_unreachable_once_is_tried_again_…`,
/// `promise11_a_holder_that_renews_after_refusing_…`); one that stays dead is tried no more.
fn forget_unreachable_if_alive(trip: &mut Trip, lookup: &Lookup) {
    let Some(u) = trip.unreachable.as_mut() else {
        return;
    };
    let (Some((holder, _)), Some(endpoint)) = (lookup.live_holder(), lookup.live_endpoint()) else {
        return;
    };
    if holder != u.id {
        return;
    }
    let left = lookup.lease_left_ms;
    let alive = match u.seen {
        _ if endpoint != u.endpoint => true,
        None => {
            u.seen = Some((Instant::now(), left));
            false
        }
        Some((at, left_then)) => {
            let expected = left_then.saturating_sub(duration_ms(at.elapsed()));
            left > expected + RENEWED_SLACK_MS
        }
    };
    if alive {
        trip.unreachable = None;
    }
}

impl Inbound for FleetRouter {
    fn deliver(&self, e: Envelope) -> BoxFuture<'static, Result<Vec<u8>, Error>> {
        let router = self.clone();
        Box::pin(async move {
            let key = LeaseKey::new(&OrgId::new(e.org)?, &TenantId::new(e.tenant)?);
            let deadline = super::deadline_in(Duration::from_millis(e.deadline_ms));
            let req = ErasedRequest {
                name: e.name,
                version: e.version,
                idempotency_key: Some(e.idempotency_key),
                body: e.body,
            };
            tracing::debug!(%key, from = %e.from, hop = e.hops, "a forwarded message arrived");
            router.route(&key, req, deadline, e.hops, e.open).await
        })
    }
}
