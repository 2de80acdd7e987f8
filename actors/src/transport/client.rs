//! The transport's client: reqwest's pooled keep-alive client (one per replica), every request
//! signed with the fleet key and run on the replica's runtime, so pooled connections live where
//! the replica lives whichever thread asks. A forward ends in one of three ways, told apart
//! because a retry depends on it ([`ForwardError`]).

use std::time::Duration;

use leasehold::Error;
use leasehold::codec::{
    ENVELOPE_LIMIT, Envelope, EnvelopeError, WireError, decode_reply, encode_envelope,
};

use super::{FleetKey, MAC_HEADER, PATH, TransportConfig, auth};

/// Why a forward brought no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ForwardError {
    /// Nothing reached the receiver (the connection could not be made): nothing ran there.
    NotSent(String),
    /// The request went out and its answer was lost (cut connection, no answer in time, an
    /// answer that is not a signed reply): **the outcome is unknown**.
    Lost(String),
    /// The receiver refused it with a code; whether anything ran is the code's to say.
    Refused(WireError),
}

/// A reply as it came, for tests that send what a real sender never would.
#[derive(Debug)]
pub(crate) struct RawReply {
    /// The HTTP status.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) status: u16,
    /// What the signed reply envelope said.
    pub(crate) outcome: Result<Vec<u8>, WireError>,
}

/// Sends envelopes to other replicas.
#[derive(Clone)]
pub(crate) struct ForwardClient {
    /// The pool.
    http: reqwest::Client,
    /// Signs requests and verifies replies.
    key: FleetKey,
    /// The replica's runtime: every request runs there.
    rt: tokio::runtime::Handle,
}

impl std::fmt::Debug for ForwardClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardClient").finish_non_exhaustive()
    }
}

impl ForwardClient {
    /// A client for the fleet of `config`, on the runtime this is called on.
    pub(crate) fn new(config: &TransportConfig) -> Result<Self, Error> {
        let rt = tokio::runtime::Handle::try_current().map_err(|_| Error::InvalidOption {
            name: "transport",
            reason: "the transport starts inside the replica's runtime".into(),
        })?;
        let builder = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .connect_timeout(config.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(256);
        #[cfg(feature = "tls")]
        let builder = match &config.tls {
            Some(tls) => tls.client(builder)?,
            None => builder,
        };
        let http = builder.build().map_err(|e| Error::InvalidOption {
            name: "transport",
            reason: format!("cannot build the HTTP client: {e}"),
        })?;
        Ok(Self {
            http,
            key: config.fleet_key.clone(),
            rt,
        })
    }

    /// Sends `envelope` to `endpoint` and waits at most `timeout` for its reply's bytes.
    pub(crate) async fn forward(
        &self,
        endpoint: &str,
        envelope: &Envelope,
        timeout: Duration,
    ) -> Result<Vec<u8>, ForwardError> {
        let body = encode_envelope(envelope).map_err(|e| {
            ForwardError::Refused(match e {
                EnvelopeError::TooLarge { bytes, limit } => {
                    super::wire::too_large(bytes, limit, e.to_string())
                }
                other => super::wire::refusal(super::wire::CODE_BAD_MESSAGE, other.to_string()),
            })
        })?;
        let mac = auth::sign(&self.key, &body);
        let raw = self.post(endpoint, body, Some(mac), timeout).await?;
        raw.outcome.map_err(ForwardError::Refused)
    }

    /// Posts `body` with the header `mac` (if any) and reads the signed reply.
    pub(crate) async fn post(
        &self,
        endpoint: &str,
        body: Vec<u8>,
        mac: Option<String>,
        timeout: Duration,
    ) -> Result<RawReply, ForwardError> {
        let url = format!("{}{PATH}", endpoint.trim_end_matches('/'));
        let mut request = self
            .http
            .post(url)
            .timeout(timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
            .body(body);
        // The reply is signed for the request it answers: for this MAC header.
        let request_mac = mac.clone().unwrap_or_default().into_bytes();
        if let Some(mac) = mac {
            request = request.header(MAC_HEADER, mac);
        }
        let key = self.key.clone();
        let call = async move {
            let response = request.send().await.map_err(sent_or_not)?;
            let status = response.status().as_u16();
            let mac = response.headers().get(MAC_HEADER).cloned();
            let bytes = read_limited(response).await?;
            let header = mac.as_ref().map(|v| v.as_bytes());
            if let Err(why) = auth::verify_reply(&key, &request_mac, &bytes, header) {
                return Err(ForwardError::Lost(format!(
                    "the reply (status {status}) is not signed by the fleet: {why}"
                )));
            }
            let reply = decode_reply(&bytes)
                .map_err(|e| ForwardError::Lost(format!("the reply does not decode: {e}")))?;
            Ok(RawReply {
                status,
                outcome: reply.outcome,
            })
        };
        match self.rt.spawn(call).await {
            Ok(answer) => answer,
            Err(e) => Err(ForwardError::Lost(format!("the request's task ended: {e}"))),
        }
    }
}

/// A reply's bytes, at most [`ENVELOPE_LIMIT`]: a reply that claims more on its
/// `Content-Length` is refused before a byte is read, one that streams more as soon as it does
/// (docs/guarantees.md, "a forwarded message's size"). Either is a lost answer: the request
/// went out, what came back is no reply of the fleet's.
async fn read_limited(mut response: reqwest::Response) -> Result<Vec<u8>, ForwardError> {
    let too_large = |bytes: u64| {
        ForwardError::Lost(format!(
            "the reply of {bytes} bytes or more is over the limit of {ENVELOPE_LIMIT}"
        ))
    };
    let declared = response.content_length();
    if let Some(declared) = declared.filter(|n| *n > ENVELOPE_LIMIT as u64) {
        return Err(too_large(declared));
    }
    let mut bytes = Vec::with_capacity(declared.unwrap_or(0) as usize);
    while let Some(chunk) = response.chunk().await.map_err(|e| lost(&e))? {
        if bytes.len() + chunk.len() > ENVELOPE_LIMIT {
            return Err(too_large((bytes.len() + chunk.len()) as u64));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// A failed send: never connected (nothing ran), or lost after it went out.
fn sent_or_not(e: reqwest::Error) -> ForwardError {
    if e.is_connect() {
        ForwardError::NotSent(e.to_string())
    } else {
        lost(&e)
    }
}

fn lost(e: &reqwest::Error) -> ForwardError {
    ForwardError::Lost(e.to_string())
}
