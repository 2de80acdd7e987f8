//! Point-in-time restore: the tenant's state as of a log position or a time within the
//! retention window, written to a new plain SQLite file (docs/guarantees.md, the change log).
//!
//! ```text
//!  tip ─prev─► … ─prev─► target ─prev─► … ─prev─► p   (p: the newest image's position on the
//!   headers only, to find the target │   kept       │   chain at or before the target)
//!                                     ▼             ▼
//!                     dest.pitr-restoring = image p + segments after p up to the target
//!                     ──hard link──► dest (never over an existing file)
//! ```
//!
//! The walk goes back from the tip by `prev`, never by a listing of segments, and never to an
//! epoch at or below the floor; a segment missing on the way is the end of the retention
//! window. Images are found by listing the tenant's manifests and keeping those whose `log`
//! position is on that chain at or before the target. Segments above the target are read for
//! their headers and dropped; those between the image and the target are held until applied
//! (bounded by compaction, like [`super::restore`]).
//!
//! **Across changes of durability mode.** An image of a tenure without a log (`beyond_log`)
//! holds writes no segment carries; a later log continues from it (its first segment was cut
//! from that image's state). So the image a walk starts from must hold the state the oldest
//! segment it keeps was cut from (its sum, `sum_before`): at the target itself, an image of
//! the log's state (never `beyond_log`); below a kept segment, any image at that position
//! whose pages sum to what the segment was cut from — an image beyond the log, right after a
//! change of mode. A walk never steps from a segment to one whose state it was not cut from: a
//! later log whose image beyond the log is gone is refused (`OutsideRetention`), one whose image
//! fails its checks is `Corrupt`: never served from the wrong state (docs/guarantees.md,
//! point-in-time restore).
//!
//! Bad input touches nothing: the destination is checked before any store call, the file is
//! built beside it under a temporary name and linked into place only when complete. The file
//! is the database alone: no `-wal` beside it.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{LogError, PageSums, Segment, apply};
use crate::durable::DurableStore;
use crate::ids::LeaseKey;
use crate::image::install::{sync_dir, with_suffix};
use crate::image::{Manifest, parse_manifest, seal, verify};
use crate::layout::{ImageRef, LogPos, epoch_of, image_key};

/// What to restore to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The state right after the segment at this position.
    Position(LogPos),
    /// The state after the last segment cut at or before this wall-clock time (milliseconds
    /// since the Unix epoch).
    Time {
        /// Milliseconds since the Unix epoch.
        unix_ms: u64,
    },
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Position(p) => write!(f, "position {p}"),
            Target::Time { unix_ms } => write!(f, "time {unix_ms} ms"),
        }
    }
}

/// What a point-in-time restore wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PitrReport {
    /// The log position the file holds.
    pub position: LogPos,
    /// The image it started from; `None` when it started from an empty database.
    pub image: Option<ImageRef>,
    /// How many segments were applied on top of the image.
    pub segments: usize,
    /// The file's size in bytes.
    pub size: u64,
    /// SHA-256 of the file, 64 lowercase hex characters.
    pub sha256: String,
}

/// Restores the state of `key` as of `target` into a new file at `dest` (a plain SQLite file):
/// the newest image at or before the target plus the segments up to it, within the retention
/// window. Reads the tenant's lease record from `leases` for its tip and floor (no record: no
/// log to restore), then does what [`restore_to_from`] does.
pub async fn restore_to(
    store: &dyn DurableStore,
    leases: &dyn crate::LeaseStore,
    key: &LeaseKey,
    target: Target,
    dest: &Path,
) -> Result<PitrReport, LogError> {
    check_dest(dest)?;
    let record = leases.read(key).await?;
    let (tip, floor) = record.map_or((None, 0), |r| (r.tip, r.floor));
    restore_to_from(store, key, tip, floor, target, dest).await
}

