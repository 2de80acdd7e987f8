//! Restores: the fallback along the chain of images (never to the floor or below, never on a
//! store error), and installing a restore over the local file (a new inode; stale `-wal`/`-shm`
//! gone; bytes that are not SQLite refused). Taking images and manifests are in `tests/image.rs`.

mod image_fixtures;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use image_fixtures::{MemStore, corrupt_reason, image_of, key, keys_in, ledger_at, ledger_file};
use leasehold::durable::StoreError;
use leasehold::image::{
    ImageError, Manifest, fetch_restorable, install_empty, install_image, take_image, upload_image,
};
use leasehold::layout::{ImageRef, image_key, manifest_key};
use leasehold::ledger::NewEvent;

// ---- restoring -----------------------------------------------------------------------------------

/// Publishes a chain of images into `store`, each built on the one before; returns their refs.
async fn publish_chain(
    store: &MemStore,
    dir: &Path,
    steps: &[(u64, u64, &[&str])],
) -> Vec<ImageRef> {
    let mut refs: Vec<ImageRef> = Vec::new();
    for (epoch, seq, keys) in steps {
        let image = image_of(dir, &format!("e{epoch}s{seq}"), keys);
        let m = upload_image(
            store,
            &key(),
            *epoch,
            *seq,
            &image,
            refs.last().cloned(),
            None,
            false,
            1,
        )
        .await
        .unwrap();
        refs.push(m.image_ref());
    }
    refs
}

fn restored_keys(dir: &Path, restored: Option<(Manifest, Vec<u8>)>) -> (u64, u64, Vec<String>) {
    let (manifest, bytes) = restored.expect("an image");
    let path = dir.join(format!("restored-{}-{}.db", manifest.epoch, manifest.seq));
    install_image(&bytes, &path).unwrap();
    (manifest.epoch, manifest.seq, keys_in(&path))
}

#[tokio::test]
async fn no_head_means_start_empty() {
    let store = MemStore::default();
    assert_eq!(fetch_restorable(&store, &key(), None, 0).await, Ok(None));
}

#[tokio::test]
async fn the_head_is_restored_when_it_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::default();
    let refs = publish_chain(
        &store,
        dir.path(),
        &[(1, 1, &["k-1"]), (2, 1, &["k-1", "k-2"])],
    )
    .await;
    let restored = fetch_restorable(&store, &key(), Some(&refs[1]), 0)
        .await
        .unwrap();
    assert_eq!(
        restored_keys(dir.path(), restored),
        (2, 1, vec!["k-1".into(), "k-2".into()])
    );
}

#[tokio::test]
async fn a_checksum_failure_falls_back_to_the_base() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::default();
    let refs = publish_chain(
        &store,
        dir.path(),
        &[(1, 1, &["k-1"]), (2, 1, &["k-1", "k-2"])],
    )
    .await;
    let head_image = image_key(&key(), 2, 1);
    let mut damaged = store.object(&head_image).unwrap();
    damaged[300] ^= 0x01;
    store.replace(&head_image, damaged);
    let restored = fetch_restorable(&store, &key(), Some(&refs[1]), 0)
        .await
        .unwrap();
    assert_eq!(
        restored_keys(dir.path(), restored),
        (1, 1, vec!["k-1".into()])
    );
}

#[tokio::test]
async fn a_missing_image_falls_back_along_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::default();
    let refs = publish_chain(
        &store,
        dir.path(),
        &[(1, 1, &["k-1"]), (1, 2, &["k-2"]), (2, 1, &["k-3"])],
    )
    .await;
    store.remove(&image_key(&key(), 2, 1));
    store.replace(
        &image_key(&key(), 1, 2),
        b"SQLite format 3\0 but truncated".to_vec(),
    );
    let restored = fetch_restorable(&store, &key(), Some(&refs[2]), 0)
        .await
        .unwrap();
    assert_eq!(
        restored_keys(dir.path(), restored),
        (1, 1, vec!["k-1".into()])
    );
}

#[tokio::test]
async fn the_fallback_never_reaches_the_floor() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::default();
    let refs = publish_chain(
        &store,
        dir.path(),
        &[(1, 1, &["k-1"]), (2, 1, &["k-1", "k-2"])],
    )
    .await;
    store.remove(&image_key(&key(), 2, 1));
    let reason = corrupt_reason(fetch_restorable(&store, &key(), Some(&refs[1]), 1).await);
    assert!(reason.contains("floor 1"), "{reason}");
    assert!(
        reason.contains("e00000002/snap-000001.db: the image is missing"),
        "{reason}"
    );
    let restored = fetch_restorable(&store, &key(), Some(&refs[1]), 0)
        .await
        .unwrap();
    assert_eq!(
        restored.map(|(m, _)| m.epoch),
        Some(1),
        "with floor 0 the base is above it"
    );
}

