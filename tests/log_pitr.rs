//! Point-in-time restore (docs/guarantees.md, the change log; docs/testing.md, "The change
//! log"): the state as of a log position or a time within the retention window, written to a
//! new plain SQLite file from the newest image at or before it plus the segments up to it.
//! Bad input — an existing destination, a target outside the window — touches nothing.

mod log_support;

use std::path::Path;

use leasehold::durable::DurableStore;
use leasehold::image::sha256_hex;
use leasehold::layout::{ImageRef, LogPos, segment_key};
use leasehold::log::{LogError, Target, restore_to_from};
use log_support::{Db, Log, Watched, integrity, key, publish, rows};

/// v1, v2, v3: one segment each (cut at 1,000, 2,000 and 3,000 ms), an image of v2 between
/// segments 2 and 3.
struct History {
    store: Watched,
    states: Vec<Vec<u8>>,
    pos: Vec<LogPos>,
    image: ImageRef,
    tip: LogPos,
}

async fn history(dir: &Path) -> History {
    let store = Watched::default();
    let db = Db::create(dir, "writer.db");
    let mut log = Log::new();
    let (mut states, mut pos) = (Vec::new(), Vec::new());
    let mut image = None;
    for (i, sql) in [
        "CREATE TABLE kv(k TEXT PRIMARY KEY, v TEXT); INSERT INTO kv VALUES ('version', 'v1');",
        "UPDATE kv SET v = 'v2'; INSERT INTO kv VALUES ('extra', hex(randomblob(600)));",
        "UPDATE kv SET v = 'v3' WHERE k = 'version'; DELETE FROM kv WHERE k = 'extra';",
    ]
    .iter()
    .enumerate()
    {
        db.run(sql);
        let bytes = db.bytes();
        pos.push(log.ship(&store, 4, &bytes, 1_000 * (i as u64 + 1)).await);
        if i == 1 {
            image = Some(publish(&store, dir, (4, 1), &bytes, None, Some(pos[1])).await);
        }
        states.push(bytes);
    }
    History {
        store,
        states,
        pos,
        image: image.unwrap(),
        tip: log.tip.unwrap(),
    }
}

fn version(path: &Path) -> Vec<String> {
    rows(path, "SELECT v FROM kv WHERE k = 'version'")
}

#[tokio::test]
async fn cl7_every_position_and_time_restores_its_state() {
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path()).await;
    let cases = [
        (Target::Position(h.pos[0]), 0, None, 1),
        (Target::Position(h.pos[1]), 1, Some(h.image.clone()), 0),
        (Target::Position(h.pos[2]), 2, Some(h.image.clone()), 1),
        (Target::Time { unix_ms: 1_500 }, 0, None, 1),
        (Target::Time { unix_ms: 2_000 }, 1, Some(h.image.clone()), 0),
        (Target::Time { unix_ms: 2_999 }, 1, Some(h.image.clone()), 0),
        (
            Target::Time { unix_ms: 99_000 },
            2,
            Some(h.image.clone()),
            1,
        ),
    ];
    for (i, (target, state, image, segments)) in cases.into_iter().enumerate() {
        let dest = dir.path().join(format!("pitr-{i}.db"));
        let report = restore_to_from(&h.store, &key(), Some(h.tip), 0, target, &dest)
            .await
            .unwrap();
        let bytes = std::fs::read(&dest).unwrap();
        assert_eq!(sha256_hex(&bytes), sha256_hex(&h.states[state]), "{target}");
        assert_eq!(report.sha256, sha256_hex(&bytes));
        assert_eq!(report.position, h.pos[state], "{target}");
        assert_eq!(
            (report.image, report.segments),
            (image, segments),
            "{target}"
        );
        assert_eq!(integrity(&dest), "ok");
        assert_eq!(version(&dest), [format!("Text(\"v{}\")", state + 1)]);
        for leftover in ["-wal", "-journal", ".pitr-restoring"] {
            let mut p = dest.clone().into_os_string();
            p.push(leftover);
            assert!(!Path::new(&p).exists(), "{target}: {leftover}");
        }
    }
}

/// Final review, hole 5 in point-in-time restore: an image at the target's position was served
/// as the log's state there on its manifest's word. A manifest whose `log` was damaged (one digit)
/// made an image of v1 claim v2's position, and a restore to that position returned v1. An image
/// used as the log's state at a position must sum to what the segment there left; one that does
/// not is passed over (here for the true image of v2).
#[tokio::test]
async fn cl7_an_image_whose_manifest_names_the_wrong_position_is_never_served_as_it() {
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path()).await;
    publish(
        &h.store,
        dir.path(),
        (4, 2),
        &h.states[0],
        None,
        Some(h.pos[1]),
    )
    .await;
    let dest = dir.path().join("v2.db");
    restore_to_from(
        &h.store,
        &key(),
        Some(h.tip),
        0,
        Target::Position(h.pos[1]),
        &dest,
    )
    .await
    .unwrap();
    assert_eq!(version(&dest), ["Text(\"v2\")"]);
    assert_eq!(std::fs::read(&dest).unwrap(), h.states[1]);
}

