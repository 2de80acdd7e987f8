//! What retention may delete of a tenant with a change log: a pure function of the listing,
//! the images' manifests, the lease record and `now` (docs/guarantees.md, the storage bound).
//!
//! - The **head** image always stays, and every image younger than `retain`; of the images
//!   older than `retain` on the chain, the newest that holds the log's state at its position
//!   (not `beyond_log`) stays as the **base** of the window (a point-in-time restore to any
//!   moment of the window starts from it or a younger one), and so does, at each position at or
//!   above it where old images beyond their log lie, the newest of them: a later log may have
//!   continued from it (a mode change), and the moments after it start there. Every other image
//!   goes, with its manifest.
//! - A segment of the chain stays unless it lies below the base's log position: those are in
//!   every kept image, and no moment of the window lies before the base. The base's own segment
//!   stays, so that the next run still finds the base on the chain (it is judged by that
//!   segment) and keeps it: a plan applied again keeps what it kept. Without a base
//!   (every image younger than `retain`), every segment stays: a moment of the window may lie
//!   before the oldest image, and a point-in-time restore then starts from the log's beginning.
//! - A segment that is not on the chain goes: one of an older tenure above the tip (a zombie's
//!   late segment, which no tip can ever name), or one whose `seq` a later tenure shipped too.
//! - Nothing at or below the floor is chosen (the floor's sweep deletes those), nothing outside
//!   the layout, nothing of the live tenure above the tip (its segment in flight).

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::LeaseKey;
use crate::layout::{LogPos, epoch_of, image_key, manifest_key, segment_of};

/// What retention knows of one image: from its manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageInfo {
    /// Its epoch.
    pub epoch: u64,
    /// Its number in the epoch.
    pub seq: u64,
    /// The log position it holds (`None`: taken without a log, or before any segment).
    pub log: Option<LogPos>,
    /// Wall-clock milliseconds when it was published.
    pub created_at_ms: u64,
    /// It holds writes beyond `log` that no segment carries (never a point-in-time base).
    pub beyond_log: bool,
    /// The image it was built on, `(epoch, seq)` (its manifest's `base`: the head when it was
    /// taken), so the chain of bases from the head can be followed.
    pub base: Option<(u64, u64)>,
    /// Its manifest is damaged: read twice, it did not parse (and it is no manifest of a newer
    /// format). No restore can use its image; unless it is the head, both go.
    pub damaged: bool,
}

/// Everything retention decides from.
#[derive(Debug, Clone, Copy)]
pub struct RetentionInput<'a> {
    /// The tenant.
    pub key: &'a LeaseKey,
    /// Every key of the tenant in the durable store.
    pub listed: &'a [String],
    /// The images whose manifests were read (above the floor).
    pub images: &'a [ImageInfo],
    /// The head, `(epoch, seq)`.
    pub head: Option<(u64, u64)>,
    /// The log tip.
    pub tip: Option<LogPos>,
    /// The epoch of the lease record (the live or last tenure).
    pub holder_epoch: u64,
    /// The floor.
    pub floor: u64,
    /// Wall-clock milliseconds now.
    pub now_ms: u64,
    /// How long unneeded images and segments stay, in milliseconds.
    pub retain_ms: u64,
}

fn log_seq(image: &ImageInfo) -> u64 {
    image.log.map_or(0, |p| p.seq)
}

/// The images on the chain of bases from the head (the head, the image it was built on, and
/// so on, as far as the images read reach): every image that was once the head and that a later
/// head was built on.
fn head_chain(images: &[&ImageInfo], head: Option<(u64, u64)>) -> BTreeSet<(u64, u64)> {
    let mut chain = BTreeSet::new();
    let mut at = head;
    while let Some(id) = at {
        if !chain.insert(id) {
            break;
        }
        at = images
            .iter()
            .find(|i| (i.epoch, i.seq) == id)
            .and_then(|i| i.base)
            .filter(|b| *b < id);
    }
    chain
}

/// Of the old images on the chain, those a restore to a moment of the window may have to start
/// from besides the base: at each position at or above the base's (every position, without a
/// base) where images beyond their log lie, one of them. A tenure with a log that restored such
/// an image cut its first segment from it: the head it restored, so the image kept is the
/// newest there **on the head's chain of bases** (`chain`): a newer one whose head move never
/// landed (its tenure crashed between its manifest and its head, and no replica remembers it)
/// holds a state no log continued from. Only where no image there is on that chain (a manifest
/// on the way unreadable) is the newest kept. The moments after that position start from it,
/// not from the log before it (docs/guarantees.md, point-in-time restore across modes).
fn switch_images<'a>(
    old: &[&'a ImageInfo],
    base_seq: Option<u64>,
    chain: &BTreeSet<(u64, u64)>,
) -> Vec<&'a ImageInfo> {
    // Per position: (on the head's chain, epoch, seq) orders the candidates, the best last.
    let rank = |i: &ImageInfo| (chain.contains(&(i.epoch, i.seq)), i.epoch, i.seq);
    let mut best: BTreeMap<u64, &ImageInfo> = BTreeMap::new();
    for image in old.iter().filter(|i| i.beyond_log) {
        if base_seq.is_some_and(|b| log_seq(image) < b) {
            continue;
        }
        let slot = best.entry(log_seq(image)).or_insert(image);
        if rank(image) > rank(slot) {
            *slot = image;
        }
    }
    best.into_values().collect()
}

