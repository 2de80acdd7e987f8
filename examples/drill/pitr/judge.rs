//! The expectations of a point-in-time restore, from the history alone (see [`super`]):
//!
//! | rule                     | flagged when                                                           |
//! | ------------------------ | ---------------------------------------------------------------------- |
//! | `pitr-outside-retention` | a target inside the window is refused as outside it                    |
//! | `pitr-failed`            | a restore fails otherwise (a corrupt or out-of-chain log, an I/O error) |
//! | `pitr-missing-write`     | a write at or before the target is not in the file                     |
//! | `pitr-later-write`       | a write run after the target, a refused or a forgotten write is in it  |
//! | `pitr-wrong-state`       | the file at the final tip differs from what a fresh replica read        |
//!
//! Times are the host's `CLOCK_MONOTONIC` (the drill's one clock), a time target the wall clock
//! read at the same instant; [`MARGIN_MS`] keeps a write acknowledged or run within a few ms of
//! the target out of both rules. A store error (an outage) is not judged.

use crate::checker::Violation;
use crate::finale::Final;
use crate::history::{CoverKind, Outcome, Record, WriteOp};
use crate::protocol::Mode;

use super::{PitrRun, PitrTarget};

/// Writes this close to a time target are not judged either way.
pub const MARGIN_MS: u64 = 50;

/// What the restores came to, besides the violations.
#[derive(Debug, Default, Clone, Copy)]
pub struct PitrCounts {
    /// Restores judged.
    pub checked: u64,
    /// Targets outside the window, refused as such (not judged).
    pub outside: u64,
    /// Restores that met a store error (not judged).
    pub store_errors: u64,
}

/// Judges every restore of `runs` against `rec` and `fin`, with the loss rules of `mode`.
pub fn judge(
    rec: &Record,
    fin: &Final,
    runs: &[PitrRun],
    mode: Mode,
) -> (Vec<Violation>, PitrCounts) {
    let mut out = Vec::new();
    let mut counts = PitrCounts::default();
    for run in runs {
        let violation = |rule: &'static str, detail: String| Violation {
            rule,
            tenant: Some(run.tenant),
            at: run.at,
            detail: format!("restore of t{} to {}: {detail}", run.tenant, run.target),
        };
        let keys = match &run.outcome {
            Ok(keys) => keys,
            Err(("store", _)) => {
                counts.store_errors += 1;
                continue;
            }
            Err(("outside-retention", why)) if run.inside => {
                out.push(violation("pitr-outside-retention", why.clone()));
                continue;
            }
            Err(("outside-retention", _)) => {
                counts.outside += 1;
                continue;
            }
            Err((_, why)) => {
                out.push(violation("pitr-failed", why.clone()));
                continue;
            }
        };
        counts.checked += 1;
        let keys: std::collections::HashSet<&str> = keys.iter().map(String::as_str).collect();
        if let PitrTarget::FinalTip(_) = run.target
            && let Some(read) = fin.keys.get(&run.tenant)
            && (read.len() != keys.len() || read.iter().any(|k| !keys.contains(k.as_str())))
        {
            out.push(violation(
                "pitr-wrong-state",
                format!(
                    "{} keys, where a fresh replica read {} at the end",
                    keys.len(),
                    read.len()
                ),
            ));
        }
        let mut missing = Vec::new();
        let mut later = Vec::new();
        for w in rec.writes.iter().filter(|w| w.tenant == run.tenant) {
            let found = keys.contains(w.key.as_str());
            match expect(rec, w, run, mode) {
                Some(true) if !found => missing.push(w.key.as_str()),
                Some(false) if found => later.push(w.key.as_str()),
                _ => {}
            }
        }
        if !missing.is_empty() {
            out.push(violation(
                "pitr-missing-write",
                format!(
                    "{} writes at or before it are missing: {:?}",
                    missing.len(),
                    first(&missing)
                ),
            ));
        }
        if !later.is_empty() {
            out.push(violation(
                "pitr-later-write",
                format!(
                    "{} writes after it (or refused, or forgotten) are in it: {:?}",
                    later.len(),
                    first(&later)
                ),
            ));
        }
    }
    (out, counts)
}

fn first<'a>(keys: &[&'a str]) -> Vec<&'a str> {
    keys.iter().take(4).copied().collect()
}

