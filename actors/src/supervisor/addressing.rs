//! The host's side of tenant addresses: `Supervisor::send`, `ask` and `request` encode a typed
//! message, hand it to the replica's router (`crate::router`: run here, open here, or forward
//! to the holder) and decode its reply. The request holds a `Supervisor` handle while it is
//! under way, so the replica stays up for it.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::time::Duration;

use futures::future::BoxFuture;
use leasehold::Error;

use super::Supervisor;
use crate::message::{ErasedRequest, Sendable, TenantMessage, kind};
use crate::router::TenantAddr;

/// A message on its way to a tenant's address, with its options; `.await` it.
#[must_use = "a request goes when it is awaited"]
pub struct MessageRequest<K, M> {
    /// The replica it goes through.
    sup: Supervisor,
    /// Where it goes.
    addr: TenantAddr,
    /// The message.
    msg: M,
    /// The caller's idempotency key (commands).
    key: Option<String>,
    /// How long the caller waits; `ask_timeout` if `None`.
    deadline: Option<Duration>,
    /// Command or query.
    _kind: PhantomData<fn() -> K>,
}

impl<M: TenantMessage> MessageRequest<kind::Command, M> {
    /// The command's idempotency key: a second delivery with the same key (a retry after a
    /// lost answer, an unknown outcome) returns the reply stored with the first without running
    /// it again, within `idempotency_window`, on whichever replica it lands
    /// (docs/guarantees.md, promise 11). 1 to 256 bytes; one key, one command. Without one, a
    /// forwarded command carries a key the router makes for it, the same on every retry and hop.
    pub fn idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

impl<K, M: Sendable<K>> MessageRequest<K, M> {
    /// How long the caller waits for the reply, everything included (an open, a handoff under
    /// way, forwards, the output gate); `ask_timeout` if not given.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }
}

impl<K: 'static, M: Sendable<K>> IntoFuture for MessageRequest<K, M> {
    type Output = Result<M::Reply, Error>;
    type IntoFuture = BoxFuture<'static, Result<M::Reply, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        let MessageRequest {
            sup,
            addr,
            msg,
            key,
            deadline,
            ..
        } = self;
        let limit = deadline.unwrap_or(sup.router.ask_timeout);
        Box::pin(async move {
            let deadline = crate::router::deadline_in(limit);
            let req = ErasedRequest::of(&msg, key)?;
            let reply = sup.router.deliver(&addr.key(), req, deadline).await?;
            leasehold::codec::decode_message(&reply).map_err(|e| Error::BadMessage {
                reason: format!(
                    "the reply of {} version {} does not decode: {e}",
                    M::NAME,
                    M::VERSION
                ),
            })
        })
    }
}

impl Supervisor {
    /// A message to the tenant at `addr`, to adjust (`.idempotency_key(..)`, `.deadline(..)`)
    /// and `.await`. The message must be registered (`RuntimeConfig::messages`).
    pub fn request<K, M: Sendable<K>>(&self, addr: &TenantAddr, msg: M) -> MessageRequest<K, M> {
        MessageRequest {
            sup: self.clone(),
            addr: addr.clone(),
            msg,
            key: None,
            deadline: None,
            _kind: PhantomData,
        }
    }

    /// Sends `msg` to the tenant at `addr` and returns its reply, within `ask_timeout`: run
    /// here if this replica holds the tenant, opened here if nobody does, forwarded to the
    /// replica that holds it if another does (with a transport, `RuntimeConfig::transport`;
    /// without one the caller hears `LeaseHeld`). A command runs in the tenant's group commit
    /// like `TenantRef::run`; a query reads beside it. Either way the reply leaves only once
    /// everything it could have seen is acknowledged (docs/guarantees.md, promise 11).
    pub fn send<K: 'static, M: Sendable<K>>(
        &self,
        addr: &TenantAddr,
        msg: M,
    ) -> impl Future<Output = Result<M::Reply, Error>> + use<K, M> {
        self.request(addr, msg).into_future()
    }

    /// [`Supervisor::send`] with a deadline of its own.
    pub fn ask<K: 'static, M: Sendable<K>>(
        &self,
        addr: &TenantAddr,
        msg: M,
        deadline: Duration,
    ) -> impl Future<Output = Result<M::Reply, Error>> + use<K, M> {
        self.request(addr, msg).deadline(deadline).into_future()
    }
}
