//! The checker: runs a sequence of ops against a fresh [`World`] and the model side by side.
//! After every op the observed outcome must be one the model allows, and the stores, the local
//! directories and every tenure's status must be what that branch of the model says; the
//! branches that survive are kept (more than one only after a race). At the end every fault is
//! cleared, every lease left to expire, and each tenant opened on a replica that never served
//! it: its ledger must be exactly the model's, and nothing at or below its floor may be left.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use leasehold_actors::{Breakage, TenantStatus};

use crate::model::{Dir, Mode, Pos, REPLICAS, Res, State, Status, TENANTS};
use crate::ops::{At, Op};
use crate::world::{CRASH_BOUND, STORE_BASE_MS, Seen, World, key_of, replica_name};

/// Runs `ops` on a fresh fleet (inside an actix system of its own); `Err` names the first op
/// whose outcome or aftermath the model does not allow.
pub fn run_case(ops: &[Op], breakage: Breakage) -> Result<(), String> {
    let system = actix::System::new();
    let verdict = system.block_on(async {
        let periodic = ops.first() == Some(&Op::Periodic);
        let mode = match ops.first() {
            Some(Op::Periodic | Op::Images) => Mode::Images,
            _ => Mode::Shipped,
        };
        let mut world = World::new(breakage, periodic, mode);
        let verdict = drive(&mut world, ops).await;
        drop(world);
        actix::System::current().stop();
        verdict
    });
    // Lets the system stop its arbiters (their threads end) before the next case.
    let _ = system.run();
    verdict
}

