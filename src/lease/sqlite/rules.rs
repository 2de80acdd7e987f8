//! The lease rules of the SQLite store: pure functions that decide, from a key's row and the
//! store's time, whether an acquire, renew, release, publish, tip move or forget goes through and what the
//! row becomes. No I/O and no clock: [`SqliteLeaseStore`](super::SqliteLeaseStore) reads its
//! clock inside the write transaction, loads the row, applies a rule and saves what it returns.
//!
//! The rules are SQLite's own: a row records the boot its expiry counts in, and a row of another
//! boot is expired. The PostgreSQL store states the same rules in its statements instead, judged
//! by the server's clock.

use std::sync::Arc;

use crate::layout::{ImageRef, LogPos};
use crate::lease::{LeaseError, LeaseRecord};

/// The largest time SQLite can store (an `INTEGER` is an `i64`); expiries saturate here.
pub(super) const LAST_MS: u64 = i64::MAX.unsigned_abs();

/// The store's time, read inside the write transaction.
#[derive(Debug, Clone)]
pub(super) struct StoreTime {
    /// The store clock's reading.
    pub(super) now_ms: u64,
    /// The boot that reading counts in.
    pub(super) boot_id: Arc<str>,
}

/// One row of `leases`, without its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LeaseRow {
    /// The holder, or last holder.
    pub(super) owner: String,
    /// The epoch of the last acquisition.
    pub(super) epoch: u64,
    /// The end of the lease, on the store's clock in boot `boot_id`.
    pub(super) expires_at_ms: u64,
    /// The boot `expires_at_ms` counts in.
    pub(super) boot_id: String,
    /// Whether the holder handed the lease back.
    pub(super) released: bool,
    /// The highest forgotten epoch.
    pub(super) floor: u64,
    /// The newest published image.
    pub(super) head: Option<ImageRef>,
    /// The newest segment of the change log.
    pub(super) tip: Option<LogPos>,
    /// The attempt id of the acquire that started this tenure (`None` in rows written before
    /// attempts were recorded): a retry of that attempt gets the tenure back.
    pub(super) attempt: Option<u64>,
}

impl LeaseRow {
    /// Live: not released, written in this boot, and not yet at its end.
    fn is_live(&self, at: &StoreTime) -> bool {
        !self.released && self.boot_id == *at.boot_id && at.now_ms < self.expires_at_ms
    }

    /// How long the lease still runs at `at`, in milliseconds of the store's clock: `Some`
    /// while it is live, `None` otherwise (a row of another boot is never live).
    pub(super) fn remaining_ms(&self, at: &StoreTime) -> Option<u64> {
        self.is_live(at)
            .then(|| self.expires_at_ms.saturating_sub(at.now_ms))
    }

    /// The row as the record of `key`.
    pub(super) fn record(&self, key: &str) -> LeaseRecord {
        LeaseRecord {
            key: key.to_owned(),
            owner: self.owner.clone(),
            epoch: self.epoch,
            expires_at_ms: self.expires_at_ms,
            released: self.released,
            floor: self.floor,
            head: self.head.clone(),
            tip: self.tip,
        }
    }
}

/// The `(owner, epoch)` a call names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tenure {
    /// The caller's owner name.
    owner: String,
    /// The epoch the caller believes it holds (0 for an acquire).
    epoch: u64,
}

impl Tenure {
    /// The tenure of `owner` at `epoch`.
    pub(super) fn new(owner: &str, epoch: u64) -> Self {
        Self {
            owner: owner.to_owned(),
            epoch,
        }
    }
}

/// Why a change was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refusal {
    /// A live lease of `(owner, epoch)` stands in the way of an acquire.
    Held {
        /// The holder.
        owner: String,
        /// Its epoch.
        epoch: u64,
    },
    /// The caller's tenure does not hold a live lease (or may not do this with it).
    NotHeld,
    /// A publish offered an image not newer than `head`, the current head.
    Stale {
        /// The current head.
        head: ImageRef,
        /// The image offered.
        image: ImageRef,
    },
    /// A tip move expected `from`, but the tip is at `tip` (and not already at `to`).
    TipMoved {
        /// The current tip.
        tip: Option<LogPos>,
        /// The tip the caller expected.
        from: Option<LogPos>,
        /// The position offered.
        to: LogPos,
    },
}

