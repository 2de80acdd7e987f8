//! A hostile review of the hardened runtime (the tenure machine, close, late landings), tried
//! at the public API with the fleet harness. Each test pins a promise of docs/guarantees.md
//! that the code under review broke, and was seen failing before its fix (docs/testing.md,
//! "Hardening").

mod common;

use std::time::{Duration, Instant};

use common::*;
use leasehold::LeaseStore;
use leasehold::testkit::LeaseOp;
use leasehold_actors::TenantStatus;

/// Promise 6, "longest a handoff takes once drained: one flush (store calls, `store_deadline`
/// each)", and "Blocking closures: their handoffs and `close()` still return within their
/// bounds". Only the drain half is counted on the caller's side: once the tenant has answered
/// "drained", the caller waits for the flush without a bound, and the flush's futures run on the
/// arbiter thread that a neighbour's blocking run holds. So a neighbour blocking for 5 s
/// stretches an idle tenant's handoff (and `close()`) to 5 s whatever `store_deadline` is; a run
/// that never returns hangs them for ever.
#[actix_rt::test]
async fn review_promise6_a_drained_handoff_is_bounded_though_a_neighbour_blocks_the_arbiter() {
    let fleet = Fleet::real_time(Duration::from_millis(8_000), Duration::from_millis(800)).await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        images(c);
        c.drain_timeout = Duration::from_millis(300);
        c.store_deadline = Duration::from_millis(250);
        c.arbiters = 1; // both tenants share one thread
    });
    let idle = a.open().await;
    let busy = a.open2().await;
    insert(&idle, "k-1").await.unwrap();

    // The idle tenant drains at once and starts its flush; its image put is held at the store.
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_image, held);
    let began = Instant::now();
    let handoff = idle.handoff();
    let handoff = actix_rt::spawn(handoff);
    gate.reached().await;
    // The neighbour now holds the shared thread; the put is let go at once.
    let blocked = block_thread(&busy, 5_000).await;
    gate.open();
    let outcome = within(8_000, "the handoff", handoff).await.unwrap();
    let took = began.elapsed();
    blocked.await.unwrap();
    // drain_timeout + one flush of a tiny ledger (take, put, manifest, head, release at
    // 250 ms each) is about 1.3 s; 2.5 s leaves room for a slow machine.
    assert!(
        took < Duration::from_millis(2_500),
        "a drained handoff took {took:?} (outcome {outcome:?}): a neighbour's blocking run \
         stretched it past drain_timeout + one flush"
    );
}

/// Hole 9 ("a retry that recognises its own earlier success"). An open retries its acquire
/// under one attempt id, but only within the one `open()` call: when all of its tries time out
/// and one of them lands afterwards, the host's next `open()` of the same tenant, on the same
/// replica, asks under a fresh attempt and is refused `Held` by its own replica's lease, which
/// nobody renews or releases: the tenant cannot be opened anywhere for a whole `ttl`.
#[actix_rt::test]

async fn review_hole9_a_retried_open_is_not_locked_out_by_its_own_acquire_that_landed_late() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    for _ in 0..3 {
        fleet.leases.land_late(LeaseOp::Acquire);
    }
    let err = within(
        5_000,
        "an open whose acquires time out",
        a.sup.open(&org(), &tenant()),
    )
    .await
    .expect_err("every acquire timed out");
    assert!(err.is_outcome_unknown(), "reported as unknown: {err}");
    fleet.leases.disarm_late();
    assert!(
        !fleet.leases.land_held().await.is_empty(),
        "the acquires land"
    );

    let again = within(5_000, "the host's retry", a.sup.open(&org(), &tenant())).await;
    assert!(
        again.is_ok(),
        "the replica's own acquire that landed locks its retry out for a ttl: {again:?}"
    );
}

/// Promise 2 (RPO of a graceful handoff: 0) and promise 6 (`close()`). Two `close()` calls at
/// once (a signal handler and a shutdown path, say): the second finds the tenant already
/// flushing for the first, reports it *unflushed*, and marks the replica closed. The host drops
/// its handle on the second answer, the replica stops under the first close's flush (its
/// arbiter goes with the image upload under way), the lease is never released, and the
/// successor restores nothing: an acknowledged write is lost although no fault was injected
/// and nothing was abandoned.
#[actix_rt::test]
async fn review_promise2_a_second_close_neither_misreports_nor_ends_the_replica_under_the_first() {
    let fleet = Fleet::with_store_clock().await;
    let a = fleet.replica_images("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();

    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_image, held);
    let first = actix_rt::spawn(a.sup.close());
    gate.reached().await;
    let second = actix_rt::spawn(a.sup.close());
    // The host believes the replica closed: it lets go of it.
    drop(t);
    drop(a);
    gate.open();
    let first = within(5_000, "the first close", first).await.unwrap();
    let misreported = within(5_000, "the second close", second).await.unwrap();
    assert_eq!(
        first, misreported,
        "a second close hears the first's answer"
    );
    let misreported = misreported.unwrap();

    // Whatever the replica did, a successor must find the acknowledged write.
    fleet.advance(TTL + Duration::from_secs(1));
    let b = fleet.replica_images("replica-b");
    let tb = within(5_000, "the successor's open", b.open()).await;
    let restored = keys_of(&tb).await;
    assert_eq!(
        restored,
        ["k-1"],
        "an acknowledged write was lost: the second close answered {misreported:?}, the first \
         {first:?}"
    );
    assert!(
        misreported.is_empty(),
        "the second close reported a tenant the first flushed as unflushed"
    );
}

