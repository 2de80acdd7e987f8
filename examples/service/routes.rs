//! The service's routes: each request becomes a typed message sent to the tenant's address
//! (run here, opened here, or forwarded to the replica that holds the tenant), or an admin verb
//! on a tenant open here. Errors answer with the runtime's stable code.

use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use leasehold_actors::metrics::prometheus::PrometheusMetrics;
use leasehold_actors::{Error, OrgId, Supervisor, TenantAddr, TenantId};
use serde::{Deserialize, Serialize};

use crate::messages::{AppendEvent, CountByKind, ReadEvents};

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// The replica.
    pub replica: Supervisor,
    /// The metrics recorder's handle.
    pub metrics: PrometheusMetrics,
    /// How long a request waits for its tenant.
    pub deadline: Duration,
    /// The SHA-256 of the token the admin routes ask for (`Authorization: Bearer <token>`);
    /// `None`: the admin routes are off (a forget erases a tenant: never open to anyone who can
    /// reach the port).
    pub admin_token: Option<[u8; 32]>,
}

/// The digest an admin token is compared by (equal-length digests: the comparison's time says
/// nothing about the token).
pub fn token_digest(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}

/// `None` when `req` carries the admin token, else the refusal.
fn admin_refusal(state: &AppState, req: &HttpRequest) -> Option<HttpResponse> {
    let Some(want) = state.admin_token else {
        return Some(
            HttpResponse::Forbidden().json(Refusal {
                code: "SERVICE_ADMIN_OFF",
                message: "the admin routes are off: start the service with --admin-token (or \
                      SERVICE_ADMIN_TOKEN)"
                    .into(),
                outcome_unknown: false,
            }),
        );
    };
    let given = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(token) if token_digest(token) == want => None,
        _ => Some(HttpResponse::Unauthorized().json(Refusal {
            code: "SERVICE_UNAUTHORIZED",
            message: "an admin route needs Authorization: Bearer <the admin token>".into(),
            outcome_unknown: false,
        })),
    }
}

/// Mounts every route.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz))
        .route("/metrics", web::get().to(metrics))
        .route("/tenants/{org}/{tenant}/events", web::post().to(append))
        .route("/tenants/{org}/{tenant}/events", web::get().to(read))
        .route(
            "/tenants/{org}/{tenant}/queries/count-by-kind",
            web::get().to(count_by_kind),
        )
        .route("/admin/tenants", web::get().to(list_open))
        .route(
            "/admin/tenants/{org}/{tenant}/{verb}",
            web::post().to(admin),
        );
}

/// The body of an append.
#[derive(Debug, Deserialize)]
pub struct AppendBody {
    kind: String,
    subject: Option<String>,
    #[serde(default)]
    payload: serde_json::Value,
}

/// The query string of a read.
#[derive(Debug, Deserialize)]
pub struct ReadParams {
    #[serde(default)]
    after: i64,
    limit: Option<u32>,
}

/// An error as the service answers it.
#[derive(Debug, Serialize)]
struct Refusal {
    code: &'static str,
    message: String,
    /// The request may have run (a retry with the same idempotency key is safe).
    outcome_unknown: bool,
}

/// The HTTP status of a runtime error: the caller's fault (4xx), try again (503), unknown
/// outcome (504), or ours (500).
fn status_of(e: &Error) -> actix_web::http::StatusCode {
    use actix_web::http::StatusCode as S;
    match e {
        Error::InvalidId(_) | Error::BadMessage { .. } | Error::UnknownMessage { .. } => {
            S::BAD_REQUEST
        }
        Error::Ledger(_) => S::UNPROCESSABLE_ENTITY,
        Error::TooLarge { .. } | Error::BatchTooLarge { .. } => S::PAYLOAD_TOO_LARGE,
        Error::LeaseHeld { .. } | Error::Moved { .. } => S::CONFLICT,
        Error::Draining { .. }
        | Error::Fenced { .. }
        | Error::Unavailable { .. }
        | Error::Closed(_)
        | Error::OpenLimit { .. }
        | Error::LogBehind { .. } => S::SERVICE_UNAVAILABLE,
        Error::DeadlineExceeded { .. } | Error::ForwardFailed { .. } => S::GATEWAY_TIMEOUT,
        _ if e.is_outcome_unknown() => S::GATEWAY_TIMEOUT,
        _ => S::INTERNAL_SERVER_ERROR,
    }
}

