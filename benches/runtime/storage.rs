//! Durable bytes of one tenant after `events` acknowledged events under `Shipped` with
//! compaction (an image every `segments` segments, checked every 250 ms) and a short `retain`,
//! against the ledger's own size; the objects by kind; and what the retention plan
//! (`leasehold::plan::retention::retention_plan`) deletes, applied by the benchmark itself when
//! the runtime does not run it, after which another replica must still restore every event.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::durable::DurableStore;
use leasehold::image::parse_manifest;
use leasehold::layout::{epoch_of, segment_of};
use leasehold::plan::retention::{ImageInfo, RetentionInput, retention_plan};
use leasehold::{LeaseKey, OrgId, TenantId};
use leasehold_actors::{Durability, Event, Observer};

use crate::backend::{Backend, replica, stores};
use crate::writes::insert;

/// Objects and bytes of one tenant in the durable store, by kind.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Images (`snap-*.db`) and their bytes.
    pub images: (usize, u64),
    /// Manifests (`snap-*.json`) and their bytes.
    pub manifests: (usize, u64),
    /// Segments (`log-*.seg`) and their bytes.
    pub segments: (usize, u64),
    /// Anything else and its bytes.
    pub other: (usize, u64),
}

impl Tally {
    /// Every object.
    pub fn objects(&self) -> usize {
        self.images.0 + self.manifests.0 + self.segments.0 + self.other.0
    }

    /// Every byte.
    pub fn bytes(&self) -> u64 {
        self.images.1 + self.manifests.1 + self.segments.1 + self.other.1
    }
}

/// What the storage measurement saw.
pub struct StorageFigures {
    /// Events written.
    pub events: usize,
    /// The ledger's size (`page_count × page_size`), its file and its WAL, in bytes, before
    /// the handoff.
    pub ledger: (u64, u64, u64),
    /// The durable store right after the last acknowledgement, the writers still busy until
    /// then (and after the runtime's own retention, if any).
    pub loaded: Tally,
    /// The same after 1 s without writes (compaction ticks every 250 ms) and the handoff.
    pub after: Tally,
    /// The runtime's own retention until the handoff: sweeps, objects deleted, failed sweeps.
    pub swept: (usize, usize, usize),
    /// Objects and bytes the retention plan chose to delete.
    pub planned: (usize, u64),
    /// The durable store after the bench applied the plan.
    pub retained: Tally,
    /// Events another replica restored after that.
    pub restored_events: u64,
}

/// Counts the runtime's own retention sweeps (`Event::Swept`), their objects, and failures.
#[derive(Default)]
struct Sweeps {
    sweeps: AtomicUsize,
    objects: AtomicUsize,
    failed: AtomicUsize,
}

