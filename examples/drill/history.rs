//! The history the checker judges: every write a client invoked and what came of it, every
//! tenure the replicas reported (grants, published images, how it ended), and a timeline of
//! faults and lifecycle events for the excerpts printed with a violation.
//!
//! ```text
//! write:  invoke (driver time) ──> ok { epoch, run_at, ack_at }   acknowledged
//!                              ├─> fail { code }                  definite: never committed
//!                              └─> unknown { why }                timeout, process gone
//! tenure (tenant, epoch): grants [replica, acquired by] · published [taken_at] · end
//! ```
//!
//! A reply that arrives after its caller gave up still lands here (`late`): the reply is the
//! truth, the timeout only the caller's patience.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

pub use crate::leaks::Resources;
use crate::protocol::{Answer, Line, is_definite_refusal, now_ms};
pub use crate::watcher::{Cover, CoverKind};

pub mod acts;
pub mod addresses;

/// The impairment key of a fault that may impair every replica (a process stopped while it holds
/// the shared lease store's lock).
pub const EVERY_REPLICA: &str = "*";

/// Code of a request the driver could not even hand to the replica's stdin.
pub const NOT_SENT: &str = "DRILL_NOT_SENT";

/// Why a call brought no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// No answer within the caller's limit; the request may still run.
    Timeout,
    /// The process ended before it answered.
    Gone,
    /// The request never reached the process.
    NotSent,
}

/// What came of a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// No answer yet.
    Pending,
    /// Acknowledged.
    Ok {
        /// The tenure that acknowledged it.
        epoch: u64,
        /// Replica time inside the run (before the commit).
        run_at: u64,
        /// Replica time when the acknowledgement came back (after the commit).
        ack_at: u64,
        /// The answer came after the caller gave up waiting.
        late: bool,
    },
    /// Refused with a code that says nothing was committed.
    Fail {
        /// The code.
        code: String,
    },
    /// May or may not have committed.
    Unknown {
        /// Why we cannot tell.
        why: String,
    },
}

/// One write of the history.
#[derive(Debug, Clone)]
pub struct WriteOp {
    /// The tenant.
    pub tenant: u32,
    /// Its idempotency key, unique over the run.
    pub key: String,
    /// The replica process it was sent to (`name#generation`).
    pub replica: String,
    /// The request id.
    pub req: u64,
    /// Driver time at invoke.
    pub invoke_ms: u64,
    /// Driver time at completion.
    pub done_ms: Option<u64>,
    /// What came of it.
    pub outcome: Outcome,
    /// Sent on purpose to a paused replica (a zombie) just before it resumed.
    pub zombie: bool,
}

/// One acquisition of a tenure's lease, as a replica reported it.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The replica process (`name#generation`).
    pub replica: String,
    /// The replica's slot (state root), `None` for the final checker.
    pub slot: Option<usize>,
    /// A time by which the lease was surely acquired.
    pub acquired_hi: u64,
}

/// What the replicas reported about one tenure `(tenant, epoch)`.
#[derive(Debug, Clone, Default)]
pub struct Tenure {
    /// Who was granted it (more than one process is a violation).
    pub grants: Vec<Grant>,
    /// Images it published: `(seq, taken_at)`.
    pub published: Vec<(u64, u64)>,
    /// `Some(flushed)` once it was released.
    pub released: Option<bool>,
    /// A handoff of it returned `Ok`.
    pub handoff_ok: bool,
    /// It found its lease gone.
    pub lost: bool,
    /// It was forgotten, raising the floor to this.
    pub forgotten: Option<u64>,
    /// Driver time of the first line saying it ended (lost, released, forgotten).
    pub ended_at: Option<u64>,
    /// Its replica said it opened (the acquire's answer reached the runtime and the tenant
    /// served).
    pub opened: bool,
}

impl Tenure {
    /// A grant its replica never served under: never opened, and a later epoch of the tenant was
    /// granted (to it or another) — an open whose acquire landed but whose answer came too late,
    /// or whose restore failed or outlived the lease, and someone opened the tenant since.
    /// Nothing can have been acknowledged in it (every acknowledged write is checked on its
    /// own), and no close or handoff had it to flush.
    pub fn never_began(&self, later: &[&Tenure]) -> bool {
        !self.opened && !self.grants.is_empty() && later.iter().any(|t| !t.grants.is_empty())
    }

