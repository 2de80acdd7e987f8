//! L — a replica keeps no copy of a tenant it handed off with everything flushed, and the durable
//! copy is the authority at the next open. (P3, two replicas sharing a state root, is refused at
//! start now: `tests/state_root.rs`, docs/guarantees.md assumption 5.)

mod common;

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use common::*;

#[actix_rt::test]
async fn l1_a_flushed_handoff_leaves_no_local_copy_and_an_abandon_keeps_the_only_one() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let file = a.ledger_file();
    assert!(file.exists());
    t.handoff().await.unwrap();
    for suffix in ["", "-wal", "-shm"] {
        let path = format!("{}{suffix}", file.display());
        assert!(
            !std::path::Path::new(&path).exists(),
            "{path} is gone after a flushed handoff"
        );
    }
    let kept = a.open().await;
    insert(&kept, "k-2").await.unwrap();
    kept.abandon().await.unwrap();
    assert!(
        file.exists(),
        "an abandoned tenant's file may hold writes found nowhere else: it stays"
    );
}

#[actix_rt::test]
async fn l2_an_abandoned_tenures_local_ledger_is_replaced_not_recovered_by_the_next_open() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_images("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.snapshot().await.unwrap();
    insert(&t, "k-2").await.unwrap();
    t.abandon().await.unwrap();
    assert!(
        a.ledger_file().exists(),
        "the abandoned file is there until the next open"
    );
    let again = a.open().await;
    assert_eq!(
        keys_of(&again).await,
        ["k-1"],
        "k-2 came after the last image: the declared tail, not brought back"
    );
}

#[actix_rt::test]
async fn p3_two_replicas_sharing_one_state_root_are_refused_and_a_restore_replaces_the_file_an_older_writer_holds()
 {
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica_with("replica-a", "shared-root", |_| {});
    // The misconfiguration is refused at start, before anything is touched (hole 3).
    let refused = fleet
        .try_replica_with("replica-b", "shared-root", |_| {})
        .err()
        .expect("a second replica on a root in use is refused");
    assert_eq!(
        refused.code(),
        "LEASEHOLD_STATE_ROOT_LOCKED",
        "got {refused}"
    );
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.snapshot().await.unwrap();
    let file = a.ledger_file();
    // What a writer still running has open; holding it also keeps its inode from being reused.
    let held = std::fs::File::open(&file).unwrap();
    fleet.advance(TTL + Duration::from_millis(1));
    let zombie = insert(&t, "zombie").await;
    assert!(
        matches!(zombie, Err(ref e) if e.is_fenced()),
        "got {zombie:?}"
    );
    t.abandon().await.unwrap();
    assert!(a.sup.close().await.unwrap().is_empty());
    drop(a);
    // Once the first replica is gone, the root hosts the next one, whose restore puts another
    // file on the path: what the older writer held is unlinked, never written into.
    let mut next = None;
    eventually(5_000, "the state root to be free again", || {
        next = fleet
            .try_replica_with("replica-b", "shared-root", |_| {})
            .ok();
        std::future::ready(next.is_some())
    })
    .await;
    let b = next.unwrap();
    let successor = b.open().await;
    assert_eq!(
        held.metadata().unwrap().nlink(),
        0,
        "the held file is unlinked"
    );
    assert_ne!(
        std::fs::metadata(&file).unwrap().ino(),
        held.metadata().unwrap().ino(),
        "the path leads to another file"
    );
    assert_eq!(keys_of(&successor).await, ["k-1"], "the durable copy");
}

#[actix_rt::test]
async fn a_replica_that_lost_its_tenure_drops_its_copy_once_a_successor_forgot_the_tenant() {
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let a = fleet.replica("replica-a");
    let b = fleet.replica("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    // A is cut off past its lease; B takes over and forgets the tenant.
    fleet.advance(TTL + Duration::from_millis(1));
    b.open().await.forget().await.unwrap();
    assert!(
        a.ledger_file().exists(),
        "A still has its copy of the forgotten tenant"
    );
    // A learns at its next renewal that the tenure is over, and that it was forgotten.
    a.sup.renew_now().await.unwrap();
    eventually(3_000, "the dead copy to be dropped", || async {
        !a.ledger_file().exists()
    })
    .await;
    assert!(
        a.saw(|e| matches!(
            e,
            leasehold_actors::Event::LocalCopyDropped { epoch: 1, .. }
        ))
        .await
    );
}

#[actix_rt::test]
async fn an_abandoned_copy_of_a_tenant_forgotten_elsewhere_goes_at_the_next_local_sweep_and_a_live_one_stays()
 {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let b = fleet.replica("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.abandon().await.unwrap();
    let other = a.open2().await;
    insert(&other, "kept").await.unwrap();
    other.abandon().await.unwrap();
    b.open().await.forget().await.unwrap();
    assert!(a.ledger_file().exists());
    assert_eq!(
        a.sup.sweep_local().await.unwrap(),
        1,
        "only the forgotten tenant's copy goes"
    );
    assert!(!a.ledger_file().exists());
    let kept = leasehold::paths::ledger_path(&a.state_root, &org(), &tenant2());
    assert!(
        kept.exists(),
        "a copy whose tenure is above the floor is kept"
    );
}

#[actix_rt::test]
async fn scratch_images_of_an_interrupted_upload_are_removed_at_the_next_open() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.abandon().await.unwrap();
    let dir = a.ledger_file().parent().unwrap().to_path_buf();
    std::fs::write(dir.join("image-e00000001-000009.tmp"), b"half an image").unwrap();
    let again = a.open().await;
    assert!(!dir.join("image-e00000001-000009.tmp").exists());
    assert!(again.is_open().await);
}

#[actix_rt::test]
async fn close_drops_the_copies_of_tenants_forgotten_elsewhere() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let b = fleet.replica("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.abandon().await.unwrap();
    b.open().await.forget().await.unwrap();
    assert!(
        a.ledger_file().exists(),
        "the abandoned copy outlived the forget elsewhere"
    );
    assert!(a.sup.close().await.unwrap().is_empty());
    assert!(!a.ledger_file().exists(), "close dropped it");
}

/// Promise 5: an open that fails before it wrote anything (its restore could not read the head)
/// leaves no directory of the tenant behind — the drill once found such an empty directory of
/// a tenant forgotten elsewhere.
#[actix_rt::test]
async fn p5_an_open_whose_restore_failed_leaves_no_directory() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let b = fleet.replica("replica-b");
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    t.handoff().await.unwrap();
    fleet.durable.set_down(true);
    let refused = b.sup.open(&org(), &tenant()).await;
    assert!(refused.is_err(), "the head cannot be read: {refused:?}");
    fleet.durable.set_down(false);
    assert!(
        !b.ledger_file().parent().unwrap().exists(),
        "the failed open left the tenant's directory"
    );
    assert_eq!(
        keys_of(&b.open().await).await,
        ["k-1"],
        "a later open restores"
    );
}