impl Observer for Sweeps {
    fn on_event(&self, event: &Event) {
        match event {
            Event::Swept { objects, .. } => {
                self.sweeps.fetch_add(1, Ordering::Relaxed);
                self.objects.fetch_add(*objects, Ordering::Relaxed);
            }
            Event::SweepFailed { .. } => {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

async fn tally(store: &dyn DurableStore, key: &LeaseKey) -> (Tally, Vec<(String, u64)>) {
    let listed = store.list(&key.prefix()).await.expect("list");
    let mut t = Tally::default();
    let mut sizes = Vec::new();
    for k in listed {
        let len = store
            .get(&k)
            .await
            .expect("get")
            .map_or(0, |b| b.len() as u64);
        let slot = if k.ends_with(".seg") {
            &mut t.segments
        } else if k.ends_with(".db") {
            &mut t.images
        } else if k.ends_with(".json") {
            &mut t.manifests
        } else {
            &mut t.other
        };
        slot.0 += 1;
        slot.1 += len;
        sizes.push((k, len));
    }
    (t, sizes)
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map_or(0, |m| m.len())
}

/// Writes `events` events with `callers` callers in flight, compaction every `segments`
/// segments, `retain` of 1 s; then tallies, plans retention, applies it and restores.
pub async fn measure(
    backend: Backend,
    dir: &Path,
    events: usize,
    callers: usize,
    segments: u64,
) -> StorageFigures {
    let s = stores(backend, dir, "storage").await;
    let tweak = |c: &mut leasehold_actors::RuntimeConfig| {
        c.snapshot_every = Some(Duration::from_millis(250));
        c.compaction.segments = segments;
        c.retain = Duration::from_secs(1);
    };
    let sweeps = Arc::new(Sweeps::default());
    let observer: Arc<dyn Observer> = sweeps.clone();
    let a = replica(&s, "writer", Durability::Shipped, |c| {
        tweak(c);
        c.observer = Some(observer);
    });
    let org = OrgId::new("storage").expect("org");
    let id = TenantId::new("big").expect("id");
    let key = LeaseKey::new(&org, &id);
    let t = a.open(&org, &id).await.expect("open");
    let done = Arc::new(AtomicUsize::new(0));
    let step = (events / 10).max(1);
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let (t, done) = (t.clone(), done.clone());
            actix::spawn(async move {
                for i in 0..events / callers {
                    insert(&t, format!("w-{c}-{i}")).await;
                    let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                    if n % step == 0 {
                        println!("    {n}/{events} events acknowledged");
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("writer");
    }
    let written = events / callers * callers;
    let path = leasehold::paths::ledger_path(&s.root.join("nodes").join("writer"), &org, &id);
    let wal = path.with_file_name("ledger.db-wal");
    let pages = t
        .run(|l| {
            l.query_row("PRAGMA page_count", [], |r| r.get::<_, i64>(0))
                .and_then(|n| {
                    Ok((
                        n,
                        l.query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0))?,
                    ))
                })
        })
        .await
        .expect("page count");
    let ledger = (
        u64::try_from(pages.0 * pages.1).unwrap_or(0),
        file_len(&path),
        file_len(&wal),
    );
    let (loaded, _) = tally(&*s.durable, &key).await;
    println!(
        "  right after writing: {} objects, {} bytes; idle for 1 s (4 compaction ticks) ...",
        loaded.objects(),
        loaded.bytes()
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    t.handoff().await.expect("handoff");
    let (after, sizes) = tally(&*s.durable, &key).await;
    let swept = (
        sweeps.sweeps.load(Ordering::Relaxed),
        sweeps.objects.load(Ordering::Relaxed),
        sweeps.failed.load(Ordering::Relaxed),
    );
    println!(
        "  the runtime's own sweeps until the handoff: {} sweeps deleted {} objects, {} failed",
        swept.0, swept.1, swept.2
    );
    println!(
        "  after 1 s idle and the handoff: {} objects, {} bytes; planning retention ...",
        after.objects(),
        after.bytes()
    );
    // Everything but the head is older than `retain` (1 s) once 1.1 s has passed.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let record = s.leases.read(&key).await.expect("read").expect("record");
    let mut images = Vec::new();
    for (k, _) in sizes.iter().filter(|(k, _)| k.ends_with(".json")) {
        let epoch = epoch_of(&key, k).expect("epoch");
        let seq: u64 = k
            .rsplit_once("snap-")
            .and_then(|(_, n)| n.strip_suffix(".json"))
            .and_then(|n| n.parse().ok())
            .expect("image number");
        let bytes = s.durable.get(k).await.expect("get").expect("manifest");
        let m = parse_manifest(&bytes, &key, epoch, seq).expect("manifest");
        images.push(ImageInfo {
            epoch,
            seq,
            log: m.log,
            created_at_ms: m.created_at_ms,
            beyond_log: m.beyond_log,
            base: m.base.map(|b| (b.epoch, b.seq)),
            damaged: false,
        });
    }
    let listed: Vec<String> = sizes.iter().map(|(k, _)| k.clone()).collect();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let doomed = retention_plan(&RetentionInput {
        key: &key,
        listed: &listed,
        images: &images,
        head: record.head.as_ref().map(|h| (h.epoch, h.seq)),
        tip: record.tip,
        holder_epoch: record.epoch,
        floor: record.floor,
        now_ms,
        retain_ms: 1_000,
    });
    let planned_bytes = sizes
        .iter()
        .filter(|(k, _)| doomed.contains(k))
        .map(|(_, n)| n)
        .sum();
    let unknown = doomed
        .iter()
        .filter(|k| segment_of(&key, k).is_none() && !k.contains("/snap-"))
        .count();
    assert_eq!(unknown, 0, "the plan chose keys outside the layout");
    s.durable.delete_keys(&doomed).await.expect("delete");
    let (retained, _) = tally(&*s.durable, &key).await;
    println!(
        "  retention plan applied: {} objects deleted, {} left; restoring on another replica ...",
        doomed.len(),
        retained.objects()
    );
    let b = replica(&s, "reader", Durability::Shipped, tweak);
    let t = b.open(&org, &id).await.expect("open after retention");
    let restored_events = t.run(|l| l.event_count()).await.expect("count");
    t.handoff().await.expect("handoff");
    StorageFigures {
        events: written,
        ledger,
        loaded,
        after,
        swept,
        planned: (doomed.len(), planned_bytes),
        retained,
        restored_events,
    }
}
