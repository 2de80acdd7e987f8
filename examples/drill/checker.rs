//! The checker: judges the history against what is left at the end ([`Final`]). Every time
//! compared is the host's `CLOCK_MONOTONIC`, read by replicas and driver alike.
//!
//! | rule                        | promise | flagged when                                                                          |
//! | --------------------------- | ------- | ------------------------------------------------------------------------------------- |
//! | `lost-acknowledged`         | 3, log  | `--durability shipped` (RPO 0, declared tail 0): any acknowledged write of an epoch above the floor is missing, whatever the fault |
//! | `lost-after-handoff`        | 2       | `async`, `images`: an acknowledged write of a tenure that ended in a flushed handoff is missing |
//! | `lost-after-publish`        | 2, 3    | `async`, `images`: a missing acknowledged write is in an image the store watcher found published (a head, or the `base` chain behind one), or in the log up to a tip it read |
//! | `lost-beyond-tail`          | 3       | `async`, `images`: a missing acknowledged write of a crashed or cut-off tenure, held by no image or tip read, whose tenure could ship or publish for longer than the mode's bound after it was acknowledged, counted on the process that ran it ([`runner`]) (`images`: `snapshot_every` + one publish + slack; `async`: `every` + one store deadline + slack; [`crate::store_rules::LossRules`]) |
//! | `graceful-not-flushed`      | 2       | a handoff or close did not flush, or a close returned while a tenure granted to that process had not ended and was not named unflushed — and no fault touched that replica during the tenure |
//! | `head-moved-back`           | 3       | the store watcher read a head older than one it had read before                       |
//! | `tip-moved-back`            | log     | the store watcher read a log tip below one it had read before under the same floor    |
//! | `ack-after-successor`       | 1       | a write ran (`run_at`, before its commit) after a later tenure's lease was surely acquired |
//! | `forgotten-object-left`     | 5       | a durable object of an epoch at or below the tenant's floor is left: listed right after the forget returned, again a little later (a late put), and at the end |
//! | `forgotten-local-file-left` | 5       | a state root keeps the tenant's directory and that root's last tenure of it is at or below the floor (right after the forget: the forgetting replica's root, by its marker; at the end: every root, by the newest tenure the history names there or the directory's marker if newer) |
//! | `forgotten-write-read`      | 4, 5    | an acknowledged write of an epoch at or below the floor is read back                  |
//! | `overlapping-tenures`       | 1       | one epoch granted to two processes, or an image taken after a later tenure acquired   |
//! | `refused-write-present`     | 1       | a write refused with a definite error (fenced, draining, …) is read back              |
//! | `leak`                      | —       | a replica process that closed and dropped its supervisor holds more threads or file descriptors than before it started (fails the run only with `--fail-on-leak`) |
//! | `unreadable-at-end`         | 3, 6    | a fresh replica cannot open or read a tenant at the end: its acknowledged writes are out of reach |
//! | `unexplained-tenure-end`    | 6       | a tenure ended with no handoff, forget or close asked of it and no fault on its replica ([`crate::explained`]) |
//! | `image-overdue`             | storage | compaction due and not taken in time ([`crate::compaction`]) |
//! | `orphan-object`, `storage-bound` | 5, storage | what the stores hold at the end, after the last retention ([`crate::storage`]) |
//! | `pitr-*`                    | log     | a point-in-time restore refused inside the window, failed, or not the history's state ([`crate::pitr`]) |
//! | `damage-served`, `damage-not-typed` | log | the open after a damaged segment ([`crate::damage`]) |
//! | `ran-twice`, `ran-off-holder`, `answered-off-holder`, `forgotten-answered`, `query-missed-acked` | 11 | `--clients addresses`: a command ran twice, ran or answered from a replica its lease store granted no such tenure, a query answered a forgotten epoch or missed an acknowledged note not lost within the tail ([`crate::address_rules`]) |
//!
//! ("log": docs/guarantees.md, the change log.) A write answered `LEASEHOLD_UNSHIPPED` (its
//! segment did not reach the log in time) has an unknown outcome, like a timeout: it may be read
//! back or not.
//!
//! Which image or tip covers a write is read from the stores (the heads and tips of the lease
//! store, the images, manifests and segments of the durable store, by [`crate::watcher`]), never
//! from the runtime's `snapshot_published` events. A missing write in no published image, of a tenure that did not
//! end in a flushed handoff, is "lost within the declared tail" when its time bound holds:
//! allowed, counted, and the longest such tail is reported against the bound.
//!
//! Known gaps can be tolerated (`--tolerate`, [`crate::gaps`]): `stale-local-copy` (a replica
//! whose tenure was lost keeps its local copy until its next open of that tenant, also when a
//! successor forgot the tenant meanwhile), and one per hole of the change-log review today's
//! runtime shows. They are then reported, not failed.
//!
//! ## Clocks, per backend
//!
//! Every time the rules compare (`run_at`, `ack_at`, `taken_at`, `acquired_hi`) is a reading
//! of the host's `CLOCK_MONOTONIC` by the driver or a replica; no rule reads a store's clock.
//! What differs is how tightly a tenure's start is known. `acquired_hi`, "the lease was surely
//! acquired by then", is the earliest of: the replica's reading when the acquire's answer came
//! back ([`crate::acquire_times`]), its reading when the open returned, and the driver's when
//! it heard the `opened` line. On `sqlite-dir` it is also `expires_at − ttl` of the record,
//! which the store stamped on that same clock: the exact moment of the acquire.
//!
//! On `postgres-s3` the record's `expires_at` is the database server's wall clock and is never
//! used, so the checker **cannot conclude**:
//!
//! * that a zombie's commit did not fall between the moment the server granted the successor's
//!   acquire and the moment its answer reached the successor (one loopback round trip): such a
//!   commit passes `ack-after-successor`, and an image taken then passes
//!   `overlapping-tenures`. Anything later is caught as on SQLite.
//! * anything about the server's clock. Expiry on PostgreSQL is sound only while that clock
//!   runs at the holders' rate and is not stepped (`docs/operations.md`); a step forward larger
//!   than the margin would let a successor in early, and the checker would report the
//!   resulting overlap as a violation of promise 1 without being able to tell it from a bug of
//!   the runtime. The test servers run on the drill's host, so their clocks agree in rate.
//!
//! The floors come from the lease store and the objects from a listing of the durable store
//! (through the `LeaseStore` and `DurableStore` traits) on either backend; S3 lists are
//! strongly consistent, so `forgotten-object-left` means the same on both.

