//! An open that meets a passivation at its very end: the tenure has ended (`passivated`) but
//! the supervisor's table has not dropped it yet, because the tenure's `TenantGone` is queued
//! behind the open. The host must not notice (promise 12): the open waits until the tenure has
//! left and opens a new one — never before the old tenure's local copy was dropped, so the new
//! tenure's files survive.

use super::*;
use leasehold::testkit::LeaseOp;

/// Blocks this thread — the one the supervisor runs on — until `t`'s tenure reads `status`:
/// nothing queued at the supervisor meanwhile is handled. The tenant runs on its own arbiter.
fn block_until_status(t: &TenantRef, status: TenantStatus) {
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while futures::executor::block_on(t.status()) != status {
        assert!(
            std::time::Instant::now() < until,
            "the tenant never became {status}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The tenure the local copy of the main tenant belongs to, read from the disk (not through
/// the tenant's open connection, which reads a file deleted under it all the same); `None`
/// when its ledger file is gone.
fn local_copy(a: &Replica) -> Option<u64> {
    let tenure = leasehold::paths::read_tenure(&a.state_root, &org(), &tenant()).unwrap();
    tenure.filter(|_| a.ledger_file().exists())
}

#[actix_rt::test]
async fn promise12_an_open_queued_behind_the_end_of_a_passivation_reopens_the_tenant() {
    for (name, durability) in modes() {
        let fleet = Fleet::new().await;
        let a = passivating(&fleet, "a", durability, |_| {});
        let t = a.open().await;
        insert(&t, "before").await.unwrap();
        let passivated_epoch = t.epoch();
        // The passivation's last step, the lease's release, is held: the local copy is gone,
        // the tenure still `passivating`.
        let (held, mut gate) = gated();
        fleet.leases.before_next(LeaseOp::Release, held);
        assert_eq!(idle_out(&fleet, &a).await, 1, "{name}");
        gate.reached().await;
        assert_eq!(t.status().await, TenantStatus::Passivating, "{name}");
        assert!(!a.ledger_file().exists(), "{name}: the old copy is dropped");
        // The host's open is queued at the supervisor now; the supervisor handles it only once
        // the tenure has ended, with its `TenantGone` queued behind the open.
        let open = a.sup.open(&org(), &tenant());
        gate.open();
        block_until_status(&t, TenantStatus::Passivated);
        let reopened = within(5_000, "the open", open)
            .await
            .unwrap_or_else(|e| panic!("{name}: the host noticed the passivation: {e:?}"));
        assert!(reopened.epoch() > passivated_epoch, "{name}");
        assert!(
            a.saw(
                |e| matches!(e, Event::Reactivated { passivated_epoch: p, .. }
                if *p == passivated_epoch)
            )
            .await,
            "{name}: said as a reactivation"
        );
        insert(&reopened, "after").await.unwrap();
        // The new tenure's files are its own, on the disk, after the old tenure is long over.
        assert_eq!(local_copy(&a), Some(reopened.epoch()), "{name}");
        assert_eq!(keys_of(&reopened).await, ["before", "after"], "{name}");
        let found = a.sup.tenant(&org(), &tenant()).await.unwrap();
        assert_eq!(found.epoch(), reopened.epoch(), "{name}: the table's entry");
        reopened.handoff().await.unwrap();
        assert_eq!(
            restored_elsewhere(&fleet, "b").await,
            ["before", "after"],
            "{name}"
        );
    }
}

#[actix_rt::test]
async fn promise12_an_open_during_a_passivations_flush_waits_for_its_local_copy_to_go() {
    // The open comes before the old tenure's directory removal: it must not open until the
    // removal is over, or the removal deletes the new tenure's files.
    let fleet = Fleet::new().await;
    let a = passivating(&fleet, "a", Durability::Images, |_| {});
    let t = a.open().await;
    insert(&t, "before").await.unwrap();
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_image, held);
    assert_eq!(idle_out(&fleet, &a).await, 1);
    gate.reached().await;
    assert!(a.ledger_file().exists(), "the old copy is still there");
    let open = actix_rt::spawn(a.sup.open(&org(), &tenant()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!open.is_finished(), "the open waits for the passivation");
    gate.open();
    let reopened = within(5_000, "the open", open).await.unwrap().unwrap();
    assert!(reopened.epoch() > t.epoch());
    insert(&reopened, "after").await.unwrap();
    assert_eq!(local_copy(&a), Some(reopened.epoch()));
    assert_eq!(keys_of(&reopened).await, ["before", "after"]);
}
