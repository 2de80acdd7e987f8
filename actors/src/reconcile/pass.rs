//! One reconciliation pass: the due puts of unknown outcome, the forgotten tenants whose
//! erasure is due, the live tenants whose orphan candidates are to be looked at again. Every
//! decision is the pure [`verdict`]; this file gathers what it asks for and carries it out.

use std::time::Duration;

use leasehold::durable::StoreError;
use leasehold::layout::{LogPos, segment_of};
use leasehold::lease::LeaseError;
use leasehold::plan::reconcile::{PutOf, Seen, Verdict, is_due, verdict};
use leasehold::sweep::{SWEEP_PAGE_KEYS, finish_erasure};
use leasehold::{Error, LeaseKey};

use super::{Cx, ReconcileReport};
use crate::events::Event;

/// How many forgotten tenants one pass sweeps again at most.
pub(crate) const ERASURES_PER_PASS: usize = 64;

/// One entry's state, copied out of the ledger so that no lock is held across a store call.
#[derive(Debug, Clone)]
struct Due {
    id: u64,
    tenant: LeaseKey,
    put: PutOf,
    keys: Vec<String>,
    naming: leasehold::plan::reconcile::Naming,
    runs_here: bool,
    fenced: bool,
}

/// Runs one pass: the due entries, the erasures due, the orphan looks due; `closing`: the
/// replica is closing, so every entry its work let go of is due (its put must still have
/// settled), and no orphan look is begun.
pub(crate) async fn run(cx: &Cx, closing: bool) -> ReconcileReport {
    let mut report = run_entries(cx, closing).await;
    let _one_at_a_time = cx.reconciler.pass.lock().await;
    sweep_due_erasures(cx, &mut report).await;
    if !closing {
        super::orphans::recheck_due(cx, &mut report).await;
    }
    report
}

/// Judges the entries due.
pub(crate) async fn run_entries(cx: &Cx, closing: bool) -> ReconcileReport {
    let _one_at_a_time = cx.reconciler.pass.lock().await;
    let mut report = ReconcileReport::default();
    let now = cx.now_ms();
    let due: Vec<Due> = {
        let ledger = cx.reconciler.ledger();
        report.waiting = ledger.entries.len();
        ledger
            .entries
            .iter()
            .filter(|(_, e)| {
                !e.held && (e.due_at_once() || is_due(e.started_ms, e.deadline_ms(), now, closing))
            })
            .map(|(id, e)| Due {
                id: *id,
                tenant: e.tenant.clone(),
                put: e.put,
                keys: e.keys.clone(),
                naming: e.naming,
                runs_here: e.tenure_runs_here(),
                fenced: e.fenced,
            })
            .collect()
    };
    for entry in due {
        match judge(cx, entry.clone()).await {
            Ok(Some(deleted)) => {
                cx.reconciler.ledger().entries.remove(&entry.id);
                report.waiting -= 1;
                if deleted > 0 {
                    report.deleted += deleted;
                    cx.events.emit(Event::TakenBack {
                        key: entry.tenant.to_string(),
                        objects: deleted,
                    });
                } else {
                    report.kept += 1;
                }
            }
            Ok(None) => {}
            Err(e) => {
                report.failures += 1;
                tracing::debug!(key = %entry.tenant, error = %e, "a put of unknown outcome stays for the next pass");
            }
        }
    }
    report
}

/// Judges one entry: `Some(n)` once it is settled (`n` objects deleted, 0 when kept), `None`
/// while it must wait. A store error leaves it for the next pass.
async fn judge(cx: &Cx, mut entry: Due) -> Result<Option<usize>, Error> {
    for key in &entry.keys {
        match cx.durable.settle_put(key, Duration::ZERO).await {
            Ok(()) => {}
            Err(StoreError::Timeout { .. }) => return Ok(None), // still running
            Err(e) => return Err(e.into()),
        }
    }
    let mut record = cx.leases.read(&entry.tenant).await?;
    let mut later_at_seq = None;
    loop {
        let seen = Seen {
            record: record.as_ref(),
            tenure_runs_here: entry.runs_here,
            tenure_fenced: entry.fenced,
            later_at_seq,
        };
        match verdict(entry.put, entry.naming, &seen) {
            Verdict::Keep => return Ok(Some(0)),
            Verdict::Wait => return Ok(None),
            Verdict::Delete => {
                cx.durable.delete_keys(&entry.keys).await?;
                return Ok(Some(entry.keys.len()));
            }
            Verdict::ReleaseFirst => {
                fence(cx, &entry).await?;
                entry.fenced = true;
                if let Some(e) = cx.reconciler.ledger().entries.get_mut(&entry.id) {
                    e.fenced = true;
                }
                record = cx.leases.read(&entry.tenant).await?;
            }
            Verdict::ListSegmentsAtSeq => {
                let (PutOf::Segment { pos }, Some(r)) = (entry.put, record.as_ref()) else {
                    return Ok(None);
                };
                later_at_seq = Some(later_segment_at(cx, &entry.tenant, pos, r.floor).await?);
            }
        }
    }
}

/// Releases the lease of the tenure that put `entry`: once the store answered (released, or
/// not held any more), no move of that tenure can land.
async fn fence(cx: &Cx, entry: &Due) -> Result<(), Error> {
    let (owner, epoch) = (cx.replica.as_str(), entry.put.epoch());
    match cx.leases.release(&entry.tenant, owner, epoch).await {
        Ok(()) => {
            cx.events.emit(Event::TenureFenced {
                key: entry.tenant.to_string(),
                epoch,
            });
            Ok(())
        }
        Err(LeaseError::NotHeld { .. }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Whether a segment of an epoch above `pos`'s (and above `floor`) sits at `pos.seq`.
async fn later_segment_at(
    cx: &Cx,
    tenant: &LeaseKey,
    pos: LogPos,
    floor: u64,
) -> Result<bool, Error> {
    let prefix = tenant.prefix();
    let mut after: Option<String> = None;
    loop {
        let page = cx
            .durable
            .list_page(&prefix, after.as_deref(), SWEEP_PAGE_KEYS)
            .await?;
        let found = page
            .keys
            .iter()
            .filter_map(|k| segment_of(tenant, k))
            .any(|p| p.seq == pos.seq && p.epoch > pos.epoch && p.epoch > floor);
        if found {
            return Ok(true);
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(false),
        }
    }
}

/// Sweeps again every forgotten tenant whose erasure is due (its forget is `put_lifetime` old
/// by the lease store's clock, whoever forgot it) and marks it done once nothing at or below its
/// floor is left. A sweep that fails leaves it pending for the next pass (hole 11 of
/// docs/testing.md).
async fn sweep_due_erasures(cx: &Cx, report: &mut ReconcileReport) {
    let due = match cx
        .leases
        .erasures_due(cx.put_lifetime, ERASURES_PER_PASS)
        .await
    {
        Ok(due) => due,
        Err(e) => {
            report.failures += 1;
            tracing::warn!(error = %e, "reading the erasures due failed; the next pass asks again");
            return;
        }
    };
    for erasure in due {
        let key = erasure.key.to_string();
        let (durable, leases) = (cx.durable.as_ref(), cx.leases.as_ref());
        let finished = finish_erasure(durable, leases, &erasure.key, erasure.floor).await;
        let event = match finished {
            Ok(objects) => {
                report.erasures_done += 1;
                report.deleted += objects;
                Event::Swept { key, objects }
            }
            Err(e) => {
                report.failures += 1;
                Event::SweepFailed {
                    key,
                    error: e.to_string(),
                }
            }
        };
        cx.events.emit(event);
    }
}
