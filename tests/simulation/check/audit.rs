//! Two kinds of judgement that do not come from the model's branches:
//!
//! - **Every ended tenure is explained** ([`Ends`]): a tenure seen released must have been
//!   handed off (or its replica closed), one seen forgotten must have been forgotten, one seen
//!   passivated must have seen time pass (an idle check follows every clock move), one seen
//!   abandoned must have been abandoned, or met a fault the world injected, time passing, or a
//!   handoff or forget that failed — judged from the statuses the world read and the world's
//!   own record of what it did, never from what the runtime says about why.
//! - **The end's audits** (docs/guarantees.md, the erasure bound): once every late put has
//!   landed and the longest put deadline has passed, nothing of a forgotten epoch may be left
//!   without anyone opening the tenant ([`erasure`], holes 5, 6, 7, 10 and 11 of the change
//!   log's review); and a live tenant keeps no image that no manifest names once retention ran twice
//!   past that deadline ([`orphans`], hole 8). Each is on only once its hole is fixed
//!   ([`crate::ops::UNFIXED_LOG_HOLES`]); the pinned `log_holeN_…` regressions switch it on.

use std::collections::{BTreeMap, BTreeSet};

use leasehold_actors::TenantStatus;

use crate::model::{REPLICAS, State, TENANTS};
use crate::ops::{At, Op, Racer, log_hole_fixed};
use crate::world::{Seen, World};

/// The record the rule that every ended tenure is explained works from.
#[derive(Debug, Default)]
pub struct Ends {
    /// Every op carried out, in order.
    ops: Vec<Op>,
    /// Each tenure seen: the op at which it was first seen, and its replica.
    opened: BTreeMap<(usize, u64), (usize, Option<usize>)>,
    /// Tenures already judged.
    judged: BTreeSet<(usize, u64)>,
    /// `[op]`: an outage of a store was on after it, or a late landing armed or held (until the
    /// case settles).
    outage: Vec<bool>,
}

impl Ends {
    /// Records op `i` and judges every tenure `seen` shows ended since.
    pub fn check(
        &mut self,
        i: usize,
        op: &Op,
        seen: &Seen,
        owner_of: impl Fn((usize, u64)) -> Option<usize>,
    ) -> Result<(), String> {
        let was_down = self.outage.last().copied().unwrap_or(false);
        let down = match op {
            Op::DurableDown(on) | Op::LeaseDown(on) => *on || was_down,
            Op::Late(_) => true,
            Op::Settle => false,
            _ => was_down,
        };
        self.ops.push(*op);
        self.outage.push(down);
        for (&k, &status) in &seen.statuses {
            self.opened.entry(k).or_insert((i, owner_of(k)));
            if !status.is_final() || !self.judged.insert(k) {
                continue;
            }
            let (from, replica) = self.opened[&k];
            // An outage on when it opened counts as one during its life.
            let from = from.saturating_sub(1);
            let life = &self.ops[from..=i];
            let outage = self.outage[from..=i].iter().any(|&d| d);
            let explained = outage || life.iter().any(|op| explains(op, k.0, replica, status));
            if !explained {
                return Err(format!(
                    "tenure {k:?} ended {status:?} with nothing to explain it: no handoff, \
                     forget, abandon, close, fault or time passing since it opened \
                     (ops {life:?})"
                ));
            }
        }
        Ok(())
    }
}

/// Whether `op` explains a tenure of tenant `t` on `replica` ending `status`.
fn explains(op: &Op, t: usize, replica: Option<usize>, status: TenantStatus) -> bool {
    let on_tenant = |u: usize| u == t;
    let on_replica = |r: usize| Some(r) == replica;
    let handed_off = match *op {
        Op::Handoff { t: u, .. }
        | Op::DrainedHandoff { t: u, .. }
        | Op::RaceHandoffWrite { t: u, .. }
        | Op::RaceHandoffForget { t: u, .. }
        | Op::BlockingRun { t: u, .. }
        | Op::Stalled {
            t: u,
            handoff: true,
            ..
        } => on_tenant(u),
        Op::Close { r } | Op::OpenDuringClose { r, .. } => on_replica(r),
        Op::Move { t: u, .. }
        | Op::RacePassivate {
            t: u,
            with: Racer::Handoff,
            ..
        } => on_tenant(u),
        _ => false,
    };
    let forgotten = match *op {
        Op::Forget { t: u, .. }
        | Op::RaceHandoffForget { t: u, .. }
        | Op::ForgetDuringUpload { t: u, .. }
        | Op::ForgetBehindHungPut { t: u, .. }
        | Op::ZombieShip { t: u, .. }
        | Op::RacePassivate {
            t: u,
            with: Racer::Forget,
            ..
        } => on_tenant(u),
        _ => false,
    };
    let faulted = match *op {
        Op::Abandon { t: u, .. }
        | Op::WriteWhileDown { t: u, .. }
        | Op::RacePassivate {
            t: u,
            with: Racer::Abandon,
            ..
        } => on_tenant(u),
        Op::Crash { r } => on_replica(r),
        Op::DurableDown(true)
        | Op::LeaseDown(true)
        | Op::Late(_)
        | Op::Land
        | Op::LandBeforeRelease
        | Op::Stalled { .. }
        | Op::LapseInCommit { .. }
        | Op::LapseDuringCommit { .. }
        | Op::ZombieShip { .. }
        | Op::Advance { .. }
        | Op::Passivate { .. }
        | Op::RacePassivate { .. }
        | Op::Settle => true,
        Op::DrainedHandoff { pause, .. } => pause > 0,
        _ => false,
    };
    // Let go for being idle: time passed on every clock (an idle check follows every move).
    let idled = matches!(
        *op,
        Op::Passivate { .. } | Op::RacePassivate { .. } | Op::Advance { .. } | Op::Settle
    );
    match status {
        TenantStatus::Passivated => idled,
        TenantStatus::Released => handed_off,
        TenantStatus::Forgotten => forgotten,
        _ => handed_off || forgotten || faulted,
    }
}

