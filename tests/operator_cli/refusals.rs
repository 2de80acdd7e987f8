//! What the operator command refuses, and that a refusal touches nothing: bad arguments (exit
//! 2, a message saying what is wrong, one JSON document with `--json`), missing stores (exit 3,
//! named, nothing created), a shared durable directory (exit 7 unless accepted).

use std::path::{Path, PathBuf};

use leasehold::lease::sqlite::SqliteLeaseStore;

use super::{key, leasehold, on, tenant_with_a_log};

/// Every file and directory under `dir`.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            if entry.path().is_dir() {
                todo.push(entry.path());
            }
            found.push(entry.path());
        }
    }
    found.sort();
    found
}

#[actix_rt::test]
async fn bad_arguments_are_refused_with_a_clear_message_and_touch_nothing() {
    let (fleet, _) = tenant_with_a_log().await;
    let dir = fleet.dir.path();
    let before = tree(dir);
    let target = dir.join("r.db").display().to_string();
    let cases: [(&[&str], &str); 8] = [
        (&["inspect", "acme/../x"], "not a tenant"),
        (&["forget", "acme"], "not a tenant"),
        (&["leases", "--limit", "0"], "--limit"),
        (
            &["restore", "acme/t1", "--to", &target, "--at", "soon"],
            "no restore target",
        ),
        (&["sweep", "--put-lifetime", "2 days"], "unknown unit"),
        (&["verify", "acme/t1/x"], "not a tenant"),
        (&["--store-deadline", "soon", "leases"], "no duration"),
        (&["frobnicate"], "frobnicate"),
    ];
    let durable = dir.join("durable").display().to_string();
    let own_stores: [(&[&str], &str); 2] = [
        (&["--leases", "leases.db", "leases"], "sqlite://leases.db"),
        (
            &["--durable", "gs://b", "--leases", "sqlite://l.db", "sweep"],
            "unknown scheme",
        ),
    ];
    for (args, says) in own_stores {
        let run = leasehold(args);
        assert_eq!(run.status, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(says),
            "{args:?}: want {says:?} in {}",
            run.stderr
        );
    }
    assert_eq!(
        leasehold(&["--durable", &durable, "leases"]).status,
        2,
        "no --leases"
    );
    for (args, says) in cases {
        let run = on(dir, args);
        assert_eq!(run.status, 2, "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(says),
            "{args:?}: want {says:?} in {}",
            run.stderr
        );
        let mut json = vec!["--json"];
        json.extend_from_slice(args);
        let doc = on(dir, &json);
        assert_eq!(doc.status, 2, "{args:?}");
        assert_eq!(doc.json()["error"]["status"], "usage", "{args:?}");
    }
    let no_stores = leasehold(&["leases"]);
    assert_eq!(no_stores.status, 2);
    assert!(
        no_stores.stderr.contains("--leases"),
        "{}",
        no_stores.stderr
    );
    let to_missing_dir = on(
        dir,
        &["restore", key().as_str(), "--to", "/nonexistent/dir/r.db"],
    );
    assert_eq!(to_missing_dir.status, 2, "{}", to_missing_dir.stderr);
    assert_eq!(tree(dir), before, "nothing was created or removed");
}

#[test]
fn missing_stores_are_named_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let lease_file = SqliteLeaseStore::open(&d.join("leases.db"));
    drop(lease_file);
    let before = tree(d);
    let leases = format!("sqlite://{}", d.join("leases.db").display());
    let typo = d.join("durabel").display().to_string();
    let run = leasehold(&["--leases", &leases, "--durable", &typo, "sweep"]);
    assert_eq!(run.status, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains("durabel") && run.stderr.contains("does not exist"),
        "{}",
        run.stderr
    );
    let missing = format!("sqlite://{}", d.join("typo.db").display());
    let run = leasehold(&["--json", "--leases", &missing, "leases"]);
    assert_eq!(run.status, 3);
    assert_eq!(run.json()["error"]["code"], "LEASEHOLD_STORE_MISSING");
    assert!(run.stderr.contains("typo.db"), "{}", run.stderr);
    std::fs::write(d.join("other.db"), b"").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.join("other.db"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let not_leases = format!("sqlite://{}", d.join("other.db").display());
    assert_eq!(leasehold(&["--leases", &not_leases, "leases"]).status, 3);
    std::fs::remove_file(d.join("other.db")).unwrap();
    assert_eq!(
        tree(d),
        before,
        "no directory, lease file or sidecar was created"
    );
}

#[test]
fn a_shared_durable_directory_is_refused_unless_accepted_knowingly() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    SqliteLeaseStore::open(&d.join("leases.db")).unwrap();
    std::fs::create_dir(d.join("durable")).unwrap();
    std::fs::set_permissions(d.join("durable"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let refused = on(d, &["sweep"]);
    assert_eq!(refused.status, 7, "{}", refused.stderr);
    assert!(refused.stderr.contains("0755"), "{}", refused.stderr);
    on(d, &["--accept-shared-permissions", "sweep"]).ok();
}
