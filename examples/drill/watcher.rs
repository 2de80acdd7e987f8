//! The store watcher: what the stores themselves say, read beside the runtime and never through
//! it. Every [`POLL`] it reads each tenant's lease record (the head and the log tip) from the
//! lease store; for every head it has not seen it fetches the manifest and the image from the
//! durable store, verifies them and reads the idempotency keys inside, then walks the manifest's
//! `base` chain back to an image it knows (so a head that moved twice between two polls is not
//! missed). With a change log (`--durability shipped|async`), at most every [`TIP_EVERY`] per
//! tenant it restores the head image plus the segments up to a tip it has not read
//! (`leasehold::log::restore_log`, every checksum checked) into a scratch file and reads the keys
//! there: what the log held at that tip.
//!
//! ```text
//!  every 100 ms, per tenant: lease store ─ read ─> head (epoch, seq), tip (epoch, seq), floor
//!      new head ─> durable store: manifest + image ─ verify ─> keys ─> covered[tenant][key]
//!                  └─ base ─> … until a known image (or one already swept)
//!      new tip (≤ 1/s) ─> restore head + segments ≤ tip ─> keys ─> covered[tenant][key]
//!      head older than the last one seen ─> flag head-moved-back (docs/guarantees.md, promise 3)
//!      tip below the last one seen, same floor ─> flag tip-moved-back (the change log's order)
//! ```
//!
//! What it gathers decides which published image covers an acknowledged write (the checker's
//! `lost-after-publish` and tail rules); the runtime's `snapshot_published` events are never
//! used for that: they can be dropped, cut by SIGKILL, or missing when a publish is reported
//! failed though its head moved. What the watcher cannot see: an image that was head only
//! between two polls and whose successor's manifest is gone before the next poll (a sweep of
//! its epoch); the keys of such an image reach the checker through the next image of its
//! tenure, which holds them too (a ledger only grows within a tenure).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leasehold::LeaseKey;
use leasehold::image::{parse_manifest, verify};
use leasehold::layout::LogPos;
use leasehold::layout::{ImageRef, image_key, manifest_key};
use leasehold::lease::LeaseRecord;

use crate::backend::Stores;
use crate::history::History;
use crate::history::acts::{TipSeen, wall_ms};
use crate::protocol::{self, now_ms};

/// How often every head is read.
pub const POLL: Duration = Duration::from_millis(100);
/// How often, at most, the log of one tenant is restored at a new tip.
pub const TIP_EVERY: Duration = Duration::from_secs(1);
/// How many images of one chain are fetched per poll at most (the rest on the next poll).
const CHAIN_STEPS: usize = 16;

/// The watcher's state of one tenant.
#[derive(Default)]
struct TenantView {
    /// The last head read, `(epoch, seq)`.
    last: Option<(u64, u64)>,
    /// Images whose keys were read (or found swept), `(epoch, seq)`.
    known: std::collections::HashSet<(u64, u64)>,
    /// The last tip read, with the floor it was read under.
    last_tip: Option<(u64, LogPos)>,
    /// The last tip whose log was restored and read, and when.
    tip_read: Option<(LogPos, u64)>,
    /// The head whose manifest was read: `(epoch, seq)`, its log position's seq, its size.
    head: Option<((u64, u64), u64, u64)>,
    /// Whether compaction is due, and since when (`crate::compaction`).
    due: crate::compaction::DueTracker,
}

