//! One hop of a forward: the envelope of a message for its next hop, the request to the holder
//! and what came back — an answer, not sent, lost, or refused — and, for a forward to a holder
//! only remembered, the check beside it that the holder still holds the tenant.

use std::time::Duration;

use leasehold::clock::duration_ms;
use leasehold::codec::{ENVELOPE_FORMAT, Envelope};
use leasehold::route;
use leasehold::{Error, LeaseKey};
use tokio::time::Instant;
use tracing::Instrument;

use super::{FleetRouter, Trip, Unreachable};
use crate::events::Event;
use crate::message::ErasedRequest;
use crate::transport::ForwardError;
use crate::transport::wire::{Sent, from_wire, routes_again};

/// How long a forward to a remembered holder waits for its answer before the lease store is
/// read once, beside it, to see whether that holder still holds the tenant: a holder that left
/// and answers nothing (a black hole) must not hold a message up that a lookup would route.
const RECALL_CHECK: Duration = Duration::from_millis(100);

impl FleetRouter {
    /// Sends `envelope` to `to` and reads what came back.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn forward(
        &self,
        key: &LeaseKey,
        envelope: Envelope,
        to: &str,
        endpoint: &str,
        epoch: u64,
        deadline: Instant,
        trip: &mut Trip,
    ) -> Option<Result<Vec<u8>, Error>> {
        let hop = envelope.hops;
        let (envelope_name, envelope_version) = (envelope.name.clone(), envelope.version);
        let hops_before = std::mem::replace(&mut trip.hops, hop);
        self.events.emit(Event::Forwarded {
            key: key.to_string(),
            to: to.to_owned(),
            epoch,
            hop,
        });
        let span = tracing::info_span!("forward", key = %key, epoch, from = %self.me, to, hop);
        let left = deadline.saturating_duration_since(Instant::now());
        let sent = self
            .client
            .forward(endpoint, &envelope, left)
            .instrument(span);
        let outcome = match trip.recalled {
            true => {
                self.unless_moved_on(key, to, endpoint, epoch, sent, deadline)
                    .await
            }
            false => Some(sent.await),
        };
        let Some(outcome) = outcome else {
            // The remembered holder no longer holds the tenant and has not answered: the
            // message is routed again from the fresh lookup, with the key it carried (it may
            // yet arrive there and be forwarded on: the outcome is unknown, as for a lost one).
            self.holders.forget(key);
            let reason = "no answer from a holder that no longer holds the tenant".to_owned();
            self.events.emit(Event::ForwardLost {
                key: key.to_string(),
                to: to.to_owned(),
                reason: reason.clone(),
            });
            trip.lost = Some((to.to_owned(), reason));
            trip.hops = hops_before;
            return None;
        };
        match outcome {
            Ok(reply) => Some(Ok(reply)),
            Err(ForwardError::NotSent(why)) => {
                self.holders.forget(key);
                if trip.recalled {
                    trip.hops = hops_before;
                }
                tracing::debug!(%key, to, %why, "the holder cannot be reached");
                trip.unreachable = Some(Unreachable {
                    id: to.to_owned(),
                    endpoint: endpoint.to_owned(),
                    seen: None,
                });
                None
            }
            Err(ForwardError::Lost(reason)) => {
                self.holders.forget(key);
                self.events.emit(Event::ForwardLost {
                    key: key.to_string(),
                    to: to.to_owned(),
                    reason: reason.clone(),
                });
                trip.lost = Some((to.to_owned(), reason));
                self.pause(trip, deadline).await
            }
            Err(ForwardError::Refused(w)) => {
                let sent = Sent {
                    key: key.as_str(),
                    name: &envelope_name,
                    version: envelope_version,
                };
                let e = from_wire(sent, w);
                // A replica that is closing opens nothing more and ran nothing: for the sender
                // it is one more replica that does not hold the tenant (its own `Closed` is
                // the caller's answer only on the replica that is closing).
                if routes_again(&e) || matches!(e, Error::Closed(_)) {
                    self.holders.forget(key);
                    if trip.recalled {
                        // The tenant was not where this replica remembered it: route again
                        // at once from a fresh lookup, this hop not counted.
                        tracing::debug!(%key, to, "not where it was found lately: looked up");
                        trip.hops = hops_before;
                        return None;
                    }
                    return self.pause(trip, deadline).await;
                }
                Some(Err(e))
            }
        }
    }

    /// The envelope of `req` for its next hop.
    pub(super) fn envelope(
        &self,
        key: &LeaseKey,
        req: &ErasedRequest,
        deadline: Instant,
        hops: u8,
        open: bool,
    ) -> Envelope {
        Envelope {
            format: ENVELOPE_FORMAT,
            from: self.me.to_string(),
            org: key.org().to_string(),
            tenant: key.tenant().to_string(),
            name: req.name.clone(),
            version: req.version,
            idempotency_key: req.idempotency_key.clone().unwrap_or_else(fresh_key),
            deadline_ms: duration_ms(deadline.saturating_duration_since(Instant::now())),
            hops: route::next_hop(hops),
            open,
            body: req.body.clone(),
        }
    }

    /// The answer of `sent`, a forward to `to` (lease `epoch`, at `endpoint`) chosen from a
    /// remembered lookup; `None` when, `RECALL_CHECK` into it and still unanswered, a fresh
    /// lookup says `to` no longer holds the tenant there. A lookup that fails keeps waiting.
    async fn unless_moved_on(
        &self,
        key: &LeaseKey,
        to: &str,
        endpoint: &str,
        epoch: u64,
        sent: impl std::future::Future<Output = Result<Vec<u8>, ForwardError>>,
        deadline: Instant,
    ) -> Option<Result<Vec<u8>, ForwardError>> {
        tokio::pin!(sent);
        let check = tokio::time::sleep_until((Instant::now() + RECALL_CHECK).min(deadline));
        tokio::select! {
            answer = &mut sent => return Some(answer),
            () = check => {}
        }
        let fresh = tokio::time::timeout_at(deadline, self.leases.lookup(key));
        tokio::select! {
            answer = &mut sent => return Some(answer),
            found = fresh => {
                if let Ok(Ok(found)) = found {
                    let holds = found.live_holder() == Some((to, epoch))
                        && found.live_endpoint() == Some(endpoint);
                    if !holds {
                        return None;
                    }
                }
            }
        }
        Some(sent.await)
    }
}

/// An idempotency key for a send the host gave none: 128 random bits.
fn fresh_key() -> String {
    let (a, b) = (
        leasehold::lease::fresh_attempt(),
        leasehold::lease::fresh_attempt(),
    );
    format!("leasehold-{a:016x}{b:016x}")
}
