//! D — the drain is bounded, a stuck tenant holds nobody else, and a tenant that is abandoned,
//! forgotten or loses its lease meanwhile settles its handoff (promise 6 in docs/guarantees.md). R — one
//! renewal chain (promise 10).

mod common;

use std::time::Duration;

use common::*;
use leasehold::Error;
use leasehold::testkit::LeaseOp;
use leasehold_actors::{Event, RuntimeConfig, Supervisor, TenantStatus};

#[actix_rt::test]
async fn d1_a_drain_that_never_finishes_is_bounded_and_the_tenant_serves_again() {
    let fleet = Fleet::real_time(Duration::from_millis(2_000), Duration::from_millis(200)).await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        c.drain_timeout = Duration::from_millis(300);
        c.renew_every = Some(Duration::from_millis(200));
    });
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let _stuck = t.admit().await.unwrap();
    let outcome = within(3_000, "a handoff over work that never ends", t.handoff()).await;
    let err = outcome.expect_err("the handoff fails");
    assert_eq!(err.code(), "LEASEHOLD_DRAIN_TIMEOUT", "got {err}");
    assert_eq!(
        t.status().await,
        TenantStatus::Serving,
        "the tenant serves again"
    );
    insert(&t, "k-2").await.unwrap();
    t.snapshot().await.unwrap();
    assert_eq!(keys_of(&t).await, ["k-1", "k-2"]);
    assert!(
        a.saw(|e| matches!(e, Event::DrainTimeout { .. })).await,
        "the operator is told"
    );
    assert!(
        !a.saw(|e| matches!(e, Event::Released { .. })).await,
        "nothing was released"
    );
}

#[actix_rt::test]
async fn d2_close_hands_tenants_off_side_by_side_so_one_stuck_tenant_holds_nobody() {
    let fleet = Fleet::real_time(Duration::from_millis(3_000), Duration::from_millis(300)).await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        c.drain_timeout = Duration::from_millis(1_500);
        c.renew_every = Some(Duration::from_millis(300));
    });
    let first = a.open().await;
    let second = a.open2().await;
    insert(&first, "k-1").await.unwrap();
    insert(&second, "k-1").await.unwrap();
    let _stuck = first.admit().await.unwrap();
    let closing = actix_rt::spawn(a.sup.close());
    let second_key = key2();
    eventually(
        1_000,
        "the second tenant to be flushed while the first drains",
        || a.flushed(&second_key),
    )
    .await;
    let unflushed = within(8_000, "close with one tenant stuck", closing)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        unflushed,
        [key()],
        "the stuck tenant is reported, and only it"
    );
}

/// How a pending handoff is overtaken in D3.
#[derive(Clone, Copy, Debug)]
enum Overtaken {
    Abandon,
    Forget,
    Lost,
}

async fn d3(how: Overtaken) {
    let fleet = Fleet::with_store_clock().await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        c.drain_timeout = Duration::from_secs(10)
    });
    let b = fleet.replica("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let _stuck = t.admit().await.unwrap();
    let handing_off = actix_rt::spawn(t.handoff());
    until_status(&t, TenantStatus::Draining).await;
    match how {
        Overtaken::Abandon => t.abandon().await.unwrap(),
        Overtaken::Forget => t.forget().await.unwrap(),
        Overtaken::Lost => {
            // The lease lapses, a successor takes over, and the next renewal finds it gone.
            fleet.advance(TTL + Duration::from_millis(1));
            b.open().await;
            a.sup.renew_now().await.unwrap();
        }
    }
    let outcome = within(1_000, "the overtaken handoff", handing_off)
        .await
        .unwrap();
    assert!(
        matches!(outcome, Err(ref e) if e.is_draining()),
        "{how:?}: got {outcome:?}"
    );
    assert!(!t.is_open().await, "{how:?}: the tenant does not serve");
    assert!(!a.flushed(&key()).await, "{how:?}: nothing claims a flush");
}

#[actix_rt::test]
async fn d3_abandon_settles_a_handoff_waiting_for_work_that_never_ends() {
    d3(Overtaken::Abandon).await;
}

#[actix_rt::test]
async fn d3_forget_settles_a_handoff_waiting_for_work_that_never_ends() {
    d3(Overtaken::Forget).await;
}

#[actix_rt::test]
async fn d3_lost_lease_settles_a_handoff_waiting_for_work_that_never_ends() {
    d3(Overtaken::Lost).await;
}

#[actix_rt::test]
async fn d4_while_a_handoff_drains_new_calls_are_refused_and_running_work_finishes_and_is_flushed()
{
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let b = fleet.replica("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let ticket = t.admit().await.unwrap();
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let running = actix_rt::spawn(async move {
        let _ = wait.await;
        let event = leasehold::ledger::NewEvent::new("test", "k-2");
        let done = ticket.run(move |l| l.insert_event(&event)).await;
        drop(ticket);
        done
    });
    let handing_off = actix_rt::spawn(t.handoff());
    until_status(&t, TenantStatus::Draining).await;
    let run = t.run(|_| Ok(1)).await;
    assert!(
        matches!(run, Err(ref e) if e.is_draining()),
        "run is refused whatever it does: {run:?}"
    );
    let admit = t.admit().await;
    assert!(
        matches!(admit, Err(ref e) if e.is_draining()),
        "and so is a new admission: {admit:?}"
    );
    assert!(!t.is_open().await);
    go.send(()).unwrap();
    running.await.unwrap().unwrap();
    within(3_000, "the handoff", handing_off)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        keys_of(&b.open().await).await,
        ["k-1", "k-2"],
        "the work that was running is in the final image"
    );
}

