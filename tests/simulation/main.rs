//! The seeded simulation (issue #5, part 2): random sequences of operations against a fleet of
//! replicas in one process — every clock manual, every store behind a fault-injecting wrapper —
//! checked op by op against a reference model of what each tenant must contain.
//!
//! ## Layout
//! - `ops` — the operations and the proptest strategy that generates sequences of them.
//! - `model` — the reference model: for each op, every outcome a correct runtime may give and
//!   the state it leads to.
//! - `world` — the system under test: supervisors, stores, clocks, handles.
//! - `check` — runs a sequence on a fresh world beside the model and says where they part.
//! - `hardening`, `change_log`, `passivation` — pinned sequences of the hardening's holes and
//!   fault classes, of the change log (with the ignored regressions of what the simulation
//!   found), and of passivation; `final_review` — what it found in the changes of the change
//!   log's final review.
//!
//! ## What the model holds the runtime to
//! - Two cases in three run on `Durability::Shipped`, the default; a leading `Periodic` or
//!   `Images` puts a case on `Images` (docs/testing.md, "The change log in the simulation").
//! - A run (or ticket run) is `Ok` exactly when its tenure serves and the holder's lease holds
//!   (on `Shipped`: and its segment was put and the tip moved; a segment not shipped answers
//!   `Unshipped` or `Fenced` and ends the tenure); otherwise `Fenced` (lapsed, ended) or
//!   `Draining` (leaving). Every read returns exactly the acknowledged writes of the tenure, on
//!   top of what it restored; on `Shipped` every open restores the content at the tip: every
//!   acknowledged write, and a write of unknown outcome exactly when its tip move landed.
//! - The lease record's tip and every segment object are as predicted (exact keys).
//! - A snapshot or (on `Images`) a handoff publishes exactly the committed ledger, or fails with
//!   the store's error (outage, deadline) and changes nothing but leftover objects; a handoff that fails
//!   serves again, one whose lease lapsed while it drained is fenced and abandoned.
//! - An open restores exactly the head — the last image published, i.e. everything acknowledged
//!   before the last successful snapshot or handoff, never a refused write — or, for a damaged
//!   head, its base; after a forget, nothing. It is refused while another lease is live.
//! - After every op the lease record (owner, epoch, expiry, released, floor, head), every image
//!   and manifest in the durable store (nothing at or below the floor but what a failed forget
//!   left), every replica's local directories and every tenure's status are as predicted.
//! - Races (a handoff beside a write or a forget) may end in any order the messages can take;
//!   the model keeps every branch the observed outcome allows.
//! - Every store call may land late: a call armed with `Late` answers `Timeout` and lands at
//!   `Land` (or before the next release); it lands by the store's rules as they must hold — a
//!   head only moves forward, bytes of a forgotten epoch leave nothing. Close, crash and
//!   restart of a replica, an open in flight at close, a forget forced during an upload, a
//!   lapse inside a run, a run blocking past `drain_timeout`, and periodic snapshots with the
//!   crash bound judged from the stores (docs/testing.md, "The simulation's fault classes").
//! - In the passivation cases (a leading `Passivation`, one in nine) a tenant idle for
//!   `passivate_after` by the replicas' clocks is let go at the idle check that follows every
//!   clock move, like a handoff's flush; a call on a handle the host kept reopens it on the same
//!   replica (a new epoch, every acknowledged write restored); a write, open, handoff or forget
//!   may race the flush (docs/testing.md, "Passivation in the simulation"). Elsewhere no
//!   replica passivates.
//! - Ops that expose a hole whose fix has not merged (`ops::UNFIXED_HOLES`) stay out of the
//!   generated mix; each hole is pinned by an ignored `holeN_…` test in `hardening`.
//!
//! A failing case is shrunk by proptest, printed, and its seed saved in
//! `proptest-regressions/simulation.txt` (committed), which every later run replays first.
//! `LEASEHOLD_SIM_CASES` sets the number of cases, `LEASEHOLD_SIM_SEED` pins the seed (the one
//! used is printed). The `fault-switches` tests show that the model catches a broken build.

mod change_log;
mod check;
mod final_review;
mod hardening;
mod log_review;
mod messages;
mod model;
mod ops;
mod passivation;
mod world;

use std::time::Instant;

use leasehold_actors::Breakage;
use model::TTL_MS;
use ops::At::{Newest, Older, On};
use ops::Op;
use proptest::test_runner::{
    Config, FileFailurePersistence, RngSeed, TestCaseError, TestError, TestRunner,
};

