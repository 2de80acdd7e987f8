//! Images: consistency while a writer commits, manifests and their corruptions, publish, the
//! fallback along the chain (never to the floor or below), and installing a restore over the
//! local file (a new inode; stale `-wal`/`-shm` gone; bytes that are not SQLite refused).

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use leasehold::durable::{DurableStore, Put, StoreError};
use leasehold::ids::{LeaseKey, OrgId, TenantId};
use leasehold::image::{
    self, FORMAT_VERSION, ImageError, ImageFile, ImageMethod, Manifest, fetch_restorable,
    install_empty, install_image, parse_manifest, take_image, take_image_with, upload_image,
};
use leasehold::layout::{ImageRef, image_key, manifest_key};
use leasehold::ledger::{Ledger, LedgerOptions, NewEvent};
use serde_json::json;

/// An in-memory durable store that honours `put_if_absent`, with test hooks to damage objects
/// and to make a key's `get` fail like an outage.
#[derive(Debug, Default)]
struct MemStore {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
    failing: Mutex<BTreeSet<String>>,
}

impl MemStore {
    fn replace(&self, key: &str, bytes: Vec<u8>) {
        self.objects.lock().unwrap().insert(key.to_string(), bytes);
    }
    fn remove(&self, key: &str) {
        self.objects.lock().unwrap().remove(key);
    }
    fn object(&self, key: &str) -> Option<Vec<u8>> {
        self.objects.lock().unwrap().get(key).cloned()
    }
    fn fail_gets_of(&self, key: &str) {
        self.failing.lock().unwrap().insert(key.to_string());
    }
}

#[async_trait]
impl DurableStore for MemStore {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        let mut objects = self.objects.lock().unwrap();
        if objects.contains_key(key) {
            return Ok(Put::AlreadyExists);
        }
        objects.insert(key.to_string(), bytes);
        Ok(Put::Created)
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        if self.failing.lock().unwrap().contains(key) {
            return Err(StoreError::Unavailable {
                op: "get",
                message: "injected outage".into(),
            });
        }
        Ok(self.object(key))
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let objects = self.objects.lock().unwrap();
        Ok(objects
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect())
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.remove(key);
        Ok(())
    }
    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        let mut objects = self.objects.lock().unwrap();
        let before = objects.len();
        objects.retain(|k, _| !k.starts_with(prefix));
        Ok(before - objects.len())
    }
}

fn key() -> LeaseKey {
    LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t1").unwrap())
}

fn ledger_at(path: &Path) -> Ledger {
    Ledger::open(path, &LedgerOptions::default()).unwrap()
}

/// A closed ledger at `<dir>/<name>` holding one event per key.
fn ledger_file(dir: &Path, name: &str, keys: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let mut ledger = ledger_at(&path);
    for k in keys {
        ledger
            .run(|tx| tx.insert_event(&NewEvent::new("noted", *k)))
            .unwrap();
    }
    ledger.close().unwrap();
    path
}

fn keys_in(path: &Path) -> Vec<String> {
    let mut ledger = ledger_at(path);
    let events = ledger.run(|tx| tx.events_after(0, 10_000)).unwrap();
    ledger.close().unwrap();
    events.into_iter().map(|e| e.idem_key).collect()
}

/// An image of a fresh ledger holding `keys`.
fn image_of(dir: &Path, name: &str, keys: &[&str]) -> ImageFile {
    let db = ledger_file(dir, &format!("{name}.ledger.db"), keys);
    take_image(&db, &dir.join(format!("{name}.image.db"))).unwrap()
}

