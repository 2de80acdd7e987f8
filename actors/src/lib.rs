//! # leasehold-actors — the actix runtime, and the one crate a host depends on
//!
//! One actor per tenant, a lease actor that owns the replica's renewal chain, and a supervisor
//! that opens tenants, enforces drain deadlines and close concurrency. Hosts hold handles
//! ([`Supervisor`], [`TenantRef`], [`Ticket`]) and never build messages.
//!
//! ```text
//!   Supervisor ──> SupervisorActor ──┬── LeaseActor        one renew_many per tick
//!                                    ├── Arbiter 1 ── TenantActor, TenantActor, …
//!                                    └── Arbiter n ── TenantActor, …
//! ```
//!
//! ## One dependency
//! A host adds this crate alone (`cargo add leasehold-actors`, features `postgres` and `s3`
//! for a fleet's stores): everything it touches is re-exported here — ids and
//! [`derive_tenant_id`], [`Error`], the configuration, the stores and their URLs
//! ([`LeaseStoreUrl`], [`DurableStoreUrl`]), [`NewEvent`], [`LedgerTx`] and [`LedgerError`],
//! [`rusqlite`] (the types `LedgerTx`'s methods take: `rusqlite::params!`, `ToSql`, `Row`,
//! `OptionalExtension`), [`serde_json`] (event payloads), and the actix system:
//! `#[leasehold_actors::main]` runs an `async fn main` in one, [`System`] is actix's. The
//! storage core is [`leasehold`] for anything else. `examples/one_dependency` is such a host.
//!
//! ```ignore
//! use leasehold_actors::{Supervisor, RuntimeConfig};
//!
//! #[leasehold_actors::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let replica = Supervisor::start(RuntimeConfig::from_env().await?)?;
//!     // …
//!     replica.close().await?;
//!     Ok(())
//! }
//! ```
//!
//! ## Layout
//! - [`config`] — [`RuntimeConfig`], defaults and validation.
//! - [`events`] — [`Event`], the [`Observer`] trait, [`EventLog`].
//! - [`metrics`] — what the runtime records through the `metrics` crate ([`metrics::CATALOG`]),
//!   and (feature `prometheus`) its rendering in Prometheus' text format.
//! - [`status`] — [`TenantStatus`], the tenant's state machine.
//! - [`transport`] — how replicas of a fleet reach each other: [`TransportConfig`], the fleet
//!   key, the actix-web server and the pooled client that carry forwarded messages.
//! - `supervisor` — [`Supervisor`]: open, handoff under the drain deadline, close; the host's
//!   side of addresses (`Supervisor::send`/`ask`/`request`, [`MessageRequest`]).
//! - `tenant` — [`TenantRef`] and [`Ticket`]; the tenant actor, its group commit, its lifecycle
//!   and its image publisher.
//! - `lease_actor` — the renewal chain and each tenure's `LeaseCell`.
//! - `reconcile` — the replica's ledger of puts of unknown outcome and its passes.
//! - `passivation` — passivation's pure decisions: the order of last activity (an LRU list
//!   runs never touch), who is idle, who is evicted at `max_open`; [`PassivationReason`].
//! - [`message`] — typed messages: [`TenantMessage`], [`TenantQuery`], the registry
//!   [`Messages`], the erased form a replica hands another ([`ErasedRequest`]).
//! - `router` — [`TenantAddr`] and where a message runs: the local path (run here, open here
//!   when nobody holds it, wait while it leaves here) and, with a transport, the fleet's router
//!   (`router/forward.rs`: carries out `leasehold::route::decide` — forward to the holder, wait
//!   for a successor, take over once a dead holder's lease ran out, `Moved`, `Unavailable`).
#![warn(missing_docs, unreachable_pub)]

pub mod config;
pub mod events;
mod holders;
mod lease_actor;
pub mod message;
pub mod metrics;
mod passivation;
mod reconcile;
mod router;
mod runtime;
pub mod status;
mod supervisor;
mod tenant;
mod tips;
pub mod transport;

#[cfg(feature = "fault-switches")]
pub use config::Breakage;
pub use config::{
    Compaction, Durability, ENV_VARS, EnvConfig, EnvVar, MIN_SEGMENT_LIMIT, RuntimeConfig,
    RuntimeConfigBuilder,
};
pub use events::{Event, EventLog, Observer};
pub use lease_actor::live_tenants;
pub use message::{ErasedRequest, MessageKind, Messages, Sendable, TenantMessage, TenantQuery};
pub use passivation::PassivationReason;
pub use reconcile::ReconcileReport;
pub use router::TenantAddr;
pub use status::TenantStatus;
pub use supervisor::{MessageRequest, Supervisor, SupervisorActor};
pub use tenant::{TenantRef, Ticket};
pub use transport::{FleetKey, TransportConfig};

// What a host touches, so that it needs no other dependency (docs/architecture.md, "One
// dependency").
pub use leasehold;
pub use leasehold::durable::dir::DirStore;
#[cfg(feature = "s3")]
pub use leasehold::durable::s3::{S3Config, S3Limits, S3Store};
pub use leasehold::durable::{DurableStore, SharedDurableStore};
pub use leasehold::layout::ImageRef;
#[cfg(feature = "postgres")]
pub use leasehold::lease::postgres::{PgOptions, PostgresLeaseStore};
pub use leasehold::lease::sqlite::SqliteLeaseStore;
pub use leasehold::lease::{LeaseStore, SharedLeaseStore};
pub use leasehold::ledger::{LedgerError, LedgerTx, NewEvent};
pub use leasehold::stores::{DurableStoreUrl, IfMissing, LeaseStoreUrl};
pub use leasehold::{
    Error, LeaseKey, OrgId, ReplicaId, Result, TenantId, derive_tenant_id, rusqlite, serde_json,
};

/// actix's system: what `Supervisor::start` runs in. `#[leasehold_actors::main]` starts one.
pub use actix::System;
/// Runs an `async fn main` inside an actix [`System`] (actix's `#[actix::main]`, reachable
/// without a dependency on actix).
pub use leasehold_actors_macros::main;
/// Runs an `async fn` test inside an actix [`System`] (actix's `#[actix::test]`).
pub use leasehold_actors_macros::test;

/// What `#[leasehold_actors::main]` and `#[leasehold_actors::test]` expand to. Not an API.
#[doc(hidden)]
pub mod __private {
    pub use actix_rt::{main, test};
}
