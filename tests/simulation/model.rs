//! The reference model: what a correct runtime does with each operation, as a pure function of
//! the model's state — no actors, no stores, no clock. [`State::step`] returns every outcome the
//! operation may legitimately have, each with the state it leads to; an operation whose outcome
//! depends on a race (a write sent beside a handoff) has several, and the checker keeps every
//! state that the observed outcome allows.
//!
//! Time is one number, `now` (ms since the case began): every replica's clock and the lease
//! store's advance together, so a holder's lease holds while `now < valid_until` (sent + ttl −
//! margin) and the store's row is live while `now < expires_at` (sent + ttl).

use std::collections::{BTreeMap, BTreeSet};

use crate::ops::{At, Late, Op};

mod composite;
mod faults;
mod leaving;
mod log;
mod passivation;
mod pitr;
mod retention;
mod serving;
mod step;

pub use faults::{Held, HeldPut};
pub use leaving::LOGGED_FLUSH_NEEDS_THE_LEASE;
pub use passivation::PASSIVATE_AFTER_MS;
pub use pitr::PitrTarget;
pub use serving::FAILED_OPEN_LEAVES_NO_DIR;

/// Lease duration (ms).
pub const TTL_MS: u64 = 10_000;
/// Margin before the end of a lease at which its holder stops acting (ms).
pub const MARGIN_MS: u64 = 2_000;
/// Replicas the generator drives; one more, never driven, opens everything at the end.
pub const REPLICAS: usize = 3;
/// Tenants.
pub const TENANTS: usize = 2;
/// In the change log's cases (`Op::Log`): a logged tenant takes an image (compaction) once this
/// many segments were shipped since its newest image.
pub const COMPACT_SEGMENTS: u64 = 2;

/// What one call came to, reduced to what the model predicts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Res {
    /// `Ok(())`.
    Ok,
    /// An open that returned the tenure of this epoch.
    Epoch(u64),
    /// A read: the tenant's event ids, in order.
    Keys(Vec<String>),
    /// How many local copies a local sweep dropped.
    Count(usize),
    /// A snapshot: the head `(epoch, seq)` it returned.
    Head(Option<(u64, u64)>),
    /// `Error::Fenced`.
    Fenced,
    /// `Error::Draining`.
    Draining,
    /// `Error::LeaseHeld`.
    LeaseHeld,
    /// `Error::Store(Unavailable)`: an injected outage.
    StoreDown,
    /// `Error::Store(Timeout)`: a call that outlived `store_deadline`.
    StoreTimeout,
    /// `Error::Corrupt`: no image of the chain passed its checks.
    Corrupt,
    /// `Error::Closed`: the replica is closing.
    Closed,
    /// `Error::DrainTimeout`: the drain did not end within `drain_timeout` of the call.
    DrainTimeout,
    /// `Error::Unshipped`: the batch's segment was not shipped (its outcome unknown).
    Unshipped,
    /// A point-in-time restore refused its target: `LogError::OutsideRetention`.
    OutsideRetention,
    /// The crash bound: the write just acknowledged is in the head image within
    /// `snapshot_every` and one publish (judged from the stores), or it is not.
    Covered(bool),
    /// No tenure of this tenant was ever opened on the replica: nothing was called.
    Skipped,
    /// Anything else: never predicted.
    Other(String),
}

/// How a replica keeps acknowledged writes (`RuntimeConfig::durability`); a tenure keeps the
/// mode of the replica that opened it, so a tenant moving between replicas changes modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    /// The default: a batch is acknowledged once its segment is put and the tip moved.
    Shipped,
    /// Acknowledged at the local commit; the log ships every period (a few ms of real time).
    Async,
    /// No change log: images only (snapshots and the final image of a handoff).
    Images,
}

impl Mode {
    /// Whether a tenure of this mode keeps a change log.
    pub fn logged(self) -> bool {
        self != Mode::Images
    }
}

/// A log position, `(epoch, seq)`.
pub type Pos = (u64, u64);