/// Whether `w` must be in the file of `run` (`Some(true)`), must not be (`Some(false)`), or
/// either (`None`).
fn expect(rec: &Record, w: &WriteOp, run: &PitrRun, mode: Mode) -> Option<bool> {
    let (epoch, run_at, ack_at) = match w.outcome {
        Outcome::Ok {
            epoch,
            run_at,
            ack_at,
            ..
        } => (epoch, run_at, ack_at),
        Outcome::Fail { .. } => return Some(false),
        Outcome::Pending | Outcome::Unknown { .. } => return None,
    };
    if epoch <= run.floor {
        return Some(false); // erased by a forget; the chain starts above the floor
    }
    let (before, after, seq) = match run.target {
        PitrTarget::Tip(s) => (s.start, s.done, Some(s.tip.seq)),
        PitrTarget::Time(s) => (s.start.saturating_sub(MARGIN_MS), s.start + MARGIN_MS, None),
        PitrTarget::FinalTip(_) => return None, // the final read is the judge there
    };
    if run_at > after {
        return Some(false);
    }
    let acked_before = mode == Mode::Shipped && ack_at < before;
    let cover = rec.covered.get(&w.tenant).and_then(|c| c.get(&w.key));
    let logged_before = cover.is_some_and(|c| {
        c.kind == CoverKind::Log
            && match seq {
                Some(seq) => c.seq <= seq,
                None => c.seen_at < before,
            }
    });
    (acked_before || logged_before).then_some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::acts::TipSeen;
    use crate::history::{Cover, WriteOp};
    use leasehold::layout::LogPos;

    fn write(key: &str, outcome: Outcome) -> WriteOp {
        WriteOp {
            tenant: 0,
            key: key.into(),
            replica: "replica-1#1".into(),
            req: 1,
            invoke_ms: 0,
            done_ms: None,
            outcome,
            zombie: false,
        }
    }

    fn acked(epoch: u64, run_at: u64, ack_at: u64) -> Outcome {
        Outcome::Ok {
            epoch,
            run_at,
            ack_at,
            late: false,
        }
    }

    /// A restore of tenant 0 at the tip (e2, 10), read between 1,000 and 1,010, floor 1.
    fn run(keys: &[&str]) -> PitrRun {
        PitrRun {
            tenant: 0,
            target: PitrTarget::Tip(TipSeen {
                floor: 1,
                tip: LogPos { epoch: 2, seq: 10 },
                start: 1_000,
                done: 1_010,
                wall_start: 0,
            }),
            floor: 1,
            inside: true,
            at: 2_000,
            outcome: Ok(keys.iter().map(|k| k.to_string()).collect()),
        }
    }

    fn rules(rec: &Record, runs: &[PitrRun], mode: Mode) -> Vec<&'static str> {
        judge(rec, &Final::default(), runs, mode)
            .0
            .iter()
            .map(|v| v.rule)
            .collect()
    }

    #[test]
    fn on_shipped_a_write_acknowledged_before_the_tip_was_read_must_be_in_it() {
        let mut rec = Record::default();
        rec.writes.push(write("a", acked(2, 900, 990)));
        rec.writes.push(write("b", acked(2, 1_020, 1_030)));
        assert_eq!(
            rules(&rec, &[run(&["a"])], Mode::Shipped),
            Vec::<&str>::new()
        );
        assert_eq!(
            rules(&rec, &[run(&[])], Mode::Shipped),
            ["pitr-missing-write"]
        );
        assert_eq!(
            rules(&rec, &[run(&["a", "b"])], Mode::Shipped),
            ["pitr-later-write"]
        );
        // On Async an acknowledgement says nothing of the log; a cover read at or before does.
        assert_eq!(rules(&rec, &[run(&[])], Mode::Async), Vec::<&str>::new());
        let cover = Cover {
            kind: CoverKind::Log,
            epoch: 2,
            seq: 9,
            seen_at: 995,
        };
        rec.covered.entry(0).or_default().insert("a".into(), cover);
        assert_eq!(
            rules(&rec, &[run(&[])], Mode::Async),
            ["pitr-missing-write"]
        );
    }

    #[test]
    fn refused_and_forgotten_writes_are_never_in_it_and_unknown_ones_may_be() {
        let mut rec = Record::default();
        let refused = Outcome::Fail {
            code: "LEASEHOLD_FENCED".into(),
        };
        rec.writes.push(write("r", refused));
        rec.writes.push(write("f", acked(1, 100, 110)));
        let unknown = Outcome::Unknown {
            why: "LEASEHOLD_UNSHIPPED".into(),
        };
        rec.writes.push(write("u", unknown));
        assert_eq!(
            rules(&rec, &[run(&["u"])], Mode::Shipped),
            Vec::<&str>::new()
        );
        assert_eq!(
            rules(&rec, &[run(&["r"])], Mode::Shipped),
            ["pitr-later-write"]
        );
        assert_eq!(
            rules(&rec, &[run(&["f"])], Mode::Shipped),
            ["pitr-later-write"]
        );
    }

    #[test]
    fn a_refusal_inside_the_window_is_a_violation_outside_it_is_counted() {
        let rec = Record::default();
        let mut refused = run(&[]);
        refused.outcome = Err(("outside-retention", "no longer retained".into()));
        assert_eq!(
            rules(&rec, &[refused.clone()], Mode::Shipped),
            ["pitr-outside-retention"]
        );
        refused.inside = false;
        let (found, counts) = judge(&rec, &Final::default(), &[refused], Mode::Shipped);
        assert!(found.is_empty());
        assert_eq!(counts.outside, 1);
    }
}
