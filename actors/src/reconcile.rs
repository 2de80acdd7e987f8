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
//! segments). A delete that fails keeps the entry for the next pass.
//! The same pass sweeps the forgotten tenants whose erasure is due (any replica's forgets,
//! from the lease store), and looks again at the orphan candidates of live tenants
//! ([`orphans`]).
//!
//! ```text
//!   ship / publish ──track──> Entry{held} ──guard dropped──> Entry{due at deadline}
//!        │ named                                   │ pass: settle_put, read record, verdict
//!        v                                         v
//!     forgotten                      Keep / Delete(delete_keys) / Wait / Release / List
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use leasehold::clock::SharedClock;
use leasehold::durable::SharedDurableStore;
use leasehold::lease::SharedLeaseStore;
use leasehold::plan::orphans::OrphanAges;
use leasehold::plan::reconcile::{Naming, PutOf};
use leasehold::{LeaseKey, ReplicaId};
use tokio::sync::Notify;

use crate::events::EventSink;
use crate::lease_actor::LeaseCell;

pub(crate) mod orphans;
pub(crate) mod pass;

/// How often entries that are due but whose puts still run are looked at again.
pub(crate) const SETTLE_POLL: Duration = Duration::from_millis(200);

/// What a pass needs of the replica: its name, stores, clock, events and ledger — nothing that
/// holds its state root, threads or tenants, so that passes may go on after the supervisor has
/// stopped ([`linger`]).
#[derive(Debug, Clone)]
pub(crate) struct Cx {
    /// This replica's name (the owner of the tenures it may fence).
    pub(crate) replica: ReplicaId,
    /// The lease store, every call bounded.
    pub(crate) leases: SharedLeaseStore,
    /// The durable store, every call bounded.
    pub(crate) durable: SharedDurableStore,
    /// The replica's monotonic clock: due times and orphan ages.
    pub(crate) clock: SharedClock,
    /// Where events go.
    pub(crate) events: EventSink,
    /// The longest a put may still land after it was sent.
    pub(crate) put_lifetime: Duration,
    /// The ledger.
    pub(crate) reconciler: Reconciler,
}

impl Cx {
    /// The replica's clock, now.
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }
}

/// The supervisor's loop: the due entries are judged whenever one falls due — at once when a
/// work lets go of one that nothing can name any more, else at its deadline — and every
/// [`SETTLE_POLL`] while some wait for their puts to settle. Ends with the supervisor (its
/// future is dropped). The erasures due and the orphan looks are the periodic passes'.
pub(crate) async fn run_when_due(cx: Cx) {
    const AT_LEAST: Duration = SETTLE_POLL;
    let mut wait = None;
    loop {
        match wait {
            Some(wait) => {
                let _ = tokio::time::timeout(wait, cx.reconciler.let_go()).await;
            }
            None => cx.reconciler.let_go().await,
        }
        let due = cx.reconciler.next_due_ms();
        if due.is_some_and(|at| at <= cx.now_ms()) {
            pass::run_entries(&cx, false).await;
        }
        wait = cx.reconciler.next_due_ms().map(|at| {
            let ms = at.saturating_sub(cx.now_ms());
            Duration::from_millis(ms).max(AT_LEAST)
        });
    }
}

