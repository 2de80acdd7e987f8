//! The retention plan, case by case (docs/guarantees.md, the storage bound).

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
        base: None,
        damaged: false,
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
fn old_images_go_except_the_head_and_the_base_of_the_window_and_so_do_the_segments_they_cover() {
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
    // The base's own segment (20) stays: the next run judges the base on the chain by it.
    want.extend((1..20).map(|s| segment_key(&key(), pos(2, s))));
    want.sort();
    assert_eq!(plan, want);
}

/// The keys left once `plan` is applied to `listed`.
fn without(listed: &[String], plan: &[String]) -> Vec<String> {
    listed
        .iter()
        .filter(|k| !plan.contains(k))
        .cloned()
        .collect()
}

#[test]
fn storage_bound_the_windows_base_stays_across_retention_runs() {
    // Images at log 10 (old: the window's base) and 20 (young, the head). The first run
    // keeps the base and deletes what it covers; the second, on what the first left, must
    // keep it too: a moment of the window between 10 and 20 starts from it.
    let images = [image(2, 1, 10, HOUR), image(2, 2, 20, 30 * HOUR)];
    let segments: Vec<LogPos> = (1..=25).map(|s| pos(2, s)).collect();
    let listed = listing(&images, &segments);
    let k = key();
    let input = |listed| RetentionInput {
        key: &k,
        listed,
        images: &images,
        head: Some((2, 2)),
        tip: Some(pos(2, 25)),
        holder_epoch: 2,
        floor: 0,
        now_ms: 30 * HOUR,
        retain_ms: 24 * HOUR,
    };
    let first = retention_plan(&input(&listed));
    assert!(!first.contains(&image_key(&key(), 2, 1)), "{first:?}");
    let left = without(&listed, &first);
    let second = retention_plan(&input(&left));
    assert!(
        !second.contains(&image_key(&key(), 2, 1)),
        "the second run deletes the base the first kept: {second:?}"
    );
    assert!(
        second.iter().all(|k| !k.ends_with(".seg")),
        "the segments after the base stay: {second:?}"
    );
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
        base: None,
        damaged: false,
    };
    let n = ImageInfo {
        epoch: 3,
        seq: 1,
        log: Some(pos(2, 10)),
        created_at_ms: 30 * HOUR,
        beyond_log: false,
        base: None,
        damaged: false,
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
        vec![segment_key(&key(), pos(2, 4))],
        "the head holds 5: the segments below it go (5 stays, the base's own); epoch 1 is the floor's sweep's"
    );
}

#[test]
fn pitr_across_modes_the_image_a_later_log_continued_from_stays_while_the_window_needs_it() {
    // Epoch 1 (a log) shipped 1..=10 and imaged 5; epoch 2 (no log) imaged twice at (1, 10);
    // epoch 3 (a log) continued from the newer of those and shipped 11..=20, imaging 20 (the
    // head, young). The window's moments between 10 and 20 start from epoch 2's newer image;
    // those at 10 from the base (epoch 1's image) and the segments after it.
    let beyond = |seq, created| ImageInfo {
        epoch: 2,
        seq,
        log: Some(pos(1, 10)),
        created_at_ms: created,
        beyond_log: true,
        base: None,
        damaged: false,
    };
    let mut images = vec![
        image(1, 1, 5, HOUR),
        beyond(1, 2 * HOUR),
        beyond(2, 3 * HOUR),
        image(3, 2, 20, 29 * HOUR),
    ];
    images[3].log = Some(pos(3, 20));
    let mut segments: Vec<LogPos> = (1..=10).map(|s| pos(1, s)).collect();
    segments.extend((11..=20).map(|s| pos(3, s)));
    let plan = plan_of(
        &images,
        &segments,
        Some((3, 2)),
        Some(pos(3, 20)),
        (3, 0),
        (30 * HOUR, 24 * HOUR),
    );
    assert!(!plan.contains(&image_key(&key(), 2, 2)), "{plan:?}");
    assert!(
        !plan.contains(&image_key(&key(), 1, 1)),
        "the base: {plan:?}"
    );
    assert!(
        plan.contains(&image_key(&key(), 2, 1)),
        "an older one there goes: {plan:?}"
    );
    let want: Vec<String> = (1..5).map(|s| segment_key(&key(), pos(1, s))).collect();
    let segs: Vec<String> = plan
        .iter()
        .filter(|k| k.ends_with(".seg"))
        .cloned()
        .collect();
    assert_eq!(segs, want, "only what the base covers");
    // Once an image of the later log is old too, it is the base, and the mode change is behind
    // the window: the images before it go, and so do the segments below it.
    let mut later = images.clone();
    later.push(image(3, 1, 15, 4 * HOUR));
    later[4].log = Some(pos(3, 15));
    let plan = plan_of(
        &later,
        &segments,
        Some((3, 2)),
        Some(pos(3, 20)),
        (3, 0),
        (30 * HOUR, 24 * HOUR),
    );
    for (e, s) in [(1, 1), (2, 1), (2, 2)] {
        assert!(plan.contains(&image_key(&key(), e, s)), "{e}/{s}: {plan:?}");
    }
    assert!(!plan.contains(&segment_key(&key(), pos(3, 15))), "{plan:?}");
    assert!(plan.contains(&segment_key(&key(), pos(3, 14))), "{plan:?}");
}

