//! The reference service: a replica embedded in an HTTP service (actix-web), what every user of
//! leasehold builds. Requests become typed messages sent to tenant addresses, so any replica of
//! the fleet answers for any tenant (forwarded to the one that holds it); admin routes hand off,
//! abandon and forget tenants open here; `/healthz` and `/metrics` (Prometheus text).
//!
//! ```text
//! POST /tenants/{org}/{tenant}/events            {"kind": "...", "subject": "...", "payload": {..}}
//!      (Idempotency-Key: <key>)                  -> {"seq": 7}
//! GET  /tenants/{org}/{tenant}/events?after=0&limit=100
//! GET  /tenants/{org}/{tenant}/queries/count-by-kind
//! GET  /admin/tenants                            the tenants open here, with their epochs
//! POST /admin/tenants/{org}/{tenant}/handoff|abandon|forget
//!      (admin routes: Authorization: Bearer <--admin-token>; off without one)
//! GET  /healthz   GET /metrics
//! ```
//!
//! Run on the embedded defaults (a SQLite lease file and a durable directory in the working
//! directory): `cargo run --example service`. A fleet of two on one machine:
//!
//! ```text
//! export LEASEHOLD_LEASES=sqlite:///tmp/fleet/leases.db LEASEHOLD_DURABLE=/tmp/fleet/durable
//! export LEASEHOLD_FLEET_KEY=$(openssl rand -hex 32)
//! cargo run --example service -- --http 127.0.0.1:8081 --replica-id a --state-root /tmp/fleet/a \
//!     --transport-bind 127.0.0.1:7071 &
//! cargo run --example service -- --http 127.0.0.1:8082 --replica-id b --state-root /tmp/fleet/b \
//!     --transport-bind 127.0.0.1:7072 &
//! ```
//!
//! Every other option is a `LEASEHOLD_*` variable (docs/operations.md). On SIGTERM (or SIGINT)
//! the service stops taking requests, lets those under way finish, then closes the replica: every
//! open tenant handed off within `drain_timeout` (set it below the orchestrator's grace period).
//! It logs each tenant it could not flush and exits 1 if there was one (2 if close failed).

mod messages;
mod routes;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::time::Duration;

use actix_web::{App, HttpServer, web};
use clap::Parser;
use leasehold_actors::metrics::prometheus::PrometheusMetrics;
use leasehold_actors::{EnvConfig, Supervisor};

/// The service's flags; each falls back to its variable, then to the embedded default.
#[derive(Debug, Parser)]
#[command(about = "leasehold's reference service: tenants behind HTTP, any replica answers")]
struct Flags {
    /// Where the HTTP API listens (port 0: any free port, printed at start).
    #[arg(long, env = "SERVICE_HTTP", default_value = "127.0.0.1:8080")]
    http: SocketAddr,
    /// This replica's id, unique in the fleet.
    #[arg(long, env = "LEASEHOLD_REPLICA_ID", default_value = "replica-a")]
    replica_id: String,
    /// Where tenants' local ledgers live.
    #[arg(long, env = "LEASEHOLD_STATE_ROOT", default_value = "state")]
    state_root: String,
    /// The lease store: `sqlite://PATH` or `postgres://…`.
    #[arg(long, env = "LEASEHOLD_LEASES", default_value = "sqlite://leases.db")]
    leases: String,
    /// The durable store: a path, `file://…` or `s3://bucket/prefix/`.
    #[arg(long, env = "LEASEHOLD_DURABLE", default_value = "durable")]
    durable: String,
    /// Where the fleet's transport listens (off when unset: this replica answers only for the
    /// tenants it holds or can open).
    #[arg(long, env = "LEASEHOLD_TRANSPORT_BIND")]
    transport_bind: Option<String>,
    /// The token the admin routes ask for (`Authorization: Bearer <token>`); without one they
    /// are off. Never logged.
    #[arg(long, env = "SERVICE_ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
    /// How long a request waits for its tenant, forwards and opens included.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    deadline: Duration,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    leasehold_actors::config::parse_duration(text)
}

#[leasehold_actors::main]
async fn main() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,actix_server=warn".into()),
        )
        .try_init();
    let code = match serve(Flags::parse()).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("service: {e}");
            2
        }
    };
    std::process::exit(code);
}

/// Runs the service until a signal stops it; the exit code.
async fn serve(flags: Flags) -> Result<i32, Box<dyn std::error::Error>> {
    // The flags win over the variables they stand for; every other LEASEHOLD_* passes through.
    let mut vars: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let given = [
        ("LEASEHOLD_REPLICA_ID", Some(&flags.replica_id)),
        ("LEASEHOLD_STATE_ROOT", Some(&flags.state_root)),
        ("LEASEHOLD_LEASES", Some(&flags.leases)),
        ("LEASEHOLD_DURABLE", Some(&flags.durable)),
        ("LEASEHOLD_TRANSPORT_BIND", flags.transport_bind.as_ref()),
    ];
    for (name, value) in given {
        vars.retain(|(k, _)| k != name);
        if let Some(value) = value {
            vars.push((name.into(), value.into()));
        }
    }
    let metrics = PrometheusMetrics::install()?;
    let config = EnvConfig::from_vars(vars)?
        .open()
        .await?
        .messages(messages::messages()?)
        .build()?;
    let replica = Supervisor::start(config)?;
    let state = routes::AppState {
        replica: replica.clone(),
        metrics,
        deadline: flags.deadline,
        admin_token: flags.admin_token.as_deref().map(routes::token_digest),
    };
    let server = HttpServer::new(move || {
        App::new()
            .app_data(web::Data::new(state.clone()))
            // Bad bodies and query strings get the service's coded refusal, not plain text.
            .app_data(
                web::JsonConfig::default()
                    .limit(1 << 20)
                    .error_handler(routes::bad_body),
            )
            .app_data(web::QueryConfig::default().error_handler(routes::bad_query))
            .configure(routes::configure)
    })
    .workers(2)
    // actix-web's own handling of SIGTERM stops the whole actix system once its workers are
    // done, and the replica's tenants with it, before `close()` could hand them off: the
    // service takes the signals itself (`stop_signal`).
    .disable_signals()
    .shutdown_timeout(5)
    .bind(flags.http)?;
    for addr in server.addrs() {
        // Tests and scripts read this line to find the port.
        println!("listening on http://{addr}");
    }
    tracing::info!(replica = %flags.replica_id, "service started");
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(async move {
        stop_signal().await;
        tracing::info!("signal received: no new requests; those under way finish");
        handle.stop(true).await;
    });
    server.await?;

    // The server has stopped taking requests and those under way have finished.
    tracing::info!("closing the replica");
    match replica.close().await {
        Ok(unflushed) if unflushed.is_empty() => {
            tracing::info!("closed: every tenant flushed");
            Ok(0)
        }
        Ok(unflushed) => {
            for key in &unflushed {
                tracing::error!(tenant = %key, "not flushed: its lease runs out on its own");
            }
            eprintln!("service: {} tenant(s) not flushed", unflushed.len());
            Ok(1)
        }
        Err(e) => {
            eprintln!("service: close failed: {e}");
            Ok(2)
        }
    }
}

/// SIGTERM or SIGINT, whichever comes first (SIGINT only if SIGTERM cannot be listened for).
async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