/// Cases CI runs: 2,000 short sequences, about 170 s alone on two cores (3,000 until CI's time
/// was cut again; docs/testing.md, "CI's time": hunts for a hole run more with
/// `LEASEHOLD_SIM_CASES`).
const DEFAULT_CASES: u32 = 2_000;

/// Test runners working side by side, each on its own seed (`seed`, `seed + 1`, …).
const RUNNERS: usize = 2;

/// Where failing seeds are kept.
const REGRESSIONS: &str = "proptest-regressions/simulation.txt";

/// The seed of this run: `LEASEHOLD_SIM_SEED`, or one taken from the clock (and printed).
fn seed() -> u64 {
    let pinned = std::env::var("LEASEHOLD_SIM_SEED").ok();
    let seed = pinned.and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        now.map_or(1, |d| d.as_nanos() as u64)
    });
    eprintln!("simulation seed: {seed} (LEASEHOLD_SIM_SEED={seed} replays this run)");
    seed
}

fn cases() -> u32 {
    let env = std::env::var("LEASEHOLD_SIM_CASES").ok();
    env.and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_CASES)
}

/// Runs `config.cases` generated sequences (5 to 25 ops) on a build with `breakage`.
fn simulate(config: Config, breakage: Breakage) -> Result<(), TestError<Vec<Op>>> {
    let mut runner = TestRunner::new(config);
    runner.run(&ops::ops(), |ops| {
        check::run_case(&ops, breakage).map_err(TestCaseError::fail)
    })
}

#[test]
fn seeded_simulation_keeps_every_promise_the_model_states() {
    let (seed, cases) = (seed(), cases());
    let started = Instant::now();
    // Most of a case is waiting for other threads: two runners keep both cores busy.
    let runners: Vec<_> = (0..RUNNERS)
        .map(|i| {
            let config = Config {
                cases: cases / RUNNERS as u32 + u32::from(i < cases as usize % RUNNERS),
                // A run hunting holes not fixed yet, or in one family, keeps its failures to
                // itself.
                failure_persistence: match ops::HOLES_ASKED.is_empty()
                    && std::env::var_os("LEASEHOLD_SIM_FAMILY").is_none()
                {
                    true => Some(Box::new(FileFailurePersistence::Direct(REGRESSIONS))),
                    false => None,
                },
                rng_seed: RngSeed::Fixed(seed.wrapping_add(i as u64)),
                max_shrink_iters: 4_096,
                ..Config::default()
            };
            std::thread::spawn(move || simulate(config, Breakage::default()))
        })
        .collect();
    let failures: Vec<String> = runners
        .into_iter()
        .filter_map(|runner| match runner.join() {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some("a runner panicked".to_string()),
        })
        .collect();
    if !failures.is_empty() {
        panic!("{}", failures.join("\n\n"));
    }
    eprintln!("{cases} cases in {:?}", started.elapsed());
    eprintln!("what the ops came to:\n{}", check::coverage());
}

/// Replays a fixed sequence on a correct build.
fn replay(ops: &[Op]) {
    if let Err(e) = check::run_case(ops, Breakage::default()) {
        panic!("{e}");
    }
}

#[test]
fn regression_a_lapsed_owner_is_fenced_its_successor_restores_the_last_image_and_forget_empties_it()
{
    use Op::*;
    replay(&[
        Open { r: 0, t: 0 },
        Write { t: 0, at: Newest },
        Snapshot { t: 0, at: Newest },
        Write { t: 0, at: Newest },
        Advance { ms: TTL_MS + 1 },
        Open { r: 1, t: 0 },
        Write { t: 0, at: On(0) },
        Read { t: 0, at: Newest },
        Renew { r: 0 },
        Open { r: 0, t: 0 },
        DurableDown(true),
        Forget { t: 0, at: Newest },
        DurableDown(false),
        Forget { t: 0, at: Newest },
        Open { r: 2, t: 0 },
        Read { t: 0, at: Newest },
    ]);
}

#[test]
fn regression_handoffs_under_outages_stalls_and_races_lose_no_acknowledged_write() {
    use Op::*;
    replay(&[
        Open { r: 0, t: 1 },
        Ticket { t: 1, at: Newest },
        LeaseDown(true),
        Handoff { t: 1, at: Newest },
        LeaseDown(false),
        Stalled {
            t: 1,
            at: Newest,
            handoff: true,
        },
        DrainedHandoff {
            t: 1,
            at: Newest,
            pause: 9_000,
            renew: true,
        },
        Open { r: 1, t: 1 },
        Read { t: 1, at: Newest },
        RaceHandoffWrite { t: 1, at: Newest },
        Open { r: 2, t: 1 },
        DrainedHandoff {
            t: 1,
            at: Newest,
            pause: TTL_MS + 1,
            renew: false,
        },
        Advance { ms: TTL_MS + 1 },
        Open { r: 0, t: 1 },
        Read { t: 1, at: On(0) },
    ]);
}

