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

/// Why a tenure of `tenant` stopped shipping between `from` and `to`, as its replica said, for
/// a violation's detail: the first "could not ship" line (else "lost epoch") from `from` to half
/// a second past `to` (a replica's line may come after the answer it explains), in brackets.
pub fn ship_failure(rec: &Record, tenant: u32, from: u64, to: u64) -> String {
    let near = |needle: &str| {
        rec.timeline
            .iter()
            .filter(|n| n.tenant == Some(tenant) && (from..=to.saturating_add(500)).contains(&n.at))
            .find(|n| n.text.contains(needle))
            .map(|n| n.text.clone())
    };
    near("could not ship")
        .or_else(|| near("lost epoch"))
        .map_or(String::new(), |t| format!(" ({t})"))
}

/// `graceful-not-flushed`: handoffs and closes that did not flush with no fault to explain it.
pub fn check_graceful(rec: &Record, report: &mut Report) {
    for f in &rec.graceful_failures {
        // A fault from the tenure's start (or, for a close that failed as a whole, the start of
        // the run) to the answer explains it.
        let from = f
            .tenant
            .and_then(|t| tenure_start(rec, &f.replica, t, f.at))
            .unwrap_or(0);
        if impaired_between(rec, &f.replica, from, f.at) {
            report.graceful_explained += 1;
            continue;
        }
        let why = f
            .tenant
            .map_or(String::new(), |t| ship_failure(rec, t, from, f.at));
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
