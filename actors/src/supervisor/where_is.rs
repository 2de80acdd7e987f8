//! The supervisor's side of the router's local path (`router/local.rs`, [`Tenants`]): opening a
//! tenant for a message, finding its handle in the table, and where it stands here — serving,
//! leaving, opening, or absent — from the table and the opens under way. [`SupervisorTenants`]
//! holds the supervisor actor's address, never a `Supervisor` handle: the router it serves is
//! kept by the replica's own transport server, and a replica must notice its last handle go
//! (docs/guarantees.md, promise 6).

use actix::prelude::*;
use futures::future::BoxFuture;
use leasehold::route::LocalState;
use leasehold::{Error, LeaseKey};

use super::{Lookup, Open, SupervisorActor, stopped};
use crate::router::Tenants;
use crate::status::TenantStatus;
use crate::tenant::TenantRef;

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
            // A forget under way here: its erase still deletes this replica's copy, so a
            // message waits for it as for a tenant leaving.
            None if self.forgets.iter().any(|((k, _), _, _)| k == &msg.key) => LocalState::Leaving,
            None => LocalState::Absent,
        };
        MessageResult(state)
    }
}

/// The supervisor's side of the local path: the supervisor actor's address.
pub(crate) struct SupervisorTenants {
    /// The supervisor actor.
    pub(crate) addr: Addr<SupervisorActor>,
}

impl Tenants for SupervisorTenants {
    fn open(
        &self,
        key: &LeaseKey,
        reactivates: Option<u64>,
    ) -> BoxFuture<'static, Result<TenantRef, Error>> {
        let request = self.addr.send(Open::reactivating(key.clone(), reactivates));
        Box::pin(async move { request.await.map_err(|_| stopped())? })
    }

    fn find(&self, key: &LeaseKey) -> BoxFuture<'static, Result<Option<TenantRef>, Error>> {
        let request = self.addr.send(Lookup { key: key.clone() });
        Box::pin(async move { request.await.map_err(|_| stopped()) })
    }

    fn state_of(&self, key: &LeaseKey) -> BoxFuture<'static, LocalState> {
        let asked = self.addr.send(LocalStateOf { key: key.clone() });
        // A stopped replica holds nothing.
        Box::pin(async move { asked.await.unwrap_or(LocalState::Absent) })
    }
}
