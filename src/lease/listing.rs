//! What [`LeaseStore::list`](super::LeaseStore::list) returns: every lease of a store, page by
//! page, each with what the **store's own clock** says of it — how long it still runs, and how
//! long ago a pending erasure was recorded. An operator reads these (`leasehold leases`,
//! `leasehold inspect`); the runtime never needs them.
//!
//! Pages are in the store's order of keys (bytewise on SQLite; the table's collation on
//! PostgreSQL, which need not be bytewise) and start **at** a key, so that one key's entry is a
//! page of one starting at it.

use std::time::Duration;

use super::LeaseRecord;
use crate::ids::LeaseKey;

/// One lease as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseEntry {
    /// The record, as [`LeaseStore::read`](super::LeaseStore::read) returns it.
    pub record: LeaseRecord,
    /// How long the lease still runs by the store's clock: `Some` while it is live (not
    /// released, not expired, and — on SQLite — written in this boot), `None` otherwise. Only
    /// the store can say this: `expires_at_ms` counts on its clock, which the reader does not
    /// have (a host's monotonic clock on SQLite).
    pub remaining: Option<Duration>,
    /// The pending erasure a forget left and no sweep has yet marked done
    /// ([`LeaseStore::erasures_due`](super::LeaseStore::erasures_due)).
    pub erasure: Option<ErasureEntry>,
}

impl LeaseEntry {
    /// Whether the lease is live by the store's clock (someone holds it now).
    pub fn is_live(&self) -> bool {
        self.remaining.is_some()
    }
}

/// A pending erasure as a listing shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErasureEntry {
    /// The floor the forget raised: everything at or below it is to be swept once more.
    pub floor: u64,
    /// How long ago the forget was recorded, by the store's clock; `None` when the store cannot
    /// tell (a SQLite row of an earlier boot: it is due once this boot has lasted the settle
    /// time).
    pub age: Option<Duration>,
}

impl ErasureEntry {
    /// Whether [`LeaseStore::erasures_due`](super::LeaseStore::erasures_due) with `settled_for`
    /// reports it now: its age has reached `settled_for`. An erasure of unknown age is not
    /// judged due here (the store alone can judge it; ask `erasures_due`).
    pub fn is_due(&self, settled_for: Duration) -> bool {
        self.age.is_some_and(|age| age >= settled_for)
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeasePage {
    /// The leases of the page, in the store's order of keys.
    pub entries: Vec<LeaseEntry>,
    /// The key the next page starts at (pass it as `from`); `None` when this page is the last.
    pub next: Option<LeaseKey>,
}

/// The number of entries a listing asked for `limit` returns at most: `limit`, but at least 1.
pub fn page_limit(limit: usize) -> usize {
    limit.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_erasure_is_due_once_its_age_reaches_the_settle_time_and_never_when_unknown() {
        let at = |age: Option<u64>| ErasureEntry {
            floor: 1,
            age: age.map(Duration::from_millis),
        };
        let settle = Duration::from_millis(1_000);
        assert!(!at(Some(999)).is_due(settle));
        assert!(at(Some(1_000)).is_due(settle));
        assert!(!at(None).is_due(settle));
        assert!(!at(None).is_due(Duration::ZERO));
    }

    #[test]
    fn a_page_holds_at_least_one_entry() {
        assert_eq!(page_limit(0), 1);
        assert_eq!(page_limit(7), 7);
    }
}
