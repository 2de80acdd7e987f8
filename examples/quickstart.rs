//! The README's example, compiled and run: one replica, one tenant, a run, a ticket, a handoff.
//!
//! Run: `cargo run --example quickstart` (state goes to a temporary directory).

use std::sync::Arc;

use leasehold::durable::dir::DirStore;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::ledger::NewEvent;
use leasehold::{OrgId, ReplicaId, derive_tenant_id};
use leasehold_actors::{RuntimeConfig, Supervisor};

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let leases = Arc::new(SqliteLeaseStore::open(&dir.path().join("leases.db"))?);
    let durable = Arc::new(DirStore::open(&dir.path().join("durable"))?);
    let config = RuntimeConfig::new(
        ReplicaId::new("replica-a")?,
        dir.path().join("state"),
        leases,
        durable,
    );
    let replica = Supervisor::start(config)?;

    let tenant_id = derive_tenant_id(b"a secret key of 16+ bytes", "https://idp.example", "alice")?;
    let tenant = replica.open(&OrgId::new("acme")?, &tenant_id).await?;
    // One closure, one atomic run: committed only if the lease still holds.
    let seq = tenant
        .run(|ledger| ledger.insert_event(&NewEvent::new("order.placed", "order-17")))
        .await?;
    println!("order-17 written at seq {seq:?}");
    // Long work takes a ticket: a handoff waits for it (up to the drain deadline).
    let ticket = tenant.admit().await?;
    let count = ticket.run(|ledger| ledger.event_count()).await?;
    drop(ticket);
    println!("{count} event(s) in the ledger");
    tenant.handoff().await?; // drain, final image, release, drop the local copy
    let unflushed = replica.close().await?; // hands off whatever is still open, 8 at a time
    println!("closed; {} tenant(s) could not be flushed", unflushed.len());
    Ok(())
}