/// Promise 6 ("what a closed replica leaves behind"; a replica dropped without `close()` "keeps
/// serving the tenants hosts still hold"). A replica whose last `Supervisor` handle and every
/// `TenantRef` were dropped without `close()` can never be reached again, yet its renewal chain
/// keeps every lease it holds for ever: no other replica can open those tenants, and its
/// threads and actors stay.
#[actix_rt::test]
async fn review_promise6_an_unreachable_replica_dropped_without_close_lets_its_leases_go() {
    let fleet = Fleet::real_time(Duration::from_millis(600), Duration::from_millis(100)).await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    drop(t);
    drop(a);
    let b = fleet.replica("replica-b");
    // Ten lease lengths: a lease nobody can use any more has long expired.
    tokio::time::sleep(Duration::from_millis(6_000)).await;
    let opened = within(5_000, "the open elsewhere", b.sup.open(&org(), &tenant())).await;
    assert!(
        opened.is_ok(),
        "an unreachable replica still holds the tenant: {opened:?}"
    );
    let tb = opened.unwrap();
    assert_eq!(tb.status().await, TenantStatus::Serving);
}

/// Promise 6, the other side of the same decision: a replica whose `Supervisor` handles are
/// dropped without `close()` keeps serving (and renewing) the tenants hosts still hold; once the
/// last `TenantRef` goes too, it stops like a crash and the leases run out.
#[actix_rt::test]
async fn review_promise6_a_replica_dropped_without_close_serves_the_tenants_hosts_still_hold() {
    let fleet = Fleet::real_time(Duration::from_millis(600), Duration::from_millis(100)).await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    let ticket = t.admit().await.unwrap();
    insert(&t, "k-1").await.unwrap();
    let log = a.log.clone();
    drop(a);
    drop(t);
    // Five lease lengths: the host's ticket still reaches the tenant, so it is still renewed.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let held = ticket.tenant().clone();
    drop(ticket);
    insert(&held, "k-2").await.unwrap();
    assert!(
        !log.events()
            .iter()
            .any(|e| matches!(e, leasehold_actors::Event::ReplicaDropped { .. }))
    );
    drop(held);
    let b = fleet.replica("replica-b");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let opened = within(5_000, "the open elsewhere", b.sup.open(&org(), &tenant())).await;
    assert_eq!(keys_of(&opened.unwrap()).await, ["k-1", "k-2"]);
    assert!(
        log.events()
            .iter()
            .any(|e| matches!(e, leasehold_actors::Event::ReplicaDropped { tenants: 1 }))
    );
}

/// Hole 9 ("every lease-store operation must be safe when it lands late"). An open whose first
/// acquire timed out retries under the same attempt and succeeds; the tenure serves and is
/// handed off (the lease released). When the first acquire lands after that, the store takes it
/// as a new acquisition of the released key: a tenure at the next epoch that no replica runs,
/// renews or releases. Every replica, the successor included, is refused `Held` for a `ttl`.
/// (An attempt that already started a tenure should never start another.)
#[actix_rt::test]

async fn review_hole9_an_acquire_landing_after_its_tenure_was_released_takes_nothing() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    fleet.leases.land_late(LeaseOp::Acquire);
    let t = within(5_000, "an open whose first acquire times out", a.open()).await;
    insert(&t, "k-1").await.unwrap();
    t.handoff().await.unwrap();
    assert_eq!(
        fleet.leases.held(),
        [LeaseOp::Acquire],
        "the first acquire is held back"
    );
    fleet.leases.land_held().await;

    let b = fleet.replica("replica-b");
    let opened = within(5_000, "the successor's open", b.sup.open(&org(), &tenant())).await;
    let record = fleet.leases.inner().read(&key()).await.unwrap();
    assert!(
        opened.is_ok(),
        "a stale acquire took the released lease ({record:?}): {opened:?}"
    );
    assert_eq!(keys_of(&opened.unwrap()).await, ["k-1"]);
}

