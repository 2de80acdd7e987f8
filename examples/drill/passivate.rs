//! The `passivate` fault (docs/guarantees.md, promise 12): a tenant's clients fall silent — its
//! route dropped and its open lock held, so none writes or opens it — for longer than
//! [`protocol::PASSIVATE_AFTER`]; its owner's idle check (asked at once through the control
//! protocol, `Op::Passivate`, besides the one the runtime arms by itself) lets it go: its log
//! settled or its final image published, its lease released, its local copy gone. Then the
//! clients come back and open it wherever they land, from the stores. The checker judges it
//! like every tenure end: nothing acknowledged may be missing from the stores.

use std::time::Duration;

use crate::cluster::{BoxError, Cluster};
use crate::faults::pick_owner;
use crate::protocol::{self, Answer, Op};
use crate::rng::Rng;

/// How long the replica may take to run its idle check and answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// Silences one tenant until its owner passivates it, then lets its clients reopen it.
pub async fn passivate(c: &Cluster, rng: &mut Rng) -> Result<Option<String>, BoxError> {
    let Some((slot, owned)) = pick_owner(c, rng) else {
        return Ok(None);
    };
    let (Some(&tenant), Some(proc)) = (rng.pick(&owned), c.live(slot)) else {
        return Ok(None);
    };
    let Some(lock) = usize::try_from(tenant)
        .ok()
        .and_then(|t| c.open_locks.get(t))
    else {
        return Ok(None);
    };
    // While this is held no client opens the tenant, and without a route none writes to it.
    let _silence = lock.lock().await;
    c.clear_owner_if(tenant, slot);
    tokio::time::sleep(protocol::PASSIVATE_AFTER + rng.millis(200, 600)).await;
    let asked = proc.call(Op::Passivate, ASK_TIMEOUT).await;
    // The passivation settles and releases on its own time; give it a moment, then look.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let read = proc.call(Op::Read { tenant }, ASK_TIMEOUT).await;
    let state = match (&asked, &read) {
        (Ok(Answer::Done { .. }), Ok(Answer::Failed { code, .. }))
            if code == protocol::NOT_OPEN =>
        {
            "passivated".to_string()
        }
        (Ok(Answer::Done { .. }), Ok(Answer::Keys { epoch, .. })) => {
            format!("still open (epoch {epoch}: busy or a ticket kept it)")
        }
        (asked, read) => format!("asked: {asked:?}; then: {read:?}"),
    };
    Ok(Some(format!(
        "{} idles t{tenant} past passivate_after: {state}; its clients reopen it",
        proc.label
    )))
}
