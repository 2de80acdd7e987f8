//! The rule `unexplained-tenure-end`: every tenure that ended is explained by a fault, a
//! handoff, a forget or a close (docs/testing.md, the process drill). A tenure ended when a
//! later tenure of its tenant acquired the lease, or when its replica said it was released,
//! lost or forgotten; what explains it is the driver's own record, never the runtime's:
//!
//! ```text
//!  tenure (tenant, epoch), granted to replica R at `start`, ended by `end`
//!    explained  ⇐  the driver asked R for a handoff or forget of that tenant in [start, end],
//!                  or a close of R before `end`
//!               ⇐  R never opened it and a later epoch was granted (an open whose acquire
//!                  landed too late or whose restore failed: `Tenure::never_began`)
//!               ⇐  a fault impaired R (or every replica: a SIGSTOP may hold the lease store's
//!                  lock) at some time in [start, end]
//!               ⇐  a passivation: R released it flushed, and the driver's own record shows
//!                  nothing sent to the tenant on R for `PASSIVATE_AFTER` at some time in
//!                  [start, end] (docs/guarantees.md, promise 12)
//!    otherwise  ─> unexplained-tenure-end: the runtime ended a tenure nobody asked it to end
//!                  and no fault forced (a ship that timed out on a healthy store, a sweep that
//!                  failed, a lease lost with no fault)
//! ```
//!
//! A tenure with no grant (known only from its writes) and one that has not ended are not
//! judged. The replica's `ship_failed` line, when there is one, only adds its reason to the text.

use crate::checker::{Report, Successors, Violation};
use crate::history::Record;
use crate::history::acts::LeaveKind;
use crate::store_rules::{impaired_between, later_tenures, ship_failure, tenure_end};

/// What the rule found besides its violations.
#[derive(Debug, Default, Clone, Copy)]
pub struct Ends {
    /// Tenures that ended.
    pub ended: u64,
    /// Of those, explained by a handoff, forget or close asked for.
    pub asked: u64,
    /// Of those, explained by a fault.
    pub faulted: u64,
    /// Of those, explained by a passivation after an idle spell the driver saw.
    pub passivated: u64,
}

/// How much shorter than `PASSIVATE_AFTER` an idle spell seen by the driver may be: its times
/// are taken around each call, the replica's inside it, on the same clock.
const IDLE_SLACK_MS: u64 = 50;

/// Whether the driver's record shows `tenant` sent nothing on `replicas` for `PASSIVATE_AFTER`
/// at some time in `[start, end]`. The runtime counts a tenant idle from the last request it
/// received (a write still shipping does not keep it open; its log settles before the lease
/// goes), so the driver's invoke times bound the runtime's idle spell from outside.
///
/// A request to an address may reach the holder through any replica (forwarded), so a write
/// sent to an address counts when it was acknowledged under this tenure (`epoch`), whichever
/// replica it went through; one refused or unanswered is not counted (it may never have reached
/// the holder: counting it could call a true passivation unexplained). Every answered query of
/// the tenant counts (an answer does not say where it ran; one answered after the passivation
/// was judged falls after the idle spell it needed, so it cannot hide one).
fn idle_spell(
    rec: &Record,
    tenant: u32,
    epoch: u64,
    replicas: &[&str],
    start: u64,
    end: u64,
) -> bool {
    let reached = |w: &&crate::history::WriteOp| {
        if replicas.contains(&w.replica.as_str()) {
            return true;
        }
        rec.addresses.sent.contains(&w.req)
            && matches!(w.outcome, crate::history::Outcome::Ok { epoch: e, .. } if e == epoch)
    };
    let writes = (rec.writes.iter())
        .filter(|w| w.tenant == tenant)
        .filter(reached)
        .map(|w| w.invoke_ms);
    let queries = (rec.addresses.queries.iter())
        .filter(|q| q.tenant == tenant)
        .map(|q| q.sent_at);
    let mut sent: Vec<u64> = writes
        .chain(queries)
        .filter(|at| (start..=end).contains(at))
        .collect();
    sent.sort_unstable();
    let need = (crate::protocol::PASSIVATE_AFTER.as_millis() as u64).saturating_sub(IDLE_SLACK_MS);
    let mut last = start;
    for at in sent.into_iter().chain(std::iter::once(end)) {
        if at.saturating_sub(last) >= need {
            return true;
        }
        last = at;
    }
    false
}

/// `image-overdue` (`crate::compaction`): a compaction the watcher found overdue is a
/// violation unless a fault touched the tenure's replica, or a segment of the tenant was
/// damaged, meanwhile, or the tenure had been asked to leave by then (a logged flush publishes
/// no image: the successor compacts; an overdue found before the leave was reported then).
pub fn check_overdue(rec: &Record, report: &mut Report) {
    for o in &rec.overdue {
        let Some(tenure) = rec.tenures.get(&(o.tenant, o.epoch)) else {
            continue;
        };
        let leaving = |replica: &str| {
            rec.leaves.iter().any(|l| {
                l.replica == replica
                    && l.tenant.is_none_or(|t| t == o.tenant)
                    && l.at <= o.until
                    && tenure.grants.iter().any(|g| g.acquired_hi <= l.at)
            })
        };
        let excused =
            tenure.grants.iter().any(|g| {
                impaired_between(rec, &g.replica, o.since, o.until) || leaving(&g.replica)
            }) || rec.damages.iter().any(|d| {
                d.tenant == o.tenant
                    && d.at <= o.until
                    && d.repaired_at.is_none_or(|b| b >= o.since)
            });
        if excused {
            continue;
        }
        report.violations.push(Violation {
            rule: "image-overdue",
            tenant: Some(o.tenant),
            at: o.until,
            detail: format!(
                "epoch {} of t{} shipped on with {} segments since its head image for {} ms \
                 (compaction due since {}); no fault touched its replica",
                o.epoch,
                o.tenant,
                o.segments,
                o.until - o.since,
                o.since
            ),
        });
    }
}

