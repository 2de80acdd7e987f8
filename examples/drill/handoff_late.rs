//! `handoff-late-put` (opt-in until the runtime reconciles every put of unknown outcome): an
//! image put that timed out lands after its tenure was handed off (docs/guarantees.md, promise
//! 5, and the storage bound).
//!
//! ```text
//!  owner: image and manifest puts land 1.6 s late (past the 1 s store deadline)
//!         snapshot ──> times out (the image's put runs on)
//!         handoff  ──> ok (a logged handoff waits only for the log, not for an image)
//!  successor opens it, and then (one in two)
//!    forgets it ──> the late image lands at or below the floor        forgotten-object-left
//!    keeps it   ──> the late image lands beside no manifest: an orphan orphan-object (end audit)
//! ```
//!
//! The erasure is listed right after the forget, once `--erasure-bound-ms` later (the late put
//! has landed by then), and again in the end audit before any reopen. Neither the forgetting
//! replica (it never made the put) nor the old owner (its tenure ended) sweeps what lands.

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::{BoxError, Cluster};
use crate::opt_in::{LATE_PUT_MS, short};
use crate::protocol::{Answer, Op, STORE_DEADLINE, StoreFault};
use crate::rng::Rng;

/// How long a handoff or forget may take.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(12);

/// Injects one `handoff-late-put`; `Ok(None)` when no tenant can be moved.
pub async fn handoff_late_put(c: &Arc<Cluster>, rng: &mut Rng) -> Result<Option<String>, BoxError> {
    let Some((slot, owned)) = crate::faults::pick_owner(c, rng) else {
        return Ok(None);
    };
    let others: Vec<usize> = c.live_slots().into_iter().filter(|&i| i != slot).collect();
    let (Some(proc), Some(&tenant), Some(&next)) =
        (c.live(slot), rng.pick(&owned), rng.pick(&others))
    else {
        return Ok(None);
    };
    c.history.impair(&proc.label);
    let late = Op::Fault {
        fault: StoreFault::Late { ms: LATE_PUT_MS },
    };
    proc.call(late, Duration::from_secs(2))
        .await
        .map_err(|e| format!("late-put switch: {e:?}"))?;
    let snapshot = proc.call(Op::Snapshot { tenant }, STORE_DEADLINE * 3).await;
    let handed = proc.call(Op::Handoff { tenant }, LEAVE_TIMEOUT).await;
    c.history.graceful_asked();
    c.clear_owner_if(tenant, slot);
    let mut text = format!(
        "{}'s image puts land {LATE_PUT_MS} ms late; snapshot of t{tenant}: {}; handoff: {}",
        proc.label,
        short(&snapshot),
        short(&handed)
    );
    if let Ok(Answer::Done { epoch: Some(epoch) }) = handed {
        c.history.handoff_ok(tenant, epoch);
        match c.open_on(tenant, next).await {
            Ok(epoch) if rng.chance(50) => {
                text += &format!("; {} opened it (epoch {epoch})", c.slots[next].name);
                text += &forget(c, tenant, next).await;
            }
            Ok(epoch) => {
                text += &format!(
                    "; {} opened it (epoch {epoch}) and keeps it: the late image is an orphan \
                     of a live tenant",
                    c.slots[next].name
                );
            }
            Err(e) => text += &format!("; {} could not open it: {e}", c.slots[next].name),
        }
    }
    // Let the late puts land while the old owner lives, then clear its switch.
    tokio::time::sleep(Duration::from_millis(LATE_PUT_MS)).await;
    let clear = Op::Fault {
        fault: StoreFault::Clear,
    };
    proc.call(clear, Duration::from_secs(2)).await.ok();
    c.history.unimpair(&proc.label);
    Ok(Some(text))
}

/// Forgets `tenant` on slot `next` and lists the erasure right after and once the erasure
/// bound passed.
async fn forget(c: &Arc<Cluster>, tenant: u32, next: usize) -> String {
    let Some(successor) = c.live(next) else {
        return "; the successor is gone".into();
    };
    let forgotten = successor.call(Op::Forget { tenant }, LEAVE_TIMEOUT).await;
    c.clear_owner_if(tenant, next);
    let text = format!("; forgot it there: {}", short(&forgotten));
    crate::audit::after_forget(c, tenant, next, &forgotten).await;
    text
}