#[tokio::test]
async fn a_head_at_or_below_the_floor_is_never_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::default();
    let refs = publish_chain(&store, dir.path(), &[(2, 1, &["k-1"])]).await;
    for floor in [2, 3] {
        let reason = corrupt_reason(fetch_restorable(&store, &key(), Some(&refs[0]), floor).await);
        assert!(reason.contains("at or below the floor"), "{reason}");
    }
}

#[tokio::test]
async fn a_chain_that_runs_out_is_corrupt_not_empty() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::default();
    let refs = publish_chain(&store, dir.path(), &[(1, 1, &["k-1"]), (1, 2, &["k-2"])]).await;
    store.remove(&image_key(&key(), 1, 2));
    let mut damaged = store.object(&image_key(&key(), 1, 1)).unwrap();
    damaged.truncate(damaged.len() - 1);
    store.replace(&image_key(&key(), 1, 1), damaged);
    let reason = corrupt_reason(fetch_restorable(&store, &key(), Some(&refs[1]), 0).await);
    assert!(
        reason.contains("refusing to start the tenant empty"),
        "{reason}"
    );
    assert!(
        reason.contains("snap-000002.db: the image is missing"),
        "{reason}"
    );
    assert!(reason.contains("snap-000001.db is corrupt"), "{reason}");
    assert!(reason.contains("built on nothing"), "{reason}");
}

#[tokio::test]
async fn a_missing_or_corrupt_head_manifest_is_corrupt_with_no_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::default();
    let refs = publish_chain(&store, dir.path(), &[(1, 1, &["k-1"]), (1, 2, &["k-2"])]).await;
    let head_manifest = manifest_key(&key(), 1, 2);
    let saved = store.object(&head_manifest).unwrap();
    store.replace(&head_manifest, b"{ not json".to_vec());
    let reason = corrupt_reason(fetch_restorable(&store, &key(), Some(&refs[1]), 0).await);
    assert!(reason.contains("not JSON"), "{reason}");
    store.remove(&head_manifest);
    let reason = corrupt_reason(fetch_restorable(&store, &key(), Some(&refs[1]), 0).await);
    assert!(reason.contains("the manifest is missing"), "{reason}");
    // A base's manifest that is missing ends the walk the same way.
    store.replace(&head_manifest, saved);
    store.remove(&image_key(&key(), 1, 2));
    store.remove(&manifest_key(&key(), 1, 1));
    let reason = corrupt_reason(fetch_restorable(&store, &key(), Some(&refs[1]), 0).await);
    assert!(
        reason.contains("snap-000002.db: the image is missing"),
        "{reason}"
    );
    assert!(
        reason.contains("snap-000001.json: the manifest is missing"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_manifest_that_does_not_match_the_head_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::default();
    let refs = publish_chain(&store, dir.path(), &[(1, 1, &["k-1"])]).await;
    let other = ImageRef {
        sha256: "d".repeat(64),
        ..refs[0].clone()
    };
    let reason = corrupt_reason(fetch_restorable(&store, &key(), Some(&other), 0).await);
    assert!(reason.contains("the reference to it says"), "{reason}");
}

#[tokio::test]
async fn a_store_error_is_never_a_reason_to_fall_back() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::default();
    let refs = publish_chain(&store, dir.path(), &[(1, 1, &["k-1"]), (1, 2, &["k-2"])]).await;
    store.fail_gets_of(&image_key(&key(), 1, 2));
    let outcome = fetch_restorable(&store, &key(), Some(&refs[1]), 0).await;
    assert!(
        matches!(
            outcome,
            Err(ImageError::Store(StoreError::Unavailable { .. }))
        ),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn an_image_round_trips_through_the_directory_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = leasehold::durable::dir::DirStore::open(&dir.path().join("store")).unwrap();
    let image = image_of(dir.path(), "a", &["k-1", "k-2"]);
    let m = upload_image(&store, &key(), 1, 1, &image, None, None, false, 1)
        .await
        .unwrap();
    let restored = fetch_restorable(&store, &key(), Some(&m.image_ref()), 0)
        .await
        .unwrap();
    assert_eq!(
        restored_keys(dir.path(), restored),
        (1, 1, vec!["k-1".into(), "k-2".into()])
    );
}

// ---- installing ----------------------------------------------------------------------------------

#[test]
fn install_puts_a_new_inode_on_the_path_and_the_held_file_is_unlinked() {
    let dir = tempfile::tempdir().unwrap();
    let path = ledger_file(dir.path(), "ledger.db", &["k-old"]);
    let held = std::fs::File::open(&path).unwrap();
    let old_inode = held.metadata().unwrap().ino();
    let image = image_of(dir.path(), "img", &["k-image"]);
    install_image(&std::fs::read(&image.path).unwrap(), &path).unwrap();
    assert_eq!(
        held.metadata().unwrap().nlink(),
        0,
        "the old file is on no path any more"
    );
    assert_ne!(
        std::fs::File::open(&path)
            .unwrap()
            .metadata()
            .unwrap()
            .ino(),
        old_inode
    );
    assert_eq!(keys_in(&path), ["k-image"]);
    assert!(!dir.path().join("ledger.db.restoring").exists());
}

#[test]
fn install_removes_the_stale_wal_so_an_abandoned_tail_is_not_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let image = image_of(dir.path(), "img", &["k-1"]);
    // The abandoned tenure: k-1 and k-2 committed into its WAL, never checkpointed, never closed.
    let mut zombie = ledger_at(&path);
    zombie
        .run(|tx| tx.insert_event(&NewEvent::new("noted", "k-1")))
        .unwrap();
    zombie
        .run(|tx| tx.insert_event(&NewEvent::new("noted", "k-2")))
        .unwrap();
    let wal = dir.path().join("ledger.db-wal");
    let shm = dir.path().join("ledger.db-shm");
    let wal_inode = std::fs::metadata(&wal).unwrap().ino();
    assert!(std::fs::metadata(&wal).unwrap().len() > 0);
    install_image(&std::fs::read(&image.path).unwrap(), &path).unwrap();
    assert!(
        !wal.exists() && !shm.exists(),
        "the stale -wal and -shm are gone"
    );
    assert_eq!(
        keys_in(&path),
        ["k-1"],
        "k-2 lived only in the abandoned WAL and is not brought back"
    );
    // The zombie writes on into a file that is on no path: the restored ledger never sees it.
    let _ = zombie.run(|tx| tx.insert_event(&NewEvent::new("noted", "k-late")));
    assert_eq!(keys_in(&path), ["k-1"]);
    assert!(std::fs::metadata(&wal).map_or(true, |m| m.ino() != wal_inode));
}

