//! The world's side of the change log's cases (`Op::Log`, docs/testing.md "The change log in
//! the simulation"): point-in-time restores into a new file read back row by row, segments
//! damaged or deleted behind the store's back, large batches, real time passing past `retain`,
//! writes while the durable store is down; and the waits that keep what runs in the background
//! (retention after every image) from racing the next op.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use leasehold::deadline::Deadline;
use leasehold::durable::StoreError;
use leasehold::layout::{LogPos, segment_key};
use leasehold::ledger::{LedgerError, NewEvent};
use leasehold::log::{LogError, Target, restore_to};
use leasehold_actors::{Event, TenantRef, TenantStatus};

use super::{CRASH_BOUND, RETAIN, STORE_DEADLINE, World, insert, key_of, settle, settle_raw};
use crate::model::{Mode, PitrTarget, Pos, REPLICAS, Res, TENANTS};
use crate::ops::Op;

/// How many bytes the payload of a large batch holds: 4.5 MB, more than 1,000 pages of 4 KiB,
/// so its commit alone passes `CHECKPOINT_FRAMES` WAL frames.
pub const BULK_BYTES: usize = 4_500_000;

/// The payload of a large batch: hex digits that no page repeats.
static BULK: LazyLock<serde_json::Value> = LazyLock::new(|| {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let text: String = (0..BULK_BYTES)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(b"0123456789abcdef"[(state & 15) as usize])
        })
        .collect();
    serde_json::Value::String(text)
});

/// The longest a put of the simulation may run: the deadline of the largest object it puts (a
/// large batch's segment; an image of a tenant that holds one is a little larger).
pub const LONGEST_PUT: Duration = Duration::from_millis(
    STORE_DEADLINE.as_millis() as u64 + 2 * (BULK_BYTES as u64 * 1_000) / (8 * 1024 * 1024),
);

/// How long after the last late put landed the erasure audit looks: past the longest put, and
/// once more for the sweep that follows it.
pub const ERASURE_BOUND: Duration = Duration::from_millis(2 * LONGEST_PUT.as_millis() as u64);

/// How long a retention run may take before the world stops waiting for it.
const RETENTION_WAIT: Duration = Duration::from_millis(500);

