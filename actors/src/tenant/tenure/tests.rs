//! The tenure's state machine, without actors: the state table of `docs/architecture.md` row by
//! row, then each transition and the holes of the hardening it closes (docs/testing.md).

use std::time::Duration;

use leasehold::Error;
use leasehold::durable::StoreError;
use tokio::time::Instant;

use super::*;

const KEY: &str = "acme/t1";

fn tenure() -> Tenure {
    Tenure::new(KEY.into(), 3, 300)
}

fn later(now: Instant) -> Instant {
    now + Duration::from_secs(60)
}

fn timeout() -> Error {
    Error::Store(StoreError::Timeout {
        op: "mark_forgotten",
        after_ms: 10,
    })
}

fn fenced() -> Error {
    Error::Fenced { key: KEY.into() }
}

fn is_draining(e: &Error) -> bool {
    e.is_draining()
}

/// Drives a tenure into each row's state; `dirty` leaves one commit unpublished.
fn serving(dirty: bool) -> Tenure {
    let mut t = tenure();
    if dirty {
        t.on(Input::Committed { lapsed: false }, Instant::now());
    }
    t
}

fn draining() -> (Tenure, u64) {
    let mut t = serving(true);
    let ticket = t.admit(true).unwrap();
    let now = Instant::now();
    t.on(
        Input::Handoff {
            deadline: later(now),
            held: true,
        },
        now,
    );
    assert_eq!(t.status(), TenantStatus::Draining);
    (t, ticket)
}

fn flushing() -> Tenure {
    let (mut t, ticket) = draining();
    t.on(Input::Retire { ticket }, Instant::now());
    assert_eq!(t.phase(), &Phase::Flushing(Flushing::Publishing));
    t
}

fn releasing() -> Tenure {
    let mut t = flushing();
    t.on(published(1, true, Ok(None)), Instant::now());
    assert_eq!(t.phase(), &Phase::Flushing(Flushing::Releasing));
    t
}

fn abandoning() -> Tenure {
    let mut t = serving(false);
    t.on(Input::Abandon, Instant::now());
    t
}

fn forgetting() -> Tenure {
    let mut t = serving(false);
    t.on(Input::Forget, Instant::now());
    t
}

fn ended() -> Tenure {
    let mut t = abandoning();
    t.on(Input::LeaseReleased, Instant::now());
    assert_eq!(t.status(), TenantStatus::Abandoned);
    t
}

fn published(commits: u64, final_image: bool, outcome: Result<Option<Published>, Error>) -> Input {
    let lease_gone = matches!(&outcome, Err(e) if e.is_fenced());
    Input::Published {
        commits,
        final_image,
        outcome,
        lease_gone,
    }
}

fn answer(fx: &[Effect]) -> Option<Result<(), Error>> {
    fx.iter().find_map(|e| match e {
        Effect::Answer(a) => Some(a.clone()),
        _ => None,
    })
}

fn reply(fx: &[Effect], to: Waiter) -> Option<Result<(), Error>> {
    fx.iter().find_map(|e| match e {
        Effect::Reply(w, a) if *w == to => Some(a.clone()),
        _ => None,
    })
}

fn publishes(fx: &[Effect]) -> bool {
    fx.iter().any(|e| matches!(e, Effect::Publish { .. }))
}

// ---- The state table of docs/architecture.md, row by row. ----

#[test]
fn row_serving_runs_admits_snapshots_and_lets_abandon_and_forget_start() {
    let mut t = serving(true);
    assert!(t.admits(None, true).is_ok());
    assert!(
        t.admits(None, false).unwrap_err().is_fenced(),
        "lease permitting"
    );
    let ticket = t.admit(true).unwrap();
    assert!(t.admits(Some(ticket), true).is_ok());
    assert_eq!(t.snapshot(true, true), SnapshotPlan::Publish { commits: 1 });

    let mut t = serving(false);
    let fx = t.on(Input::Abandon, Instant::now());
    assert_eq!(t.status(), TenantStatus::Abandoning);
    assert!(answer(&fx).is_none(), "the abandon waits for the release");
    assert!(fx.ends_with(&[Effect::CloseLedger, Effect::EndTenure, Effect::ReleaseLease]));

    let mut t = serving(false);
    let fx = t.on(Input::Forget, Instant::now());
    assert_eq!(t.status(), TenantStatus::Forgetting);
    assert!(fx.contains(&Effect::MarkForgotten), "no upload under way");
}

