//! The checker's rules that judge from the stores and from what the driver itself did, never from
//! the runtime's account (see [`crate::checker`] for the table of every rule):
//!
//! * the **loss rules** of the run's durability mode ([`LossRules`]): with `Shipped` (RPO 0) no
//!   acknowledged write may be missing (`lost-acknowledged`, declared tail 0); with `Async` and
//!   `Images` a crash may lose a tail, bounded by `every` + one store deadline + slack, or by
//!   [`TAIL_BOUND_MS`] (docs/guarantees.md promise 3 and the change log). A write
//!   lost in a tenure that did not end in a flushed handoff is "within the tail" only if its
//!   tenure could publish for at most the bound after it was acknowledged — counted from `ack_at`
//!   to the tenure's end (its successor's acquisition, or the line saying it ended), leaving out
//!   every interval in which the driver impaired the replica process that ran the write
//!   ([`crate::checker::runner`]: through an address, the holder, not the replica the write was
//!   sent through) (SIGKILL, SIGSTOP, a lease or store fault, slowed puts) — and every SIGSTOP
//!   of any replica, which may stop while it holds the shared lease store's lock (the SQLite
//!   lease file, or a row lock on PostgreSQL) and so stall every replica's `publish_head` and
//!   renewals;
//! * **graceful means flushed**: a handoff or close that did not flush, on a replica no fault
//!   touched during that tenure, fails the run (`graceful-not-flushed`);
//! * the driver's own **flags** (`head-moved-back` from the store watcher, erasure listed right
//!   after a forget);
//! * **leaks**: a replica process that closed and dropped its supervisor must be back to its
//!   threads and descriptors (`leak`; reported only, unless `--fail-on-leak`).

use crate::checker::{Report, Violation};
use crate::history::{Record, Tenure};
use crate::protocol::{Mode, SNAPSHOT_EVERY, STORE_DEADLINE};

/// Slack over `snapshot_every` + one publish: scheduling of four processes on a CI host of two
/// cores, and a tick that falls just after a publish began.
pub const TAIL_SLACK_MS: u64 = 500;

/// The crash tail's bound: `snapshot_every` + one publish (bounded by the store deadline) +
/// [`TAIL_SLACK_MS`].
pub const TAIL_BOUND_MS: u64 =
    SNAPSHOT_EVERY.as_millis() as u64 + STORE_DEADLINE.as_millis() as u64 + TAIL_SLACK_MS;

/// How the checker judges a missing acknowledged write, by the run's `--durability`.
#[derive(Debug, Clone, Copy)]
pub struct LossRules {
    /// The replicas' mode.
    pub mode: Mode,
    /// The declared tail: how long after its acknowledgement a write may still be lost by a
    /// crash or a cut-off, counting only the time its tenure could ship or publish
    /// ([`unimpaired_ms`]). 0 with `Shipped`.
    pub bound_ms: u64,
}

impl LossRules {
    /// The rules of `mode`; `async_every_ms` is the `Async` shipping period.
    pub fn of(mode: Mode, async_every_ms: u64) -> Self {
        let bound_ms = match mode {
            // RPO 0: nothing acknowledged may be lost, whatever the fault.
            Mode::Shipped => 0,
            // Shipped at the next tick, which may wait for the segment in flight (one store
            // deadline at most).
            Mode::Async => async_every_ms + STORE_DEADLINE.as_millis() as u64 + TAIL_SLACK_MS,
            Mode::Images => TAIL_BOUND_MS,
        };
        Self { mode, bound_ms }
    }
}

/// How long the lost tail of `tenure`'s write acknowledged at `ack_at` by `replica` (the process
/// that ran it) lasted while the replica could publish: from `ack_at` to `end`, minus the
/// impaired intervals.
pub fn unimpaired_ms(rec: &Record, replica: &str, ack_at: u64, end: u64) -> u64 {
    if end <= ack_at {
        return 0;
    }
    let mut cut: Vec<(u64, u64)> = intervals(rec, replica)
        .map(|&(from, to)| (from.max(ack_at), to.unwrap_or(u64::MAX).min(end)))
        .filter(|&(from, to)| from < to)
        .collect();
    cut.sort_unstable();
    let mut impaired = 0;
    let mut reach = ack_at;
    for (from, to) in cut {
        let from = from.max(reach);
        if to > from {
            impaired += to - from;
            reach = to;
        }
    }
    (end - ack_at).saturating_sub(impaired)
}

/// The impaired intervals of `replica`: its own, and those of every replica
/// ([`crate::history::EVERY_REPLICA`]).
fn intervals<'a>(rec: &'a Record, replica: &str) -> impl Iterator<Item = &'a (u64, Option<u64>)> {
    [replica, crate::history::EVERY_REPLICA]
        .into_iter()
        .filter_map(|r| rec.impairments.get(r))
        .flatten()
}