/// The keys retention deletes, sorted.
pub fn retention_plan(input: &RetentionInput<'_>) -> Vec<String> {
    let key = input.key;
    let cutoff = input.now_ms.saturating_sub(input.retain_ms);
    let images: Vec<&ImageInfo> = input
        .images
        .iter()
        .filter(|i| i.epoch > input.floor)
        .collect();
    let is_head = |i: &ImageInfo| input.head == Some((i.epoch, i.seq));
    let head = images.iter().find(|i| is_head(i)).copied();
    let head_seq = head.map_or(0, log_seq);
    let segments: Vec<LogPos> = input
        .listed
        .iter()
        .filter_map(|k| segment_of(key, k))
        .filter(|p| p.epoch > input.floor)
        .collect();
    let mut newest_at: BTreeMap<u64, u64> = BTreeMap::new();
    for p in &segments {
        let e = newest_at.entry(p.seq).or_insert(p.epoch);
        *e = (*e).max(p.epoch);
    }
    // The window's base must be an image a restore can start from: on the chain (its position
    // is the head's, or the segment of the chain at its seq is of its epoch), not beyond its
    // log, and not past the head's position (an image whose log never reached it is not).
    let on_chain = |i: &ImageInfo| match i.log {
        None => true,
        Some(p) => head.and_then(|h| h.log) == Some(p) || newest_at.get(&p.seq) == Some(&p.epoch),
    };
    let old: Vec<&ImageInfo> = images
        .iter()
        .filter(|i| i.created_at_ms < cutoff && log_seq(i) <= head_seq && on_chain(i))
        .copied()
        .collect();
    // The base is an image on the head's chain of bases whenever one is old enough: an image
    // off it is one no head built on — a publish whose head move never landed (images taken
    // without a log each hold their own state, and the log went on from the one that was the
    // head), or one whose head move landed unbeknown to its tenure, whose later images were
    // built on the head before it. Only when no old image is on that chain (every old image is
    // such an image, or a manifest on the way is unreadable) is the newest by position the
    // base: the replica's reconciliation keeps an image the head moved past and leaves it to
    // this plan (docs/guarantees.md, "Reconciling puts of unknown outcome"), so such a base
    // stays until an image on the chain is old enough to replace it.
    let chain = head_chain(&images, input.head);
    let base = old
        .iter()
        .filter(|i| !i.beyond_log)
        .max_by_key(|i| {
            let on_head_chain = chain.contains(&(i.epoch, i.seq));
            (on_head_chain, log_seq(i), i.created_at_ms, i.epoch, i.seq)
        })
        .copied();
    let switches = switch_images(&old, base.map(log_seq), &chain);
    let kept: Vec<&ImageInfo> = images
        .iter()
        .filter(|i| {
            is_head(i)
                || (!i.damaged && i.created_at_ms >= cutoff)
                || base == Some(**i)
                || switches.contains(i)
        })
        .copied()
        .collect();
    let mut doomed = Vec::new();
    for image in &images {
        if !kept.iter().any(|k| k == image) {
            doomed.push(image_key(key, image.epoch, image.seq));
            doomed.push(manifest_key(key, image.epoch, image.seq));
        }
    }
    // Segments below the window's base are in every kept image, and no moment of the window
    // lies before it. The segment at the base's own position stays: it is what shows the next
    // run that the base is on the chain (without it, that run would take the base for an image
    // off the chain and delete it), and a restore to a time just after the base reads its stamp.
    // Without a base (every image is younger than `retain`, or there is none) a moment of the
    // window may lie before the oldest image: every segment stays.
    let covered = base.map_or(0, log_seq).min(head_seq);
    let tip = input.tip.map_or(0, |t| t.seq);
    for p in segments {
        let zombie_above_tip = p.seq > tip && p.epoch < input.holder_epoch;
        let overshipped = p.seq <= tip && newest_at.get(&p.seq).is_some_and(|&e| e > p.epoch);
        let covered_by_images = p.seq < covered && p.seq <= tip;
        if zombie_above_tip || overshipped || covered_by_images {
            doomed.push(crate::layout::segment_key(key, p));
        }
    }
    doomed.retain(|k| epoch_of(key, k).is_some_and(|e| e > input.floor));
    doomed.sort();
    doomed.dedup();
    doomed
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod window;
