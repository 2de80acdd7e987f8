//! Acknowledged writes through the tenant actor, per durability mode: one sequential caller
//! (with its latencies), many callers in flight on one tenant (group commit, one segment in
//! flight), and one caller on each of many tenants (every tenant ships its own segments and
//! moves its own tip: what coalescing tip moves would save).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use leasehold::ledger::NewEvent;
use leasehold::{OrgId, TenantId};
use leasehold_actors::{Durability, TenantRef};

use crate::backend::{Backend, replica, stores};
use crate::measure::{Figure, sequential_async};

/// One acknowledged single-event run. `Async` refuses a run while its log is
/// `async_pending_limit` behind (`LogBehind`, nothing committed): the caller waits a
/// millisecond and sends it again, as docs/guarantees.md tells a host to, so the figure is the
/// rate the log keeps up with.
pub async fn insert(t: &TenantRef, idem: String) {
    loop {
        let event = NewEvent::new("bench", idem.clone());
        match t.run(move |l| l.insert_event(&event)).await {
            Ok(_) => return,
            Err(leasehold::Error::LogBehind { .. }) => {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(e) => panic!("run: {e:?}"),
        }
    }
}

/// `per_tenant` callers on each of `tenants`, each calling until `span` has passed.
pub async fn in_flight(
    tenants: &[TenantRef],
    per_tenant: usize,
    tag: &str,
    span: Duration,
) -> Figure {
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (n, t) in tenants.iter().enumerate() {
        for c in 0..per_tenant {
            let (t, done, tag) = (t.clone(), done.clone(), tag.to_string());
            tasks.push(actix::spawn(async move {
                let mut i = 0;
                while started.elapsed() < span {
                    insert(&t, format!("{tag}-{n}-{c}-{i}")).await;
                    done.fetch_add(1, Ordering::Relaxed);
                    i += 1;
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("caller");
    }
    Figure {
        ops: done.load(Ordering::Relaxed),
        took: started.elapsed(),
        latencies: Vec::new(),
    }
}

/// The write figures of one mode.
pub struct ModeWrites {
    /// One sequential caller.
    pub one: Figure,
    /// `callers` callers in flight on one tenant.
    pub many: Figure,
    /// One caller on each of `callers` tenants (measured for `Shipped` only).
    pub spread: Option<Figure>,
}

/// Measures one mode on fresh stores.
pub async fn mode(
    backend: Backend,
    dir: &std::path::Path,
    name: &str,
    durability: Durability,
    callers: usize,
    span: Duration,
) -> ModeWrites {
    let tag = name.replace(' ', "-").to_lowercase();
    let s = stores(backend, dir, &format!("writes-{tag}")).await;
    let a = replica(&s, "writer", durability, |_| {});
    let org = OrgId::new("bench").expect("org");
    let t = a
        .open(&org, &TenantId::new("hot").expect("id"))
        .await
        .expect("open");
    println!("  {name}: 1 caller for {span:?} ...");
    let one = sequential_async(span, |i| insert(&t, format!("s-{i}"))).await;
    println!("    {:.0} writes/s", one.rate());
    println!("  {name}: {callers} callers in flight on one tenant for {span:?} ...");
    let many = in_flight(std::slice::from_ref(&t), callers, "c", span).await;
    println!("    {:.0} writes/s", many.rate());
    let spread = if durability == Durability::Shipped {
        println!("  {name}: 1 caller on each of {callers} tenants for {span:?} ...");
        let mut tenants = Vec::new();
        for i in 0..callers {
            let id = TenantId::new(format!("spread-{i:03}")).expect("id");
            tenants.push(a.open(&org, &id).await.expect("open"));
        }
        let f = in_flight(&tenants, 1, "p", span).await;
        println!("    {:.0} writes/s", f.rate());
        Some(f)
    } else {
        None
    };
    println!("  {name}: closing the replica (not measured) ...");
    let unflushed = a.close().await.expect("close");
    assert!(unflushed.is_empty(), "{name}: unflushed {unflushed:?}");
    ModeWrites { one, many, spread }
}
