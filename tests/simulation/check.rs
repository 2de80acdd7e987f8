//! The checker: runs a sequence of ops against a fresh [`World`] and the model side by side.
//! After every op the observed outcome must be one the model allows, and the stores, the local
//! directories and every tenure's status must be what that branch of the model says; the
//! branches that survive are kept (more than one only after a race). Every tenure that ended
//! must be explained by something the world did to it (`audit::Ends`). At the end every fault
//! is cleared, every lease left to expire, and each tenant opened on a replica that never
//! served it: its ledger must be exactly the model's, and nothing at or below its floor may be
//! left.
//!
//! - `check/rules.rs` — what is compared after each op.
//! - `check/audit.rs` — the rule that every ended tenure is explained, and the end's audits.
//! - `check/tally.rs` — what the ops came to, for the test's output.

use std::time::{Duration, Instant};

use leasehold_actors::Breakage;

use crate::model::{PitrTarget, Pos, REPLICAS, Res, State, TENANTS};
use crate::ops::{At, Op};
use crate::world::{CRASH_BOUND, Case, PUT_LIFETIME_MS, Seen, World, wall_ms};

/// How long the stores get to show what a change log's case runs in the background (an
/// `Async` shipment, a compaction image and its retention run, of a large batch too): its
/// 4.5 MB segment takes a few hundred ms to cut and ship in a debug build (a large batch on a
/// slow-reading store, then its compaction image: 0.6 s on a quiet machine). 5 s was outwaited
/// once in CI, where the simulation's tests run side by side on two cores (seed
/// 1796219831665205098). A longer bound costs only a failing case's time: the wait ends as
/// soon as the model allows what the stores show.
const LOG_BACKGROUND_BOUND: Duration = Duration::from_secs(20);

mod audit;
mod rules;
mod tally;

pub use rules::mismatch;
pub use tally::coverage;

/// Runs `ops` on a fresh fleet (inside an actix system of its own); `Err` names the first op
/// whose outcome or aftermath the model does not allow.
pub fn run_case(ops: &[Op], breakage: Breakage) -> Result<(), String> {
    let system = actix::System::new();
    let verdict = system.block_on(async {
        let mut world = World::new(breakage, Case::of(ops));
        let verdict = drive(&mut world, ops).await;
        drop(world);
        actix::System::current().stop();
        verdict
    });
    // Lets the system stop its arbiters (their threads end) before the next case.
    let _ = system.run();
    verdict
}

/// What the checker remembers of the ops run so far.
struct History {
    /// The case.
    case: Case,
    /// `[op]`: the wall-clock time (ms) just before the op began, in the change log's cases:
    /// every segment cut before it is stamped at or before it, every later one after it.
    marks: Vec<u64>,
    /// `[op][tenant]`: the tip every branch of the model had when the op began (`None` inside
    /// when the branches differ).
    tips: Vec<Vec<Option<Option<Pos>>>>,
    /// The rule that every ended tenure is explained.
    ends: audit::Ends,
    /// The ops whose start a restore by time names (`Op::Pitr { by_time: true, .. }`).
    timed: std::collections::BTreeSet<usize>,
}

