//! The tenant's lifecycle as a state machine, and the one rule of how it may move.
//!
//! ```text
//!                 ┌──────────── failed flush / drain timeout ────────────┐
//!                 v                                                      │
//!  opening ──> serving ──> draining ──> flushing ──> released            │
//!                 │  ^          │  ^_______│_________________________________┘
//!                 │  └──────────┘          │
//!                 ├──> abandoning ──> abandoned  (also from draining, flushing; a lost lease)
//!                 └──> forgetting ──> forgotten  (also from draining, flushing)
//!                           └──────> abandoned  (a forget that could not raise the floor)
//! ```
//! Everything moves forward except `serving <- draining | flushing`, when a handoff fails.
//! `released`, `abandoned` and `forgotten` are final.

use std::fmt;

/// Where a tenant is in its life on this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TenantStatus {
    /// The lease is being acquired and the head restored.
    Opening,
    /// Takes runs, admissions and snapshots.
    Serving,
    /// A handoff waits for admitted work; new calls are refused with `Draining`.
    Draining,
    /// The final image is being taken and published; every call is refused.
    Flushing,
    /// Handed off: the final image is published, the lease released, the local copy dropped.
    Released,
    /// Stopping like a crash: no flush; the local file is kept.
    Abandoning,
    /// Stopped without a flush (abandoned, or the lease was lost).
    Abandoned,
    /// Being erased: the floor is raised and every copy at or below it deleted.
    Forgetting,
    /// Erased.
    Forgotten,
}

impl TenantStatus {
    /// Whether a tenant may move from `self` to `to`.
    pub fn can_move_to(self, to: TenantStatus) -> bool {
        use TenantStatus::*;
        matches!(
            (self, to),
            (Opening, Serving | Abandoning | Abandoned)
                | (Serving, Draining | Abandoning | Abandoned | Forgetting)
                | (
                    Draining,
                    Flushing | Serving | Abandoning | Abandoned | Forgetting
                )
                | (
                    Flushing,
                    Released | Serving | Abandoning | Abandoned | Forgetting
                )
                | (Abandoning, Abandoned)
                | (Forgetting, Forgotten | Abandoned)
        )
    }

    /// Final states: nothing follows them.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            TenantStatus::Released | TenantStatus::Abandoned | TenantStatus::Forgotten
        )
    }

    /// States in which the tenant is leaving and refuses calls with `Draining`.
    pub fn is_leaving(self) -> bool {
        matches!(
            self,
            TenantStatus::Draining
                | TenantStatus::Flushing
                | TenantStatus::Abandoning
                | TenantStatus::Forgetting
        )
    }

    /// The lowercase name used in errors and events.
    pub fn as_str(self) -> &'static str {
        match self {
            TenantStatus::Opening => "opening",
            TenantStatus::Serving => "serving",
            TenantStatus::Draining => "draining",
            TenantStatus::Flushing => "flushing",
            TenantStatus::Released => "released",
            TenantStatus::Abandoning => "abandoning",
            TenantStatus::Abandoned => "abandoned",
            TenantStatus::Forgetting => "forgetting",
            TenantStatus::Forgotten => "forgotten",
        }
    }
}

/// A tenant's status, shared between its actor (which writes every change) and its handles
/// (which read it without a message, and after the actor has stopped); a router waiting for a
/// tenant to leave is woken at every change.
#[derive(Debug)]
pub(crate) struct StatusCell {
    /// The index of the status in [`StatusCell::ALL`].
    status: std::sync::atomic::AtomicU8,
    /// Woken at every change.
    changed: tokio::sync::Notify,
}

impl StatusCell {
    const ALL: [TenantStatus; 9] = [
        TenantStatus::Opening,
        TenantStatus::Serving,
        TenantStatus::Draining,
        TenantStatus::Flushing,
        TenantStatus::Released,
        TenantStatus::Abandoning,
        TenantStatus::Abandoned,
        TenantStatus::Forgetting,
        TenantStatus::Forgotten,
    ];

    /// A cell reading `status`.
    pub(crate) fn new(status: TenantStatus) -> Self {
        let cell = Self {
            status: std::sync::atomic::AtomicU8::new(0),
            changed: tokio::sync::Notify::new(),
        };
        cell.set(status);
        cell
    }

    /// Records `status`.
    pub(crate) fn set(&self, status: TenantStatus) {
        let index = Self::ALL.iter().position(|s| *s == status).unwrap_or(0);
        self.status
            .store(index as u8, std::sync::atomic::Ordering::Release);
        self.changed.notify_waiters();
    }

    /// The status last recorded.
    pub(crate) fn get(&self) -> TenantStatus {
        let index = self.status.load(std::sync::atomic::Ordering::Acquire);
        Self::ALL[usize::from(index) % Self::ALL.len()]
    }

    /// Waits while the status satisfies `pred`, until `deadline`; returns the status it ended
    /// with (one that still satisfies `pred` when the deadline came).
    pub(crate) async fn wait_while(
        &self,
        pred: impl Fn(TenantStatus) -> bool,
        deadline: tokio::time::Instant,
    ) -> TenantStatus {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the status is read: a change right after the read wakes it.
            changed.as_mut().enable();
            let now = self.get();
            if !pred(now) || tokio::time::timeout_at(deadline, changed).await.is_err() {
                return self.get();
            }
        }
    }
}

impl fmt::Display for TenantStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::TenantStatus::{self, *};

    const ALL: [TenantStatus; 9] = [
        Opening, Serving, Draining, Flushing, Released, Abandoning, Abandoned, Forgetting,
        Forgotten,
    ];

    /// The order of the main line; side states rank after the state they leave from.
    fn rank(s: TenantStatus) -> u8 {
        match s {
            Opening => 0,
            Serving => 1,
            Draining => 2,
            Flushing => 3,
            Abandoning | Forgetting => 4,
            Released | Abandoned | Forgotten => 5,
        }
    }

    #[test]
    fn status_only_moves_forward_except_back_to_serving_after_a_failed_handoff() {
        for from in ALL {
            for to in ALL {
                if from.can_move_to(to) && rank(to) <= rank(from) {
                    assert!(
                        matches!((from, to), (Draining | Flushing, Serving)),
                        "{from} -> {to} moves backwards"
                    );
                }
            }
        }
        assert!(Draining.can_move_to(Serving));
        assert!(Flushing.can_move_to(Serving));
    }

    #[test]
    fn final_states_have_no_way_out_and_side_states_lead_only_to_final_ones() {
        for from in ALL.into_iter().filter(|s| s.is_final()) {
            assert!(ALL.iter().all(|&to| !from.can_move_to(to)), "{from}");
        }
        assert_eq!(
            ALL.iter().filter(|&&to| Abandoning.can_move_to(to)).count(),
            1
        );
        assert_eq!(
            ALL.iter().filter(|&&to| Forgetting.can_move_to(to)).count(),
            2
        );
        assert!(Forgetting.can_move_to(Forgotten));
        assert!(
            Forgetting.can_move_to(Abandoned),
            "a forget that could not raise the floor ends like an abandon"
        );
        assert!(
            !Abandoning.can_move_to(Forgetting),
            "a forget never overtakes an abandon"
        );
        assert!(
            !Forgetting.can_move_to(Abandoning),
            "an abandon never overtakes a forget"
        );
    }
}