/// Whether a tenant's local directory exists on a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dir {
    /// It does not.
    Absent,
    /// It does.
    Present,
    /// A dead copy (its tenure is at or below the floor) that the local sweep the supervisor
    /// starts when a tenure ends abandoned may have dropped, in the background.
    Maybe,
}

/// A tenure's place in its life, as far as a sequential observer can see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Serving.
    Serving,
    /// A forget began and has not finished (it failed and may be retried).
    Forgetting,
    /// Handed off.
    Released,
    /// Abandoned or lost.
    Abandoned,
    /// Erased.
    Forgotten,
    /// Let go for being idle (promise 12): flushed and released like a handoff; a call on a
    /// handle of it reopens the tenant on its replica.
    Passivated,
}

/// One tenure: a tenant's lease at one epoch, held by one replica.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tenure {
    /// The replica that opened it.
    pub replica: usize,
    /// Where it is.
    pub status: Status,
    /// The holder may act while `now < valid_until`.
    pub valid_until: u64,
    /// The tenure ended locally (released, lost, forgotten): it never holds again.
    pub ended: bool,
    /// What its ledger holds, committed, in order.
    pub local: Vec<String>,
    /// Something was committed since the last published image (or the restore).
    pub dirty: bool,
    /// The next image number this tenure will try.
    pub next_seq: u64,
    /// The head as the tenure knows it: the one it restored or last published.
    pub chain_head: Option<(u64, u64)>,
    /// `Shipped`: the tip its log confirmed last (or the restore found).
    pub tip: Option<Pos>,
    /// `Shipped`: the open changed the restored pages (a new database): the first batch that
    /// commits carries them into a segment, even a read.
    pub carry: bool,
    /// The mode of its replica.
    pub mode: Mode,
    /// `Async`: committed changes not shipped yet (they go at the next period).
    pub pending: bool,
    /// Logged: segments shipped since the newest image (counting those its restore applied),
    /// for compaction.
    pub since_image: u64,
    /// Logged: the identity of the ledger's bytes at `tip` (what the next segment is cut on;
    /// 0 is an empty database).
    pub state: u64,
    /// Its last activity (model time): its open, or the last run, admission, ticket's end or
    /// snapshot sent to it; it is idle once `passivate_after` has passed since.
    pub last_touch: u64,
    /// The supervisor of its replica that opened it (`State::generations`): its handles reopen
    /// the tenant through that one.
    pub generation: u64,
}

/// A tenant's row in the lease store.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Row {
    /// The replica that holds or last held it.
    pub owner: usize,
    /// The last epoch granted.
    pub epoch: u64,
    /// Live while `now < expires_at` and not released.
    pub expires_at: u64,
    /// Handed back.
    pub released: bool,
}

/// An image in the durable store (with its manifest).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Image {
    /// The event ids in it.
    pub content: Vec<String>,
    /// The image its manifest says it was built on.
    pub base: Option<(u64, u64)>,
    /// The log position it holds (`Shipped`).
    pub log: Option<Pos>,
    /// Taken by an `Images` tenure that restored a log: it holds writes no segment carries.
    pub beyond_log: bool,
    /// The identity of its bytes: a logged tenure's image is exactly the log's state at its
    /// position; an `Images` tenure's is a state of its own (its bytes differ, even with the
    /// same events).
    pub state: u64,
    /// Its bytes were damaged: it fails its checksum.
    pub corrupt: bool,
    /// Retention may have deleted it (it is no head): there or not until a listing shows it
    /// gone (`State::refine`).
    pub retired: bool,
}

/// A segment of the change log in the durable store.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Seg {
    /// The ledger's content after it.
    pub content: Vec<String>,
    /// The ledger's bytes it was cut on (an identity: [`State::next_state`]).
    pub before: u64,
    /// The ledger's bytes after it.
    pub after: u64,
    /// The tip it continued (`prev` in its header).
    pub prev: Option<Pos>,
    /// Its bytes were damaged: it fails its checks.
    pub damaged: bool,
    /// Retention may have deleted it (at or below the head image's position): there or not
    /// until a listing shows it gone.
    pub retired: bool,
}

