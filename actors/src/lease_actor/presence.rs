//! The replica's record in the lease store (`leasehold::lease::ReplicaRecord`): advertised at
//! start, renewed by the same tick that renews the leases (`renew_replica`: one round trip),
//! advertised again if a renewal finds it gone, withdrawn at close. So the record lives exactly
//! as long as the renewal chain: a replica that stops renewing is not trusted after `ttl`
//! (docs/guarantees.md, promise 11).

use std::time::Duration;

use actix::prelude::*;
use leasehold::Error;
use leasehold::lease::fresh_attempt;

use super::LeaseActor;
use crate::events::Event;

/// How long a failed advertise waits before it is tried again.
const RETRY_ADVERTISE: Duration = Duration::from_millis(500);

/// What the lease actor knows of its replica's record.
#[derive(Debug)]
pub(crate) struct Presence {
    /// The endpoint advertised.
    endpoint: String,
    /// This process's incarnation: the same for every advertise of this start.
    incarnation: u64,
    /// The record's epoch once an advertise landed; `None` until then (and after it was found
    /// gone, until the next advertise lands).
    pub(super) epoch: Option<u64>,
    /// An advertise is under way.
    advertising: bool,
    /// Withdrawn at close: never advertised again.
    withdrawn: bool,
}

/// Advertises this replica's endpoint and keeps its record renewed from now on.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Advertise {
    /// Where the transport takes forwarded messages.
    pub(crate) endpoint: String,
}

/// Withdraws the replica's record (at close); answers once the store answered.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Withdraw;

impl LeaseActor {
    /// Sends the advertise unless one is under way; retried until it lands.
    pub(super) fn advertise(&mut self, ctx: &mut Context<Self>) {
        let Some(p) = self.presence.as_mut() else {
            return;
        };
        if p.advertising || p.withdrawn {
            return;
        }
        p.advertising = true;
        let (endpoint, incarnation) = (p.endpoint.clone(), p.incarnation);
        let rt = self.rt.clone();
        let call = async move {
            let replica = rt.replica.as_str();
            rt.leases
                .advertise(replica, &endpoint, incarnation, rt.ttl)
                .await
        };
        ctx.spawn(call.into_actor(self).map(|answer, act, ctx| {
            let Some(p) = act.presence.as_mut() else {
                return;
            };
            p.advertising = false;
            match answer {
                Ok(record) if !record.withdrawn && !p.withdrawn => {
                    p.epoch = Some(record.epoch);
                    act.rt.events.emit(Event::Advertised {
                        endpoint: record.endpoint,
                        epoch: record.epoch,
                    });
                }
                Ok(_) => {}
                Err(e) => {
                    let error = Error::from(e);
                    tracing::warn!(%error, "advertising this replica failed; trying again");
                    ctx.run_later(RETRY_ADVERTISE, |act, ctx| act.advertise(ctx));
                }
            }
        }));
    }

    /// The record was found gone at renewal: it is advertised again (same incarnation).
    pub(super) fn record_lost(&mut self, ctx: &mut Context<Self>) {
        if let Some(p) = self.presence.as_mut() {
            tracing::warn!(epoch = ?p.epoch, "this replica's record was gone at renewal");
            p.epoch = None;
        }
        self.advertise(ctx);
    }
}

impl Handler<Advertise> for LeaseActor {
    type Result = ();

    fn handle(&mut self, msg: Advertise, ctx: &mut Context<Self>) {
        self.presence = Some(Presence {
            endpoint: msg.endpoint,
            incarnation: fresh_attempt(),
            epoch: None,
            advertising: false,
            withdrawn: false,
        });
        self.advertise(ctx);
    }
}

impl Handler<Withdraw> for LeaseActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _msg: Withdraw, _ctx: &mut Context<Self>) -> Self::Result {
        let epoch = self.presence.as_mut().and_then(|p| {
            p.withdrawn = true;
            p.epoch.take()
        });
        let rt = self.rt.clone();
        Box::pin(async move {
            let Some(epoch) = epoch else {
                return;
            };
            match rt.leases.withdraw(rt.replica.as_str(), epoch).await {
                Ok(()) => rt.events.emit(Event::Withdrawn { epoch }),
                Err(e) => {
                    let error = Error::from(e);
                    tracing::warn!(%error, "withdrawing this replica's record failed; it runs out after ttl");
                }
            }
        })
    }
}
