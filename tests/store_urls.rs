//! Store URLs (`leasehold::stores`): a replica's open creates a missing lease file, durable
//! directory or lease table; an operator's open (`IfMissing::Refuse`) refuses each with
//! `StoreMissing` and creates nothing — a mistyped path must not read as an empty store
//! (docs/operations.md, store URLs).
//!
//! The PostgreSQL and S3 cases need the servers `scripts/test.sh` starts
//! (`LEASEHOLD_TEST_PG_URL`, `LEASEHOLD_TEST_S3_BUCKET` and the `AWS_*` variables).

use leasehold::Error;
use leasehold::stores::{DurableStoreUrl, IfMissing, LeaseStoreUrl};

fn missing(outcome: Result<impl std::fmt::Debug, Error>) -> (&'static str, String) {
    match outcome {
        Err(Error::StoreMissing { store, location }) => (store, location),
        other => panic!("expected StoreMissing, got {other:?}"),
    }
}

#[tokio::test]
async fn refusing_a_missing_lease_file_or_directory_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let leases = dir.path().join("typo").join("leases.db");
    let url = LeaseStoreUrl::parse(&format!("sqlite://{}", leases.display())).unwrap();
    let (store, location) = missing(url.open(IfMissing::Refuse).await);
    assert_eq!(
        (store, location),
        ("lease file", leases.display().to_string())
    );

    let durable = dir.path().join("durabel");
    let url = DurableStoreUrl::parse(durable.to_str().unwrap()).unwrap();
    let (store, _) = missing(url.open(IfMissing::Refuse).await);
    assert_eq!(store, "durable directory");

    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "nothing may be created: {left:?}");
}

#[tokio::test]
async fn a_replica_creates_its_stores_and_an_operator_then_opens_them() {
    let dir = tempfile::tempdir().unwrap();
    let leases = LeaseStoreUrl::parse(dir.path().join("leases.db").to_str().unwrap()).unwrap();
    let durable =
        DurableStoreUrl::parse(&format!("file://{}", dir.path().join("durable").display()))
            .unwrap();
    leases.open(IfMissing::Create).await.unwrap();
    durable.open(IfMissing::Create).await.unwrap();
    assert!(dir.path().join("leases.db").is_file());
    assert!(dir.path().join("durable").is_dir());
    leases.open(IfMissing::Refuse).await.unwrap();
    let store = durable.open(IfMissing::Refuse).await.unwrap();
    assert_eq!(store.list("").await.unwrap(), Vec::<String>::new());
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn an_absent_lease_table_is_refused_by_an_operator_and_created_by_a_replica() {
    let server = std::env::var("LEASEHOLD_TEST_PG_URL")
        .expect("LEASEHOLD_TEST_PG_URL is not set: run scripts/test.sh or scripts/with-servers.sh");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let table = format!("lh_urls_{nanos}");
    let sep = if server.contains('?') { '&' } else { '?' };
    let url = LeaseStoreUrl::parse(&format!("{server}{sep}table={table}")).unwrap();
    let (store, location) = missing(url.open(IfMissing::Refuse).await);
    assert_eq!((store, location.as_str()), ("lease table", table.as_str()));
    // Still absent: the refusal created nothing.
    let (store, _) = missing(url.open(IfMissing::Refuse).await);
    assert_eq!(store, "lease table");
    url.open(IfMissing::Create).await.unwrap();
    url.open(IfMissing::Refuse).await.unwrap();
}

#[cfg(feature = "s3")]
#[tokio::test]
async fn an_operator_open_of_s3_checks_that_the_bucket_answers() {
    let bucket = std::env::var("LEASEHOLD_TEST_S3_BUCKET").expect(
        "LEASEHOLD_TEST_S3_BUCKET is not set: run scripts/test.sh or scripts/with-servers.sh",
    );
    let url = DurableStoreUrl::parse(&format!("s3://{bucket}/store-urls")).unwrap();
    url.open(IfMissing::Refuse).await.unwrap();
    let absent = DurableStoreUrl::parse("s3://leasehold-no-such-bucket/x").unwrap();
    assert!(absent.open(IfMissing::Refuse).await.is_err());
    // A replica's open makes no request: the bucket is found missing at its first call.
    absent.open(IfMissing::Create).await.unwrap();
}
