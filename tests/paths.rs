//! Containment of destructive local calls (promise 7 in docs/guarantees.md): the predecessor's P1 and P4,
//! and the guards of `remove_ledger_files` and `ensure_tenant_dir`.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use leasehold::ids::{IdError, tenant_root};
use leasehold::paths::{
    PathError, checked_tenant_dir, ensure_tenant_dir, remove_ledger_files, remove_tenant_dir,
};
use leasehold::{OrgId, TenantId, derive_tenant_id};

const PRECIOUS: &str = "precious.txt";

fn org() -> OrgId {
    OrgId::new("acme").unwrap()
}

fn tenant(subject: &str) -> TenantId {
    derive_tenant_id(&[9u8; 32], "https://idp.example/acme", subject).unwrap()
}

/// Makes `dir` with a file to keep in it.
fn keep(dir: &Path) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
    let file = dir.join(PRECIOUS);
    fs::write(&file, "keep").unwrap();
    file
}

fn kept(file: &Path) -> bool {
    fs::read_to_string(file).is_ok_and(|s| s == "keep")
}

fn is_refused<T: std::fmt::Debug>(result: Result<T, PathError>) -> bool {
    matches!(result, Err(PathError::Refused { .. }))
}

#[test]
fn p1_forget_never_deletes_outside_the_tenants_own_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (org, own, other) = (org(), tenant("user"), tenant("user-2"));
    let node = dir.path().join("node");
    let unrelated = keep(&dir.path().join("somebody-elses-files"));
    let sibling_dir = tenant_root(&node, &org, &other);
    let sibling = keep(&sibling_dir);
    // Whatever root the caller supplies, only `<root>/orgs/<org>/tenants/<tenant>` can go.
    for root in [dir.path().join("somebody-elses-files"), sibling_dir.clone()] {
        assert_eq!(remove_tenant_dir(&root, &org, &own), Ok(false), "{root:?}");
    }
    assert!(is_refused(remove_tenant_dir(
        &sibling_dir.join(".."),
        &org,
        &own
    )));
    assert!(kept(&unrelated) && kept(&sibling));
    let own_dir = tenant_root(&node, &org, &own);
    keep(&own_dir);
    assert_eq!(remove_tenant_dir(&node, &org, &own), Ok(true));
    assert!(
        !own_dir.exists(),
        "the tenant's own directory is the one that goes"
    );
    assert!(kept(&unrelated) && kept(&sibling));
    assert!(node.join("orgs/acme/tenants").is_dir());
}

#[test]
fn p1_bad_ids_cannot_even_be_constructed() {
    for bad in ["..", ".", "", "a/b", "../x", "a\0b", " "] {
        assert!(OrgId::new(bad).is_err(), "{bad:?}");
        assert!(TenantId::new(bad).is_err(), "{bad:?}");
    }
    assert!(matches!(OrgId::new(".."), Err(IdError::BadChar { .. })));
}

#[test]
fn p4_a_dotdot_behind_a_symlink_cannot_redirect_the_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let (org, t) = (org(), tenant("user"));
    let deep = dir.path().join("elsewhere/deep");
    fs::create_dir_all(&deep).unwrap();
    symlink(&deep, dir.path().join("lnk")).unwrap();
    // Read as text, `<dir>/lnk/..` is `<dir>`; the kernel reads it as `<dir>/elsewhere`.
    let textual = keep(&tenant_root(dir.path(), &org, &t));
    let behind_the_link = keep(&tenant_root(&dir.path().join("elsewhere"), &org, &t));
    let root = dir.path().join("lnk/..");
    assert!(is_refused(remove_tenant_dir(&root, &org, &t)));
    assert!(is_refused(remove_ledger_files(&root, &org, &t)));
    assert!(is_refused(ensure_tenant_dir(&root, &org, &t)));
    assert!(kept(&textual) && kept(&behind_the_link));
    assert_symlinks_below_the_root_are_refused(&dir.path().join("links"));
    // With a clean root, exactly the tenant's directory goes.
    assert_eq!(remove_tenant_dir(dir.path(), &org, &t), Ok(true));
    assert!(!textual.exists() && kept(&behind_the_link));
    assert!(dir.path().join("orgs/acme/tenants").is_dir());
}