#[cfg(test)]
mod address_losses;
mod local_files;
use local_files::check_local_files;
use std::collections::{BTreeMap, HashMap};

use crate::finale::Final;
use crate::history::{Outcome, Record, Tenure, WriteOp};
use crate::protocol::{self, Mode, now_ms};
use crate::store_rules::{self, LossRules};

/// One broken promise.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The rule's name.
    pub rule: &'static str,
    /// The tenant, if one.
    pub tenant: Option<u32>,
    /// Driver or replica time it is about, for the excerpt.
    pub at: u64,
    /// What exactly.
    pub detail: String,
}

/// Known gaps reported without failing the run.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tolerance {
    /// A lost tenure's local copy of a tenant forgotten elsewhere.
    pub stale_local_copy: bool,
    /// Leaks fail the run (`--fail-on-leak`); otherwise they are reported only.
    pub fail_on_leak: bool,
}

/// The checker's verdict.
#[derive(Debug, Default)]
pub struct Report {
    /// Every violation found.
    pub violations: Vec<Violation>,
    /// Violations of a tolerated known gap.
    pub tolerated: Vec<Violation>,
    /// Acknowledged writes.
    pub acked: u64,
    /// Of them, the large batches' writes (`--large-batch-mib`).
    pub large_acked: u64,
    /// Definitely refused writes.
    pub refused: u64,
    /// Writes of unknown outcome.
    pub unknown: u64,
    /// Acknowledged writes missing within the declared crash tail (allowed).
    pub lost_within_tail: u64,
    /// Acknowledged writes missing otherwise (each also a violation).
    pub lost_otherwise: u64,
    /// Acknowledged writes erased on purpose by a forget.
    pub forgotten: u64,
    /// Zombie writes acknowledged (each also a violation if after a successor).
    pub zombie_acked: u64,
    /// Local tenant directories whose tenure the history does not name.
    pub unattributed_local_dirs: u64,
    /// The longest crash tail seen: of the writes lost in no published image, how long the
    /// oldest one's tenure could still publish after acknowledging it, in ms
    /// ([`store_rules::unimpaired_ms`]). Failed past [`Report::tail_bound_ms`].
    pub max_tail_ms: u64,
    /// The declared tail of the run's mode ([`LossRules`]): 0 with `Shipped`.
    pub tail_bound_ms: u64,
    /// Handoffs and closes that did not flush with a fault to explain it.
    pub graceful_explained: u64,
    /// Replica processes that reported their resources after a close.
    pub closed_replicas: u64,
    /// Of those, how many held more than before.
    pub leaks: u64,
    /// Leaks reported without failing the run (no `--fail-on-leak`).
    pub leaks_reported: Vec<Violation>,
    /// `--clients addresses`: queries that found nothing of a note lost within the declared
    /// tail, answered by a later tenure (allowed: [`crate::address_rules`]).
    pub queries_missed_lost: u64,
    /// How the tenures ended.
    pub endings: Endings,
    /// Tenures that ended, and what explained them (`unexplained-tenure-end`).
    pub ends: crate::explained::Ends,
    /// What the live tenants hold at the end, summed (`crate::storage`).
    pub held: crate::storage::Held,
    /// Point-in-time restores judged, and those not judged.
    pub pitr: crate::pitr::judge::PitrCounts,
}