async fn drive(world: &mut World, ops: &[Op]) -> Result<(), String> {
    let mut states = vec![State::new()];
    let mut history = History {
        case: Case::of(ops),
        marks: Vec::new(),
        tips: Vec::new(),
        ends: audit::Ends::default(),
        timed: (ops.iter().enumerate())
            .filter_map(|(i, op)| match *op {
                Op::Pitr {
                    back,
                    by_time: true,
                    ..
                } => i.checked_sub(back + 1),
                _ => None,
            })
            .collect(),
    };
    for (i, op) in ops.iter().enumerate() {
        apply(world, &mut states, &mut history, i, op).await?;
    }
    let mut i = ops.len();
    // A change log's case ends with a point-in-time restore of each tenant that has a log, to
    // the newest position right after an image (where a restore meets what it starts from).
    if history.case.log_case {
        for t in 0..TENANTS {
            if states[0].tenants[t].tip.is_some() {
                let op = Op::Pitr {
                    t,
                    back: 0,
                    by_time: false,
                };
                apply(world, &mut states, &mut history, i, &op).await?;
                i += 1;
            }
        }
    }
    apply(world, &mut states, &mut history, i, &Op::Settle).await?;
    i += 1;
    if audit::erasure_due(&states) {
        // The erasure bound counts `put_lifetime` on the lease store's clock from the forget
        // (docs/guarantees.md, "the erasure bound"): every clock passes it, the model's too.
        let past = Op::Advance {
            ms: PUT_LIFETIME_MS + 1,
        };
        apply(world, &mut states, &mut history, i, &past).await?;
        i += 1;
        audit::erasure(world, &states).await?;
    }
    for t in 0..TENANTS {
        for op in [
            Op::Open { r: REPLICAS, t },
            Op::Read {
                t,
                at: At::On(REPLICAS),
            },
        ] {
            apply(world, &mut states, &mut history, i, &op).await?;
            i += 1;
        }
        // An open above a raised floor sweeps beside it (an open refused as corrupt does not).
        let swept = |s: &State| s.tenants[t].floor > 0 && s.latest[REPLICAS][t].is_some();
        if states.iter().any(swept) {
            if !world.final_sweep(t).await {
                return Err(format!(
                    "end: the sweep beside the open of tenant {t} failed"
                ));
            }
            // The sweep took whatever a failed forget had left at or below the floor.
            for s in &mut states {
                s.tenants[t].leftovers.clear();
                s.tenants[t].seg_leftovers.clear();
            }
            let seen = world.observe().await;
            states.retain(|s| mismatch(s, &seen).is_none());
            if states.is_empty() {
                return Err(format!(
                    "end: tenant {t} keeps objects at or below its floor"
                ));
            }
        }
    }
    let orphan_ops = audit::orphan_ops(&states);
    if !orphan_ops.is_empty() {
        for op in orphan_ops {
            apply(world, &mut states, &mut history, i, &op).await?;
            i += 1;
        }
        // An orphan goes once its replica has seen it for `put_lifetime` on its own clock
        // (docs/guarantees.md, "Reconciling puts of unknown outcome"): a first look, the clocks
        // past `put_lifetime` (the model's too), the look that is due.
        world.reconcile_all().await;
        let past = Op::Advance {
            ms: PUT_LIFETIME_MS + 1,
        };
        apply(world, &mut states, &mut history, i, &past).await?;
        world.reconcile_all().await;
    }
    audit::orphans(world, &states).await
}

