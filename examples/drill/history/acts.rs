//! What the driver itself did and read, beside the runtime's account: the handoffs, forgets and
//! closes it asked for ([`Leave`]), the segments it damaged ([`Damage`]), the log tips the store
//! watcher read ([`TipSeen`]), and the end audit's counts ([`AuditCounts`]). The rules that
//! explain an ended tenure, judge a damaged chain and choose point-in-time targets read these,
//! never the replicas' events.

use leasehold::layout::LogPos;

use super::History;
use crate::protocol::now_ms;

/// What the driver asked a replica to do that ends tenures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaveKind {
    /// Hand one tenant off.
    Handoff,
    /// Forget one tenant.
    Forget,
    /// Close the replica (every tenant).
    Close,
}

/// One handoff, forget or close asked for (recorded before it is sent).
#[derive(Debug, Clone)]
pub struct Leave {
    /// The replica process asked (`name#generation`).
    pub replica: String,
    /// The tenant, `None` for a close.
    pub tenant: Option<u32>,
    /// Driver time it was asked.
    pub at: u64,
    /// What was asked.
    pub kind: LeaveKind,
}

/// How the driver damaged a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DamageKind {
    /// One byte flipped (XOR 0xff) at this offset.
    Flip {
        /// The byte's offset.
        offset: usize,
    },
    /// The segment deleted: a gap in the chain.
    Drop,
}

/// One segment the driver damaged in the durable store.
#[derive(Debug, Clone)]
pub struct Damage {
    /// The tenant.
    pub tenant: u32,
    /// The segment's durable key.
    pub key: String,
    /// Its log position.
    pub pos: LogPos,
    /// How.
    pub kind: DamageKind,
    /// Driver time it was damaged.
    pub at: u64,
    /// Driver time it was put back, once it was.
    pub repaired_at: Option<u64>,
}

/// A log tip the store watcher read in the lease store, and when: the segment at `tip` and
/// every one before it on the chain were in the store and the tip named it between `start` and
/// `done` (a Shipped write acknowledged before `start` is at or before it; a write run after
/// `done` is after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TipSeen {
    /// The tenant's floor in the same record.
    pub floor: u64,
    /// The tip.
    pub tip: LogPos,
    /// Driver time the latest read that saw it began.
    pub start: u64,
    /// Driver time the earliest read that saw it returned.
    pub done: u64,
    /// Wall-clock ms (since the Unix epoch) at `start`: where the retention window stands.
    pub wall_start: u64,
}

/// Counts of the damage faults, for the summary.
#[derive(Debug, Clone, Default)]
pub struct AuditCounts {
    /// Damaged segments whose next open failed with the typed error.
    pub damage_caught: u64,
}

/// Wall-clock ms since the Unix epoch (the clock manifests and segments are stamped with).
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl History {
    /// Records a handoff, forget or close about to be asked of `replica`.
    pub fn leave(&self, replica: &str, tenant: Option<u32>, kind: LeaveKind) {
        let mut r = self.lock();
        r.leaves.push(Leave {
            replica: replica.to_string(),
            tenant,
            at: now_ms(),
            kind,
        });
    }

    /// Records a damaged segment; returns its index for [`History::repaired`].
    pub fn damaged(&self, tenant: u32, key: &str, pos: LogPos, kind: DamageKind) -> usize {
        let mut r = self.lock();
        let text = format!("DAMAGE {kind:?} of {key}");
        super::push_note(&mut r, Some(tenant), text);
        r.damages.push(Damage {
            tenant,
            key: key.to_string(),
            pos,
            kind,
            at: now_ms(),
            repaired_at: None,
        });
        r.damages.len() - 1
    }

    /// Records that damage `index` was put back.
    pub fn repaired(&self, index: usize) {
        let mut r = self.lock();
        let Some(d) = r.damages.get_mut(index) else {
            return;
        };
        d.repaired_at = Some(now_ms());
        let (tenant, text) = (d.tenant, format!("repaired {}", d.key));
        super::push_note(&mut r, Some(tenant), text);
    }

    /// Whether a segment of `tenant` was damaged and not yet put back at any time in
    /// `[from, to]`.
    pub fn damaged_between(&self, tenant: u32, from: u64, to: u64) -> bool {
        let r = self.lock();
        r.damages.iter().any(|d| {
            d.tenant == tenant && d.at <= to && d.repaired_at.is_none_or(|back| back >= from)
        })
    }

    /// Records a tip the store watcher read; a tip read again only widens the last entry.
    pub fn tip_seen(&self, tenant: u32, seen: TipSeen) {
        let mut r = self.lock();
        let tips = r.tips_seen.entry(tenant).or_default();
        match tips.last_mut() {
            Some(last) if last.tip == seen.tip && last.floor == seen.floor => {
                last.start = seen.start;
                last.wall_start = seen.wall_start;
            }
            _ => tips.push(seen),
        }
    }

    /// The tips the store watcher read of `tenant`, oldest first.
    pub fn tips_seen_of(&self, tenant: u32) -> Vec<TipSeen> {
        self.lock()
            .tips_seen
            .get(&tenant)
            .cloned()
            .unwrap_or_default()
    }

    /// How many sweeps `replica` reported of `tenant`, and whether the last one finished.
    pub fn sweeps_of(&self, replica: &str, tenant: u32) -> (u32, bool) {
        let r = self.lock();
        r.sweep_counts
            .get(&(replica.to_string(), tenant))
            .copied()
            .unwrap_or_default()
    }

    /// How many images `replica`'s tenures of `tenant` reported published.
    pub fn published_by(&self, replica: &str, tenant: u32) -> usize {
        let r = self.lock();
        r.tenures
            .range((tenant, 0)..=(tenant, u64::MAX))
            .filter(|(_, t)| t.grants.iter().any(|g| g.replica == replica))
            .map(|(_, t)| t.published.len())
            .sum()
    }

    /// The epoch of the latest tenure of `tenant` granted to a process of the slot named
    /// `slot_name` (the tenure a forget asked of that slot ends).
    pub fn forget_epoch(&self, tenant: u32, slot_name: &str) -> Option<u64> {
        let r = self.lock();
        let prefix = format!("{slot_name}#");
        r.tenures
            .range((tenant, 0)..=(tenant, u64::MAX))
            .filter(|(_, t)| t.grants.iter().any(|g| g.replica.starts_with(&prefix)))
            .map(|(&(_, epoch), _)| epoch)
            .max()
    }

    /// Records a compaction the store watcher found overdue (judged by the checker).
    pub fn overdue(&self, found: crate::compaction::Overdue) {
        let mut r = self.lock();
        let text = format!(
            "store watcher: {} segments since the head, due since {}",
            found.segments, found.since
        );
        super::push_note(&mut r, Some(found.tenant), text);
        r.overdue.push(found);
    }

    /// Keeps a point-in-time restore run during the run, to be judged at the end.
    pub fn pitr(&self, run: crate::pitr::PitrRun) {
        self.lock().pitr_runs.push(run);
    }

    /// Changes the end audit's counts.
    pub fn audit(&self, change: impl FnOnce(&mut AuditCounts)) {
        change(&mut self.lock().audit);
    }
}
