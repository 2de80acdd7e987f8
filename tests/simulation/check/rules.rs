//! What the checker holds the world to after each op: the lease records, the durable objects
//! (with what retention and late landings may or may not have left), the local directories and
//! every tenure's status, as a branch of the model states them; and, in the change log's cases,
//! the retention window judged from the stores' own stamps.

use std::collections::BTreeSet;

use crate::model::{Dir, Held, Pos, Res, State, Status, TENANTS};
use crate::ops::{Op, log_hole_fixed};
use crate::world::{RETAIN, STORE_BASE_MS, Seen, key_of, replica_name};
use leasehold_actors::TenantStatus;

/// How `seen` differs from what `state` says, if it does.
pub fn mismatch(state: &State, seen: &Seen) -> Option<String> {
    if let Some(stray) = seen.listings.get(TENANTS).filter(|s| !s.is_empty()) {
        return Some(format!(
            "the durable store holds objects of no tenant: {stray:?}"
        ));
    }
    for t in 0..TENANTS {
        if let Some(why) = row_mismatch(state, seen, t) {
            return Some(why);
        }
        if let Some(why) = listing_mismatch(state, seen, t) {
            return Some(why);
        }
    }
    for (r, dirs) in seen.dirs.iter().enumerate() {
        for (t, &exists) in dirs.iter().enumerate() {
            let model = state.dirs[r][t];
            let allowed = match model {
                Dir::Present => exists,
                Dir::Absent => !exists,
                Dir::Maybe => true,
            };
            if !allowed {
                return Some(format!(
                    "the local directory of tenant {t} on replica {r} exists: {exists}, model: {model:?}"
                ));
            }
        }
    }
    for (k, tenure) in &state.tenures {
        let seen_status = seen.statuses.get(k).copied();
        if seen_status != Some(status_of(tenure.status)) {
            return Some(format!(
                "tenure {k:?} is {seen_status:?}, model: {:?}",
                tenure.status
            ));
        }
    }
    None
}

fn status_of(s: Status) -> TenantStatus {
    match s {
        Status::Serving => TenantStatus::Serving,
        Status::Forgetting => TenantStatus::Forgetting,
        Status::Released => TenantStatus::Released,
        Status::Abandoned => TenantStatus::Abandoned,
        Status::Forgotten => TenantStatus::Forgotten,
        Status::Passivated => TenantStatus::Passivated,
    }
}

fn row_mismatch(state: &State, seen: &Seen, t: usize) -> Option<String> {
    let ts = &state.tenants[t];
    let record = seen.rows[t].as_ref();
    let expected = ts.row.as_ref().map(|row| {
        (
            replica_name(row.owner),
            row.epoch,
            STORE_BASE_MS + row.expires_at,
            row.released,
            ts.floor,
            ts.head,
            ts.tip,
        )
    });
    let actual = record.map(|r| {
        (
            r.owner.clone(),
            r.epoch,
            r.expires_at_ms,
            r.released,
            r.floor,
            r.head.as_ref().map(|h| (h.epoch, h.seq)),
            r.tip.map(|p| (p.epoch, p.seq)),
        )
    });
    (expected != actual).then(|| {
        format!(
            "tenant {t}'s lease (owner, epoch, expires, released, floor, head, tip) is {actual:?}, \
             model: {expected:?}"
        )
    })
}

/// The keys of tenant `t`'s image `(epoch, seq)`: its bytes and its manifest.
pub fn object_keys(t: usize, (epoch, seq): (u64, u64)) -> [String; 2] {
    let prefix = key_of(t).prefix();
    [
        format!("{prefix}e{epoch:08}/snap-{seq:06}.db"),
        format!("{prefix}e{epoch:08}/snap-{seq:06}.json"),
    ]
}

/// The key of tenant `t`'s segment at `(epoch, seq)`.
pub fn segment_key(t: usize, (epoch, seq): Pos) -> String {
    format!("{}e{epoch:08}/log-{seq:012}.seg", key_of(t).prefix())
}