async fn drive(world: &mut World, ops: &[Op]) -> Result<(), String> {
    let mut states = vec![State::new()];
    for (i, op) in ops.iter().enumerate() {
        apply(world, &mut states, i, op).await?;
    }
    let mut i = ops.len();
    apply(world, &mut states, i, &Op::Settle).await?;
    i += 1;
    for t in 0..TENANTS {
        for op in [
            Op::Open { r: REPLICAS, t },
            Op::Read {
                t,
                at: At::On(REPLICAS),
            },
        ] {
            apply(world, &mut states, i, &op).await?;
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
    Ok(())
}

/// Carries out op `i` and keeps the branches of the model that allow what was seen.
async fn apply(
    world: &mut World,
    states: &mut Vec<State>,
    i: usize,
    op: &Op,
) -> Result<(), String> {
    let ids: Vec<String> = (0..op.writes()).map(|w| format!("e{i:03}-{w}")).collect();
    let began = Instant::now();
    let observed = world.exec(op, &ids).await;
    tally(op, &observed);
    let periodic = states.iter().any(|s| s.periodic);
    let started = Instant::now();
    let (mut next, mut refused) = loop {
        let seen = world.observe().await;
        let (next, refused) = judge(states, op, &ids, &observed, &seen);
        // With periodic snapshots on, what a background snapshot publishes lands a little
        // later: the stores get until the crash bound to show it (docs/guarantees.md, 3).
        if !next.is_empty() || !periodic || started.elapsed() > CRASH_BOUND {
            break (next, refused);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    time(op, began.elapsed());
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
    Ok(())
}

/// The branches of the model that allow `observed` and `seen`, and why the others do not.
fn judge(
    states: &[State],
    op: &Op,
    ids: &[String],
    observed: &[Res],
    seen: &Seen,
) -> (Vec<State>, Vec<String>) {
    let mut next = Vec::new();
    let mut refused = Vec::new();
    for state in states {
        for (outcome, after) in state.step(op, ids) {
            if outcome != observed {
                refused.push(format!("the model expected {outcome:?}"));
                continue;
            }
            match mismatch(&after, seen) {
                None => next.push(after),
                Some(why) => refused.push(format!("outcome as expected, but {why}")),
            }
        }
    }
    (next, refused)
}

/// How `seen` differs from what `state` says, if it does.
pub fn mismatch(state: &State, seen: &Seen) -> Option<String> {
    if let Some(stray) = seen.listings.get(TENANTS).filter(|s| !s.is_empty()) {
        return Some(format!(
            "the durable store holds objects of no tenant: {stray:?}"
        ));
    }
    for t in 0..TENANTS {
        if let Some(why) = row_mismatch(state, seen, t) {
            return Some(why);
        }
        if let Some(why) = listing_mismatch(state, seen, t) {
            return Some(why);
        }
    }
    for (r, dirs) in seen.dirs.iter().enumerate() {
        for (t, &exists) in dirs.iter().enumerate() {
            let model = state.dirs[r][t];
            let allowed = match model {
                Dir::Present => exists,
                Dir::Absent => !exists,
                Dir::Maybe => true,
            };
            if !allowed {
                return Some(format!(
                    "the local directory of tenant {t} on replica {r} exists: {exists}, model: {model:?}"
                ));
            }
        }
    }
    for (k, tenure) in &state.tenures {
        let seen_status = seen.statuses.get(k).copied();
        if seen_status != Some(status_of(tenure.status)) {
            return Some(format!(
                "tenure {k:?} is {seen_status:?}, model: {:?}",
                tenure.status
            ));
        }
    }
    None
}

fn status_of(s: Status) -> TenantStatus {
    match s {
        Status::Serving => TenantStatus::Serving,
        Status::Forgetting => TenantStatus::Forgetting,
        Status::Released => TenantStatus::Released,
        Status::Abandoned => TenantStatus::Abandoned,
        Status::Forgotten => TenantStatus::Forgotten,
    }
}

fn row_mismatch(state: &State, seen: &Seen, t: usize) -> Option<String> {
    let ts = &state.tenants[t];
    let record = seen.rows[t].as_ref();
    let expected = ts.row.as_ref().map(|row| {
        (
            replica_name(row.owner),
            row.epoch,
            STORE_BASE_MS + row.expires_at,
            row.released,
            ts.floor,
            ts.head,
            ts.tip,
        )
    });
    let actual = record.map(|r| {
        (
            r.owner.clone(),
            r.epoch,
            r.expires_at_ms,
            r.released,
            r.floor,
            r.head.as_ref().map(|h| (h.epoch, h.seq)),
            r.tip.map(|p| (p.epoch, p.seq)),
        )
    });
    (expected != actual).then(|| {
        format!(
            "tenant {t}'s lease (owner, epoch, expires, released, floor, head, tip) is {actual:?}, \
             model: {expected:?}"
        )
    })
}

fn object_keys(t: usize, (epoch, seq): (u64, u64)) -> [String; 2] {
    let prefix = key_of(t).prefix();
    [
        format!("{prefix}e{epoch:08}/snap-{seq:06}.db"),
        format!("{prefix}e{epoch:08}/snap-{seq:06}.json"),
    ]
}

/// The key of tenant `t`'s segment at `(epoch, seq)`.
fn segment_key(t: usize, (epoch, seq): Pos) -> String {
    format!("{}e{epoch:08}/log-{seq:012}.seg", key_of(t).prefix())
}

fn listing_mismatch(state: &State, seen: &Seen, t: usize) -> Option<String> {
    let ts = &state.tenants[t];
    // Segments off the chain (a seq a later tenure shipped too, or an older tenure's above the
    // tip) may go at any time: retention deletes them after every new image
    // (`src/plan/retention.rs`).
    let tip = ts.tip.map_or(0, |p| p.1);
    let holder = ts.row.as_ref().map_or(0, |row| row.epoch);
    let off_chain = |&(e, seq): &(u64, u64)| {
        (seq > tip && (e < holder || ts.seg_unconfirmed.contains(&(e, seq))))
            || (seq <= tip && ts.segments.keys().any(|&(e2, s2)| s2 == seq && e2 > e))
    };
    // An image whose head move's answer was lost stays only while the head's chain of bases
    // reaches it; off the chain its replica's reconciliation may take it back at any time.
    let mut on_chain = BTreeSet::new();
    let mut at = ts.head;
    while let Some(o) = at.filter(|o| on_chain.insert(*o)) {
        at = ts.objects.get(&o).and_then(|image| image.base);
    }
    let unnamed = |o: &(u64, u64)| ts.img_unconfirmed.contains(o) && !on_chain.contains(o);
    let mut required: Vec<String> = ts
        .objects
        .keys()
        .filter(|o| !unnamed(o))
        .flat_map(|&o| object_keys(t, o))
        .collect();
    required.extend(ts.lone.iter().map(|&o| object_keys(t, o)[0].clone()));
    required.extend(
        ts.segments
            .keys()
            .filter(|p| !off_chain(p))
            .map(|&p| segment_key(t, p)),
    );
    required.sort();
    let mut maybe: Vec<String> = ts
        .leftovers
        .iter()
        .flat_map(|&o| object_keys(t, o))
        .collect();
    maybe.extend(ts.stray.iter().map(|&o| object_keys(t, o)[0].clone()));
    maybe.extend(
        ts.objects
            .keys()
            .filter(|o| unnamed(o))
            .flat_map(|&o| object_keys(t, o)),
    );
    maybe.extend(ts.seg_leftovers.iter().map(|&p| segment_key(t, p)));
    maybe.extend(ts.seg_maybe.iter().map(|&p| segment_key(t, p)));
    maybe.extend(
        ts.segments
            .keys()
            .filter(|p| off_chain(p))
            .map(|&p| segment_key(t, p)),
    );
    let listed = &seen.listings[t];
    let above: Vec<&String> = listed.iter().filter(|k| !maybe.contains(k)).collect();
    let required: Vec<&String> = required.iter().collect();
    (above != required).then(|| {
        format!(
            "tenant {t}'s durable objects are {listed:?}, model: {required:?} \
             (and perhaps {maybe:?}, at or below floor {})",
            ts.floor
        )
    })
}

/// How often each kind of op came to each outcome, over every case of this process.
static TALLY: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

fn tally(op: &Op, observed: &[Res]) {
    let name = format!("{op:?}");
    let name = name.split([' ', '(']).next().unwrap_or_default();
    let outcome: Vec<String> = observed
        .iter()
        .map(|r| {
            let r = format!("{r:?}");
            r.split('(').next().unwrap_or_default().to_string()
        })
        .collect();
    let mut tally = TALLY.lock().unwrap_or_else(|e| e.into_inner());
    *tally
        .entry(format!("{name} -> {}", outcome.join(",")))
        .or_default() += 1;
}

/// Real time spent on each kind of op (its calls and the checks after it), over every case.
static TIMES: Mutex<BTreeMap<String, Duration>> = Mutex::new(BTreeMap::new());

fn time(op: &Op, took: Duration) {
    let name = format!("{op:?}");
    let name = name
        .split([' ', '('])
        .next()
        .unwrap_or_default()
        .to_string();
    let mut times = TIMES.lock().unwrap_or_else(|e| e.into_inner());
    *times.entry(name).or_default() += took;
}

/// What the ops of this process came to, one line per (op, outcome), and the real time each
/// kind of op took in all, for the test's output.
pub fn coverage() -> String {
    let tally = TALLY.lock().unwrap_or_else(|e| e.into_inner());
    let times = TIMES.lock().unwrap_or_else(|e| e.into_inner());
    let outcomes = tally.iter().map(|(k, n)| format!("{n:>7}  {k}"));
    let spent = times
        .iter()
        .map(|(k, d)| format!("{:>7} ms  {k}", d.as_millis()));
    outcomes.chain(spent).collect::<Vec<_>>().join("\n")
}