#[tokio::test]
async fn cl7_a_target_outside_the_retention_window_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path()).await;
    let dest = dir.path().join("pitr.db");
    let beyond = LogPos { epoch: 4, seq: 4 };
    let off_chain = LogPos { epoch: 3, seq: 2 };
    for target in [
        Target::Time { unix_ms: 999 },
        Target::Position(beyond),
        Target::Position(off_chain),
    ] {
        let err = restore_to_from(&h.store, &key(), Some(h.tip), 0, target, &dest)
            .await
            .unwrap_err();
        assert!(
            matches!(err, LogError::OutsideRetention { .. }),
            "{target}: {err:?}"
        );
        assert_eq!(
            leasehold::Error::from(err).code(),
            "LEASEHOLD_INVALID_OPTION"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            2,
            "{target}"
        );
    }
    // Segment 1 expired: v1 is out of the window; v3 is still reached through the image.
    h.store
        .delete(&segment_key(&key(), h.pos[0]))
        .await
        .unwrap();
    let err = restore_to_from(
        &h.store,
        &key(),
        Some(h.tip),
        0,
        Target::Position(h.pos[0]),
        &dest,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, LogError::OutsideRetention { .. }), "{err:?}");
    assert!(!dest.exists());
    restore_to_from(
        &h.store,
        &key(),
        Some(h.tip),
        0,
        Target::Position(h.pos[2]),
        &dest,
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), h.states[2]);
    // No log at all.
    let err = restore_to_from(
        &h.store,
        &key(),
        None,
        0,
        Target::Time { unix_ms: 5 },
        &dir.path().join("x.db"),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, LogError::OutsideRetention { .. }), "{err:?}");
}

#[tokio::test]
async fn cl7_an_existing_destination_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path()).await;
    let dest = dir.path().join("precious.db");
    std::fs::write(&dest, b"keep me").unwrap();
    let err = restore_to_from(
        &h.store,
        &key(),
        Some(h.tip),
        0,
        Target::Position(h.tip),
        &dest,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, LogError::Destination { .. }), "{err:?}");
    assert_eq!(leasehold::Error::from(err).code(), "LEASEHOLD_INVALID_PATH");
    assert_eq!(std::fs::read(&dest).unwrap(), b"keep me");
    assert!(
        h.store.reads.lock().unwrap().is_empty(),
        "refused before any store call"
    );
}

#[tokio::test]
async fn cl7_the_floor_bounds_what_a_point_in_time_restore_reads() {
    let dir = tempfile::tempdir().unwrap();
    let h = history(dir.path()).await;
    let err = restore_to_from(
        &h.store,
        &key(),
        Some(h.tip),
        4,
        Target::Position(h.tip),
        &dir.path().join("pitr.db"),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, LogError::OutsideRetention { .. }), "{err:?}");
    assert!(
        !h.store
            .reads
            .lock()
            .unwrap()
            .iter()
            .any(|k| k.ends_with(".seg"))
    );
}

/// Across a change of durability mode: epoch 4 ships v1, v2; a tenure without a log (epoch 5)
/// writes v3 and images it beyond the log at v2's position; epoch 6 continues the log from that
/// image (v4). The positions before the change restore the log's states, those after it start
/// from the image; without the image they are refused, never served wrong.
#[tokio::test]
async fn cl7_positions_after_a_change_of_mode_start_from_the_image_the_log_continued_from() {
    use leasehold::image::{ImageFile, upload_image};
    let dir = tempfile::tempdir().unwrap();
    let store = Watched::default();
    let db = Db::create(dir.path(), "writer.db");
    let mut log = Log::new();
    let mut states = Vec::new();
    for (i, sql) in [
        "CREATE TABLE kv(k TEXT PRIMARY KEY, v TEXT); INSERT INTO kv VALUES ('version', 'v1');",
        "UPDATE kv SET v = 'v2';",
    ]
    .iter()
    .enumerate()
    {
        db.run(sql);
        log.ship(&store, 4, &db.bytes(), 1_000 * (i as u64 + 1))
            .await;
        states.push(db.bytes());
    }
    let switch = log.tip.unwrap();
    db.run("UPDATE kv SET v = 'v3';");
    let beyond = db.bytes();
    let path = dir.path().join("beyond.db");
    std::fs::write(&path, &beyond).unwrap();
    let file = ImageFile {
        path,
        size: beyond.len() as u64,
        sha256: sha256_hex(&beyond),
    };
    upload_image(&store, &key(), 5, 1, &file, None, Some(switch), true, 2_500)
        .await
        .unwrap();
    log.last = beyond;
    db.run("UPDATE kv SET v = 'v4';");
    let after = log.ship(&store, 6, &db.bytes(), 3_000).await;
    states.push(db.bytes());
    for (i, (target, state, v)) in [
        (Target::Position(switch), 1, "v2"),
        (Target::Time { unix_ms: 2_900 }, 1, "v2"),
        (Target::Position(after), 2, "v4"),
        (Target::Time { unix_ms: 3_000 }, 2, "v4"),
    ]
    .into_iter()
    .enumerate()
    {
        let dest = dir.path().join(format!("pitr-{i}.db"));
        restore_to_from(&store, &key(), Some(after), 0, target, &dest)
            .await
            .unwrap_or_else(|e| panic!("{target}: {e}"));
        assert_eq!(std::fs::read(&dest).unwrap(), states[state], "{target}");
        assert_eq!(version(&dest), [format!("Text(\"{v}\")")]);
    }
    store
        .delete(&leasehold::layout::image_key(&key(), 5, 1))
        .await
        .unwrap();
    let dest = dir.path().join("gone.db");
    let err = restore_to_from(
        &store,
        &key(),
        Some(after),
        0,
        Target::Position(after),
        &dest,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, LogError::OutsideRetention { .. }), "{err:?}");
    assert!(!dest.exists());
}

