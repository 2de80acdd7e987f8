//! Sweeps: deleting what a superseded owner uploaded into a dead epoch (at or below the floor).
//!
//! The decision of what may go is [`crate::plan::sweepable_epochs`]; this module carries it out
//! against a durable store. The runtime sweeps a tenant beside its open; the operator command
//! (`leasehold sweep`) sweeps every tenant of a store, also those never opened again.
//!
//! A tenant gains two objects per snapshot for life, so a sweep never lists it in one call: it
//! goes page by page ([`SWEEP_PAGE_KEYS`] keys, each page one call under its own deadline) and
//! deletes each page's dead objects before it asks for the next. A sweep cut short by a deadline
//! or an outage keeps what it deleted, and the next one goes on from fewer objects
//! (docs/guarantees.md, promise 5, "progress of a sweep").

use crate::durable::{DurableStore, StoreError};
use crate::ids::LeaseKey;
use crate::lease::{LeaseError, LeaseStore};
use crate::plan::{dead_keys, sweepable_epochs};

/// How many keys one page of a sweep's listing holds.
pub const SWEEP_PAGE_KEYS: usize = 500;

/// Deletes every epoch of `key` at or below `floor`, page by page ([`SWEEP_PAGE_KEYS`]).
/// Returns how many objects went.
pub async fn sweep_dead_epochs(
    store: &dyn DurableStore,
    key: &LeaseKey,
    floor: u64,
) -> Result<usize, StoreError> {
    sweep_dead_epochs_paged(store, key, floor, SWEEP_PAGE_KEYS).await
}

