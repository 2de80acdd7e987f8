//! What becomes of a put whose outcome the replica never learned: a pure function of what it
//! put, how far the step that would have named it got, and what the lease record (and, when
//! asked for, a listing) says now (docs/guarantees.md, "Reconciling puts of unknown outcome").
//!
//! A segment is named by the tip's chain, an image by the head. An object that nothing names
//! and nothing can name any more is deleted; one that a step still under way (a late tip or
//! head move of a tenure still live) could name is looked at again later; an image the head
//! has moved past is kept and left to retention.
//!
//! ```text
//!  floor >= its epoch ─────────────────────────────────────────────> Delete
//!  naming never asked, or refused at once ─────────────────────────> Delete
//!  named now (tip == it / head == it) ─────────────────────────────> Keep
//!  image with the head past it ────────────────────────────────────> Keep (retention's)
//!  its tenure may still move the tip or head (live, not released):
//!     the tenure still runs here ──> Wait      ended here ──> ReleaseFirst
//!  otherwise: segment above the tip ──> Delete; at or below ──> ListSegmentsAtSeq
//!             image with the head below it (or none) ──> Delete
//! ```
//!
//! Why a segment at or below the tip needs more: a tenure that continued the tip past the
//! segment's position either continued from it (it is on the chain) or shipped that position
//! itself (a later epoch's segment at the same `seq`: ours is off the chain for good).
//!
//! Why an image the head moved past stays: its head move may have landed unbeknown to its
//! tenure, which went on building its images on the head it knew, so that a later head's chain
//! of bases passes it by — and retention may have chosen it, while it was the head, as the
//! window's base and deleted the segments below it (hole 6b of docs/testing.md). The head moves
//! only forward, so the replica cannot tell such an image from one whose move never landed;
//! both are kept, and retention deletes either once it is neither the window's base, nor the
//! head, nor an image it keeps for a change of mode (`crate::plan::retention`).

use crate::ids::LeaseKey;
use crate::layout::{LogPos, image_key, manifest_key, segment_key};
use crate::lease::LeaseRecord;

/// What the replica put.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PutOf {
    /// A segment of the change log at `pos`.
    Segment {
        /// Its position.
        pos: LogPos,
    },
    /// Image `seq` of `epoch` and its manifest.
    Image {
        /// The epoch of the tenure that took it.
        epoch: u64,
        /// Its number in the epoch.
        seq: u64,
    },
}

impl PutOf {
    /// The epoch of the tenure that put it.
    pub fn epoch(&self) -> u64 {
        match self {
            PutOf::Segment { pos } => pos.epoch,
            PutOf::Image { epoch, .. } => *epoch,
        }
    }

    /// The durable keys it may have written: the segment, or the image and its manifest.
    pub fn keys(&self, tenant: &LeaseKey) -> Vec<String> {
        match *self {
            PutOf::Segment { pos } => vec![segment_key(tenant, pos)],
            PutOf::Image { epoch, seq } => vec![
                image_key(tenant, epoch, seq),
                manifest_key(tenant, epoch, seq),
            ],
        }
    }
}

/// How far the step that names the object (the tip's or the head's compare-and-set) got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Naming {
    /// Never asked: the put failed, or the work stopped before the move was sent.
    NotAsked,
    /// Asked once and refused (a definite answer): nothing names it.
    Refused,
    /// Asked, and the answer was lost (a timeout, or a refusal after an earlier ask that timed
    /// out): the move may have landed, or may still land while its tenure is live.
    Unknown,
}

/// What is known besides the put itself.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The tenant's lease record now (`None`: never acquired).
    pub record: Option<&'a LeaseRecord>,
    /// The tenure that put it still runs on this replica (its lease cell has not ended).
    pub tenure_runs_here: bool,
    /// The store refused or accepted a release of that tenure since: its lease is no longer
    /// live, so no move of it can land any more.
    pub tenure_fenced: bool,
    /// For a segment: whether a segment of a later epoch (above the floor) sits at its `seq`
    /// (`None`: not listed yet).
    pub later_at_seq: Option<bool>,
}

/// What to do with the put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Named, or an image the head moved past (retention's to judge): it stays, and the
    /// replica forgets it.
    Keep,
    /// Named by nothing, and nothing can name it any more: delete its keys.
    Delete,
    /// A step still under way may name it: look again later.
    Wait,
    /// Its tenure ended here but its lease may still be live in the store, so a late move may
    /// still land: release that lease (any answer but a timeout fences it), then ask again.
    ReleaseFirst,
    /// List the tenant's segments and ask again with [`Seen::later_at_seq`].
    ListSegmentsAtSeq,
}

