//! The checker's rules of `--clients addresses` (docs/guarantees.md, promise 11), beside the
//! rules every write meets ([`crate::checker`]: an acknowledged note is read back, never after
//! a successor's acquire, never past a forget).
//!
//! | rule                    | flagged when |
//! | ----------------------- | ------------ |
//! | `ran-twice`             | a note's key is in the tenant's ledger more than once: a command ran twice (its retries carry the same idempotency key) |
//! | `ran-off-holder`        | a note in the ledger names a replica and an epoch whose tenure no process of that replica was granted by its lease store (`acquired` lines: the store's answers) |
//! | `answered-off-holder`   | an acknowledged command's reply names a replica and an epoch no process of that replica was granted |
//! | `forgotten-answered`    | a query sent after a forget returned answers a note of an epoch at or below the floor it raised |
//! | `query-missed-acked`    | a query sent after a note was acknowledged does not find it, no forget erased its epoch, and the note is not a loss the mode allows: missing at the end, lost within the declared crash tail (the write rules' verdict, [`crate::checker::judge_missing`]), the query answered after a later tenure had acquired the tenant |
//!
//! On `Async` and `Images` a reply leaves at the local commit, so what it shows is within the
//! mode's declared tail, as acknowledged writes are (docs/guarantees.md, promise 11, "No dirty
//! replies"): a note acknowledged and then lost in a crash within that tail is rightly found by
//! no query of a later tenure. A query answered while no later tenure had acquired can only
//! have read the tenure that acknowledged the note, which holds it: missing it there is a
//! violation in every mode, as is missing a note that is read back at the end, or one lost
//! beyond the tail (which the write rules report too). On `Shipped` nothing is tolerated.
//!
//! Where a command ran is what the code that ran it wrote: its replica's name and the epoch of
//! that replica's latest acquire of the tenant, as that replica's lease store answered it
//! (`crate::addresses`). The tenures are what the lease stores granted, reported as each
//! answer came back; so a command run by a replica that did not hold the tenant, or under a
//! tenure of another replica, is caught from the stores' word, not the runtime's.

use std::collections::HashMap;

use crate::checker::{Report, Successors, Violation, lost_within_tail, present};
use crate::finale::Final;
use crate::history::{Outcome, Record, WriteOp};
use crate::store_rules::LossRules;

/// Whether a process label (`name#generation`) is of replica `name`.
fn of_replica(label: &str, name: &str) -> bool {
    label.split('#').next() == Some(name)
}

/// Whether `replica` was granted `(tenant, epoch)`.
fn granted(rec: &Record, tenant: u32, epoch: u64, replica: &str) -> bool {
    rec.tenures
        .get(&(tenant, epoch))
        .is_some_and(|t| t.grants.iter().any(|g| of_replica(&g.replica, replica)))
}

/// Judges the address clients' history against the notes read at the end; `succ` and `rules`
/// are the write rules' (a note lost within the mode's tail).
pub fn check(rec: &Record, fin: &Final, succ: &Successors, rules: LossRules, report: &mut Report) {
    for (&tenant, notes) in &fin.notes {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for note in notes {
            *seen.entry(note.key.as_str()).or_default() += 1;
            if !granted(rec, tenant, note.epoch, &note.replica) {
                report.violations.push(Violation {
                    rule: "ran-off-holder",
                    tenant: Some(tenant),
                    at: note.run_at,
                    detail: format!(
                        "note {:?} of t{tenant} ran on {} under epoch {}, which no process of \
                         that replica was granted",
                        note.key, note.replica, note.epoch
                    ),
                });
            }
        }
        for (key, times) in seen.into_iter().filter(|&(_, n)| n > 1) {
            report.violations.push(Violation {
                rule: "ran-twice",
                tenant: Some(tenant),
                at: 0,
                detail: format!("note {key:?} of t{tenant} is in the ledger {times} times"),
            });
        }
    }
    for op in &rec.writes {
        let (Outcome::Ok { epoch, run_at, .. }, Some(ran_on)) =
            (&op.outcome, rec.addresses.ran_on.get(&op.req))
        else {
            continue;
        };
        if !granted(rec, op.tenant, *epoch, ran_on) {
            report.violations.push(Violation {
                rule: "answered-off-holder",
                tenant: Some(op.tenant),
                at: *run_at,
                detail: format!(
                    "the reply of {:?} (t{}) says it ran on {ran_on} under epoch {epoch}, which no \
                     process of that replica was granted",
                    op.key, op.tenant
                ),
            });
        }
    }
    check_queries(rec, fin, succ, rules, report);
}

/// `forgotten-answered` and `query-missed-acked`.
fn check_queries(
    rec: &Record,
    fin: &Final,
    succ: &Successors,
    rules: LossRules,
    report: &mut Report,
) {
    let acked: HashMap<(u32, &str), &WriteOp> = rec
        .writes
        .iter()
        .filter(|op| matches!(op.outcome, Outcome::Ok { .. }))
        .map(|op| ((op.tenant, op.key.as_str()), op))
        .collect();
    for q in &rec.addresses.queries {
        if let Some(note) = &q.note {
            let erased = rec
                .addresses
                .forgets
                .iter()
                .find(|f| f.tenant == q.tenant && f.floor >= note.epoch && f.at < q.sent_at);
            if let Some(f) = erased {
                report.violations.push(Violation {
                    rule: "forgotten-answered",
                    tenant: Some(q.tenant),
                    at: q.answered_at,
                    detail: format!(
                        "a query for {:?} (t{}, via {}) sent {} ms after a forget raised the \
                         floor to {} answered the note of epoch {}",
                        q.key,
                        q.tenant,
                        q.via,
                        q.sent_at - f.at,
                        f.floor,
                        note.epoch
                    ),
                });
            }
            continue;
        }
        let Some(&op) = acked.get(&(q.tenant, q.key.as_str())) else {
            continue;
        };
        let Outcome::Ok { epoch, ack_at, .. } = op.outcome else {
            continue;
        };
        let floor = fin.floors.get(&q.tenant).copied().unwrap_or(0);
        if ack_at >= q.sent_at || epoch <= floor {
            continue;
        }
        // A later tenure, surely acquired before the answer came: the only kind of tenure that
        // may answer without a note it lost in the crash of the one that acknowledged it.
        let later = succ
            .of(q.tenant, epoch, &rec.tenures)
            .filter(|&(_, hi)| hi <= q.answered_at);
        if later.is_some() && lost_within_tail(rec, fin, succ, op, rules) == Some(true) {
            report.queries_missed_lost += 1;
            continue;
        }
        let why = match (later, present(fin, op)) {
            (None, _) => "no later tenure had acquired the tenant by the answer".to_string(),
            (Some(_), Some(true)) => "the note is read back at the end".to_string(),
            (Some((next, hi)), _) => format!(
                "epoch {next} had acquired by {hi}, but the note's loss is not one the mode \
                 allows (the write rules)"
            ),
        };
        report.violations.push(Violation {
            rule: "query-missed-acked",
            tenant: Some(q.tenant),
            at: q.answered_at,
            detail: format!(
                "a query for {:?} (t{}, via {}) sent {} ms after it was acknowledged under \
                 epoch {epoch} found nothing (floor {floor}): {why}",
                q.key,
                q.tenant,
                q.via,
                q.sent_at - ack_at
            ),
        });
    }
}