fn listing_mismatch(state: &State, seen: &Seen, t: usize) -> Option<String> {
    let ts = &state.tenants[t];
    // Segments off the chain (a seq a later tenure shipped too, or an older tenure's above the
    // tip) may go at any time: retention deletes them after every new image
    // (`src/plan/retention.rs`).
    let tip = ts.tip.map_or(0, |p| p.1);
    let holder = ts.row.as_ref().map_or(0, |row| row.epoch);
    // Retired objects (the change log's cases: what retention may have deleted) may be there
    // or not.
    let off_chain = |&(e, seq): &(u64, u64)| {
        (seq > tip && (e < holder || ts.seg_unconfirmed.contains(&(e, seq))))
            || (seq <= tip && ts.segments.keys().any(|&(e2, s2)| s2 == seq && e2 > e))
            || ts.segments.get(&(e, seq)).is_some_and(|seg| seg.retired)
    };
    // An image whose head move's answer was lost and that is not yet known to stay (see
    // `TenantState::img_unconfirmed`) may be there or not off the head's chain of bases: its
    // replica's reconciliation deletes it while the head is below it and keeps it once the head
    // is past it, and which came first depends on when its pass ran.
    let mut on_chain = BTreeSet::new();
    let mut at = ts.head;
    while let Some(o) = at.filter(|o| on_chain.insert(*o)) {
        at = ts.objects.get(&o).and_then(|image| image.base);
    }
    let unnamed = |o: &(u64, u64)| ts.img_unconfirmed.contains(o) && !on_chain.contains(o);
    let mut required: Vec<String> = (ts.objects.iter())
        .filter(|(o, image)| !image.retired && !unnamed(o))
        .flat_map(|(&o, _)| object_keys(t, o))
        .collect();
    required.extend(ts.lone.iter().map(|&o| object_keys(t, o)[0].clone()));
    required.extend(
        ts.segments
            .keys()
            .filter(|p| !off_chain(p))
            .map(|&p| segment_key(t, p)),
    );
    required.sort();
    let mut maybe: Vec<String> = ts
        .leftovers
        .iter()
        .flat_map(|&o| object_keys(t, o))
        .collect();
    maybe.extend(ts.stray.iter().map(|&o| object_keys(t, o)[0].clone()));
    maybe.extend(
        ts.lone_retired
            .iter()
            .map(|&o| object_keys(t, o)[0].clone()),
    );
    maybe.extend(
        (ts.objects.iter())
            .filter(|(o, image)| image.retired || unnamed(o))
            .flat_map(|(&o, _)| object_keys(t, o)),
    );
    maybe.extend(ts.seg_leftovers.iter().map(|&p| segment_key(t, p)));
    maybe.extend(ts.seg_maybe.iter().map(|&p| segment_key(t, p)));
    maybe.extend(
        ts.segments
            .keys()
            .filter(|p| off_chain(p))
            .map(|&p| segment_key(t, p)),
    );
    let listed = &seen.listings[t];
    let above: Vec<&String> = listed.iter().filter(|k| !maybe.contains(k)).collect();
    let required: Vec<&String> = required.iter().collect();
    (above != required).then(|| {
        format!(
            "tenant {t}'s durable objects are {listed:?}, model: {required:?} \
             (and perhaps {maybe:?}, at or below floor {})",
            ts.floor
        )
    })
}

/// A replica reconciling a put of unknown outcome whose tenure ended here first fences that
/// tenure by a release of its lease, so that no late move of it can land (docs/guarantees.md,
/// "Reconciling puts of unknown outcome"): where the store shows the lease released and the
/// model's tenure of that epoch has ended with such a put (a late head or tip move held, an
/// image or segment unconfirmed), the release is the reconciliation's, and the model takes it.
pub fn fenced_by_reconciliation(state: &mut State, seen: &Seen) {
    for t in 0..TENANTS {
        let Some(record) = seen.rows[t].as_ref() else {
            continue;
        };
        let Some(row) = state.tenants[t].row.as_ref() else {
            continue;
        };
        let (epoch, owner) = (row.epoch, row.owner);
        let same = record.epoch == epoch && record.owner == replica_name(owner);
        if !same || row.released || !record.released {
            continue;
        }
        let ended = state
            .tenures
            .get(&(t, epoch))
            .is_some_and(|tenure| tenure.status != Status::Serving);
        let ts = &state.tenants[t];
        let unconfirmed = ts.img_unconfirmed.iter().any(|o| o.0 == epoch)
            || ts.seg_unconfirmed.iter().any(|p| p.0 == epoch)
            || state.held.iter().any(|held| match *held {
                Held::PublishHead { t: u, epoch: e, .. } | Held::MoveTip { t: u, epoch: e, .. } => {
                    u == t && e == epoch
                }
                _ => false,
            });
        if ended
            && unconfirmed
            && let Some(row) = state.tenants[t].row.as_mut()
        {
            row.released = true;
        }
    }
}

