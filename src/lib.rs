//! # leasehold — the storage core
//!
//! Per-tenant SQLite ledgers kept under fenced leases, with images published to a durable store.
//! This crate holds everything below the actors: no actor framework, no timers of its own. The
//! actix runtime that carries these pieces out lives in the `leasehold-actors` crate, which is
//! also the one crate a host depends on: it re-exports what a host needs of this one.
//!
//! ## Layout
//! - [`ids`] — validated `OrgId`, `TenantId`, `ReplicaId`, `derive_tenant_id`, `LeaseKey`.
//! - [`error`] — the crate [`Error`], whose variants a caller can act on, each with a stable code.
//! - [`clock`] — the [`Clock`] trait (monotonic milliseconds), the system clock and [`ManualClock`].
//! - [`lease`] — the [`LeaseStore`] trait, the lease record, and the pure [`lease::LeaseTerm`]
//!   that says whether a holder may still act; [`lease::sqlite`] is the embedded backend.
//! - [`durable`] — the [`DurableStore`] trait (an object store with `put_if_absent` as its only
//!   write), key and prefix validation; [`durable::dir`] is the embedded backend.
//! - [`codec`] — the binary codec of the change log's segments and of forwarded messages'
//!   envelopes (bincode 2, the bytes of bincode 1), the only user of `bincode`, pinned by
//!   golden-bytes tests.
//! - [`deadline`] — a wrapper that gives every lease-store and durable-store call a deadline.
//! - [`layout`] — how images and manifests are named in the durable store, and the image
//!   reference ([`layout::ImageRef`]) that heads and manifests carry.
//! - [`ledger`] — the tenant's SQLite file: schema, events, the bracket host code runs in.
//! - [`image`] — consistent images, manifests, verification, publish and restore.
//! - [`log`] — the durable change log: captured pages, segments, the rolling checksum.
//! - [`paths`] — path containment for every destructive local call.
//! - [`plan`] — pure decisions: what a sweep may delete.
//! - [`route`] — pure decisions: where a message for a tenant goes (run here, open here,
//!   forward, wait, refuse) and which replica opens a tenant nobody holds (placement).
//! - [`sweep`] — deleting dead epochs of one tenant, or of a whole store (the operator command).
//! - [`stores`] — store URLs (`sqlite://…`, `postgres://…`, a path, `s3://…`): parsing and
//!   opening, creating a missing store or refusing it.
//! - [`rusqlite`] — the SQLite crate whose types `LedgerTx`'s methods take (`params!`,
//!   `ToSql`, `Row`, `OptionalExtension`), re-exported so a host needs no version of its own;
//!   [`serde_json`] likewise (an event's payload).
//! - `testkit` (feature `testkit`) — conformance suites every backend passes, and
//!   `FaultyStore`, the fault-injecting durable store the tests use.
#![warn(missing_docs, unreachable_pub)]

pub mod clock;
pub mod codec;
pub mod deadline;
pub mod durable;
pub mod error;
pub mod ids;
pub mod image;
#[cfg(any(feature = "postgres", feature = "s3"))]
mod io_runtime;
pub mod layout;
pub mod lease;
pub mod ledger;
pub mod log;
pub mod paths;
pub mod plan;
pub mod private;
pub mod route;
pub mod stores;
pub mod sweep;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use clock::{Clock, ManualClock, SystemClock, SystemWallClock, WallClock};
pub use durable::DurableStore;
pub use error::{Error, Result};
pub use ids::{LeaseKey, OrgId, ReplicaId, TenantId, derive_tenant_id};
pub use lease::LeaseStore;
pub use rusqlite;
pub use serde_json;
