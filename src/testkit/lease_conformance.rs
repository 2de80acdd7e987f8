//! The lease-store conformance suite: what every [`LeaseStore`](crate::LeaseStore) backend must
//! do (docs/guarantees.md, promises 1, 4 and 5, "Late landings" and "The log tip"), as named
//! checks. The checks of late landings live in `lease_conformance/late.rs`, those of the log tip
//! in `lease_conformance/tip.rs`, that of pending erasures in `lease_conformance/erasure.rs`, that
//! of listings in `lease_conformance/listing.rs`, those of replica records in
//! `lease_conformance/replica.rs`.
//!
//! A backend's test builds a [`LeaseHarness`] and calls [`lease_store_conformance`], which runs
//! every `conformance_*` check in turn and panics on the first violation with a message naming the
//! rule. Each check is also exported so a backend can run one rule alone.
//!
//! Time moves only through [`LeaseHarness::advance`]: a manual clock for SQLite, a real sleep for
//! PostgreSQL, whose clock is the database server's. So no check reads a clock, and
//! `expires_at_ms` is only compared between records of one store. The checks advance by 50 % and
//! 60 % of the ttl and by 110 % to pass it; with a real clock, the few round trips a check makes
//! between a renewal (or an acquire) and the call that must find it still live have to fit in
//! the 40 % left of the ttl, and those that must find it passed in the 10 % beyond it.
//!
//! Every check uses its own tenants under [`LeaseHarness::org`], which must be fresh for each run
//! so that suites can share one database.

use std::fmt::{self, Debug};
use std::time::Duration;

use futures::future::BoxFuture;

use crate::ids::{LeaseKey, OrgId, TenantId};
use crate::layout::ImageRef;
use crate::lease::{LeaseError, LeaseRecord, RenewOutcome, SharedLeaseStore};

mod erasure;
mod late;
mod listing;
mod replica;
mod tip;

pub use erasure::*;
pub use late::*;
pub use listing::*;
pub use replica::*;
pub use tip::*;

/// The first owner the checks use.
const A: &str = "conformance-owner-a";
/// The second owner the checks use.
const B: &str = "conformance-owner-b";

/// What the suite needs of a backend.
pub struct LeaseHarness {
    /// The store under test.
    pub store: SharedLeaseStore,
    /// The ttl every acquire and renew asks for.
    pub ttl: Duration,
    /// Moves the **store's** clock forward by at least the given duration (a manual clock, or a
    /// real sleep when the store's clock cannot be moved).
    pub advance: Box<dyn Fn(Duration) -> BoxFuture<'static, ()> + Send + Sync>,
    /// The organization of every key the suite touches; unique per run.
    pub org: OrgId,
}

impl fmt::Debug for LeaseHarness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseHarness")
            .field("store", &self.store)
            .field("ttl", &self.ttl)
            .field("org", &self.org)
            .finish_non_exhaustive()
    }
}

impl LeaseHarness {
    /// The key of `tenant` under the harness's organization.
    pub fn key(&self, tenant: &str) -> LeaseKey {
        let tenant = TenantId::new(tenant)
            .unwrap_or_else(|e| panic!("lease conformance: bad tenant id {tenant:?}: {e}"));
        LeaseKey::new(&self.org, &tenant)
    }

    /// Advances the store's clock by `percent` % of the ttl.
    async fn pass(&self, percent: u32) {
        (self.advance)(self.ttl * percent / 100).await;
    }

    /// Advances the store's clock past the end of every lease granted or renewed until now.
    async fn expire(&self) {
        self.pass(110).await;
    }
}