/// What the stores hold of one tenant.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct TenantState {
    /// The lease row; `None` until the first acquire.
    pub row: Option<Row>,
    /// The highest forgotten epoch.
    pub floor: u64,
    /// The newest published image, `(epoch, seq)`.
    pub head: Option<(u64, u64)>,
    /// The log tip (`Shipped`): the newest segment the lease store confirmed.
    pub tip: Option<Pos>,
    /// Segments in the store above the floor, by position: those up to the tip (the log) and
    /// those whose tip never moved (never read).
    pub segments: BTreeMap<Pos, Seg>,
    /// The `prev` of every segment ever shipped above the floor, kept after the segment went:
    /// the chain from the tip, for what retention may delete.
    pub links: BTreeMap<Pos, Option<Pos>>,
    /// Segments at or below the floor that may still be there until a sweep.
    pub seg_leftovers: BTreeSet<Pos>,
    /// Segments whose put landed late after their ship had failed: no tip names them, and the
    /// replica takes each back once its put settles, so each may or may not be there.
    pub seg_maybe: BTreeSet<Pos>,
    /// Segments whose put landed but whose ship failed (no tip move confirmed): above the tip
    /// nothing names them, and their replica's reconciliation takes them back once their put
    /// settles (docs/guarantees.md, "Reconciling puts of unknown outcome"), so each may or may
    /// not be there.
    pub seg_unconfirmed: BTreeSet<Pos>,
    /// Images (each with its manifest) above the floor, by `(epoch, seq)`: exactly these are
    /// in the store.
    pub objects: BTreeMap<(u64, u64), Image>,
    /// Images whose head move timed out (its answer lost), not yet known to stay: the
    /// replica's reconciliation deletes each with the head below it once nothing can move the
    /// head to it any more, and keeps each the head names or has moved past, leaving it to
    /// retention (docs/guarantees.md, "Reconciling puts of unknown outcome"). One the head's
    /// chain of bases reaches stays; one its own tenure's next image passed by leaves this set
    /// (kept: the reconciliation only waited while that tenure served); one a later tenure
    /// passed by may have gone before (judged while the head was below it) or not.
    pub img_unconfirmed: BTreeSet<(u64, u64)>,
    /// Images at or below the floor that a failed forget left: each may still be there until a
    /// sweep (which runs beside an open, in the background) takes it.
    pub leftovers: BTreeSet<(u64, u64)>,
    /// Images above the floor whose bytes landed late with no manifest beside them.
    pub lone: BTreeSet<(u64, u64)>,
    /// Such images that retention (by listing, once hole 8 is fixed) may have deleted.
    pub lone_retired: BTreeSet<(u64, u64)>,
    /// Segments the world deleted behind the store's back (`Op::Damage`).
    pub deleted: BTreeSet<Pos>,
    /// Segments of the chain a listing showed gone while the retention rule held (a base older
    /// than `retain` then stood for them): judged once, as a later base may replace that one.
    pub retention_judged: BTreeSet<Pos>,
    /// Images whose put hung past its deadline: the put runs on and may land at any time
    /// (its bytes only, no manifest). Only an erasure takes them (docs/guarantees.md, late puts).
    pub stray: BTreeSet<(u64, u64)>,
}

impl TenantState {
    /// The image an open restores for `head`: the head, or — for an image that fails its
    /// checksum — the one its manifest was built on, and so on, never at or below the floor.
    fn restorable(&self, head: (u64, u64)) -> Result<(u64, u64), Res> {
        let mut at = head;
        loop {
            let Some(image) = self.objects.get(&at) else {
                return Err(Res::Corrupt);
            };
            if !image.corrupt {
                return Ok(at);
            }
            match image.base {
                Some(base) if base.0 > self.floor && base < at => at = base,
                _ => return Err(Res::Corrupt),
            }
        }
    }
}