/// Final review, hole 4: retention kept, at a change of mode, the newest image beyond the log at
/// that position — and the newest may be one no log ever continued from: an `Images` tenure
/// that crashed between its manifest's put and its head's move leaves a complete image that no
/// head ever named (no replica remembers it, and the orphan look takes only lone images and
/// manifests). Here epoch 5 (`Images`) publishes v3 beyond the log at v2's position; epoch 6
/// (`Images`) restores it, writes v3b and crashes after its manifest; epoch 7 (`Shipped`)
/// restores the head, epoch 5's image, and continues the log (v4, v5), and compacts (head at
/// v5). With both `Images` images older than `retain` and the log after the switch younger,
/// retention kept epoch 6's image and deleted epoch 5's, and the window's moment v4 answered
/// `OutsideRetention`. The image kept is the one on the head's chain of bases.
#[tokio::test]
async fn cl7_a_change_of_mode_keeps_the_image_the_log_continued_from_not_a_newer_one() {
    use leasehold::image::{ImageFile, upload_image};
    use leasehold::lease::LeaseRecord;
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let store = Watched::default();
    let db = Db::create(dir.path(), "writer.db");
    let mut log = Log::new();
    db.run("CREATE TABLE kv(k TEXT PRIMARY KEY, v TEXT); INSERT INTO kv VALUES ('version', 'v1');");
    log.ship(&store, 4, &db.bytes(), 1_000).await;
    db.run("UPDATE kv SET v = 'v2';");
    let switch = log.ship(&store, 4, &db.bytes(), 2_000).await;
    let beyond = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        ImageFile {
            path,
            size: bytes.len() as u64,
            sha256: sha256_hex(bytes),
        }
    };
    db.run("UPDATE kv SET v = 'v3';");
    let v3 = db.bytes();
    let continued = upload_image(
        &store,
        &key(),
        5,
        1,
        &beyond("e5.db", &v3),
        None,
        Some(switch),
        true,
        2_500,
    )
    .await
    .unwrap()
    .image_ref();
    db.run("UPDATE kv SET v = 'v3b';");
    let base = Some(continued.clone());
    upload_image(
        &store,
        &key(),
        6,
        1,
        &beyond("e6.db", &db.bytes()),
        base.clone(),
        Some(switch),
        true,
        2_600,
    )
    .await
    .unwrap();
    // Epoch 7 restored epoch 5's image (the head): its log continues from v3.
    db.run("UPDATE kv SET v = 'v3';");
    log.last = v3;
    db.run("UPDATE kv SET v = 'v4';");
    let v4 = db.bytes();
    let at_v4 = log.ship(&store, 7, &v4, 3_000).await;
    db.run("UPDATE kv SET v = 'v5';");
    let tip = log.ship(&store, 7, &db.bytes(), 3_200).await;
    let head = upload_image(
        &store,
        &key(),
        7,
        1,
        &beyond("e7.db", &db.bytes()),
        base,
        Some(tip),
        false,
        3_300,
    )
    .await
    .unwrap()
    .image_ref();
    let record = LeaseRecord {
        key: key().to_string(),
        owner: "c".into(),
        epoch: 7,
        expires_at_ms: 0,
        released: false,
        floor: 0,
        head: Some(head),
        tip: Some(tip),
    };
    // The cutoff (2,700) lies after both `Images` images and before the log after the switch.
    leasehold::sweep::sweep_retention(&store, &key(), &record, 3_700, Duration::from_millis(1_000))
        .await
        .unwrap();
    let dest = dir.path().join("v4.db");
    restore_to_from(&store, &key(), Some(tip), 0, Target::Position(at_v4), &dest)
        .await
        .unwrap_or_else(|e| panic!("v4, a moment of the window: {e}"));
    assert_eq!(std::fs::read(&dest).unwrap(), v4);
}