/// When a tenure stopped being able to publish: the first line saying it ended, or the earliest
/// acquisition of a later tenure, or `now`.
pub fn tenure_end(tenure: Option<&Tenure>, successor_hi: Option<u64>, now: u64) -> u64 {
    let ended = tenure.and_then(|t| t.ended_at);
    [ended, successor_hi]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(now)
}

/// Whether a fault touched `replica` between `from` and `to`.
pub fn impaired_between(rec: &Record, replica: &str, from: u64, to: u64) -> bool {
    intervals(rec, replica).any(|&(start, end)| start <= to && end.is_none_or(|end| end >= from))
}

/// The start of the latest tenure of `tenant` granted to `replica` by `at`.
fn tenure_start(rec: &Record, replica: &str, tenant: u32, at: u64) -> Option<u64> {
    rec.tenures
        .range((tenant, 0)..=(tenant, u64::MAX))
        .flat_map(|(_, t)| t.grants.iter())
        .filter(|g| g.replica == replica && g.acquired_hi <= at)
        .map(|g| g.acquired_hi)
        .max()
}

/// Why a tenure of `tenant` on `replicas` stopped shipping between `from` and `to`, as one of
/// those replicas said, for a violation's detail: its first "could not ship" or "lost epoch"
/// line from `from` to half a second past `to` (a replica's line may come after the answer it
/// explains), in brackets; nothing if there is none.
pub fn ship_failure(rec: &Record, tenant: u32, replicas: &[&str], from: u64, to: u64) -> String {
    rec.timeline
        .iter()
        .filter(|n| n.tenant == Some(tenant) && (from..=to.saturating_add(500)).contains(&n.at))
        .filter(|n| {
            replicas.iter().any(|r| {
                n.text
                    .strip_prefix(r)
                    .is_some_and(|rest| rest.starts_with(": "))
            })
        })
        .find(|n| n.text.contains("could not ship") || n.text.contains("lost epoch"))
        .map_or(String::new(), |n| format!(" ({})", n.text))
}

/// What a handoff or close answers when the tenant's log could not be settled.
pub const UNSHIPPED: &str = "LEASEHOLD_UNSHIPPED";

/// `graceful-not-flushed`: handoffs and closes that did not flush with no fault to explain it.
pub fn check_graceful(rec: &Record, report: &mut Report) {
    for f in &rec.graceful_failures {
        // A fault from the tenure's start (or, for a close that failed as a whole, the start of
        // the run) to the answer explains it.
        let start = f
            .tenant
            .and_then(|t| tenure_start(rec, &f.replica, t, f.at));
        let from = start.unwrap_or(0);
        if impaired_between(rec, &f.replica, from, f.at) {
            report.graceful_explained += 1;
            continue;
        }
        // An `Unshipped` answer is explained by the tenure's own ship failure, if its replica
        // named one; no other answer is.
        let why = match (f.tenant, start) {
            (Some(t), Some(start)) if f.what == UNSHIPPED => {
                ship_failure(rec, t, &[f.replica.as_str()], start, f.at)
            }
            _ => String::new(),
        };
        report.violations.push(Violation {
            rule: "graceful-not-flushed",
            tenant: f.tenant,
            at: f.at,
            detail: format!(
                "{} did not flush{} though no fault touched it during the tenure: {}{why}",
                f.replica,
                f.tenant.map_or(String::new(), |t| format!(" t{t}")),
                f.what
            ),
        });
    }
}

/// `graceful-not-flushed`, the other half: once a close answered, every tenure granted to that
/// process has ended (released, lost, forgotten) or was named unflushed — unless a fault touched
/// the process during the tenure. An open that completes on a closing replica breaks this.
pub fn check_closed_tenures(rec: &Record, report: &mut Report) {
    for (replica, at, unflushed) in &rec.closes {
        for (&(tenant, epoch), tenure) in &rec.tenures {
            let Some(grant) = tenure.grants.iter().find(|g| g.replica == *replica) else {
                continue;
            };
            if tenure.ended_at.is_some() || unflushed.contains(&tenant) {
                continue;
            }
            if tenure.never_began(&later_tenures(rec, tenant, epoch)) {
                report.graceful_explained += 1;
                continue;
            }
            if impaired_between(rec, replica, grant.acquired_hi, *at) {
                report.graceful_explained += 1;
                continue;
            }
            report.violations.push(Violation {
                rule: "graceful-not-flushed",
                tenant: Some(tenant),
                at: *at,
                detail: format!(
                    "{replica}'s close returned, yet epoch {epoch} of t{tenant}, granted to it, was \
                     neither handed off nor reported unflushed"
                ),
            });
        }
    }
}