/// How the tenures of the run ended.
#[derive(Debug, Default)]
pub struct Endings {
    /// Every tenure.
    pub tenures: u64,
    /// Flushed handoffs.
    pub handed_off: u64,
    /// Forgotten.
    pub forgotten: u64,
    /// Lost (lease gone, abandoned, unflushed release).
    pub lost: u64,
    /// No end reported (killed).
    pub crashed: u64,
    /// Images published.
    pub images: u64,
}

fn endings(rec: &Record) -> Endings {
    let mut e = Endings::default();
    for tenure in rec.tenures.values() {
        e.tenures += 1;
        e.images += tenure.published.len() as u64;
        if tenure.forgotten.is_some() {
            e.forgotten += 1;
        } else if tenure.graceful() {
            e.handed_off += 1;
        } else if tenure.lost || tenure.released.is_some() {
            e.lost += 1;
        } else {
            e.crashed += 1;
        }
    }
    e
}

/// The earliest acquisition of any later tenure of the same tenant, per tenure.
pub struct Successors(HashMap<(u32, u64), (u64, u64)>);

impl Successors {
    /// The successors of every tenure of `tenures`.
    pub fn new(tenures: &BTreeMap<(u32, u64), Tenure>) -> Self {
        let mut next: HashMap<(u32, u64), (u64, u64)> = HashMap::new();
        let mut best: HashMap<u32, (u64, u64)> = HashMap::new();
        for (&(tenant, epoch), tenure) in tenures.iter().rev() {
            if let Some(&found) = best.get(&tenant) {
                next.insert((tenant, epoch), found);
            }
            if let Some(hi) = tenure.acquired_hi() {
                let entry = best.entry(tenant).or_insert((epoch, hi));
                if hi <= entry.1 {
                    *entry = (epoch, hi);
                }
            }
        }
        Self(next)
    }

    /// `(epoch, acquired by)` of the earliest-acquired later tenure of `(tenant, epoch)`.
    pub fn of(
        &self,
        tenant: u32,
        epoch: u64,
        tenures: &BTreeMap<(u32, u64), Tenure>,
    ) -> Option<(u64, u64)> {
        if let Some(&found) = self.0.get(&(tenant, epoch)) {
            return Some(found);
        }
        // A tenure known only from its writes: scan the later ones.
        tenures
            .range((tenant, epoch + 1)..=(tenant, u64::MAX))
            .filter_map(|(&(_, e), t)| t.acquired_hi().map(|hi| (e, hi)))
            .min_by_key(|&(_, hi)| hi)
    }
}

/// How a tenure ended, for a violation's text.
fn ending(tenure: Option<&Tenure>) -> &'static str {
    match tenure {
        None => "is known only from its writes",
        Some(t) if t.forgotten.is_some() => "was forgotten",
        Some(t) if t.graceful() => "ended in a flushed handoff",
        Some(t) if t.lost || t.released.is_some() => "lost its lease",
        Some(_) => "crashed or was cut off",
    }
}