/// Runs until `stop` is set; every finding goes to the history. `compact`: the run's compaction
/// count, `None` when `image-overdue` is not judged.
pub async fn run(
    stores: Stores,
    history: Arc<History>,
    tenants: u32,
    compact: Option<u64>,
    scratch: PathBuf,
    stop: Arc<AtomicBool>,
) {
    let mut views: HashMap<u32, TenantView> = HashMap::new();
    if let Err(e) = std::fs::create_dir_all(&scratch) {
        history.problem(format!("the store watcher has no scratch directory: {e}"));
        return;
    }
    while !stop.load(Ordering::SeqCst) {
        for tenant in 0..tenants {
            let view = views.entry(tenant).or_default();
            if let Err(e) = poll(&stores, &history, tenant, compact, view, &scratch).await {
                history.note(Some(tenant), format!("store watcher: {e}"));
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Reads the head of `tenant` once and everything new behind it.
async fn poll(
    stores: &Stores,
    history: &History,
    tenant: u32,
    compact: Option<u64>,
    view: &mut TenantView,
    scratch: &std::path::Path,
) -> Result<(), String> {
    let key = protocol::lease_key(tenant).map_err(|e| e.to_string())?;
    let (start, wall_start) = (now_ms(), wall_ms());
    let record = stores
        .leases
        .read(&key)
        .await
        .map_err(|e| format!("read: {e}"))?;
    let seen_at = now_ms();
    let Some(record) = record else {
        return Ok(());
    };
    if let Some(tip) = record.tip {
        history.tip_seen(
            tenant,
            TipSeen {
                floor: record.floor,
                tip,
                start,
                done: seen_at,
                wall_start,
            },
        );
        watch_tip(
            stores, history, tenant, view, &record, tip, seen_at, scratch,
        )
        .await?;
    }
    let Some(head) = record.head.clone() else {
        judge_due(history, tenant, compact, view, &record, seen_at);
        return Ok(());
    };
    let now = (head.epoch, head.seq);
    if let Some(last) = view.last
        && now < last
    {
        history.flag(
            "head-moved-back",
            Some(tenant),
            format!(
                "the lease store's head of t{tenant} went from e{}/{} back to e{}/{}",
                last.0, last.1, now.0, now.1
            ),
        );
    }
    view.last = Some(now);
    let mut next = Some(head);
    for _ in 0..CHAIN_STEPS {
        let Some(image) = next.take() else { break };
        let at = (image.epoch, image.seq);
        if !view.known.insert(at) {
            break;
        }
        match read_image(stores, history, tenant, &key, &image, seen_at, scratch).await {
            Ok(Some(read)) => {
                if at == now {
                    view.head = Some((at, read.log.map_or(0, |p| p.seq), read.size));
                }
                next = read.base;
            }
            Ok(None) => break,
            Err(e) => {
                view.known.remove(&at); // read again on the next poll
                return Err(e);
            }
        }
    }
    judge_due(history, tenant, compact, view, &record, seen_at);
    Ok(())
}

/// Follows whether compaction is due for `tenant` (`crate::compaction`) and records an image
/// found overdue.
fn judge_due(
    history: &History,
    tenant: u32,
    compact: Option<u64>,
    view: &mut TenantView,
    record: &LeaseRecord,
    now: u64,
) {
    let (Some(tip), Some(compact)) = (record.tip, compact) else {
        return;
    };
    let (head_log, head_bytes) = match (&record.head, view.head) {
        (None, _) => (0, 0),
        (Some(h), Some((at, log, bytes))) if (h.epoch, h.seq) == at => (log, bytes),
        _ => return, // a head whose manifest was not read yet
    };
    if let Some(overdue) = view
        .due
        .observe(tenant, now, tip, head_log, head_bytes, compact)
    {
        history.overdue(overdue);
    }
}

/// What the store watcher learned from one image's manifest.
struct ImageRead {
    /// The image it was built on.
    base: Option<ImageRef>,
    /// The log position it holds.
    log: Option<LogPos>,
    /// Its size in bytes.
    size: u64,
}

/// Flags a tip below the last one read under the same floor, and restores the log at a new tip
/// (at most every [`TIP_EVERY`]) to record the keys it holds.
#[allow(clippy::too_many_arguments)]
async fn watch_tip(
    stores: &Stores,
    history: &History,
    tenant: u32,
    view: &mut TenantView,
    record: &LeaseRecord,
    tip: LogPos,
    seen_at: u64,
    scratch: &std::path::Path,
) -> Result<(), String> {
    if let Some((floor, last)) = view.last_tip
        && floor == record.floor
        && (tip.seq < last.seq || tip.epoch < last.epoch)
    {
        history.flag(
            "tip-moved-back",
            Some(tenant),
            format!("the lease store's log tip of t{tenant} went from {last} back to {tip}"),
        );
    }
    view.last_tip = Some((record.floor, tip));
    let due = view.tip_read.is_none_or(|(read, at)| {
        read != tip && seen_at >= at + leasehold::clock::duration_ms(TIP_EVERY)
    });
    if !due {
        return Ok(());
    }
    let key = protocol::lease_key(tenant).map_err(|e| e.to_string())?;
    let path = scratch.join(format!("t{tenant}-tip.db"));
    let restored = leasehold::log::restore_log(
        stores.durable.as_ref(),
        &key,
        record.head.as_ref(),
        Some(tip),
        record.floor,
        &path,
    )
    .await;
    let keys = match restored {
        Ok(_) => keys_of_file(&path),
        // The tip moved on and a compaction swept what this one needed: read a later one.
        Err(e) => Err(format!("restoring the log at tip {tip}: {e}")),
    };
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    view.tip_read = Some((tip, seen_at));
    let cover = Cover {
        kind: CoverKind::Log,
        epoch: tip.epoch,
        seq: tip.seq,
        seen_at,
    };
    history.covered(tenant, cover, keys?);
    Ok(())
}

/// Fetches one image, records the keys it covers, returns what its manifest says; `None` when
/// it was swept.
async fn read_image(
    stores: &Stores,
    history: &History,
    tenant: u32,
    key: &LeaseKey,
    image: &ImageRef,
    seen_at: u64,
    scratch: &std::path::Path,
) -> Result<Option<ImageRead>, String> {
    let (epoch, seq) = (image.epoch, image.seq);
    let manifest = stores
        .durable
        .get(&manifest_key(key, epoch, seq))
        .await
        .map_err(|e| format!("manifest e{epoch}/{seq}: {e}"))?;
    let Some(manifest) = manifest else {
        return Ok(None); // swept: its keys are in a later image of the chain
    };
    let manifest =
        parse_manifest(&manifest, key, epoch, seq).map_err(|e| format!("manifest: {e}"))?;
    let bytes = stores
        .durable
        .get(&image_key(key, epoch, seq))
        .await
        .map_err(|e| format!("image e{epoch}/{seq}: {e}"))?;
    let Some(bytes) = bytes else {
        return Ok(None);
    };
    verify(&manifest, &bytes).map_err(|e| format!("image e{epoch}/{seq}: {e}"))?;
    let path = scratch.join(format!("t{tenant}-e{epoch}-{seq}.db"));
    let keys = std::fs::write(&path, &bytes)
        .map_err(|e| format!("scratch write: {e}"))
        .and_then(|()| keys_of_file(&path));
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let cover = Cover {
        kind: CoverKind::Image,
        epoch,
        seq,
        seen_at,
    };
    history.covered(tenant, cover, keys?);
    Ok(Some(ImageRead {
        base: manifest.base,
        log: manifest.log,
        size: manifest.size,
    }))
}

/// The idempotency keys of the ledger at `path` (a scratch copy).
pub fn keys_of_file(path: &std::path::Path) -> Result<Vec<String>, String> {
    // A scratch copy, opened read-write: a WAL-mode image cannot be opened read-only alone.
    let db = rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
    let mut stmt = db
        .prepare("SELECT idem_key FROM events WHERE idem_key IS NOT NULL")
        .map_err(|e| e.to_string())?;
    let rows = stmt
        .query_map([], |row| row.get::<_, String>(0))
        .map_err(|e| e.to_string())?;
    rows.collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())
}

/// The first durable state the store watcher found holding a write: a published image, or the
/// change log up to a tip the lease store confirmed.
#[derive(Debug, Clone, Copy)]
pub struct Cover {
    /// An image (its epoch and number) or a log tip (its epoch and segment number).
    pub kind: CoverKind,
    /// Its tenure.
    pub epoch: u64,
    /// Its number in that tenure (an image), or in the tenant's log (a tip).
    pub seq: u64,
    /// Driver time the watcher read the head or tip that led to it.
    pub seen_at: u64,
}

/// What held a write, as the store watcher read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoverKind {
    /// A published image (the head, or an image of its `base` chain).
    Image,
    /// The head image plus every segment up to the tip.
    Log,
}

impl std::fmt::Display for Cover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, read) = match self.kind {
            CoverKind::Image => ("the published image", "head"),
            CoverKind::Log => ("the change log up to tip", "tip"),
        };
        write!(
            f,
            "{what} e{}/{} ({read} read at {})",
            self.epoch, self.seq, self.seen_at
        )
    }
}
