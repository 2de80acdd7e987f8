//! Test kit (feature `testkit`): the conformance suites every backend passes, and the
//! fault-injecting wrappers the runtime's tests use.
//!
//! - [`lease_store_conformance`] — what every [`crate::LeaseStore`] must do.
//! - [`durable_store_conformance`] — what every [`crate::DurableStore`] must do.
//! - [`FaultyStore`] — a durable store with an outage switch, slow puts, failing deletes,
//!   hooks before a named operation, puts that time out yet land later, and a pace.
//! - [`MemStore`] — a durable store in memory, for tests on a paused clock.
//! - [`FaultyLeaseStore`] — a lease store with an outage switch, hooks around named operations,
//!   and calls that time out yet land later.
//! - [`FaultProxy`] — a loopback TCP proxy whose flows stall, hold requests back and deliver them
//!   late, or drop answers, for the backend tests against real servers.

mod durable_conformance;
mod faulty_lease;
mod faulty_store;
mod lease_conformance;
mod mem_store;
mod proxy;

pub use durable_conformance::*;
pub use faulty_lease::*;
pub use faulty_store::*;
pub use lease_conformance::*;
pub use mem_store::*;
pub use proxy::*;