#[test]
fn final_review_hole6_the_windows_base_is_an_image_on_the_heads_chain_and_a_passed_by_image_goes() {
    // Image (2, 2) was published, its head move timed out but landed; its tenure, not knowing,
    // built (2, 3) on the head it knew, (2, 1). The replica's reconciliation keeps (2, 2) (the
    // head moved past it) and leaves it to retention. While an image on the head's chain is old
    // enough, that one is the window's base, and retention deletes (2, 2): it is neither the
    // base nor the head nor younger than `retain` (the storage bound, with what the
    // reconciliation keeps).
    let based = |epoch, seq, log, created, base| ImageInfo {
        base,
        ..image(epoch, seq, log, created)
    };
    let images = [
        based(2, 1, 10, HOUR, None),
        based(2, 2, 20, 2 * HOUR, Some((2, 1))),
        based(2, 3, 30, 30 * HOUR, Some((2, 1))),
    ];
    // What the reconciliation decides for (2, 2), once the head moved past it.
    use crate::plan::reconcile::{Naming, PutOf, Seen, Verdict, verdict};
    let record = crate::lease::LeaseRecord {
        key: key().to_string(),
        owner: "a".into(),
        epoch: 2,
        expires_at_ms: 0,
        released: false,
        floor: 0,
        head: Some(crate::layout::ImageRef {
            epoch: 2,
            seq: 3,
            sha256: "00".repeat(32),
        }),
        tip: Some(pos(2, 35)),
    };
    let seen = Seen {
        record: Some(&record),
        tenure_runs_here: true,
        tenure_fenced: false,
        later_at_seq: None,
    };
    let put = PutOf::Image { epoch: 2, seq: 2 };
    assert_eq!(verdict(put, Naming::Unknown, &seen), Verdict::Keep);
    let segments: Vec<LogPos> = (1..=35).map(|s| pos(2, s)).collect();
    let plan = plan_of(
        &images,
        &segments,
        Some((2, 3)),
        Some(pos(2, 35)),
        (2, 0),
        (30 * HOUR, 24 * HOUR),
    );
    assert!(
        !plan.contains(&image_key(&key(), 2, 1)),
        "the base on the head's chain stays: {plan:?}"
    );
    for gone in [image_key(&key(), 2, 2), manifest_key(&key(), 2, 2)] {
        assert!(plan.contains(&gone), "the passed-by image goes: {plan:?}");
    }
    assert!(
        !plan.contains(&segment_key(&key(), pos(2, 15))),
        "the segments after it stay: {plan:?}"
    );
    assert!(plan.contains(&segment_key(&key(), pos(2, 9))), "{plan:?}");
}

/// Hole 6b: when no old image is on the head's chain, the base may be an image the head passed
/// by (the reconciliation keeps it); once an image on the chain is old enough it becomes the
/// base, and the passed-by image, old and not the base, goes with the segments below the new
/// base.
#[test]
fn final_review_hole6b_a_passed_by_base_goes_once_an_image_on_the_heads_chain_replaces_it() {
    let based = |epoch, seq, log, created, base| ImageInfo {
        base,
        ..image(epoch, seq, log, created)
    };
    // (2, 1) at 10 was the head, passed by: (2, 2) at 20 and (2, 3) at 30 built on no head.
    let images = [
        based(2, 1, 10, HOUR, None),
        based(2, 2, 20, 20 * HOUR, None),
        based(2, 3, 30, 40 * HOUR, Some((2, 2))),
    ];
    let segments: Vec<LogPos> = (1..=35).map(|s| pos(2, s)).collect();
    let run = |now| {
        plan_of(
            &images,
            &segments,
            Some((2, 3)),
            Some(pos(2, 35)),
            (2, 0),
            (now, 24 * HOUR),
        )
    };
    // At 26 h only (2, 1) is old: it is the base, though off the head's chain.
    let plan = run(26 * HOUR);
    assert!(!plan.contains(&image_key(&key(), 2, 1)), "{plan:?}");
    assert!(!plan.contains(&segment_key(&key(), pos(2, 10))), "{plan:?}");
    assert!(plan.contains(&segment_key(&key(), pos(2, 9))), "{plan:?}");
    // At 45 h (2, 2), on the head's chain, is old too: the base; (2, 1) goes.
    let plan = run(45 * HOUR);
    for gone in [image_key(&key(), 2, 1), manifest_key(&key(), 2, 1)] {
        assert!(plan.contains(&gone), "{plan:?}");
    }
    assert!(!plan.contains(&image_key(&key(), 2, 2)), "{plan:?}");
    assert!(plan.contains(&segment_key(&key(), pos(2, 19))), "{plan:?}");
    assert!(!plan.contains(&segment_key(&key(), pos(2, 20))), "{plan:?}");
}