#[test]
fn a_zombie_that_writes_and_closes_after_a_restore_leaves_the_successor_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let mut zombie = ledger_at(&path);
    zombie
        .run(|tx| tx.insert_event(&NewEvent::new("noted", "k-1")))
        .unwrap();
    let image = take_image(&path, &dir.path().join("image.db")).unwrap();
    install_image(&std::fs::read(&image.path).unwrap(), &path).unwrap();
    let mut successor = ledger_at(&path);
    successor
        .run(|tx| tx.insert_event(&NewEvent::new("noted", "k-s")))
        .unwrap();
    // SQLite lets the zombie commit into its unlinked file; closing must not checkpoint into,
    // or delete, the successor's files on the path.
    let _ = zombie.run(|tx| tx.insert_event(&NewEvent::new("noted", "k-late")));
    let _ = zombie.close();
    assert!(
        dir.path().join("ledger.db-wal").exists(),
        "the successor's WAL is still there"
    );
    let seen = successor.run(|tx| tx.events_after(0, 10)).unwrap();
    let seen: Vec<_> = seen.into_iter().map(|e| e.idem_key).collect();
    assert_eq!(seen, ["k-1", "k-s"]);
    successor.close().unwrap();
    assert_eq!(keys_in(&path), ["k-1", "k-s"]);
}

#[test]
fn bytes_without_the_sqlite_header_are_refused_and_nothing_is_installed() {
    let dir = tempfile::tempdir().unwrap();
    let path = ledger_file(dir.path(), "ledger.db", &["k-old"]);
    let before = std::fs::read(&path).unwrap();
    let inode = std::fs::metadata(&path).unwrap().ino();
    std::fs::write(dir.path().join("ledger.db-wal"), b"kept").unwrap();
    for bad in [
        &b""[..],
        b"SQLite format 2\0xxxxxxxxxxxx",
        b"PK\x03\x04 a zip file",
    ] {
        let reason = corrupt_reason(install_image(bad, &path));
        assert!(reason.contains("SQLite header"), "{reason}");
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
    assert!(
        dir.path().join("ledger.db-wal").exists(),
        "a refused install touches nothing"
    );
    assert!(!dir.path().join("ledger.db.restoring").exists());
}

#[test]
fn install_empty_clears_a_stale_local_ledger() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let mut zombie = ledger_at(&path);
    zombie
        .run(|tx| tx.insert_event(&NewEvent::new("noted", "k-stale")))
        .unwrap();
    install_empty(&path).unwrap();
    for suffix in ["", "-wal", "-shm"] {
        assert!(
            !dir.path().join(format!("ledger.db{suffix}")).exists(),
            "ledger.db{suffix}"
        );
    }
    assert_eq!(
        keys_in(&path),
        Vec::<String>::new(),
        "the next open starts empty"
    );
    drop(zombie);
    install_empty(&dir.path().join("never-there.db")).unwrap();
}