/// The tenures of `tenant` after `epoch`.
pub fn later_tenures(rec: &Record, tenant: u32, epoch: u64) -> Vec<&crate::history::Tenure> {
    rec.tenures
        .range((tenant, epoch + 1)..=(tenant, u64::MAX))
        .map(|(_, t)| t)
        .collect()
}

/// The driver's flags, each a violation.
pub fn check_flags(rec: &Record, report: &mut Report) {
    for f in &rec.flags {
        report.violations.push(Violation {
            rule: f.rule,
            tenant: f.tenant,
            at: f.at,
            detail: f.detail.clone(),
        });
    }
}

/// `leak`: a closed replica process holds more than before its supervisor started.
pub fn check_leaks(rec: &Record, fail: bool, report: &mut Report) {
    for (replica, r) in &rec.resources {
        report.closed_replicas += 1;
        if !r.leaked() {
            continue;
        }
        report.leaks += 1;
        let violation = Violation {
            rule: "leak",
            tenant: None,
            at: 0,
            detail: format!(
                "{replica} after close and drop: threads {} → {} (new: {:?}), fds {} → {}, live \
                 tenant actors {}",
                r.threads_before,
                r.threads_after,
                r.new_threads,
                r.fds_before,
                r.fds_after,
                r.live_tenant_actors
                    .map_or("not counted by the runtime".into(), |n| n.to_string())
            ),
        };
        if fail {
            report.violations.push(violation);
        } else {
            report.leaks_reported.push(violation);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{GracefulFailure, Grant, Note};

    /// The replica whose handoff of t0 failed, granted epoch 1 at 100.
    const HOLDER: &str = "replica-3#1";

    /// A record of t0's epoch 1 on the holder, its handoff answered `what` at 1,000, and these
    /// timeline lines `(at, text)` about t0.
    fn failed_handoff(what: &str, lines: &[(u64, &str)]) -> Record {
        let mut rec = Record::default();
        rec.tenures.entry((0, 1)).or_default().grants.push(Grant {
            replica: HOLDER.into(),
            slot: Some(2),
            acquired_hi: 100,
        });
        rec.graceful_failures.push(GracefulFailure {
            replica: HOLDER.into(),
            tenant: Some(0),
            at: 1_000,
            what: what.into(),
        });
        for &(at, text) in lines {
            rec.timeline.push(Note {
                at,
                tenant: Some(0),
                text: text.into(),
            });
        }
        rec
    }

    /// The one `graceful-not-flushed` detail `rec` yields.
    fn detail(rec: &Record) -> String {
        let mut report = Report::default();
        check_graceful(rec, &mut report);
        assert_eq!(report.violations.len(), 1, "{:?}", report.violations);
        report.violations[0].detail.clone()
    }

    const SLOW: &str = "replica-3#1: could not ship e00000001/log-000000000009: an earlier try \
                        still runs";

    #[test]
    fn an_unshipped_flush_names_its_own_replicas_ship_failure() {
        let rec = failed_handoff(UNSHIPPED, &[(900, SLOW)]);
        assert!(detail(&rec).ends_with(&format!("{UNSHIPPED} ({SLOW})")));
        // Half a second after the answer still counts; later does not.
        assert!(detail(&failed_handoff(UNSHIPPED, &[(1_400, SLOW)])).contains(SLOW));
        assert!(!detail(&failed_handoff(UNSHIPPED, &[(1_600, SLOW)])).contains(SLOW));
        // Before the tenure began: another tenure's.
        assert!(!detail(&failed_handoff(UNSHIPPED, &[(50, SLOW)])).contains(SLOW));
    }

    #[test]
    fn another_replicas_line_or_another_answer_is_not_named() {
        let other = "replica-1#1: could not ship e00000001/log-000000000009: an earlier try still \
                     runs";
        let prefixed = "replica-3#12: could not ship e00000001/log-000000000009: an earlier try \
                        still runs";
        let rec = failed_handoff(UNSHIPPED, &[(900, other), (950, prefixed)]);
        assert!(detail(&rec).ends_with(UNSHIPPED));
        let rec = failed_handoff("LEASEHOLD_DRAIN_TIMEOUT", &[(900, SLOW)]);
        assert!(detail(&rec).ends_with("LEASEHOLD_DRAIN_TIMEOUT"));
    }

    #[test]
    fn the_first_line_in_time_is_named_lost_epoch_or_could_not_ship() {
        let lost = "replica-3#1: lost epoch 1";
        let rec = failed_handoff(UNSHIPPED, &[(800, lost), (900, SLOW)]);
        assert!(detail(&rec).ends_with(&format!("({lost})")));
    }
}