/// Settles, in every tenant, what a listing shows retention did (a retired object not listed is
/// gone for good).
pub fn refine(state: &mut State, seen: &Seen) {
    for t in 0..TENANTS {
        let image = |o| object_keys(t, o)[0].clone();
        let segment = |p| segment_key(t, p);
        state.refine(t, &seen.listings[t], image, segment);
    }
}

/// In the change log's cases: a point-in-time restore whose target lies inside the retention
/// window (after the window's base, the newest image of the chain older than `retain` by its
/// manifest's stamp) must give the log's content, whatever retention runs (once hole 3 of the
/// review is fixed) and mode changes (once hole 4 is fixed) came before.
pub fn window_mismatch(state: &State, op: &Op, observed: &[Res], seen: &Seen) -> Option<String> {
    let Op::PitrAt { t, target } = *op else {
        return None;
    };
    if !state.log_case {
        return None;
    }
    let retain = RETAIN.as_millis() as u64;
    let stamps = seen.stamps.get(t)?;
    let listed = &seen.listings[t];
    let base_seq = (state.base_candidates(t).into_iter())
        .filter(|(at, _)| listed.contains(&object_keys(t, *at)[0]))
        .filter(|(at, _)| stamps.get(at).is_some_and(|&s| s + retain < seen.wall_ms))
        .map(|(_, seq)| seq)
        .max()
        .unwrap_or(0);
    // Across a mode change it is hole 4's promise; otherwise hole 3's (the base kept).
    let inside = match state.pitr_inside_window(t, target, base_seq) {
        Some(true) => log_hole_fixed(4),
        Some(false) => log_hole_fixed(3),
        None => false,
    };
    let succeeded = matches!(observed, [Res::Keys(_)]);
    (inside && !succeeded).then(|| {
        format!(
            "a point-in-time restore of tenant {t} to {target:?}, inside the retention window \
             (its base at seq {base_seq}), answered {observed:?}"
        )
    })
}

/// A point-in-time restore that answered `OutsideRetention` where the model allows it only
/// because retention may have deleted a damaged segment on the walk: that segment must be gone
/// from the store, judged from the listing — else the runtime took a damaged segment for a
/// missing one (the hostile review of the model's `CorruptUnlessGone`).
pub fn damaged_taken_for_gone(
    state: &State,
    op: &Op,
    observed: &[Res],
    seen: &Seen,
) -> Option<String> {
    let Op::PitrAt { t, target } = *op else {
        return None;
    };
    if !matches!(observed, [Res::OutsideRetention]) {
        return None;
    }
    let pos = state.pitr_damaged_retired_segment(t, target)?;
    let key = segment_key(t, pos);
    seen.listings[t].contains(&key).then(|| {
        format!(
            "a point-in-time restore of tenant {t} to {target:?} answered OutsideRetention, \
             but the damaged segment {pos:?} on its walk is still in the store ({key})"
        )
    })
}

/// In the change log's cases, once hole 3 of the review is fixed: whether retention deleted
/// what the window needs, judged from the listing and the manifests' own stamps.
pub fn retention_mismatch(state: &State, seen: &Seen) -> Option<String> {
    if !state.log_case || !log_hole_fixed(3) {
        return None;
    }
    (0..TENANTS).find_map(|t| {
        let image = |o| object_keys(t, o)[0].clone();
        let segment = |p| segment_key(t, p);
        let retain = RETAIN.as_millis() as u64;
        let stamps = seen.stamps.get(t)?;
        // A deletion ran no later than the store saw it (else: than the listing).
        let deleted_at = |key: &str| {
            let at = seen
                .deletions
                .iter()
                .rev()
                .find(|(k, _)| key.starts_with(k.as_str()));
            at.map_or(seen.wall_ms, |(_, at)| *at)
        };
        let listed = &seen.listings[t];
        state.retention_breach(t, listed, stamps, deleted_at, retain, image, segment)
    })
}
