//! Passivation against the other ways a tenure ends or begins, each at the moment the
//! passivation's flush is under way (its final image's put held at the store, on `Images`; its
//! segment in flight, on `Shipped`): docs/architecture.md's state table, rows `passivating`.

use super::*;

/// A dirty `Images` tenant of `a` whose passivation has begun and whose final image's put is
/// held: the flush is under way (`passivating`, publishing) until the gate opens.
async fn held_passivation(fleet: &Fleet, a: &Replica) -> (TenantRef, Gate) {
    let t = a.open().await;
    insert(&t, "acked").await.unwrap();
    let (held, gate) = gated();
    fleet.durable.before_next_put_matching(is_image, held);
    let mut gate = gate;
    assert_eq!(idle_out(fleet, a).await, 1);
    gate.reached().await;
    assert_eq!(t.status().await, TenantStatus::Passivating);
    (t, gate)
}

#[actix_rt::test]
async fn race_a_handoff_during_a_passivation_answers_flushed_once_it_is_passivated() {
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Images, |_| {});
    let (t, gate) = held_passivation(&fleet, &a).await;
    let handoff = actix_rt::spawn(t.handoff());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!handoff.is_finished(), "waits for the passivation");
    gate.open();
    within(5_000, "the handoff", handoff)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.status().await, TenantStatus::Passivated);
    assert_eq!(restored_elsewhere(&fleet, "b").await, ["acked"]);
}

#[actix_rt::test]
async fn race_a_forget_during_a_passivation_overtakes_it_and_nothing_reopens() {
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Images, |_| {});
    let (t, gate) = held_passivation(&fleet, &a).await;
    let forget = actix_rt::spawn(t.forget());
    until_status(&t, TenantStatus::Forgetting).await;
    gate.open();
    within(5_000, "the forget", forget).await.unwrap().unwrap();
    assert_eq!(t.status().await, TenantStatus::Forgotten);
    assert!(
        fleet.stored_of_tenant().await.is_empty(),
        "delete means delete"
    );
    assert!(
        insert(&t, "late").await.unwrap_err().is_fenced(),
        "a forgotten tenure is never reopened by its handle"
    );
    assert!(!a.saw(|e| matches!(e, Event::Passivated { .. })).await);
}

#[actix_rt::test]
async fn race_an_abandon_during_a_passivation_wins_and_the_handle_stays_fenced() {
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Images, |_| {});
    let (t, gate) = held_passivation(&fleet, &a).await;
    t.abandon().await.unwrap();
    assert_eq!(t.status().await, TenantStatus::Abandoned);
    gate.open();
    assert!(insert(&t, "late").await.unwrap_err().is_fenced());
    assert!(!a.saw(|e| matches!(e, Event::Passivated { .. })).await);
    // Like a crash: another replica opens it once the lease is free (released by the abandon).
    let b = fleet.replica("b");
    within(5_000, "the open elsewhere", b.open()).await;
}

#[actix_rt::test]
async fn race_a_concurrent_reopen_waits_for_the_passivation_and_opens_a_new_tenure() {
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Images, |_| {});
    let (t, gate) = held_passivation(&fleet, &a).await;
    let passivated_epoch = t.epoch();
    // A host's open, a kept handle's run and a message, all while the flush is held.
    let open = actix_rt::spawn(a.sup.open(&org(), &tenant()));
    let kept = t.clone();
    let run = actix_rt::spawn(async move { insert(&kept, "during").await });
    let sent = actix_rt::spawn(a.sup.send(&addr(), Note { key: "sent".into() }));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!open.is_finished() && !run.is_finished() && !sent.is_finished());
    gate.open();
    let reopened = within(5_000, "the open", open).await.unwrap().unwrap();
    within(5_000, "the run", run).await.unwrap().unwrap();
    within(5_000, "the message", sent).await.unwrap().unwrap();
    assert!(reopened.epoch() > passivated_epoch);
    assert_eq!(
        t.epoch(),
        reopened.epoch(),
        "one tenure after it, for everyone"
    );
    let mut keys = keys_of(&reopened).await;
    keys.sort();
    assert_eq!(keys, ["acked", "during", "sent"]);
}

#[actix_rt::test]
async fn race_a_passivation_with_a_segment_in_flight_settles_it_before_letting_go() {
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Shipped, |_| {});
    let t = a.open().await;
    insert(&t, "first").await.unwrap();
    // A write whose segment is held at the store: acknowledged only once it ships.
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_segment_key, held);
    let kept = t.clone();
    let write = actix_rt::spawn(async move { insert(&kept, "in flight").await });
    gate.reached().await;
    // Idle long enough by the clock, it begins: its flush waits for the segment in flight.
    assert_eq!(idle_out(&fleet, &a).await, 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(t.status().await, TenantStatus::Passivating);
    gate.open();
    within(5_000, "the write", write).await.unwrap().unwrap();
    until_passivated(&t).await;
    assert_eq!(
        restored_elsewhere(&fleet, "b").await,
        ["first", "in flight"]
    );
}

#[actix_rt::test]
async fn race_close_counts_a_tenant_passivating_meanwhile_as_flushed() {
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Images, |_| {});
    let (t, gate) = held_passivation(&fleet, &a).await;
    let close = actix_rt::spawn(a.sup.close());
    tokio::time::sleep(Duration::from_millis(50)).await;
    gate.open();
    let unflushed = within(10_000, "the close", close).await.unwrap().unwrap();
    assert!(unflushed.is_empty(), "{unflushed:?}");
    assert_eq!(t.status().await, TenantStatus::Passivated);
    assert_eq!(restored_elsewhere(&fleet, "b").await, ["acked"]);
}

/// A passivation whose flush fails leaves the tenant serving, back in its replica's order of
/// last activity as used when the flush failed — from the moment its status reads `serving`:
/// an idle check asked right then, `passivate_after` later, finds it idle and asks again. Before
/// the tenant told its supervisor (`ServesOn`) ahead of its status change, the supervisor noted
/// it again only when a watch of its status came back, as used then: an idle check asked by
/// whoever saw `serving` first could find it missing, or used later than it was (the
/// simulation's passivation family, docs/testing.md).
#[actix_rt::test]
async fn race_an_idle_check_right_after_a_failed_passivation_finds_the_tenant_idle_again() {
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Images, |_| {});
    let (t, gate) = held_passivation(&fleet, &a).await;
    fleet.durable.set_down(true);
    gate.open();
    while t.status().await == TenantStatus::Passivating {}
    assert_eq!(t.status().await, TenantStatus::Serving, "its flush failed");
    fleet.advance(AFTER);
    fleet.durable.set_down(false);
    assert_eq!(
        a.sup.passivate_idle_now().await.unwrap(),
        1,
        "idle for passivate_after since its flush failed: asked again"
    );
    until_passivated(&t).await;
    assert_eq!(restored_elsewhere(&fleet, "b").await, ["acked"]);
}
