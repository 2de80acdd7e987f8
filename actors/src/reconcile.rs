//! The replica's ledger of puts of unknown outcome, and its reconciliation (docs/guarantees.md,
//! "Reconciling puts of unknown outcome").
//!
//! Every segment, image and manifest put is entered here **before** it is sent, by a
//! [`Tracked`] guard that the work holding the put keeps. The work says how far the step that
//! names the object got (`asking`, `refused`) and, once the tip or the head names it, forgets
//! it (`named`). Whatever ends the work — an error, a refusal, a lapse, an abandon, a close, or
//! an actor that stops and drops its future with the put in flight — drops the guard, and the
//! entry stays: the ledger belongs to the replica, not to the tenant actor.
//!
//! A pass ([`pass::run`]) takes each entry whose caller let go of it and whose deadline has
//! passed (at once if its put was answered), waits for its put to settle (`settle_put`), reads
//! the lease record and asks the pure [`leasehold::plan::reconcile::verdict`]: keep it, delete
//! it, look again later, or learn more first (fence its tenure by a release, list the tenant's
//! segments, walk the head's chain). A delete that fails keeps the entry for the next pass.
//! The same pass sweeps the forgotten tenants whose erasure is due (any replica's forgets,
//! from the lease store), and looks again at the orphan candidates of live tenants
//! ([`orphans`]).
//!
//! ```text
//!   ship / publish ──track──> Entry{held} ──guard dropped──> Entry{due at deadline}
//!        │ named                                   │ pass: settle_put, read record, verdict
//!        v                                         v
//!     forgotten                      Keep / Delete(delete_keys) / Wait / Release / List / Walk
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use leasehold::LeaseKey;
use leasehold::plan::orphans::OrphanAges;
use leasehold::plan::reconcile::{Naming, PutOf};
use tokio::sync::Notify;

use crate::lease_actor::LeaseCell;

pub(crate) mod orphans;
pub(crate) mod pass;

/// What one reconciliation pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Puts of unknown outcome found named, and forgotten.
    pub kept: usize,
    /// Objects deleted: puts that nothing names, and orphans of dead tenures.
    pub deleted: usize,
    /// Puts still waiting: held by their work, not due, still running, or still nameable.
    pub waiting: usize,
    /// Forgotten tenants swept again once their erasure was due, and marked done.
    pub erasures_done: usize,
    /// Store calls of the pass that failed (retried at the next pass).
    pub failures: usize,
}

/// One put of unknown outcome.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The tenant.
    pub(crate) tenant: LeaseKey,
    /// What was put.
    pub(crate) put: PutOf,
    /// The keys that may be ours (an `AlreadyExists` of other bytes takes its key out).
    pub(crate) keys: Vec<String>,
    /// How far the naming step got.
    pub(crate) naming: Naming,
    /// When it was entered (the replica's clock).
    pub(crate) started_ms: u64,
    /// The caller's deadline of its puts.
    pub(crate) deadline_ms: u64,
    /// The work still holds its guard: not due.
    pub(crate) held: bool,
    /// Every put answered (nothing of it can still land): due at once when let go, unless a
    /// move that may name it was left unanswered (then at its deadline, the moves' included).
    pub(crate) answered: bool,
    /// The tenure that put it (weak: the ledger must not keep a tenure alive).
    pub(crate) tenure: Weak<LeaseCell>,
    /// A release of that tenure was answered: none of its moves can land any more.
    pub(crate) fenced: bool,
}

impl Entry {
    /// Nothing of it can land or name it later: its puts were answered and no move of unknown
    /// outcome may still land.
    pub(crate) fn due_at_once(&self) -> bool {
        self.answered && self.naming != Naming::Unknown
    }

    /// Whether the tenure that put it still runs on this replica.
    pub(crate) fn tenure_runs_here(&self) -> bool {
        self.tenure.upgrade().is_some_and(|cell| !cell.is_ended())
    }
}

