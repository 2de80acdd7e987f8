//! Where a tenant stands on this replica, for the router (`router/local.rs`): serving, leaving,
//! opening, or absent — from the supervisor's table and its opens under way.

use actix::prelude::*;
use leasehold::LeaseKey;
use leasehold::route::LocalState;

use super::SupervisorActor;
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
