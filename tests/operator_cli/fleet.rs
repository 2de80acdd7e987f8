//! The operator command on a fleet's stores: leases in PostgreSQL (reached over TLS,
//! `sslmode=verify-full` with the test cluster's CA), images and segments in S3 (moto). The
//! servers come from `LEASEHOLD_TEST_PG_URL`, `LEASEHOLD_TEST_PG_CA`,
//! `LEASEHOLD_TEST_S3_ENDPOINT` and `LEASEHOLD_TEST_S3_BUCKET` (and the `AWS_*` variables the
//! command reads), which `scripts/test.sh` sets; without them these tests fail and say so.

use std::sync::Arc;
use std::time::Duration;

use leasehold::durable::s3::{S3Config, S3Store};
use leasehold::lease::postgres::PostgresLeaseStore;
use leasehold::{DurableStore, LeaseStore, ReplicaId};
use leasehold_actors::{RuntimeConfig, Supervisor};

use super::{Run, insert, key, leasehold, org, tenant};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: run this test through scripts/test.sh or scripts/with-servers.sh"
        )
    })
}

/// A table and a bucket prefix no other run uses.
fn unique() -> (String, String) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let id = format!("{}_{nanos}", std::process::id());
    (format!("cli_{id}"), format!("cli-{id}/"))
}

/// The stores, and the command-line flags that name them.
struct Stores {
    leases: Arc<PostgresLeaseStore>,
    durable: Arc<S3Store>,
    flags: Vec<String>,
}

async fn stores() -> Stores {
    let (table, prefix) = unique();
    let url = var("LEASEHOLD_TEST_PG_URL");
    let leases = Arc::new(PostgresLeaseStore::connect(&url, &table).await.unwrap());
    let bucket = var("LEASEHOLD_TEST_S3_BUCKET");
    let durable = Arc::new(
        S3Store::new(S3Config {
            endpoint: Some(var("LEASEHOLD_TEST_S3_ENDPOINT")),
            region: "us-east-1".into(),
            bucket: bucket.clone(),
            prefix: prefix.clone(),
            access_key_id: Some("testing".into()),
            secret_access_key: Some("testing".into()),
            allow_http: true,
        })
        .unwrap(),
    );
    let tls = format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        var("LEASEHOLD_TEST_PG_CA")
    );
    let flags = vec![
        "--leases".into(),
        tls,
        "--pg-table".into(),
        table,
        "--durable".into(),
        format!("s3://{bucket}/{prefix}"),
    ];
    Stores {
        leases,
        durable,
        flags,
    }
}

impl Stores {
    fn run(&self, args: &[&str]) -> Run {
        let mut all: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        all.extend_from_slice(args);
        leasehold(&all)
    }
}