impl Refusal {
    /// The error a caller of tenure `caller` hears for `key`.
    pub(super) fn into_error(self, key: &str, caller: &Tenure) -> LeaseError {
        let key = key.to_owned();
        match self {
            Refusal::Held { owner, epoch } => LeaseError::Held { key, owner, epoch },
            Refusal::NotHeld => LeaseError::NotHeld {
                key,
                owner: caller.owner.clone(),
                epoch: caller.epoch,
            },
            Refusal::Stale { head, image } => LeaseError::Stale { key, head, image },
            Refusal::TipMoved { tip, from, to } => LeaseError::TipMoved { key, tip, from, to },
        }
    }
}

/// What a rule decided: the row to save, or why nothing changes.
pub(super) type Decision = Result<LeaseRow, Refusal>;

/// The end of a lease granted `ttl_ms` from now, saturating at [`LAST_MS`].
pub(super) fn ends_at(ttl_ms: u64, at: &StoreTime) -> u64 {
    at.now_ms.saturating_add(ttl_ms).min(LAST_MS)
}

/// The row, if the caller's tenure holds it live.
fn held<'r>(
    row: Option<&'r LeaseRow>,
    t: &Tenure,
    at: &StoreTime,
) -> Result<&'r LeaseRow, Refusal> {
    row.filter(|r| r.is_live(at) && r.owner == t.owner && r.epoch == t.epoch)
        .ok_or(Refusal::NotHeld)
}

/// Acquire: a free, released or expired key goes to the caller at the next epoch, recording
/// `attempt`; floor and head stay. A live lease of the caller's own `attempt` (an earlier call of
/// this attempt that landed) is renewed and returned at its epoch, so a retry recognises its own
/// success (docs/guarantees.md, "Late landings"); any other live lease refuses.
pub(super) fn take(
    row: Option<&LeaseRow>,
    t: &Tenure,
    ttl_ms: u64,
    attempt: u64,
    at: &StoreTime,
) -> Decision {
    if let Some(live) = row.filter(|r| r.is_live(at)) {
        if live.owner == t.owner && live.attempt == Some(attempt) {
            let expires_at_ms = live.expires_at_ms.max(ends_at(ttl_ms, at));
            return Ok(LeaseRow {
                expires_at_ms,
                ..live.clone()
            });
        }
        let (owner, epoch) = (live.owner.clone(), live.epoch);
        return Err(Refusal::Held { owner, epoch });
    }
    if let Some(spent) = row.filter(|r| r.owner == t.owner && r.attempt == Some(attempt)) {
        // This attempt already started a tenure, now over: a late landing takes nothing, so no
        // tenure nobody runs locks every replica out (docs/guarantees.md, "Late landings").
        let (owner, epoch) = (spent.owner.clone(), spent.epoch);
        return Err(Refusal::Held { owner, epoch });
    }
    Ok(LeaseRow {
        owner: t.owner.clone(),
        epoch: row.map_or(0, |r| r.epoch) + 1,
        expires_at_ms: ends_at(ttl_ms, at),
        boot_id: at.boot_id.to_string(),
        released: false,
        floor: row.map_or(0, |r| r.floor),
        head: row.and_then(|r| r.head.clone()),
        tip: row.and_then(|r| r.tip),
        attempt: Some(attempt),
    })
}

/// Renew: the caller's live lease now ends `ttl` from now.
pub(super) fn extend(row: Option<&LeaseRow>, t: &Tenure, ttl_ms: u64, at: &StoreTime) -> Decision {
    let expires_at_ms = ends_at(ttl_ms, at);
    held(row, t, at).map(|r| LeaseRow {
        expires_at_ms,
        ..r.clone()
    })
}

/// Release: the caller's live lease can be acquired at once.
pub(super) fn hand_back(row: Option<&LeaseRow>, t: &Tenure, at: &StoreTime) -> Decision {
    held(row, t, at).map(|r| LeaseRow {
        released: true,
        ..r.clone()
    })
}

/// Publish: the head moves to `image` for a live tenure above the floor, if `image` belongs to
/// that epoch and is newer than the head (promise 4: the head only moves forward). Publishing
/// exactly the current head again succeeds and changes nothing: a retry of a publish that landed.
pub(super) fn move_head(
    row: Option<&LeaseRow>,
    t: &Tenure,
    image: &ImageRef,
    at: &StoreTime,
) -> Decision {
    let row = held(row, t, at)?;
    if t.epoch <= row.floor || image.epoch != t.epoch {
        return Err(Refusal::NotHeld);
    }
    if let Some(head) = row.head.as_ref().filter(|h| !moves_forward(h, image)) {
        if head == image {
            return Ok(row.clone());
        }
        let (head, image) = (head.clone(), image.clone());
        return Err(Refusal::Stale { head, image });
    }
    let head = Some(image.clone());
    Ok(LeaseRow {
        head,
        ..row.clone()
    })
}

