//! Reopen of a passivated tenant (its image and segments fetched back) and `close()` of many
//! tenants beside its floor: the same work done directly on the files (each ledger's last
//! connection closed, its directory removed, its lease released), as many at a time as `close`.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use leasehold::lease::LeaseStore;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::ledger::NewEvent;
use leasehold::{LeaseKey, OrgId, TenantId};
use leasehold_actors::{Durability, Event, Observer};
use rusqlite::Connection;

use crate::backend::{Backend, replica, stores};
use crate::many::open_and_write;
use crate::writes::insert;

/// Remembers the keys of passivated tenures.
#[derive(Default)]
struct Passivated(Mutex<HashSet<String>>);

impl Observer for Passivated {
    fn on_event(&self, event: &Event) {
        if let Event::Passivated { key, .. } = event {
            self.0.lock().unwrap().insert(key.clone());
        }
    }
}

/// What reopening saw.
pub struct Reopen {
    /// The first write on a kept handle of a passivated tenant: reopen (acquire, image and
    /// segments fetched and applied, ledger opened) and the write; sorted.
    pub reopen: Vec<Duration>,
    /// The write after it, the tenant open: sorted.
    pub write: Vec<Duration>,
    /// Segments each tenant had when it was passivated.
    pub segments: usize,
}

/// `reps` tenants, each written `events` times (one segment each), left idle until passivated
/// (`passivate_after` 100 ms), then written once more on the handle the host kept.
pub async fn reopen(backend: Backend, dir: &Path, reps: usize, events: usize) -> Reopen {
    let s = stores(backend, dir, "reopen").await;
    let seen = Arc::new(Passivated::default());
    let observer: Arc<dyn Observer> = seen.clone();
    let a = replica(&s, "reopening", Durability::Shipped, |c| {
        c.passivate_after = Some(Duration::from_millis(100));
        c.observer = Some(observer);
    });
    let org = OrgId::new("reopen").expect("org");
    let (mut reopen, mut write) = (Vec::new(), Vec::new());
    for r in 0..reps {
        let id = format!("r{r:03}");
        let t = open_and_write(&a, &org, &id).await.expect("open");
        for k in 1..events {
            insert(&t, format!("k-{k}")).await;
        }
        let key = format!("{}/{id}", org.as_str());
        let waited = Instant::now();
        while !seen.0.lock().unwrap().contains(&key) {
            assert!(
                waited.elapsed() < Duration::from_secs(60),
                "{key} was not passivated"
            );
            actix_rt::time::sleep(Duration::from_millis(10)).await;
        }
        let started = Instant::now();
        insert(&t, "after".into()).await;
        reopen.push(started.elapsed());
        let started = Instant::now();
        insert(&t, "after-2".into()).await;
        write.push(started.elapsed());
    }
    reopen.sort();
    write.sort();
    let unflushed = a.close().await.expect("close");
    assert!(unflushed.is_empty(), "unflushed {unflushed:?}");
    Reopen {
        reopen,
        write,
        segments: events,
    }
}

/// `close()` of `tenants` tenants with `events` events each (one run apiece, `Shipped`,
/// passivation off so that every tenant is still open): how long the close took, and how many
/// tenants it could not flush.
pub async fn close_many(
    backend: Backend,
    dir: &Path,
    tenants: usize,
    events: usize,
) -> (Duration, usize) {
    let s = stores(backend, dir, &format!("close-{tenants}")).await;
    let a = replica(&s, "closing", Durability::Shipped, |c| {
        c.passivate_after = None;
        c.max_open = c.max_open.max(tenants + 16);
    });
    let org = OrgId::new("close").expect("org");
    let started = Instant::now();
    let mut opens = futures::stream::iter(0..tenants)
        .map(|i| {
            let (a, org) = (a.clone(), org.clone());
            async move {
                let id = TenantId::new(format!("t{i:05}")).expect("id");
                let t = a.open(&org, &id).await.expect("open");
                t.run(move |l| {
                    for k in 0..events {
                        l.insert_event(&NewEvent::new("bench", format!("k-{k}")))?;
                    }
                    Ok(())
                })
                .await
                .expect("fill");
            }
        })
        .buffer_unordered(16);
    let mut done = 0;
    while opens.next().await.is_some() {
        done += 1;
        if done % (tenants / 5).max(1) == 0 {
            println!(
                "    opened and filled {done}/{tenants} tenants ({:.1} s)",
                started.elapsed().as_secs_f64()
            );
        }
    }
    drop(opens);
    println!("    close() ...");
    let started = Instant::now();
    let unflushed = a.close().await.expect("close");
    (started.elapsed(), unflushed.len())
}

/// The floor of closing `tenants` tenants of `events` events each, `at_once` at a time (as
/// `close` runs `close_concurrency` handoffs at a time): for each, its ledger's last
/// connection closed (SQLite checkpoints the WAL into the file and removes it) and its
/// directory removed on a blocking thread, then its lease released with one lease-store call —
/// set up first (leases acquired, ledgers of the same schema filled in WAL + `NORMAL`), not
/// timed.
pub async fn close_floor(dir: &Path, tenants: usize, events: usize, at_once: usize) -> Duration {
    let root = dir.join(format!("floor-{tenants}"));
    std::fs::create_dir_all(&root).expect("floor dir");
    let leases = SqliteLeaseStore::open(&root.join("leases.db")).expect("lease file");
    let org = OrgId::new("floor").expect("org");
    let ttl = Duration::from_secs(60);
    let mut held = Vec::new();
    for i in 0..tenants {
        let key = LeaseKey::new(&org, &TenantId::new(format!("t{i:05}")).expect("id"));
        let record = leases.acquire(&key, "floor", ttl).await.expect("acquire");
        let tenant_dir = root.join(format!("t{i:05}"));
        std::fs::create_dir_all(&tenant_dir).expect("tenant dir");
        let conn = Connection::open(tenant_dir.join("ledger.db")).expect("ledger");
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;
             CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, ts_ms INTEGER NOT NULL,
               actor TEXT NOT NULL, kind TEXT NOT NULL, subject TEXT, payload TEXT NOT NULL,
               idem_key TEXT NOT NULL UNIQUE, run_id TEXT);",
        )
        .expect("schema");
        let tx = conn.unchecked_transaction().expect("begin");
        for k in 0..events {
            tx.execute(
                "INSERT INTO events (ts_ms, actor, kind, payload, idem_key) VALUES (?1, 'host', 'bench', '{}', ?2)",
                rusqlite::params![k as i64, format!("k-{k}")],
            )
            .expect("insert");
        }
        tx.commit().expect("commit");
        held.push((key, record.epoch, conn, tenant_dir));
    }
    let started = Instant::now();
    let leases = &leases;
    futures::stream::iter(held)
        .for_each_concurrent(at_once, |(key, epoch, conn, tenant_dir)| async move {
            tokio::task::spawn_blocking(move || {
                conn.close().map_err(|(_, e)| e).expect("close");
                std::fs::remove_dir_all(&tenant_dir).expect("remove");
            })
            .await
            .expect("file work");
            leases.release(&key, "floor", epoch).await.expect("release");
        })
        .await;
    started.elapsed()
}