/// Judges `rec` against `fin`, losses by `rules`; `retain` is the replicas' when the run set
/// one (the storage bound).
pub fn evaluate(
    rec: &Record,
    fin: &Final,
    tolerance: Tolerance,
    rules: LossRules,
    retain: Option<std::time::Duration>,
) -> Report {
    let mut report = Report {
        endings: endings(rec),
        tail_bound_ms: rules.bound_ms,
        ..Report::default()
    };
    let successors = Successors::new(&rec.tenures);
    for op in &rec.writes {
        match &op.outcome {
            Outcome::Ok { .. } => check_acked(rec, fin, &successors, op, rules, &mut report),
            Outcome::Fail { code } => {
                report.refused += 1;
                if present(fin, op) == Some(true) {
                    report.violations.push(Violation {
                        rule: "refused-write-present",
                        tenant: Some(op.tenant),
                        at: op.invoke_ms,
                        detail: format!(
                            "{} was refused with {code} yet is read back",
                            describe(op)
                        ),
                    });
                }
            }
            Outcome::Pending | Outcome::Unknown { .. } => report.unknown += 1,
        }
    }
    check_tenures(rec, &successors, &mut report);
    check_unreadable(rec, fin, &mut report);
    check_forgotten(rec, fin, &mut report);
    check_local_files(rec, fin, tolerance, &mut report);
    store_rules::check_graceful(rec, &mut report);
    store_rules::check_closed_tenures(rec, &mut report);
    report.ends = crate::explained::check_tenure_ends(rec, &mut report);
    crate::explained::check_overdue(rec, &mut report);
    crate::storage::check(fin, retain, &mut report);
    let runs: Vec<crate::pitr::PitrRun> = rec
        .pitr_runs
        .iter()
        .chain(&fin.pitr_runs)
        .cloned()
        .collect();
    let (found, counts) = crate::pitr::judge(rec, fin, &runs, rules.mode);
    report.violations.extend(found);
    report.pitr = counts;
    store_rules::check_flags(rec, &mut report);
    store_rules::check_leaks(rec, tolerance.fail_on_leak, &mut report);
    crate::address_rules::check(rec, fin, &successors, rules, &mut report);
    report
}

/// Whether the fresh replica read `op`'s key at the end (`None`: the tenant was unreadable).
pub fn present(fin: &Final, op: &WriteOp) -> Option<bool> {
    fin.keys.get(&op.tenant).map(|keys| keys.contains(&op.key))
}

fn describe(op: &WriteOp) -> String {
    let outcome = match &op.outcome {
        Outcome::Ok {
            epoch,
            run_at,
            ack_at,
            late,
        } => format!(
            "ok epoch {epoch}, run_at {run_at}, ack_at {ack_at}{}",
            if *late { ", late reply" } else { "" }
        ),
        other => format!("{other:?}"),
    };
    format!(
        "write {:?} (t{}, via {}, invoked at {}{}: {outcome})",
        op.key,
        op.tenant,
        op.replica,
        op.invoke_ms,
        if op.zombie {
            ", sent to a paused replica"
        } else {
            ""
        }
    )
}

fn check_acked(
    rec: &Record,
    fin: &Final,
    succ: &Successors,
    op: &WriteOp,
    rules: LossRules,
    report: &mut Report,
) {
    let Outcome::Ok {
        epoch,
        run_at,
        ack_at,
        ..
    } = op.outcome
    else {
        return;
    };
    report.acked += 1;
    if op.key.contains(crate::clients::LARGE_KEY) {
        report.large_acked += 1;
    }
    if op.zombie {
        report.zombie_acked += 1;
    }
    let tenant = op.tenant;
    if let Some((next, hi)) = succ.of(tenant, epoch, &rec.tenures)
        && run_at > hi
    {
        report.violations.push(Violation {
            rule: "ack-after-successor",
            tenant: Some(tenant),
            at: run_at,
            detail: format!(
                "{} ran {} ms after epoch {next} had acquired the lease (by {hi})",
                describe(op),
                run_at - hi
            ),
        });
    }
    let floor = fin.floors.get(&tenant).copied().unwrap_or(0);
    let Some(found) = present(fin, op) else {
        return; // the tenant could not be read: reported as a problem
    };
    if epoch <= floor {
        if found {
            report.violations.push(Violation {
                rule: "forgotten-write-read",
                tenant: Some(tenant),
                at: ack_at,
                detail: format!("{} is read back though the floor is {floor}", describe(op)),
            });
        } else {
            report.forgotten += 1;
        }
        return;
    }
    if found {
        return;
    }
    match judge_missing(rec, succ, op, (epoch, ack_at), rules) {
        Missing::WithinTail { tail_ms } => {
            report.lost_within_tail += 1;
            report.max_tail_ms = report.max_tail_ms.max(tail_ms);
        }
        Missing::Lost { violation, tail_ms } => {
            report.lost_otherwise += 1;
            if let Some(tail_ms) = tail_ms {
                report.max_tail_ms = report.max_tail_ms.max(tail_ms);
            }
            report.violations.push(violation);
        }
    }
}

