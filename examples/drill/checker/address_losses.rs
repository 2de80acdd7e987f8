//! The loss rules on address clients' writes (`--clients addresses` on `Async` and `Images`):
//! a note sent through one replica runs on the tenant's holder, so its crash tail is counted on
//! the process that ran it, and a query of a later tenure rightly finds nothing of a note lost
//! within that tail. Each case is judged through [`evaluate`], as the drill judges a run.

use super::*;
use crate::history::addresses::QueryOp;
use crate::history::{Grant, Tenure, WriteOp};
use crate::protocol::NoteRow;

/// `Async` with the drill's default period (1,000 ms): the bound is 2,500 ms.
fn rules(mode: Mode) -> LossRules {
    LossRules::of(mode, 1_000)
}

/// A tenure of t0 granted to `replica` at `at`.
fn tenure(replica: &str, at: u64) -> Tenure {
    Tenure {
        grants: vec![Grant {
            replica: replica.into(),
            slot: None,
            acquired_hi: at,
        }],
        opened: true,
        ..Tenure::default()
    }
}

/// The seed's shape: t0's epoch 1 held by replica-1#1 (granted at 100); the note `n1` sent
/// through replica-2#1 at 990, run and acknowledged by replica-1#1 under epoch 1 (ack at 1,000),
/// in no image or tip the watcher read; replica-1#1 SIGKILLed at `kill_at`; epoch 2 acquired by
/// replica-1#2 at `successor_at` (the lease's end). The fresh replica reads t0 at the end
/// without `n1` unless `present`.
fn history(kill_at: u64, successor_at: u64, present: bool) -> (Record, Final) {
    let mut rec = Record::default();
    rec.tenures.insert((0, 1), tenure("replica-1#1", 100));
    rec.tenures
        .insert((0, 2), tenure("replica-1#2", successor_at));
    rec.writes.push(WriteOp {
        tenant: 0,
        key: "n1".into(),
        replica: "replica-2#1".into(),
        req: 7,
        invoke_ms: 990,
        done_ms: Some(1_001),
        outcome: Outcome::Ok {
            epoch: 1,
            run_at: 995,
            ack_at: 1_000,
            late: false,
        },
        zombie: false,
    });
    rec.addresses.ran_on.insert(7, "replica-1".into());
    rec.impairments
        .insert("replica-1#1".into(), vec![(kill_at, None)]);
    let mut fin = Final::default();
    let keys = if present {
        vec!["n1".to_string()]
    } else {
        vec![]
    };
    fin.keys.insert(0, keys.into_iter().collect());
    fin.floors.insert(0, 0);
    (rec, fin)
}

/// A query for `n1` through replica-3#1, sent at `sent_at`, answered 5 ms later with nothing.
fn missed_query(rec: &mut Record, sent_at: u64) {
    rec.addresses.queries.push(QueryOp {
        tenant: 0,
        key: "n1".into(),
        via: "replica-3#1".into(),
        sent_at,
        answered_at: sent_at + 5,
        note: None,
    });
}

fn judged(rec: &Record, fin: &Final, mode: Mode) -> Report {
    evaluate(rec, fin, Tolerance::default(), rules(mode), None)
}

/// How many violations of `rule` the report holds.
fn count(report: &Report, rule: &str) -> usize {
    report.violations.iter().filter(|v| v.rule == rule).count()
}

#[test]
fn a_forwarded_write_lost_in_its_runners_crash_is_judged_by_the_runners_kill_not_its_lease() {
    // Killed 400 ms after the acknowledgement; its lease ran out 2,800 ms after it. Only the
    // 400 ms could ship: within the bound, whichever replica the note was sent through.
    let (rec, fin) = history(1_400, 3_800, false);
    let report = judged(&rec, &fin, Mode::Async);
    assert_eq!(
        count(&report, "lost-beyond-tail"),
        0,
        "{:?}",
        report.violations
    );
    assert_eq!(report.lost_within_tail, 1);
    assert_eq!(report.max_tail_ms, 400);
}