/// Runs every check, in order; panics with the rule's name on the first violation.
pub async fn lease_store_conformance(h: &LeaseHarness) {
    conformance_read_of_a_never_acquired_key_is_none(h).await;
    conformance_acquire_of_a_free_key_starts_at_epoch_one(h).await;
    conformance_acquire_is_exclusive(h).await;
    conformance_expiry_by_store_time_frees_the_key(h).await;
    conformance_release_frees_the_key_at_once(h).await;
    conformance_epochs_are_never_reused(h).await;
    conformance_renew_refuses_a_wrong_tenure(h).await;
    conformance_renew_extends_the_lease(h).await;
    conformance_renew_many_renews_only_live_tenures_in_order(h).await;
    conformance_release_refuses_a_wrong_tenure(h).await;
    conformance_publish_head_is_a_compare_and_set(h).await;
    conformance_mark_forgotten_raises_the_floor_and_clears_the_head(h).await;
    conformance_head_only_moves_forward(h).await;
    conformance_mark_forgotten_retried_returns_the_record(h).await;
    conformance_acquire_retry_recognises_its_own_attempt(h).await;
    conformance_tip_moves_by_exactly_one_segment_from_the_tip_seen(h).await;
    conformance_tip_move_retried_returns_the_record(h).await;
    conformance_tip_moves_only_for_the_live_tenure_above_the_floor(h).await;
    conformance_a_new_tenure_continues_the_tip_and_the_old_one_cannot(h).await;
    conformance_many_tip_moves_in_one_call_are_the_moves_one_by_one(h).await;
    conformance_a_forget_leaves_an_erasure_due_after_the_settle_time(h).await;
    conformance_a_listing_pages_every_lease_once_as_the_store_clock_sees_it(h).await;
    conformance_advertise_takes_and_refreshes_a_record_by_incarnation(h).await;
    conformance_lookup_names_the_lease_and_its_holders_endpoint(h).await;
    conformance_a_dead_replicas_endpoint_is_not_trusted(h).await;
    conformance_renew_replica_renews_the_record_and_the_leases_together(h).await;
    conformance_a_listing_shows_no_replica_record(h).await;
}

/// `read` of a key that was never acquired is `None`.
pub async fn conformance_read_of_a_never_acquired_key_is_none(h: &LeaseHarness) {
    let rule = Rule("read of a never-acquired key is None");
    let key = h.key("never-acquired");
    rule.eq("read", rule.ok("read", h.store.read(&key).await), None);
}

/// The first acquire of a key gets epoch 1, floor 0, no head, and `read` shows that record.
pub async fn conformance_acquire_of_a_free_key_starts_at_epoch_one(h: &LeaseHarness) {
    let rule = Rule("acquire of a free key starts at epoch 1");
    let key = h.key("acquire-free");
    let got = rule.ok("acquire", h.store.acquire(&key, A, h.ttl).await);
    let fields = (got.key.as_str(), got.owner.as_str(), got.epoch, got.floor);
    rule.eq("key, owner, epoch, floor", fields, (key.as_str(), A, 1, 0));
    rule.eq("released", got.released, false);
    rule.eq("head", got.head.clone(), None);
    rule.eq("read after acquire", read(h, rule, &key).await, Some(got));
}

/// A live lease refuses every acquire, also its own owner's, with `Held` naming the holder.
pub async fn conformance_acquire_is_exclusive(h: &LeaseHarness) {
    let rule = Rule("acquire is exclusive");
    let key = h.key("acquire-exclusive");
    let first = rule.ok("first acquire", h.store.acquire(&key, A, h.ttl).await);
    let second = h.store.acquire(&key, B, h.ttl).await;
    rule.held("acquire by another owner", second, &key, A, 1);
    let again = h.store.acquire(&key, A, h.ttl).await;
    rule.held("acquire by the holder itself", again, &key, A, 1);
    rule.eq("read", read(h, rule, &key).await, Some(first));
}

/// A lease stays held until its ttl has passed on the store's clock; then it is acquirable at the
/// next epoch.
pub async fn conformance_expiry_by_store_time_frees_the_key(h: &LeaseHarness) {
    let rule = Rule("expiry by store time frees the key");
    let key = h.key("expiry");
    rule.ok("acquire", h.store.acquire(&key, A, h.ttl).await);
    h.pass(50).await;
    let early = h.store.acquire(&key, B, h.ttl).await;
    rule.held("acquire at half the ttl", early, &key, A, 1);
    h.pass(60).await;
    let late = rule.ok(
        "acquire past the ttl",
        h.store.acquire(&key, B, h.ttl).await,
    );
    rule.eq("owner and epoch", (late.owner.as_str(), late.epoch), (B, 2));
}

