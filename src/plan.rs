//! Pure decisions, functions of their inputs and `now` only: what a sweep may delete, when a
//! drain is over. The actors and the operator CLI carry them out; tests check them here without
//! actors, stores or clocks.

use std::collections::BTreeSet;

use crate::ids::LeaseKey;
use crate::layout::epoch_of;

/// The epoch prefixes (`<key>/e<epoch:08>/`) a sweep may delete: those of epochs at or below
/// `floor` that appear in `listed`. Keys outside `key`'s prefix or the layout are never chosen.
pub fn sweepable_epochs(key: &LeaseKey, listed: &[String], floor: u64) -> Vec<String> {
    let epochs: BTreeSet<u64> = listed
        .iter()
        .filter_map(|k| epoch_of(key, k))
        .filter(|&e| e <= floor)
        .collect();
    epochs
        .into_iter()
        .map(|e| crate::layout::epoch_prefix(key, e))
        .collect()
}

/// Where a drain stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainState {
    /// Admitted work is still running and the deadline has not passed.
    Waiting,
    /// Nothing admitted is running: the tenant can freeze and flush.
    Drained,
    /// The deadline passed with work still running: the handoff fails, the tenant serves again.
    TimedOut,
}

/// Whether a drain that started at `started_ms` with deadline `timeout_ms` is over at `now_ms`,
/// given how much admitted work is still running. Work that finished wins over a deadline that
/// passed in the same instant.
pub fn drain_state(started_ms: u64, timeout_ms: u64, now_ms: u64, running: usize) -> DrainState {
    if running == 0 {
        DrainState::Drained
    } else if now_ms >= started_ms.saturating_add(timeout_ms) {
        DrainState::TimedOut
    } else {
        DrainState::Waiting
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{OrgId, TenantId};

    fn key(t: &str) -> LeaseKey {
        LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new(t).unwrap())
    }

    #[test]
    fn a_sweep_takes_only_epochs_at_or_below_the_floor_of_its_own_tenant() {
        let listed: Vec<String> = [
            "acme/t1/e00000001/snap-000001.db",
            "acme/t1/e00000001/snap-000001.json",
            "acme/t1/e00000002/snap-000009.db",
            "acme/t1/e00000003/snap-000001.db",
            "acme/t10/e00000001/snap-000001.db",
            "acme/t1/stray.json",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            sweepable_epochs(&key("t1"), &listed, 2),
            vec!["acme/t1/e00000001/", "acme/t1/e00000002/"]
        );
        assert!(sweepable_epochs(&key("t1"), &listed, 0).is_empty());
    }

    #[test]
    fn a_drain_ends_when_work_is_done_or_the_deadline_passes() {
        assert_eq!(drain_state(100, 50, 120, 1), DrainState::Waiting);
        assert_eq!(drain_state(100, 50, 150, 1), DrainState::TimedOut);
        assert_eq!(drain_state(100, 50, 150, 0), DrainState::Drained);
        assert_eq!(drain_state(100, 50, 100, 0), DrainState::Drained);
    }
}
