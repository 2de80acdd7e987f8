//! Restore time of a tenant whose log holds `segments` segments since its head image: through
//! `restore_log` alone (fetch + apply + fsync, from the head and tip of the lease record), and
//! as a full open on another replica (acquire, restore, open the ledger).

use std::path::Path;
use std::time::{Duration, Instant};

use leasehold::ledger::NewEvent;
use leasehold::log::restore_log;
use leasehold::{LeaseKey, OrgId, TenantId};
use leasehold_actors::Durability;

use crate::backend::{Backend, replica, stores};
use crate::writes::insert;

/// What the restore measurement saw.
pub struct RestoreFigures {
    /// Segments applied by each restore (the log since the head image).
    pub segments: usize,
    /// The head image's size.
    pub image_bytes: u64,
    /// `restore_log` times, sorted.
    pub restore_log: Vec<Duration>,
    /// Full open times on another replica, sorted.
    pub open: Vec<Duration>,
}

/// Builds an image of `seed` events plus `segments` one-event segments, then restores it `reps`
/// times each way.
pub async fn measure(
    backend: Backend,
    dir: &Path,
    seed: usize,
    segments: usize,
    reps: usize,
) -> RestoreFigures {
    let s = stores(backend, dir, "restore").await;
    let no_compaction = |c: &mut leasehold_actors::RuntimeConfig| {
        c.compaction.segments = u64::MAX;
        c.compaction.bytes = u64::MAX;
    };
    let a = replica(&s, "writer", Durability::Shipped, no_compaction);
    let org = OrgId::new("restore").expect("org");
    let id = TenantId::new("deep").expect("id");
    let key = LeaseKey::new(&org, &id);
    let t = a.open(&org, &id).await.expect("open");
    t.run(move |l| {
        for k in 0..seed {
            let e = NewEvent::new("seed", format!("seed-{k}"))
                .payload(serde_json::json!({ "pad": "x".repeat(40) }));
            l.insert_event(&e)?;
        }
        Ok(())
    })
    .await
    .expect("seed");
    let image = t.snapshot().await.expect("image").expect("an image");
    println!("  image taken; writing {segments} one-event segments ...");
    for i in 0..segments {
        insert(&t, format!("e-{i}")).await;
        if (i + 1) % 250 == 0 {
            println!("    {}/{segments} segments", i + 1);
        }
    }
    t.handoff().await.expect("handoff");
    let record = s.leases.read(&key).await.expect("read").expect("record");
    let image_bytes = s
        .durable
        .get(&leasehold::layout::image_key(&key, image.epoch, image.seq))
        .await
        .expect("get")
        .map_or(0, |b| b.len() as u64);
    let mut restore_took = Vec::new();
    let mut applied = 0;
    for r in 0..reps {
        let dest = dir.join(format!("restored-{r}.db"));
        let started = Instant::now();
        let restored = restore_log(
            &*s.durable,
            &key,
            record.head.as_ref(),
            record.tip,
            record.floor,
            &dest,
        )
        .await
        .expect("restore_log");
        restore_took.push(started.elapsed());
        applied = restored.segments;
        println!(
            "    restore_log {}/{reps}: {} segments in {:.1} ms",
            r + 1,
            restored.segments,
            restore_took[r].as_secs_f64() * 1e3
        );
        let _ = std::fs::remove_file(&dest);
    }
    let b = replica(&s, "reader", Durability::Shipped, no_compaction);
    let mut open_took = Vec::new();
    for r in 0..reps {
        let started = Instant::now();
        let t = b.open(&org, &id).await.expect("open on another replica");
        open_took.push(started.elapsed());
        let events = t.run(|l| l.event_count()).await.expect("count");
        assert_eq!(events as usize, seed + segments, "restored events");
        println!(
            "    full open {}/{reps}: {:.1} ms ({events} events)",
            r + 1,
            open_took[r].as_secs_f64() * 1e3
        );
        t.handoff().await.expect("handoff");
    }
    restore_took.sort();
    open_took.sort();
    RestoreFigures {
        segments: applied,
        image_bytes,
        restore_log: restore_took,
        open: open_took,
    }
}
