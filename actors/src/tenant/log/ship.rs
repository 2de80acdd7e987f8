//! The store calls of one segment ([`ship`]): its put, then — once the segment before it is the
//! tip — its tip move, every put entered in the replica's reconciliation ledger first
//! (docs/guarantees.md, the change log, "Pipelined segments" and "Reconciling puts of unknown
//! outcome"). The bookkeeping around it is [`super::LogShip`]'s.

use std::sync::Arc;

use leasehold::Error;
use leasehold::clock::duration_ms;
use leasehold::deadline::put_deadline;
use leasehold::durable::{Put, StoreError};
use leasehold::layout::{LogPos, segment_key};
use leasehold::lease::LeaseError;
use leasehold::plan::reconcile::PutOf;

use super::{PUT_RETRIES, TIP_RETRIES, TipOrder};
use crate::lease_actor::LeaseCell;
use crate::reconcile::Deadlines;
use crate::runtime::Runtime;

/// Whether a segment of the tenure of `cell` may be sent: on `Async`, only while the lease cell
/// holds; otherwise while the tenure is not known to be over — right after a commit whose lease
/// check passed, or a tip move the store confirmed, the store, not the holder's clock, decides
/// whether the segment counts. A put sent again (its first try timed out) comes later than
/// that, and only while the cell holds, in every mode.
fn may_send(rt: &Runtime, cell: &LeaseCell) -> bool {
    match rt.durability {
        crate::config::Durability::Async { .. } => cell.holds(rt.now_ms()),
        _ => !cell.is_ended(),
    }
}

/// Ships one segment: put it under its key, then — once the segment before it is the tip
/// (`order`) — move the tip from `from` to `to`. `Ok` only
/// when the lease store confirmed the tip: then the segment is the log's, whatever happens to
/// this replica next. A refused move (the lease is gone) is `Fenced` and ends the cell; any
/// other failure is [`Error::Unshipped`], whose outcome is unknown.
///
/// The put is entered in the replica's ledger before it is sent and leaves it only once the tip
/// names it: on every other way out — a failed put, a refused or unanswered move, or this future
/// dropped with its actor — the replica's reconciliation finds the segment named by the tip's
/// chain or deletes it once the put has settled (docs/guarantees.md, "Reconciling puts of unknown
/// outcome"). A put that timed out is sent again, up to `PUT_RETRIES` times, while the lease
/// cell holds. No put leaves a tenure known to be over; with `Async`, whose cuts come on a timer
/// rather than right after a commit's lease check or a confirmed tip move, none leaves once the
/// lease cell no longer holds (docs/guarantees.md, "the erasure bound").
pub(crate) async fn ship(
    rt: Arc<Runtime>,
    cell: Arc<LeaseCell>,
    from: Option<LogPos>,
    to: LogPos,
    bytes: Vec<u8>,
    order: TipOrder,
) -> Result<(), Error> {
    let TipOrder { after, done } = order;
    let key = cell.key.clone();
    let unshipped = |reason: String| Error::Unshipped {
        key: key.to_string(),
        reason,
    };
    if !may_send(&rt, &cell) {
        return Err(Error::Fenced {
            key: key.to_string(),
        });
    }
    let skey = segment_key(&key, to);
    let deadlines = Deadlines {
        puts_ms: duration_ms(put_deadline(rt.store_deadline, bytes.len())),
    };
    let put = PutOf::Segment { pos: to };
    let tracked = rt.reconciler().track(&cell, put, rt.now_ms(), deadlines);
    let mut put_tries = 0;
    let answer = loop {
        match rt.durable.put_if_absent(&skey, bytes.clone()).await {
            Err(StoreError::Timeout { .. })
                if put_tries < PUT_RETRIES && cell.holds(rt.now_ms()) =>
            {
                put_tries += 1;
                tracing::warn!(tenant = %key, segment = %to, tries = put_tries, "segment put timed out; sending it again");
                // The entry's deadline runs from the last send: the reconciliation must not
                // judge the put before this try could have landed.
                tracked.resent(rt.now_ms());
            }
            answer => break answer,
        }
    };
    match answer {
        Ok(Put::Created) => tracked.answered(),
        Ok(Put::AlreadyExists) => {
            // An earlier try of this very put may have landed (a retried request), or may still
            // run (S3 answers a create racing another write of the key with 409, which reads as
            // `AlreadyExists` with nothing there yet): let every try of the key settle, then
            // look at what the key holds. Its size is enough, and a HEAD is all it costs (a
            // read-back of a large segment on a slow link outlived its deadline): the key names
            // this tenure's epoch and this position, which only this tenure writes, once, with
            // these bytes — an object there of their length is ours (and a damaged one is
            // caught by every restore's checksums).
            let settle = put_deadline(rt.store_deadline, bytes.len());
            if rt.durable.settle_put(&skey, settle).await.is_err() {
                return Err(unshipped(format!("{skey}: an earlier try still runs")));
            }
            let found = rt
                .durable
                .size(&skey)
                .await
                .map_err(|e| unshipped(e.to_string()))?;
            match found {
                Some(size) if size == bytes.len() as u64 => tracked.answered(),
                Some(size) => {
                    tracked.not_ours(&skey);
                    return Err(unshipped(format!(
                        "{skey} already holds {size} bytes, not these {}",
                        bytes.len()
                    )));
                }
                // Nothing there after every try settled: nothing of this put can land; the
                // entry keeps the key (absent is not another writer's).
                None => return Err(unshipped(format!("{skey}: answered AlreadyExists, absent"))),
            }
        }
        // No tip move was asked for it: the reconciliation deletes it once the put settles.
        Err(e) => return Err(unshipped(format!("put {skey}: {e}"))),
    }
    // Tips move in log order: the segment before this one must be the tip first. If it never
    // will be, no move is asked for this one, and the reconciliation deletes it (never asked).
    if let Some(after) = after
        && after.await.is_err()
    {
        return Err(unshipped(format!(
            "the segment before {to} was not shipped, so its tip move is never asked"
        )));
    }
    let mut tries = 0;
    loop {
        let asked = leasehold::lease::TipMove {
            key: key.clone(),
            owner: rt.replica.as_str().to_string(),
            epoch: cell.epoch,
            from,
            to,
        };
        tracked.asking();
        match rt.tips.move_tip(asked).await {
            Ok(_) => {
                tracked.named();
                // The next segment in flight may ask for its move now.
                let _ = done.send(());
                return Ok(());
            }
            Err(e) if e.outcome_unknown() && tries < TIP_RETRIES => tries += 1,
            Err(LeaseError::NotHeld { .. }) if tries == 0 => {
                // The first and only ask was refused: the tip never named this segment, so no
                // restore can read it; the reconciliation takes it back (a zombie's segment
                // must not outlive a successor's forget).
                cell.end();
                tracked.refused();
                return Err(Error::Fenced {
                    key: key.to_string(),
                });
            }
            Err(e @ LeaseError::NotHeld { .. }) => {
                // An earlier try of this move may have landed before the lease went: unknown.
                cell.end();
                return Err(unshipped(format!("moving the tip to {to}: {e}")));
            }
            Err(e) => {
                if tries == 0 && !e.outcome_unknown() {
                    tracked.refused();
                }
                return Err(unshipped(format!("moving the tip to {to}: {e}")));
            }
        }
    }
}