/// The ledger itself, behind the reconciler's lock.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// The next entry's number.
    next_id: u64,
    /// The puts of unknown outcome, by number.
    pub(crate) entries: BTreeMap<u64, Entry>,
    /// Orphan candidates of live tenants and when they were first seen.
    pub(crate) orphans: OrphanAges,
    /// Tenants whose orphan candidates are to be looked at again, and when (replica's clock).
    pub(crate) rechecks: HashMap<LeaseKey, u64>,
}

/// The replica's ledger of puts of unknown outcome; cheap to clone, shared by every tenant.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reconciler {
    /// The ledger.
    ledger: Arc<Mutex<Ledger>>,
    /// Woken when an entry becomes due at once (its put was answered), so the supervisor runs
    /// a pass without waiting for its period.
    due_now: Arc<Notify>,
    /// One pass at a time.
    pub(crate) pass: Arc<tokio::sync::Mutex<()>>,
}

fn lock(ledger: &Mutex<Ledger>) -> MutexGuard<'_, Ledger> {
    ledger.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Reconciler {
    /// An empty ledger.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The ledger, locked.
    pub(crate) fn ledger(&self) -> MutexGuard<'_, Ledger> {
        lock(&self.ledger)
    }

    /// Enters `put` of `tenant`, by the tenure of `cell`, about to be sent at `now_ms` with a
    /// caller's deadline of `deadline_ms` for its puts.
    pub(crate) fn track(
        &self,
        cell: &Arc<LeaseCell>,
        put: PutOf,
        now_ms: u64,
        deadline_ms: u64,
    ) -> Tracked {
        let tenant = cell.key.clone();
        let mut ledger = self.ledger();
        let id = ledger.next_id;
        ledger.next_id += 1;
        let keys = put.keys(&tenant);
        ledger.entries.insert(
            id,
            Entry {
                tenant,
                put,
                keys,
                naming: Naming::NotAsked,
                started_ms: now_ms,
                deadline_ms,
                held: true,
                answered: false,
                tenure: Arc::downgrade(cell),
                fenced: false,
            },
        );
        Tracked {
            reconciler: self.clone(),
            id,
        }
    }

    /// Resolves when an entry became due at once.
    pub(crate) async fn due_now(&self) {
        self.due_now.notified().await;
    }

    /// How many puts of unknown outcome the replica still holds.
    pub(crate) fn unsettled(&self) -> usize {
        self.ledger().entries.len()
    }

    fn update(&self, id: u64, change: impl FnOnce(&mut Entry)) {
        if let Some(entry) = self.ledger().entries.get_mut(&id) {
            change(entry);
        }
    }
}

/// The guard of one entry, kept by the work that makes the put. Dropped without
/// [`Tracked::named`], it leaves the entry to the reconciliation.
#[derive(Debug)]
pub(crate) struct Tracked {
    /// The ledger.
    reconciler: Reconciler,
    /// Its entry.
    id: u64,
}

impl Tracked {
    /// Every put was answered: nothing of it can land later.
    pub(crate) fn answered(&self) {
        self.reconciler.update(self.id, |e| e.answered = true);
    }

    /// The object under `key` holds another writer's bytes: never ours to delete.
    pub(crate) fn not_ours(&self, key: &str) {
        self.reconciler
            .update(self.id, |e| e.keys.retain(|k| k != key));
    }

    /// The move that names it is being asked: from now on it may land.
    pub(crate) fn asking(&self) {
        self.reconciler
            .update(self.id, |e| e.naming = Naming::Unknown);
    }

    /// The only ask of the move was refused (a definite answer): nothing names it.
    pub(crate) fn refused(&self) {
        self.reconciler
            .update(self.id, |e| e.naming = Naming::Refused);
    }

    /// The tip or the head names it: the replica forgets it.
    pub(crate) fn named(self) {
        self.reconciler.ledger().entries.remove(&self.id);
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        let mut due_now = false;
        {
            let mut ledger = self.reconciler.ledger();
            if let Some(entry) = ledger.entries.get_mut(&self.id) {
                entry.held = false;
                if entry.keys.is_empty() {
                    ledger.entries.remove(&self.id);
                } else {
                    due_now = entry.due_at_once();
                }
            }
        }
        if due_now {
            self.reconciler.due_now.notify_one();
        }
    }
}