/// Whether `image` is newer than `head`: a higher `(epoch, seq)`.
pub(super) fn moves_forward(head: &ImageRef, image: &ImageRef) -> bool {
    (image.epoch, image.seq) > (head.epoch, head.seq)
}

/// Tip move: the tip goes from `from` to `to` for a live tenure above the floor, if it is at
/// `from` (docs/guarantees.md, "The log tip"). A tip already at `to` is a retry of a move that
/// landed: the row is returned unchanged. The caller has checked that `to` follows `from`
/// ([`crate::lease::check_tip_step`]).
pub(super) fn advance_tip(
    row: Option<&LeaseRow>,
    t: &Tenure,
    from: Option<LogPos>,
    to: LogPos,
    at: &StoreTime,
) -> Decision {
    let row = held(row, t, at)?;
    if t.epoch <= row.floor {
        return Err(Refusal::NotHeld);
    }
    if row.tip == Some(to) {
        return Ok(row.clone());
    }
    if row.tip != from {
        let tip = row.tip;
        return Err(Refusal::TipMoved { tip, from, to });
    }
    Ok(LeaseRow {
        tip: Some(to),
        ..row.clone()
    })
}

/// Forget: the floor rises to the caller's live epoch and the head and the tip go; the lease
/// stays held.
pub(super) fn forget(row: Option<&LeaseRow>, t: &Tenure, at: &StoreTime) -> Decision {
    let row = held(row, t, at)?;
    let floor = row.floor.max(t.epoch);
    Ok(LeaseRow {
        floor,
        head: None,
        tip: None,
        ..row.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: &str = "boot-1";

    fn at(now_ms: u64) -> StoreTime {
        StoreTime {
            now_ms,
            boot_id: BOOT.into(),
        }
    }

    fn t(owner: &str, epoch: u64) -> Tenure {
        Tenure::new(owner, epoch)
    }

    #[test]
    fn the_time_left_is_counted_on_the_store_clock_and_only_for_a_live_row_of_this_boot() {
        assert_eq!(live().remaining_ms(&at(40)), Some(60));
        assert_eq!(live().remaining_ms(&at(100)), None, "expired at its end");
        let released = LeaseRow {
            released: true,
            ..live()
        };
        assert_eq!(released.remaining_ms(&at(40)), None);
        let other_boot = StoreTime {
            now_ms: 40,
            boot_id: "boot-2".into(),
        };
        assert_eq!(live().remaining_ms(&other_boot), None);
    }

    /// A live row of `a` at epoch 3 that ends at 100.
    fn live() -> LeaseRow {
        let owner = "a".to_owned();
        let (epoch, expires_at_ms, floor, released) = (3, 100, 0, false);
        LeaseRow {
            owner,
            epoch,
            expires_at_ms,
            boot_id: BOOT.into(),
            released,
            floor,
            head: None,
            tip: None,
            attempt: Some(9),
        }
    }

    fn pos(epoch: u64, seq: u64) -> LogPos {
        LogPos { epoch, seq }
    }

    fn image(epoch: u64, seq: u64) -> ImageRef {
        ImageRef {
            epoch,
            seq,
            sha256: "ab".repeat(32),
        }
    }

    #[test]
    fn an_attempt_whose_tenure_is_over_takes_nothing_when_it_lands_late() {
        let mut row = live();
        row.attempt = Some(7);
        row.released = true;
        let refused = take(Some(&row), &t(&row.owner.clone(), 1), 1_000, 7, &at(2_000));
        assert!(refused.is_err(), "{refused:?}");
        let other = take(Some(&row), &t(&row.owner.clone(), 1), 1_000, 8, &at(2_000));
        assert!(other.is_ok(), "another attempt of the same owner takes it");
    }

    #[test]
    fn a_free_key_is_taken_at_epoch_one() {
        let taken = take(None, &t("a", 0), 100, 1, &at(5)).unwrap();
        assert_eq!(
            (taken.owner.as_str(), taken.epoch, taken.expires_at_ms),
            ("a", 1, 105)
        );
        assert_eq!((taken.floor, taken.head, taken.released), (0, None, false));
    }

    #[test]
    fn a_live_lease_is_refused_and_an_ended_or_released_one_is_taken_at_the_next_epoch() {
        let held = Refusal::Held {
            owner: "a".into(),
            epoch: 3,
        };
        assert_eq!(take(Some(&live()), &t("b", 0), 10, 1, &at(99)), Err(held));
        assert_eq!(
            take(Some(&live()), &t("b", 0), 10, 1, &at(100))
                .unwrap()
                .epoch,
            4
        );
        let released = LeaseRow {
            released: true,
            ..live()
        };
        assert_eq!(
            take(Some(&released), &t("b", 0), 10, 1, &at(0))
                .unwrap()
                .epoch,
            4
        );
    }

    #[test]
    fn a_row_of_another_boot_is_expired_whatever_its_time() {
        let old = LeaseRow {
            boot_id: "boot-0".into(),
            expires_at_ms: u64::MAX,
            ..live()
        };
        let taken = take(Some(&old), &t("b", 0), 10, 1, &at(1)).unwrap();
        assert_eq!((taken.epoch, taken.boot_id.as_str()), (4, BOOT));
        assert_eq!(
            extend(Some(&old), &t("a", 3), 10, &at(1)),
            Err(Refusal::NotHeld)
        );
    }

    #[test]
    fn taking_keeps_floor_and_head() {
        let head = Some(image(3, 1));
        let forgotten = LeaseRow {
            floor: 2,
            head: head.clone(),
            released: true,
            ..live()
        };
        let taken = take(Some(&forgotten), &t("b", 0), 10, 1, &at(0)).unwrap();
        assert_eq!((taken.floor, taken.head), (2, head));
    }

    #[test]
    fn only_the_live_owner_and_epoch_may_renew_release_publish_or_forget() {
        let (row, now) = (live(), at(50));
        for wrong in [t("b", 3), t("a", 2), t("a", 4)] {
            let img = image(wrong.epoch, 1);
            assert_eq!(extend(Some(&row), &wrong, 10, &now), Err(Refusal::NotHeld));
            assert_eq!(hand_back(Some(&row), &wrong, &now), Err(Refusal::NotHeld));
            assert_eq!(forget(Some(&row), &wrong, &now), Err(Refusal::NotHeld));
            assert_eq!(
                move_head(Some(&row), &wrong, &img, &now),
                Err(Refusal::NotHeld)
            );
        }
        let right = t("a", 3);
        assert_eq!(extend(None, &right, 10, &now), Err(Refusal::NotHeld));
        assert_eq!(
            extend(Some(&row), &right, 10, &at(100)),
            Err(Refusal::NotHeld)
        );
        assert_eq!(
            extend(Some(&row), &right, 70, &now).unwrap().expires_at_ms,
            120
        );
        assert!(hand_back(Some(&row), &right, &now).unwrap().released);
    }

    #[test]
    fn publish_needs_an_epoch_above_the_floor_and_an_image_of_that_epoch() {
        let (me, now) = (t("a", 3), at(50));
        let refused = move_head(Some(&live()), &me, &image(2, 1), &now);
        assert_eq!(refused, Err(Refusal::NotHeld));
        let moved = move_head(Some(&live()), &me, &image(3, 1), &now).unwrap();
        assert_eq!(moved.head, Some(image(3, 1)));
        let forgotten = forget(Some(&moved), &me, &now).unwrap();
        assert_eq!((forgotten.floor, forgotten.head.clone()), (3, None));
        assert!(
            forgotten.is_live(&now),
            "the lease stays held after a forget"
        );
        let buried = move_head(Some(&forgotten), &me, &image(3, 2), &now);
        assert_eq!(buried, Err(Refusal::NotHeld));
    }

    #[test]
    fn hole2_the_head_only_moves_forward_and_the_same_head_again_is_a_retry() {
        let (me, now) = (t("a", 3), at(50));
        let at2 = move_head(Some(&live()), &me, &image(3, 2), &now).unwrap();
        let stale = Refusal::Stale {
            head: image(3, 2),
            image: image(3, 1),
        };
        assert_eq!(move_head(Some(&at2), &me, &image(3, 1), &now), Err(stale));
        assert_eq!(
            move_head(Some(&at2), &me, &image(3, 2), &now),
            Ok(at2.clone())
        );
        let twin = ImageRef {
            sha256: "cd".repeat(32),
            ..image(3, 2)
        };
        let refused = move_head(Some(&at2), &me, &twin, &now);
        assert!(matches!(refused, Err(Refusal::Stale { .. })), "{refused:?}");
        let at3 = move_head(Some(&at2), &me, &image(3, 3), &now).unwrap();
        assert_eq!(at3.head, Some(image(3, 3)));
        let inherited = LeaseRow {
            head: Some(image(2, 40)),
            ..live()
        };
        let first = move_head(Some(&inherited), &me, &image(3, 1), &now).unwrap();
        assert_eq!(
            first.head,
            Some(image(3, 1)),
            "a new epoch is above any older head"
        );
    }

    #[test]
    fn hole9_a_retry_of_the_same_attempt_gets_its_live_lease_back_renewed() {
        let mine = take(Some(&live()), &t("a", 0), 80, 9, &at(50)).unwrap();
        assert_eq!((mine.epoch, mine.expires_at_ms), (3, 130));
        assert_eq!(mine.attempt, Some(9));
        let kept = take(Some(&live()), &t("a", 0), 10, 9, &at(50)).unwrap();
        assert_eq!(kept.expires_at_ms, 100, "a retry never shortens the lease");
        let held = Refusal::Held {
            owner: "a".into(),
            epoch: 3,
        };
        assert_eq!(
            take(Some(&live()), &t("a", 0), 80, 8, &at(50)),
            Err(held.clone())
        );
        assert_eq!(take(Some(&live()), &t("b", 0), 80, 9, &at(50)), Err(held));
        let lapsed = take(Some(&live()), &t("a", 0), 80, 9, &at(100));
        assert!(
            matches!(lapsed, Err(Refusal::Held { epoch: 3, .. })),
            "an attempt starts at most one tenure: {lapsed:?}"
        );
        let next = take(Some(&live()), &t("a", 0), 80, 10, &at(100)).unwrap();
        assert_eq!(
            next.epoch, 4,
            "an ended lease is a new tenure for a new attempt"
        );
        let legacy = LeaseRow {
            attempt: None,
            ..live()
        };
        let refused = take(Some(&legacy), &t("a", 0), 80, 9, &at(50));
        assert!(matches!(refused, Err(Refusal::Held { .. })));
    }

    #[test]
    fn hole9_a_retried_forget_of_the_live_tenure_returns_the_same_row() {
        let (me, now) = (t("a", 3), at(50));
        let once = forget(Some(&live()), &me, &now).unwrap();
        assert_eq!(forget(Some(&once), &me, &now), Ok(once));
    }

    #[test]
    fn the_tip_moves_from_the_tip_seen_a_landed_move_is_a_retry_and_a_forget_clears_it() {
        let (me, now) = (t("a", 3), at(50));
        let first = advance_tip(Some(&live()), &me, None, pos(3, 1), &now).unwrap();
        assert_eq!(first.tip, Some(pos(3, 1)));
        let retry = advance_tip(Some(&first), &me, None, pos(3, 1), &now);
        assert_eq!(retry, Ok(first.clone()), "a landed move again");
        let moved = Refusal::TipMoved {
            tip: Some(pos(3, 1)),
            from: Some(pos(3, 2)),
            to: pos(3, 3),
        };
        let stale = advance_tip(Some(&first), &me, Some(pos(3, 2)), pos(3, 3), &now);
        assert_eq!(stale, Err(moved));
        for wrong in [t("b", 3), t("a", 2)] {
            let refused = advance_tip(Some(&first), &wrong, Some(pos(3, 1)), pos(3, 2), &now);
            assert_eq!(refused, Err(Refusal::NotHeld));
        }
        let ended = advance_tip(Some(&first), &me, Some(pos(3, 1)), pos(3, 2), &at(100));
        assert_eq!(ended, Err(Refusal::NotHeld));
        let forgotten = forget(Some(&first), &me, &now).unwrap();
        assert_eq!((forgotten.floor, forgotten.tip), (3, None));
        let buried = advance_tip(Some(&forgotten), &me, None, pos(3, 1), &now);
        assert_eq!(buried, Err(Refusal::NotHeld));
        let taken = take(Some(&first), &t("b", 0), 10, 1, &at(100)).unwrap();
        assert_eq!((taken.epoch, taken.tip), (4, Some(pos(3, 1))));
    }
}