/// [`sweep_dead_epochs`] with pages of `page_keys` keys. Each page's dead objects are deleted
/// (one `delete_keys` call) before the next page is listed; once the listing is done, each dead
/// epoch seen is deleted as a prefix, which also takes what no listing shows (a foreign object
/// below the epoch). An error ends the sweep; what it deleted stays deleted.
pub async fn sweep_dead_epochs_paged(
    store: &dyn DurableStore,
    key: &LeaseKey,
    floor: u64,
    page_keys: usize,
) -> Result<usize, StoreError> {
    if floor == 0 {
        return Ok(0);
    }
    let prefix = key.prefix();
    let (mut deleted, mut dead_epochs, mut after) = (0, Vec::new(), None::<String>);
    loop {
        let page = store
            .list_page(&prefix, after.as_deref(), page_keys)
            .await?;
        for epoch in sweepable_epochs(key, &page.keys, floor) {
            if !dead_epochs.contains(&epoch) {
                dead_epochs.push(epoch);
            }
        }
        let dead: Vec<String> = dead_keys(key, &page.keys, floor)
            .into_iter()
            .cloned()
            .collect();
        if !dead.is_empty() {
            store.delete_keys(&dead).await?;
            deleted += dead.len();
        }
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    for epoch in dead_epochs {
        deleted += store.delete_prefix(&epoch).await?;
    }
    Ok(deleted)
}

/// How many times a forget's erasure asks its sweep again before it reports the erasure
/// incomplete (what is left then goes at the pending erasure's re-sweep: docs/guarantees.md,
/// "the erasure bound").
pub const ERASE_TRIES: u32 = 3;

/// A forget's erasure: deletes every epoch of `key` at or below `floor` (the floor
/// `mark_forgotten` raised), asking again up to [`ERASE_TRIES`] times when a sweep fails (a
/// sweep keeps what it deleted). The runtime's forget and `leasehold forget` both erase this
/// way. Returns how many objects went.
pub async fn erase_floor(
    store: &dyn DurableStore,
    key: &LeaseKey,
    floor: u64,
) -> Result<usize, StoreError> {
    let mut tries = 1;
    loop {
        match sweep_dead_epochs(store, key, floor).await {
            Ok(n) => return Ok(n),
            Err(e) if tries >= ERASE_TRIES => return Err(e),
            Err(e) => {
                tries += 1;
                tracing::debug!(%key, error = %e, "a forget's sweep failed; asking again");
            }
        }
    }
}

/// Finishes a forget's pending erasure once it is due (every put that could land has landed:
/// [`LeaseStore::erasures_due`]): sweeps `key` at `floor` once more, then marks the erasure
/// done ([`LeaseStore::erasure_done`]). A sweep that fails leaves it pending. Any replica's
/// periodic pass and `leasehold sweep` finish erasures this way. Returns how many objects went.
pub async fn finish_erasure(
    store: &dyn DurableStore,
    leases: &dyn LeaseStore,
    key: &LeaseKey,
    floor: u64,
) -> Result<usize, LeaseError> {
    let objects = sweep_dead_epochs(store, key, floor).await?;
    leases.erasure_done(key, floor).await?;
    Ok(objects)
}

/// Applies retention to the tenant `key` whose lease record is `record` (docs/guarantees.md,
/// the storage bound): lists the tenant, reads the manifests of its images above the floor,
/// and deletes what [`crate::plan::retention::retention_plan`] chooses, in batches of
/// [`SWEEP_PAGE_KEYS`]. `now_ms` is wall-clock milliseconds since the Unix epoch (manifests and
/// segments carry wall-clock times). A manifest that is gone since the listing or of a newer
/// format counts as an image to keep (its image is never chosen); one that does not parse,
/// read twice, is damaged: it and its image go unless it is the head's. Returns how many
/// objects went.
pub async fn sweep_retention(
    store: &dyn DurableStore,
    key: &LeaseKey,
    record: &crate::lease::LeaseRecord,
    now_ms: u64,
    retain: std::time::Duration,
) -> Result<usize, StoreError> {
    use crate::plan::retention::{ImageInfo, RetentionInput, retention_plan};
    let prefix = key.prefix();
    let (mut listed, mut after) = (Vec::new(), None::<String>);
    loop {
        let page = store
            .list_page(&prefix, after.as_deref(), SWEEP_PAGE_KEYS)
            .await?;
        listed.extend(page.keys);
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let mut images = Vec::new();
    let listed_set: std::collections::BTreeSet<&str> = listed.iter().map(String::as_str).collect();
    for object in &listed {
        let Some((epoch, seq)) = crate::layout::manifest_of(key, object) else {
            continue;
        };
        if epoch <= record.floor {
            continue;
        }
        // A manifest whose image is not listed (a half-finished delete, or a manifest that
        // landed after its lone image was taken back) describes no restorable image: it is
        // never a base, and the orphan look deletes it (docs/guarantees.md, "Reconciling puts
        // of unknown outcome").
        let image = crate::layout::image_key(key, epoch, seq);
        if !listed_set.contains(image.as_str()) {
            continue;
        }
        images.push(match read_manifest(store, key, object, epoch, seq).await? {
            ManifestRead::Parsed(m) => ImageInfo {
                epoch,
                seq,
                log: m.log,
                created_at_ms: m.created_at_ms,
                beyond_log: m.beyond_log,
                base: m.base.map(|b| (b.epoch, b.seq)),
                damaged: false,
            },
            // Unreadable: as if published now, so it is never chosen; a damaged one goes
            // unless it is the head (`ImageInfo::damaged`), one gone meanwhile or of a newer
            // format stays.
            other => ImageInfo {
                epoch,
                seq,
                log: None,
                created_at_ms: now_ms,
                beyond_log: true,
                base: None,
                damaged: matches!(other, ManifestRead::Damaged),
            },
        });
    }
    let doomed = retention_plan(&RetentionInput {
        key,
        listed: &listed,
        images: &images,
        head: record.head.as_ref().map(|h| (h.epoch, h.seq)),
        tip: record.tip,
        holder_epoch: record.epoch,
        floor: record.floor,
        now_ms,
        retain_ms: crate::clock::duration_ms(retain),
    });
    for chunk in doomed.chunks(SWEEP_PAGE_KEYS) {
        store.delete_keys(chunk).await?;
    }
    Ok(doomed.len())
}

/// What retention's read of one manifest found.
enum ManifestRead {
    /// It parsed and checked.
    Parsed(crate::image::Manifest),
    /// It did not parse, twice (a read damaged on its way is read again): no restore can use
    /// it or its image.
    Damaged,
    /// Gone since the listing, or written by a newer build (its format version is above this
    /// build's: a replica of that build reads it): kept.
    Kept,
}

/// Reads and classifies the manifest at `object`, `manifest_key(key, epoch, seq)`.
async fn read_manifest(
    store: &dyn DurableStore,
    key: &LeaseKey,
    object: &str,
    epoch: u64,
    seq: u64,
) -> Result<ManifestRead, StoreError> {
    use crate::image::restore::{ManifestBytes, get_manifest_bytes};
    for _ in 0..2 {
        let bytes = match get_manifest_bytes(store, object).await? {
            ManifestBytes::Bytes(bytes) => bytes,
            ManifestBytes::Missing => return Ok(ManifestRead::Kept),
            // Larger than any manifest: damage, and not downloaded.
            ManifestBytes::Oversized(_) => continue,
        };
        match crate::image::parse_manifest(&bytes, key, epoch, seq) {
            Ok(m) => return Ok(ManifestRead::Parsed(m)),
            Err(_) if crate::image::is_newer_format(&bytes) => return Ok(ManifestRead::Kept),
            Err(_) => {}
        }
    }
    Ok(ManifestRead::Damaged)
}

/// What a sweep of a whole store found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Tenants whose objects were looked at.
    pub tenants: usize,
    /// Tenants that had dead epochs and were swept.
    pub swept_tenants: usize,
    /// Objects deleted.
    pub objects: usize,
    /// Keys in the store that are not laid out as `<org>/<tenant>/…`; never touched.
    pub foreign_keys: usize,
}

/// The tenant an object key belongs to, if it is laid out as `<org>/<tenant>/…`.
fn tenant_of(object: &str) -> Option<LeaseKey> {
    let mut parts = object.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(org), Some(tenant), Some(_)) => LeaseKey::parse(&format!("{org}/{tenant}")).ok(),
        _ => None,
    }
}

