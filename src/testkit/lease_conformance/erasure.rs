//! The conformance check of pending erasures (docs/guarantees.md, "the erasure bound"): a forget
//! leaves a record that any replica's periodic sweep finds once every put that could still land
//! has landed, and clears once it has swept.

use super::{A, LeaseHarness, Rule};
use crate::ids::LeaseKey;
use crate::lease::PendingErasure;

/// A forget leaves a pending erasure of its floor, reported by `erasures_due` only once the
/// settle time has passed on the store's clock (a retried forget does not start it again);
/// `erasure_done` of another floor leaves it, of its floor clears it; a later forget of the
/// same tenant records its own floor afresh.
pub async fn conformance_a_forget_leaves_an_erasure_due_after_the_settle_time(h: &LeaseHarness) {
    let rule = Rule("a forget leaves an erasure due after the settle time");
    let key = h.key("erasure-due");
    let settle = h.ttl;
    rule.ok("acquire", h.store.acquire(&key, A, h.ttl).await);
    rule.ok("forget", h.store.mark_forgotten(&key, A, 1).await);
    rule.eq("due at once", due(h, rule, &key, settle).await, vec![]);
    h.pass(60).await;
    rule.ok("forget again", h.store.mark_forgotten(&key, A, 1).await);
    h.pass(60).await;
    // The lease has run out meanwhile: the next acquire takes epoch 2.
    let pending = |floor| PendingErasure {
        key: key.clone(),
        floor,
    };
    rule.eq(
        "due once the settle time has passed since the first forget",
        due(h, rule, &key, settle).await,
        vec![pending(1)],
    );
    rule.ok("done of another floor", h.store.erasure_done(&key, 7).await);
    rule.eq(
        "due after another floor's done",
        due(h, rule, &key, settle).await,
        vec![pending(1)],
    );
    rule.ok("done", h.store.erasure_done(&key, 1).await);
    rule.eq("due after done", due(h, rule, &key, settle).await, vec![]);
    rule.ok("done again", h.store.erasure_done(&key, 1).await);
    rule.ok("acquire again", h.store.acquire(&key, A, h.ttl).await);
    rule.ok("forget epoch 2", h.store.mark_forgotten(&key, A, 2).await);
    rule.eq(
        "a later forget is not due at once",
        due(h, rule, &key, settle).await,
        vec![],
    );
    rule.eq(
        "with no settle time it is",
        due(h, rule, &key, std::time::Duration::ZERO).await,
        vec![pending(2)],
    );
}

/// The due erasures of `key` (the store holds other suites' too).
async fn due(
    h: &LeaseHarness,
    rule: Rule,
    key: &LeaseKey,
    settle: std::time::Duration,
) -> Vec<PendingErasure> {
    let all = rule.ok("erasures_due", h.store.erasures_due(settle, 100_000).await);
    all.into_iter().filter(|e| e.key == *key).collect()
}
