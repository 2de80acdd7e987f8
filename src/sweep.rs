//! Sweeps: deleting what a superseded owner uploaded into a dead epoch (at or below the floor).
//!
//! The decision of what may go is [`crate::plan::sweepable_epochs`]; this module carries it out
//! against a durable store. The runtime sweeps a tenant beside its open; the operator command
//! (`leasehold sweep`) sweeps every tenant of a store, also those never opened again.

use crate::durable::{DurableStore, StoreError};
use crate::ids::LeaseKey;
use crate::lease::{LeaseError, LeaseStore};
use crate::plan::sweepable_epochs;

/// Deletes every epoch of `key` at or below `floor`. Returns how many objects went.
pub async fn sweep_dead_epochs(
    store: &dyn DurableStore,
    key: &LeaseKey,
    floor: u64,
) -> Result<usize, StoreError> {
    if floor == 0 {
        return Ok(0);
    }
    let listed = store.list(&key.prefix()).await?;
    let mut deleted = 0;
    for prefix in sweepable_epochs(key, &listed, floor) {
        deleted += store.delete_prefix(&prefix).await?;
    }
    Ok(deleted)
}

/// What a sweep of a whole store found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Tenants whose objects were looked at.
    pub tenants: usize,
    /// Tenants that had dead epochs and were swept.
    pub swept_tenants: usize,
    /// Objects deleted.
    pub objects: usize,
    /// Keys in the store that are not laid out as `<org>/<tenant>/…`; never touched.
    pub foreign_keys: usize,
}

/// Sweeps every tenant found in `store`: reads each tenant's floor from `leases` and deletes its
/// epochs at or below it. `progress(done, total)` is called after each tenant.
pub async fn sweep_store(
    store: &dyn DurableStore,
    leases: &dyn LeaseStore,
    mut progress: impl FnMut(usize, usize),
) -> Result<SweepReport, LeaseError> {
    let listed = store.list("").await?;
    let mut report = SweepReport::default();
    let mut keys: Vec<LeaseKey> = Vec::new();
    for object in &listed {
        let mut parts = object.splitn(3, '/');
        let parsed = match (parts.next(), parts.next()) {
            (Some(org), Some(tenant)) => LeaseKey::parse(&format!("{org}/{tenant}")).ok(),
            _ => None,
        };
        match parsed {
            // The listing is sorted, so a tenant's objects stand together.
            Some(k) if keys.last() != Some(&k) => keys.push(k),
            Some(_) => {}
            None => report.foreign_keys += 1,
        }
    }
    let total = keys.len();
    for (done, key) in keys.iter().enumerate() {
        report.tenants += 1;
        let floor = leases.read(key).await?.map_or(0, |r| r.floor);
        let n = sweep_dead_epochs(store, key, floor).await?;
        if n > 0 {
            report.swept_tenants += 1;
            report.objects += n;
        }
        progress(done + 1, total);
    }
    Ok(report)
}