/// Restores the state of `key` as of `target` into a new file at `dest`, from the log whose
/// tip is `tip` above `floor`, as the tenant's lease record names them: read the record with
/// [`crate::LeaseStore::read`] and pass its `tip` and `floor` (no record: no log to restore).
///
/// Refused, with nothing written: a `dest` that exists, has a `-wal` or `-journal` beside it,
/// or whose directory does not exist ([`LogError::Destination`]); a target newer than the tip,
/// off the chain, older than the oldest retained segment or with no image at or before it
/// ([`LogError::OutsideRetention`]). A segment that fails its checks is [`LogError::Corrupt`] or
/// [`LogError::OutOfChain`], and the partial file is removed. Runs in a span `restore_to` with
/// the tenant's `key`, the tip's `epoch` and the `target`.
#[tracing::instrument(name = "restore_to", skip_all, fields(key = %key,
    epoch = tip.map(|t| t.epoch), target = %target))]
pub async fn restore_to_from(
    store: &dyn DurableStore,
    key: &LeaseKey,
    tip: Option<LogPos>,
    floor: u64,
    target: Target,
    dest: &Path,
) -> Result<PitrReport, LogError> {
    let tmp = check_dest(dest)?;
    let outside = |reason: String| LogError::OutsideRetention {
        target: target.to_string(),
        reason,
    };
    let Some(tip) = tip else {
        return Err(outside(format!("{key} has no log")));
    };
    if let Target::Position(p) = target
        && p.seq > tip.seq
    {
        return Err(outside(format!("it is newer than the tip {tip}")));
    }
    let images = list_images(store, key, floor).await?;
    let plan = walk(store, key, tip, floor, target, &images).await?;
    let built = tokio::task::spawn_blocking({
        let (dest, tmp) = (dest.to_path_buf(), tmp.clone());
        move || {
            let image = plan.image.as_ref().map(|(_, bytes)| bytes.as_slice());
            build(image, &plan.segments, &tmp, &dest).map(|file| (plan, file))
        }
    })
    .await
    .map_err(|e| LogError::Io(format!("the restore's blocking task failed: {e}")))?;
    if built.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    let (plan, file) = built?;
    Ok(PitrReport {
        position: plan.position,
        image: plan.image.as_ref().map(|(m, _)| m.image_ref()),
        segments: plan.segments.len(),
        size: file.size,
        sha256: file.sha256,
    })
}

/// Checks a restore's destination as [`restore_to`] does before it asks any store: refused
/// ([`LogError::Destination`]) when it exists, has a `-wal` or `-journal` beside it, or its
/// directory does not exist. Nothing is touched.
pub fn check_destination(dest: &Path) -> Result<(), LogError> {
    check_dest(dest).map(|_| ())
}

/// What [`restore_latest`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestReport {
    /// The log position the file holds: the tip, or the image's own without a tip; `None` for
    /// a tenant without a log.
    pub position: Option<LogPos>,
    /// The image it started from (the head, or a base when the head failed its checks).
    pub image: Option<ImageRef>,
    /// How many segments were applied on top of the image.
    pub segments: usize,
    /// The file's size in bytes.
    pub size: u64,
    /// SHA-256 of the file, 64 lowercase hex characters.
    pub sha256: String,
}

/// Restores the newest state of `key` — what an open would restore: its head image and the log
/// up to the tip ([`super::fetch_log`]), every piece checked — into a new plain SQLite file at
/// `dest`, with the refusals of [`restore_to_from`]: the destination is checked before any store
/// call, the file is built beside it and linked into place only when complete. A tenant with
/// no record, or with neither an image nor a log, is [`LogError::OutsideRetention`] (nothing to
/// restore), and nothing is written.
pub async fn restore_latest(
    store: &dyn DurableStore,
    leases: &dyn crate::LeaseStore,
    key: &LeaseKey,
    dest: &Path,
) -> Result<LatestReport, LogError> {
    let tmp = check_dest(dest)?;
    let record = leases.read(key).await?;
    let Some(record) = record.filter(|r| r.head.is_some() || r.tip.is_some()) else {
        return Err(LogError::OutsideRetention {
            target: "the latest state".into(),
            reason: format!("{key} has no image and no log"),
        });
    };
    let head = record.head.as_ref();
    let fetched = super::fetch_log(store, key, head, record.tip, record.floor).await?;
    let image = fetched.image.as_ref().map(|(m, _)| m.image_ref());
    let position = fetched
        .tip
        .or_else(|| fetched.image.as_ref().and_then(|(m, _)| m.log));
    let segments = fetched.segments.len();
    let built = tokio::task::spawn_blocking({
        let (dest, tmp) = (dest.to_path_buf(), tmp.clone());
        move || {
            let image = fetched.image.as_ref().map(|(_, bytes)| bytes.as_slice());
            build(image, &fetched.segments, &tmp, &dest)
        }
    })
    .await
    .map_err(|e| LogError::Io(format!("the restore's blocking task failed: {e}")))?;
    if built.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    let file = built?;
    Ok(LatestReport {
        position,
        image,
        segments,
        size: file.size,
        sha256: file.sha256,
    })
}