/// The main tenant with an image and two segments above it, handed off by a real replica.
async fn tenant_on(stores: &Stores, root: &std::path::Path) -> usize {
    let mut config = RuntimeConfig::new(
        ReplicaId::new("replica-pg").unwrap(),
        root.join("replica-pg"),
        stores.leases.clone(),
        stores.durable.clone(),
    );
    // Short leases: should the handoff's release not reach the server (a loaded machine), the
    // lease ends by itself within seconds.
    config.ttl = Duration::from_secs(4);
    config.margin = Duration::from_secs(1);
    config.renew_every = Some(Duration::from_secs(1));
    let sup = Supervisor::start(config).unwrap();
    let t = sup.open(&org(), &tenant()).await.unwrap();
    for i in 0..3 {
        insert(&t, &format!("pg-{i}")).await.unwrap();
    }
    t.snapshot().await.unwrap();
    for i in 3..5 {
        insert(&t, &format!("pg-{i}")).await.unwrap();
    }
    t.handoff().await.unwrap();
    sup.close().await.unwrap();
    // No replica holds it now (released, or its lease ran out): what `forget` needs.
    for _ in 0..100 {
        let page = stores.leases.list(Some(&key()), 1).await.unwrap();
        if page.entries.first().is_some_and(|e| !e.is_live()) {
            return 5;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the tenant's lease is still held 10 s after its handoff");
}

#[actix_rt::test]
async fn every_verb_works_on_postgres_over_tls_and_s3() {
    let dir = tempfile::tempdir().unwrap();
    let stores = stores().await;
    let events = tenant_on(&stores, dir.path()).await;
    let k = key().to_string();
    let leases = stores.run(&["--json", "leases"]).ok().json();
    let lease = &leases["leases"][0];
    assert_eq!(lease["key"].as_str(), Some(k.as_str()));
    assert_ne!(lease["state"], "held", "{lease}");
    assert!(lease["tip"]["seq"].as_u64().unwrap() >= 5, "{lease}");
    let inspect = stores.run(&["--json", "inspect", &k]).ok().json();
    assert_eq!(inspect["verified"], true, "{inspect}");
    assert_eq!(inspect["chain"]["segments"], 2, "{inspect}");
    let verify = stores.run(&["--json", "verify"]).ok().json();
    assert_eq!(
        (verify["verified"].as_u64(), verify["failed"].as_u64()),
        (Some(1), Some(0))
    );
    let file = dir.path().join("restored.db");
    let to = file.display().to_string();
    let restored = stores
        .run(&["--json", "restore", &k, "--to", &to])
        .ok()
        .json();
    assert_eq!(restored["integrity_check"], "ok");
    assert_eq!(super::keys_in_file(&file).len(), events);
    let swept = stores.run(&["--json", "sweep"]).ok().json();
    assert_eq!(swept["tenants"], 1);
    let forgot = stores
        .run(&["--json", "forget", &k, "--put-lifetime", "0s"])
        .ok()
        .json();
    assert_eq!(forgot["erasure"], "done");
    assert!(
        stores.durable.list("").await.unwrap().is_empty(),
        "erased from S3"
    );
    let due = stores
        .leases
        .erasures_due(Duration::ZERO, 100)
        .await
        .unwrap();
    assert!(due.is_empty(), "{due:?}");
    stores
        .durable
        .delete_prefix(&format!("{}/", org()))
        .await
        .unwrap();
}

#[actix_rt::test]
async fn a_missing_table_or_bucket_is_named_and_not_created() {
    let stores = stores().await;
    let mut flags = stores.flags.clone();
    flags[3] = format!("{}_missing", flags[3]);
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.push("leases");
    let run = leasehold(&args);
    assert_eq!(run.status, 3, "{}", run.stderr);
    assert!(run.stderr.contains("_missing"), "{}", run.stderr);
    let again = PostgresLeaseStore::connect_existing(
        &var("LEASEHOLD_TEST_PG_URL"),
        &flags[3],
        Default::default(),
    )
    .await;
    assert_eq!(
        again.unwrap_err().code(),
        "LEASEHOLD_STORE_MISSING",
        "not created"
    );
    let mut flags = stores.flags.clone();
    flags[5] = "s3://leasehold-no-such-bucket/p/".into();
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend(["--json", "sweep"]);
    let run = leasehold(&args);
    assert_eq!(run.status, 3, "{}", run.stderr);
    assert_eq!(run.json()["error"]["code"], "LEASEHOLD_STORE_MISSING");
}

/// Hole 15 (promise 5): `leasehold sweep` reaches a fleet — leases in PostgreSQL, images in S3 —
/// and deletes the dead epochs of a tenant never opened again, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_sweep_reaches_a_fleet_on_postgres_and_s3() {
    let stores = stores().await;
    let (gone, live) = (
        leasehold::LeaseKey::parse("acme/forgotten").unwrap(),
        leasehold::LeaseKey::parse("acme/live").unwrap(),
    );
    let ttl = Duration::from_secs(60);
    let r = stores
        .leases
        .acquire(&gone, "replica-a", ttl)
        .await
        .unwrap();
    stores
        .leases
        .mark_forgotten(&gone, "replica-a", r.epoch)
        .await
        .unwrap();
    stores
        .leases
        .release(&gone, "replica-a", r.epoch)
        .await
        .unwrap();
    stores
        .leases
        .acquire(&live, "replica-b", ttl)
        .await
        .unwrap();
    for object in [
        "acme/forgotten/e00000001/snap-000009.db",
        "acme/forgotten/e00000001/snap-000009.json",
        "acme/forgotten/e00000002/snap-000001.db",
        "acme/live/e00000001/snap-000001.db",
    ] {
        stores
            .durable
            .put_if_absent(object, b"x".to_vec())
            .await
            .unwrap();
    }
    let run = stores.run(&["sweep"]).ok();
    assert!(run.stdout.contains("2 objects deleted"), "{}", run.stdout);
    assert!(
        run.stderr.contains("swept 2/2 tenants"),
        "progress: {}",
        run.stderr
    );
    assert_eq!(
        stores.durable.list("").await.unwrap(),
        [
            "acme/forgotten/e00000002/snap-000001.db",
            "acme/live/e00000001/snap-000001.db"
        ]
    );
    stores.durable.delete_prefix("acme/").await.unwrap();
}