/// The verdict on `put` (of a tenant), whose naming got as far as `naming`, given `seen`.
pub fn verdict(put: PutOf, naming: Naming, seen: &Seen<'_>) -> Verdict {
    let epoch = put.epoch();
    let Some(record) = seen.record else {
        return Verdict::Delete;
    };
    if record.floor >= epoch || naming != Naming::Unknown {
        return Verdict::Delete;
    }
    let may_still_move = record.epoch == epoch && !record.released && !seen.tenure_fenced;
    match put {
        PutOf::Segment { pos } => {
            if record.tip == Some(pos) {
                return Verdict::Keep;
            }
            if may_still_move {
                return still_live(seen);
            }
            match record.tip {
                Some(tip) if tip.seq >= pos.seq => match seen.later_at_seq {
                    None => Verdict::ListSegmentsAtSeq,
                    Some(true) => Verdict::Delete,
                    // No later epoch shipped that position, so the chain's segment there is
                    // ours (or was deleted by retention as covered, which then deletes ours).
                    Some(false) => Verdict::Keep,
                },
                _ => Verdict::Delete,
            }
        }
        PutOf::Image { epoch, seq } => {
            let head = record.head.as_ref().map(|h| (h.epoch, h.seq));
            // Named now, or once named and passed by (or passed by unnamed: the replica cannot
            // tell): retention's to judge, which may have made it the window's base.
            if head.is_some_and(|h| h >= (epoch, seq)) {
                return Verdict::Keep;
            }
            if may_still_move {
                return still_live(seen);
            }
            // The head is below it (or there is none) and can no longer move to it.
            Verdict::Delete
        }
    }
}

/// A move of a live tenure may still land: wait while it runs here, else fence it first.
fn still_live(seen: &Seen<'_>) -> Verdict {
    if seen.tenure_runs_here {
        Verdict::Wait
    } else {
        Verdict::ReleaseFirst
    }
}

