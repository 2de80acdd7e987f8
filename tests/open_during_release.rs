//! Triage (docs/guarantees.md): an `open()` of a tenant whose handoff is under way is refused
//! with `Draining`, not answered with the leaving handle; once the handoff is over, an open
//! starts a new tenure.

mod common;

use common::*;
use leasehold::Error;
use leasehold_actors::TenantStatus;

#[actix_rt::test]
async fn an_open_during_a_handoff_is_refused_and_opens_anew_after_it() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let ticket = t.admit().await.unwrap();
    let handing_off = actix_rt::spawn(t.handoff());
    until_status(&t, TenantStatus::Draining).await;
    let during = a.sup.open(&org(), &tenant()).await;
    assert!(
        matches!(during, Err(Error::Draining { .. })),
        "an open during the handoff got {during:?}"
    );
    drop(ticket);
    within(5_000, "the handoff", handing_off)
        .await
        .unwrap()
        .unwrap();
    let again = within(
        5_000,
        "the open after the handoff",
        a.sup.open(&org(), &tenant()),
    )
    .await
    .unwrap();
    assert!(again.epoch() > t.epoch());
    assert_eq!(keys_of(&again).await, ["k-1"]);
}