fn refuse(e: &Error) -> HttpResponse {
    HttpResponse::build(status_of(e)).json(Refusal {
        code: e.code(),
        message: e.to_string(),
        outcome_unknown: e.is_outcome_unknown(),
    })
}

/// A body that is not the route's JSON (not JSON, no JSON content type, over the limit),
/// refused like every other refusal: JSON with a stable code (`web::JsonConfig`'s handler).
pub fn bad_body(e: actix_web::error::JsonPayloadError, _: &HttpRequest) -> actix_web::Error {
    use actix_web::error::JsonPayloadError as J;
    use actix_web::http::StatusCode as S;
    let (status, code) = match &e {
        J::OverflowKnownLength { .. } | J::Overflow { .. } => {
            (S::PAYLOAD_TOO_LARGE, "SERVICE_BODY_TOO_LARGE")
        }
        J::ContentType => (S::UNSUPPORTED_MEDIA_TYPE, "SERVICE_NOT_JSON"),
        _ => (S::BAD_REQUEST, "SERVICE_BAD_BODY"),
    };
    let refusal = HttpResponse::build(status).json(Refusal {
        code,
        message: e.to_string(),
        outcome_unknown: false,
    });
    actix_web::error::InternalError::from_response(e, refusal).into()
}

/// A query string that does not parse, refused like every other refusal
/// (`web::QueryConfig`'s handler).
pub fn bad_query(e: actix_web::error::QueryPayloadError, _: &HttpRequest) -> actix_web::Error {
    let refusal = bad_request("SERVICE_BAD_QUERY", e.to_string());
    actix_web::error::InternalError::from_response(e, refusal).into()
}

fn bad_request(code: &'static str, message: impl Into<String>) -> HttpResponse {
    HttpResponse::BadRequest().json(Refusal {
        code,
        message: message.into(),
        outcome_unknown: false,
    })
}

/// The tenant address of a path, or the refusal of a bad id.
fn address(path: &(String, String)) -> Result<TenantAddr, Box<HttpResponse>> {
    let bad = |e| Box::new(refuse(&Error::InvalidId(e)));
    let org = OrgId::new(path.0.as_str()).map_err(bad)?;
    let tenant = TenantId::new(path.1.as_str()).map_err(bad)?;
    Ok(TenantAddr::new(org, tenant))
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().body("ok\n")
}

async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render())
}

/// `POST /tenants/{org}/{tenant}/events` with an `Idempotency-Key` header: appended once,
/// however often the request is retried (within the idempotency window, on any replica).
async fn append(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String)>,
    body: web::Json<AppendBody>,
) -> HttpResponse {
    let addr = match address(&path) {
        Ok(addr) => addr,
        Err(refusal) => return *refusal,
    };
    let key = match req.headers().get("idempotency-key").map(|v| v.to_str()) {
        Some(Ok(key)) if !key.is_empty() => key,
        Some(Err(_)) => {
            return bad_request(
                "SERVICE_IDEMPOTENCY_KEY",
                "the Idempotency-Key header must be visible ASCII (HTTP header text)",
            );
        }
        _ => {
            return bad_request(
                "SERVICE_IDEMPOTENCY_KEY",
                "an append needs an Idempotency-Key header (1 to 256 bytes)",
            );
        }
    };
    let body = body.into_inner();
    let msg = AppendEvent {
        kind: body.kind,
        subject: body.subject,
        payload: body.payload.to_string(),
        key: key.to_string(),
    };
    let request = state
        .replica
        .request(&addr, msg)
        .idempotency_key(key)
        .deadline(state.deadline);
    match request.await {
        Ok(appended) => HttpResponse::Ok().json(serde_json::json!({ "seq": appended.seq })),
        Err(e) => refuse(&e),
    }
}