/// Wall-clock milliseconds since the Unix epoch (what segments and manifests carry).
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl World {
    /// Carries out the ops of the change log's cases.
    pub(super) async fn exec_log(&mut self, op: &Op, ids: &[String]) -> Vec<Res> {
        match *op {
            Op::Age => {
                tokio::time::sleep(RETAIN + Duration::from_millis(5)).await;
                vec![Res::Ok]
            }
            Op::BulkWrite { t, at } => match self.handle(t, at) {
                Some(h) => vec![settle(bulk_insert(&h, ids[0].clone())).await],
                None => vec![Res::Skipped],
            },
            Op::PitrAt { t, target } => vec![self.pitr(t, target).await],
            Op::DamageAt { t, pos, delete } => vec![self.damage(t, pos, delete)],
            Op::WriteWhileDown { t, at } => match self.handle(t, at) {
                Some(h) => vec![self.write_while_down(t, &h, ids[0].clone()).await],
                None => vec![Res::Skipped],
            },
            // Resolved by the checker before they reach the world.
            _ => vec![Res::Skipped],
        }
    }

    /// A point-in-time restore of tenant `t` to `target` into a new file (through a store with
    /// the runtime's deadlines, as a host would call it), read back: its events, in order.
    async fn pitr(&mut self, t: usize, target: PitrTarget) -> Res {
        self.restores += 1;
        let dest = self.dir.path().join(format!("pitr-{}.db", self.restores));
        let store = Deadline::new(self.durable.shared(), STORE_DEADLINE).unwrap();
        let target = match target {
            PitrTarget::Position((epoch, seq)) => Target::Position(LogPos { epoch, seq }),
            PitrTarget::Time { unix_ms, .. } => Target::Time { unix_ms },
        };
        let key = key_of(t);
        let leases = self.leases.inner().clone();
        let restored = settle_raw(restore_to(&store, leases.as_ref(), &key, target, &dest)).await;
        let res = match restored {
            Err(late) => late,
            Ok(Ok(_report)) => read_events(&dest),
            Ok(Err(LogError::OutsideRetention { .. })) => Res::OutsideRetention,
            Ok(Err(LogError::Corrupt { .. } | LogError::OutOfChain { .. })) => Res::Corrupt,
            Ok(Err(LogError::Store(StoreError::Timeout { .. }))) => Res::StoreTimeout,
            Ok(Err(e)) => Res::Other(format!("point-in-time restore: {e}")),
        };
        let _ = std::fs::remove_file(&dest);
        res
    }

    /// Changes a byte in the middle of tenant `t`'s segment at `pos` (by one, so that damage
    /// done twice stays damage), or deletes it, behind the store's back; `Skipped` when it is
    /// not there.
    fn damage(&self, t: usize, (epoch, seq): Pos, delete: bool) -> Res {
        let object = segment_key(&key_of(t), LogPos { epoch, seq });
        let path = object
            .split('/')
            .fold(self.dir.path().join("durable"), |p, s| p.join(s));
        let Ok(mut bytes) = std::fs::read(&path) else {
            return Res::Skipped;
        };
        if delete {
            std::fs::remove_file(&path).unwrap();
        } else {
            let middle = bytes.len() / 2;
            bytes[middle] = bytes[middle].wrapping_add(1);
            std::fs::write(&path, bytes).unwrap();
        }
        Res::Ok
    }

    /// A write while the durable store is down, on a logged tenure; the store comes back once
    /// the tenure has ended (an `Async` one ends at its period's shipment).
    async fn write_while_down(&self, t: usize, h: &TenantRef, id: String) -> Res {
        let owner = self.owners[&(t, h.epoch())];
        if !self.case.modes[owner].logged() {
            return Res::Skipped;
        }
        self.durable.set_down(true);
        let out = settle(insert(h, id)).await;
        if self.case.modes[owner] == Mode::Async && out == Res::Ok {
            let until = Instant::now() + CRASH_BOUND;
            while h.status().await == TenantStatus::Serving && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        self.durable.set_down(false);
        out
    }

    /// Waits past the erasure bound in real time (every put in flight lands or fails), then
    /// runs every replica's reconciliation pass once — which finishes the erasures due (the
    /// clocks were moved past `put_lifetime` before) — and its local sweep.
    pub async fn past_the_erasure_bound(&mut self) {
        tokio::time::sleep(ERASURE_BOUND).await;
        for r in 0..=REPLICAS {
            let _ = settle_raw(self.sups[r].reconcile_now()).await;
            let _ = settle_raw(self.sups[r].sweep_local()).await;
        }
    }

    /// Every replica runs its reconciliation pass once (the simulation's replicas run none by
    /// themselves within a case).
    pub async fn reconcile_all(&mut self) {
        for r in 0..=REPLICAS {
            let _ = settle_raw(self.sups[r].reconcile_now()).await;
        }
    }

    /// The replica that opened tenure `k`, if the world still addresses it.
    pub fn owner_of(&self, k: (usize, u64)) -> Option<usize> {
        self.owners.get(&k).copied()
    }

    /// Counts a sweep beside the open of tenant `t` on replica `r` (the open found a raised
    /// floor), so that the sweeps `r` reports after it are retention's.
    pub(super) async fn note_open(&mut self, r: usize, t: usize) {
        let record = self.leases.inner().read(&key_of(t)).await.unwrap();
        if record.is_some_and(|rec| rec.floor > 0) {
            self.beside[r] += 1;
        }
    }

    /// In the change log's cases: waits until every image published so far on a logged
    /// replica was followed by its retention run (reported as `Swept` or `SweepFailed`), so
    /// that no deletion races the next op. A run skipped because another was under way is
    /// given up on after [`RETENTION_WAIT`].
    pub async fn settle_retention(&mut self) {
        if !self.case.log_case {
            return;
        }
        for r in 0..=REPLICAS {
            if !self.case.modes[r].logged() {
                continue;
            }
            let until = Instant::now() + RETENTION_WAIT;
            loop {
                let _ = self.sups[r]
                    .events_delivered(Duration::from_millis(50))
                    .await;
                let (published, swept) = retention_counts(&self.events[r].events());
                let runs = swept.saturating_sub(self.beside[r]) + self.skipped[r];
                if runs >= published {
                    break;
                }
                // A run of a tenure that ended meanwhile stopped with its actor: it never
                // reports. So does one skipped while another ran.
                if Instant::now() > until || !self.serves_on(r).await {
                    self.skipped[r] += published - runs;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }

    /// Whether a tenure replica `r` opened has not ended (asked of the tenures themselves).
    async fn serves_on(&self, r: usize) -> bool {
        for (k, owner) in &self.owners {
            if *owner == r
                && let Some(h) = self.handles.get(k)
                && !h.status().await.is_final()
            {
                return true;
            }
        }
        false
    }

    /// Each tenant's manifests, by image: the wall-clock stamp each carries (behind the
    /// faults), for the retention rule.
    pub async fn stamps(&self, listings: &[Vec<String>]) -> Vec<BTreeMap<(u64, u64), u64>> {
        let mut stamps = vec![BTreeMap::new(); TENANTS];
        for (t, listed) in listings.iter().take(TENANTS).enumerate() {
            for object in listed {
                let Some(image) = manifest_of(object) else {
                    continue;
                };
                let Ok(Some(bytes)) = self.durable.inner().get(object).await else {
                    continue;
                };
                let created = serde_json::from_slice::<serde_json::Value>(&bytes)
                    .ok()
                    .and_then(|m| m.get("created_at_ms").and_then(|c| c.as_u64()));
                if let Some(created) = created {
                    stamps[t].insert(image, created);
                }
            }
        }
        let mut seen = self
            .stamps_seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (t, now) in stamps.iter().enumerate() {
            seen[t].extend(now.iter().map(|(k, v)| (*k, *v)));
        }
        seen.clone()
    }
}

/// `(epoch, seq)` of a manifest key `…/e<epoch>/snap-<seq>.json`.
fn manifest_of(object: &str) -> Option<(u64, u64)> {
    let mut parts = object.rsplit('/');
    let name = parts.next()?;
    let epoch = parts.next()?.strip_prefix('e')?.parse().ok()?;
    let seq = name
        .strip_prefix("snap-")?
        .strip_suffix(".json")?
        .parse()
        .ok()?;
    Some((epoch, seq))
}

/// How many images a replica's events report published, and how many sweeps (beside an open,
/// or retention's).
fn retention_counts(events: &[Event]) -> (usize, usize) {
    let published = events
        .iter()
        .filter(|e| matches!(e, Event::SnapshotPublished { .. }))
        .count();
    let swept = events
        .iter()
        .filter(|e| matches!(e, Event::Swept { .. } | Event::SweepFailed { .. }))
        .count();
    (published, swept)
}

/// The events of a restored file, in order; `Corrupt` if it is not a sound database.
fn read_events(path: &std::path::Path) -> Res {
    let read = || -> rusqlite::Result<Res> {
        let db = rusqlite::Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        )?;
        let check: String = db.query_row("PRAGMA integrity_check", [], |row| row.get(0))?;
        if check != "ok" {
            return Ok(Res::Other(format!("the restored file: {check}")));
        }
        let mut stmt = db.prepare("SELECT idem_key FROM events ORDER BY seq")?;
        let keys = stmt
            .query_map([], |row| row.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<String>>>()?;
        Ok(Res::Keys(keys))
    };
    read().unwrap_or_else(|e| Res::Other(format!("reading the restored file: {e}")))
}

/// A run inserting event `id` with the large payload.
fn bulk_insert(
    h: &TenantRef,
    id: String,
) -> impl std::future::Future<Output = Result<Res, leasehold::Error>> + use<> {
    h.run(move |l| {
        let event = NewEvent::new("sim", id).payload(BULK.clone());
        l.insert_event(&event)?
            .ok_or_else(|| LedgerError::Host("a duplicate event id".into()))?;
        Ok(Res::Ok)
    })
}
