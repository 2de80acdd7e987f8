//! The conformance checks of the log tip (docs/guarantees.md, "The log tip"): `move_tip` is a
//! compare-and-set for the live tenure above the floor that advances exactly one segment from the
//! tip the caller saw, never back; a retry of a move that landed succeeds; a forget clears the
//! tip and an acquire keeps it, so that the next tenure continues it and the old one cannot.

use super::{A, B, LeaseHarness, Rule, read};
use crate::ids::LeaseKey;
use crate::layout::LogPos;
use crate::lease::{LeaseError, LeaseRecord};

/// The first move goes from no tip to segment 1; every later move advances by exactly one
/// segment from the current tip. A skip, a move back, a stale `from` or a `to` of another epoch
/// is refused (`TipMoved` naming the tip, or `TipOutOfOrder` for a `to` that does not follow
/// `from`) and changes nothing.
pub async fn conformance_tip_moves_by_exactly_one_segment_from_the_tip_seen(h: &LeaseHarness) {
    let rule = Rule("the tip moves by exactly one segment from the tip the caller saw");
    let key = h.key("tip-exact");
    let s = &h.store;
    let got = rule.ok("acquire", s.acquire(&key, A, h.ttl).await);
    rule.eq("tip of a fresh key", got.tip, None);
    let gap = s.move_tip(&key, A, 1, None, pos(1, 2)).await;
    rule.refused(
        "a first move to seq 2",
        gap,
        out_of_order(&key, 1, None, pos(1, 2)),
    );
    let first = rule.ok(
        "move to seq 1",
        s.move_tip(&key, A, 1, None, pos(1, 1)).await,
    );
    rule.eq("tip after the first move", first.tip, Some(pos(1, 1)));
    rule.eq(
        "read after the first move",
        read(h, rule, &key).await,
        Some(first.clone()),
    );
    let from1 = Some(pos(1, 1));
    let skip = s.move_tip(&key, A, 1, from1, pos(1, 3)).await;
    rule.refused(
        "a skip from 1 to 3",
        skip,
        out_of_order(&key, 1, from1, pos(1, 3)),
    );
    let other_epoch = s.move_tip(&key, A, 1, from1, pos(2, 2)).await;
    let want = out_of_order(&key, 1, from1, pos(2, 2));
    rule.refused("a position of another epoch", other_epoch, want);
    let stale_from = s.move_tip(&key, A, 1, Some(pos(1, 2)), pos(1, 3)).await;
    let want = tip_moved(&key, from1, Some(pos(1, 2)), pos(1, 3));
    rule.refused("a move from a tip not reached", stale_from, want);
    rule.eq(
        "record after the refusals",
        read(h, rule, &key).await,
        Some(first),
    );
    rule.ok(
        "move to seq 2",
        s.move_tip(&key, A, 1, from1, pos(1, 2)).await,
    );
    let third = rule.ok(
        "move to seq 3",
        s.move_tip(&key, A, 1, Some(pos(1, 2)), pos(1, 3)).await,
    );
    let back = s.move_tip(&key, A, 1, None, pos(1, 1)).await;
    rule.refused(
        "a move back to seq 1",
        back,
        tip_moved(&key, Some(pos(1, 3)), None, pos(1, 1)),
    );
    let old = s.move_tip(&key, A, 1, from1, pos(1, 2)).await;
    let want = tip_moved(&key, Some(pos(1, 3)), from1, pos(1, 2));
    rule.refused("an older move again once the tip passed it", old, want);
    rule.eq(
        "record after moves back",
        read(h, rule, &key).await,
        Some(third),
    );
}

/// Moving the tip again to where it already is, from the same `from` (a retry of a move that
/// landed late), succeeds and returns the record unchanged.
pub async fn conformance_tip_move_retried_returns_the_record(h: &LeaseHarness) {
    let rule = Rule("a retried move_tip returns the record");
    let key = h.key("tip-retry");
    let s = &h.store;
    rule.ok("acquire", s.acquire(&key, A, h.ttl).await);
    let first = rule.ok(
        "move to seq 1",
        s.move_tip(&key, A, 1, None, pos(1, 1)).await,
    );
    let again = rule.ok(
        "the same move again",
        s.move_tip(&key, A, 1, None, pos(1, 1)).await,
    );
    rule.eq("record of the retry", fields(&again), fields(&first));
    let from1 = Some(pos(1, 1));
    let second = rule.ok(
        "move to seq 2",
        s.move_tip(&key, A, 1, from1, pos(1, 2)).await,
    );
    let retry = rule.ok(
        "seq 2 again",
        s.move_tip(&key, A, 1, from1, pos(1, 2)).await,
    );
    rule.eq(
        "record of the second retry",
        fields(&retry),
        fields(&second),
    );
}