/// `GET /tenants/{org}/{tenant}/events?after=N&limit=M`.
async fn read(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    params: web::Query<ReadParams>,
) -> HttpResponse {
    let addr = match address(&path) {
        Ok(addr) => addr,
        Err(refusal) => return *refusal,
    };
    let query = ReadEvents {
        after: params.after,
        limit: params.limit.unwrap_or(1_000).min(10_000),
    };
    match state.replica.ask(&addr, query, state.deadline).await {
        Ok(events) => {
            let events: Vec<_> = events
                .into_iter()
                .map(|e| {
                    let payload: serde_json::Value =
                        serde_json::from_str(&e.payload).unwrap_or(serde_json::Value::Null);
                    serde_json::json!({
                        "seq": e.seq, "ts_ms": e.ts_ms, "kind": e.kind,
                        "subject": e.subject, "payload": payload, "key": e.key,
                    })
                })
                .collect();
            HttpResponse::Ok().json(events)
        }
        Err(e) => refuse(&e),
    }
}

/// `GET /tenants/{org}/{tenant}/queries/count-by-kind`.
async fn count_by_kind(
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
) -> HttpResponse {
    let addr = match address(&path) {
        Ok(addr) => addr,
        Err(refusal) => return *refusal,
    };
    match state.replica.ask(&addr, CountByKind, state.deadline).await {
        Ok(counts) => HttpResponse::Ok().json(counts),
        Err(e) => refuse(&e),
    }
}

/// `GET /admin/tenants`: the tenants open on this replica.
async fn list_open(state: web::Data<AppState>, req: HttpRequest) -> HttpResponse {
    if let Some(refusal) = admin_refusal(&state, &req) {
        return refusal;
    }
    match state.replica.open_tenants().await {
        Ok(open) => {
            let open: Vec<_> = open
                .into_iter()
                .map(
                    |(key, epoch)| serde_json::json!({ "tenant": key.to_string(), "epoch": epoch }),
                )
                .collect();
            HttpResponse::Ok().json(open)
        }
        Err(e) => refuse(&e),
    }
}

/// `POST /admin/tenants/{org}/{tenant}/{handoff|abandon|forget}` on the replica that holds
/// the tenant. `forget` of a tenant nobody holds opens it here first (and is refused with
/// `LEASEHOLD_LEASE_HELD`, naming the holder, when another replica holds it).
async fn admin(
    state: web::Data<AppState>,
    req: HttpRequest,
    path: web::Path<(String, String, String)>,
) -> HttpResponse {
    if let Some(refusal) = admin_refusal(&state, &req) {
        return refusal;
    }
    let (org, tenant, verb) = path.into_inner();
    let addr = match address(&(org, tenant)) {
        Ok(addr) => addr,
        Err(refusal) => return *refusal,
    };
    let here = state.replica.tenant(&addr.org, &addr.tenant).await;
    let outcome = match (verb.as_str(), here) {
        ("handoff", Some(t)) => t.handoff().await,
        ("abandon", Some(t)) => t.abandon().await,
        ("forget", Some(t)) => t.forget().await,
        ("forget", None) => match state.replica.open(&addr.org, &addr.tenant).await {
            Ok(t) => t.forget().await,
            Err(e) => Err(e),
        },
        ("handoff" | "abandon", None) => {
            return HttpResponse::NotFound().json(Refusal {
                code: "SERVICE_NOT_OPEN_HERE",
                message: format!("{} is not open on this replica", addr.key()),
                outcome_unknown: false,
            });
        }
        _ => {
            return bad_request(
                "SERVICE_UNKNOWN_VERB",
                format!("unknown admin verb {verb:?}: handoff, abandon or forget"),
            );
        }
    };
    match outcome {
        Ok(()) => HttpResponse::Ok()
            .json(serde_json::json!({ "tenant": addr.key().to_string(), "done": verb })),
        Err(e) => refuse(&e),
    }
}
