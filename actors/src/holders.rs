//! [`Holders`]: where this replica last found tenants held elsewhere, so that a host's messages
//! to a tenant on another replica are forwarded without a lease-store round trip, and without a
//! round trip to the supervisor, each.
//!
//! What may be recalled, and for which message, is `leasehold::route::recall` (pure, beside the
//! route table): only a live holder other than this replica, only for the sender's own
//! messages, for at most `max_age`. The router forgets a key whenever a forward to it comes
//! back with anything but the holder's answer, and the supervisor whenever an open of it begins
//! here (so a remembered holder never hides a tenant this replica holds). It is the runtime's
//! (shared by the router and the supervisor, importing neither). Bounded: at `MAX_REMEMBERED`
//! keys the memory is emptied and refilled by the next lookups (a lookup per key once, never a
//! scan per message).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use leasehold::LeaseKey;
use leasehold::clock::duration_ms;
use leasehold::lease::Lookup;
use leasehold::route;
use tokio::time::Instant;

/// The most keys remembered at once.
const MAX_REMEMBERED: usize = 65_536;

/// Where tenants held elsewhere were last found. `max_age` `None`: nothing is remembered.
#[derive(Debug)]
pub(crate) struct Holders {
    /// How long a lookup is trusted as a place to forward to.
    max_age: Option<Duration>,
    /// Each key's last lookup worth remembering, and when it was made.
    found: Mutex<HashMap<LeaseKey, (Instant, Lookup)>>,
}

impl Holders {
    /// A memory whose lookups are trusted for `max_age` (`None`: none is kept).
    pub(crate) fn new(max_age: Option<Duration>) -> Self {
        Self {
            max_age,
            found: Mutex::default(),
        }
    }

    /// The lookup to use in place of a fresh one for a message of `key` that took `hops`
    /// forwards, if one may be (`route::recall`).
    pub(crate) fn recall(&self, key: &LeaseKey, me: &str, hops: u8) -> Option<Lookup> {
        let max_age = self.max_age?;
        let found = self.found.lock().unwrap_or_else(|p| p.into_inner());
        let (at, lookup) = found.get(key)?;
        route::recall(
            lookup,
            duration_ms(at.elapsed()),
            duration_ms(max_age),
            me,
            hops,
        )
    }

    /// Remembers `lookup`, made at `at`, if it is worth it; else forgets what was remembered of
    /// `key` (the tenant is no longer where it was found).
    pub(crate) fn remember(&self, key: &LeaseKey, lookup: &Lookup, at: Instant, me: &str) {
        if self.max_age.is_none() {
            return;
        }
        let mut found = self.found.lock().unwrap_or_else(|p| p.into_inner());
        if !route::worth_remembering(lookup, me) {
            found.remove(key);
            return;
        }
        if found.len() >= MAX_REMEMBERED && !found.contains_key(key) {
            found.clear();
        }
        found.insert(key.clone(), (at, lookup.clone()));
    }

    /// Forgets where `key` was found: a forward there came back without the holder's answer.
    pub(crate) fn forget(&self, key: &LeaseKey) {
        if self.max_age.is_none() {
            return;
        }
        self.found
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}
