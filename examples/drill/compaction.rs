//! The rule `image-overdue`: images are taken when due (docs/guarantees.md, "Compaction and the
//! storage bound": every `snapshot_every` a tenant checks whether `compaction` is due, and
//! takes an image at a cut of the log; the head moves to it once the tip holds its position).
//! Judged from the lease store and the manifests the store watcher reads, never from the
//! runtime's events:
//!
//! ```text
//!  every poll: segments since the head = tip.seq − (the head manifest's log position)
//!    ≥ compact_segments under tenure E (the tip's epoch)   ─> due since now (once)
//!    a new head whose position is past the one at `due`     ─> satisfied
//!    still due after `allowance`, and E still moved its tip ─> Overdue { tenant, E, since, … }
//! ```
//!
//! The checker drops an `Overdue` whose tenure's replica a fault touched meanwhile (a store
//! fault, a pause, a kill: images cannot be published then) or whose tenant was damaged; the
//! rest are violations. `allowance` is one `snapshot_every`, the image's publish (its put grown
//! with its size, the manifest, the head's move) and slack. The bytes trigger (64 MiB) is not
//! judged: the watcher does not fetch segment sizes.

use std::time::Duration;

use leasehold::layout::LogPos;

use crate::protocol::{SNAPSHOT_EVERY, STORE_DEADLINE};

/// Slack over one check interval and one publish: scheduling of several processes on two cores.
pub const DUE_SLACK: Duration = Duration::from_millis(2_500);

/// How long an image may take once due, for a ledger of about `image_bytes`.
pub fn allowance(image_bytes: u64) -> Duration {
    let put = leasehold::deadline::put_deadline(
        STORE_DEADLINE,
        usize::try_from(image_bytes).unwrap_or(usize::MAX),
    );
    SNAPSHOT_EVERY + put + 2 * STORE_DEADLINE + DUE_SLACK
}

/// A compaction that did not come in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overdue {
    /// The tenant.
    pub tenant: u32,
    /// The tenure that shipped on without an image.
    pub epoch: u64,
    /// Driver time it was first seen due.
    pub since: u64,
    /// Driver time it was found overdue.
    pub until: u64,
    /// Segments since the head then.
    pub segments: u64,
}

/// One tenant's compaction, as the watcher follows it.
#[derive(Debug, Default, Clone)]
pub struct DueTracker {
    /// `(tenure, since, tip seq, head position)` while due.
    due: Option<(u64, u64, u64, u64)>,
}

impl DueTracker {
    /// One poll at driver time `now`: the tip and the head image's log position (0 without
    /// a head) and size read together; `compact` is the run's segment count.
    pub fn observe(
        &mut self,
        tenant: u32,
        now: u64,
        tip: LogPos,
        head_log: u64,
        head_bytes: u64,
        compact: u64,
    ) -> Option<Overdue> {
        let segments = tip.seq.saturating_sub(head_log);
        match self.due {
            Some((epoch, _, _, at_head)) if epoch != tip.epoch || head_log > at_head => {
                self.due = None;
            }
            _ => {}
        }
        if segments < compact {
            self.due = None;
            return None;
        }
        let (epoch, since, at_tip, at_head) =
            *self.due.get_or_insert((tip.epoch, now, tip.seq, head_log));
        let late = now.saturating_sub(since) > allowance(head_bytes).as_millis() as u64;
        if late && tip.seq > at_tip {
            // Reported once; due again from now.
            self.due = Some((epoch, now, tip.seq, at_head));
            return Some(Overdue {
                tenant,
                epoch,
                since,
                until: now,
                segments,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tip(epoch: u64, seq: u64) -> LogPos {
        LogPos { epoch, seq }
    }

    const LATE: u64 = 60_000;

    #[test]
    fn an_image_taken_in_time_is_not_overdue() {
        let mut t = DueTracker::default();
        assert_eq!(t.observe(0, 1_000, tip(1, 70), 0, 0, 64), None);
        assert_eq!(t.observe(0, 2_000, tip(1, 90), 70, 0, 64), None);
        assert_eq!(t.observe(0, LATE, tip(1, 120), 70, 0, 64), None);
    }

    #[test]
    fn a_tenure_shipping_on_without_an_image_is_overdue_once() {
        let mut t = DueTracker::default();
        assert_eq!(t.observe(0, 1_000, tip(1, 70), 0, 0, 64), None);
        let found = t.observe(0, LATE, tip(1, 500), 0, 0, 64);
        assert_eq!(
            found,
            Some(Overdue {
                tenant: 0,
                epoch: 1,
                since: 1_000,
                until: LATE,
                segments: 500,
            })
        );
        assert_eq!(t.observe(0, LATE + 1, tip(1, 501), 0, 0, 64), None);
    }

    #[test]
    fn a_tenure_that_stopped_shipping_or_ended_is_not_judged() {
        let mut t = DueTracker::default();
        assert_eq!(t.observe(0, 1_000, tip(1, 70), 0, 0, 64), None);
        assert_eq!(t.observe(0, LATE, tip(1, 70), 0, 0, 64), None);
        // A successor: due again from its first poll.
        assert_eq!(t.observe(0, LATE + 1, tip(2, 71), 0, 0, 64), None);
        assert_eq!(t.observe(0, LATE + 2_000, tip(2, 90), 0, 0, 64), None);
    }

    #[test]
    fn a_big_image_gets_its_put_allowance() {
        assert!(allowance(64 << 20) >= allowance(0) + Duration::from_secs(8));
    }
}
