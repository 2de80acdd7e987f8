//! Routing messages across the fleet: where a message for a tenant runs when this replica does
//! not hold it (docs/architecture.md, "The path of a forwarded message").
//!
//! `router/forward.rs` carries out the pure decision of `leasehold::route::decide`: run here,
//! open here, forward to the holder (the deadline carried as time left, hops bounded), route
//! again at a replica that no longer holds the tenant, `Moved`, wait for a successor while the
//! tenant leaves this replica, wait out an unreachable holder's lease and then take over,
//! `Unavailable`. A forward whose answer was lost is sent again with the same idempotency key.
//! `router/local.rs` is its seam with the tenants of this replica ([`LocalDelivery`]): the
//! router imports nothing of the supervisor, which holds it (`supervisor/fleet.rs`).

mod forward;
mod local;

pub(crate) use forward::FleetRouter;
pub(crate) use local::{LocalDelivery, WireRequest};

#[cfg(test)]
mod tests;
