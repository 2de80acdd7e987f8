//! Where a tenant stands on this replica, for the router (`router/local.rs`): serving, leaving,
//! opening, or absent — from the supervisor's table and its opens under way; and the
//! supervisor's side of the router's seam, [`SupervisorDelivery`].

use actix::prelude::*;
use futures::future::BoxFuture;
use leasehold::route::LocalState;
use leasehold::{Error, LeaseKey};
use tokio::time::Instant;

use super::SupervisorActor;
use crate::router::{LocalDelivery, WireRequest};
use crate::status::TenantStatus;

/// Asks where the tenant of `key` stands here.
#[derive(Message)]
#[rtype(result = "LocalState")]
pub(crate) struct LocalStateOf {
    /// The tenant.
    pub(crate) key: LeaseKey,
}

impl Handler<LocalStateOf> for SupervisorActor {
    type Result = MessageResult<LocalStateOf>;

    fn handle(&mut self, msg: LocalStateOf, _ctx: &mut Context<Self>) -> Self::Result {
        let state = match self.table.get(&msg.key) {
            Some(entry) => match entry.tenant.status_now() {
                TenantStatus::Serving => LocalState::Serving,
                TenantStatus::Opening => LocalState::Opening,
                s if s.is_final() => LocalState::Absent,
                _ => LocalState::Leaving,
            },
            None if self.opening.contains_key(&msg.key) => LocalState::Opening,
            None => LocalState::Absent,
        };
        MessageResult(state)
    }
}

/// Where the tenant of `key` stands on the replica of `addr`; a stopped replica holds nothing.
pub(crate) fn local_state(
    addr: &Addr<SupervisorActor>,
    key: &LeaseKey,
) -> impl Future<Output = LocalState> + Send + use<> {
    let asked = addr.send(LocalStateOf { key: key.clone() });
    async move { asked.await.unwrap_or(LocalState::Absent) }
}

/// The supervisor's side of the router's [`LocalDelivery`]: tenants' states from its table and
/// its opens under way. This build has no registry of typed messages yet, so every message is unknown
/// here ([`Error::Refused`] with `LEASEHOLD_UNKNOWN_MESSAGE`) and nothing ever runs; the
/// registry's `deliver_local` takes this place.
pub(crate) struct SupervisorDelivery {
    /// The supervisor actor: an address, not a `Supervisor` handle, so that the transport
    /// holding this never keeps the replica from stopping when its host lets go of it.
    pub(crate) addr: Addr<SupervisorActor>,
}

impl LocalDelivery for SupervisorDelivery {
    fn check(&self, name: &str, version: u32) -> Result<(), Error> {
        Err(Error::Refused {
            code: crate::transport::wire::CODE_UNKNOWN_MESSAGE.into(),
            message: format!("no message {name:?} version {version} is registered here"),
        })
    }

    fn local_state(&self, key: &LeaseKey) -> BoxFuture<'static, LocalState> {
        Box::pin(local_state(&self.addr, key))
    }

    fn deliver_local(
        &self,
        _key: &LeaseKey,
        req: WireRequest,
        _deadline: Instant,
    ) -> BoxFuture<'static, Result<Vec<u8>, Error>> {
        let refused = self.check(&req.name, req.version);
        Box::pin(async move { refused.map(|()| Vec::new()) })
    }
}
