//! Known gaps of the runtime (`--tolerate GAP,…`): violations a run reports as `TOLERATED`
//! instead of failing, each named after the hole of the change-log review it belongs to
//! (docs/testing.md, the process drill). Every gap here is fixed and CI tolerates none; the
//! names stay so that a run reproducing an old report can still ask for one.
//!
//! | gap                 | tolerates                                                        | holes    |
//! | ------------------- | ---------------------------------------------------------------- | -------- |
//! | `stale-local-copy`  | a lost tenure's local copy of a tenant forgotten elsewhere       | —        |
//! | `orphan-image`      | `orphan-object`: an image without its manifest (or the reverse) in a live epoch | 8, 5 |
//! | `forgotten-segment` | `forgotten-object-left` where every object left is a segment      | 6, 10, 11 |
//! | `forgotten-image`   | `forgotten-object-left` where every object left is an image or manifest (with `forgotten-segment`: also a mix of both) | 5, 7 |
//! | `unexplained-end`   | `unexplained-tenure-end`                                          | 11, 12   |
//! | `unreadable`        | `unreadable-at-end`                                               | 1        |
//! | `pitr-window`       | `pitr-outside-retention`, `pitr-failed`                           | 3, 4     |
//! | `slow-durable-store` | `unexplained-tenure-end` or `graceful-not-flushed` from a durable put past the store deadline (or sent again after it and never settled), no fault injected (the machine's store, not the runtime) | — |
//! | `forgetter-copy`    | `forgotten-local-file-left` of the forgetting (or handing-off) replica's own root | a finding of 2026-12-01, fixed (the forget removes its copy whatever the store answered; docs/testing.md) |

use crate::checker::Violation;

/// A known gap of the runtime the checker may report without failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KnownGap {
    /// A lost tenure's local copy of a tenant that a successor forgot.
    StaleLocalCopy,
    /// An image put that timed out and landed later, beside no manifest, in a live epoch.
    OrphanImage,
    /// Segments of a forgotten epoch left after the erasure bound.
    ForgottenSegment,
    /// Images of a forgotten epoch left after the erasure bound.
    ForgottenImage,
    /// A tenure ended with no handoff, forget, close or fault to explain it.
    UnexplainedEnd,
    /// A tenant a fresh replica cannot open at the end.
    Unreadable,
    /// A point-in-time restore inside the window refused or failed.
    PitrWindow,
    /// The replica that forgot a tenant (or handed it off) keeps its local directory: seen on
    /// PostgreSQL + S3 with `forget-paused` and `forget-late-put`; fixed.
    ForgetterCopy,
    /// Not a gap of the runtime but of the machine: an `unexplained-tenure-end` or a
    /// `graceful-not-flushed` whose reason is a durable put that got no answer within the store
    /// deadline (or was sent again after it, and the earlier try never settled), no fault
    /// injected — an external store (moto, one Python process) slower than the drill's 1 s
    /// deadline, or a `--store-mib-per-sec` link slower than the 8 MiB/s the runtime's sized
    /// deadlines assume (or shared by several transfers). The runtime ends such a tenure as it
    /// promises (an unknown outcome, nothing acknowledged lost). Tolerated only where asked (the
    /// address run on PostgreSQL + S3, hole 1's pin on its 5 MiB/s link); a lease-store call that
    /// timed out (hole 12's class) is never this.
    SlowDurableStore,
}

/// What a tenure's end says when a durable put timed out (`DurableStore::put_if_absent`).
pub const DURABLE_PUT_TIMED_OUT: &str = "put_if_absent: no answer within";
/// What a tenure's end says when a segment put that timed out was sent again, answered
/// `AlreadyExists`, and its earlier try did not settle within the put's deadline.
pub const RETRIED_PUT_UNSETTLED: &str = "an earlier try still runs";

/// Whether a violation's detail names a durable put that outlived its deadline.
fn slow_put(detail: &str) -> bool {
    detail.contains(DURABLE_PUT_TIMED_OUT) || detail.contains(RETRIED_PUT_UNSETTLED)
}

/// What `forgotten-object-left` says when every object it lists is a segment.
pub const ONLY_SEGMENTS: &str = "(segments only)";
/// What `forgotten-object-left` says when every object it lists is an image or a manifest.
pub const ONLY_IMAGES: &str = "(images only)";

/// The tag of a list of leftover keys: [`ONLY_SEGMENTS`], [`ONLY_IMAGES`] or nothing.
pub fn leftover_tag<S: AsRef<str>>(keys: &[S]) -> &'static str {
    let segment = |k: &S| k.as_ref().ends_with(".seg");
    if keys.iter().all(segment) {
        ONLY_SEGMENTS
    } else if !keys.iter().any(segment) {
        ONLY_IMAGES
    } else {
        ""
    }
}

/// The gap a violation belongs to, if it is one of the known ones.
pub fn gap_of(v: &Violation) -> Option<KnownGap> {
    match v.rule {
        "orphan-object"
            if v.detail.contains("has no manifest") || v.detail.contains("has no image") =>
        {
            Some(KnownGap::OrphanImage)
        }
        "forgotten-object-left" if v.detail.contains(ONLY_SEGMENTS) => {
            Some(KnownGap::ForgottenSegment)
        }
        "forgotten-object-left" if v.detail.contains(ONLY_IMAGES) => Some(KnownGap::ForgottenImage),
        "unexplained-tenure-end" | "graceful-not-flushed" if slow_put(&v.detail) => {
            Some(KnownGap::SlowDurableStore)
        }
        "unexplained-tenure-end" => Some(KnownGap::UnexplainedEnd),
        "unreadable-at-end" => Some(KnownGap::Unreadable),
        "pitr-outside-retention" | "pitr-failed" => Some(KnownGap::PitrWindow),
        "forgotten-local-file-left"
            if v.detail.contains("handed off or forgetting")
                || v.detail.contains("the forgetting replica") =>
        {
            Some(KnownGap::ForgetterCopy)
        }
        _ => None,
    }
}