#[test]
fn a_forwarded_write_its_runner_could_ship_longer_than_the_bound_is_lost_beyond_the_tail() {
    // The checker can still fail: the runner lived 2,700 ms after the acknowledgement.
    let (rec, fin) = history(3_700, 6_000, false);
    let report = judged(&rec, &fin, Mode::Async);
    assert_eq!(
        count(&report, "lost-beyond-tail"),
        1,
        "{:?}",
        report.violations
    );
    assert_eq!(report.lost_within_tail, 0);
}

#[test]
fn a_fault_on_the_replica_a_write_was_sent_through_does_not_excuse_its_runners_loss() {
    // The replica the note was sent through is killed, its runner is not (its tenure ended at
    // 3,800 some other way): 2,800 ms could ship, beyond the bound.
    let (mut rec, fin) = history(1_400, 3_800, false);
    rec.impairments.remove("replica-1#1");
    rec.impairments
        .insert("replica-2#1".into(), vec![(1_400, None)]);
    let report = judged(&rec, &fin, Mode::Async);
    assert_eq!(
        count(&report, "lost-beyond-tail"),
        1,
        "{:?}",
        report.violations
    );
}

#[test]
fn a_query_of_a_later_tenure_may_miss_a_note_lost_within_the_tail() {
    for mode in [Mode::Async, Mode::Images] {
        let (mut rec, fin) = history(1_400, 3_800, false);
        missed_query(&mut rec, 4_000);
        let report = judged(&rec, &fin, mode);
        assert_eq!(
            count(&report, "query-missed-acked"),
            0,
            "{mode:?}: {:?}",
            report.violations
        );
        assert_eq!(report.queries_missed_lost, 1, "{mode:?}");
    }
}

#[test]
fn a_query_answered_before_any_later_tenure_acquired_must_find_the_note() {
    // Sent after the acknowledgement, answered at 1,305, before epoch 2 acquired at 3,800: only
    // epoch 1, which holds the note, can have answered it.
    let (mut rec, fin) = history(1_400, 3_800, false);
    missed_query(&mut rec, 1_300);
    let report = judged(&rec, &fin, Mode::Async);
    assert_eq!(
        count(&report, "query-missed-acked"),
        1,
        "{:?}",
        report.violations
    );
}

#[test]
fn a_query_missing_a_note_that_is_read_back_at_the_end_is_a_violation() {
    let (mut rec, fin) = history(1_400, 3_800, true);
    missed_query(&mut rec, 4_000);
    let report = judged(&rec, &fin, Mode::Async);
    assert_eq!(
        count(&report, "query-missed-acked"),
        1,
        "{:?}",
        report.violations
    );
}

#[test]
fn a_query_missing_a_note_lost_beyond_the_tail_is_a_violation_too() {
    let (mut rec, fin) = history(3_700, 6_000, false);
    missed_query(&mut rec, 6_100);
    let report = judged(&rec, &fin, Mode::Async);
    assert_eq!(
        count(&report, "query-missed-acked"),
        1,
        "{:?}",
        report.violations
    );
    assert_eq!(
        count(&report, "lost-beyond-tail"),
        1,
        "{:?}",
        report.violations
    );
}

#[test]
fn on_shipped_a_query_may_miss_nothing_acknowledged() {
    let (mut rec, fin) = history(1_400, 3_800, false);
    missed_query(&mut rec, 4_000);
    let report = judged(&rec, &fin, Mode::Shipped);
    assert_eq!(
        count(&report, "query-missed-acked"),
        1,
        "{:?}",
        report.violations
    );
    assert_eq!(
        count(&report, "lost-acknowledged"),
        1,
        "{:?}",
        report.violations
    );
}

#[test]
fn a_query_that_found_the_note_is_no_finding() {
    let (mut rec, fin) = history(1_400, 3_800, true);
    missed_query(&mut rec, 1_300);
    if let Some(q) = rec.addresses.queries.last_mut() {
        q.note = Some(NoteRow {
            key: "n1".into(),
            replica: "replica-1".into(),
            epoch: 1,
            run_at: 995,
        });
    }
    let report = judged(&rec, &fin, Mode::Async);
    assert_eq!(
        count(&report, "query-missed-acked"),
        0,
        "{:?}",
        report.violations
    );
}
