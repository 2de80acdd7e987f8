//! Handoff latency of a small tenant and `close()` of many tenants, per durability mode. With
//! `Shipped` a handoff is drain + release (everything acknowledged is already in the log); with
//! `Async` it ships what is pending first; with `Images` it takes and uploads a final image.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use leasehold::ledger::NewEvent;
use leasehold::{OrgId, TenantId};
use leasehold_actors::{Durability, Event, Observer};

use crate::backend::{Backend, replica, stores};
use crate::writes::insert;

/// Counts `close_progress` events and prints every 100th.
struct Progress(AtomicUsize);

impl Observer for Progress {
    fn on_event(&self, event: &Event) {
        if let Event::CloseProgress {
            done,
            total,
            unflushed,
        } = event
        {
            self.0.store(*done, Ordering::Relaxed);
            if done % 100 == 0 || done == total {
                println!("      close: {done}/{total} tenants handed off ({unflushed} unflushed)");
            }
        }
    }
}

/// Handoff latencies (sorted) of `handoffs` tenants with 10 events each.
pub async fn handoffs(
    backend: Backend,
    dir: &Path,
    name: &str,
    durability: Durability,
    handoffs: usize,
) -> Vec<Duration> {
    let tag = name.replace(' ', "-").to_lowercase();
    let s = stores(backend, dir, &format!("handoff-{tag}")).await;
    let a = replica(&s, "handing", durability, |_| {});
    let org = OrgId::new("handoff").expect("org");
    let mut took = Vec::new();
    for i in 0..handoffs {
        let id = TenantId::new(format!("small-{i}")).expect("id");
        let t = a.open(&org, &id).await.expect("open");
        for k in 0..10 {
            insert(&t, format!("k-{k}")).await;
        }
        let started = Instant::now();
        t.handoff().await.expect("handoff");
        took.push(started.elapsed());
        if (i + 1) % 25 == 0 {
            println!("    {name}: {}/{handoffs} handoffs", i + 1);
        }
    }
    took.sort();
    took
}

/// `close()` of `tenants` tenants with `events` events each (one run apiece): how long the
/// close took and how many tenants it could not flush.
pub async fn close_many(
    backend: Backend,
    dir: &Path,
    name: &str,
    durability: Durability,
    tenants: usize,
    events: usize,
) -> (Duration, usize) {
    let tag = name.replace(' ', "-").to_lowercase();
    let s = stores(backend, dir, &format!("close-{tag}")).await;
    let progress = Arc::new(Progress(AtomicUsize::new(0)));
    let observer: Arc<dyn Observer> = progress.clone();
    let a = replica(&s, "closing", durability, |c| c.observer = Some(observer));
    let org = OrgId::new("close").expect("org");
    let started = Instant::now();
    for i in 0..tenants {
        let id = TenantId::new(format!("t{i:04}")).expect("id");
        let t = a.open(&org, &id).await.expect("open");
        t.run(move |l| {
            for k in 0..events {
                l.insert_event(&NewEvent::new("bench", format!("k-{k}")))?;
            }
            Ok(())
        })
        .await
        .expect("fill");
        if (i + 1) % 100 == 0 {
            println!(
                "    {name}: opened and filled {}/{tenants} tenants ({:.1} s)",
                i + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    println!("    {name}: close() ...");
    let started = Instant::now();
    let unflushed = a.close().await.expect("close");
    (started.elapsed(), unflushed.len())
}