/// A released lease is acquirable at once, at the next epoch.
pub async fn conformance_release_frees_the_key_at_once(h: &LeaseHarness) {
    let rule = Rule("release frees the key at once");
    let key = h.key("release-frees");
    rule.ok("acquire", h.store.acquire(&key, A, h.ttl).await);
    rule.ok("release", h.store.release(&key, A, 1).await);
    let released = read(h, rule, &key).await;
    rule.eq(
        "released flag",
        released.map(|r| (r.released, r.epoch)),
        Some((true, 1)),
    );
    let next = rule.ok(
        "acquire after release",
        h.store.acquire(&key, B, h.ttl).await,
    );
    let fields = (next.owner.as_str(), next.epoch, next.released);
    rule.eq("owner, epoch, released", fields, (B, 2, false));
}

/// Epochs grow by one at every acquisition, whether the key was released, expired or forgotten.
pub async fn conformance_epochs_are_never_reused(h: &LeaseHarness) {
    let rule = Rule("epochs are never reused");
    let key = h.key("epochs");
    let first = rule.ok("acquire 1", h.store.acquire(&key, A, h.ttl).await);
    rule.ok("release 1", h.store.release(&key, A, first.epoch).await);
    let second = rule.ok("acquire 2", h.store.acquire(&key, B, h.ttl).await);
    h.expire().await;
    let third = rule.ok("acquire 3", h.store.acquire(&key, A, h.ttl).await);
    rule.ok(
        "forget 3",
        h.store.mark_forgotten(&key, A, third.epoch).await,
    );
    rule.ok("release 3", h.store.release(&key, A, third.epoch).await);
    let fourth = rule.ok("acquire 4", h.store.acquire(&key, B, h.ttl).await);
    let epochs = [first.epoch, second.epoch, third.epoch, fourth.epoch];
    rule.eq("epochs after release, expiry, forget", epochs, [1, 2, 3, 4]);
    rule.eq("floor after the forget", fourth.floor, 3);
}

/// `renew` with a wrong epoch, a wrong owner, after expiry or after release is `NotHeld` and
/// changes nothing.
pub async fn conformance_renew_refuses_a_wrong_tenure(h: &LeaseHarness) {
    let rule = Rule("renew refuses a wrong tenure");
    let key = h.key("renew-wrong");
    let live = rule.ok("acquire", h.store.acquire(&key, A, h.ttl).await);
    for (owner, epoch, what) in [
        (A, 2, "a later epoch"),
        (A, 0, "an earlier epoch"),
        (B, 1, "another owner"),
    ] {
        let renewed = h.store.renew(&key, owner, epoch, h.ttl).await;
        rule.not_held(&format!("renew with {what}"), renewed, &key, owner, epoch);
    }
    rule.eq(
        "record after refused renewals",
        read(h, rule, &key).await,
        Some(live.clone()),
    );
    h.expire().await;
    let late = h.store.renew(&key, A, 1, h.ttl).await;
    rule.not_held("renew after expiry", late, &key, A, 1);
    rule.eq(
        "record after a late renewal",
        read(h, rule, &key).await,
        Some(live),
    );
    let next = rule.ok(
        "acquire after a late renewal",
        h.store.acquire(&key, B, h.ttl).await,
    );
    rule.ok("release", h.store.release(&key, B, next.epoch).await);
    let after = h.store.renew(&key, B, next.epoch, h.ttl).await;
    rule.not_held("renew after release", after, &key, B, next.epoch);
}

/// `renew` moves the end of the lease to `now + ttl` on the store's clock.
pub async fn conformance_renew_extends_the_lease(h: &LeaseHarness) {
    let rule = Rule("renew extends the lease");
    let key = h.key("renew-extends");
    let first = rule.ok("acquire", h.store.acquire(&key, A, h.ttl).await);
    h.pass(60).await;
    let renewed = rule.ok("renew", h.store.renew(&key, A, 1, h.ttl).await);
    rule.eq(
        "owner and epoch",
        (renewed.owner.as_str(), renewed.epoch),
        (A, 1),
    );
    rule.check(
        renewed.expires_at_ms > first.expires_at_ms,
        format!(
            "renewal must move the end later: {} -> {}",
            first.expires_at_ms, renewed.expires_at_ms
        ),
    );
    rule.eq("read after renew", read(h, rule, &key).await, Some(renewed));
    h.pass(60).await;
    let taken = h.store.acquire(&key, B, h.ttl).await;
    rule.held(
        "acquire past the first ttl but inside the renewed one",
        taken,
        &key,
        A,
        1,
    );
    h.expire().await;
    let next = rule.ok(
        "acquire past the renewed ttl",
        h.store.acquire(&key, B, h.ttl).await,
    );
    rule.eq("epoch after the renewed lease ended", next.epoch, 2);
}