#[test]
fn regression_a_corrupt_head_is_skipped_for_its_base_never_for_anything_at_or_below_the_floor() {
    use Op::*;
    replay(&[
        Open { r: 0, t: 0 },
        Write { t: 0, at: Newest },
        Snapshot { t: 0, at: Newest },
        Write { t: 0, at: Newest },
        Snapshot { t: 0, at: Newest },
        CorruptHead { t: 0 },
        Abandon { t: 0, at: Newest },
        Open { r: 1, t: 0 },
        Read { t: 0, at: Newest },
        Write { t: 0, at: Newest },
        Handoff { t: 0, at: Newest },
        CorruptHead { t: 0 },
        Open { r: 2, t: 0 },
        Read { t: 0, at: Newest },
        Forget { t: 0, at: Newest },
        Open { r: 0, t: 0 },
        Write { t: 0, at: Newest },
        Snapshot { t: 0, at: Newest },
        CorruptHead { t: 0 },
        Abandon { t: 0, at: Newest },
        Open { r: 1, t: 0 },
    ]);
}

/// Shrunk by proptest: a lost tenure's local copy, dead once the tenant was forgotten
/// elsewhere, is dropped by the supervisor's background local sweep.
#[test]
fn regression_a_dead_local_copy_may_go_when_its_tenure_is_lost() {
    use Op::*;
    replay(&[
        Open { r: 0, t: 0 },
        Open { r: 0, t: 1 },
        Advance { ms: TTL_MS + 1 },
        Open { r: 1, t: 0 },
        Forget { t: 0, at: Newest },
        Write { t: 0, at: Older(1) },
        Forget { t: 1, at: Newest },
        Read { t: 0, at: Older(1) },
        Renew { r: 0 },
        SweepLocal { r: 0 },
        Open { r: 0, t: 0 },
        Open { r: 0, t: 1 },
    ]);
}

/// Shrunk by proptest: an open whose restore failed (the durable store down) spent its acquire
/// attempt; the next open must take a fresh one, not be refused by its own released tenure.
#[test]
fn regression_an_open_whose_restore_failed_does_not_lock_out_the_next_open() {
    use Op::*;
    replay(&[
        Open { r: 1, t: 0 },
        Open { r: 0, t: 1 },
        Ticket { t: 0, at: Newest },
        Snapshot { t: 0, at: Newest },
        DurableDown(true),
        LapseInCommit { t: 0, at: Newest },
        Open { r: 0, t: 0 },
        Open { r: 0, t: 0 },
    ]);
}

/// Shrunk by proptest: damaging the head twice leaves it damaged (the harness once flipped the
/// same bits back).
#[test]
fn regression_a_head_damaged_twice_stays_damaged() {
    use Op::*;
    replay(&[
        Open { r: 0, t: 0 },
        Open { r: 0, t: 1 },
        DrainedHandoff {
            t: 1,
            at: Newest,
            pause: 0,
            renew: false,
        },
        CorruptHead { t: 1 },
        CorruptHead { t: 1 },
    ]);
}

/// A configuration for the broken-build tests: a pinned seed, nothing persisted (the failure
/// is the point), a short shrink so the report names a small sequence.
fn broken_build_config() -> Config {
    Config {
        cases: 300,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(0x5eed_0005),
        max_shrink_iters: 256,
        max_shrink_time: 10_000,
        ..Config::default()
    }
}

/// Asserts that the simulation fails on a build with `breakage`, and shows how.
fn assert_caught(breakage: Breakage) {
    match simulate(broken_build_config(), breakage) {
        Err(TestError::Fail(reason, ops)) => {
            eprintln!("caught {breakage:?} with {ops:?}:\n{reason}");
        }
        other => panic!("the simulation did not catch {breakage:?}: {other:?}"),
    }
}

#[test]
fn a_build_that_commits_without_checking_the_lease_is_caught() {
    assert_caught(Breakage {
        skip_commit_check: true,
        ..Breakage::default()
    });
}

#[test]
fn a_build_whose_handoff_skips_the_final_image_is_caught() {
    assert_caught(Breakage {
        skip_final_image: true,
        ..Breakage::default()
    });
}

#[test]
fn a_build_that_acknowledges_before_the_tip_moved_is_caught() {
    assert_caught(Breakage {
        ack_before_tip: true,
        ..Breakage::default()
    });
}

