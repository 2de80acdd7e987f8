//! Passivation in the tenure, row by row: the rows of docs/architecture.md's state table for
//! `passivating` and `passivated`, and the column of when a passivation may begin.

use std::time::Duration;

use leasehold::Error;
use tokio::time::Instant;

use super::super::*;

const KEY: &str = "acme/t1";

fn serving(dirty: bool) -> Tenure {
    let mut t = Tenure::new(KEY.into(), 3, 300);
    if dirty {
        t.on(Input::Committed { lapsed: false }, Instant::now());
    }
    t
}

fn ask(untouched: bool) -> Input {
    Input::Passivate {
        reason: PassivationReason::Idle,
        judged: 7,
        touches: if untouched { 7 } else { 8 },
        idle_ms: 60_000,
    }
}

fn answer(fx: &[Effect]) -> Option<Result<(), Error>> {
    fx.iter().find_map(|e| match e {
        Effect::Answer(a) => Some(a.clone()),
        _ => None,
    })
}

fn refused_as_draining(fx: &[Effect]) -> bool {
    matches!(answer(fx), Some(Err(e)) if e.is_draining())
}

fn passivating(dirty: bool) -> Tenure {
    let mut t = serving(dirty);
    let fx = t.on(ask(true), Instant::now());
    assert_eq!(answer(&fx), Some(Ok(())));
    t
}

fn published_ok() -> Input {
    Input::Published {
        commits: 1,
        final_image: true,
        outcome: Ok(None),
        lease_gone: false,
    }
}

fn passivating_releasing() -> Tenure {
    let mut t = passivating(true);
    t.on(published_ok(), Instant::now());
    t
}

fn passivated() -> Tenure {
    let mut t = passivating_releasing();
    t.on(Input::DirRemoved, Instant::now());
    t.on(Input::LeaseReleased, Instant::now());
    assert_eq!(t.status(), TenantStatus::Passivated);
    t
}

// ---- When a passivation may begin (the state table's `passivate` column). ----

#[test]
fn row_serving_untouched_and_without_a_ticket_begins_to_passivate_and_settles_first() {
    let mut t = serving(true);
    let fx = t.on(ask(true), Instant::now());
    assert_eq!(answer(&fx), Some(Ok(())));
    assert_eq!(t.status(), TenantStatus::Passivating);
    assert!(
        fx.contains(&Effect::Publish {
            commits: 1,
            final_image: true,
            image: true,
        }),
        "the log settles (or the final image is published) before anything goes: {fx:?}"
    );
    assert!(!fx.contains(&Effect::ReleaseLease) && !fx.contains(&Effect::CloseLedger));

    let mut clean = serving(false);
    let fx = clean.on(ask(true), Instant::now());
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Publish { image: false, .. }))
    );
}

#[test]
fn row_serving_with_a_live_ticket_or_touched_since_is_not_passivated() {
    let mut t = serving(false);
    let ticket = t.admit(true).unwrap();
    assert!(refused_as_draining(&t.on(ask(true), Instant::now())));
    assert_eq!(t.status(), TenantStatus::Serving);
    t.on(Input::Retire { ticket }, Instant::now());
    assert!(
        refused_as_draining(&t.on(ask(false), Instant::now())),
        "used since"
    );
    assert_eq!(t.status(), TenantStatus::Serving);
    assert_eq!(answer(&t.on(ask(true), Instant::now())), Some(Ok(())));
}

#[test]
fn row_no_passivation_begins_while_leaving_or_after_the_end() {
    let now = Instant::now();
    let draining = {
        let mut t = serving(false);
        let _ticket = t.admit(true).unwrap();
        let deadline = now + Duration::from_secs(60);
        t.on(
            Input::Handoff {
                deadline,
                held: true,
            },
            now,
        );
        t
    };
    let mut abandoning = serving(false);
    abandoning.on(Input::Abandon, now);
    let mut forgetting = serving(false);
    forgetting.on(Input::Forget, now);
    let mut ended = serving(false);
    ended.on(Input::Abandon, now);
    ended.on(Input::LeaseReleased, now);
    for mut t in [
        draining,
        abandoning,
        forgetting,
        ended,
        passivating(false),
        passivated(),
    ] {
        let before = t.phase().clone();
        let fx = t.on(ask(true), now);
        assert!(answer(&fx).is_some_and(|a| a.is_err()), "{before:?}");
        assert_eq!(t.phase(), &before, "nothing moves");
    }
}

// ---- Rows: passivating (publishing), passivating (releasing), passivated. ----

#[test]
fn row_passivating_refuses_runs_admissions_snapshots_and_handoffs_as_passivating() {
    let mut t = passivating(true);
    let refusal = t.admits(None, true).unwrap_err();
    assert!(
        matches!(&refusal, Error::Draining { state, .. } if state == "passivating"),
        "a handle reads this refusal as a passivation under way and waits to reopen: {refusal:?}"
    );
    assert!(t.admit(true).unwrap_err().is_draining());
    assert!(matches!(t.snapshot(true, true), SnapshotPlan::Refuse(e) if e.is_draining()));
    let now = Instant::now();
    let fx = t.on(
        Input::Handoff {
            deadline: now + Duration::from_secs(5),
            held: true,
        },
        now,
    );
    assert!(refused_as_draining(&fx));
    assert!(
        t.on(Input::Tick { held: true }, now).is_empty(),
        "no periodic image"
    );
}