/// The whole model of one simulated fleet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct State {
    /// Model time, ms.
    pub now: u64,
    /// The lease store is down.
    pub lease_down: bool,
    /// The durable store is down.
    pub durable_down: bool,
    /// Per tenant.
    pub tenants: Vec<TenantState>,
    /// Every tenure ever opened, by `(tenant, epoch)`.
    pub tenures: BTreeMap<(usize, u64), Tenure>,
    /// `[replica][tenant]`: the epoch in the supervisor's table.
    pub table: Vec<Vec<Option<u64>>>,
    /// `[replica][tenant]`: the epoch in the replica's renewal chain.
    pub registered: Vec<Vec<Option<u64>>>,
    /// `[replica][tenant]`: the epoch of the last tenure opened there (what `At::On` addresses).
    pub latest: Vec<Vec<Option<u64>>>,
    /// `[replica][tenant]`: the epoch of the tenure marker in the local directory (the last
    /// open there that got as far as its restore); a copy is dead once it is at or below the
    /// floor.
    pub markers: Vec<Vec<Option<u64>>>,
    /// `[replica][tenant]`: whether the tenant's local directory exists.
    pub dirs: Vec<Vec<Dir>>,
    /// `[replica][tenant]`: a tenure there ended abandoned since the last open there, so a
    /// local sweep of the tenant may run in the background.
    pub local_sweeps: Vec<Vec<bool>>,
    /// Periodic snapshots are on: an `Images` tenure with unpublished writes publishes by
    /// itself.
    pub periodic: bool,
    /// The change log's cases: compaction and a short `retain` (`Op::Log`).
    pub log_case: bool,
    /// How each replica keeps acknowledged writes (the final one: `Shipped`).
    pub modes: Vec<Mode>,
    /// Late landings armed and not yet taken by a call, by operation.
    pub armed: BTreeMap<Late, usize>,
    /// Lease-store calls answered with a timeout whose effect is still to land, oldest first.
    pub held: Vec<Held>,
    /// Image puts answered with a timeout whose bytes are still to land, oldest first.
    pub held_puts: Vec<HeldPut>,
    /// The replica's clock moved past the lease during the call being modelled (a
    /// `LapseDuringCommit`): a segment put that timed out is not sent again.
    pub lapsed_in_call: bool,
    /// The calls kept back land right before the next lease release.
    pub land_before_release: bool,
    /// The identity the next new ledger state gets (a segment's or an `Images` image's bytes).
    pub next_state: u64,
    /// `Op::ZombieShip`: right before the next segment put, every lease runs out and replica
    /// `.1` opens tenant `.0` and forgets it.
    pub successor: Option<(usize, usize)>,
    /// What that open and forget came to.
    pub successor_outcomes: Option<(Res, Res)>,
    /// `passivate_after` of the driven replicas (ms), in the passivation cases.
    pub passivate_after: Option<u64>,
    /// The handle of a tenure shares its binding with the handle of another (the key its world
    /// handle was cloned from): a tenure a call reopened after a passivation is reached through
    /// the handle that reopened it. Absent: a handle of its own.
    pub shares: BTreeMap<(usize, u64), (usize, u64)>,
    /// The epoch each handle is bound to, by the key it was recorded under, once a call rebound
    /// it (absent: its own).
    pub bound: BTreeMap<(usize, u64), u64>,
    /// `[replica]`: how many times it restarted (its supervisor now).
    pub generations: Vec<u64>,
}

type Outcomes = Vec<(Vec<Res>, State)>;

fn grid<T: Clone>(value: T) -> Vec<Vec<T>> {
    vec![vec![value; TENANTS]; REPLICAS + 1]
}

impl State {
    /// An empty fleet at time 0.
    pub fn new() -> Self {
        Self {
            now: 0,
            lease_down: false,
            durable_down: false,
            tenants: vec![TenantState::default(); TENANTS],
            tenures: BTreeMap::new(),
            table: grid(None),
            registered: grid(None),
            latest: grid(None),
            markers: grid(None),
            dirs: grid(Dir::Absent),
            local_sweeps: grid(false),
            periodic: false,
            log_case: false,
            modes: vec![Mode::Shipped; REPLICAS + 1],
            armed: BTreeMap::new(),
            held: Vec::new(),
            held_puts: Vec::new(),
            lapsed_in_call: false,
            land_before_release: false,
            next_state: 1,
            successor: None,
            successor_outcomes: None,
            passivate_after: None,
            shares: BTreeMap::new(),
            bound: BTreeMap::new(),
            generations: vec![0; REPLICAS + 1],
        }
    }

