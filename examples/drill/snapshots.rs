//! `snapshot-burst`: an owner is asked for two or three explicit snapshots of one tenant, 50–300
//! ms apart (a host calling `TenantRef::snapshot`, say before a migration). Each new image runs
//! retention; runs that close together meet the retention window where images are sparse,
//! which is where a plan that forgets the window's base shows (docs/guarantees.md, the storage
//! bound): the point-in-time restores of `crate::pitr` then find a moment of the window that no
//! longer restores (`pitr-outside-retention`). Without a short `--retain-ms` retention deletes
//! nothing and the burst only adds images.

use std::sync::Arc;

use crate::cluster::{BoxError, Cluster};
use crate::opt_in::short;
use crate::protocol::{Op, STORE_DEADLINE};
use crate::rng::Rng;

/// Injects one `snapshot-burst`; `Ok(None)` when no replica owns a tenant.
pub async fn snapshot_burst(c: &Arc<Cluster>, rng: &mut Rng) -> Result<Option<String>, BoxError> {
    let Some((slot, owned)) = crate::faults::pick_owner(c, rng) else {
        return Ok(None);
    };
    let (Some(proc), Some(&tenant)) = (c.live(slot), rng.pick(&owned)) else {
        return Ok(None);
    };
    let mut answers = Vec::new();
    for _ in 0..2 + rng.below(2) {
        let answer = proc.call(Op::Snapshot { tenant }, STORE_DEADLINE * 4).await;
        answers.push(short(&answer));
        tokio::time::sleep(rng.millis(50, 300)).await;
    }
    // Right after the retention runs of the burst: a restore at the oldest moment of the
    // window the watcher saw.
    let scratch = c.run_dir().join("pitr-during");
    let retain = c.retain;
    crate::pitr::restore_now(&c.stores, &c.history, tenant, retain, &scratch, rng).await;
    Ok(Some(format!(
        "{} took snapshots of t{tenant} in a row: {answers:?}; a restore of the window's oldest \
         moment after them",
        proc.label
    )))
}
