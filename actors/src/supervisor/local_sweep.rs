//! Dropping dead local copies: a replica that was stopped, cut off or crashed while a successor
//! forgot a tenant still holds that tenant's files. Whenever a tenure here ends without a
//! handoff, at start, at `close`, every `local_sweep_every`, and on request, the supervisor reads the tenant's floor and deletes a local
//! copy whose recorded tenure is at or below it (docs/guarantees.md, promise 5) — never one of a tenant that
//! is open or opening here.

use std::sync::Arc;

use actix::prelude::*;
use leasehold::plan::local_copy_is_dead;
use leasehold::{Error, LeaseKey, paths};

use super::SupervisorActor;
use crate::events::Event;
use crate::runtime::Runtime;

/// Sweeps every tenant directory of this replica; answers how many copies were dropped.
#[derive(Message)]
#[rtype(result = "Result<usize, Error>")]
pub(crate) struct SweepLocal;

/// The floor of each key, read from the lease store.
async fn floors(rt: Arc<Runtime>, keys: Vec<LeaseKey>) -> Result<Vec<(LeaseKey, u64)>, Error> {
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let floor = rt.leases.read(&key).await?.map_or(0, |r| r.floor);
        out.push((key, floor));
    }
    Ok(out)
}

impl SupervisorActor {
    /// Checks the local copies of `keys` against their floors and drops the dead ones.
    pub(super) fn sweep_local(
        &mut self,
        keys: Vec<LeaseKey>,
    ) -> ResponseActFuture<Self, Result<usize, Error>> {
        Box::pin(
            floors(self.rt.clone(), keys)
                .into_actor(self)
                .map(|floors, act, _| Ok(act.drop_dead_copies(floors?))),
        )
    }

    /// Runs in the actor, so that no open of the same tenant can start in between: a copy is
    /// dropped only if the tenant is neither open nor opening here and its tenure is dead.
    fn drop_dead_copies(&mut self, floors: Vec<(LeaseKey, u64)>) -> usize {
        let mut dropped = 0;
        for (key, floor) in floors {
            if self.table.contains_key(&key) || self.opening.contains_key(&key) {
                continue;
            }
            let (org, tenant) = (key.org(), key.tenant());
            let marker = match paths::read_tenure(&self.rt.state_root, org, tenant) {
                Ok(marker) => marker,
                Err(e) => {
                    tracing::warn!(%key, error = %e, "cannot read a local copy's tenure");
                    continue;
                }
            };
            if !local_copy_is_dead(marker, floor) {
                continue;
            }
            match paths::remove_tenant_dir(&self.rt.state_root, org, tenant) {
                Ok(_) => {
                    dropped += 1;
                    self.rt.events.emit(Event::LocalCopyDropped {
                        key: key.to_string(),
                        epoch: marker.unwrap_or(0),
                    });
                }
                Err(e) => tracing::warn!(%key, error = %e, "dropping a dead local copy failed"),
            }
        }
        dropped
    }
}

impl SupervisorActor {
    /// Checks every tenant directory of this replica but those of tenants open or opening here
    /// (their copies are live: reading their floors would cost one lease-store call per open
    /// tenant at every sweep).
    pub(super) fn sweep_all_local(&mut self) -> ResponseActFuture<Self, Result<usize, Error>> {
        let keys = match paths::tenant_dirs(&self.rt.state_root) {
            Ok(dirs) => dirs
                .iter()
                .map(|(o, t)| LeaseKey::new(o, t))
                .filter(|k| !self.table.contains_key(k) && !self.opening.contains_key(k))
                .collect(),
            Err(e) => return Box::pin(actix::fut::ready(Err(Error::from(e)))),
        };
        self.sweep_local(keys)
    }
}

impl Handler<SweepLocal> for SupervisorActor {
    type Result = ResponseActFuture<Self, Result<usize, Error>>;

    fn handle(&mut self, _msg: SweepLocal, _ctx: &mut Context<Self>) -> Self::Result {
        self.sweep_all_local()
    }
}
