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

use std::collections::BTreeMap;

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

/// Of the old images on the chain, those a restore to a moment of the window may have to start
/// from besides the base: at each position at or above the base's (every position, without a
/// base) where images beyond their log lie, the newest of them. A tenure with a log that
/// restored such an image cut its first segment from it (the head it restored: heads only move
/// forward, so the newest there, unless a newer one's publish failed — that one is taken back by
/// the replica that put it), so the moments after that position start from it, not from the log
/// before it (docs/guarantees.md, point-in-time restore across modes).
fn switch_images<'a>(old: &[&'a ImageInfo], base_seq: Option<u64>) -> Vec<&'a ImageInfo> {
    let mut newest: BTreeMap<u64, &ImageInfo> = BTreeMap::new();
    for image in old.iter().filter(|i| i.beyond_log) {
        if base_seq.is_some_and(|b| log_seq(image) < b) {
            continue;
        }
        let slot = newest.entry(log_seq(image)).or_insert(image);
        if (image.epoch, image.seq) > (slot.epoch, slot.seq) {
            *slot = image;
        }
    }
    newest.into_values().collect()
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
    let base = old
        .iter()
        .filter(|i| !i.beyond_log)
        .max_by_key(|i| (log_seq(i), i.created_at_ms, i.epoch, i.seq))
        .copied();
    let switches = switch_images(&old, base.map(log_seq));
    let kept: Vec<&ImageInfo> = images
        .iter()
        .filter(|i| {
            is_head(i) || i.created_at_ms >= cutoff || base == Some(**i) || switches.contains(i)
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