/// The temporary file beside `dest`, once `dest` is known to be free.
fn check_dest(dest: &Path) -> Result<PathBuf, LogError> {
    let refuse = |reason: String| LogError::Destination {
        path: dest.display().to_string(),
        reason,
    };
    let dir = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(refuse(format!("{} is not a directory", dir.display())));
    }
    let tmp = with_suffix(dest, ".pitr-restoring");
    for path in [
        dest.to_path_buf(),
        with_suffix(dest, "-wal"),
        with_suffix(dest, "-journal"),
        tmp.clone(),
    ] {
        if path.symlink_metadata().is_ok() {
            return Err(refuse(format!(
                "{} exists; a restore never overwrites a file",
                path.display()
            )));
        }
    }
    Ok(tmp)
}

/// What the walk decided: the image to start from and the segments to apply, oldest first.
#[derive(Debug)]
struct Plan {
    position: LogPos,
    image: Option<(Manifest, Vec<u8>)>,
    segments: Vec<Segment>,
}

/// The tenant's manifests above the floor, parsed; unreadable ones are left out (a restore
/// then starts from an older image, or is refused).
async fn list_images(
    store: &dyn DurableStore,
    key: &LeaseKey,
    floor: u64,
) -> Result<Vec<Manifest>, LogError> {
    let prefix = key.prefix();
    let mut manifests = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.list_page(&prefix, after.as_deref(), 1000).await?;
        for object in &page.keys {
            let Some((epoch, seq)) = manifest_of(key, object) else {
                continue;
            };
            if epoch <= floor {
                continue;
            }
            if let Some(bytes) = store.get(object).await?
                && let Ok(m) = parse_manifest(&bytes, key, epoch, seq)
            {
                manifests.push(m);
            }
        }
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    // Newest first: the first that fits is the one to use.
    manifests.sort_by_key(|m| std::cmp::Reverse((m.epoch, m.seq)));
    Ok(manifests)
}

/// `(epoch, seq)` of `<key>/e<epoch:08>/snap-<seq:06>.json`.
fn manifest_of(key: &LeaseKey, object: &str) -> Option<(u64, u64)> {
    let epoch = epoch_of(key, object)?;
    let name = object.rsplit_once('/')?.1;
    let digits = name.strip_prefix("snap-")?.strip_suffix(".json")?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((epoch, digits.parse().ok()?))
}

/// The state a restore needs an image at a position to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holds {
    /// The log's state at the position (the target itself): an image not beyond its log, whose
    /// pages sum to what the segment there left (`None`: that segment is not stored, or lies at or
    /// below the floor, and the manifest's word is taken). A manifest carries no checksum of
    /// its own: one digit of its `log` changed would otherwise serve another state as this one.
    Log(Option<u64>),
    /// The state whose sum is this: the one the segment after the position was cut from. After a
    /// change of durability mode that is an image beyond its log (a tenure without a log wrote
    /// it, and the next log continued from it), otherwise the log's state.
    Sum(u64),
}

/// What [`image_at`] found at a position.
enum AtPosition {
    /// The newest image that fetches, verifies and holds what was asked for.
    Image(Box<(Manifest, Vec<u8>)>),
    /// None; `damaged`: a manifest named one there that failed its checks (its bytes' SHA-256
    /// or size), so the state the walk needs exists but is damaged — `Corrupt`, not the end of
    /// the retention window.
    None { damaged: bool },
}