/// What the loss rules of the run's mode make of an acknowledged write that is missing at the
/// end, its epoch above the floor.
#[derive(Debug)]
pub enum Missing {
    /// Lost within the declared crash tail: allowed. `tail_ms`: how long its tenure could still
    /// ship or publish after acknowledging it ([`store_rules::unimpaired_ms`]).
    WithinTail {
        /// The tail of this write.
        tail_ms: u64,
    },
    /// Lost against the rules: the violation, and the tail when the mode counts it in
    /// [`Report::max_tail_ms`] (`Shipped`).
    Lost {
        /// The broken rule.
        violation: Violation,
        /// The tail, on `Shipped`.
        tail_ms: Option<u64>,
    },
}

/// The replica process that ran `op`, acknowledged under `epoch`: the process its tenure was
/// granted to. With owner clients that is the process the write was sent to; through an
/// address, the reply names the replica that ran it (forwarded, perhaps), and the tenure's grant
/// to a process of that replica names the process (`name#generation`). Falls back to the
/// process it was sent to when the stores reported no such grant (`answered-off-holder`).
pub fn runner<'a>(rec: &'a Record, op: &'a WriteOp, epoch: u64) -> &'a str {
    let grants = rec
        .tenures
        .get(&(op.tenant, epoch))
        .map_or(&[][..], |t| t.grants.as_slice());
    let name = rec
        .addresses
        .ran_on
        .get(&op.req)
        .map_or_else(|| replica_name(&op.replica), |ran_on| ran_on.as_str());
    grants
        .iter()
        .find(|g| replica_name(&g.replica) == name)
        .map_or(op.replica.as_str(), |g| g.replica.as_str())
}

/// The replica's name of a process label (`name#generation`).
fn replica_name(label: &str) -> &str {
    label.split('#').next().unwrap_or(label)
}

/// Judges an acknowledged write `op` that is missing at the end (its epoch above the floor) by
/// the loss rules of the run's mode: [`Missing::WithinTail`] only where docs/guarantees.md
/// allows the loss (promise 3: `Async` and `Images`, a tenure that did not end in a flushed
/// handoff, held by no image or tip the watcher read, its tenure able to ship or publish for at
/// most the bound after acknowledging it, counted on the process that ran it).
pub fn judge_missing(
    rec: &Record,
    succ: &Successors,
    op: &WriteOp,
    (epoch, ack_at): (u64, u64),
    rules: LossRules,
) -> Missing {
    let tenant = op.tenant;
    let tenure = rec.tenures.get(&(tenant, epoch));
    // Which image or tip held it: from the stores (the watcher), never from the runtime's events.
    let cover = rec.covered.get(&tenant).and_then(|c| c.get(&op.key));
    let successor = succ.of(tenant, epoch, &rec.tenures).map(|(_, hi)| hi);
    let end = store_rules::tenure_end(tenure, successor, now_ms());
    let ran_on = runner(rec, op, epoch);
    let tail = store_rules::unimpaired_ms(rec, ran_on, ack_at, end);
    let lost = |rule: &'static str, detail: String| Violation {
        rule,
        tenant: Some(tenant),
        at: ack_at,
        detail,
    };
    if rules.mode == Mode::Shipped {
        // RPO 0: the declared tail is 0, whatever the fault.
        let held = cover.map_or(String::new(), |c| format!(" though {c} held it"));
        return Missing::Lost {
            violation: lost(
                "lost-acknowledged",
                format!(
                    "{} is missing{held}; with Shipped nothing acknowledged may be lost (epoch \
                     {epoch} {}, {tail} ms after the acknowledgement outside any fault)",
                    describe(op),
                    ending(tenure),
                ),
            ),
            tail_ms: Some(tail),
        };
    }
    if tenure.is_some_and(Tenure::graceful) {
        return Missing::Lost {
            violation: lost(
                "lost-after-handoff",
                format!(
                    "{} is missing; epoch {epoch} ended in a flushed handoff",
                    describe(op)
                ),
            ),
            tail_ms: None,
        };
    }
    if let Some(cover) = cover {
        return Missing::Lost {
            violation: lost(
                "lost-after-publish",
                format!("{} is missing though {cover} held it", describe(op)),
            ),
            tail_ms: None,
        };
    }
    if tail > rules.bound_ms {
        return Missing::Lost {
            violation: lost(
                "lost-beyond-tail",
                format!(
                    "{} is in no published image nor shipped segment, yet epoch {epoch} could \
                     publish or ship for {tail} ms after it was acknowledged on {ran_on} (bound \
                     {} ms, --durability {}; the tenure ended by {end})",
                    describe(op),
                    rules.bound_ms,
                    rules.mode.as_arg(),
                ),
            ),
            tail_ms: None,
        };
    }
    Missing::WithinTail { tail_ms: tail }
}