    /// Whether it ended in a graceful handoff (final image published, lease handed back).
    pub fn graceful(&self) -> bool {
        self.released == Some(true) || self.handoff_ok
    }

    /// The earliest time by which its lease was surely acquired.
    pub fn acquired_hi(&self) -> Option<u64> {
        self.grants.iter().map(|g| g.acquired_hi).min()
    }
}

/// A line of the timeline.
#[derive(Debug, Clone)]
pub struct Note {
    /// Driver time.
    pub at: u64,
    /// The tenant it concerns, if one.
    pub tenant: Option<u32>,
    /// What happened.
    pub text: String,
}

/// A finding of the driver itself, from the stores or from what it injected (never from the
/// runtime's account); the checker reports each as a violation, or (for `GracefulFailure`s) after
/// ruling out a fault.
#[derive(Debug, Clone)]
pub struct Flag {
    /// The rule's name.
    pub rule: &'static str,
    /// The tenant, if one.
    pub tenant: Option<u32>,
    /// Driver time.
    pub at: u64,
    /// What exactly.
    pub detail: String,
}

/// A handoff or close that did not flush (the checker asks whether a fault explains it).
#[derive(Debug, Clone)]
pub struct GracefulFailure {
    /// The replica process.
    pub replica: String,
    /// The tenant, or `None` for a close that failed as a whole.
    pub tenant: Option<u32>,
    /// Driver time of the answer.
    pub at: u64,
    /// What came back.
    pub what: String,
}

/// Everything recorded, as the checker reads it.
#[derive(Debug, Clone, Default)]
pub struct Record {
    /// Every write, in invoke order.
    pub writes: Vec<WriteOp>,
    /// Request id → index in `writes`.
    by_req: HashMap<u64, usize>,
    /// Tenures by `(tenant, epoch)`.
    pub tenures: BTreeMap<(u32, u64), Tenure>,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u32>,
    /// Faults, grants and lifecycle events in the order they were seen.
    pub timeline: Vec<Note>,
    /// `(replica, tenant)` pairs whose sweep finished or failed.
    pub sweeps: HashSet<(String, u32)>,
    /// Per `(replica, tenant)`: how many sweeps (dead epochs or retention) finished or failed,
    /// and whether the last one finished.
    pub sweep_counts: HashMap<(String, u32), (u32, bool)>,
    /// Images that could not be published.
    pub snapshot_failures: u64,
    /// What the drill itself failed to do (not the runtime's fault).
    pub problems: Vec<String>,
    /// Findings from the stores and the driver (`head-moved-back`, erasure right after a forget).
    pub flags: Vec<Flag>,
    /// Per tenant: idempotency key → the first published image (or log tip) found holding it.
    pub covered: HashMap<u32, HashMap<String, Cover>>,
    /// Per replica process: intervals `[from, to)` during which a fault impaired it (a kill has
    /// no end).
    pub impairments: HashMap<String, Vec<(u64, Option<u64>)>>,
    /// Handoffs and closes that did not flush.
    pub graceful_failures: Vec<GracefulFailure>,
    /// Handoffs and closes asked for, flushed or not.
    pub graceful_asked: u64,
    /// Closes that answered: `(replica, driver time, tenants it reported unflushed)`.
    pub closes: Vec<(String, u64, Vec<u32>)>,
    /// Published images the store watcher read.
    pub images_read: u64,
    /// Log tips the store watcher restored (head image plus segments) and read.
    pub tips_read: u64,
    /// Resource reports of replica processes that closed: `(replica, report)`.
    pub resources: Vec<(String, Resources)>,
    /// Handoffs, forgets and closes the driver asked for, answered or not.
    pub leaves: Vec<acts::Leave>,
    /// Segments the driver damaged, and when it put them back.
    pub damages: Vec<acts::Damage>,
    /// Per tenant: the log tips the store watcher read, each with when.
    pub tips_seen: HashMap<u32, Vec<acts::TipSeen>>,
    /// What the end audit found: storage, erasure, point-in-time restores.
    pub audit: acts::AuditCounts,
    /// Point-in-time restores run during the run (the end's are judged with them).
    pub pitr_runs: Vec<crate::pitr::PitrRun>,
    /// Compactions the store watcher found overdue (`crate::compaction`).
    pub overdue: Vec<crate::compaction::Overdue>,
    /// `--clients addresses`: where commands ran, queries, forgets returned.
    pub addresses: addresses::AddressRecord,
}