/// The newest image among `images` whose `log` is `at`, that fetches, verifies and holds what
/// `holds` asks for.
async fn image_at(
    store: &dyn DurableStore,
    key: &LeaseKey,
    images: &[Manifest],
    at: Option<LogPos>,
    holds: Holds,
) -> Result<AtPosition, LogError> {
    let log_state = matches!(holds, Holds::Log(_));
    let fits = |m: &&Manifest| m.log == at && (!log_state || !m.beyond_log);
    let want = match holds {
        Holds::Log(sum) => sum,
        Holds::Sum(sum) => Some(sum),
    };
    let mut damaged = false;
    for m in images.iter().filter(fits) {
        let ikey = image_key(key, m.epoch, m.seq);
        let Some(bytes) = store.get_sized(&ikey, m.size).await? else {
            continue;
        };
        if verify(m, &bytes).is_err() {
            damaged = true;
            continue;
        }
        if let Some(sum) = want
            && PageSums::of_bytes(&bytes).map(|s| s.total()) != Ok(sum)
        {
            // Another state at the same position is no damage after a change of mode; an image
            // of the log's state that is not that state is (its manifest names the wrong place).
            damaged |= log_state;
            continue;
        }
        return Ok(AtPosition::Image(Box::new((m.clone(), bytes))));
    }
    Ok(AtPosition::None { damaged })
}

/// The walk needs `what`, an image that failed its checks: the restore stops (`Corrupt`).
fn damaged_image(what: String) -> LogError {
    LogError::Corrupt {
        what,
        reason: "it fails its checks (SHA-256 or size against its manifest), and no other image holds that state".to_string(),
    }
}

/// Walks back from `tip` to the target, then on to the newest image at or before it.
async fn walk(
    store: &dyn DurableStore,
    key: &LeaseKey,
    tip: LogPos,
    floor: u64,
    target: Target,
    images: &[Manifest],
) -> Result<Plan, LogError> {
    let outside = |reason: String| LogError::OutsideRetention {
        target: target.to_string(),
        reason,
    };
    let mut found: Option<LogPos> = None;
    let mut kept: Vec<Segment> = Vec::new();
    let mut pos = tip;
    // The state the oldest kept segment was cut from: what an image below it must hold.
    let below = |kept: &[Segment]| kept.last().map(|s| s.header.sum_before);
    let image = loop {
        if found.is_none()
            && let Target::Position(p) = target
        {
            if pos == p {
                found = Some(pos);
            } else if pos.seq <= p.seq {
                return Err(outside(format!(
                    "the chain from the tip {tip} holds {pos} there, not {p}"
                )));
            }
        }
        // Whether an image the walk needed here failed its checks.
        let mut damaged = false;
        // The segment at `pos`, once fetched (never one at or below the floor).
        let mut here = None;
        if found.is_some() {
            let holds = match below(&kept) {
                Some(sum) => Holds::Sum(sum),
                // The target itself: the log's state, as the segment there left it.
                None if pos.epoch > floor => {
                    match super::restore::fetch_segment(store, key, pos).await {
                        Ok(seg) => {
                            let sum = seg.as_ref().map(|s| s.header.sum_after);
                            here = Some(seg);
                            Holds::Log(sum)
                        }
                        // Itself damaged, it is no witness: the manifest's word is taken, as
                        // before the check (the walk reads it again only if no image holds the
                        // target, and fails on it then).
                        Err(LogError::Corrupt { .. }) => Holds::Log(None),
                        Err(e) => return Err(e),
                    }
                }
                None => Holds::Log(None),
            };
            match image_at(store, key, images, Some(pos), holds).await? {
                AtPosition::Image(image) => break Some(*image),
                AtPosition::None { damaged: d } => damaged = d,
            }
        }
        if pos.epoch <= floor {
            return Err(outside(format!(
                "the chain reaches the floor {floor} at {pos} before an image at or before the target"
            )));
        }
        let seg = match here {
            Some(seg) => seg,
            None => super::restore::fetch_segment(store, key, pos).await?,
        };
        let Some(seg) = seg else {
            return Err(outside(format!(
                "{pos} is no longer retained, and no image at or before the target lies above it"
            )));
        };
        if found.is_none()
            && let Target::Time { unix_ms } = target
            && seg.header.created_at_ms <= unix_ms
        {
            found = Some(pos);
            let holds = Holds::Log(Some(seg.header.sum_after));
            if let AtPosition::Image(image) = image_at(store, key, images, Some(pos), holds).await?
            {
                break Some(*image);
            }
        }
        let prev = seg.header.prev;
        if found.is_some() {
            if let Some(sum) = below(&kept)
                && seg.header.sum_after != sum
            {
                // A change of durability mode: the later log continued from an image a tenure
                // without a log took here, not from this segment's state.
                if damaged {
                    return Err(damaged_image(format!("the image beyond the log at {pos}")));
                }
                return Err(outside(format!(
                    "the segment after {pos} continues from an image beyond the log at {pos} that is not retained"
                )));
            }
            kept.push(seg);
        }
        match prev {
            Some(q) => pos = q,
            None if found.is_none() => {
                return Err(outside(format!(
                    "it lies before the first segment of the log from the tip {tip}"
                )));
            }
            // The start of the log: an image taken without a log, or an empty database.
            None => {
                let holds = below(&kept).map_or(Holds::Log(None), Holds::Sum);
                match image_at(store, key, images, None, holds).await? {
                    AtPosition::Image(image) => break Some(*image),
                    AtPosition::None { .. } if below(&kept) == Some(PageSums::empty().total()) => {
                        break None;
                    }
                    AtPosition::None { damaged: true } => {
                        return Err(damaged_image(
                            "the image the log's first segment continues from".to_string(),
                        ));
                    }
                    AtPosition::None { damaged: false } => {
                        return Err(outside(
                            "the log's first segment continues from an image that is not retained"
                                .to_string(),
                        ));
                    }
                }
            }
        }
    };
    let position = found.ok_or_else(|| outside("the target was not found".to_string()))?;
    kept.reverse();
    Ok(Plan {
        position,
        image,
        segments: kept,
    })
}

