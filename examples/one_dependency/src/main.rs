//! The README's example, as a host with one dependency (`leasehold-actors`): one replica, one
//! tenant, a run, a plain SQL statement, a ticket, a handoff, a close.
//!
//! Run: `cargo run -p leasehold-one-dependency` (state goes to a fresh temporary directory,
//! removed at the end).

use std::sync::Arc;

use leasehold_actors::rusqlite::{OptionalExtension, params};
use leasehold_actors::{
    DirStore, NewEvent, OrgId, ReplicaId, RuntimeConfig, SqliteLeaseStore, Supervisor,
    derive_tenant_id,
};

#[leasehold_actors::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("leasehold-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let outcome = example(&dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

async fn example(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    // README: begin
    let config = RuntimeConfig::builder(ReplicaId::new("replica-a")?, dir.join("state"))
        .leases(Arc::new(SqliteLeaseStore::open(&dir.join("leases.db"))?))
        .durable(Arc::new(DirStore::open(&dir.join("durable"))?))
        .build()?; // or RuntimeConfig::from_env().await? (LEASEHOLD_* variables)
    let replica = Supervisor::start(config)?; // inside #[leasehold_actors::main]

    let tenant_id = derive_tenant_id(b"a secret key of 16+ bytes", "https://idp.example", "alice")?;
    let tenant = replica.open(&OrgId::new("acme")?, &tenant_id).await?;
    // One closure, one atomic run: committed only if the lease still holds.
    let seq = tenant
        .run(|ledger| ledger.insert_event(&NewEvent::new("order.placed", "order-17")))
        .await?;
    // Tables of your own: plain SQL, with the types of leasehold_actors::rusqlite.
    tenant
        .run(|ledger| {
            ledger.execute(
                "CREATE TABLE IF NOT EXISTS carts (id TEXT PRIMARY KEY, items INTEGER)",
                [],
            )?;
            ledger.execute("INSERT INTO carts VALUES (?1, ?2)", params!["cart-1", 3])?;
            Ok(())
        })
        .await?;
    let items: Option<i64> = tenant
        .run(|ledger| {
            let mut query = ledger.prepare("SELECT items FROM carts WHERE id = ?1")?;
            Ok(query.query_row(["cart-1"], |row| row.get(0)).optional()?)
        })
        .await?;
    // Long work takes a ticket: a handoff waits for it (up to the drain deadline).
    let ticket = tenant.admit().await?;
    let count = ticket.run(|ledger| ledger.event_count()).await?;
    drop(ticket);
    tenant.handoff().await?; // drain, wait for the log, release, drop the local copy
    let unflushed = replica.close().await?; // hands off whatever is still open, 8 at a time
    // README: end
    println!("order-17 at seq {seq:?}; cart-1 holds {items:?} items; {count} event(s)");
    println!("closed; {} tenant(s) could not be flushed", unflushed.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The README shows this example: each line of its Rust block is a line of this file, in
    /// the same order, so the README cannot drift from code that compiles with one dependency.
    #[test]
    fn the_readme_shows_this_example() {
        let readme = include_str!("../../../README.md");
        let block = readme
            .split("```rust")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("the README has a Rust block");
        let mut source = include_str!("main.rs").lines().map(str::trim);
        for line in block
            .lines()
            .skip(1)
            .map(str::trim)
            .filter(|l| !l.is_empty())
        {
            if line.starts_with("// examples/one_dependency") || line.starts_with("// …") {
                continue;
            }
            assert!(
                source.any(|l| l == line),
                "README line not in examples/one_dependency/src/main.rs (in order): {line}"
            );
        }
    }

    /// The README's example runs to the end (and `#[leasehold_actors::test]` needs no actix
    /// dependency either).
    #[leasehold_actors::test]
    async fn the_readme_example_runs() {
        let dir =
            std::env::temp_dir().join(format!("leasehold-example-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let outcome = super::example(&dir).await.map_err(|e| e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(outcome, Ok(()));
    }
}