/// Every tenant with an object in `store`, found page by page; a tenant's pages after its first
/// key are skipped (`~` sorts after every key character). Also counts the foreign keys seen.
pub async fn tenants_of_store(
    store: &dyn DurableStore,
) -> Result<(Vec<LeaseKey>, usize), StoreError> {
    let (mut keys, mut foreign, mut after) = (Vec::<LeaseKey>::new(), 0, None::<String>);
    loop {
        let page = store
            .list_page("", after.as_deref(), SWEEP_PAGE_KEYS)
            .await?;
        let mut skip_to = None;
        for object in &page.keys {
            match tenant_of(object) {
                Some(k) => {
                    skip_to = Some(format!("{}~", k.prefix()));
                    if keys.last() != Some(&k) {
                        keys.push(k);
                    }
                }
                None => foreign += 1,
            }
        }
        after = match (page.next, skip_to) {
            (Some(next), Some(skip)) => Some(next.max(skip)),
            (next, _) => next,
        };
        if after.is_none() {
            return Ok((keys, foreign));
        }
    }
}

/// Sweeps every tenant found in `store`: reads each tenant's floor from `leases` and deletes its
/// epochs at or below it. `progress(done, total)` is called after each tenant.
pub async fn sweep_store(
    store: &dyn DurableStore,
    leases: &dyn LeaseStore,
    mut progress: impl FnMut(usize, usize),
) -> Result<SweepReport, LeaseError> {
    let (keys, foreign_keys) = tenants_of_store(store).await?;
    let mut report = SweepReport {
        foreign_keys,
        ..SweepReport::default()
    };
    let total = keys.len();
    for (done, key) in keys.iter().enumerate() {
        report.tenants += 1;
        let floor = leases.read(key).await?.map_or(0, |r| r.floor);
        let n = sweep_dead_epochs(store, key, floor).await?;
        if n > 0 {
            report.swept_tenants += 1;
            report.objects += n;
        }
        progress(done + 1, total);
    }
    Ok(report)
}