/// Only the live `(owner, epoch)` above the floor moves the tip: another owner, another epoch, an
/// expired or released lease and a forgotten epoch are `NotHeld`, also for a retry of a move
/// that landed. A forget clears the tip.
pub async fn conformance_tip_moves_only_for_the_live_tenure_above_the_floor(h: &LeaseHarness) {
    let rule = Rule("the tip moves only for the live tenure above the floor");
    let s = &h.store;
    let key = h.key("tip-fenced");
    rule.ok("acquire", s.acquire(&key, A, h.ttl).await);
    let moved = rule.ok(
        "move to seq 1",
        s.move_tip(&key, A, 1, None, pos(1, 1)).await,
    );
    let from1 = Some(pos(1, 1));
    let by_b = s.move_tip(&key, B, 1, from1, pos(1, 2)).await;
    rule.not_held("a move by another owner", by_b, &key, B, 1);
    let later = s.move_tip(&key, A, 2, from1, pos(2, 2)).await;
    rule.not_held("a move for a later epoch", later, &key, A, 2);
    rule.eq(
        "record after refused moves",
        read(h, rule, &key).await,
        Some(moved),
    );
    h.expire().await;
    let expired = s.move_tip(&key, A, 1, from1, pos(1, 2)).await;
    rule.not_held("a move after expiry", expired, &key, A, 1);
    let landed = s.move_tip(&key, A, 1, None, pos(1, 1)).await;
    rule.not_held("a retry of a landed move after expiry", landed, &key, A, 1);
    let tip = read(h, rule, &key).await.and_then(|r| r.tip);
    rule.eq("tip after late moves", tip, from1);

    let released = h.key("tip-released");
    rule.ok("acquire", s.acquire(&released, A, h.ttl).await);
    rule.ok("release", s.release(&released, A, 1).await);
    let gone = s.move_tip(&released, A, 1, None, pos(1, 1)).await;
    rule.not_held("a move after release", gone, &released, A, 1);

    let forgotten = h.key("tip-forgotten");
    rule.ok("acquire", s.acquire(&forgotten, A, h.ttl).await);
    rule.ok(
        "move to seq 1",
        s.move_tip(&forgotten, A, 1, None, pos(1, 1)).await,
    );
    let cleared = rule.ok("forget", s.mark_forgotten(&forgotten, A, 1).await);
    rule.eq(
        "floor and tip after forget",
        (cleared.floor, cleared.tip),
        (1, None),
    );
    let buried = s.move_tip(&forgotten, A, 1, None, pos(1, 1)).await;
    rule.not_held("a move in a forgotten epoch", buried, &forgotten, A, 1);
    let retried = s.move_tip(&forgotten, A, 1, from1, pos(1, 2)).await;
    rule.not_held(
        "a move from the tip before the forget",
        retried,
        &forgotten,
        A,
        1,
    );
    let after = read(h, rule, &forgotten).await.map(|r| (r.floor, r.tip));
    rule.eq("floor and tip after refused moves", after, Some((1, None)));
}

/// An acquire keeps the tip (and the head); the new tenure continues it from the old epoch's
/// position with a position of its own epoch, and the old tenure can no longer move it. After a
/// forget the next tenure starts again at segment 1.
pub async fn conformance_a_new_tenure_continues_the_tip_and_the_old_one_cannot(h: &LeaseHarness) {
    let rule = Rule("a new tenure continues the tip and the old one cannot move it");
    let key = h.key("tip-tenures");
    let s = &h.store;
    rule.ok("acquire by A", s.acquire(&key, A, h.ttl).await);
    rule.ok(
        "A moves to 1",
        s.move_tip(&key, A, 1, None, pos(1, 1)).await,
    );
    rule.ok(
        "A moves to 2",
        s.move_tip(&key, A, 1, Some(pos(1, 1)), pos(1, 2)).await,
    );
    rule.ok("release by A", s.release(&key, A, 1).await);
    let b = rule.ok("acquire by B", s.acquire(&key, B, h.ttl).await);
    rule.eq(
        "epoch and tip B acquired",
        (b.epoch, b.tip),
        (2, Some(pos(1, 2))),
    );
    let stale = s.move_tip(&key, B, 2, None, pos(2, 1)).await;
    rule.refused(
        "B restarts the log",
        stale,
        tip_moved(&key, Some(pos(1, 2)), None, pos(2, 1)),
    );
    let from = Some(pos(1, 2));
    let moved = rule.ok(
        "B continues at 3",
        s.move_tip(&key, B, 2, from, pos(2, 3)).await,
    );
    rule.eq("tip after B's move", moved.tip, Some(pos(2, 3)));
    let zombie = s.move_tip(&key, A, 1, from, pos(1, 3)).await;
    rule.not_held("the old tenure moves on from its tip", zombie, &key, A, 1);
    let late = s.move_tip(&key, A, 1, Some(pos(1, 1)), pos(1, 2)).await;
    rule.not_held("a late retry of the old tenure", late, &key, A, 1);
    rule.eq(
        "tip after the old tenure's moves",
        read(h, rule, &key).await,
        Some(moved),
    );
    h.expire().await;
    let c = rule.ok("acquire by A after expiry", s.acquire(&key, A, h.ttl).await);
    rule.eq(
        "epoch and tip A acquired",
        (c.epoch, c.tip),
        (3, Some(pos(2, 3))),
    );
    rule.ok("forget", s.mark_forgotten(&key, A, 3).await);
    rule.ok("release", s.release(&key, A, 3).await);
    let d = rule.ok("acquire after the forget", s.acquire(&key, B, h.ttl).await);
    rule.eq("epoch, floor, tip", (d.epoch, d.floor, d.tip), (4, 3, None));
    let restart = s.move_tip(&key, B, 4, None, pos(4, 1)).await;
    rule.eq(
        "tip after the restart",
        rule.ok("move to 1", restart).tip,
        Some(pos(4, 1)),
    );
}

