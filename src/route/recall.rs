//! Where a tenant was found, remembered for a moment: a router that forwards a host's messages
//! to a tenant held elsewhere need not read the lease store before each one.
//!
//! A remembered lookup is only ever a guess at **where to send**, never a judgement that a
//! lease holds or ran out: [`recall`] gives one back only when it names a live holder other
//! than this replica with a live endpoint, so [`decide`](super::decide) can only answer
//! `Forward` from it. The receiver runs the message only if it holds the tenant then (its own
//! lease, its own fencing: docs/guarantees.md, promise 11); one that does not routes it again.
//! A stale guess costs one round trip, never a wrong answer: the router that used it looks the
//! tenant up and routes once more, that failed hop not counted.
//!
//! ```text
//!  remembered (age, lookup) ── the message is the sender's own (hop 0)? ── no ─> look up
//!                             age ≤ max age, lease still runs after age,
//!                             live holder ≠ me, live endpoint? ────────── no ─> look up
//!                             yes ─> the lookup, its lease shortened by age
//! ```

use crate::lease::Lookup;

/// The lookup a router may use in place of a fresh one, `age_ms` after it was made, for a
/// message that took `hops` forwards so far; `None`: look the tenant up.
///
/// Only the sender's own messages (`hops == 0`) use one: a forwarded message always looks up,
/// so two replicas with stale memories never pass a message back and forth.
pub fn recall(
    remembered: &Lookup,
    age_ms: u64,
    max_age_ms: u64,
    me: &str,
    hops: u8,
) -> Option<Lookup> {
    if hops > 0 || age_ms > max_age_ms || !worth_remembering(remembered, me) {
        return None;
    }
    let left = remembered
        .lease_left_ms
        .checked_sub(age_ms)
        .filter(|l| *l > 0)?;
    Some(Lookup {
        lease_left_ms: left,
        ..remembered.clone()
    })
}

/// Whether a fresh lookup is worth remembering: it names a live holder other than `me` whose
/// record (and so its endpoint) is live. Nothing else is remembered: a free or expired lease,
/// a dead holder, this replica's own earlier lease are always looked up again.
pub fn worth_remembering(lookup: &Lookup, me: &str) -> bool {
    match (lookup.live_holder(), lookup.live_endpoint()) {
        (Some((holder, _)), Some(_)) => holder != me,
        _ => false,
    }
}
