//! The router's seam with the tenants of this replica ([`LocalDelivery`]): whether a message is
//! known here, where its tenant stands here, and running it here (opening the tenant when nobody
//! holds it). The supervisor's side of it is `supervisor/where_is.rs` (`SupervisorDelivery`):
//! the supervisor holds the router, the router knows the supervisor only through this trait.

use futures::future::BoxFuture;
use leasehold::route::LocalState;
use leasehold::{Error, LeaseKey};
use tokio::time::Instant;

/// A message with its type erased, field for field the `ErasedRequest` of typed messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WireRequest {
    /// The registered name.
    pub(crate) name: String,
    /// The schema version.
    pub(crate) version: u32,
    /// The key that makes a retry safe: the host's, else one the router makes before the first
    /// forward of a send, carried by every retry and hop of it (and by a run here after a
    /// forward whose answer was lost). A message that never leaves this replica needs none.
    pub(crate) idempotency_key: Option<String>,
    /// The encoded message.
    pub(crate) body: Vec<u8>,
}

/// What the router needs of this replica's tenants.
pub(crate) trait LocalDelivery: Send + Sync + 'static {
    /// Refuses a message this replica does not know (unknown name or schema version): nothing
    /// runs, nothing is opened, nothing is forwarded.
    fn check(&self, name: &str, version: u32) -> Result<(), Error>;

    /// Where the tenant of `key` stands here.
    fn local_state(&self, key: &LeaseKey) -> BoxFuture<'static, LocalState>;

    /// Runs `req` here within `deadline`: on the tenant if it is open and serving, after
    /// opening it if nobody holds it. A refusal that means "not here" (`LeaseHeld`, `Fenced`,
    /// `Draining`) ran nothing: the router routes the message again.
    fn deliver_local(
        &self,
        key: &LeaseKey,
        req: WireRequest,
        deadline: Instant,
    ) -> BoxFuture<'static, Result<Vec<u8>, Error>>;
}