#[actix_rt::test]
async fn d5_a_call_on_a_tenant_whose_abandon_is_under_way_is_refused_with_draining() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    // The abandon's lease release is held, so the abandon stays under way.
    let (held, gate) = gated();
    fleet.leases.before_next(LeaseOp::Release, held);
    let abandoning = t.abandon();
    let run = t.run(|_| Ok(1)).await;
    assert!(matches!(run, Err(ref e) if e.is_draining()), "got {run:?}");
    let forget = within(1_000, "a forget on an abandoning tenant", t.forget()).await;
    assert!(
        matches!(forget, Err(ref e) if e.is_draining()),
        "got {forget:?}"
    );
    gate.open();
    abandoning.await.unwrap();
    let released = a
        .events()
        .await
        .iter()
        .filter(|e| matches!(e, Event::Released { .. }))
        .count();
    assert_eq!(released, 1, "the tenure ended once");
    let after = t.run(|_| Ok(1)).await;
    assert!(
        matches!(after, Err(ref e) if e.is_fenced()),
        "once the lease is handed back the lease says no: {after:?}"
    );
}

#[actix_rt::test]
async fn d6_drain_options_are_checked_and_a_close_concurrency_of_one_is_sequential() {
    let fleet = Fleet::new().await;
    let base = || {
        RuntimeConfig::new(
            leasehold::ReplicaId::new("replica-x").unwrap(),
            fleet.dir.path().join("d6"),
            fleet.leases.shared(),
            fleet.durable.shared(),
        )
    };
    let day = Duration::from_secs(24 * 3_600);
    for bad in [Duration::ZERO, day + Duration::from_millis(1)] {
        let mut c = base();
        c.drain_timeout = bad;
        let refused = Supervisor::start(c).map(|_| ());
        assert!(
            matches!(
                refused,
                Err(Error::InvalidOption {
                    name: "drain_timeout",
                    ..
                })
            ),
            "{bad:?}: {refused:?}"
        );
    }
    for bad in [0, 10_001] {
        let mut c = base();
        c.close_concurrency = bad;
        let refused = Supervisor::start(c).map(|_| ());
        assert!(
            matches!(
                refused,
                Err(Error::InvalidOption {
                    name: "close_concurrency",
                    ..
                })
            ),
            "{bad}: {refused:?}"
        );
    }

    let fleet = Fleet::real_time(Duration::from_millis(3_000), Duration::from_millis(300)).await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        c.drain_timeout = Duration::from_millis(2_000);
        c.renew_every = Some(Duration::from_millis(300));
        c.close_concurrency = 1;
    });
    let first = a.open().await;
    let second = a.open2().await;
    insert(&first, "k-1").await.unwrap();
    insert(&second, "k-1").await.unwrap();
    let _stuck = first.admit().await.unwrap();
    let closing = actix_rt::spawn(a.sup.close());
    let unflushed = within(10_000, "close", closing).await.unwrap().unwrap();
    assert_eq!(unflushed, [key()]);
    // The order of the events, not a wait: with one lane the second tenant's handoff starts only
    // once the stuck one has given up, so its release comes after that drain timed out.
    let events = a.events().await;
    let position = |pred: &dyn Fn(&Event) -> bool| events.iter().position(pred);
    let (k1, k2) = (key().to_string(), key2().to_string());
    let gave_up = position(&|e| matches!(e, Event::DrainTimeout { key, .. } if *key == k1))
        .expect("the stuck tenant's drain timed out");
    let released =
        position(&|e| matches!(e, Event::Released { key, flushed: true, .. } if *key == k2))
            .expect("the second tenant is handed off once the first has given up");
    assert!(
        gave_up < released,
        "with one lane the second tenant waits behind the stuck one: {events:?}"
    );
}

#[actix_rt::test]
async fn r1_a_failed_handoff_does_not_start_a_second_renewal_chain_while_a_renewal_is_under_way() {
    // The witness is one of the runtime's own timers, not a sleep: the tenant's first periodic
    // snapshot (`snapshot_published`) comes 4 s after the open, while a second chain begun by
    // the failed handoff (under a second after the open) would have fired its first tick 600 ms
    // after that handoff.
    let fleet = Fleet::real_time(Duration::from_millis(10_000), Duration::from_millis(500)).await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        images(c);
        c.renew_every = Some(Duration::from_millis(600));
        c.snapshot_every = Some(Duration::from_millis(4_000));
    });
    fleet.leases.hold_renewals();
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    eventually(4_000, "the first renewal to start", || async {
        fleet.leases.renewals_started() == 1
    })
    .await;
    fleet.durable.set_down(true);
    assert!(t.handoff().await.is_err());
    fleet.durable.set_down(false);
    eventually(8_000, "the first periodic snapshot", || async {
        a.saw(|e| matches!(e, Event::SnapshotPublished { .. }))
            .await
    })
    .await;
    assert_eq!(
        fleet.leases.renewals_started(),
        1,
        "no renewal beside the held one: the next waits for its own tick"
    );
    fleet.leases.release_renewals();
    t.handoff().await.unwrap();
}