#[test]
fn row_passivating_while_publishing_is_overtaken_by_abandon_forget_and_a_lost_lease() {
    let mut t = passivating(true);
    let fx = t.on(Input::Abandon, Instant::now());
    assert_eq!(
        t.status(),
        TenantStatus::Abandoning,
        "abandon wins: no flush"
    );
    assert!(fx.ends_with(&[Effect::CloseLedger, Effect::EndTenure, Effect::ReleaseLease]));

    let mut t = passivating(true);
    let fx = t.on(Input::Forget, Instant::now());
    assert_eq!(t.phase(), &Phase::Forgetting(Forgetting::Settling));
    assert!(
        !fx.contains(&Effect::MarkForgotten),
        "waits for the flush's upload"
    );
    let fx = t.on(published_ok(), Instant::now());
    assert!(fx.contains(&Effect::MarkForgotten), "then raises the floor");

    let mut t = passivating(true);
    t.on(Input::LeaseLost, Instant::now());
    assert_eq!(t.status(), TenantStatus::Abandoned);

    let mut t = passivating(true);
    let lost = Error::Unshipped {
        key: KEY.into(),
        reason: "put".into(),
    };
    t.on(Input::Shipping, Instant::now());
    t.on(Input::Shipped(Err(lost)), Instant::now());
    assert_eq!(
        t.status(),
        TenantStatus::Abandoned,
        "a log that cannot go on ends it"
    );
}

#[test]
fn row_passivating_while_releasing_is_too_late_to_overtake() {
    let mut t = passivating_releasing();
    assert_eq!(answer(&t.on(Input::Abandon, Instant::now())), Some(Ok(())));
    assert!(refused_as_draining(&t.on(Input::Forget, Instant::now())));
    assert!(t.on(Input::LeaseLost, Instant::now()).is_empty());
    assert!(t.passivating(Flushing::Releasing));
}

#[test]
fn row_passivated_fences_work_ignores_abandon_and_fences_forget() {
    let mut t = passivated();
    assert!(t.admits(None, true).unwrap_err().is_fenced());
    assert_eq!(answer(&t.on(Input::Abandon, Instant::now())), Some(Ok(())));
    let refused = answer(&t.on(Input::Forget, Instant::now())).unwrap();
    assert!(refused.unwrap_err().is_fenced());
}

// ---- The path and its failures. ----

#[test]
fn a_passivation_lets_go_in_a_handoffs_order_and_says_so() {
    let mut t = passivating(true);
    let fx = t.on(published_ok(), Instant::now());
    assert!(
        fx.ends_with(&[Effect::CloseLedger, Effect::EndTenure, Effect::RemoveDir]),
        "closed, ended, the local copy dropped: {fx:?}"
    );
    assert_eq!(
        t.on(Input::DirRemoved, Instant::now()),
        [Effect::ReleaseLease]
    );
    let fx = t.on(Input::LeaseReleased, Instant::now());
    assert!(fx.contains(&Effect::Emit(crate::events::Event::Released {
        key: KEY.into(),
        epoch: 3,
        flushed: true,
    })));
    assert!(fx.contains(&Effect::Emit(crate::events::Event::Passivated {
        key: KEY.into(),
        epoch: 3,
        reason: PassivationReason::Idle,
        idle_ms: 60_000,
    })));
    assert_eq!(fx.last(), Some(&Effect::Finish(TenantStatus::Passivated)));
    assert!(
        !fx.iter().any(|e| matches!(e, Effect::Reply(..))),
        "nobody waits for a passivation"
    );
}

#[test]
fn a_passivation_whose_flush_fails_serves_on_and_one_fenced_is_a_lost_lease() {
    let mut t = passivating(true);
    let failed = Input::Published {
        commits: 1,
        final_image: true,
        outcome: Err(Error::Closed("store down".into())),
        lease_gone: false,
    };
    let fx = t.on(failed, Instant::now());
    assert_eq!(t.status(), TenantStatus::Serving);
    assert!(
        t.admits(None, true).is_ok(),
        "the next idle check tries again"
    );
    // The supervisor hears that it serves on before its status says so: whoever sees
    // `serving` and asks for an idle check finds it back in the order of last activity.
    let told = fx.iter().position(|e| *e == Effect::ServesOn);
    let serving = fx.iter().position(|e| {
        matches!(e, Effect::Emit(crate::events::Event::StateChanged { to, .. })
            if *to == TenantStatus::Serving)
    });
    assert!(
        told.is_some() && told < serving,
        "ServesOn before the status change: {fx:?}"
    );
    // And before the `snapshot_failed` event: an observer that syncs on the event finds the
    // tenant back in the order too.
    let failed_event = fx
        .iter()
        .position(|e| matches!(e, Effect::Emit(crate::events::Event::SnapshotFailed { .. })));
    assert!(
        failed_event.is_some() && told < failed_event,
        "ServesOn before snapshot_failed: {fx:?}"
    );

    let mut t = passivating(true);
    let fenced = Input::Published {
        commits: 1,
        final_image: true,
        outcome: Err(Error::Fenced { key: KEY.into() }),
        lease_gone: true,
    };
    let fx = t.on(fenced, Instant::now());
    assert_eq!(t.status(), TenantStatus::Abandoned);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Emit(crate::events::Event::Lost { .. })))
    );
}

#[test]
fn fault_switch_a_passivation_that_skips_its_flush_lets_go_at_once() {
    let mut t = Tenure::new(KEY.into(), 3, 300).skipping_passivation_flush(true);
    t.on(Input::Committed { lapsed: false }, Instant::now());
    let fx = t.on(ask(true), Instant::now());
    assert!(!fx.iter().any(|e| matches!(e, Effect::Publish { .. })));
    assert!(fx.ends_with(&[Effect::CloseLedger, Effect::EndTenure, Effect::RemoveDir]));
}
