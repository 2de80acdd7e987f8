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
//! | `query-missed-acked`    | a query sent after a note was acknowledged does not find it, and no forget erased its epoch |
//!
//! Where a command ran is what the code that ran it wrote: its replica's name and the epoch of
//! that replica's latest acquire of the tenant, as that replica's lease store answered it
//! (`crate::addresses`). The tenures are what the lease stores granted, reported as each
//! answer came back; so a command run by a replica that did not hold the tenant, or under a
//! tenure of another replica, is caught from the stores' word, not the runtime's.

use std::collections::HashMap;

use crate::checker::{Report, Violation};
use crate::finale::Final;
use crate::history::{Outcome, Record};

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

/// Judges the address clients' history against the notes read at the end.
pub fn check(rec: &Record, fin: &Final, report: &mut Report) {
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
    check_queries(rec, fin, report);
}

/// `forgotten-answered` and `query-missed-acked`.
fn check_queries(rec: &Record, fin: &Final, report: &mut Report) {
    let acked: HashMap<(u32, &str), (u64, u64)> = rec
        .writes
        .iter()
        .filter_map(|op| match op.outcome {
            Outcome::Ok { epoch, ack_at, .. } => {
                Some(((op.tenant, op.key.as_str()), (epoch, ack_at)))
            }
            _ => None,
        })
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
        let Some(&(epoch, ack_at)) = acked.get(&(q.tenant, q.key.as_str())) else {
            continue;
        };
        let floor = fin.floors.get(&q.tenant).copied().unwrap_or(0);
        if ack_at < q.sent_at && epoch > floor {
            report.violations.push(Violation {
                rule: "query-missed-acked",
                tenant: Some(q.tenant),
                at: q.answered_at,
                detail: format!(
                    "a query for {:?} (t{}, via {}) sent {} ms after it was acknowledged under \
                     epoch {epoch} found nothing (floor {floor})",
                    q.key,
                    q.tenant,
                    q.via,
                    q.sent_at - ack_at
                ),
            });
        }
    }
}
