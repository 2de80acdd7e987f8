//! Images: consistency while a writer commits, taking an image over an old file, the final image
//! of a frozen ledger, uploads and their manifests, and every corruption of a manifest. Fetching
//! along the chain and installing a restore are in `tests/restore.rs`.

mod image_fixtures;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use image_fixtures::{MemStore, corrupt_reason, image_of, key, keys_in, ledger_at, ledger_file};
use leasehold::durable::DurableStore;
use leasehold::image::{
    self, FORMAT_VERSION, ImageError, ImageMethod, Manifest, install_image, parse_manifest,
    take_image, take_image_with, upload_image,
};
use leasehold::layout::{ImageRef, LogPos, image_key, manifest_key};
use leasehold::ledger::NewEvent;
use serde_json::json;

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
    let manifest = upload_image(
        &store,
        &key(),
        3,
        1,
        &image,
        Some(base.clone()),
        Some(LogPos { epoch: 3, seq: 9 }),
        false,
        1_700,
    )
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
            beyond_log: false,
            log: Some(LogPos { epoch: 3, seq: 9 }),
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
    upload_image(&store, &key(), 3, 1, &first, None, None, false, 1)
        .await
        .unwrap();
    let again = upload_image(&store, &key(), 3, 1, &second, None, None, false, 2).await;
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
    let again = upload_image(&store, &key(), 3, 1, &second, None, None, false, 2).await;
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
    corrupt_reason(upload_image(&store, &key(), 3, 1, &image, None, None, false, 1).await);
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
        beyond_log: false,
        log: None,
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