/// `renew_many` gives one outcome per key in order and renews only the live tenures of the owner.
pub async fn conformance_renew_many_renews_only_live_tenures_in_order(h: &LeaseHarness) {
    let rule = Rule("renew_many renews only live tenures, in order");
    let empty = h.store.renew_many(A, &[], h.ttl).await;
    rule.eq(
        "outcomes of no leases",
        rule.ok("renew_many of nothing", empty),
        vec![],
    );
    let k = |t: &str| h.key(&format!("renew-many-{t}"));
    let [expired, wrong, live, never, released, other, live2] = [
        "expired",
        "wrong-epoch",
        "live",
        "never",
        "released",
        "other-owner",
        "live-2",
    ]
    .map(k);
    rule.ok("acquire expired", h.store.acquire(&expired, A, h.ttl).await);
    h.pass(60).await;
    for key in [&wrong, &live, &released, &live2] {
        rule.ok("acquire", h.store.acquire(key, A, h.ttl).await);
    }
    rule.ok("release", h.store.release(&released, A, 1).await);
    rule.ok(
        "acquire by the other owner",
        h.store.acquire(&other, B, h.ttl).await,
    );
    let asked = [
        (&expired, 1),
        (&wrong, 2),
        (&live, 1),
        (&never, 1),
        (&released, 1),
        (&other, 1),
        (&live2, 1),
    ];
    // Read before the wait: the live leases must still hold at the renewal, 60 % of the ttl
    // after they were acquired, and every round trip in between eats into the 40 % left (the
    // records hold nothing that changes with time alone).
    let mut before = Vec::new();
    for (key, _) in &asked {
        before.push(read(h, rule, key).await);
    }
    h.pass(60).await;
    let leases: Vec<(LeaseKey, u64)> = asked.iter().map(|(k, e)| ((*k).clone(), *e)).collect();
    let outcomes = rule.ok("renew_many", h.store.renew_many(A, &leases, h.ttl).await);
    use RenewOutcome::{Lost, Renewed};
    rule.eq(
        "outcomes",
        outcomes,
        vec![Lost, Lost, Renewed, Lost, Lost, Lost, Renewed],
    );
    // The renewed leases are asked first: the margin inside the renewed ttl is 40 % of it, and
    // every round trip between the renewal and these acquires eats into it.
    h.pass(60).await;
    for key in [&live, &live2] {
        rule.held(
            "acquire of a renewed lease",
            h.store.acquire(key, B, h.ttl).await,
            key,
            A,
            1,
        );
    }
    for (i, (key, _)) in asked
        .iter()
        .enumerate()
        .filter(|(i, _)| ![2, 6].contains(i))
    {
        let what = format!("record of lost lease {key}");
        rule.eq(&what, read(h, rule, key).await, before[i].clone());
    }
    for key in [&expired, &wrong, &other] {
        let taken = rule.ok(
            "acquire of a lease renew_many lost",
            h.store.acquire(key, B, h.ttl).await,
        );
        rule.eq(&format!("epoch of {key}"), taken.epoch, 2);
    }
}