/// Writes `image` (none: an empty database) into `tmp` (0600), applies `segments`, fsyncs, and
/// links it to `dest`.
fn build(
    image: Option<&[u8]>,
    segments: &[Segment],
    tmp: &Path,
    dest: &Path,
) -> Result<crate::image::ImageFile, LogError> {
    let mut file =
        crate::private::create_new_file(tmp).map_err(|e| LogError::io("create", tmp, &e))?;
    if let Some(bytes) = image {
        file.write_all(bytes)
            .map_err(|e| LogError::io("write", tmp, &e))?;
    }
    drop(file);
    let mut sums = super::restore::sums_of(tmp)?;
    for seg in segments {
        apply(tmp, &mut sums, seg)?;
    }
    let sealed = seal(tmp)?;
    std::fs::hard_link(tmp, dest).map_err(|e| LogError::Destination {
        path: dest.display().to_string(),
        reason: format!("linking the restored file into place: {e}"),
    })?;
    std::fs::remove_file(tmp).map_err(|e| LogError::io("remove", tmp, &e))?;
    if let Some(dir) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(dir)?;
    }
    Ok(crate::image::ImageFile {
        path: dest.to_path_buf(),
        ..sealed
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{OrgId, TenantId};

    #[test]
    fn only_manifests_of_the_layout_are_images() {
        let key = LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t1").unwrap());
        assert_eq!(
            manifest_of(&key, "acme/t1/e00000003/snap-000002.json"),
            Some((3, 2))
        );
        assert_eq!(manifest_of(&key, "acme/t1/e00000003/snap-000002.db"), None);
        assert_eq!(
            manifest_of(&key, "acme/t1/e00000003/log-000000000002.seg"),
            None
        );
        assert_eq!(
            manifest_of(&key, "acme/t2/e00000003/snap-000002.json"),
            None
        );
        assert_eq!(manifest_of(&key, "acme/t1/e00000003/snap-2.json"), None);
    }

    #[test]
    fn a_destination_that_exists_or_has_a_wal_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out.db");
        assert_eq!(
            check_dest(&dest).unwrap(),
            dir.path().join("out.db.pitr-restoring")
        );
        std::fs::write(dir.path().join("out.db-wal"), b"x").unwrap();
        assert!(matches!(
            check_dest(&dest),
            Err(LogError::Destination { .. })
        ));
        std::fs::remove_file(dir.path().join("out.db-wal")).unwrap();
        std::fs::write(&dest, b"x").unwrap();
        assert!(matches!(
            check_dest(&dest),
            Err(LogError::Destination { .. })
        ));
        let nowhere = dir.path().join("missing").join("out.db");
        assert!(matches!(
            check_dest(&nowhere),
            Err(LogError::Destination { .. })
        ));
    }
}