#[test]
fn row_draining_refuses_new_work_but_runs_tickets_and_snapshots() {
    let (mut t, ticket) = draining();
    assert!(is_draining(&t.admits(None, true).unwrap_err()));
    assert!(is_draining(&t.admit(true).unwrap_err()));
    assert!(t.admits(Some(ticket), true).is_ok(), "ticket runs go on");
    assert!(
        t.admits(Some(ticket + 1), true).is_err(),
        "only live tickets"
    );
    assert_eq!(
        t.snapshot(true, true),
        SnapshotPlan::Publish { commits: 1 },
        "hole 4: what a ticket acknowledges while draining gets published"
    );
}

#[test]
fn row_draining_abandon_and_forget_overtake_the_handoff() {
    for input in [Input::Abandon, Input::Forget] {
        let (mut t, _) = draining();
        let fx = t.on(input, Instant::now());
        assert!(is_draining(
            &reply(&fx, Waiter::Handoff).unwrap().unwrap_err()
        ));
        assert!(t.status() == TenantStatus::Abandoning || t.status() == TenantStatus::Forgetting);
    }
}

#[test]
fn row_flushing_refuses_everything_and_is_overtaken_while_publishing() {
    let mut t = flushing();
    assert!(is_draining(&t.admits(None, true).unwrap_err()));
    assert!(is_draining(&t.admits(Some(1), true).unwrap_err()));
    assert!(matches!(t.snapshot(true, true), SnapshotPlan::Refuse(e) if e.is_draining()));
    let fx = t.on(Input::Forget, Instant::now());
    assert!(reply(&fx, Waiter::Handoff).unwrap().is_err());
    assert_eq!(
        t.phase(),
        &Phase::Forgetting(Forgetting::Settling),
        "the forget waits for the final upload before raising the floor"
    );
    let fx = t.on(published(1, true, Ok(None)), Instant::now());
    assert!(fx.contains(&Effect::MarkForgotten));
}

#[test]
fn row_flushing_releasing_is_too_late_to_overtake() {
    let mut t = releasing();
    assert_eq!(answer(&t.on(Input::Abandon, Instant::now())), Some(Ok(())));
    let refused = answer(&t.on(Input::Forget, Instant::now())).unwrap();
    assert!(is_draining(&refused.unwrap_err()));
    assert!(t.on(Input::LeaseLost, Instant::now()).is_empty());
    assert_eq!(t.phase(), &Phase::Flushing(Flushing::Releasing));
}

#[test]
fn row_abandoning_and_forgetting_refuse_work_ignore_abandon_and_refuse_forget() {
    for mut t in [abandoning(), forgetting()] {
        assert!(is_draining(&t.admits(None, true).unwrap_err()));
        assert!(is_draining(&t.admits(Some(1), true).unwrap_err()));
        assert_eq!(answer(&t.on(Input::Abandon, Instant::now())), Some(Ok(())));
        let refused = answer(&t.on(Input::Forget, Instant::now())).unwrap();
        assert!(is_draining(&refused.unwrap_err()));
    }
}

#[test]
fn row_final_states_fence_work_ignore_abandon_and_fence_forget() {
    let mut t = ended();
    assert!(t.admits(None, true).unwrap_err().is_fenced());
    assert!(t.admits(Some(1), true).unwrap_err().is_fenced());
    assert_eq!(answer(&t.on(Input::Abandon, Instant::now())), Some(Ok(())));
    let refused = answer(&t.on(Input::Forget, Instant::now())).unwrap();
    assert!(refused.unwrap_err().is_fenced());
}

// ---- Transitions. ----

#[test]
fn hole5_a_handoff_handled_after_its_callers_deadline_does_not_drain() {
    let mut t = serving(true);
    let now = Instant::now();
    let fx = t.on(
        Input::Handoff {
            deadline: now,
            held: true,
        },
        now,
    );
    let refused = answer(&fx).unwrap().unwrap_err();
    assert_eq!(refused.code(), "LEASEHOLD_DRAIN_TIMEOUT");
    assert_eq!(t.status(), TenantStatus::Serving);
}

#[test]
fn a_drain_past_its_deadline_serves_again_and_a_late_retire_changes_nothing() {
    let (mut t, ticket) = draining();
    let Phase::Draining { deadline } = *t.phase() else {
        panic!("draining");
    };
    let fx = t.on(Input::DrainDeadline { deadline }, deadline);
    assert_eq!(t.status(), TenantStatus::Serving);
    let err = reply(&fx, Waiter::Handoff).unwrap().unwrap_err();
    assert_eq!(err.code(), "LEASEHOLD_DRAIN_TIMEOUT");
    let fx = t.on(Input::Retire { ticket }, deadline);
    assert!(fx.is_empty() && t.status() == TenantStatus::Serving);
}