fn corrupt_reason(result: Result<impl std::fmt::Debug, ImageError>) -> String {
    match result {
        Err(ImageError::Corrupt { what, reason }) => format!("{what}: {reason}"),
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

// ---- taking images ---------------------------------------------------------------------------

#[test]
fn an_image_taken_while_a_writer_commits_is_consistent_and_opens() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let mut writer = ledger_at(&db);
    writer
        .run(|tx| {
            tx.execute("CREATE TABLE counter (n INTEGER NOT NULL)", [])?;
            tx.execute("INSERT INTO counter VALUES (0)", [])
        })
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_writer = Arc::clone(&stop);
    let writing = std::thread::spawn(move || {
        let mut i = 0u64;
        while !stop_writer.load(Ordering::SeqCst) {
            i += 1;
            let event =
                NewEvent::new("tick", format!("k-{i}")).payload(json!({"pad": "x".repeat(500)}));
            writer
                .run(|tx| {
                    tx.insert_event(&event)?;
                    tx.execute("UPDATE counter SET n = n + 1", [])
                })
                .unwrap();
        }
        writer.close().unwrap();
        i
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    for (round, method) in [ImageMethod::Backup, ImageMethod::VacuumInto]
        .into_iter()
        .cycle()
        .take(8)
        .enumerate()
    {
        let dest = dir.path().join(format!("image-{round}.db"));
        let image = take_image_with(method, &db, &dest).unwrap();
        let bytes = std::fs::read(&dest).unwrap();
        assert_eq!(
            (image.size, image.sha256.clone()),
            (bytes.len() as u64, image::sha256_hex(&bytes))
        );
        let conn = rusqlite::Connection::open(&dest).unwrap();
        let check: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok", "{method:?}");
        let (events, counter): (i64, i64) = conn
            .query_row(
                "SELECT (SELECT count(*) FROM events), (SELECT n FROM counter)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(
            events, counter,
            "{method:?}: the image holds whole transactions only"
        );
        assert!(
            events > 0,
            "{method:?}: the writer had committed before the image"
        );
    }
    stop.store(true, Ordering::SeqCst);
    assert!(writing.join().unwrap() > 0);
}

#[test]
fn take_image_replaces_an_old_file_at_its_destination_and_leaves_no_sidecars() {
    let dir = tempfile::tempdir().unwrap();
    let db = ledger_file(dir.path(), "ledger.db", &["k-1", "k-2"]);
    for method in [ImageMethod::Backup, ImageMethod::VacuumInto] {
        let dest = dir.path().join("image.db");
        std::fs::write(&dest, b"left over from a crash").unwrap();
        let image = take_image_with(method, &db, &dest).unwrap();
        assert_eq!(image.path, dest);
        for suffix in ["-wal", "-shm", "-journal"] {
            assert!(
                !dir.path().join(format!("image.db{suffix}")).exists(),
                "{method:?} left {suffix}"
            );
        }
        let restored = dir.path().join(format!("restored-{method:?}.db"));
        install_image(&std::fs::read(&dest).unwrap(), &restored).unwrap();
        assert_eq!(keys_in(&restored), ["k-1", "k-2"]);
    }
}

#[test]
fn take_image_of_a_missing_ledger_fails_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    assert!(take_image(&missing, &dir.path().join("image.db")).is_err());
    assert!(!missing.exists());
}

#[test]
fn copy_image_of_a_frozen_ledger_holds_every_committed_event() {
    let dir = tempfile::tempdir().unwrap();
    let mut ledger = ledger_at(&dir.path().join("ledger.db"));
    for i in 0..50 {
        ledger
            .run(|tx| tx.insert_event(&NewEvent::new("noted", format!("k-{i}"))))
            .unwrap();
    }
    let image = ledger.copy_image(&dir.path().join("final.db")).unwrap();
    let bytes = std::fs::read(&image.path).unwrap();
    assert_eq!(image.sha256, image::sha256_hex(&bytes));
    let restored = dir.path().join("restored.db");
    install_image(&bytes, &restored).unwrap();
    assert_eq!(keys_in(&restored).len(), 50);
    ledger
        .run(|tx| tx.insert_event(&NewEvent::new("noted", "after")))
        .unwrap();
    ledger.begin().unwrap();
    assert!(
        ledger.copy_image(&dir.path().join("mid-batch.db")).is_err(),
        "not while a batch is open"
    );
    ledger.rollback().unwrap();
}

// ---- manifests and publishing ------------------------------------------------------------------

#[tokio::test]
async fn an_uploaded_image_and_its_manifest_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::default();
    let image = image_of(dir.path(), "a", &["k-1"]);
    let base = ImageRef {
        epoch: 2,
        seq: 4,
        sha256: "c".repeat(64),
    };
    let manifest = upload_image(&store, &key(), 3, 1, &image, Some(base.clone()), 1_700)
        .await
        .unwrap();
    assert_eq!(
        manifest,
        Manifest {
            format: FORMAT_VERSION,
            key: "acme/t1".into(),
            epoch: 3,
            seq: 1,
            size: image.size,
            sha256: image.sha256.clone(),
            base: Some(base),
            created_at_ms: 1_700,
        }
    );
    let stored = store.object("acme/t1/e00000003/snap-000001.json").unwrap();
    assert_eq!(parse_manifest(&stored, &key(), 3, 1).unwrap(), manifest);
    assert_eq!(
        store.object("acme/t1/e00000003/snap-000001.db").unwrap(),
        std::fs::read(&image.path).unwrap()
    );
    assert_eq!(
        manifest.image_ref(),
        ImageRef {
            epoch: 3,
            seq: 1,
            sha256: image.sha256
        }
    );
}

#[tokio::test]
async fn the_same_epoch_and_seq_is_never_uploaded_twice() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::default();
    let first = image_of(dir.path(), "a", &["k-1"]);
    let second = image_of(dir.path(), "b", &["k-1", "k-2"]);
    upload_image(&store, &key(), 3, 1, &first, None, 1)
        .await
        .unwrap();
    let again = upload_image(&store, &key(), 3, 1, &second, None, 2).await;
    assert_eq!(
        again,
        Err(ImageError::AlreadyExists {
            key: image_key(&key(), 3, 1)
        })
    );
    assert_eq!(
        store.object(&image_key(&key(), 3, 1)).unwrap(),
        std::fs::read(&first.path).unwrap()
    );
    // A manifest alone in the way (an image upload that was lost) is refused the same way.
    store.remove(&image_key(&key(), 3, 1));
    let again = upload_image(&store, &key(), 3, 1, &second, None, 2).await;
    assert_eq!(
        again,
        Err(ImageError::AlreadyExists {
            key: manifest_key(&key(), 3, 1)
        })
    );
}

