//! The conformance check of [`LeaseStore::list`](crate::LeaseStore::list): every lease, page by
//! page, each once and in one order, each with the time it still runs and its pending erasure
//! as the store's own clock judges them.

use std::collections::HashMap;

use super::{A, B, LeaseHarness, Rule, read};
use crate::ids::LeaseKey;
use crate::lease::{LeaseEntry, LeasePage};

/// Pages of two from the first of five keys show each of them once, in key order (released,
/// expired, held, forgotten and newly held leases alike): a listing starts **at** its `from`,
/// `next` is where the next page starts, and a page never holds more than asked (at least one).
/// Each entry's record is what `read` returns; the time left is `Some` only for a live lease
/// and within what the store's clock allows; a forget's pending erasure shows its floor and an
/// age of at least the time passed since it.
pub async fn conformance_a_listing_pages_every_lease_once_as_the_store_clock_sees_it(
    h: &LeaseHarness,
) {
    let rule = Rule("a listing pages every lease once, as the store's clock sees it");
    let [held, released, expired, forgotten, fresh] =
        ["list-a", "list-b", "list-c", "list-d", "list-e"].map(|t| h.key(t));
    rule.ok(
        "acquire (to expire)",
        h.store.acquire(&expired, A, h.ttl).await,
    );
    h.pass(60).await;
    rule.ok("acquire", h.store.acquire(&held, A, h.ttl).await);
    rule.ok("acquire", h.store.acquire(&released, A, h.ttl).await);
    rule.ok("release", h.store.release(&released, A, 1).await);
    rule.ok("acquire", h.store.acquire(&forgotten, B, h.ttl).await);
    rule.ok("forget", h.store.mark_forgotten(&forgotten, B, 1).await);
    h.pass(60).await;
    rule.ok("acquire", h.store.acquire(&fresh, B, h.ttl).await);

    let ours = [&held, &released, &expired, &forgotten, &fresh];
    let seen = page_through(h, rule, &held, &ours).await;
    let order: Vec<&str> = seen.iter().map(|e| e.record.key.as_str()).collect();
    let want: Vec<&str> = ours.iter().map(|k| k.as_str()).collect();
    rule.eq("the keys seen, in order", order, want);
    let by_key: HashMap<&str, &LeaseEntry> =
        seen.iter().map(|e| (e.record.key.as_str(), e)).collect();
    for key in ours {
        let entry = by_key[key.as_str()];
        rule.eq(
            "the listed record",
            Some(entry.record.clone()),
            read(h, rule, key).await,
        );
    }
    let left = |key: &LeaseKey| by_key[key.as_str()].remaining;
    rule.eq("time left of a released lease", left(&released), None);
    rule.eq("time left of an expired lease", left(&expired), None);
    for (key, at_most) in [(&held, 40), (&forgotten, 40), (&fresh, 100)] {
        let remaining = left(key).unwrap_or_default();
        rule.check(
            !remaining.is_zero() && remaining <= h.ttl * at_most / 100,
            format_args!(
                "{key}: a live lease has {remaining:?} left, want (0, {at_most} % of the ttl]"
            ),
        );
    }
    rule.eq(
        "erasure of a lease never forgotten",
        by_key[held.as_str()].erasure,
        None,
    );
    let erasure = by_key[forgotten.as_str()].erasure;
    rule.eq("erasure floor", erasure.map(|e| e.floor), Some(1));
    let age = erasure.and_then(|e| e.age).unwrap_or_default();
    rule.check(
        age >= h.ttl * 60 / 100,
        format_args!(
            "the erasure's age is {age:?}, but 60 % of the ttl has passed since the forget"
        ),
    );

    let one = rule.ok("list one key", h.store.list(Some(&expired), 1).await);
    let first = one.entries.first().map(|e| e.record.key.clone());
    rule.eq("a page of one from a key", first, Some(expired.to_string()));
    let zero = rule.ok("list with limit 0", h.store.list(Some(&expired), 0).await);
    rule.eq("a page asked for 0 holds 1", zero.entries.len(), 1);
}

/// The entries of `ours` seen paging by two from `from` until all of them were seen or the
/// listing ends (other suites' keys may lie between them in the store's order).
async fn page_through(
    h: &LeaseHarness,
    rule: Rule,
    from: &LeaseKey,
    ours: &[&LeaseKey],
) -> Vec<LeaseEntry> {
    let mut seen = Vec::new();
    let mut at = Some(from.clone());
    for _ in 0..10_000 {
        let Some(start) = at.take() else { break };
        let page: LeasePage = rule.ok("list", h.store.list(Some(&start), 2).await);
        rule.check(
            page.entries.len() <= 2,
            format_args!("a page asked for 2 holds {}", page.entries.len()),
        );
        rule.check(
            page.next.is_none() || page.entries.len() == 2,
            "a page that names a next page is full",
        );
        let mine = page
            .entries
            .into_iter()
            .filter(|e| ours.iter().any(|k| k.as_str() == e.record.key));
        seen.extend(mine);
        if seen.len() >= ours.len() {
            break;
        }
        at = page.next;
    }
    seen
}
