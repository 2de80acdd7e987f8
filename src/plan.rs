//! Pure decisions, functions of their inputs only: what a sweep may delete, in the durable store
//! and on a replica's disk; what becomes of a put of unknown outcome ([`reconcile`]) and what a
//! crashed process left in a live tenant ([`orphans`]). (The others live
//! beside their types: whether a lease holds is [`crate::lease::LeaseTerm`], which image a
//! restore falls back to is [`crate::image::next_candidate`], how a tenant's state may move is
//! `leasehold_actors::TenantStatus::can_move_to`.)
//!
//! The actors and the operator command carry them out; tests check them without actors, stores
//! or clocks.

pub mod orphans;
pub mod reconcile;
pub mod retention;

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

/// The keys in `listed` (one page of a tenant's listing, say) that lie in an epoch of `key` at or
/// below `floor`: what a sweep deletes one by one. Keys outside `key`'s prefix or the layout are
/// never chosen.
pub fn dead_keys<'a>(key: &LeaseKey, listed: &'a [String], floor: u64) -> Vec<&'a String> {
    listed
        .iter()
        .filter(|k| epoch_of(key, k).is_some_and(|e| e <= floor))
        .collect()
}

/// Whether a replica's local copy of a tenant is dead: its tenure (`marker`, the epoch recorded
/// in the tenant's directory) is at or below the floor, so it holds only forgotten writes. A copy
/// without a marker is never judged dead.
pub fn local_copy_is_dead(marker: Option<u64>, floor: u64) -> bool {
    marker.is_some_and(|epoch| epoch <= floor)
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
        assert_eq!(
            dead_keys(&key("t1"), &listed, 1),
            [&listed[0], &listed[1]],
            "epoch 1 only, and never t10's nor a stray key"
        );
        assert!(dead_keys(&key("t1"), &listed, 0).is_empty());
    }

    #[test]
    fn a_local_copy_is_dead_only_when_its_known_tenure_is_at_or_below_the_floor() {
        assert!(local_copy_is_dead(Some(1), 2));
        assert!(local_copy_is_dead(Some(2), 2));
        assert!(!local_copy_is_dead(Some(3), 2));
        assert!(!local_copy_is_dead(Some(1), 0));
        assert!(
            !local_copy_is_dead(None, 9),
            "without a marker nothing is deleted"
        );
    }
}