/// `release` by a wrong owner or epoch, after expiry, or twice is `NotHeld` and changes nothing.
pub async fn conformance_release_refuses_a_wrong_tenure(h: &LeaseHarness) {
    let rule = Rule("release refuses a wrong tenure");
    let key = h.key("release-wrong");
    let live = rule.ok("acquire", h.store.acquire(&key, A, h.ttl).await);
    rule.not_held(
        "release by another owner",
        h.store.release(&key, B, 1).await,
        &key,
        B,
        1,
    );
    rule.not_held(
        "release of another epoch",
        h.store.release(&key, A, 2).await,
        &key,
        A,
        2,
    );
    rule.eq(
        "record after refused releases",
        read(h, rule, &key).await,
        Some(live),
    );
    rule.held(
        "acquire after refused releases",
        h.store.acquire(&key, B, h.ttl).await,
        &key,
        A,
        1,
    );
    rule.ok("release", h.store.release(&key, A, 1).await);
    rule.not_held(
        "second release",
        h.store.release(&key, A, 1).await,
        &key,
        A,
        1,
    );
    let lapsed = h.key("release-lapsed");
    let gone = rule.ok("acquire", h.store.acquire(&lapsed, A, h.ttl).await);
    h.expire().await;
    rule.not_held(
        "release after expiry",
        h.store.release(&lapsed, A, 1).await,
        &lapsed,
        A,
        1,
    );
    rule.eq(
        "record after a late release",
        read(h, rule, &lapsed).await,
        Some(gone),
    );
}

/// `publish_head` moves the head only for the live `(owner, epoch)`, above the floor, with an
/// image of that epoch; the head shows in `read` and in the next acquire's record.
pub async fn conformance_publish_head_is_a_compare_and_set(h: &LeaseHarness) {
    let rule = Rule("publish_head is a compare-and-set");
    let key = h.key("publish-head");
    rule.ok("acquire", h.store.acquire(&key, A, h.ttl).await);
    let first = rule.ok(
        "publish",
        h.store.publish_head(&key, A, 1, &image(1, 1)).await,
    );
    rule.eq("head after publish", first.head.clone(), Some(image(1, 1)));
    rule.eq(
        "read after publish",
        read(h, rule, &key).await,
        Some(first.clone()),
    );
    for (owner, epoch, img, what) in [
        (B, 1, image(1, 2), "by another owner"),
        (A, 2, image(2, 1), "for another epoch"),
        (A, 1, image(2, 2), "of an image of another epoch"),
    ] {
        let refused = h.store.publish_head(&key, owner, epoch, &img).await;
        rule.not_held(&format!("publish {what}"), refused, &key, owner, epoch);
    }
    rule.eq(
        "record after refused publishes",
        read(h, rule, &key).await,
        Some(first),
    );
    rule.ok(
        "second publish",
        h.store.publish_head(&key, A, 1, &image(1, 2)).await,
    );
    h.expire().await;
    let zombie = h.store.publish_head(&key, A, 1, &image(1, 3)).await;
    rule.not_held("publish after expiry", zombie, &key, A, 1);
    let next = rule.ok(
        "acquire after expiry",
        h.store.acquire(&key, B, h.ttl).await,
    );
    rule.eq(
        "head in the next acquire's record",
        next.head,
        Some(image(1, 2)),
    );
    let late = h.store.publish_head(&key, A, 1, &image(1, 3)).await;
    rule.not_held("publish by the superseded owner", late, &key, A, 1);
    rule.ok(
        "publish by the successor",
        h.store.publish_head(&key, B, 2, &image(2, 1)).await,
    );
    rule.ok("release", h.store.release(&key, B, 2).await);
    let released = h.store.publish_head(&key, B, 2, &image(2, 2)).await;
    rule.not_held("publish after release", released, &key, B, 2);
    let third = rule.ok(
        "acquire after release",
        h.store.acquire(&key, A, h.ttl).await,
    );
    rule.eq("head after release", third.head, Some(image(2, 1)));
}

