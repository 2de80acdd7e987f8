//! The transport's server: actix-web 4 on threads of its own (an actix system of its own, so it
//! serves whatever runtime the host runs), one route, [`super::PATH`]. Every request passes, in
//! order: the size limit (the `Content-Length` before a byte is read, then the bytes as they
//! come), the MAC, the envelope decoder — and only then reaches the [`Inbound`], whose work
//! runs on the replica's own runtime (where its stores' connections live).

use std::net::SocketAddr;
use std::sync::Arc;

use actix_web::dev::ServerHandle;
use actix_web::http::StatusCode;
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use futures::StreamExt;
use leasehold::Error;
use leasehold::codec::{
    ENVELOPE_FORMAT, ReplyEnvelope, WireError, decode_envelope, encode_envelope,
};

use super::wire::{
    self, CODE_BAD_MESSAGE, CODE_TOO_LARGE, CODE_UNAUTHENTICATED, refusal, to_wire, undecodable,
};
use super::{FleetKey, Inbound, MAC_HEADER, PATH, TransportConfig, auth};

/// How long the requests under way at stop are given, in seconds (docs/guarantees.md, the
/// longest `close()` takes).
pub(crate) const SHUTDOWN_SECS: u64 = 1;

/// What every request handler shares.
struct State {
    /// Where decoded envelopes go.
    inbound: Arc<dyn Inbound>,
    /// Verifies requests and signs replies.
    key: FleetKey,
    /// The most bytes a body may take.
    limit: usize,
    /// How long a body may take to arrive.
    body_timeout: std::time::Duration,
    /// The replica's runtime: deliveries run there.
    rt: tokio::runtime::Handle,
}

/// A running transport server; stops when [`Server::stop`] is awaited or it is dropped.
pub(crate) struct Server {
    /// The address it listens on (the port chosen when 0 was asked).
    addr: SocketAddr,
    /// Where other replicas reach it: `advertise`, else `scheme://addr`.
    endpoint: String,
    /// Stops it.
    handle: ServerHandle,
    /// Its thread, joined at stop.
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Binds `config.bind` and serves, handing every envelope to `inbound` on the runtime this
    /// is called on (which must be a tokio runtime: the replica's).
    pub(crate) fn start(
        config: &TransportConfig,
        inbound: Arc<dyn Inbound>,
    ) -> Result<Self, Error> {
        config.validate()?;
        let rt = tokio::runtime::Handle::try_current().map_err(|_| Error::InvalidOption {
            name: "transport",
            reason: "the transport starts inside the replica's runtime".into(),
        })?;
        let state = web::Data::new(State {
            inbound,
            key: config.fleet_key.clone(),
            limit: config.body_limit,
            body_timeout: config.body_timeout,
            rt,
        });
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let config_for_thread = config.clone();
        let thread = std::thread::Builder::new()
            .name("leasehold-transport".into())
            .spawn(move || serve(config_for_thread, state, bound_tx))
            .map_err(|e| Error::Closed(format!("cannot start the transport's thread: {e}")))?;
        let (addr, handle) = match bound_rx.recv() {
            Ok(bound) => bound?,
            Err(_) => {
                return Err(Error::Closed(
                    "the transport's thread ended at start".into(),
                ));
            }
        };
        let endpoint = config
            .advertise
            .clone()
            .unwrap_or_else(|| format!("{}://{addr}", config.scheme()));
        tracing::info!(%addr, %endpoint, "transport listening");
        Ok(Self {
            addr,
            endpoint,
            handle,
            thread: Some(thread),
        })
    }

    /// The address the server listens on.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The endpoint to advertise.
    pub(crate) fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Stops taking requests, lets those under way finish, and joins the thread.
    pub(crate) async fn stop(mut self) {
        self.handle.stop(true).await;
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.thread.is_some() {
            // The command goes out at once; its completion is not waited for.
            drop(self.handle.stop(false));
        }
    }
}

type Bound = Result<(SocketAddr, ServerHandle), Error>;

