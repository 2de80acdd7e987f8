//! The conformance checks of replica records (`lease/replica.rs`, docs/guarantees.md, promise
//! 11): a record runs out like a lease, renews with the replica's leases in one call, is
//! withdrawn at close, and a lookup trusts an endpoint only while both the lease and its
//! holder's record are live by the store's clock.

use super::{LeaseHarness, Rule};
use crate::lease::{Lookup, RenewOutcome, ReplicaView};

impl LeaseHarness {
    /// A replica id of this run (the store may hold other runs' records).
    fn replica(&self, name: &str) -> String {
        format!("{}-{name}", self.org)
    }
}

/// An advertise of a new incarnation takes the record at the next epoch; one of the same
/// incarnation refreshes it at its epoch with the endpoint given; a withdraw of another epoch
/// changes nothing, of its epoch ends the record at once, and a late advertise of the withdrawn
/// incarnation does not revive it.
pub async fn conformance_advertise_takes_and_refreshes_a_record_by_incarnation(h: &LeaseHarness) {
    let rule = Rule("advertise takes and refreshes a record by incarnation");
    let ra = h.replica("adv");
    let first = rule.ok(
        "advertise",
        h.store.advertise(&ra, "http://a:1", 11, h.ttl).await,
    );
    let fields = (
        first.id.as_str(),
        first.endpoint.as_str(),
        first.epoch,
        first.withdrawn,
    );
    rule.eq(
        "first record",
        fields,
        (ra.as_str(), "http://a:1", 1, false),
    );
    let again = rule.ok(
        "advertise again",
        h.store.advertise(&ra, "http://a:2", 11, h.ttl).await,
    );
    rule.eq(
        "same incarnation: same epoch, new endpoint",
        (again.epoch, again.endpoint.as_str()),
        (1, "http://a:2"),
    );
    let restart = rule.ok(
        "new incarnation",
        h.store.advertise(&ra, "http://a:3", 12, h.ttl).await,
    );
    rule.eq("a new incarnation bumps the epoch", restart.epoch, 2);
    rule.ok("withdraw of the old epoch", h.store.withdraw(&ra, 1).await);
    rule.eq(
        "still live",
        live(h, rule, &ra).await.map(|v| v.epoch),
        Some(2),
    );
    rule.ok("withdraw", h.store.withdraw(&ra, 2).await);
    rule.eq("withdrawn: not live", live(h, rule, &ra).await, None);
    rule.ok("withdraw again", h.store.withdraw(&ra, 2).await);
    let late = rule.ok(
        "late advertise",
        h.store.advertise(&ra, "http://a:3", 12, h.ttl).await,
    );
    rule.eq(
        "a withdrawn incarnation is spent",
        (late.epoch, late.withdrawn),
        (2, true),
    );
    rule.eq("not revived", live(h, rule, &ra).await, None);
    let next = rule.ok(
        "next start",
        h.store.advertise(&ra, "http://a:4", 13, h.ttl).await,
    );
    rule.eq(
        "the next start is live at the next epoch",
        live(h, rule, &ra).await.map(|v| (v.epoch, v.endpoint)),
        Some((3, "http://a:4".to_owned())),
    );
    rule.eq("its record", next.epoch, 3);
}

/// A lookup of a key never acquired is vacant; of a lease whose owner never advertised, the
/// lease without a holder; of a live lease of an advertised replica, the lease, how long it
/// still runs (above zero, at most the ttl) and the holder's live endpoint.
pub async fn conformance_lookup_names_the_lease_and_its_holders_endpoint(h: &LeaseHarness) {
    let rule = Rule("lookup names the lease and its holder's endpoint");
    let key = h.key("lookup");
    rule.eq(
        "never acquired",
        rule.ok("lookup", h.store.lookup(&key).await),
        Lookup::vacant(),
    );
    let ra = h.replica("look");
    let lease = rule.ok("acquire", h.store.acquire(&key, &ra, h.ttl).await);
    let seen = rule.ok("lookup", h.store.lookup(&key).await);
    rule.eq("the lease", seen.record.clone(), Some(lease.clone()));
    rule.eq("no record: no holder", seen.holder.clone(), None);
    let ttl_ms = u64::try_from(h.ttl.as_millis()).unwrap_or(u64::MAX);
    rule.check(
        seen.lease_left_ms > 0 && seen.lease_left_ms <= ttl_ms,
        format_args!(
            "lease_left_ms {} is not in (0, {ttl_ms}]",
            seen.lease_left_ms
        ),
    );
    rule.ok(
        "advertise",
        h.store.advertise(&ra, "http://look:1", 21, h.ttl).await,
    );
    let seen = rule.ok("lookup", h.store.lookup(&key).await);
    rule.eq(
        "the holder's endpoint",
        seen.live_endpoint(),
        Some("http://look:1"),
    );
    rule.eq(
        "its epoch",
        seen.holder.as_ref().map(|v| (v.epoch, v.live)),
        Some((1, true)),
    );
    rule.ok("release", h.store.release(&key, &ra, lease.epoch).await);
    let released = rule.ok("lookup", h.store.lookup(&key).await);
    rule.eq(
        "a released lease is not live",
        (released.lease_left_ms, released.live_endpoint()),
        (0, None),
    );
}

