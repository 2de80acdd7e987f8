//! Passivation's decisions, pure: who is idle, who is the least recently used, and when the
//! next tenant falls due — functions of last-activity stamps, standings and `now`, with no
//! actor, store or clock of their own (docs/architecture.md, "Passivation"). Whether a tenure may
//! begin one given its state is the tenure's (`tenant/tenure/passivation.rs`).
//!
//! ```text
//!   tenant actor, per run:  Activity { touches += 1, last_ms = now }   (two relaxed stores)
//!   supervisor:             Recency: (noted last_ms, seq) ──> key, in order, oldest first
//!     idle check (timer at the oldest noted stamp + passivate_after, or passivate_idle_now):
//!        pop the oldest noted ── touched since it was noted? ── yes ──> note again, go on
//!                    │ no                  (its place moves back: each re-note is paid once
//!                    │                      per activity, never per run)
//!                    ├── noted after now − passivate_after ──> stop: every later one is younger
//!                    ├── not serving (leaving) ──> skip, keep its place
//!                    └── idle ──> passivate it (the tenant may still refuse: a ticket, a run
//!                                 since; the supervisor notes it again)
//!     an open at max_open: the same walk without the age limit, for one victim
//! ```
//!
//! Why the order is exact although runs never tell the supervisor: every tenant's real last
//! activity is at or after the stamp noted for it, and a popped entry whose touches have not
//! moved was last active exactly at its noted stamp — no earlier than the smallest noted stamp,
//! so no one else can be older. Nothing is scanned per tenant: a check pays for the entries
//! it pops, each at most once per activity since it was last looked at.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};

/// Why a tenant was passivated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PassivationReason {
    /// Idle for `passivate_after`.
    Idle,
    /// The least recently used idle tenant when an open met `max_open`.
    Evicted,
}

impl PassivationReason {
    /// `idle` or `evicted` (the metric's label, the event's text).
    pub fn as_str(self) -> &'static str {
        match self {
            PassivationReason::Idle => "idle",
            PassivationReason::Evicted => "evicted",
        }
    }
}

/// A tenure's activity, written by its actor at every run, admission, snapshot and query (two
/// relaxed stores, no lock, no message) and read by the supervisor when it looks for idle
/// tenants.
#[derive(Debug, Default)]
pub(crate) struct Activity {
    /// How many times the tenant was touched: a passivation judged at one count is refused if
    /// the tenant was touched since, even within the same millisecond.
    touches: AtomicU64,
    /// When it was last touched, on the replica's clock (ms).
    last_ms: AtomicU64,
}

impl Activity {
    /// A tenure opened at `now_ms`: its opening counts as its first activity.
    pub(crate) fn new(now_ms: u64) -> Self {
        Self {
            touches: AtomicU64::new(0),
            last_ms: AtomicU64::new(now_ms),
        }
    }

    /// The tenant was used at `now_ms`.
    pub(crate) fn touch(&self, now_ms: u64) {
        self.last_ms.fetch_max(now_ms, Ordering::Relaxed);
        self.touches.fetch_add(1, Ordering::Release);
    }

    /// Its standing now: touches, last activity, and whether it serves (`serving`, from the
    /// status the caller read).
    pub(crate) fn standing(&self, serving: bool) -> Standing {
        let touches = self.touches.load(Ordering::Acquire);
        Standing {
            touches,
            last_ms: self.last_ms.load(Ordering::Relaxed),
            serving,
        }
    }

    /// How many times it was touched.
    pub(crate) fn touches(&self) -> u64 {
        self.touches.load(Ordering::Acquire)
    }

    /// When it was last touched (ms, the replica's clock).
    #[cfg(test)]
    pub(crate) fn last_ms(&self) -> u64 {
        self.last_ms.load(Ordering::Relaxed)
    }
}

/// What the supervisor sees of a tenant when it looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Standing {
    /// Its activity count.
    pub(crate) touches: u64,
    /// Its last activity (ms).
    pub(crate) last_ms: u64,
    /// Whether it serves (a tenant leaving by any way is not passivated).
    pub(crate) serving: bool,
}

/// What was noted of one tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Noted {
    /// Its last activity when noted.
    last_ms: u64,
    /// Ties of equal stamps go in the order they were noted.
    seq: u64,
    /// Its activity count when noted.
    touches: u64,
}

/// A tenant chosen for passivation, with the activity count it was judged at (the tenant
/// refuses if it has been touched since).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chosen<K> {
    /// The tenant.
    pub(crate) key: K,
    /// Its activity count when judged idle.
    pub(crate) touches: u64,
    /// Its last activity (ms).
    pub(crate) last_ms: u64,
}