#[test]
fn the_last_ticket_starts_the_flush_and_a_clean_tenant_only_confirms_its_lease() {
    let (mut t, ticket) = draining();
    let fx = t.on(Input::Retire { ticket }, Instant::now());
    assert!(fx.contains(&Effect::Drained));
    assert!(fx.contains(&Effect::Publish {
        commits: 1,
        final_image: true,
        image: true
    }));

    let mut clean = serving(false);
    let now = Instant::now();
    let fx = clean.on(
        Input::Handoff {
            deadline: later(now),
            held: true,
        },
        now,
    );
    assert!(fx.contains(&Effect::Publish {
        commits: 0,
        final_image: true,
        image: false
    }));
}

#[test]
fn hole3_a_flushed_handoff_drops_its_local_copy_before_it_hands_the_lease_back() {
    let mut t = flushing();
    let fx = t.on(published(1, true, Ok(None)), Instant::now());
    let remove = fx.iter().position(|e| *e == Effect::RemoveDir).unwrap();
    assert!(
        !fx.contains(&Effect::ReleaseLease),
        "not before the copy is gone"
    );
    assert!(fx[..remove].contains(&Effect::CloseLedger));
    let fx = t.on(Input::DirRemoved, Instant::now());
    assert_eq!(fx, [Effect::ReleaseLease]);
    let fx = t.on(Input::LeaseReleased, Instant::now());
    assert_eq!(t.status(), TenantStatus::Released);
    assert_eq!(reply(&fx, Waiter::Handoff), Some(Ok(())));
    assert!(fx.contains(&Effect::Finish(TenantStatus::Released)));
}

#[test]
fn a_fenced_final_image_ends_the_tenure_and_another_failure_serves_again() {
    let mut t = flushing();
    let fx = t.on(published(1, true, Err(fenced())), Instant::now());
    assert_eq!(t.status(), TenantStatus::Abandoned);
    assert!(
        reply(&fx, Waiter::Handoff)
            .unwrap()
            .unwrap_err()
            .is_fenced()
    );
    assert!(fx.contains(&Effect::EndTenure));

    let mut t = flushing();
    let fx = t.on(published(1, true, Err(timeout())), Instant::now());
    assert_eq!(t.status(), TenantStatus::Serving);
    assert!(reply(&fx, Waiter::Handoff).unwrap().is_err());
    assert!(t.dirty(), "nothing was published");
}

#[test]
fn hole4_periodic_snapshots_run_while_draining_one_at_a_time() {
    let (mut t, _) = draining();
    let fx = t.on(Input::Tick { held: true }, Instant::now());
    assert!(publishes(&fx), "a drain does not stop the crash bound");
    let fx = t.on(Input::Tick { held: true }, Instant::now());
    assert!(!publishes(&fx), "one periodic publish at a time");
    t.on(published(1, false, Ok(None)), Instant::now());
    assert!(!t.dirty());
    assert!(!publishes(
        &t.on(Input::Tick { held: true }, Instant::now())
    ));
}

#[test]
fn a_snapshot_that_finds_the_lease_gone_ends_the_tenure_as_a_flush_does() {
    let mut t = serving(true);
    let SnapshotPlan::Publish { commits } = t.snapshot(true, true) else {
        panic!("publish");
    };
    let fx = t.on(published(commits, false, Err(fenced())), Instant::now());
    assert_eq!(t.status(), TenantStatus::Abandoned);
    assert!(fx.contains(&Effect::EndTenure));
}

#[test]
fn a_snapshot_that_found_only_the_holders_clock_past_the_lease_leaves_the_tenure() {
    let mut t = serving(true);
    let SnapshotPlan::Publish { commits } = t.snapshot(true, true) else {
        panic!("publish");
    };
    let lapsed = Input::Published {
        commits,
        final_image: false,
        outcome: Err(fenced()),
        lease_gone: false,
    };
    t.on(lapsed, Instant::now());
    assert_eq!(t.status(), TenantStatus::Serving, "a renewal may revive it");
    assert!(t.dirty());
}

#[test]
fn a_lapse_during_commit_ends_the_tenure() {
    let mut t = serving(false);
    let fx = t.on(Input::Committed { lapsed: true }, Instant::now());
    assert_eq!(t.status(), TenantStatus::Abandoned);
    assert!(fx.contains(&Effect::EndTenure) && fx.contains(&Effect::CloseLedger));
}

