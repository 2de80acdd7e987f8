//! Point-in-time restores, checked against the acknowledged history (docs/guarantees.md, the
//! change log: "a point-in-time restore reaches any moment of the window"). The driver runs
//! them on the stores itself (`leasehold::log::restore_to_from`), during the run (one every
//! [`DURING_EVERY`], a tenant in turn) and at the end (up to `--pitr-targets` per tenant, after
//! the last retention), and reads the keys of each file; [`judge`] holds them to the history.
//!
//! ```text
//!  targets   a tip the store watcher read (position p, read between `start` and `done`)
//!            the wall-clock time at such a read's start (`Target::Time`)
//!            at the end: the tip of the lease record (the file must equal the final read)
//!  window    a target read at or after now − retain (+ slack) is inside it: it must restore
//!  judged    present: every write of the current chain acknowledged before `start` (Shipped),
//!                     or held by the log at a tip the watcher read before it (any mode)
//!            absent:  every write run after `done`, every refused write, every forgotten one
//! ```
//!
//! A restore during the run is kept only if the tenant's floor did not move meanwhile (a forget
//! clears the chain) and no segment of it was damaged (`crate::damage` puts it back after).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use leasehold::LeaseStore;
use leasehold::layout::LogPos;
use leasehold::log::{LogError, Target, restore_to_from};

use crate::backend::Stores;
use crate::history::History;
use crate::history::acts::{TipSeen, wall_ms};
use crate::protocol::{self, now_ms};
use crate::rng::Rng;

pub mod judge;

pub use judge::judge;

/// How often a restore is tried during the run.
pub const DURING_EVERY: Duration = Duration::from_millis(1_000);
/// How far below the tip a target may lie, in segments: a restore reads the header of every
/// segment between the tip and its target, so older ones cost a run more than they find.
pub const SPAN: u64 = 256;
/// A target this much younger than `now − retain` counts as inside the window (retention's
/// clock read and ours differ by a call or two).
pub const WINDOW_SLACK_MS: u64 = 250;

/// What a restore was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PitrTarget {
    /// A tip the store watcher read.
    Tip(TipSeen),
    /// The wall-clock time at the start of that read (the watcher's monotonic `start` with it).
    Time(TipSeen),
    /// The tip of the lease record at the end: the file must hold exactly the final read.
    FinalTip(LogPos),
}

impl std::fmt::Display for PitrTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PitrTarget::Tip(s) => write!(f, "position {} (tip read at {})", s.tip, s.start),
            PitrTarget::Time(s) => write!(f, "time {} ms (at {})", s.wall_start, s.start),
            PitrTarget::FinalTip(p) => write!(f, "the final tip {p}"),
        }
    }
}

/// What came of one restore.
#[derive(Debug, Clone)]
pub struct PitrRun {
    /// The tenant.
    pub tenant: u32,
    /// The target.
    pub target: PitrTarget,
    /// The floor it ran under.
    pub floor: u64,
    /// Whether the target was inside the retention window when the restore returned.
    pub inside: bool,
    /// Driver time it returned.
    pub at: u64,
    /// The keys of the file, or the error's kind (`outside-retention`, `corrupt`, `store`,
    /// `other`) and text.
    pub outcome: Result<Vec<String>, (&'static str, String)>,
}

/// Whether a target read at wall time `wall` is inside the window of `retain` at `now_wall`.
pub fn inside_window(wall: u64, now_wall: u64, retain: Option<Duration>) -> bool {
    retain.is_none_or(|retain| {
        let retain_ms = u64::try_from(retain.as_millis()).unwrap_or(u64::MAX);
        wall >= now_wall
            .saturating_sub(retain_ms)
            .saturating_add(WINDOW_SLACK_MS)
    })
}

/// Restores `tenant` as of `target` from `tip` above `floor` into a file under `scratch` and
/// reads its keys; the file is removed after.
pub async fn restore_keys(
    stores: &Stores,
    tenant: u32,
    tip: Option<LogPos>,
    floor: u64,
    target: PitrTarget,
    scratch: &Path,
    retain: Option<Duration>,
) -> PitrRun {
    let wanted = match target {
        PitrTarget::Tip(s) => Target::Position(s.tip),
        PitrTarget::Time(s) => Target::Time {
            unix_ms: s.wall_start,
        },
        PitrTarget::FinalTip(p) => Target::Position(p),
    };
    let path = scratch.join(format!("t{tenant}-pitr-{}.db", crate::cluster::next_id()));
    let outcome = match protocol::lease_key(tenant) {
        Ok(key) => {
            let restored =
                restore_to_from(stores.durable.as_ref(), &key, tip, floor, wanted, &path).await;
            match restored {
                Ok(_) => crate::watcher::keys_of_file(&path).map_err(|e| ("other", e)),
                Err(e) => Err((kind(&e), e.to_string())),
            }
        }
        Err(e) => Err(("other", e.to_string())),
    };
    let _ = std::fs::remove_file(&path);
    let inside = match target {
        PitrTarget::Tip(s) | PitrTarget::Time(s) => inside_window(s.wall_start, wall_ms(), retain),
        PitrTarget::FinalTip(_) => true,
    };
    PitrRun {
        tenant,
        target,
        floor,
        inside,
        at: now_ms(),
        outcome,
    }
}

fn kind(e: &LogError) -> &'static str {
    match e {
        LogError::OutsideRetention { .. } => "outside-retention",
        LogError::Corrupt { .. } | LogError::OutOfChain { .. } => "corrupt",
        LogError::Store(_) | LogError::Lease(_) => "store",
        _ => "other",
    }
}

