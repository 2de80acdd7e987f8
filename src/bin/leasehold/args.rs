//! The command line (clap derive): the stores, the output, and one subcommand per verb. Every
//! value is parsed by `parse.rs` while the line is read, so a bad argument never reaches a store.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use leasehold::LeaseKey;
use leasehold::log::Target;

use crate::parse::{self, DurableUrl, LeaseUrl};

/// The table a PostgreSQL lease store uses when `--pg-table` names none.
const DEFAULT_TABLE: &str = "leasehold_leases";

/// Operator commands for leasehold's stores: list and inspect leases and tenants, verify what
/// the durable store holds, sweep dead epochs, forget a tenant no replica holds, restore a
/// tenant to a file. Every command opens existing stores only and creates none.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about, long_about = None)]
pub struct Cli {
    /// The lease store: `sqlite://PATH` (a lease file) or `postgres://USER@HOST:PORT/DB` (TLS
    /// with `?sslmode=verify-full&sslrootcert=PATH`, docs/operations.md).
    #[arg(long, global = true, env = "LEASEHOLD_LEASES", hide_env_values = true, value_parser = parse::lease_url)]
    pub leases: Option<LeaseUrl>,
    /// The durable store: a directory (`PATH` or `file://PATH`) or `s3://BUCKET/PREFIX`
    /// (endpoint, region and credentials from the usual AWS variables: AWS_ENDPOINT_URL, …).
    #[arg(long, global = true, env = "LEASEHOLD_DURABLE", value_parser = parse::durable_url)]
    pub durable: Option<DurableUrl>,
    /// The PostgreSQL lease table.
    #[arg(long, global = true, env = "LEASEHOLD_PG_TABLE", default_value = DEFAULT_TABLE)]
    pub pg_table: String,
    /// How long one store call may take (a listing page, a read, a delete): `500ms`, `30s`, `2m`.
    #[arg(long, global = true, default_value = "30s", value_parser = parse::duration)]
    pub store_deadline: Duration,
    /// Print one JSON document (the contract in docs/operations.md) instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// Open a lease file or durable directory that lets the group or others in (refused by
    /// default: docs/operations.md, "File permissions").
    #[arg(long, global = true)]
    pub accept_shared_permissions: bool,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Every lease: owner, epoch, when it ends, floor, head, tip, pending erasure.
    Leases {
        /// Start at this tenant (`ORG/TENANT`; the listing is in the store's order of keys).
        #[arg(long, value_parser = parse::tenant_key)]
        from: Option<LeaseKey>,
        /// Show at most this many; `next` then names where to go on.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        limit: Option<u64>,
    },
    /// One tenant: its lease, epochs, images, segments, sizes, the chain from the tip, checks.
    Inspect {
        /// The tenant, `ORG/TENANT`.
        #[arg(value_parser = parse::tenant_key)]
        tenant: LeaseKey,
    },
    /// Check a tenant (or every tenant with a head or a tip): images and segments against their
    /// checksums, the chain from the tip, and a restore to a temporary file that must pass
    /// `PRAGMA integrity_check`.
    Verify {
        /// The tenant, `ORG/TENANT`; every tenant when absent.
        #[arg(value_parser = parse::tenant_key)]
        tenant: Option<LeaseKey>,
    },
    /// Delete what lies at or below each tenant's floor, and finish the erasures of forgotten
    /// tenants once `--put-lifetime` has passed since their forget.
    Sweep {
        /// The tenant, `ORG/TENANT`; every tenant of the durable store when absent.
        #[arg(value_parser = parse::tenant_key)]
        tenant: Option<LeaseKey>,
        /// Say what would be deleted and cleared; delete and clear nothing.
        #[arg(long)]
        dry_run: bool,
        /// The longest a replica's put may still land after it was sent (the replicas'
        /// `put_lifetime`): a forget's erasure is finished only once this has passed.
        #[arg(long, default_value = "120s", value_parser = parse::duration)]
        put_lifetime: Duration,
    },
    /// Forget a tenant no replica holds: take its lease, raise its floor, erase every epoch at
    /// or below it, and (after `--put-lifetime`) sweep again and clear the pending erasure.
    Forget {
        /// The tenant, `ORG/TENANT`.
        #[arg(value_parser = parse::tenant_key)]
        tenant: LeaseKey,
        /// The longest a replica's put may still land after it was sent (the replicas'
        /// `put_lifetime`): the final sweep waits this long after the floor rose.
        #[arg(long, default_value = "120s", value_parser = parse::duration)]
        put_lifetime: Duration,
        /// Do not wait for the final sweep: leave the erasure pending for a replica's periodic
        /// pass or a later `leasehold sweep`.
        #[arg(long)]
        no_wait: bool,
    },
    /// Restore a tenant into a new plain SQLite file: its latest state, or its state at a time
    /// or log position within the retention window.
    Restore {
        /// The tenant, `ORG/TENANT`.
        #[arg(value_parser = parse::tenant_key)]
        tenant: LeaseKey,
        /// The file to write; it must not exist (nor its `-wal`), its directory must.
        #[arg(long)]
        to: PathBuf,
        /// A time (RFC 3339 like 2025-06-01T12:00:00Z, or unix milliseconds) or a log position
        /// (`e3:41`, as `inspect` prints them).
        #[arg(long, value_parser = parse::target)]
        at: Option<Target>,
    },
}

impl Command {
    /// The verb's name, as typed.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Leases { .. } => "leases",
            Command::Inspect { .. } => "inspect",
            Command::Verify { .. } => "verify",
            Command::Sweep { .. } => "sweep",
            Command::Forget { .. } => "forget",
            Command::Restore { .. } => "restore",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_bad_argument_is_refused_while_the_line_is_read() {
        let parse = |args: &[&str]| Cli::try_parse_from(["leasehold"].iter().chain(args));
        assert!(parse(&["inspect", "acme/../x"]).is_err());
        assert!(parse(&["--leases", "leases.db", "leases"]).is_err());
        assert!(parse(&["restore", "acme/t1", "--to", "x.db", "--at", "soon"]).is_err());
        assert!(parse(&["leases", "--limit", "0"]).is_err());
        let ok = parse(&[
            "--leases",
            "sqlite://l.db",
            "restore",
            "acme/t1",
            "--to",
            "x.db",
            "--at",
            "e3:4",
        ]);
        assert!(ok.is_ok(), "{ok:?}");
    }
}