/// An observer that records when the runtime let go of it.
struct DropFlag(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl leasehold_actors::Observer for DropFlag {
    fn on_event(&self, _event: &leasehold_actors::Event) {}
}

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Promise 6 ("what a closed replica leaves behind: nothing, once `close()` has finished and the
/// last `Supervisor` handle is dropped"; `TenantRef`: "an old handle keeps neither its stores nor
/// its state root's lock"). A `TenantRef` (or a `Ticket`) kept after the close holds the
/// replica's `EventSink`, whose queue keeps the observer's thread, and the observer, alive for
/// as long as the handle lives: one thread per closed replica that a host still has a handle of.
#[actix_rt::test]

async fn review_promise6_a_handle_kept_after_close_keeps_no_observer_thread() {
    let fleet = Fleet::new().await;
    let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = released.clone();
    let a = fleet.replica_with("replica-a", "replica-a", move |c| {
        c.observer = Some(std::sync::Arc::new(DropFlag(flag)));
    });
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    assert!(a.sup.close().await.unwrap().is_empty());
    drop(a);
    // The host still has the handle of a tenure that is over (a cache, a task that ended late).
    assert_eq!(t.status().await, TenantStatus::Released);
    eventually(
        5_000,
        "the closed replica to let go of its observer",
        || async { released.load(std::sync::atomic::Ordering::SeqCst) },
    )
    .await;
    drop(t);
}

/// Promise 6 ("once `close()` has finished and the last `Supervisor` handle is dropped ... the
/// state root's lock is released") and assumption 5. The lock goes only when the arbiters,
/// stopped from the supervisor's `stopped()` and joined on a thread of their own, have dropped
/// the last tenant actor: a host that restarts its replica in-process right after `close()` and
/// the drop (a configuration reload) is refused `StateRootLocked` by its own closed replica, and
/// has nothing to wait on but polling.
#[actix_rt::test]

async fn review_promise6_a_replica_restarted_on_its_root_right_after_close_and_drop_starts() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    assert!(a.sup.close().await.unwrap().is_empty());
    drop(t);
    drop(a);
    let again = fleet.try_replica_with("replica-a2", "replica-a", |_| {});
    assert!(
        again.is_ok(),
        "the closed and dropped replica still holds its root: {:?}",
        again.err()
    );
    let b = again.unwrap();
    assert_eq!(keys_of(&b.open().await).await, ["k-1"]);
}

/// Promise 5 ("delete means delete") and promise 6 (`close()` waits for forgets under way).
/// `close()` waits for a forget at most `drain_timeout`, then finishes; once the host drops its
/// handle the replica stops, and with its arbiters goes the forget's erase, half done: the floor
/// is raised (the tenant can never be restored) but its images stay in the durable store, the
/// lease is not released, and the forget's caller hears `Fenced` — "nothing of it ran".
#[actix_rt::test]
async fn review_promise5_a_forget_under_way_at_close_is_not_cut_off_half_erased() {
    let fleet = Fleet::new().await;
    let released = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = released.clone();
    let a = fleet.replica_with("replica-a", "replica-a", move |c| {
        c.drain_timeout = Duration::from_millis(300);
        c.observer = Some(std::sync::Arc::new(DropFlag(flag)));
    });
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.snapshot().await.unwrap();

    // The floor is raised; the erase's sweep is slow (its listing takes 800 ms): close stops
    // waiting for the forget after `drain_timeout` (300 ms), and the host lets go meanwhile.
    let (reached_tx, reached) = tokio::sync::oneshot::channel::<()>();
    let reached_tx = std::sync::Mutex::new(Some(reached_tx));
    fleet.durable.before_next(
        leasehold::testkit::StoreOp::List,
        hook(async move {
            if let Some(tx) = reached_tx.lock().unwrap().take() {
                let _ = tx.send(());
            }
            tokio::time::sleep(Duration::from_millis(800)).await;
        }),
    );
    let forget = actix_rt::spawn(t.forget());
    within(5_000, "the erase's listing", reached).await.unwrap();
    let unflushed = within(5_000, "close beside a forget", a.sup.close())
        .await
        .unwrap();
    drop(t);
    drop(a);
    let forgot = within(5_000, "the forget's answer", forget).await.unwrap();
    // The replica lets go once the forget is over, not before.
    eventually(5_000, "the replica to let go", || async {
        released.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
    let left = fleet.stored_of_tenant().await;
    let record = fleet.leases.inner().read(&key()).await.unwrap();
    assert!(
        forgot.is_ok() && left.is_empty(),
        "close answered {unflushed:?}; the forget answered {forgot:?}; left in the store: \
         {left:?}; lease {record:?}"
    );
}
