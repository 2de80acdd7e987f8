//! The conformance checks of late landings (docs/guarantees.md, "Late landings"): a call that
//! timed out may still take effect, so every write must be safe to land late and to repeat. Each
//! check plays the landing as a retry would: the same call twice, or an older call after a newer
//! one.

use super::{A, B, LeaseHarness, Rule, image, read};
use crate::layout::ImageRef;
use crate::lease::LeaseError;

/// The head only moves forward (promise 4): a publish of an image not above the head is `Stale`
/// and changes nothing; publishing exactly the head again succeeds (a retry that landed).
pub async fn conformance_head_only_moves_forward(h: &LeaseHarness) {
    let rule = Rule("the head only moves forward");
    let key = h.key("head-forward");
    rule.ok("acquire", h.store.acquire(&key, A, h.ttl).await);
    rule.ok("publish seq 1", publish(h, &key, image(1, 1)).await);
    let newer = rule.ok("publish seq 2", publish(h, &key, image(1, 2)).await);
    let stale = |head: ImageRef, image: ImageRef| LeaseError::Stale {
        key: key.to_string(),
        head,
        image,
    };
    let late = publish(h, &key, image(1, 1)).await;
    rule.refused(
        "a late publish of seq 1",
        late,
        stale(image(1, 2), image(1, 1)),
    );
    rule.eq(
        "record after the late publish",
        read(h, rule, &key).await,
        Some(newer.clone()),
    );
    let again = rule.ok("publish seq 2 again", publish(h, &key, image(1, 2)).await);
    rule.eq("record after publishing the head again", again, newer);
    let twin = ImageRef {
        sha256: "f".repeat(64),
        ..image(1, 2)
    };
    let other = publish(h, &key, twin.clone()).await;
    rule.refused(
        "another image at the head's seq",
        other,
        stale(image(1, 2), twin),
    );
    rule.ok("publish seq 3", publish(h, &key, image(1, 3)).await);
    rule.ok("release", h.store.release(&key, A, 1).await);
    rule.ok("acquire by B", h.store.acquire(&key, B, h.ttl).await);
    let next = h.store.publish_head(&key, B, 2, &image(2, 1)).await;
    let moved = rule.ok("the successor's first image", next);
    rule.eq("head after the successor", moved.head, Some(image(2, 1)));
}

/// `mark_forgotten` repeated by the same live tenure after it applied returns the record again.
pub async fn conformance_mark_forgotten_retried_returns_the_record(h: &LeaseHarness) {
    let rule = Rule("a retried mark_forgotten returns the record");
    let key = h.key("forget-twice");
    rule.ok("acquire", h.store.acquire(&key, A, h.ttl).await);
    rule.ok("publish", publish(h, &key, image(1, 1)).await);
    let first = rule.ok("forget", h.store.mark_forgotten(&key, A, 1).await);
    let again = rule.ok("forget again", h.store.mark_forgotten(&key, A, 1).await);
    let fields = |r: &crate::lease::LeaseRecord| (r.epoch, r.floor, r.head.clone(), r.released);
    rule.eq("record of the retry", fields(&again), fields(&first));
    rule.eq("floor and head", (again.floor, again.head), (1, None));
}

/// A retried `acquire_attempt` (same owner, same attempt) whose first call landed gets its own
/// lease back at the same epoch, renewed; an attempt whose tenure is over takes nothing; any
/// other attempt or owner is still refused, and a
/// released or expired lease is taken at the next epoch as usual.
pub async fn conformance_acquire_retry_recognises_its_own_attempt(h: &LeaseHarness) {
    let rule = Rule("a retried acquire recognises its own attempt");
    let key = h.key("acquire-retry");
    let s = &h.store;
    let first = rule.ok("acquire", s.acquire_attempt(&key, A, h.ttl, 7).await);
    h.pass(50).await;
    let retry = rule.ok("the retry", s.acquire_attempt(&key, A, h.ttl, 7).await);
    let who = |r: &crate::lease::LeaseRecord| (r.owner.clone(), r.epoch, r.floor, r.released);
    rule.eq("owner, epoch of the retry", who(&retry), who(&first));
    rule.check(
        retry.expires_at_ms > first.expires_at_ms,
        format!(
            "the retry renews the lease, so its caller may count from it: {} -> {}",
            first.expires_at_ms, retry.expires_at_ms
        ),
    );
    rule.held(
        "another attempt of the holder",
        s.acquire_attempt(&key, A, h.ttl, 8).await,
        &key,
        A,
        1,
    );
    rule.held(
        "a fresh acquire of the holder",
        s.acquire(&key, A, h.ttl).await,
        &key,
        A,
        1,
    );
    rule.held(
        "another owner naming the same attempt",
        s.acquire_attempt(&key, B, h.ttl, 7).await,
        &key,
        A,
        1,
    );
    rule.eq("read", read(h, rule, &key).await, Some(retry));
    rule.ok("release", s.release(&key, A, 1).await);
    // An attempt starts at most one tenure: landing after its tenure was released, it takes
    // nothing (no tenure nobody runs); a new attempt takes the lease.
    rule.held(
        "the same attempt after a release",
        s.acquire_attempt(&key, A, h.ttl, 7).await,
        &key,
        A,
        1,
    );
    let after = rule.ok(
        "a new attempt after a release",
        s.acquire_attempt(&key, A, h.ttl, 8).await,
    );
    rule.eq("epoch after a release", after.epoch, 2);
    h.expire().await;
    rule.held(
        "the same attempt after expiry",
        s.acquire_attempt(&key, A, h.ttl, 8).await,
        &key,
        A,
        2,
    );
    let lapsed = rule.ok(
        "a new attempt after expiry",
        s.acquire_attempt(&key, A, h.ttl, 9).await,
    );
    rule.eq("epoch after expiry", lapsed.epoch, 3);
}

async fn publish(
    h: &LeaseHarness,
    key: &crate::ids::LeaseKey,
    img: ImageRef,
) -> Result<crate::lease::LeaseRecord, LeaseError> {
    h.store.publish_head(key, A, img.epoch, &img).await
}
