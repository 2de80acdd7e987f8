//! The transport between the replicas of a fleet: how a message one replica cannot run reaches
//! the replica that holds its tenant (docs/architecture.md, "The path of a forwarded message").
//!
//! ```text
//!  router ── ForwardClient ──POST /leasehold/v1/messages──> Server ──> Inbound (the router)
//!            (pooled keep-alive,    body: Envelope (codec)     size limit, then the MAC,
//!             reqwest)              x-leasehold-mac: HMAC      then decode, then deliver
//!  router <── reply bytes or a typed refusal ── ReplyEnvelope (MAC'd too) <──
//! ```
//!
//! It knows envelopes, not tenants: what a message means is the router's and the registry's
//! business. Only replicas that hold the fleet key may send ([`FleetKey`], promise 11 of
//! docs/guarantees.md): a request is refused **before it is decoded** when its body is larger
//! than the limit (413, checked before reading it) or its `x-leasehold-mac` is missing or wrong
//! (401, compared in constant time). A body that is not an envelope — cut short, followed by
//! more bytes, of another format — is refused with a typed code (400). Nothing runs for any of
//! them, and the connection stays usable.
//!
//! The server is actix-web 4 on threads of its own; the client is reqwest's pooled keep-alive
//! client, its requests run on the runtime the replica started on (why reqwest and not awc:
//! docs/architecture.md). TLS is optional (feature `tls`, rustls, `transport/tls.rs`).

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use leasehold::Error;
use leasehold::codec::{ENVELOPE_LIMIT, Envelope};

mod auth;
mod client;
mod server;
#[cfg(feature = "tls")]
mod tls;
pub(crate) mod wire;

pub(crate) use client::{ForwardClient, ForwardError};
pub(crate) use server::Server;
#[cfg(feature = "tls")]
pub use tls::TlsConfig;

/// The path every forwarded message is posted to.
pub const PATH: &str = "/leasehold/v1/messages";

/// The header that carries the hex HMAC-SHA256 of the body under the fleet key, on requests
/// and on replies.
pub const MAC_HEADER: &str = "x-leasehold-mac";

/// The shortest fleet key accepted, in bytes.
pub const MIN_FLEET_KEY: usize = 32;

/// The secret every replica of a fleet shares: it signs every forwarded message and reply.
/// Its `Debug` never shows it.
#[derive(Clone)]
pub struct FleetKey(Arc<[u8]>);

impl FleetKey {
    /// A fleet key of `bytes`; at least [`MIN_FLEET_KEY`] bytes (use random ones: `openssl
    /// rand -hex 32`), else [`Error::InvalidOption`] (`fleet_key`).
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, Error> {
        let bytes = bytes.into();
        if bytes.len() < MIN_FLEET_KEY {
            return Err(Error::InvalidOption {
                name: "fleet_key",
                reason: format!(
                    "{} bytes; a fleet key takes at least {MIN_FLEET_KEY}",
                    bytes.len()
                ),
            });
        }
        Ok(Self(bytes.into()))
    }

    /// A fleet key written as hex (64 characters or more). A refusal never quotes the text:
    /// it says where it is wrong, not what it holds.
    pub fn from_hex(text: &str) -> Result<Self, Error> {
        let bytes = hex::decode(text.trim()).map_err(|e| Error::InvalidOption {
            name: "fleet_key",
            reason: match e {
                hex::FromHexError::InvalidHexCharacter { index, .. } => {
                    format!("not hex: a character that is no hex digit at position {index}")
                }
                hex::FromHexError::OddLength => "not hex: an odd number of digits".to_owned(),
                hex::FromHexError::InvalidStringLength => "not hex: a bad length".to_owned(),
            },
        })?;
        Self::new(bytes)
    }

    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for FleetKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FleetKey(<{} bytes, redacted>)", self.0.len())
    }
}

/// How this replica takes forwarded messages and sends its own (`RuntimeConfig::transport`).
#[derive(Clone)]
pub struct TransportConfig {
    /// Where the server listens; port 0 takes any free port.
    pub bind: SocketAddr,
    /// The endpoint advertised in the lease store (`http://10.0.0.5:7070`), when the bound
    /// address is not how other replicas reach this one (a container, a load balancer's
    /// address). Default: the bound address.
    pub advertise: Option<String>,
    /// The secret every replica of the fleet shares.
    pub fleet_key: FleetKey,
    /// The most bytes a request body may take; a larger one is refused before it is read
    /// (413). Default and most: the envelope's limit (16 MiB of message and 64 KiB).
    pub body_limit: usize,
    /// The most forwards a message takes before a replica answers `Moved`. Default 3.
    pub max_hops: u8,
    /// How long where a tenant held elsewhere was found is trusted as the place to forward a
    /// host's messages to before the lease store is read again; `None` reads it before every
    /// forward. A stale place costs one round trip, never a wrong answer: the replica there
    /// runs nothing it does not hold, and the sender routes again from a fresh lookup
    /// (docs/architecture.md, "The path of a forwarded message"). Default 1 s.
    pub holder_cache: Option<Duration>,
    /// Server threads. Default 2.
    pub workers: usize,
    /// How long a forward may take to connect. Default 1 s.
    pub connect_timeout: Duration,
    /// How long a request's body may take to arrive once its head has: a peer that sends a
    /// head and then too little is answered 408 and its connection closed, so it holds no
    /// connection, buffer or worker of the server for longer. Default 10 s (a body of the
    /// largest size at 1.7 MiB/s).
    pub body_timeout: Duration,
    /// Who opens a tenant nobody holds. Default: this replica (`route::Stay`).
    pub placement: Arc<dyn leasehold::route::Placement>,
    /// TLS for the server and the client (feature `tls`). Default: none (plain HTTP).
    #[cfg(feature = "tls")]
    pub tls: Option<TlsConfig>,
}

