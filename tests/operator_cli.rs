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

/// Hole 15 (promise 5): `leasehold sweep` reaches a fleet — leases in PostgreSQL, images in S3 —
/// and deletes the dead epochs of a tenant never opened again, and nothing else. The servers
/// come from `LEASEHOLD_TEST_PG_URL`, `LEASEHOLD_TEST_S3_ENDPOINT` and
/// `LEASEHOLD_TEST_S3_BUCKET`, which `scripts/test.sh` sets; without them this test fails and
/// says so.
#[cfg(all(feature = "postgres", feature = "s3"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_sweep_reaches_a_fleet_on_postgres_and_s3() {
    use leasehold::durable::s3::{S3Config, S3Store};
    use leasehold::lease::postgres::PostgresLeaseStore;

    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: run this test through scripts/test.sh or scripts/with-servers.sh")
        })
    };
    let (pg_url, endpoint, bucket) = (
        var("LEASEHOLD_TEST_PG_URL"),
        var("LEASEHOLD_TEST_S3_ENDPOINT"),
        var("LEASEHOLD_TEST_S3_BUCKET"),
    );
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let (table, prefix) = (
        format!("cli_sweep_{}_{nanos}", std::process::id()),
        format!("cli-sweep-{}-{nanos}/", std::process::id()),
    );
    let leases = PostgresLeaseStore::connect(&pg_url, &table).await.unwrap();
    let durable = S3Store::new(S3Config {
        endpoint: Some(endpoint.clone()),
        region: "us-east-1".into(),
        bucket: bucket.clone(),
        prefix: prefix.clone(),
        access_key_id: Some("testing".into()),
        secret_access_key: Some("testing".into()),
        allow_http: true,
    })
    .unwrap();
    let (gone, live) = (
        LeaseKey::parse("acme/forgotten").unwrap(),
        LeaseKey::parse("acme/live").unwrap(),
    );
    let ttl = std::time::Duration::from_secs(60);
    let r = leases.acquire(&gone, "replica-a", ttl).await.unwrap();
    leases
        .mark_forgotten(&gone, "replica-a", r.epoch)
        .await
        .unwrap();
    leases.release(&gone, "replica-a", r.epoch).await.unwrap();
    leases.acquire(&live, "replica-b", ttl).await.unwrap();
    for key in [
        "acme/forgotten/e00000001/snap-000009.db",
        "acme/forgotten/e00000001/snap-000009.json",
        "acme/forgotten/e00000002/snap-000001.db",
        "acme/live/e00000001/snap-000001.db",
    ] {
        durable.put_if_absent(key, b"x".to_vec()).await.unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["--pg-url", &pg_url, "--pg-table", &table])
        .args(["--s3-endpoint", &endpoint, "--s3-bucket", &bucket])
        .args(["--s3-prefix", &prefix, "sweep"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("2 objects deleted"), "{stdout}");
    assert!(
        stderr.contains("swept 2/2 tenants"),
        "progress is shown: {stderr}"
    );
    assert_eq!(
        durable.list("").await.unwrap(),
        [
            "acme/forgotten/e00000002/snap-000001.db",
            "acme/live/e00000001/snap-000001.db"
        ]
    );
    durable.delete_prefix("acme/").await.unwrap();
}
