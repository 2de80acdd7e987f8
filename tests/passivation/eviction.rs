//! An open at `max_open` whose victim's passivation fails (its final image meets an outage):
//! the victim serves on, and the open hears it at once — it goes to the next idle tenant, or
//! answers `OpenLimit` when none is left — instead of waiting out `leave_limit` (over two
//! minutes with the defaults). A victim whose passivation failed is not asked again by the
//! same open (docs/guarantees.md, "when an idle tenant is let go").

use super::*;

/// Makes the next image put meet an outage (set by its hook, before the put reaches the store).
fn outage_at_next_image_put(fleet: &Fleet) {
    let store = fleet.durable.clone();
    fleet
        .durable
        .before_next_put_matching(is_image, hook(async move { store.set_down(true) }));
}

/// Ends the outage when the next image put arrives, before it reaches the store.
fn outage_ends_at_next_image_put(fleet: &Fleet) {
    let store = fleet.durable.clone();
    fleet
        .durable
        .before_next_put_matching(is_image, hook(async move { store.set_down(false) }));
}

/// How many passivations of the tenant `key` began (its moves to `passivating`).
async fn passivations_begun(a: &Replica, key: &leasehold::LeaseKey) -> usize {
    let key = key.to_string();
    a.events()
        .await
        .iter()
        .filter(|e| {
            matches!(e, Event::StateChanged { key: k, to: TenantStatus::Passivating, .. }
                if *k == key)
        })
        .count()
}

#[actix_rt::test]
async fn promise12_an_eviction_whose_victim_serves_on_goes_to_the_next_idle_tenant_at_once() {
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Images, |c| c.max_open = 2);
    let t1 = a.open().await;
    insert(&t1, "one").await.unwrap();
    fleet.advance(Duration::from_secs(1));
    let t2 = a.open2().await;
    insert(&t2, "two").await.unwrap();
    fleet.advance(Duration::from_secs(1));
    // t1 is the least recently used: its final image meets the outage; t2's finds it over.
    outage_at_next_image_put(&fleet);
    outage_ends_at_next_image_put(&fleet);
    let t3 = within(
        5_000,
        "the open at max_open",
        a.sup.open(&org(), &derive_third()),
    )
    .await
    .unwrap();
    assert_eq!(t1.status().await, TenantStatus::Serving, "its flush failed");
    assert_eq!(t2.status().await, TenantStatus::Passivated, "the next one");
    assert!(t3.is_open().await);
    assert_eq!(passivations_begun(&a, &key()).await, 1, "t1 asked once");
    assert_eq!(keys_of(&t1).await, ["one"]);
    assert!(
        a.saw(
            |e| matches!(e, Event::Passivated { key: k, reason: PassivationReason::Evicted, .. }
            if *k == key2().to_string())
        )
        .await
    );
}

#[actix_rt::test]
async fn promise12_an_eviction_whose_only_idle_tenant_serves_on_answers_open_limit_at_once() {
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Images, |c| c.max_open = 1);
    let t1 = a.open().await;
    insert(&t1, "one").await.unwrap();
    fleet.advance(Duration::from_secs(1));
    outage_at_next_image_put(&fleet);
    let refused = within(
        5_000,
        "the open at max_open",
        a.sup.open(&org(), &tenant2()),
    )
    .await
    .unwrap_err();
    fleet.durable.set_down(false);
    assert_eq!(refused.code(), "LEASEHOLD_OPEN_LIMIT", "{refused:?}");
    assert_eq!(t1.status().await, TenantStatus::Serving, "its flush failed");
    assert_eq!(
        passivations_begun(&a, &key()).await,
        1,
        "a victim whose passivation failed is not asked again by the same open"
    );
    // The store back, the next open lets it go.
    let t2 = within(5_000, "the next open", a.sup.open(&org(), &tenant2()))
        .await
        .unwrap();
    assert!(t2.is_open().await);
    assert_eq!(t1.status().await, TenantStatus::Passivated);
    assert_eq!(restored_elsewhere(&fleet, "b").await, ["one"]);
}