impl TransportConfig {
    /// A configuration listening on `bind` with `fleet_key` and every default.
    pub fn new(bind: SocketAddr, fleet_key: FleetKey) -> Self {
        Self {
            bind,
            advertise: None,
            fleet_key,
            body_limit: ENVELOPE_LIMIT,
            max_hops: leasehold::route::DEFAULT_MAX_HOPS,
            holder_cache: Some(Duration::from_secs(1)),
            workers: 2,
            connect_timeout: Duration::from_secs(1),
            body_timeout: Duration::from_secs(10),
            placement: Arc::new(leasehold::route::Stay),
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// Refuses values that cannot work with [`Error::InvalidOption`].
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |name, reason: &str| {
            Err(Error::InvalidOption {
                name,
                reason: reason.to_owned(),
            })
        };
        if self.body_limit == 0 || self.body_limit > ENVELOPE_LIMIT {
            return bad(
                "body_limit",
                "must be between 1 byte and the envelope's limit",
            );
        }
        if self.max_hops == 0 {
            return bad("max_hops", "must be at least 1");
        }
        if self.holder_cache.is_some_and(|d| d.is_zero()) {
            return bad(
                "holder_cache",
                "must be longer than zero (None reads the lease store before every forward)",
            );
        }
        if !(1..=64).contains(&self.workers) {
            return bad("workers", "must be between 1 and 64");
        }
        if self.connect_timeout.is_zero() {
            return bad("connect_timeout", "must be longer than zero");
        }
        if self.body_timeout.is_zero() {
            return bad("body_timeout", "must be longer than zero");
        }
        match &self.advertise {
            Some(a) if !(a.starts_with("http://") || a.starts_with("https://")) => {
                bad("advertise", "must be an http:// or https:// URL")
            }
            _ => Ok(()),
        }
    }

    /// `https` with TLS, else `http`.
    pub(crate) fn scheme(&self) -> &'static str {
        #[cfg(feature = "tls")]
        if self.tls.is_some() {
            return "https";
        }
        "http"
    }
}

impl fmt::Debug for TransportConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportConfig")
            .field("bind", &self.bind)
            .field("advertise", &self.advertise)
            .field("fleet_key", &self.fleet_key)
            .field("body_limit", &self.body_limit)
            .field("max_hops", &self.max_hops)
            .field("holder_cache", &self.holder_cache)
            .field("connect_timeout", &self.connect_timeout)
            .field("body_timeout", &self.body_timeout)
            .field("workers", &self.workers)
            .field("placement", &self.placement)
            .finish_non_exhaustive()
    }
}

/// An [`Inbound`] plugged in after the server started: until then (and if never) a message is
/// refused as `Closed` ("the replica is starting"), having run nothing.
#[derive(Default)]
pub(crate) struct InboundSlot(std::sync::RwLock<Option<Arc<dyn Inbound>>>);

impl InboundSlot {
    /// Plugs `inbound` in.
    pub(crate) fn set(&self, inbound: Arc<dyn Inbound>) {
        let mut slot = self
            .0
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = Some(inbound);
    }
}

impl Inbound for InboundSlot {
    fn deliver(&self, envelope: Envelope) -> BoxFuture<'static, Result<Vec<u8>, Error>> {
        let slot = self
            .0
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match slot.as_ref() {
            Some(inbound) => inbound.deliver(envelope),
            None => Box::pin(async { Err(Error::Closed("the replica is starting".into())) }),
        }
    }
}

/// What the server hands every envelope that passed the size limit, the MAC and the decoder:
/// the router of the replica (`crate::router`). Its answer is the reply's bytes, or an error
/// whose code travels back ([`wire::to_wire`]).
pub(crate) trait Inbound: Send + Sync + 'static {
    /// Delivers `envelope` here or onwards; answers within its `deadline_ms`.
    fn deliver(&self, envelope: Envelope) -> BoxFuture<'static, Result<Vec<u8>, Error>>;
}

#[cfg(test)]
mod tests;