/// A symlink at `orgs`, `<org>`, `tenants` or `<tenant>` is refused, and what it points to stays.
fn assert_symlinks_below_the_root_are_refused(base: &Path) {
    let (org, t) = (org(), tenant("user"));
    for depth in 1..=4 {
        let root = base.join(format!("root-{depth}"));
        let target = base.join(format!("target-{depth}"));
        let target_file = keep(&tenant_root(&target, &org, &t));
        // Replace the segment at `depth` below the root by a link to the same segment in target.
        let segments = ["orgs", org.as_str(), "tenants", t.as_str()];
        let rel: PathBuf = segments[..depth].iter().collect();
        fs::create_dir_all(root.join(&rel).parent().unwrap()).unwrap();
        symlink(target.join(&rel), root.join(&rel)).unwrap();
        assert!(is_refused(remove_tenant_dir(&root, &org, &t)), "{rel:?}");
        assert!(is_refused(remove_ledger_files(&root, &org, &t)), "{rel:?}");
        assert!(is_refused(ensure_tenant_dir(&root, &org, &t)), "{rel:?}");
        assert!(is_refused(checked_tenant_dir(&root, &org, &t)), "{rel:?}");
        assert!(kept(&target_file), "{rel:?}");
    }
}

#[test]
fn remove_ledger_files_removes_only_the_ledger_files() {
    let dir = tempfile::tempdir().unwrap();
    let (org, t) = (org(), tenant("user"));
    let tenant_dir = ensure_tenant_dir(dir.path(), &org, &t).unwrap();
    for name in ["ledger.db", "ledger.db-wal", "ledger.db-shm"] {
        fs::write(tenant_dir.join(name), "x").unwrap();
    }
    let others = ["ledger.db-journal", "ledger.db.bak", PRECIOUS].map(|n| tenant_dir.join(n));
    for file in &others {
        fs::write(file, "keep").unwrap();
    }
    assert_eq!(remove_ledger_files(dir.path(), &org, &t), Ok(()));
    let mut left: Vec<_> = fs::read_dir(&tenant_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["ledger.db-journal", "ledger.db.bak", PRECIOUS]);
    assert!(others.iter().all(|f| kept(f)));
    assert_eq!(
        remove_ledger_files(dir.path(), &org, &t),
        Ok(()),
        "twice is fine"
    );
    let missing = tenant("nobody");
    assert_eq!(remove_ledger_files(dir.path(), &org, &missing), Ok(()));
}

#[test]
fn ensure_tenant_dir_creates_the_directory_and_refuses_symlinked_segments() {
    let dir = tempfile::tempdir().unwrap();
    let (org, t) = (org(), tenant("user"));
    let root = dir.path().join("state");
    let made = ensure_tenant_dir(&root, &org, &t).unwrap();
    assert!(made.is_dir());
    assert_eq!(
        made,
        tenant_root(&fs::canonicalize(&root).unwrap(), &org, &t)
    );
    assert_eq!(
        ensure_tenant_dir(&root, &org, &t),
        Ok(made.clone()),
        "idempotent"
    );
    assert_eq!(checked_tenant_dir(&root, &org, &t), Ok(Some(made)));
    // A symlinked `tenants` is refused and nothing is created through it.
    let other_root = dir.path().join("other");
    let elsewhere = dir.path().join("elsewhere");
    fs::create_dir_all(other_root.join("orgs/acme")).unwrap();
    fs::create_dir_all(&elsewhere).unwrap();
    symlink(&elsewhere, other_root.join("orgs/acme/tenants")).unwrap();
    assert!(is_refused(ensure_tenant_dir(&other_root, &org, &t)));
    assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
}

#[test]
fn bad_state_roots_get_a_typed_error_and_touch_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (org, t) = (org(), tenant("user"));
    let own = keep(&tenant_root(dir.path(), &org, &t));
    let dotdot = dir.path().join("orgs/..");
    for root in [Path::new(""), dotdot.as_path()] {
        assert!(is_refused(remove_tenant_dir(root, &org, &t)), "{root:?}");
        assert!(is_refused(remove_ledger_files(root, &org, &t)), "{root:?}");
        assert!(is_refused(ensure_tenant_dir(root, &org, &t)), "{root:?}");
        assert!(is_refused(checked_tenant_dir(root, &org, &t)), "{root:?}");
    }
    assert!(kept(&own));
    let fresh = dir.path().join("fresh/..");
    assert!(is_refused(ensure_tenant_dir(&fresh, &org, &t)));
    assert!(!dir.path().join("fresh").exists(), "nothing was created");
    let absent = dir.path().join("absent");
    assert_eq!(remove_tenant_dir(&absent, &org, &t), Ok(false));
    assert!(!absent.exists());
}
