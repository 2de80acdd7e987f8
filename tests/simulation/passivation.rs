//! Pinned sequences of the passivation cases (a leading `Op::Passivation`; docs/testing.md,
//! "Passivation in the simulation").

use crate::ops::At::{Newest, Older};
use crate::ops::Op::*;
use crate::ops::Racer;
use crate::replay;

/// Found by this simulation: a tenant whose passivation's flush failed (the durable store down,
/// its final image not published) serves on, and must be let go once it has been idle again —
/// the supervisor had taken it out of its order of last activity when it chose it, and nothing
/// put it back, so it was never passivated again (nor evicted at `max_open`).
#[test]
fn regression_a_tenant_whose_passivation_failed_is_passivated_once_idle_again() {
    replay(&[
        Passivation { images: true },
        Open { r: 0, t: 0 },
        Write { t: 0, at: Newest },
        DurableDown(true),
        Passivate {
            t: 0,
            at: Newest,
            ms: 0,
        },
        DurableDown(false),
        Renew { r: 0 },
        Passivate {
            t: 0,
            at: Newest,
            ms: 0,
        },
        Read { t: 0, at: Newest },
    ]);
}

/// A handle the host kept re-resolves, every time: the first tenure is passivated, a write on
/// its handle reopens the tenant (a new epoch), that tenure is passivated in turn, and a read on
/// the first handle — bound to the second tenure now — reopens it once more; a handoff of a
/// passivated tenure answers `Ok`, a write racing the idle check waits for the passivation and
/// reopens the tenant, and a forget on a kept handle erases the tenant it reopens.
#[test]
fn regression_a_kept_handle_reopens_a_tenant_passivated_again_and_again() {
    replay(&[
        Passivation { images: false },
        Open { r: 1, t: 0 },
        Open { r: 1, t: 1 },
        Write { t: 0, at: Newest },
        Passivate {
            t: 0,
            at: Newest,
            ms: 0,
        },
        Write { t: 0, at: Newest },
        Renew { r: 1 },
        Passivate {
            t: 0,
            at: Newest,
            ms: 0,
        },
        Read { t: 0, at: Older(1) },
        Handoff { t: 1, at: Newest },
        Renew { r: 1 },
        RacePassivate {
            t: 0,
            at: Older(2),
            ms: 0,
            with: Racer::Write,
        },
        Read { t: 0, at: Newest },
        Forget { t: 0, at: Older(1) },
        Open { r: 2, t: 0 },
        Read { t: 0, at: Newest },
    ]);
}

/// A kept handle reopens through the supervisor that handed it out: once that replica has
/// closed (and restarted), a call on the handle of a tenure passivated there answers `Closed`,
/// and the tenant opens on the restarted replica as a new tenure.
#[test]
fn regression_a_kept_handle_of_a_closed_replica_answers_closed() {
    replay(&[
        Passivation { images: true },
        Open { r: 0, t: 0 },
        Write { t: 0, at: Newest },
        Passivate {
            t: 0,
            at: Newest,
            ms: 0,
        },
        Close { r: 0 },
        Write { t: 0, at: Newest },
        Open { r: 0, t: 0 },
        Write { t: 0, at: Older(1) },
        Read { t: 0, at: Newest },
    ]);
}

/// An abandon racing a passivation (`Racer::Abandon`): it overtakes the flush — on `Images`
/// perhaps while the final image uploads, whose put may then land named by nothing and be
/// deleted by the reconciliation — or comes once the tenure let go, a no-op; the next open
/// restores what the head or the log holds either way. The first model missed the put landing
/// unnamed, and seeds 11 and 13 of the passivation family (1,500 cases each) failed on it; which
/// way the race goes depends on the threads, so this replay runs the op in both modes without
/// forcing that branch (it passes on the first model too).
#[test]
fn regression_an_abandon_racing_a_passivation_overtakes_its_flush_or_comes_after_it() {
    for images in [true, false] {
        replay(&[
            Passivation { images },
            Open { r: 2, t: 0 },
            Write { t: 0, at: Newest },
            RacePassivate {
                t: 0,
                at: Newest,
                ms: 0,
                with: Racer::Abandon,
            },
            Open { r: 1, t: 0 },
            Read { t: 0, at: Newest },
            Write { t: 0, at: Newest },
            RacePassivate {
                t: 0,
                at: Newest,
                ms: 0,
                with: Racer::Abandon,
            },
            Open { r: 2, t: 0 },
            Read { t: 0, at: Newest },
        ]);
    }
}

/// CI seeds 1796199758459679506 and 1796213036365978633: a passivation of a tenure whose lease
/// lapsed while the lease store was down ended it lost in the model, and once in about 80
/// replays the runtime read `Serving`. Its first passivation's flush had failed on the store
/// that was down; the supervisor put the tenant back in its order of last activity only when a
/// spawned watch of its status came back, as used then — after the world's next clock move or
/// idle check, now and then, so the next check did not choose it. The tenant now tells its
/// supervisor before its status reads `serving` (`ServesOn`; pinned without the simulation by
/// `race_an_idle_check_right_after_a_failed_passivation_finds_the_tenant_idle_again` in
/// `tests/passivation/races.rs`).
#[test]
fn regression_a_passivation_of_a_tenure_whose_lease_lapsed_while_the_store_was_down() {
    use crate::ops::At::On;
    replay(&[
        Passivation { images: true },
        Open { r: 0, t: 0 },
        Open { r: 2, t: 1 },
        LeaseDown(true),
        Write { t: 1, at: Newest },
        Open { r: 1, t: 1 },
        Advance { ms: 5000 },
        Passivate {
            t: 1,
            at: On(2),
            ms: 0,
        },
    ]);
}
