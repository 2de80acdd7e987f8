//! The handoff choreography on the embedded defaults: two replicas sharing one SQLite lease file
//! and one durable directory (as two processes on one host would), each step printed.
//!
//! 1. Replica A opens a tenant and writes: each write is acknowledged once its segment of the
//!    change log is in the durable store and the log tip moved (`Durability::Shipped`); a
//!    snapshot publishes an image holding a log position.
//! 2. A admits long work, then hands the tenant off while that work is still running: the drain
//!    waits for it, a new write is refused with `Draining`, the flush waits until the log holds
//!    everything committed (no final image), then the lease is released.
//! 3. Replica B opens the tenant (image + segments up to the tip) and finds every acknowledged
//!    write.
//! 4. B forgets the tenant: no image, segment, manifest or local file of it is left.
//!
//! Run: `cargo run --example handoff` (state goes to a temporary directory; `--keep DIR` keeps it).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::durable::dir::DirStore;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::ledger::{LedgerError, NewEvent};
use leasehold::{DurableStore, Error, OrgId, ReplicaId, derive_tenant_id};
use leasehold_actors::{RuntimeConfig, Supervisor, TenantRef};

const WRITES: usize = 100;

fn step(n: u32, text: &str) {
    println!("\n[{n}] {text}");
}

async fn write(tenant: &TenantRef, idem: String) -> Result<i64, Error> {
    tenant
        .run(move |l| {
            l.insert_event(&NewEvent::new("demo.write", idem))?
                .ok_or_else(|| LedgerError::Host("duplicate".into()))
        })
        .await
}

fn replica(
    name: &str,
    root: &std::path::Path,
    leases: &SqliteLeaseStore,
    durable: &DirStore,
) -> Result<Supervisor, Error> {
    let mut config = RuntimeConfig::new(
        ReplicaId::new(name)?,
        root.join("nodes").join(name),
        Arc::new(leases.clone()),
        Arc::new(durable.clone()),
    );
    config.drain_timeout = Duration::from_secs(10);
    Supervisor::start(config)
}

async fn demo(root: PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    let leases = SqliteLeaseStore::open(&root.join("leases.db"))?;
    let durable = DirStore::open(&root.join("durable"))?;
    let a = replica("replica-a", &root, &leases, &durable)?;
    let b = replica("replica-b", &root, &leases, &durable)?;
    let org = OrgId::new("acme")?;
    let tenant = derive_tenant_id(b"demo-key-0123456789abcdef", "https://idp.example", "alice")?;
    println!("state under {}", root.display());

    step(1, "replica-a opens the tenant and writes");
    let on_a = a.open(&org, &tenant).await?;
    let started = Instant::now();
    for i in 0..WRITES {
        write(&on_a, format!("w-{i:04}")).await?;
    }
    println!(
        "    {WRITES} writes acknowledged in {:?} (epoch {})",
        started.elapsed(),
        on_a.epoch()
    );
    let head = on_a.snapshot().await?;
    println!("    snapshot published: {head:?}");

    step(
        2,
        "replica-a hands off while admitted work is still running",
    );
    let ticket = on_a.admit().await?;
    let work = actix::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let event = NewEvent::new("demo.long-work", "long-work-done");
        let done = ticket.run(move |l| l.insert_event(&event)).await;
        println!("    long work finished during the drain: {done:?}");
    });
    let handing_off = on_a.handoff();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let refused = write(&on_a, "too-late".into()).await;
    println!(
        "    a new write during the drain: {}",
        match &refused {
            Err(e) => format!("refused with {}", e.code()),
            Ok(_) => "ACCEPTED (a bug)".into(),
        }
    );
    let started = Instant::now();
    handing_off.await?;
    work.await?;
    println!(
        "    handoff done in {:?}: log settled, lease released, local copy dropped",
        started.elapsed()
    );

    step(
        3,
        "replica-b opens the tenant and reads every acknowledged write",
    );
    let on_b = b.open(&org, &tenant).await?;
    let keys: Vec<String> = on_b
        .run(|l| {
            Ok(l.events_after(0, 10_000)?
                .into_iter()
                .map(|e| e.idem_key)
                .collect())
        })
        .await?;
    let all_there = (0..WRITES).all(|i| keys.contains(&format!("w-{i:04}")))
        && keys.contains(&"long-work-done".to_string());
    println!(
        "    epoch {}: {} events, every acknowledged write present: {all_there}",
        on_b.epoch(),
        keys.len()
    );
    if !all_there || refused.is_ok() {
        return Err("a promise was broken".into());
    }

    step(4, "replica-b forgets the tenant");
    on_b.forget().await?;
    let left = durable.list(&format!("{org}/{tenant}/")).await?;
    let local = leasehold::ids::tenant_root(&root.join("nodes/replica-b"), &org, &tenant);
    println!(
        "    objects left in the store: {}; local directory exists: {}",
        left.len(),
        local.exists()
    );
    if !left.is_empty() || local.exists() {
        return Err("forget left something behind".into());
    }

    let unflushed = a.close().await?.len() + b.close().await?.len();
    println!("\nboth replicas closed ({unflushed} tenants unflushed)");
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let args: Vec<String> = std::env::args().collect();
    let (root, _tmp) = match args.iter().position(|a| a == "--keep") {
        Some(i) => (
            PathBuf::from(args.get(i + 1).ok_or("--keep needs a directory")?),
            None,
        ),
        None => {
            let tmp = tempfile::tempdir()?;
            (tmp.path().to_path_buf(), Some(tmp))
        }
    };
    actix::System::new().block_on(demo(root))
}