/// `mark_forgotten` raises the floor to the epoch and clears the head for the live tenure only;
/// the lease stays held, and no image of that epoch can be published afterwards.
pub async fn conformance_mark_forgotten_raises_the_floor_and_clears_the_head(h: &LeaseHarness) {
    let rule = Rule("mark_forgotten raises the floor and clears the head");
    let key = h.key("forget");
    rule.ok("acquire", h.store.acquire(&key, A, h.ttl).await);
    let published = rule.ok(
        "publish",
        h.store.publish_head(&key, A, 1, &image(1, 1)).await,
    );
    rule.not_held(
        "forget by another owner",
        h.store.mark_forgotten(&key, B, 1).await,
        &key,
        B,
        1,
    );
    rule.not_held(
        "forget of another epoch",
        h.store.mark_forgotten(&key, A, 2).await,
        &key,
        A,
        2,
    );
    rule.eq(
        "record after refused forgets",
        read(h, rule, &key).await,
        Some(published),
    );
    let forgotten = rule.ok("forget", h.store.mark_forgotten(&key, A, 1).await);
    let fields = (forgotten.floor, forgotten.head.clone(), forgotten.released);
    rule.eq(
        "floor, head, released after forget",
        fields,
        (1, None, false),
    );
    rule.eq(
        "read after forget",
        read(h, rule, &key).await,
        Some(forgotten),
    );
    rule.held(
        "acquire after forget",
        h.store.acquire(&key, B, h.ttl).await,
        &key,
        A,
        1,
    );
    rule.ok("renew after forget", h.store.renew(&key, A, 1, h.ttl).await);
    let buried = h.store.publish_head(&key, A, 1, &image(1, 2)).await;
    rule.not_held("publish in a forgotten epoch", buried, &key, A, 1);
    rule.ok("release", h.store.release(&key, A, 1).await);
    let next = rule.ok(
        "acquire after forget",
        h.store.acquire(&key, B, h.ttl).await,
    );
    rule.eq(
        "epoch, floor, head",
        (next.epoch, next.floor, next.head),
        (2, 1, None),
    );
    rule.ok(
        "publish above the floor",
        h.store.publish_head(&key, B, 2, &image(2, 1)).await,
    );
    h.expire().await;
    let late = h.store.mark_forgotten(&key, B, 2).await;
    rule.not_held("forget after expiry", late, &key, B, 2);
    let kept = read(h, rule, &key).await.map(|r| (r.floor, r.head));
    rule.eq(
        "floor and head after a late forget",
        kept,
        Some((1, Some(image(2, 1)))),
    );
}

/// An image reference of `epoch` and `seq` with a made-up checksum.
fn image(epoch: u64, seq: u64) -> ImageRef {
    ImageRef {
        epoch,
        seq,
        sha256: format!("{:064x}", epoch * 1_000 + seq),
    }
}

async fn read(h: &LeaseHarness, rule: Rule, key: &LeaseKey) -> Option<LeaseRecord> {
    rule.ok(&format!("read {key}"), h.store.read(key).await)
}

/// The rule a check enforces; its assertions panic naming it.
#[derive(Debug, Clone, Copy)]
struct Rule(&'static str);

impl Rule {
    #[track_caller]
    fn fail(self, message: impl fmt::Display) -> ! {
        panic!(
            "lease store conformance: rule \"{}\" violated: {message}",
            self.0
        )
    }

    #[track_caller]
    fn check(self, holds: bool, message: impl fmt::Display) {
        if !holds {
            self.fail(message);
        }
    }

    #[track_caller]
    fn eq<T: PartialEq + Debug>(self, what: &str, got: T, want: T) {
        if got != want {
            self.fail(format_args!("{what}: got {got:?}, want {want:?}"));
        }
    }

    #[track_caller]
    fn ok<T>(self, what: &str, result: Result<T, LeaseError>) -> T {
        match result {
            Ok(value) => value,
            Err(e) => self.fail(format_args!("{what}: want success, got {e:?}")),
        }
    }

    /// Expects `Held` naming the holder.
    #[track_caller]
    fn held<T: Debug>(
        self,
        what: &str,
        got: Result<T, LeaseError>,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
    ) {
        let want = LeaseError::Held {
            key: key.to_string(),
            owner: owner.to_owned(),
            epoch,
        };
        self.refused(what, got, want);
    }

    /// Expects `NotHeld` naming the caller's `(owner, epoch)`.
    #[track_caller]
    fn not_held<T: Debug>(
        self,
        what: &str,
        got: Result<T, LeaseError>,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
    ) {
        let want = LeaseError::NotHeld {
            key: key.to_string(),
            owner: owner.to_owned(),
            epoch,
        };
        self.refused(what, got, want);
    }

    #[track_caller]
    fn refused<T: Debug>(self, what: &str, got: Result<T, LeaseError>, want: LeaseError) {
        match got {
            Err(e) if e == want => {}
            other => self.fail(format_args!("{what}: want Err({want:?}), got {other:?}")),
        }
    }
}
