//! The router's seam with the tenants of this replica ([`LocalDelivery`]): whether a message is
//! known here, where its tenant stands here, and running it here (opening the tenant when nobody
//! holds it). The supervisor's side of it is [`SupervisorDelivery`].

use futures::future::BoxFuture;
use leasehold::route::LocalState;
use leasehold::{Error, LeaseKey};
use tokio::time::Instant;

use actix::Addr;

use crate::supervisor::SupervisorActor;

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

/// The supervisor's side of [`LocalDelivery`]: tenants' states from its table and its opens
/// under way. This build has no registry of typed messages yet, so every message is unknown
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
        Box::pin(crate::supervisor::local_state(&self.addr, key))
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