/// Carries out op `i` and keeps the branches of the model that allow what was seen.
async fn apply(
    world: &mut World,
    states: &mut Vec<State>,
    history: &mut History,
    i: usize,
    op: &Op,
) -> Result<(), String> {
    if history.case.log_case {
        // Only the start of an op a later restore by time names needs its own millisecond.
        let named = history.timed.contains(&i);
        history
            .marks
            .push(if named { mark_wall().await } else { wall_ms() });
        history.tips.push(
            (0..TENANTS)
                .map(|t| {
                    let tip = states[0].tenants[t].tip;
                    states
                        .iter()
                        .all(|s| s.tenants[t].tip == tip)
                        .then_some(tip)
                })
                .collect(),
        );
    }
    let op = &resolve(op, i, states, history);
    let ids: Vec<String> = (0..op.writes()).map(|w| format!("e{i:03}-{w}")).collect();
    let began = Instant::now();
    let observed = world.exec(op, &ids).await;
    tally::tally(op, &observed);
    let background = history.case.background();
    let bound = match history.case.log_case {
        true => LOG_BACKGROUND_BOUND,
        false => CRASH_BOUND,
    };
    let started = Instant::now();
    let (mut next, mut refused, seen) = loop {
        let seen = world.observe().await;
        let (next, refused, outcome_allowed) = judge(states, op, &ids, &observed, &seen);
        // What a background image, shipment or retention run leaves lands a little later: the
        // stores get until the crash bound to show it (docs/guarantees.md, 3). An outcome no
        // branch allows does not change by waiting.
        if !next.is_empty() || !background || !outcome_allowed || started.elapsed() > bound {
            break (next, refused, seen);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    if may_publish(op) {
        // Retention runs after every image a logged tenure publishes: the next op must not
        // race it.
        world.settle_retention().await;
    }
    tally::time(op, began.elapsed());
    if std::env::var_os("LEASEHOLD_SIM_TRACE").is_some() {
        eprintln!(
            "op #{i} {op:?} -> {observed:?} in {:?} (the aftermath waited {:?})\n  rows {:?}\n  listings {:?}\n  stamps {:?} at {}\n  statuses {:?}",
            began.elapsed(),
            started.elapsed(),
            seen.rows,
            seen.listings,
            seen.stamps,
            seen.wall_ms,
            seen.statuses
        );
    }
    next.sort();
    next.dedup();
    if next.is_empty() {
        refused.dedup();
        return Err(format!(
            "op #{i} {op:?} came to {observed:?}: {}",
            refused.join("; or ")
        ));
    }
    *states = next;
    history
        .ends
        .check(i, op, &seen, |k| world.owner_of(k))
        .map_err(|why| format!("op #{i} {op:?}: {why}"))
}

/// The branches of the model that allow `observed` and `seen`, why the others do not, and
/// whether any allowed the outcome; each kept branch learns from the listing what retention
/// did.
fn judge(
    states: &[State],
    op: &Op,
    ids: &[String],
    observed: &[Res],
    seen: &Seen,
) -> (Vec<State>, Vec<String>, bool) {
    let mut next = Vec::new();
    let mut refused = Vec::new();
    let mut outcome_allowed = false;
    for state in states {
        for (outcome, mut after) in state.step(op, ids) {
            if outcome != observed {
                refused.push(format!("the model expected {outcome:?}"));
                continue;
            }
            outcome_allowed = true;
            rules::fenced_by_reconciliation(&mut after, seen);
            let why = mismatch(&after, seen)
                .or_else(|| rules::retention_mismatch(&after, seen))
                .or_else(|| rules::window_mismatch(&after, op, observed, seen))
                .or_else(|| rules::damaged_taken_for_gone(state, op, observed, seen));
            match why {
                None => {
                    rules::refine(&mut after, seen);
                    next.push(after);
                }
                Some(why) => refused.push(format!("outcome as expected, but {why}")),
            }
        }
    }
    (next, refused, outcome_allowed)
}

/// Makes an op the model and the world can both carry out (on the chain of the first branch):
/// a damage "so many segments before the tip" gets that position; a passivation the time until
/// its tenure is idle; a point-in-time restore gets
/// the `back`-th position from the tip at which it has a segment to apply (the nearest such
/// when there are fewer), or, by time, the wall-clock time an earlier op began at and the tip
/// then.
fn resolve(op: &Op, i: usize, states: &[State], history: &History) -> Op {
    let position = |t: usize, back: usize| {
        let s = &states[0];
        (0..=back)
            .rev()
            .find_map(|b| s.chain_position(t, b))
            .unwrap_or((1, 1))
    };
    let replayed = |t: usize, back: usize| {
        let positions = states[0].replayed_positions(t);
        let last = positions.len().checked_sub(1);
        last.map_or_else(|| position(t, 0), |l| positions[back.min(l)])
    };
    match *op {
        Op::Pitr { t, back, by_time } => {
            let earlier = i.checked_sub(back + 1).filter(|&j| j >= 1);
            let when = earlier.and_then(|j| Some((j, history.tips.get(j)?[t]?)));
            let target = match (by_time, when) {
                (true, Some((j, expect))) => PitrTarget::Time {
                    unix_ms: history.marks[j],
                    expect,
                    op: j,
                },
                _ => PitrTarget::Position(replayed(t, back)),
            };
            Op::PitrAt { t, target }
        }
        Op::Damage { t, back, delete } => Op::DamageAt {
            t,
            pos: position(t, back),
            delete,
        },
        // Time passes until the tenure the handle is bound to has been idle long enough.
        Op::Passivate { t, at, .. } => Op::Passivate {
            t,
            at,
            ms: states[0].idle_in(t, at),
        },
        Op::RacePassivate { t, at, with, .. } => Op::RacePassivate {
            t,
            at,
            ms: states[0].idle_in(t, at),
            with,
        },
        other => other,
    }
}

/// Whether `op` may make a logged tenure publish an image (a snapshot, or compaction after a
/// batch), so that a retention run follows it.
fn may_publish(op: &Op) -> bool {
    !matches!(
        op,
        Op::Open { .. }
            | Op::Move { .. }
            | Op::PitrAt { .. }
            | Op::DamageAt { .. }
            | Op::Age
            | Op::Advance { .. }
            | Op::Renew { .. }
            | Op::Abandon { .. }
            | Op::Forget { .. }
            | Op::Handoff { .. }
            | Op::Crash { .. }
            | Op::SweepLocal { .. }
            | Op::CorruptHead { .. }
            | Op::Log { .. }
    )
}

/// The wall clock's millisecond now, once it has passed: a segment cut before this call is
/// stamped at or before the answer, one cut after it later than the answer.
async fn mark_wall() -> u64 {
    let now = wall_ms();
    while wall_ms() == now {
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    now
}