/// The erasure audit (holes 5, 6, 7, 10 and 11 of the change log's review, which one fix
/// closes), once they are fixed: after every late put landed (`Settle`) and the erasure bound passed, with each
/// replica's periodic sweep run once, nothing at or below a tenant's floor is left — before any
/// open sweeps beside it.
pub async fn erasure(world: &mut World, states: &[State]) -> Result<(), String> {
    if !erasure_due(states) {
        return Ok(());
    }
    world.past_the_erasure_bound().await;
    let seen = world.observe().await;
    for t in 0..TENANTS {
        let floor = seen.rows[t].as_ref().map_or(0, |r| r.floor);
        let dead: Vec<&String> = seen.listings[t]
            .iter()
            .filter(|key| epoch_of(key).is_some_and(|e| e <= floor))
            .collect();
        if !dead.is_empty() {
            return Err(format!(
                "end: past the erasure bound, tenant {t} keeps {dead:?} at or below its floor \
                 {floor} (docs/guarantees.md: after a forget nothing remains)"
            ));
        }
    }
    Ok(())
}

/// Whether the erasure audit runs: its holes are fixed and something of a forgotten epoch may
/// be left (only then does the end wait past the bound).
pub fn erasure_due(states: &[State]) -> bool {
    let left = |s: &State| {
        s.tenants.iter().any(|ts| {
            !(ts.leftovers.is_empty() && ts.seg_leftovers.is_empty() && ts.stray.is_empty())
                || ts.seg_maybe.iter().any(|p| p.0 <= ts.floor)
        })
    };
    [5, 6, 7, 10, 11].into_iter().all(log_hole_fixed) && states.iter().any(left)
}

/// The epoch of an object key `…/e<epoch>/…`.
fn epoch_of(key: &str) -> Option<u64> {
    key.split('/')
        .find_map(|part| part.strip_prefix('e')?.parse().ok())
}

/// The ops of the orphan audit (hole 8), once it is fixed and some tenant keeps an image no
/// manifest names: on the final replica, a snapshot (its retention run, and the replica's
/// first look at the tenant's orphans); the checker then has every replica reconcile, moves
/// every clock past `put_lifetime` and has them reconcile again (the look that is due).
pub fn orphan_ops(states: &[State]) -> Vec<Op> {
    if !log_hole_fixed(8) {
        return Vec::new();
    }
    let mut ops = Vec::new();
    for t in 0..TENANTS {
        let orphaned = states
            .iter()
            .any(|s| !(s.tenants[t].lone.is_empty() && s.tenants[t].lone_retired.is_empty()));
        if orphaned {
            let at = At::On(REPLICAS);
            ops.push(Op::Snapshot { t, at });
        }
    }
    ops
}

/// After [`orphan_ops`]: no image without its manifest is left in a live tenant.
pub async fn orphans(world: &mut World, states: &[State]) -> Result<(), String> {
    if !log_hole_fixed(8) {
        return Ok(());
    }
    let seen = world.observe().await;
    for t in 0..TENANTS {
        let lone: Vec<&String> = seen.listings[t]
            .iter()
            .filter(|key| key.ends_with(".db"))
            .filter(|key| {
                let manifest = key.replace(".db", ".json");
                !seen.listings[t].contains(&manifest)
            })
            .collect();
        // A tenant its final replica serves (one it could not open runs no retention).
        let live = states.iter().any(|s| {
            s.latest[REPLICAS][t].is_some_and(|e| {
                s.tenures
                    .get(&(t, e))
                    .is_some_and(|x| x.status == crate::model::Status::Serving)
            })
        });
        if live && !lone.is_empty() {
            return Err(format!(
                "end: tenant {t} keeps images no manifest names, after its replica's looks \
                 `put_lifetime` apart: {lone:?}"
            ));
        }
    }
    Ok(())
}