/// Whether `v` is explained by the `tolerated` gaps: its own, or, for objects of a forgotten
/// epoch of both kinds, segments and images both.
fn tolerated_by(v: &Violation, tolerated: &[KnownGap]) -> bool {
    match gap_of(v) {
        // Tolerating every unexplained end tolerates those of a slow store too (not a flush).
        Some(KnownGap::SlowDurableStore) => {
            tolerated.contains(&KnownGap::SlowDurableStore)
                || (v.rule == "unexplained-tenure-end"
                    && tolerated.contains(&KnownGap::UnexplainedEnd))
        }
        Some(gap) => tolerated.contains(&gap),
        None => {
            v.rule == "forgotten-object-left"
                && tolerated.contains(&KnownGap::ForgottenSegment)
                && tolerated.contains(&KnownGap::ForgottenImage)
        }
    }
}

/// Moves the violations of the `tolerated` gaps out of `violations` and returns them.
pub fn tolerate(violations: &mut Vec<Violation>, tolerated: &[KnownGap]) -> Vec<Violation> {
    let (known, rest): (Vec<Violation>, Vec<Violation>) = std::mem::take(violations)
        .into_iter()
        .partition(|v| tolerated_by(v, tolerated));
    *violations = rest;
    known
}

#[cfg(test)]
mod tests {
    use super::*;

    fn violation(rule: &'static str, detail: &str) -> Violation {
        Violation {
            rule,
            tenant: Some(0),
            at: 0,
            detail: detail.to_string(),
        }
    }

    #[test]
    fn a_slow_durable_store_is_tolerated_only_for_a_durable_put_timeout() {
        let slow = violation(
            "unexplained-tenure-end",
            "epoch 1 of t5 … (could not ship …: put_if_absent: no answer within 1002 ms)",
        );
        let lease = violation(
            "unexplained-tenure-end",
            "epoch 1 of t0 … (… move_tip: no answer within 3000 ms …)",
        );
        let mut found = vec![slow.clone(), lease.clone()];
        let tolerated = tolerate(&mut found, &[KnownGap::SlowDurableStore]);
        assert_eq!(tolerated.len(), 1);
        assert!(tolerated[0].detail.contains("put_if_absent"));
        assert_eq!(found.len(), 1, "a slow lease store stays a violation");
        assert!(found[0].detail.contains("move_tip"));
        let mut both = vec![slow, lease];
        assert_eq!(tolerate(&mut both, &[KnownGap::UnexplainedEnd]).len(), 2);
    }

    #[test]
    fn a_put_sent_again_that_never_settled_is_a_slow_store_for_ends_and_flushes() {
        let unsettled = "(replica-3#1: could not ship e00000005/log-000000000181: an earlier try \
                         still runs)";
        let mut found = vec![
            violation(
                "graceful-not-flushed",
                &format!("replica-3#1 did not flush t0 …: LEASEHOLD_UNSHIPPED {unsettled}"),
            ),
            violation(
                "unexplained-tenure-end",
                &format!("epoch 5 of t0 … {unsettled}"),
            ),
            violation(
                "graceful-not-flushed",
                "replica-3#1 did not flush t0 …: LEASEHOLD_DRAIN_TIMEOUT",
            ),
            violation("lost-acknowledged", &format!("t0 … {unsettled}")),
        ];
        let mut again = found.clone();
        let tolerated = tolerate(&mut found, &[KnownGap::SlowDurableStore]);
        assert_eq!(tolerated.len(), 2, "{tolerated:?}");
        let left: Vec<&str> = found.iter().map(|v| v.rule).collect();
        assert_eq!(left, ["graceful-not-flushed", "lost-acknowledged"]);
        assert!(found[0].detail.contains("DRAIN_TIMEOUT"));
        // Tolerating every unexplained end does not tolerate a flush that failed.
        let ends = tolerate(&mut again, &[KnownGap::UnexplainedEnd]);
        let ends: Vec<&str> = ends.iter().map(|v| v.rule).collect();
        assert_eq!(ends, ["unexplained-tenure-end"]);
    }

    #[test]
    fn a_leftover_list_is_tagged_by_what_it_holds() {
        assert_eq!(
            leftover_tag(&["a/e1/log-1.seg", "a/e1/log-2.seg"]),
            ONLY_SEGMENTS
        );
        assert_eq!(
            leftover_tag(&["a/e1/snap-000001.db", "a/e1/snap-000001.json"]),
            ONLY_IMAGES
        );
        assert_eq!(leftover_tag(&["a/e1/log-1.seg", "a/e1/snap-000001.db"]), "");
    }

    #[test]
    fn only_the_gaps_asked_for_are_tolerated() {
        let mut found = vec![
            violation(
                "forgotten-object-left",
                "t1 keeps 2 objects (segments only): …",
            ),
            violation("forgotten-object-left", "t1 keeps 2 objects: …"),
            violation(
                "orphan-object",
                "the image e00000001/snap-000002.db has no manifest",
            ),
            violation(
                "orphan-object",
                "the segment e00000001/log-000000000003 lies above the tip",
            ),
            violation("lost-acknowledged", "…"),
        ];
        let known = tolerate(
            &mut found,
            &[KnownGap::ForgottenSegment, KnownGap::OrphanImage],
        );
        assert_eq!(known.len(), 2);
        let left: Vec<&str> = found.iter().map(|v| v.rule).collect();
        assert_eq!(
            left,
            [
                "forgotten-object-left",
                "orphan-object",
                "lost-acknowledged"
            ]
        );
    }
}
