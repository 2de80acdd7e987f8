//! The replica's place in its fleet (`RuntimeConfig::transport`): at start the transport's
//! server is bound (before any actor starts, so a bad address refuses the start), then the
//! fleet's router is plugged in and the lease actor advertises the endpoint; at close, once the
//! tenants are handed off, the record is withdrawn and the server stops.

use std::sync::Arc;

use actix::Addr;
use leasehold::Error;

use super::SupervisorActor;
use crate::lease_actor::{Advertise, LeaseActor, Withdraw};
use crate::router::{FleetRouter, LocalPath};
use crate::runtime::Runtime;
use crate::transport::{ForwardClient, Inbound, InboundSlot, Server, TransportConfig};

/// The transport of a replica that has one.
pub(crate) struct Fleet {
    /// The server other replicas forward to; stopped at close or when the supervisor stops.
    server: Option<Server>,
    /// Where the server's requests go until the router is plugged in (and after).
    slot: Arc<InboundSlot>,
    /// The pooled client.
    client: ForwardClient,
    /// What the replica was configured with.
    config: TransportConfig,
}

impl Fleet {
    /// Binds the server (answering "starting" until [`Fleet::join`]) and builds the client.
    pub(crate) fn bind(config: TransportConfig) -> Result<Self, Error> {
        let slot = Arc::new(InboundSlot::default());
        let inbound: Arc<dyn Inbound> = slot.clone();
        let server = Server::start(&config, inbound)?;
        let client = ForwardClient::new(&config)?;
        Ok(Self {
            server: Some(server),
            slot,
            client,
            config,
        })
    }

    /// The fleet's router of this replica, whose tenants `local` delivers to; plugged into the
    /// server, which hands it every forwarded message from now on.
    pub(crate) fn router(&self, rt: &Arc<Runtime>, local: LocalPath) -> FleetRouter {
        let router = FleetRouter::new(
            rt.replica.as_str(),
            rt.leases.clone(),
            Arc::new(local),
            self.client.clone(),
            self.config.placement.clone(),
            self.config.max_hops,
            rt.events.clone(),
        )
        .remembering(rt.holders.clone());
        self.slot.set(Arc::new(router.clone()));
        router
    }

    /// Advertises the endpoint through the lease actor (which renews the record with its
    /// leases).
    fn advertise(&self, lease_actor: &Addr<LeaseActor>) {
        if let Some(server) = &self.server {
            lease_actor.do_send(Advertise {
                endpoint: server.endpoint().to_owned(),
            });
        }
    }

    /// Withdraws the record, then stops the server (requests under way finish first).
    pub(crate) fn leave(
        &mut self,
        lease_actor: Addr<LeaseActor>,
    ) -> impl Future<Output = ()> + use<> {
        let server = self.server.take();
        async move {
            let _ = lease_actor.send(Withdraw).await;
            if let Some(server) = server {
                server.stop().await;
            }
        }
    }
}

/// Hands the bound transport, its router plugged in, to the supervisor actor, which keeps it
/// and advertises it.
#[derive(actix::Message)]
#[rtype(result = "()")]
pub(crate) struct JoinFleet(pub(crate) Fleet);

impl actix::Handler<JoinFleet> for SupervisorActor {
    type Result = ();

    fn handle(&mut self, msg: JoinFleet, _ctx: &mut actix::Context<Self>) {
        let fleet = msg.0;
        fleet.advertise(&self.lease_actor);
        self.fleet = Some(fleet);
    }
}

impl SupervisorActor {
    /// Leaves the fleet (withdraw, stop the server), if this replica is in one.
    pub(super) fn leave_fleet(&mut self) -> impl Future<Output = ()> + use<> {
        let leaving = self
            .fleet
            .as_mut()
            .map(|fleet| fleet.leave(self.lease_actor.clone()));
        async move {
            if let Some(leaving) = leaving {
                leaving.await;
            }
        }
    }
}