/// A replica that stopped renewing its record is not trusted once the record ran out by the
/// store's clock, even while a lease it holds still runs (renewed without the record): the
/// lookup says the lease is live, the holder is not, and no endpoint; `live_replicas` leaves it
/// out; its renewal is `Lost` until it advertises again. A withdrawn record is dead at once.
pub async fn conformance_a_dead_replicas_endpoint_is_not_trusted(h: &LeaseHarness) {
    let rule = Rule("a dead replica's endpoint is not trusted");
    let key = h.key("dead-endpoint");
    let ra = h.replica("dead");
    rule.ok(
        "advertise",
        h.store.advertise(&ra, "http://dead:1", 31, h.ttl).await,
    );
    let lease = rule.ok("acquire", h.store.acquire(&key, &ra, h.ttl).await);
    h.pass(60).await;
    let renewed = h
        .store
        .renew_many(&ra, &[(key.clone(), lease.epoch)], h.ttl)
        .await;
    rule.eq(
        "lease renewed alone",
        rule.ok("renew_many", renewed),
        vec![RenewOutcome::Renewed],
    );
    h.pass(60).await;
    let seen = rule.ok("lookup", h.store.lookup(&key).await);
    rule.check(seen.lease_live(), "the renewed lease is still live");
    rule.eq(
        "the holder's record ran out",
        seen.holder.as_ref().map(|v| v.live),
        Some(false),
    );
    rule.eq("no endpoint is trusted", seen.live_endpoint(), None);
    rule.eq(
        "not among the live replicas",
        live(h, rule, &ra).await,
        None,
    );
    let late = h.store.renew_replica(&ra, 1, &[], h.ttl).await;
    rule.eq(
        "a record that ran out is not renewed",
        rule.ok("renew_replica", late).record,
        RenewOutcome::Lost,
    );
    rule.ok(
        "advertise again",
        h.store.advertise(&ra, "http://dead:1", 31, h.ttl).await,
    );
    let back = rule.ok("lookup", h.store.lookup(&key).await);
    rule.eq(
        "advertised again: trusted again",
        back.live_endpoint(),
        Some("http://dead:1"),
    );
    rule.ok("withdraw", h.store.withdraw(&ra, 1).await);
    let gone = rule.ok("lookup", h.store.lookup(&key).await);
    rule.eq("withdrawn: not trusted at once", gone.live_endpoint(), None);
}

/// `renew_replica` renews the record of `(replica, epoch)` and the replica's live leases in one
/// call, the leases' outcomes as `renew_many`'s in order; a record of another epoch is `Lost`
/// and changes nothing.
pub async fn conformance_renew_replica_renews_the_record_and_the_leases_together(h: &LeaseHarness) {
    let rule = Rule("renew_replica renews the record and the leases together");
    let (k1, k2) = (h.key("renew-replica-1"), h.key("renew-replica-2"));
    let ra = h.replica("renew");
    rule.ok(
        "advertise",
        h.store.advertise(&ra, "http://renew:1", 41, h.ttl).await,
    );
    let l1 = rule.ok("acquire k1", h.store.acquire(&k1, &ra, h.ttl).await);
    h.pass(60).await;
    let asked = [(k1.clone(), l1.epoch), (k2.clone(), 9)];
    let both = rule.ok(
        "renew_replica",
        h.store.renew_replica(&ra, 1, &asked, h.ttl).await,
    );
    rule.eq("record", both.record, RenewOutcome::Renewed);
    rule.eq(
        "leases in order",
        both.leases,
        vec![RenewOutcome::Renewed, RenewOutcome::Lost],
    );
    h.pass(60).await;
    let seen = rule.ok("lookup", h.store.lookup(&k1).await);
    rule.eq(
        "both still live",
        (seen.lease_live(), seen.live_endpoint()),
        (true, Some("http://renew:1")),
    );
    let wrong = rule.ok(
        "renew_replica of another epoch",
        h.store.renew_replica(&ra, 7, &[], h.ttl).await,
    );
    rule.eq(
        "another epoch",
        (wrong.record, wrong.leases),
        (RenewOutcome::Lost, vec![]),
    );
    h.pass(60).await;
    let after = rule.ok("lookup", h.store.lookup(&k1).await);
    rule.eq(
        "the wrong epoch renewed nothing",
        after.live_endpoint(),
        None,
    );
}

/// Replica records are no leases: a listing of the whole store after a replica advertised (and
/// holds a lease) succeeds and names the lease, never the record, whichever way the store keeps
/// records (PostgreSQL keeps them as rows of the lease table).
pub async fn conformance_a_listing_shows_no_replica_record(h: &LeaseHarness) {
    let rule = Rule("a listing shows no replica record");
    let key = h.key("listed-beside-a-record");
    let ra = h.replica("listed");
    rule.ok(
        "advertise",
        h.store.advertise(&ra, "http://listed:1", 51, h.ttl).await,
    );
    rule.ok("acquire", h.store.acquire(&key, &ra, h.ttl).await);
    let mut from = None;
    let mut seen_lease = false;
    for _ in 0..100_000 {
        let page = rule.ok("list", h.store.list(from.as_ref(), 500).await);
        for entry in &page.entries {
            rule.check(
                !entry.record.key.contains(&ra),
                format_args!("a listed entry is the record of {ra}: {:?}", entry.record),
            );
            seen_lease |= entry.record.key == key.as_str();
        }
        match page.next {
            Some(next) => from = Some(next),
            None => break,
        }
    }
    rule.check(seen_lease, "the replica's lease is listed");
}

/// This run's replica `id` among the live replicas, if it is.
async fn live(h: &LeaseHarness, rule: Rule, id: &str) -> Option<ReplicaView> {
    let all = rule.ok("live_replicas", h.store.live_replicas().await);
    rule.check(
        all.windows(2).all(|w| w[0].id <= w[1].id),
        "live_replicas is ordered by id",
    );
    rule.check(
        all.iter().all(|v| v.live),
        "live_replicas lists live records only",
    );
    all.into_iter().find(|v| v.id == id)
}