/// Up to `n` targets under `floor` and at most [`SPAN`] below `tip` from the tips the watcher
/// read: the oldest inside the window, then others at random, half of them also as a time.
pub fn targets(
    seen: &[TipSeen],
    floor: u64,
    tip: Option<LogPos>,
    n: usize,
    retain: Option<Duration>,
    rng: &mut Rng,
) -> Vec<PitrTarget> {
    let now = wall_ms();
    let lowest = tip.map_or(0, |t| t.seq.saturating_sub(SPAN));
    let usable: Vec<&TipSeen> = seen
        .iter()
        .filter(|s| s.floor == floor && s.tip.epoch > floor && s.tip.seq >= lowest)
        .collect();
    let mut chosen: Vec<TipSeen> = Vec::new();
    if let Some(oldest) = usable
        .iter()
        .find(|s| inside_window(s.wall_start, now, retain))
    {
        chosen.push(**oldest);
    }
    for _ in 0..n.saturating_mul(2) {
        if chosen.len() >= n {
            break;
        }
        if let Some(s) = rng.pick(&usable)
            && !chosen.contains(s)
        {
            chosen.push(**s);
        }
    }
    let mut out: Vec<PitrTarget> = chosen.iter().map(|s| PitrTarget::Tip(*s)).collect();
    out.extend(
        chosen
            .iter()
            .take(n.div_ceil(2))
            .map(|s| PitrTarget::Time(*s)),
    );
    out
}

/// During the run: every [`DURING_EVERY`] one restore of the next tenant at a tip the watcher
/// read (a second ago or more), until `stop`; each kept in the history for [`judge`].
pub async fn during_run(
    stores: Stores,
    history: Arc<History>,
    tenants: u32,
    retain: Option<Duration>,
    scratch: PathBuf,
    stop: Arc<AtomicBool>,
) {
    if tenants == 0 {
        return;
    }
    let mut rng = Rng::new(0x0917_2026);
    let mut tenant = 0;
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep(DURING_EVERY).await;
        tenant = (tenant + 1) % tenants;
        restore_now(&stores, &history, tenant, retain, &scratch, &mut rng).await;
    }
}

/// One restore of `tenant` now, at a tip the watcher read a second ago or more (the oldest
/// inside the window first, see [`targets`]), kept in the history if the floor did not move
/// and no segment of the tenant was damaged meanwhile.
pub async fn restore_now(
    stores: &Stores,
    history: &History,
    tenant: u32,
    retain: Option<Duration>,
    scratch: &Path,
    rng: &mut Rng,
) {
    if std::fs::create_dir_all(scratch).is_err() {
        return;
    }
    let Ok(key) = protocol::lease_key(tenant) else {
        return;
    };
    let Ok(Some(before)) = stores.leases.read(&key).await else {
        return;
    };
    let old_enough: Vec<TipSeen> = history
        .tips_seen_of(tenant)
        .into_iter()
        .filter(|s| s.done + 1_000 < now_ms())
        .collect();
    let Some(target) = targets(&old_enough, before.floor, before.tip, 1, retain, rng)
        .into_iter()
        .next()
    else {
        return;
    };
    let started = now_ms();
    let run = restore_keys(
        stores,
        tenant,
        before.tip,
        before.floor,
        target,
        scratch,
        retain,
    )
    .await;
    let after = stores.leases.read(&key).await;
    let same_floor = matches!(&after, Ok(Some(r)) if r.floor == before.floor);
    if same_floor && !history.damaged_between(tenant, started, now_ms()) {
        history.pitr(run);
    }
}