/// Judges every ended tenure of `rec`; violations go to `report`.
pub fn check_tenure_ends(rec: &Record, report: &mut Report) -> Ends {
    let successors = Successors::new(&rec.tenures);
    let mut ends = Ends::default();
    for (&(tenant, epoch), tenure) in &rec.tenures {
        let Some(start) = tenure.acquired_hi() else {
            continue;
        };
        let successor = successors.of(tenant, epoch, &rec.tenures).map(|(_, hi)| hi);
        if tenure.ended_at.is_none() && successor.is_none() {
            continue;
        }
        let end = tenure_end(Some(tenure), successor, u64::MAX);
        ends.ended += 1;
        let replicas: Vec<&str> = tenure.grants.iter().map(|g| g.replica.as_str()).collect();
        // A close ends the process's every tenure, also one whose open completed after the
        // close began (the close hands it off); a handoff or forget, the tenure it reached.
        let asked = rec.leaves.iter().any(|l| {
            replicas.contains(&l.replica.as_str())
                && match l.kind {
                    LeaveKind::Close => l.at <= end,
                    _ => l.tenant == Some(tenant) && (start..=end).contains(&l.at),
                }
        });
        if asked {
            ends.asked += 1;
            continue;
        }
        if tenure.never_began(&later_tenures(rec, tenant, epoch)) {
            ends.asked += 1;
            continue;
        }
        if replicas
            .iter()
            .any(|r| impaired_between(rec, r, start, end))
        {
            ends.faulted += 1;
            continue;
        }
        if tenure.released == Some(true) && idle_spell(rec, tenant, epoch, &replicas, start, end) {
            ends.passivated += 1;
            continue;
        }
        let why = ship_failure(rec, tenant, &replicas, start, end);
        report.violations.push(Violation {
            rule: "unexplained-tenure-end",
            tenant: Some(tenant),
            at: end.min(crate::protocol::now_ms()),
            detail: format!(
                "epoch {epoch} of t{tenant} on {replicas:?} ended though no handoff, forget or \
                 close was asked of it and no fault touched its replica{why}"
            ),
        });
    }
    ends
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::addresses::QueryOp;
    use crate::history::{Outcome, WriteOp};

    /// The holder's label.
    const HOLDER: &str = "replica-1#1";

    /// A write of t0 sent through `via` at `at` (request `req`), acknowledged.
    fn write(rec: &mut Record, req: u64, via: &str, at: u64) {
        rec.writes.push(WriteOp {
            tenant: 0,
            key: format!("n{req}"),
            replica: via.into(),
            req,
            invoke_ms: at,
            done_ms: Some(at + 5),
            outcome: Outcome::Ok {
                epoch: 1,
                run_at: at + 1,
                ack_at: at + 2,
                late: false,
            },
            zombie: false,
        });
    }

    /// `PASSIVATE_AFTER` in ms.
    fn after() -> u64 {
        crate::protocol::PASSIVATE_AFTER.as_millis() as u64
    }

    /// The spell asked of every case: t0's tenure on the holder from 0 to one and a half idle
    /// times: idle unless something reached it in between.
    fn idle(rec: &Record) -> bool {
        idle_spell(rec, 0, 1, &[HOLDER], 0, after() * 3 / 2)
    }

    /// The middle of the tenure: a request then leaves no stretch of `PASSIVATE_AFTER`.
    fn middle() -> u64 {
        after() * 3 / 4
    }

    #[test]
    fn a_tenant_nobody_wrote_to_was_idle() {
        let mut rec = Record::default();
        write(&mut rec, 1, HOLDER, 0);
        assert!(idle(&rec));
        // An owner client's write to another replica did not reach the holder.
        write(&mut rec, 2, "replica-2#1", middle());
        assert!(idle(&rec));
    }

    #[test]
    fn a_write_through_another_replica_acknowledged_by_this_tenure_keeps_it_busy() {
        let mut rec = Record::default();
        write(&mut rec, 1, "replica-2#1", middle());
        rec.addresses.sent.insert(1);
        rec.addresses.ran_on.insert(1, "replica-1".into());
        assert!(!idle(&rec), "forwarded to the holder");
    }

    #[test]
    fn a_write_to_an_address_not_acknowledged_by_this_tenure_is_not_counted() {
        let mut rec = Record::default();
        write(&mut rec, 1, "replica-2#1", middle());
        rec.addresses.sent.insert(1);
        // No answer: it may never have reached the holder (its replica killed, say).
        rec.writes[0].outcome = Outcome::Unknown {
            why: "no answer".into(),
        };
        assert!(idle(&rec));
        // Acknowledged by another tenure (epoch 2): it ran elsewhere.
        rec.writes[0].outcome = Outcome::Ok {
            epoch: 2,
            run_at: middle() + 1,
            ack_at: middle() + 2,
            late: false,
        };
        assert!(idle(&rec));
    }

    #[test]
    fn a_query_through_any_replica_keeps_it_busy() {
        let mut rec = Record::default();
        rec.addresses.queries.push(QueryOp {
            tenant: 0,
            key: "n1".into(),
            via: "replica-3#1".into(),
            sent_at: middle(),
            answered_at: middle() + 5,
            note: None,
        });
        assert!(!idle(&rec));
    }
}