#[tokio::test]
async fn upload_refuses_a_file_that_changed_since_it_was_taken() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::default();
    let image = image_of(dir.path(), "a", &["k-1"]);
    let mut bytes = std::fs::read(&image.path).unwrap();
    bytes[200] ^= 0xff;
    std::fs::write(&image.path, &bytes).unwrap();
    corrupt_reason(upload_image(&store, &key(), 3, 1, &image, None, 1).await);
    assert_eq!(
        store.list("").await.unwrap(),
        Vec::<String>::new(),
        "nothing was uploaded"
    );
}

#[test]
fn every_corrupt_manifest_is_refused() {
    let good = Manifest {
        format: FORMAT_VERSION,
        key: "acme/t1".into(),
        epoch: 3,
        seq: 2,
        size: 4096,
        sha256: "a".repeat(64),
        base: Some(ImageRef {
            epoch: 3,
            seq: 1,
            sha256: "b".repeat(64),
        }),
        created_at_ms: 5,
    };
    let with = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut v = serde_json::to_value(&good).unwrap();
        edit(&mut v);
        serde_json::to_vec(&v).unwrap()
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("not JSON", b"{\"format\": 1,".to_vec(), "not JSON"),
        ("not an object", b"[1, 2]".to_vec(), "format"),
        (
            "a newer format",
            with(&|v| v["format"] = json!(2)),
            "format version 2",
        ),
        (
            "no format",
            with(&|v| {
                v.as_object_mut().unwrap().remove("format");
            }),
            "format",
        ),
        (
            "another tenant",
            with(&|v| v["key"] = json!("acme/t2")),
            "acme/t2",
        ),
        (
            "another epoch",
            with(&|v| v["epoch"] = json!(4)),
            "e00000004",
        ),
        ("another seq", with(&|v| v["seq"] = json!(1)), "snap-000001"),
        (
            "a short sha256",
            with(&|v| v["sha256"] = json!("abc")),
            "sha256",
        ),
        (
            "an uppercase sha256",
            with(&|v| v["sha256"] = json!("A".repeat(64))),
            "sha256",
        ),
        (
            "a non-hex sha256",
            with(&|v| v["sha256"] = json!("z".repeat(64))),
            "sha256",
        ),
        (
            "a bad base sha256",
            with(&|v| v["base"]["sha256"] = json!("x")),
            "base sha256",
        ),
        (
            "a base that is not older",
            with(&|v| v["base"]["seq"] = json!(2)),
            "not older",
        ),
        (
            "a missing size",
            with(&|v| {
                v.as_object_mut().unwrap().remove("size");
            }),
            "size",
        ),
        (
            "a negative epoch",
            with(&|v| v["epoch"] = json!(-3)),
            "not a manifest",
        ),
    ];
    assert_eq!(parse_manifest(&with(&|_| {}), &key(), 3, 2).unwrap(), good);
    for (case, bytes, expected) in cases {
        let reason = corrupt_reason(parse_manifest(&bytes, &key(), 3, 2));
        assert!(
            reason.starts_with("acme/t1/e00000003/snap-000002.json"),
            "{case}: {reason}"
        );
        assert!(
            reason.contains(expected),
            "{case}: {reason:?} should mention {expected:?}"
        );
    }
}

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
        let m = upload_image(store, &key(), *epoch, *seq, &image, refs.last().cloned(), 1)
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
    let m = upload_image(&store, &key(), 1, 1, &image, None, 1)
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