/// A build whose passivation lets go of a tenant without settling its log or publishing its
/// final image (`passivate_unsettled`, breaking promise 12) is caught within the usual mix of
/// cases (the passivation cases among them): shrunk, by a passivation whose lease had lapsed,
/// which the correct build's flush finds fenced and the broken one lets go without asking; the
/// lost write itself is shown by the test below.
#[test]
fn a_build_that_passivates_without_settling_is_caught() {
    assert_caught(Breakage {
        passivate_unsettled: true,
        ..Breakage::default()
    });
}

/// The same sequence on a correct build and on one whose passivation does not settle: an
/// acknowledged write, the tenant idle past `passivate_after` (its replica lets it go), then a
/// read on the handle the host kept, which reopens the tenant from the stores. The broken build
/// is reported at the passivation (no final image in the store), the correct one passes.
#[test]
fn a_passivation_that_loses_an_acknowledged_write_is_reported_at_once() {
    use Op::*;
    let ops = [
        Passivation { images: true },
        Open { r: 0, t: 0 },
        Write { t: 0, at: Newest },
        Passivate {
            t: 0,
            at: Newest,
            ms: 0,
        },
        Read { t: 0, at: Newest },
    ];
    replay(&ops);
    let broken = Breakage {
        passivate_unsettled: true,
        ..Breakage::default()
    };
    let Err(why) = check::run_case(&ops, broken) else {
        panic!("a passivation that published nothing went unnoticed")
    };
    assert!(why.starts_with("op #3"), "{why}");
}

/// With `Shipped`, a write whose segment cannot be put (the durable store is down) must not be
/// acknowledged: a build that acknowledges at the local commit answers `Ok`, and the model,
/// which expects `Unshipped`, says so at that op.
#[test]
fn a_write_acknowledged_before_its_segment_is_shipped_is_reported_at_once() {
    use Op::*;
    let broken = Breakage {
        ack_before_tip: true,
        ..Breakage::default()
    };
    let ops = [
        Open { r: 0, t: 0 },
        DurableDown(true),
        Write { t: 0, at: Newest },
    ];
    let verdict = check::run_case(&ops, broken);
    let Err(why) = verdict else {
        panic!("a write acknowledged with its segment unshipped went unnoticed")
    };
    assert!(why.starts_with("op #2"), "{why}");
    assert!(why.contains("Unshipped"), "{why}");
}

#[test]
fn a_zombie_write_acknowledged_without_the_lease_is_reported_at_once() {
    use Op::*;
    let broken = Breakage {
        skip_commit_check: true,
        ..Breakage::default()
    };
    let ops = [
        Open { r: 0, t: 0 },
        Advance { ms: TTL_MS + 1 },
        Write { t: 0, at: Newest },
    ];
    let verdict = check::run_case(&ops, broken);
    let Err(why) = verdict else {
        panic!("a write acknowledged after the lease lapsed went unnoticed")
    };
    assert!(why.starts_with("op #2"), "{why}");
    assert!(why.contains("Fenced"), "{why}");
}

#[test]
fn a_handoff_reported_flushed_without_its_final_image_is_reported_at_once() {
    use Op::*;
    let broken = Breakage {
        skip_final_image: true,
        ..Breakage::default()
    };
    // The final image is a handoff's only with `Images` (with a change log there is none).
    let ops = [
        Images,
        Open { r: 0, t: 0 },
        Write { t: 0, at: Newest },
        Handoff { t: 0, at: Newest },
    ];
    let verdict = check::run_case(&ops, broken);
    let Err(why) = verdict else {
        panic!("a handoff that published nothing went unnoticed")
    };
    assert!(why.starts_with("op #3"), "{why}");
}

/// Found by this simulation: the supervisor takes a tenant out of its table when a forget
/// begins without checking the epoch, so a forget retried on an older tenure (whose first try
/// failed) evicts the newer, live tenure of the same tenant on that replica. The next `open`
/// there is refused with `LeaseHeld` (held by the replica itself), and `close` would neither
/// hand the live tenure off nor report it unflushed.
#[test]
fn regression_a_retried_forget_of_an_old_tenure_leaves_the_newer_tenure_in_the_table() {
    use Op::*;
    replay(&[
        Open { r: 0, t: 0 },
        LeaseDown(true),
        Forget { t: 0, at: Newest },
        LeaseDown(false),
        Advance { ms: TTL_MS + 1 },
        Open { r: 0, t: 0 },
        Forget { t: 0, at: Older(1) },
        Open { r: 0, t: 0 },
    ]);
}