/// Whether `op`, acknowledged, is missing at the end and its loss is one the run's mode allows
/// ([`Missing::WithinTail`]): `None` when the tenant could not be read at the end.
pub fn lost_within_tail(
    rec: &Record,
    fin: &Final,
    succ: &Successors,
    op: &WriteOp,
    rules: LossRules,
) -> Option<bool> {
    let Outcome::Ok { epoch, ack_at, .. } = op.outcome else {
        return Some(false);
    };
    let found = present(fin, op)?;
    let floor = fin.floors.get(&op.tenant).copied().unwrap_or(0);
    if found || epoch <= floor {
        return Some(false);
    }
    Some(matches!(
        judge_missing(rec, succ, op, (epoch, ack_at), rules),
        Missing::WithinTail { .. }
    ))
}

fn check_tenures(rec: &Record, succ: &Successors, report: &mut Report) {
    for (&(tenant, epoch), tenure) in &rec.tenures {
        let mut holders: Vec<&str> = tenure.grants.iter().map(|g| g.replica.as_str()).collect();
        holders.dedup();
        if holders.len() > 1 {
            report.violations.push(Violation {
                rule: "overlapping-tenures",
                tenant: Some(tenant),
                at: tenure.acquired_hi().unwrap_or(0),
                detail: format!("epoch {epoch} of t{tenant} was granted to {holders:?}"),
            });
        }
        let Some((next, hi)) = succ.of(tenant, epoch, &rec.tenures) else {
            continue;
        };
        for &(seq, taken_at) in &tenure.published {
            if taken_at > hi {
                report.violations.push(Violation {
                    rule: "overlapping-tenures",
                    tenant: Some(tenant),
                    at: taken_at,
                    detail: format!(
                        "image e{epoch}/{seq} of t{tenant} was taken at {taken_at}, {} ms after \
                         epoch {next} had acquired the lease, and still published",
                        taken_at - hi
                    ),
                });
            }
        }
    }
}

/// `unreadable-at-end`: a tenant the fresh replica could not open or read at the end keeps its
/// acknowledged writes out of reach (no segment is damaged then: the drill puts back every
/// segment it damaged before the end).
fn check_unreadable(rec: &Record, fin: &Final, report: &mut Report) {
    for (&tenant, why) in &fin.unreadable {
        let acked = rec
            .writes
            .iter()
            .filter(|w| w.tenant == tenant && matches!(w.outcome, Outcome::Ok { .. }))
            .count();
        report.violations.push(Violation {
            rule: "unreadable-at-end",
            tenant: Some(tenant),
            at: 0,
            detail: format!(
                "a fresh replica could not open t{tenant} at the end ({acked} acknowledged writes \
                 out of reach): {why}"
            ),
        });
    }
}

fn check_forgotten(rec: &Record, fin: &Final, report: &mut Report) {
    for (&tenant, &floor) in &fin.floors {
        if floor == 0 {
            continue;
        }
        let Ok(key) = protocol::lease_key(tenant) else {
            continue;
        };
        let dead: Vec<&String> = fin
            .objects
            .get(&tenant)
            .into_iter()
            .flatten()
            .filter(|o| leasehold::layout::epoch_of(&key, o).is_some_and(|e| e <= floor))
            .collect();
        if !dead.is_empty() {
            report.violations.push(Violation {
                rule: "forgotten-object-left",
                tenant: Some(tenant),
                at: forgotten_at(rec, tenant, floor),
                detail: format!(
                    "t{tenant} has floor {floor} yet {} objects at or below it remain {}: {:?}",
                    dead.len(),
                    crate::gaps::leftover_tag(&dead),
                    dead.iter().take(4).collect::<Vec<_>>()
                ),
            });
        }
    }
}

/// When `tenant` was forgotten up to `floor`, as the timeline says (0 if unknown).
fn forgotten_at(rec: &Record, tenant: u32, floor: u64) -> u64 {
    let text = format!("forgotten up to floor {floor}");
    rec.timeline
        .iter()
        .find(|n| n.tenant == Some(tenant) && n.text.ends_with(&text))
        .map_or(0, |n| n.at)
}