/// The open tenants of a replica in the order of their last noted activity: an LRU list that
/// runs never touch (see the module's documentation).
#[derive(Debug)]
pub(crate) struct Recency<K: Ord + Hash + Clone> {
    /// `(last_ms, seq, key)`, oldest first.
    order: BTreeSet<(u64, u64, K)>,
    /// What was noted of each key in `order`.
    noted: HashMap<K, Noted>,
    /// The next tie-breaker.
    next_seq: u64,
}

impl<K: Ord + Hash + Clone> Default for Recency<K> {
    fn default() -> Self {
        Self {
            order: BTreeSet::new(),
            noted: HashMap::new(),
            next_seq: 0,
        }
    }
}

impl<K: Ord + Hash + Clone> Recency<K> {
    /// How many tenants are in the list.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.noted.len()
    }

    /// Notes `key` as last active at `standing.last_ms` with `standing.touches` (replacing what
    /// was noted of it).
    pub(crate) fn note(&mut self, key: K, standing: Standing) {
        self.remove(&key);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.order.insert((standing.last_ms, seq, key.clone()));
        self.noted.insert(
            key,
            Noted {
                last_ms: standing.last_ms,
                seq,
                touches: standing.touches,
            },
        );
    }

    /// Takes `key` out of the list (it left, or it is being passivated).
    pub(crate) fn remove(&mut self, key: &K) {
        if let Some(n) = self.noted.remove(key) {
            self.order.remove(&(n.last_ms, n.seq, key.clone()));
        }
    }

    /// The oldest noted stamp, if any: no tenant can fall due before it + `passivate_after`.
    pub(crate) fn oldest_ms(&self) -> Option<u64> {
        self.order.first().map(|(ms, _, _)| *ms)
    }

    /// The least recently used tenants that serve and were last active before `before` (every
    /// one when `None`), at most `limit`, oldest first; each is taken out of the list (note it
    /// again if its passivation is refused). `look` says how each stands now (`None`: it left;
    /// it is dropped from the list). Tenants touched since they were noted are noted again at
    /// their new stamp; tenants that do not serve keep their place.
    pub(crate) fn pick(
        &mut self,
        before: Option<u64>,
        limit: usize,
        mut look: impl FnMut(&K) -> Option<Standing>,
    ) -> Vec<Chosen<K>> {
        let mut chosen = Vec::new();
        let mut skipped = Vec::new();
        // Each entry is looked at twice at most (once as noted, once after a re-note), so a walk
        // ends while runs go on.
        let mut budget = self.order.len().saturating_mul(2);
        while chosen.len() < limit && budget > 0 {
            budget -= 1;
            let Some((last_ms, seq, key)) = self.order.first().cloned() else {
                break;
            };
            if before.is_some_and(|b| last_ms >= b) {
                break;
            }
            let noted = self.noted.get(&key).copied();
            self.order.remove(&(last_ms, seq, key.clone()));
            self.noted.remove(&key);
            let (Some(noted), Some(now)) = (noted, look(&key)) else {
                continue; // gone
            };
            if now.touches != noted.touches {
                // Active since: its place moves back (looked at again only if still old).
                self.note(key, now);
                continue;
            }
            if !now.serving {
                skipped.push((key, noted));
                continue;
            }
            chosen.push(Chosen {
                key,
                touches: noted.touches,
                last_ms: noted.last_ms,
            });
        }
        for (key, noted) in skipped {
            self.order.insert((noted.last_ms, noted.seq, key.clone()));
            self.noted.insert(key, noted);
        }
        chosen
    }
}

/// When the next idle check is due (ms on the replica's clock): when the oldest noted tenant
/// has been idle `after_ms`; `None` with nobody to look at.
pub(crate) fn next_check_ms(oldest_ms: Option<u64>, after_ms: u64) -> Option<u64> {
    oldest_ms.map(|oldest| oldest.saturating_add(after_ms))
}

/// How long (ms of real time) the supervisor waits before its next idle check, due at `due_ms`
/// on a clock reading `now_ms`. A check due already right after one ran (`after_check`) found
/// its oldest tenant leaving by another way (draining, flushing, stopping: it keeps its place
/// until it is gone, and its going re-arms the check): it is looked at again after a back-off,
/// an eighth of `passivate_after` within 1 ms and 1 s, not every millisecond while it leaves.
/// Armed for any other reason (a tenant noted, one gone), a due check runs at once.
pub(crate) fn idle_check_wait_ms(
    due_ms: u64,
    now_ms: u64,
    after_ms: u64,
    after_check: bool,
) -> u64 {
    if due_ms > now_ms {
        due_ms - now_ms
    } else if after_check {
        (after_ms / 8).clamp(1, 1_000)
    } else {
        1
    }
}

/// The last activity a tenant must be older than to be passivated for being idle at `now_ms`
/// (`pick`'s `before`).
pub(crate) fn idle_before(now_ms: u64, after_ms: u64) -> u64 {
    now_ms
        .checked_sub(after_ms)
        .map_or(0, |t| t.saturating_add(1))
}

#[cfg(test)]
mod tests;
