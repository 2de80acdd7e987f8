//! What retention may delete of a tenant with a change log: a pure function of the listing,
//! the images' manifests, the lease record and `now` (docs/guarantees.md, the storage bound).
//!
//! - The **head** image always stays, and every image younger than `retain`; of the images
//!   older than `retain`, the newest (the head, if it is one of them) stays as the **base** of
//!   the window (a point-in-time restore to any moment of the window starts from it or a younger
//!   one). Every other image goes, with its manifest.
//! - A segment of the chain stays unless it lies at or below the base's log position: those are
//!   in every kept image, and no moment of the window lies before the base. Without a base
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
    let base = images
        .iter()
        .filter(|i| i.created_at_ms < cutoff && !i.beyond_log && log_seq(i) <= head_seq)
        .filter(|i| on_chain(i))
        .max_by_key(|i| (log_seq(i), i.created_at_ms, i.epoch, i.seq))
        .copied();
    let kept: Vec<&ImageInfo> = images
        .iter()
        .filter(|i| is_head(i) || i.created_at_ms >= cutoff || base == Some(**i))
        .copied()
        .collect();
    let mut doomed = Vec::new();
    for image in &images {
        if !kept.iter().any(|k| k == image) {
            doomed.push(image_key(key, image.epoch, image.seq));
            doomed.push(manifest_key(key, image.epoch, image.seq));
        }
    }
    // Segments at or below the window's base are in every kept image, and no moment of the
    // window lies before it. Without a base (every image is younger than `retain`, or there is
    // none) a moment of the window may lie before the oldest image: every segment stays.
    let covered = base.map_or(0, log_seq).min(head_seq);
    let tip = input.tip.map_or(0, |t| t.seq);
    for p in segments {
        let zombie_above_tip = p.seq > tip && p.epoch < input.holder_epoch;
        let overshipped = p.seq <= tip && newest_at.get(&p.seq).is_some_and(|&e| e > p.epoch);
        let covered_by_images = p.seq <= covered && p.seq <= tip;
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
mod tests {
    use super::*;
    use crate::ids::{OrgId, TenantId};
    use crate::layout::segment_key;

    fn key() -> LeaseKey {
        LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t1").unwrap())
    }

    fn pos(epoch: u64, seq: u64) -> LogPos {
        LogPos { epoch, seq }
    }

    fn image(epoch: u64, seq: u64, log: u64, created: u64) -> ImageInfo {
        ImageInfo {
            epoch,
            seq,
            log: (log > 0).then_some(pos(epoch, log)),
            created_at_ms: created,
            beyond_log: false,
        }
    }

    fn listing(images: &[ImageInfo], segments: &[LogPos]) -> Vec<String> {
        let mut keys: Vec<String> = images
            .iter()
            .flat_map(|i| {
                [
                    image_key(&key(), i.epoch, i.seq),
                    manifest_key(&key(), i.epoch, i.seq),
                ]
            })
            .collect();
        keys.extend(segments.iter().map(|p| segment_key(&key(), *p)));
        keys.push("acme/t1/stray.json".into());
        keys
    }

    const HOUR: u64 = 3_600_000;

    /// The plan for the tenant holding `images` and `segments` (listed with a stray key),
    /// with `head`, `tip`, `(holder_epoch, floor)` and `(now_ms, retain_ms)`.
    fn plan_of(
        images: &[ImageInfo],
        segments: &[LogPos],
        head: Option<(u64, u64)>,
        tip: Option<LogPos>,
        (holder_epoch, floor): (u64, u64),
        (now_ms, retain_ms): (u64, u64),
    ) -> Vec<String> {
        let listed = listing(images, segments);
        retention_plan(&RetentionInput {
            key: &key(),
            listed: &listed,
            images,
            head,
            tip,
            holder_epoch,
            floor,
            now_ms,
            retain_ms,
        })
    }

    #[test]
    fn old_images_go_except_the_head_and_the_base_of_the_window_and_so_do_the_segments_they_cover()
    {
        // Images at log 10 (old), 20 (old: the window's base), 30 (young, head).
        let images = [
            image(2, 1, 10, HOUR),
            image(2, 2, 20, 2 * HOUR),
            image(2, 3, 30, 30 * HOUR),
        ];
        let segments: Vec<LogPos> = (1..=35).map(|s| pos(2, s)).collect();
        let plan = plan_of(
            &images,
            &segments,
            Some((2, 3)),
            Some(pos(2, 35)),
            (2, 0),
            (30 * HOUR, 24 * HOUR),
        );
        let mut want = vec![image_key(&key(), 2, 1), manifest_key(&key(), 2, 1)];
        want.extend((1..=20).map(|s| segment_key(&key(), pos(2, s))));
        want.sort();
        assert_eq!(plan, want);
    }

    #[test]
    fn an_image_whose_log_never_reached_its_position_is_never_the_base() {
        // Found in review: epoch 2's image U at (2, 11) was uploaded, but segment (2, 11) never
        // shipped; epoch 3 went on from 10 and its head N holds (3, 10)... then (3, 11) shipped.
        // U is older than `retain`; were it the base, (3, 11) — which the head needs — would go.
        let u = ImageInfo {
            epoch: 2,
            seq: 5,
            log: Some(pos(2, 11)),
            created_at_ms: HOUR,
            beyond_log: false,
        };
        let n = ImageInfo {
            epoch: 3,
            seq: 1,
            log: Some(pos(2, 10)),
            created_at_ms: 30 * HOUR,
            beyond_log: false,
        };
        let mut segments: Vec<LogPos> = (1..=10).map(|s| pos(2, s)).collect();
        segments.push(pos(3, 11));
        let images = [u, n];
        let plan = plan_of(
            &images,
            &segments,
            Some((3, 1)),
            Some(pos(3, 11)),
            (3, 0),
            (30 * HOUR, 24 * HOUR),
        );
        assert!(
            !plan.contains(&segment_key(&key(), pos(3, 11))),
            "the head needs (3, 11): {plan:?}"
        );
    }

    #[test]
    fn an_image_beyond_its_log_is_never_the_base() {
        let old = ImageInfo {
            beyond_log: true,
            ..image(2, 1, 20, HOUR)
        };
        let images = [old, image(2, 2, 30, 30 * HOUR)];
        let segments: Vec<LogPos> = (1..=30).map(|s| pos(2, s)).collect();
        let plan = plan_of(
            &images,
            &segments,
            Some((2, 2)),
            Some(pos(2, 30)),
            (2, 0),
            (30 * HOUR, 24 * HOUR),
        );
        assert!(
            plan.iter().all(|k| !k.ends_with(".seg")),
            "no base: every segment stays: {plan:?}"
        );
    }

    #[test]
    fn while_every_image_is_younger_than_retain_every_segment_stays() {
        let images = [image(2, 1, 10, 29 * HOUR), image(2, 2, 20, 30 * HOUR)];
        let segments: Vec<LogPos> = (1..=25).map(|s| pos(2, s)).collect();
        let plan = plan_of(
            &images,
            &segments,
            Some((2, 2)),
            Some(pos(2, 25)),
            (2, 0),
            (30 * HOUR, 24 * HOUR),
        );
        assert!(
            plan.is_empty(),
            "a moment 29 h ago needs segments 1..10: {plan:?}"
        );
    }

    #[test]
    fn without_an_image_every_segment_of_the_chain_stays() {
        let segments: Vec<LogPos> = (1..=5).map(|s| pos(1, s)).collect();
        let plan = plan_of(
            &[],
            &segments,
            None,
            Some(pos(1, 5)),
            (1, 0),
            (100 * HOUR, HOUR),
        );
        assert!(plan.is_empty(), "{plan:?}");
    }

    #[test]
    fn segments_off_the_chain_go_and_the_live_tenures_segment_in_flight_stays() {
        // Epoch 3 shipped up to 10 and a late 11; epoch 4 went on from 10 to 12; a zombie of
        // epoch 3 also landed 13; epoch 4's 13 is in flight.
        let mut segments: Vec<LogPos> = (1..=10).map(|s| pos(3, s)).collect();
        segments.extend([pos(3, 11), pos(4, 11), pos(4, 12), pos(3, 13), pos(4, 13)]);
        let plan = plan_of(&[], &segments, None, Some(pos(4, 12)), (4, 0), (HOUR, HOUR));
        assert_eq!(
            plan,
            vec![
                segment_key(&key(), pos(3, 11)),
                segment_key(&key(), pos(3, 13))
            ]
        );
    }

    #[test]
    fn nothing_at_or_below_the_floor_and_nothing_outside_the_layout_is_chosen() {
        let images = [image(1, 1, 3, 0), image(2, 1, 5, 0)];
        let segments: Vec<LogPos> = vec![pos(1, 1), pos(1, 2), pos(1, 3), pos(2, 4), pos(2, 5)];
        let plan = plan_of(
            &images,
            &segments,
            Some((2, 1)),
            Some(pos(2, 5)),
            (2, 1),
            (100 * HOUR, HOUR),
        );
        assert_eq!(
            plan,
            vec![
                segment_key(&key(), pos(2, 4)),
                segment_key(&key(), pos(2, 5))
            ],
            "the head holds 5: its segments go; epoch 1 is the floor's sweep's"
        );
    }
}
