//! Tenant addresses: where a typed message for `(org, tenant)` ([`TenantAddr`]) runs — here,
//! opened here, or on the replica of the fleet that holds the tenant — so that a host never
//! holds a tenant's handle and never needs to know which replica holds it. The host's side is
//! `Supervisor::send`, `ask` and `request` (`supervisor/addressing.rs`).
//!
//! ```text
//!   send(addr, msg) ── encode ──> Router::deliver(key, ErasedRequest, deadline)
//!     no transport ──────> the local path (router/local.rs): run here, open here when nobody
//!                          holds it, wait while it leaves here; another holder: LeaseHeld
//!     with a transport ──> FleetRouter (router/forward.rs): route::decide on what this replica
//!                          and the lease store say — run or open here (the local path), forward
//!                          to the holder, wait for a successor, wait out a dead holder's lease
//!                          and take over, Moved, Unavailable; a "not here" from the local path
//!                          or the holder routes the message again
//!   <── the reply's bytes, decoded by the caller
//! ```
//!
//! Every step is bounded by the request's deadline (`ask_timeout` unless the caller gives one),
//! carried across hops as time left. Running is always the local path's: the tenant's group
//! commit, fenced by its lease, the idempotency table, the output gate (docs/guarantees.md,
//! promise 11). The router imports nothing of the supervisor: the supervisor's side of the
//! local path is the `Tenants` trait (`supervisor/where_is.rs` implements it), and the
//! supervisor holds the router.

use std::future::Future;
use std::time::Duration;

use futures::future::Either;
use leasehold::{Error, LeaseKey, OrgId, TenantId};
use tokio::time::Instant;

use crate::message::ErasedRequest;

mod forward;
mod local;

pub(crate) use forward::FleetRouter;
pub(crate) use local::{LocalDelivery, LocalPath, Tenants};

/// The address of a tenant: its organization and tenant id. Any replica of the fleet takes a
/// message for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TenantAddr {
    /// The organization.
    pub org: OrgId,
    /// The tenant.
    pub tenant: TenantId,
}

impl TenantAddr {
    /// The address of `tenant` of `org`.
    pub fn new(org: OrgId, tenant: TenantId) -> Self {
        Self { org, tenant }
    }

    /// `<org>/<tenant>`: the tenant's lease key.
    pub fn key(&self) -> LeaseKey {
        LeaseKey::new(&self.org, &self.tenant)
    }
}

impl std::fmt::Display for TenantAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.org, self.tenant)
    }
}

/// A replica's router: one per replica, shared by its `Supervisor` handles. Holds no handle
/// that keeps the replica up (docs/guarantees.md, promise 6: a replica whose last handle is
/// dropped stops like a crash), so the transport's server may hold it too.
pub(crate) struct Router {
    /// The deadline of a request given none.
    pub(crate) ask_timeout: Duration,
    /// This replica's tenants.
    local: LocalPath,
    /// The fleet's router, when the replica has a transport.
    fleet: Option<FleetRouter>,
}

impl Router {
    /// The router of a replica: the local path, and the fleet's router if it has a transport.
    pub(crate) fn new(ask_timeout: Duration, local: LocalPath, fleet: Option<FleetRouter>) -> Self {
        Self {
            ask_timeout,
            local,
            fleet,
        }
    }

    /// Delivers `req` to the tenant of `key`, wherever it is, within `deadline`: the entry point
    /// of every message a host of this replica sends.
    pub(crate) fn deliver(
        &self,
        key: &LeaseKey,
        req: ErasedRequest,
        deadline: Instant,
    ) -> impl Future<Output = Result<Vec<u8>, Error>> + Send + use<> {
        match &self.fleet {
            Some(fleet) => {
                let (fleet, key) = (fleet.clone(), key.clone());
                Either::Left(async move { fleet.send(&key, req, deadline).await })
            }
            None => Either::Right(self.local.deliver(key, req, deadline)),
        }
    }
}

/// The longest deadline counted: a wait without end for every practical purpose.
const FARTHEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The instant `limit` from now. A limit too far to count (`Duration::MAX` from a caller, a
/// deadline an envelope carries) is [`FARTHEST`] from now, never an overflow: bad input gets
/// an answer, not a panic.
pub(crate) fn deadline_in(limit: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(limit.min(FARTHEST))
        .or_else(|| now.checked_add(Duration::from_secs(3_600)))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests;