/// Whether a put of `keys` registered at `started_ms` (the replica's clock) with a caller's
/// deadline of `deadline_ms` is due for a verdict at `now_ms`: its caller has let go of it and
/// its deadline has passed (or the replica is closing, when everything left is due).
pub fn is_due(started_ms: u64, deadline_ms: u64, now_ms: u64, closing: bool) -> bool {
    closing || now_ms >= started_ms.saturating_add(deadline_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::ImageRef;

    fn record(epoch: u64, floor: u64) -> LeaseRecord {
        LeaseRecord {
            key: "acme/t1".into(),
            owner: "a".into(),
            epoch,
            expires_at_ms: 0,
            released: false,
            floor,
            head: None,
            tip: None,
        }
    }

    fn pos(epoch: u64, seq: u64) -> LogPos {
        LogPos { epoch, seq }
    }

    fn head(epoch: u64, seq: u64) -> Option<ImageRef> {
        Some(ImageRef {
            epoch,
            seq,
            sha256: "00".repeat(32),
        })
    }

    fn seen(record: &LeaseRecord) -> Seen<'_> {
        Seen {
            record: Some(record),
            tenure_runs_here: false,
            tenure_fenced: false,
            later_at_seq: None,
        }
    }

    const SEG: PutOf = PutOf::Segment {
        pos: LogPos { epoch: 3, seq: 7 },
    };
    const IMG: PutOf = PutOf::Image { epoch: 3, seq: 2 };

    #[test]
    fn anything_at_or_below_the_floor_goes_whatever_its_naming() {
        let r = record(4, 3);
        for naming in [Naming::NotAsked, Naming::Refused, Naming::Unknown] {
            assert_eq!(verdict(SEG, naming, &seen(&r)), Verdict::Delete);
            assert_eq!(verdict(IMG, naming, &seen(&r)), Verdict::Delete);
        }
        let none = Seen {
            record: None,
            ..seen(&r)
        };
        assert_eq!(verdict(SEG, Naming::Unknown, &none), Verdict::Delete);
    }

    #[test]
    fn a_put_whose_naming_was_never_asked_or_was_refused_goes_even_in_a_live_tenure() {
        let mut r = record(3, 0);
        r.tip = Some(pos(3, 6));
        let live = Seen {
            tenure_runs_here: true,
            ..seen(&r)
        };
        assert_eq!(verdict(SEG, Naming::NotAsked, &live), Verdict::Delete);
        assert_eq!(verdict(IMG, Naming::Refused, &live), Verdict::Delete);
    }

    #[test]
    fn a_segment_the_tip_names_stays() {
        let mut r = record(3, 0);
        r.tip = Some(pos(3, 7));
        assert_eq!(verdict(SEG, Naming::Unknown, &seen(&r)), Verdict::Keep);
    }

    #[test]
    fn a_late_tip_move_of_a_live_tenure_is_waited_for_or_fenced_first() {
        let mut r = record(3, 0);
        r.tip = Some(pos(3, 6));
        let runs = Seen {
            tenure_runs_here: true,
            ..seen(&r)
        };
        assert_eq!(verdict(SEG, Naming::Unknown, &runs), Verdict::Wait);
        assert_eq!(
            verdict(SEG, Naming::Unknown, &seen(&r)),
            Verdict::ReleaseFirst
        );
        let fenced = Seen {
            tenure_fenced: true,
            ..seen(&r)
        };
        assert_eq!(verdict(SEG, Naming::Unknown, &fenced), Verdict::Delete);
        r.released = true;
        assert_eq!(verdict(SEG, Naming::Unknown, &seen(&r)), Verdict::Delete);
    }

    #[test]
    fn once_a_later_tenure_went_on_a_segment_is_on_the_chain_unless_that_tenure_shipped_its_seq() {
        let mut r = record(4, 0);
        r.tip = Some(pos(4, 6));
        assert_eq!(
            verdict(SEG, Naming::Unknown, &seen(&r)),
            Verdict::Delete,
            "above the tip: never named"
        );
        r.tip = Some(pos(4, 9));
        assert_eq!(
            verdict(SEG, Naming::Unknown, &seen(&r)),
            Verdict::ListSegmentsAtSeq
        );
        let later = Seen {
            later_at_seq: Some(true),
            ..seen(&r)
        };
        assert_eq!(verdict(SEG, Naming::Unknown, &later), Verdict::Delete);
        let ours = Seen {
            later_at_seq: Some(false),
            ..seen(&r)
        };
        assert_eq!(verdict(SEG, Naming::Unknown, &ours), Verdict::Keep);
        r.tip = None;
        assert_eq!(verdict(SEG, Naming::Unknown, &seen(&r)), Verdict::Delete);
    }

    #[test]
    fn an_image_is_kept_when_the_head_names_it_or_has_moved_past_it() {
        let mut r = record(3, 0);
        r.head = head(3, 2);
        assert_eq!(verdict(IMG, Naming::Unknown, &seen(&r)), Verdict::Keep);
        r.head = head(3, 1);
        fn runs(r: &LeaseRecord) -> Seen<'_> {
            Seen {
                tenure_runs_here: true,
                ..seen(r)
            }
        }
        assert_eq!(verdict(IMG, Naming::Unknown, &runs(&r)), Verdict::Wait);
        assert_eq!(
            verdict(IMG, Naming::Unknown, &seen(&r)),
            Verdict::ReleaseFirst
        );
        r.released = true;
        assert_eq!(
            verdict(IMG, Naming::Unknown, &seen(&r)),
            Verdict::Delete,
            "the head is below it and cannot move to it any more"
        );
        r.head = None;
        assert_eq!(
            verdict(IMG, Naming::Unknown, &seen(&r)),
            Verdict::Delete,
            "no head, and none can name it any more"
        );
        r.released = false;
        r.head = head(3, 5);
        assert_eq!(
            verdict(IMG, Naming::Unknown, &runs(&r)),
            Verdict::Keep,
            "its own tenure moved the head past it: whether or not its move landed, retention's"
        );
        r.epoch = 4;
        r.head = head(4, 1);
        assert_eq!(
            verdict(IMG, Naming::Unknown, &seen(&r)),
            Verdict::Keep,
            "a later tenure moved the head past it: retention's"
        );
        r.floor = 3;
        assert_eq!(
            verdict(IMG, Naming::Unknown, &seen(&r)),
            Verdict::Delete,
            "forgotten: at or below the floor it goes, passed by or not"
        );
    }

    #[test]
    fn a_put_is_due_once_its_deadline_has_passed_or_the_replica_closes() {
        assert!(!is_due(1_000, 500, 1_499, false));
        assert!(is_due(1_000, 500, 1_500, false));
        assert!(is_due(1_000, 500, 1_000, true));
        assert!(is_due(u64::MAX, 500, u64::MAX, false));
    }

    #[test]
    fn its_keys_are_the_segment_or_the_image_and_its_manifest() {
        let key = LeaseKey::parse("acme/t1").unwrap();
        assert_eq!(
            SEG.keys(&key),
            vec!["acme/t1/e00000003/log-000000000007.seg"]
        );
        assert_eq!(
            IMG.keys(&key),
            vec![
                "acme/t1/e00000003/snap-000002.db",
                "acme/t1/e00000003/snap-000002.json"
            ]
        );
    }
}