    /// Every outcome `op` may have, with the state each leads to. `ids` are the unique event ids
    /// the op's writes insert, in order.
    pub fn step(&self, op: &Op, ids: &[String]) -> Outcomes {
        let mut outcomes = self.step_calls(op, ids);
        for (_, s) in &mut outcomes {
            s.ship_pending();
            s.compact();
            s.publish_periodically();
            s.mark_dead_copies();
        }
        outcomes
    }

    /// The tenure of tenant `t` that `at` addresses.
    pub fn key_of(&self, t: usize, at: At) -> Option<(usize, u64)> {
        match at {
            At::Newest => self.tenures.keys().filter(|k| k.0 == t).max().copied(),
            // A crashed replica's tenure is never addressed again.
            At::On(r) => self.latest[r][t]
                .map(|e| (t, e))
                .filter(|k| self.tenures.contains_key(k)),
            At::Older(n) => self
                .tenures
                .keys()
                .filter(|k| k.0 == t)
                .rev()
                .nth(n)
                .copied(),
        }
    }

    /// Runs `f` on the tenure the handle `at` addresses is bound to, or skips the op when there
    /// is none: a call that does not re-resolve (a handoff, an abandon).
    fn on(
        mut self,
        t: usize,
        at: At,
        f: impl FnOnce(&mut State, (usize, u64)) -> Vec<Res>,
    ) -> Outcomes {
        let out = match self.key_of(t, at) {
            Some(k) => {
                let k = self.target(k);
                f(&mut self, k)
            }
            None => vec![Res::Skipped],
        };
        vec![(out, self)]
    }

    /// Runs `f` on the tenure a call on the handle `at` addresses reaches: its bound tenure, or,
    /// when that was passivated, the tenant reopened on its replica (whose refusal is the
    /// call's answer). `touch`: the call counts as the tenant's activity.
    fn reaching(
        mut self,
        t: usize,
        at: At,
        touch: bool,
        f: impl FnOnce(&mut State, (usize, u64)) -> Vec<Res>,
    ) -> Outcomes {
        let out = match self.key_of(t, at).map(|k| self.reach(k)) {
            Some(Ok(k)) => {
                if touch {
                    self.touch(k);
                }
                f(&mut self, k)
            }
            Some(Err(refused)) => vec![refused],
            None => vec![Res::Skipped],
        };
        vec![(out, self)]
    }

    fn tenure(&mut self, k: (usize, u64)) -> &mut Tenure {
        self.tenures.get_mut(&k).expect("a tenure the model opened")
    }

    /// Whether tenure `k` publishes images by itself (periodic snapshots, `Images`).
    pub fn periodic_images(&self, k: (usize, u64)) -> bool {
        self.periodic && self.tenures[&k].mode == Mode::Images
    }

    /// A new identity of ledger bytes.
    pub(super) fn new_state(&mut self) -> u64 {
        self.next_state += 1;
        self.next_state - 1
    }

    /// Whether tenure `k` keeps a change log.
    pub fn logged(&self, k: (usize, u64)) -> bool {
        self.tenures[&k].mode.logged()
    }

    /// Whether the tenure's holder may act now.
    pub fn holds(&self, k: (usize, u64)) -> bool {
        let t = &self.tenures[&k];
        !t.ended && self.now < t.valid_until
    }

    /// Whether the store's row of tenant `t` is live for `(owner, epoch)`.
    fn store_live(&self, t: usize, owner: usize, epoch: u64) -> bool {
        self.tenants[t].row.as_ref().is_some_and(|row| {
            !row.released && self.now < row.expires_at && row.owner == owner && row.epoch == epoch
        })
    }

    fn row_live(&self, t: usize) -> bool {
        let row = self.tenants[t].row.as_ref();
        row.is_some_and(|row| !row.released && self.now < row.expires_at)
    }
}