#[test]
fn a_forget_waits_for_uploads_then_raises_the_floor_erases_and_releases() {
    let mut t = serving(true);
    let SnapshotPlan::Publish { commits } = t.snapshot(true, true) else {
        panic!("publish");
    };
    let fx = t.on(Input::Forget, Instant::now());
    assert!(
        !fx.contains(&Effect::MarkForgotten),
        "an upload is under way"
    );
    assert!(fx.contains(&Effect::ForgetBegun));
    let fx = t.on(published(commits, false, Ok(None)), Instant::now());
    assert!(fx.contains(&Effect::MarkForgotten));
    let fx = t.on(Input::FloorRaised(Ok(3)), Instant::now());
    assert_eq!(fx, [Effect::Erase { floor: 3 }]);
    let fx = t.on(Input::Erased(Ok(())), Instant::now());
    assert_eq!(fx, [Effect::EndTenure, Effect::ReleaseLease]);
    let fx = t.on(Input::LeaseReleased, Instant::now());
    assert_eq!(t.status(), TenantStatus::Forgotten);
    assert_eq!(reply(&fx, Waiter::Forget), Some(Ok(())));
}

#[test]
fn hole9_a_floor_raise_of_unknown_outcome_is_asked_again_then_given_up() {
    let mut t = forgetting();
    for _ in 0..FLOOR_RETRIES {
        let fx = t.on(Input::FloorRaised(Err(timeout())), Instant::now());
        assert_eq!(
            fx,
            [Effect::MarkForgotten],
            "a retry recognises its own success"
        );
    }
    let fx = t.on(Input::FloorRaised(Err(timeout())), Instant::now());
    assert!(fx.ends_with(&[Effect::EndTenure, Effect::ReleaseLease]));
    let fx = t.on(Input::LeaseReleased, Instant::now());
    assert_eq!(t.status(), TenantStatus::Abandoned);
    assert!(
        reply(&fx, Waiter::Forget)
            .unwrap()
            .unwrap_err()
            .is_outcome_unknown()
    );
}

#[test]
fn an_erase_that_failed_still_ends_forgotten_and_tells_the_caller() {
    let mut t = forgetting();
    t.on(Input::FloorRaised(Ok(3)), Instant::now());
    t.on(Input::Erased(Err(timeout())), Instant::now());
    let fx = t.on(Input::LeaseReleased, Instant::now());
    assert_eq!(t.status(), TenantStatus::Forgotten);
    assert!(reply(&fx, Waiter::Forget).unwrap().is_err());
}

#[test]
fn every_change_of_status_is_emitted_in_order_and_moves_forward() {
    let mut t = serving(true);
    let now = Instant::now();
    let mut seen = Vec::new();
    let inputs = [
        Input::Handoff {
            deadline: later(now),
            held: true,
        },
        published(1, true, Ok(None)),
        Input::DirRemoved,
        Input::LeaseReleased,
    ];
    for input in inputs {
        for effect in t.on(input, now) {
            if let Effect::Emit(crate::events::Event::StateChanged { from, to, .. }) = effect {
                assert!(from.can_move_to(to), "{from} -> {to}");
                seen.push(to);
            }
        }
    }
    use TenantStatus::*;
    assert_eq!(seen, [Draining, Flushing, Released]);
}

#[test]
fn row_log_a_failed_segment_ends_the_tenure_and_fails_the_flush_waiting_for_it() {
    let mut t = flushing();
    t.on(Input::Shipping, Instant::now());
    let unknown = Error::Unshipped {
        key: "acme/t1".into(),
        reason: "timeout".into(),
    };
    let fx = t.on(Input::Shipped(Err(unknown.clone())), Instant::now());
    assert_eq!(t.status(), TenantStatus::Abandoning);
    assert_eq!(reply(&fx, Waiter::Handoff), Some(Err(unknown)));
    assert!(fx.ends_with(&[Effect::CloseLedger, Effect::EndTenure, Effect::ReleaseLease]));
    t.on(Input::LeaseReleased, Instant::now());
    assert_eq!(t.status(), TenantStatus::Abandoned);
}

#[test]
fn row_log_a_forget_raises_the_floor_only_once_the_segment_in_flight_is_back() {
    let mut t = serving(true);
    t.on(Input::Shipping, Instant::now());
    let fx = t.on(Input::Forget, Instant::now());
    assert!(
        !fx.contains(&Effect::MarkForgotten),
        "a segment is in flight"
    );
    let fx = t.on(Input::Shipped(Ok(())), Instant::now());
    assert!(fx.contains(&Effect::MarkForgotten));
}

#[test]
fn row_log_a_shipped_segment_changes_nothing_else() {
    let mut t = serving(true);
    t.on(Input::Shipping, Instant::now());
    let fx = t.on(Input::Shipped(Ok(())), Instant::now());
    assert!(fx.is_empty());
    assert_eq!(t.status(), TenantStatus::Serving);
}
