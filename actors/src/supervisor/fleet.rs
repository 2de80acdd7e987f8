//! The replica's place in its fleet (`RuntimeConfig::transport`): at start the transport's
//! server is bound (before any actor starts, so a bad address refuses the start), then the
//! router is plugged in and the lease actor advertises the endpoint; at close, once the tenants
//! are handed off, the record is withdrawn and the server stops.

use std::sync::Arc;

use actix::Addr;
use leasehold::Error;

use super::SupervisorActor;
use super::where_is::SupervisorDelivery;
use crate::lease_actor::{Advertise, LeaseActor, Withdraw};
use crate::router::FleetRouter;
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
    /// The router, once plugged in.
    pub(crate) router: Option<FleetRouter>,
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
            router: None,
            config,
        })
    }

    /// Plugs the router of the supervisor at `addr` in and advertises the endpoint.
    pub(crate) fn join(
        &mut self,
        rt: &Arc<Runtime>,
        addr: Addr<SupervisorActor>,
        lease_actor: &Addr<LeaseActor>,
    ) {
        let router = FleetRouter::new(
            rt.replica.as_str(),
            rt.leases.clone(),
            Arc::new(SupervisorDelivery { addr }),
            self.client.clone(),
            self.config.placement.clone(),
            self.config.max_hops,
            rt.events.clone(),
        );
        self.slot.set(Arc::new(router.clone()));
        self.router = Some(router);
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

/// Hands the bound transport to the supervisor actor, which plugs its router in.
#[derive(actix::Message)]
#[rtype(result = "()")]
pub(crate) struct JoinFleet(pub(crate) Fleet);

impl actix::Handler<JoinFleet> for SupervisorActor {
    type Result = ();

    fn handle(&mut self, msg: JoinFleet, ctx: &mut actix::Context<Self>) {
        let mut fleet = msg.0;
        fleet.join(
            &self.rt,
            actix::AsyncContext::address(ctx),
            &self.lease_actor,
        );
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
