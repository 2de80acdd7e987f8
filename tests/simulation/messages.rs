//! Typed messages in the simulation (docs/testing.md, "Messages in the simulation"): random
//! sequences of commands and queries sent to one tenant's address through two replicas, with
//! retries of keyed commands (a lost answer), tip moves that time out and land late or never,
//! a write held between its commit and its segment with a query reading it meanwhile and a
//! crash there, handoffs, crashes, renewals and time. Every clock is manual.
//!
//! The oracle is the stores, never the runtime's word: after every op the tenant's log is
//! restored at its tip into a plain file (`log::restore_to`) and held against what the callers
//! heard —
//! - no command ran twice: each id is in the log at most once (keyed retries included);
//! - an acknowledged command is in the log; one refused with a definite error is not;
//! - a command's reply is what its first run answered (`1`: the only row of its id);
//! - a query's reply shows nothing the log does not hold (no dirty reply, even when a crash
//!   takes a committed write back) and everything acknowledged before it was sent;
//! - at the end, every fault cleared and every lease run out, each keyed command retried until
//!   it is answered is in the log exactly once.
//!
//! The three fault switches that break these promises (`ack_before_tip`, `reply_before_log`,
//! `ignore_idempotency_keys`) are each caught (`a_build_…_is_caught`).

mod world;

use std::time::Instant;

use leasehold_actors::Breakage;
use proptest::prelude::*;
use proptest::test_runner::{
    Config, FileFailurePersistence, RngSeed, TestCaseError, TestError, TestRunner,
};

use world::{MsgWorld, REPLICAS, TTL_MS};

/// Cases a run generates unless `LEASEHOLD_SIM_MESSAGE_CASES` says otherwise.
const DEFAULT_CASES: u32 = 120;

/// Where failing seeds are kept.
const REGRESSIONS: &str = "proptest-regressions/simulation-messages.txt";

/// One step of a messages case; `r` is the replica that takes the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsgOp {
    /// A command with a fresh id, keyed (its id is its idempotency key) or not.
    Send { r: usize, keyed: bool },
    /// The `n`-th keyed command sent so far (modulo their number) sent again: a retry.
    Resend { r: usize, n: usize },
    /// A query of every id in the ledger.
    Query { r: usize },
    /// A keyed command whose three tip-move asks time out; they land at `Land` (or never).
    LoseAnswer { r: usize },
    /// Every lease-store call kept back lands now.
    Land,
    /// A keyed command whose segment put is held; a query reads meanwhile; with `crash` the
    /// tenant is abandoned before the put goes on.
    Gated { r: usize, crash: bool },
    /// The tenant open on `r` is abandoned (a crash: no flush).
    Crash { r: usize },
    /// The tenant open on `r` is handed off.
    Handoff { r: usize },
    /// Time passes on every clock.
    Advance { ms: u64 },
    /// `renew_now` on `r`.
    Renew { r: usize },
}

fn op() -> impl Strategy<Value = MsgOp> {
    let r = || 0..REPLICAS;
    prop_oneof![
        8 => (r(), any::<bool>()).prop_map(|(r, keyed)| MsgOp::Send { r, keyed }),
        5 => (r(), 0..8usize).prop_map(|(r, n)| MsgOp::Resend { r, n }),
        4 => r().prop_map(|r| MsgOp::Query { r }),
        2 => r().prop_map(|r| MsgOp::LoseAnswer { r }),
        2 => Just(MsgOp::Land),
        4 => (r(), any::<bool>()).prop_map(|(r, crash)| MsgOp::Gated { r, crash }),
        2 => r().prop_map(|r| MsgOp::Crash { r }),
        2 => r().prop_map(|r| MsgOp::Handoff { r }),
        2 => prop::sample::select(vec![1_000, 9_000, TTL_MS + 1]).prop_map(|ms| MsgOp::Advance { ms }),
        2 => r().prop_map(|r| MsgOp::Renew { r }),
    ]
}

/// A case: 4 to 18 ops.
fn ops() -> impl Strategy<Value = Vec<MsgOp>> {
    prop::collection::vec(op(), 4..=18)
}

/// Runs `ops` on a fresh world; `Err` names the first op after which the stores and the
/// callers disagree.
pub fn run_case(ops: &[MsgOp], breakage: Breakage) -> Result<(), String> {
    let system = actix::System::new();
    let verdict = system.block_on(async {
        let mut world = MsgWorld::new(breakage);
        let mut verdict = Ok(());
        for (i, op) in ops.iter().enumerate() {
            let heard = world.exec(op).await;
            if let Err(why) = world.check().await {
                verdict = Err(format!("op #{i} {op:?} (heard {heard:?}): {why}"));
                break;
            }
        }
        if verdict.is_ok() {
            verdict = world.settle().await.map_err(|why| format!("end: {why}"));
        }
        drop(world);
        actix::System::current().stop();
        verdict
    });
    let _ = system.run();
    verdict
}

fn simulate(config: Config, breakage: Breakage) -> Result<(), TestError<Vec<MsgOp>>> {
    let mut runner = TestRunner::new(config);
    runner.run(&ops(), |ops| {
        run_case(&ops, breakage).map_err(TestCaseError::fail)
    })
}

fn cases() -> u32 {
    let env = std::env::var("LEASEHOLD_SIM_MESSAGE_CASES").ok();
    env.and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_CASES)
}

#[test]
fn seeded_message_simulation_runs_every_command_once_and_answers_nothing_dirty() {
    let seed = crate::seed();
    let started = Instant::now();
    let config = Config {
        cases: cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(REGRESSIONS))),
        rng_seed: RngSeed::Fixed(seed),
        max_shrink_iters: 2_048,
        ..Config::default()
    };
    if let Err(e) = simulate(config, Breakage::default()) {
        panic!("{e}");
    }
    eprintln!("{} message cases in {:?}", cases(), started.elapsed());
}

/// A sequence pinned as a regression: a lost answer retried on the other replica after the
/// lease ran out, both when the late tip moves land and when they never do.
#[test]
fn a_lost_answer_retried_elsewhere_runs_once() {
    use MsgOp::*;
    for land in [true, false] {
        let mut ops = vec![Send { r: 0, keyed: true }, LoseAnswer { r: 0 }];
        if land {
            ops.push(Land);
        }
        ops.extend([
            Advance { ms: TTL_MS + 1 },
            Resend { r: 1, n: 1 },
            Query { r: 1 },
        ]);
        if let Err(e) = run_case(&ops, Breakage::default()) {
            panic!("{e}");
        }
    }
}

/// Asserts that the messages simulation catches `breakage` with the generator, and shows how.
fn assert_caught(breakage: Breakage) {
    let config = Config {
        cases: 200,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(0x5eed_0014),
        max_shrink_iters: 256,
        max_shrink_time: 10_000,
        ..Config::default()
    };
    match simulate(config, breakage) {
        Err(TestError::Fail(reason, ops)) => {
            eprintln!("caught {breakage:?} with {ops:?}:\n{reason}")
        }
        other => panic!("the message simulation did not catch {breakage:?}: {other:?}"),
    }
}

#[test]
fn a_build_that_ignores_idempotency_keys_is_caught() {
    assert_caught(Breakage {
        ignore_idempotency_keys: true,
        ..Breakage::default()
    });
}

#[test]
fn a_build_whose_queries_answer_before_the_log_is_caught() {
    assert_caught(Breakage {
        reply_before_log: true,
        ..Breakage::default()
    });
}

#[test]
fn a_build_whose_commands_answer_at_the_local_commit_is_caught() {
    assert_caught(Breakage {
        ack_before_tip: true,
        ..Breakage::default()
    });
}