/// After the supervisor stopped: while its arbiters still run (a tenant's work there may still
/// enter a put, after the supervisor looked at its ledger) or puts of unknown outcome are in
/// the ledger, a pass a second (every entry due, as at close), until both are over or
/// `put_lifetime` has passed; what is left then goes to the orphan and erasure sweeps of later
/// tenures. `arbiters`: how many of the replica's arbiter threads have not ended yet.
pub(crate) async fn linger(cx: Cx, arbiters: Arc<AtomicUsize>) {
    let until = tokio::time::Instant::now() + cx.put_lifetime;
    loop {
        let running = arbiters.load(Ordering::SeqCst);
        let unsettled = cx.reconciler.unsettled();
        if !lingers(running, unsettled, tokio::time::Instant::now() < until) {
            return;
        }
        if unsettled == 0 {
            // Only waiting for the arbiters to end: look again soon.
            tokio::time::sleep(ARBITER_POLL).await;
            continue;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        pass::run(&cx, true).await;
    }
}

/// How often a lingering replica looks whether its arbiters have ended.
const ARBITER_POLL: Duration = Duration::from_millis(50);

/// Whether a stopped replica goes on reconciling: within `put_lifetime`, while arbiters run
/// (they may still enter puts) or entries are unsettled.
fn lingers(arbiters_running: usize, unsettled: usize, within_lifetime: bool) -> bool {
    within_lifetime && (arbiters_running > 0 || unsettled > 0)
}

#[cfg(test)]
mod linger_tests {
    use super::lingers;

    #[test]
    fn a_stopped_replica_lingers_while_its_arbiters_run_or_puts_are_unsettled() {
        // An entry entered after the supervisor looked at its ledger (an arbiter still ran):
        // lingered on, where the replica used to linger only if it found entries at its stop.
        assert!(lingers(1, 0, true));
        assert!(lingers(0, 2, true));
        assert!(lingers(2, 1, true));
        assert!(!lingers(0, 0, true), "nothing left: it ends at once");
        assert!(
            !lingers(1, 3, false),
            "put_lifetime passed: later sweeps take the rest"
        );
    }
}

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
    /// How long its work may wait for its puts, and for the moves that name it.
    pub(crate) deadlines: Deadlines,
    /// The work still holds its guard: not due.
    pub(crate) held: bool,
    /// A try of every put was answered: due at once when let go, unless a move that may name
    /// it was left unanswered (then at its deadline, the moves' included). An earlier try that
    /// timed out may still run: the verdict waits for every try of its keys to settle
    /// (`settle_put`).
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

    /// How long after it was entered its puts' deadlines ran out. A naming move left unanswered
    /// is not waited for: a verdict that it may still land fences its tenure first (or waits
    /// while the tenure runs here), so judging early is safe.
    pub(crate) fn deadline_ms(&self) -> u64 {
        self.deadlines.puts_ms
    }

    /// When it falls due for a verdict (replica's clock), once its work let go of it.
    pub(crate) fn due_at_ms(&self) -> u64 {
        if self.due_at_once() {
            self.started_ms
        } else {
            self.started_ms.saturating_add(self.deadline_ms())
        }
    }

    /// Whether the tenure that put it still runs on this replica.
    pub(crate) fn tenure_runs_here(&self) -> bool {
        self.tenure.upgrade().is_some_and(|cell| !cell.is_ended())
    }
}

/// How long the work of a put may wait for it, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Deadlines {
    /// For its puts (each grown with its payload).
    pub(crate) puts_ms: u64,
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
    /// Woken when a work lets go of an entry, so that the supervisor's loop runs a pass when it
    /// is due (at once, or at its deadline) without waiting for its period.
    let_go: Arc<Notify>,
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

    /// Enters `put` of the tenure of `cell`, about to be sent at `now_ms`, whose work waits
    /// at most `deadlines`.
    pub(crate) fn track(
        &self,
        cell: &Arc<LeaseCell>,
        put: PutOf,
        now_ms: u64,
        deadlines: Deadlines,
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
                deadlines,
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

    /// Resolves when a work let go of an entry.
    pub(crate) async fn let_go(&self) {
        self.let_go.notified().await;
    }

    /// When the next entry its work let go of falls due, on the replica's clock (`None`: none).
    pub(crate) fn next_due_ms(&self) -> Option<u64> {
        self.ledger()
            .entries
            .values()
            .filter(|e| !e.held)
            .map(Entry::due_at_ms)
            .min()
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

    /// The put was sent again at `now_ms` (its earlier try timed out): its deadline runs from
    /// this send.
    pub(crate) fn resent(&self, now_ms: u64) {
        self.reconciler.update(self.id, |e| e.started_ms = now_ms);
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
        let mut let_go = false;
        {
            let mut ledger = self.reconciler.ledger();
            if let Some(entry) = ledger.entries.get_mut(&self.id) {
                entry.held = false;
                if entry.keys.is_empty() {
                    ledger.entries.remove(&self.id);
                } else {
                    let_go = true;
                }
            }
        }
        if let_go {
            self.reconciler.let_go.notify_one();
        }
    }
}