/// `move_tips` answers each move as `move_tip` would, in order, in one call: moves of several
/// tenants, a second move of one tenant that follows the first in the same call, a refused
/// move among them (which changes nothing), and a move of a lease that is not held.
pub async fn conformance_many_tip_moves_in_one_call_are_the_moves_one_by_one(h: &LeaseHarness) {
    use crate::lease::TipMove;
    let rule = Rule("move_tips answers each move as move_tip would, in order");
    let (k1, k2, k3) = (h.key("tips-1"), h.key("tips-2"), h.key("tips-3"));
    let s = &h.store;
    for k in [&k1, &k2] {
        rule.ok("acquire", s.acquire(k, A, h.ttl).await);
    }
    let mv = |key: &LeaseKey, from: Option<LogPos>, to: LogPos| TipMove {
        key: key.clone(),
        owner: A.to_string(),
        epoch: 1,
        from,
        to,
    };
    let moves = [
        mv(&k1, None, pos(1, 1)),
        mv(&k2, None, pos(1, 1)),
        mv(&k1, Some(pos(1, 1)), pos(1, 2)),
        mv(&k2, None, pos(1, 1)), // a retry of a move that landed: answered with the record
        mv(&k2, Some(pos(1, 5)), pos(1, 6)), // a stale `from`: refused, nothing changed
        mv(&k3, None, pos(1, 1)), // never acquired: not held
    ];
    let outcomes = rule.ok("move_tips", s.move_tips(&moves).await);
    rule.eq("one outcome per move", outcomes.len(), moves.len());
    let tips: Vec<Option<Option<LogPos>>> = outcomes
        .iter()
        .map(|o| o.as_ref().ok().map(|r| r.tip))
        .collect();
    rule.eq(
        "the tips each move left",
        tips[..4].to_vec(),
        vec![
            Some(Some(pos(1, 1))),
            Some(Some(pos(1, 1))),
            Some(Some(pos(1, 2))),
            Some(Some(pos(1, 1))),
        ],
    );
    let stale = outcomes[4].clone().map(|r| r.tip);
    rule.refused(
        "a stale from",
        stale,
        tip_moved(&k2, Some(pos(1, 1)), Some(pos(1, 5)), pos(1, 6)),
    );
    rule.eq(
        "a lease never acquired is not held",
        matches!(outcomes[5], Err(LeaseError::NotHeld { .. })),
        true,
    );
    rule.eq(
        "k1's tip as read",
        read(h, rule, &k1).await.and_then(|r| r.tip),
        Some(pos(1, 2)),
    );
    rule.eq(
        "k2's tip as read",
        read(h, rule, &k2).await.and_then(|r| r.tip),
        Some(pos(1, 1)),
    );
    rule.eq(
        "no moves, no outcomes",
        rule.ok("move_tips of nothing", s.move_tips(&[]).await)
            .len(),
        0,
    );
}

/// A log position.
fn pos(epoch: u64, seq: u64) -> LogPos {
    LogPos { epoch, seq }
}

/// What a record says about its tenure, floor, head and tip (not its expiry).
fn fields(r: &LeaseRecord) -> (String, u64, u64, bool, Option<LogPos>) {
    (r.owner.clone(), r.epoch, r.floor, r.released, r.tip)
}

fn tip_moved(key: &LeaseKey, tip: Option<LogPos>, from: Option<LogPos>, to: LogPos) -> LeaseError {
    let key = key.to_string();
    LeaseError::TipMoved { key, tip, from, to }
}

fn out_of_order(key: &LeaseKey, epoch: u64, from: Option<LogPos>, to: LogPos) -> LeaseError {
    let key = key.to_string();
    LeaseError::TipOutOfOrder {
        key,
        epoch,
        from,
        to,
    }
}
