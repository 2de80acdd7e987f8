//! Private by default (docs/operations.md, "File permissions"): under the usual umask 022, every
//! directory the runtime creates is 0700 and every file 0600 — ledgers and their WAL and shm,
//! images, segments, manifests, staging files, the lease file and its sidecars, restored files,
//! the state root's lock and tenure markers — and a state root, durable directory or lease file
//! that lets the group or others in is refused unless accepted knowingly.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::*;
use leasehold::durable::dir::{DirOptions, DirStore};
use leasehold::lease::sqlite::{LeaseFileOptions, SqliteLeaseStore};
use leasehold::{DurableStore, Error, LeaseStore, ReplicaId};
use leasehold_actors::{RuntimeConfig, Supervisor};

/// Every directory and file under `root` (not `root` itself), with its permission bits.
fn walk(root: &Path) -> Vec<(PathBuf, bool, u32)> {
    let mut found = Vec::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            if meta.is_dir() {
                todo.push(entry.path());
            }
            found.push((entry.path(), meta.is_dir(), mode));
        }
    }
    found.sort();
    found
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The whole life of two tenants under umask 022 — open, commits shipped as segments, an
/// image, a handoff to a replica that restores image and segments, a forget, a point-in-time
/// restore to a file — leaves no directory but 0700 and no file but 0600 anywhere in the
/// fleet: the state roots, the durable directory and the lease file's directory.
#[actix_rt::test]
async fn under_umask_022_everything_the_runtime_creates_restores_and_moves_is_private() {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    for i in 0..3 {
        insert(&t, &format!("a-{i}")).await.unwrap();
    }
    t.snapshot().await.unwrap();
    insert(&t, "a-3").await.unwrap();
    t.handoff().await.unwrap();
    let b = fleet.replica("replica-b");
    let t = b.open().await;
    insert(&t, "b-0").await.unwrap();
    let gone = b.open2().await;
    insert(&gone, "x").await.unwrap();
    gone.forget().await.unwrap();
    let tip = fleet
        .leases
        .inner()
        .read(&key())
        .await
        .unwrap()
        .and_then(|r| r.tip)
        .expect("the tenant has a log");
    let restored = fleet.dir.path().join("restores");
    std::fs::create_dir(&restored).unwrap();
    set_mode(&restored, 0o700);
    let out = restored.join("acme-t1.db");
    restore_as_of(&fleet, tip, &out).await.unwrap();
    assert_eq!(keys_in_file(&out).len(), 5);

    let seen = walk(fleet.dir.path());
    let names: Vec<String> = seen
        .iter()
        .map(|(p, _, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in [
        "ledger.db",
        "ledger.db-wal",
        "ledger.db-shm",
        "leases.db",
        "leases.db-wal",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    for suffix in [".db", ".json", ".seg", "tenure", ".lock", "acme-t1.db"] {
        assert!(
            names.iter().any(|n| n.ends_with(suffix)),
            "a {suffix} in {names:?}"
        );
    }
    let wrong: Vec<String> = seen
        .iter()
        .filter(|(_, is_dir, mode)| *mode != if *is_dir { 0o700 } else { 0o600 })
        .map(|(p, is_dir, mode)| {
            format!(
                "{} ({}) {mode:04o}",
                p.display(),
                if *is_dir { "dir" } else { "file" }
            )
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "not private under umask 022:\n{}",
        wrong.join("\n")
    );
    t.handoff().await.unwrap();
    b.sup.close().await.unwrap();
    a.sup.close().await.unwrap();
}

/// A state root that lets the group or others in is refused at start with `NotPrivate`, naming
/// it and its mode, before anything is created in it; `accept_shared_permissions` accepts it.
#[actix_rt::test]
async fn a_shared_state_root_is_refused_unless_accepted() {
    let fleet = Fleet::new().await;
    let root = fleet.dir.path().join("shared-root");
    std::fs::create_dir(&root).unwrap();
    set_mode(&root, 0o755);
    let config = |accept| {
        let mut c = RuntimeConfig::new(
            ReplicaId::new("replica-s").unwrap(),
            &root,
            fleet.leases.shared(),
            fleet.durable.shared(),
        );
        c.accept_shared_permissions = accept;
        c
    };
    let refused = Supervisor::start(config(false)).expect_err("refused");
    assert_eq!(refused.code(), "LEASEHOLD_NOT_PRIVATE");
    assert_eq!(
        refused,
        Error::NotPrivate {
            path: root.display().to_string(),
            mode: 0o755
        }
    );
    assert!(refused.to_string().contains("0755"), "{refused}");
    assert!(walk(&root).is_empty(), "nothing was created in it");
    let sup = Supervisor::start(config(true)).expect("accepted knowingly");
    sup.close().await.unwrap();
}

/// `DirStore::open_with`: a missing root is created only when asked (else `Missing`, nothing
/// created); an existing shared root is refused unless accepted.
#[tokio::test]
async fn a_durable_directory_is_created_private_only_when_asked_and_a_shared_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo");
    let existing = DirOptions {
        create: false,
        ..DirOptions::default()
    };
    let refused = DirStore::open_with(&missing, existing).unwrap_err();
    assert_eq!(Error::from(refused).code(), "LEASEHOLD_STORE_MISSING");
    assert!(!missing.exists(), "nothing was created");
    let made = DirStore::open(&missing).unwrap();
    assert_eq!(
        std::fs::metadata(&missing).unwrap().permissions().mode() & 0o777,
        0o700
    );
    made.put_if_absent("acme/t1/e00000001/snap-000001.db", b"x".to_vec())
        .await
        .unwrap();
    set_mode(&missing, 0o750);
    let shared = DirStore::open(&missing).unwrap_err();
    assert_eq!(
        Error::from(shared),
        Error::NotPrivate {
            path: missing.display().to_string(),
            mode: 0o750
        }
    );
    let accept = DirOptions {
        accept_shared_permissions: true,
        ..existing
    };
    let reopened = DirStore::open_with(&missing, accept).unwrap();
    assert_eq!(reopened.list("").await.unwrap().len(), 1);
}

/// `SqliteLeaseStore::open_existing`: a missing file or a file that is no lease file is
/// `Missing` and left as it was; a shared lease file is refused unless accepted.
#[tokio::test]
async fn a_lease_file_is_created_private_only_when_asked_and_a_shared_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let existing = LeaseFileOptions {
        create: false,
        ..LeaseFileOptions::default()
    };
    let missing = dir.path().join("sub/leases.db");
    let refused = SqliteLeaseStore::open_existing(&missing, existing).unwrap_err();
    assert_eq!(Error::from(refused).code(), "LEASEHOLD_STORE_MISSING");
    assert!(!dir.path().join("sub").exists(), "nothing was created");
    let foreign = dir.path().join("other.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); PRAGMA journal_mode=DELETE;")
        .unwrap();
    set_mode(&foreign, 0o600);
    let before = std::fs::read(&foreign).unwrap();
    let refused = SqliteLeaseStore::open_existing(&foreign, existing).unwrap_err();
    assert_eq!(Error::from(refused).code(), "LEASEHOLD_STORE_MISSING");
    assert_eq!(std::fs::read(&foreign).unwrap(), before, "left as it was");
    SqliteLeaseStore::open(&missing).unwrap();
    assert_eq!(
        std::fs::metadata(&missing).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(missing.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    SqliteLeaseStore::open_existing(&missing, existing).unwrap();
    set_mode(&missing, 0o644);
    let shared = SqliteLeaseStore::open_existing(&missing, existing).unwrap_err();
    assert_eq!(Error::from(shared).code(), "LEASEHOLD_NOT_PRIVATE");
    let accept = LeaseFileOptions {
        accept_shared_permissions: true,
        ..existing
    };
    SqliteLeaseStore::open_existing(&missing, accept).unwrap();
}
