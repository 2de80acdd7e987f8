//! The operator command: `leasehold sweep` deletes dead epochs of tenants never opened again, and
//! nothing else; `leasehold lease` prints a record; bad input is refused.

use std::process::Command;

use leasehold::durable::dir::DirStore;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::{DurableStore, LeaseKey, LeaseStore};

fn cli(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("--leases")
        .arg(dir.join("leases.db"))
        .arg("--durable")
        .arg(dir.join("durable"))
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test]
async fn sweep_deletes_dead_epochs_of_tenants_never_opened_again_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let leases = SqliteLeaseStore::open(&dir.path().join("leases.db")).unwrap();
    let durable = DirStore::open(&dir.path().join("durable")).unwrap();
    let gone = LeaseKey::parse("acme/forgotten").unwrap();
    let live = LeaseKey::parse("acme/live").unwrap();
    // `gone` was forgotten at epoch 1; a superseded owner's late upload then landed there.
    let r = leases
        .acquire(&gone, "replica-a", std::time::Duration::from_secs(60))
        .await
        .unwrap();
    leases
        .mark_forgotten(&gone, "replica-a", r.epoch)
        .await
        .unwrap();
    leases.release(&gone, "replica-a", r.epoch).await.unwrap();
    for key in [
        "acme/forgotten/e00000001/snap-000009.db",
        "acme/forgotten/e00000002/snap-000001.db",
        "acme/live/e00000001/snap-000001.db",
    ] {
        durable.put_if_absent(key, b"x".to_vec()).await.unwrap();
    }
    leases
        .acquire(&live, "replica-b", std::time::Duration::from_secs(60))
        .await
        .unwrap();
    let out = cli(dir.path(), &["sweep"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("1 objects deleted"), "{stdout}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("swept 2/2 tenants"),
        "progress is shown"
    );
    assert_eq!(
        durable.list("").await.unwrap(),
        [
            "acme/forgotten/e00000002/snap-000001.db",
            "acme/live/e00000001/snap-000001.db"
        ]
    );
}

#[test]
fn lease_prints_a_record_and_refuses_a_bad_key() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(dir.path(), &["lease", "acme/t1"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("never acquired"));
    let out = cli(dir.path(), &["lease", "acme/../x"]);
    assert!(!out.status.success(), "a bad key is refused");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("invalid")
            || String::from_utf8_lossy(&out.stderr).contains("'..'")
    );
}
