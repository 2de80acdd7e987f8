//! Test kit (feature `testkit`): the conformance suites every backend passes, and the
//! fault-injecting wrappers the runtime's tests use.
//!
//! - [`lease_store_conformance`] — what every [`crate::LeaseStore`] must do.
//! - [`durable_store_conformance`] — what every [`crate::DurableStore`] must do.
//! - [`FaultyStore`] — a durable store with an outage switch, slow puts, failing deletes and
//!   hooks before a named operation.
//! - [`MemStore`] — a durable store in memory, for tests on a paused clock.
//! - [`FaultyLeaseStore`] — a lease store with an outage switch and hooks around named operations.

mod durable_conformance;
mod faulty_lease;
mod faulty_store;
mod lease_conformance;
mod mem_store;

pub use durable_conformance::*;
pub use faulty_lease::*;
pub use faulty_store::*;
pub use lease_conformance::*;
pub use mem_store::*;