/// Counters for progress lines.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// Acknowledged writes.
    pub ok: u64,
    /// Definitely refused writes.
    pub failed: u64,
    /// Writes of unknown outcome (or still pending).
    pub unknown: u64,
    /// Tenures granted.
    pub tenures: u64,
    /// Faults injected.
    pub faults: u64,
}

/// The shared, locked history.
#[derive(Debug)]
pub struct History {
    /// The record.
    inner: Mutex<Record>,
    /// Driver time at the start of the run, for relative times.
    pub start_ms: u64,
}

impl History {
    /// An empty history starting now.
    pub fn new() -> Self {
        Self {
            inner: Mutex::new(Record::default()),
            start_ms: now_ms(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Record> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of everything recorded.
    pub fn snapshot(&self) -> Record {
        self.lock().clone()
    }

    /// Seconds since the start, for printing.
    pub fn elapsed(&self, at: u64) -> f64 {
        at.saturating_sub(self.start_ms) as f64 / 1_000.0
    }

    /// Records the invocation of write `req`.
    pub fn invoke(&self, req: u64, tenant: u32, key: &str, replica: &str, zombie: bool) {
        let mut r = self.lock();
        let at = r.writes.len();
        r.writes.push(WriteOp {
            tenant,
            key: key.to_string(),
            replica: replica.to_string(),
            req,
            invoke_ms: now_ms(),
            done_ms: None,
            outcome: Outcome::Pending,
            zombie,
        });
        r.by_req.insert(req, at);
    }

    /// Records what came of write `req`, unless a (late) reply already settled it.
    pub fn complete(&self, req: u64, result: &Result<Answer, CallError>) -> Outcome {
        let outcome = match result {
            Ok(answer) => outcome_of(answer, false),
            Err(CallError::Timeout) => unknown("timeout"),
            Err(CallError::Gone) => unknown("process gone"),
            Err(CallError::NotSent) => Outcome::Fail {
                code: NOT_SENT.to_string(),
            },
        };
        let mut r = self.lock();
        let Some(&at) = r.by_req.get(&req) else {
            return outcome;
        };
        let Some(op) = r.writes.get_mut(at) else {
            return outcome;
        };
        if op.outcome == Outcome::Pending {
            op.outcome = outcome;
            op.done_ms = Some(now_ms());
        }
        op.outcome.clone()
    }

    /// A reply whose caller no longer waited: it settles a write left pending or unknown.
    pub fn late_reply(&self, req: u64, answer: &Answer) {
        let mut r = self.lock();
        let Some(&at) = r.by_req.get(&req) else {
            return;
        };
        let Some(op) = r.writes.get_mut(at) else {
            return;
        };
        if matches!(op.outcome, Outcome::Pending | Outcome::Unknown { .. }) {
            op.outcome = outcome_of(answer, true);
            op.done_ms = Some(now_ms());
        }
    }

    /// Records a grant reported by an open's reply.
    pub fn grant(&self, tenant: u32, epoch: u64, replica: &str, slot: Option<usize>, hi: u64) {
        let mut r = self.lock();
        let tenure = r.tenures.entry((tenant, epoch)).or_default();
        match tenure.grants.iter_mut().find(|g| g.replica == replica) {
            Some(g) => g.acquired_hi = g.acquired_hi.min(hi),
            None => {
                tenure.grants.push(Grant {
                    replica: replica.to_string(),
                    slot,
                    acquired_hi: hi,
                });
                let text = format!("{replica}: acquired epoch {epoch}");
                push_note(&mut r, Some(tenant), text);
            }
        }
    }

    /// Records a graceful handoff of `(tenant, epoch)` that returned `Ok`.
    pub fn handoff_ok(&self, tenant: u32, epoch: u64) {
        let mut r = self.lock();
        r.tenures.entry((tenant, epoch)).or_default().handoff_ok = true;
    }

    /// Counts a fault of `kind` and notes what it did.
    pub fn fault(&self, kind: &'static str, text: String) {
        let mut r = self.lock();
        *r.faults.entry(kind).or_default() += 1;
        push_note(&mut r, None, format!("fault {kind}: {text}"));
    }

    /// Records something the drill itself failed to do; the run then cannot pass.
    pub fn problem(&self, text: String) {
        let mut r = self.lock();
        r.problems.push(text.clone());
        push_note(&mut r, None, format!("drill problem: {text}"));
    }

    /// Records a finding of the driver (a violation unless the checker rules it out).
    pub fn flag(&self, rule: &'static str, tenant: Option<u32>, detail: String) {
        let mut r = self.lock();
        push_note(&mut r, tenant, format!("FLAG {rule}: {detail}"));
        r.flags.push(Flag {
            rule,
            tenant,
            at: now_ms(),
            detail,
        });
    }

    /// Records the keys of a published image, or of the log up to a tip, the store watcher
    /// read (`cover` says which).
    pub fn covered(&self, tenant: u32, cover: Cover, keys: Vec<String>) {
        let mut r = self.lock();
        match cover.kind {
            CoverKind::Image => r.images_read += 1,
            CoverKind::Log => r.tips_read += 1,
        }
        let covered = r.covered.entry(tenant).or_default();
        for key in keys {
            covered.entry(key).or_insert(cover);
        }
    }

    /// A fault starts impairing `replica` now.
    pub fn impair(&self, replica: &str) {
        let mut r = self.lock();
        r.impairments
            .entry(replica.to_string())
            .or_default()
            .push((now_ms(), None));
    }

    /// Every fault impairing `replica` ends now.
    pub fn unimpair(&self, replica: &str) {
        let now = now_ms();
        let mut r = self.lock();
        for interval in r.impairments.entry(replica.to_string()).or_default() {
            interval.1.get_or_insert(now);
        }
    }

    /// Records a close of `replica` that answered, naming `unflushed`.
    pub fn closed(&self, replica: &str, unflushed: Vec<u32>) {
        let mut r = self.lock();
        r.closes.push((replica.to_string(), now_ms(), unflushed));
    }

    /// Counts a handoff or close asked for.
    pub fn graceful_asked(&self) {
        self.lock().graceful_asked += 1;
    }

    /// Records a handoff or close that did not flush `tenant` (or failed as a whole).
    pub fn graceful_failed(&self, replica: &str, tenant: Option<u32>, what: String) {
        let mut r = self.lock();
        let text = format!("{replica}: did not flush: {what}");
        push_note(&mut r, tenant, text);
        r.graceful_failures.push(GracefulFailure {
            replica: replica.to_string(),
            tenant,
            at: now_ms(),
            what,
        });
    }

    /// Adds a line to the timeline.
    pub fn note(&self, tenant: Option<u32>, text: String) {
        push_note(&mut self.lock(), tenant, text);
    }

    /// Whether `replica` reported the end of a sweep of `tenant`.
    pub fn swept(&self, replica: &str, tenant: u32) -> bool {
        self.lock().sweeps.contains(&(replica.to_string(), tenant))
    }

    /// Counters for a progress line.
    pub fn counts(&self) -> Counts {
        let r = self.lock();
        let mut counts = Counts {
            tenures: r.tenures.len() as u64,
            faults: r.faults.values().map(|&n| u64::from(n)).sum(),
            ..Counts::default()
        };
        for op in &r.writes {
            match op.outcome {
                Outcome::Ok { .. } => counts.ok += 1,
                Outcome::Fail { .. } => counts.failed += 1,
                Outcome::Pending | Outcome::Unknown { .. } => counts.unknown += 1,
            }
        }
        counts
    }

    /// Records a line a replica reported about its runtime.
    pub fn on_line(&self, replica: &str, slot: Option<usize>, line: &Line) {
        let mut r = self.lock();
        let (tenant, text) = match *line {
            Line::Acquired { tenant, epoch, at } => {
                addresses::granted(&mut r, replica, slot, tenant, epoch, at);
                (tenant, format!("{replica}: acquired epoch {epoch}"))
            }
            Line::Opened { tenant, epoch } => {
                let tenure = r.tenures.entry((tenant, epoch)).or_default();
                tenure.opened = true;
                // Heard after the open: the lease was surely acquired by now.
                if !tenure.grants.iter().any(|g| g.replica == replica) {
                    tenure.grants.push(Grant {
                        replica: replica.to_string(),
                        slot,
                        acquired_hi: now_ms(),
                    });
                }
                (tenant, format!("{replica}: opened epoch {epoch}"))
            }
            Line::Published {
                tenant,
                epoch,
                seq,
                taken_at,
            } => {
                let tenure = r.tenures.entry((tenant, epoch)).or_default();
                tenure.published.push((seq, taken_at));
                return; // too many for the timeline; the tenure keeps them
            }
            Line::Released {
                tenant,
                epoch,
                flushed,
            } => {
                let tenure = r.tenures.entry((tenant, epoch)).or_default();
                tenure.released = Some(flushed);
                tenure.ended_at.get_or_insert(now_ms());
                (
                    tenant,
                    format!("{replica}: released epoch {epoch} (flushed: {flushed})"),
                )
            }
            Line::Lost { tenant, epoch } => {
                let tenure = r.tenures.entry((tenant, epoch)).or_default();
                tenure.lost = true;
                tenure.ended_at.get_or_insert(now_ms());
                (tenant, format!("{replica}: lost epoch {epoch}"))
            }
            Line::Forgotten { tenant, floor } => {
                let tenure = r.tenures.entry((tenant, floor)).or_default();
                tenure.forgotten = Some(floor);
                tenure.ended_at.get_or_insert(now_ms());
                (tenant, format!("{replica}: forgotten up to floor {floor}"))
            }
            Line::Swept { tenant, objects } => {
                r.sweeps.insert((replica.to_string(), tenant));
                let count = r
                    .sweep_counts
                    .entry((replica.to_string(), tenant))
                    .or_default();
                *count = (count.0 + 1, objects.is_some());
                (tenant, format!("{replica}: swept dead epochs: {objects:?}"))
            }
            Line::SnapshotFailed { .. } => {
                r.snapshot_failures += 1;
                return;
            }
            Line::ShipFailed {
                tenant,
                ref segment,
                ref error,
            } => (
                tenant,
                format!("{replica}: could not ship {segment}: {error}"),
            ),
            Line::Resources { ref report } => {
                r.resources.push((replica.to_string(), report.clone()));
                let text = format!("{replica}: resources after close and drop: {report:?}");
                push_note(&mut r, None, text);
                return;
            }
            Line::Ready { .. } | Line::Reply { .. } => return,
        };
        push_note(&mut r, Some(tenant), text);
    }
}

fn unknown(why: &str) -> Outcome {
    Outcome::Unknown {
        why: why.to_string(),
    }
}

fn outcome_of(answer: &Answer, late: bool) -> Outcome {
    match answer {
        Answer::Written {
            epoch,
            run_at,
            ack_at,
        } => Outcome::Ok {
            epoch: *epoch,
            run_at: *run_at,
            ack_at: *ack_at,
            late,
        },
        Answer::Sent {
            epoch,
            run_at,
            ack_at,
            ..
        } => Outcome::Ok {
            epoch: *epoch,
            run_at: *run_at,
            ack_at: *ack_at,
            late,
        },
        Answer::Failed { code, .. } if is_definite_refusal(code) => {
            Outcome::Fail { code: code.clone() }
        }
        Answer::Failed { code, .. } => unknown(code),
        _ => unknown("unexpected answer"),
    }
}

fn push_note(r: &mut Record, tenant: Option<u32>, text: String) {
    r.timeline.push(Note {
        at: now_ms(),
        tenant,
        text,
    });
}
