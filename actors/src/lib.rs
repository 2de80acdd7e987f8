//! # leasehold-actors — the actix runtime
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
//! ## Layout
//! - [`config`] — [`RuntimeConfig`], defaults and validation.
//! - [`events`] — [`Event`], the [`Observer`] trait, [`EventLog`].
//! - [`status`] — [`TenantStatus`], the tenant's state machine.
//! - [`transport`] — how replicas of a fleet reach each other: [`TransportConfig`], the fleet
//!   key, the actix-web server and the pooled client that carry forwarded messages.
//! - `supervisor` — [`Supervisor`]: open, handoff under the drain deadline, close.
//! - `tenant` — [`TenantRef`] and [`Ticket`]; the tenant actor, its group commit, its lifecycle
//!   and its image publisher.
//! - `lease_actor` — the renewal chain and each tenure's `LeaseCell`.
//! - `reconcile` — the replica's ledger of puts of unknown outcome and its passes.
#![warn(missing_docs, unreachable_pub)]

pub mod config;
pub mod events;
mod lease_actor;
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
pub use config::{Compaction, Durability, MIN_SEGMENT_LIMIT, RuntimeConfig};
pub use events::{Event, EventLog, Observer};
pub use lease_actor::live_tenants;
pub use reconcile::ReconcileReport;
pub use status::TenantStatus;
pub use supervisor::{Supervisor, SupervisorActor};
pub use tenant::{TenantRef, Ticket};
pub use transport::{FleetKey, TransportConfig};