/// The server thread: binds, says where, and serves until stopped.
fn serve(config: TransportConfig, state: web::Data<State>, bound: std::sync::mpsc::Sender<Bound>) {
    let system = actix_rt::System::new();
    system.block_on(async move {
        let http = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .route(PATH, web::post().to(take))
        })
        .workers(config.workers)
        .disable_signals()
        // At stop (a replica's close, once its tenants are handed off) the requests under way
        // get this long, then their connections are cut: a sender hears a lost answer and
        // routes the message again with the same idempotency key.
        .shutdown_timeout(SHUTDOWN_SECS);
        let failed = |e: std::io::Error| Error::InvalidOption {
            name: "bind",
            reason: format!("cannot listen on {}: {e}", config.bind),
        };
        #[cfg(feature = "tls")]
        let listening = match &config.tls {
            Some(tls) => tls
                .server_config()
                .and_then(|c| http.bind_rustls_0_23(config.bind, c).map_err(failed)),
            None => http.bind(config.bind).map_err(failed),
        };
        #[cfg(not(feature = "tls"))]
        let listening = http.bind(config.bind).map_err(failed);
        let http = match listening {
            Ok(http) => http,
            Err(e) => {
                let _ = bound.send(Err(e));
                return;
            }
        };
        let Some(addr) = http.addrs().first().copied() else {
            let _ = bound.send(Err(Error::Closed("the transport bound no address".into())));
            return;
        };
        let server = http.run();
        let _ = bound.send(Ok((addr, server.handle())));
        if let Err(e) = server.await {
            tracing::warn!(error = %e, "the transport's server ended with an error");
        }
    });
}

/// The one route: limit, MAC, decode, deliver.
async fn take(req: HttpRequest, payload: web::Payload, state: web::Data<State>) -> HttpResponse {
    // Every answer is signed for this request: for the MAC header it came with.
    let mac = req.headers().get(MAC_HEADER).map(|v| v.as_bytes());
    let request_mac = mac.unwrap_or_default();
    let read = read_limited(&req, payload, state.limit);
    let body = match tokio::time::timeout(state.body_timeout, read).await {
        Ok(read) => read,
        Err(_) => {
            let why = format!(
                "the body did not arrive within {} ms of its head",
                state.body_timeout.as_millis()
            );
            Err((StatusCode::REQUEST_TIMEOUT, refusal(CODE_BAD_MESSAGE, why)))
        }
    };
    let body = match body {
        Ok(body) => body,
        Err((status, why)) => return answer(&state, request_mac, status, Err(why)),
    };
    if let Err(why) = auth::verify(&state.key, &body, mac) {
        tracing::warn!(peer = ?req.peer_addr(), %why, "refused an unauthenticated forward");
        let refused = refusal(CODE_UNAUTHENTICATED, why);
        return answer(&state, request_mac, StatusCode::UNAUTHORIZED, Err(refused));
    }
    let envelope = match decode_envelope(&body) {
        Ok(envelope) => envelope,
        Err(e) => {
            let refused = Err(undecodable(&e));
            return answer(&state, request_mac, StatusCode::BAD_REQUEST, refused);
        }
    };
    drop(body);
    let work = state.inbound.deliver(envelope);
    let outcome = match state.rt.spawn(work).await {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(e)) => Err(to_wire(&e)),
        Err(_) => Err(to_wire(&Error::Closed("the replica stopped".into()))),
    };
    answer(&state, request_mac, StatusCode::OK, outcome)
}

/// The body, at most `limit` bytes: a `Content-Length` above it is refused before a byte is
/// read, a body that grows past it as soon as it does.
async fn read_limited(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<Vec<u8>, (StatusCode, WireError)> {
    let too_large = |bytes: usize| {
        let why = format!("{bytes} bytes is more than the {limit} a forwarded message may take");
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            wire::too_large(bytes, limit, why),
        )
    };
    let declared = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(declared) = declared.filter(|n| *n > limit) {
        return Err(too_large(declared));
    }
    let mut body = Vec::with_capacity(declared.unwrap_or(0));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| {
            let why = format!("the body was cut: {e}");
            (StatusCode::BAD_REQUEST, refusal(CODE_BAD_MESSAGE, why))
        })?;
        if body.len() + chunk.len() > limit {
            return Err(too_large(body.len() + chunk.len()));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A reply envelope, signed for the request whose MAC header held `request_mac`.
fn answer(
    state: &State,
    request_mac: &[u8],
    status: StatusCode,
    outcome: Result<Vec<u8>, WireError>,
) -> HttpResponse {
    let reply = ReplyEnvelope {
        format: ENVELOPE_FORMAT,
        outcome,
    };
    let bytes = match encode_envelope(&reply) {
        Ok(bytes) => bytes,
        Err(e) => {
            let refused = refusal(CODE_TOO_LARGE, format!("the reply does not fit: {e}"));
            let fallback = ReplyEnvelope {
                format: ENVELOPE_FORMAT,
                outcome: Err(refused),
            };
            encode_envelope(&fallback).unwrap_or_default()
        }
    };
    let mac = auth::sign_reply(&state.key, request_mac, &bytes);
    HttpResponse::build(status)
        .insert_header((MAC_HEADER, mac))
        .content_type("application/octet-stream")
        .body(bytes)
}
