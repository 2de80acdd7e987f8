//! Parsing of store URLs: every form, every refusal, and no password in any text.

use super::*;

fn refusal(e: Result<impl fmt::Debug, Error>) -> (&'static str, String) {
    match e {
        Err(Error::InvalidOption { name, reason }) => (name, reason),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn sqlite_urls_and_plain_paths_name_a_lease_file() {
    let cases = [
        ("sqlite://leases.db", "leases.db"),
        (
            "sqlite:///var/lib/leasehold/leases.db",
            "/var/lib/leasehold/leases.db",
        ),
        ("SQLITE://a/b.db", "a/b.db"),
        ("leases.db", "leases.db"),
        ("/abs/leases.db", "/abs/leases.db"),
    ];
    for (url, path) in cases {
        assert_eq!(
            LeaseStoreUrl::parse(url),
            Ok(LeaseStoreUrl::Sqlite(PathBuf::from(path))),
            "{url}"
        );
    }
    assert_eq!(
        LeaseStoreUrl::parse("sqlite://leases.db").map(|u| u.to_string()),
        Ok("sqlite://leases.db".to_string())
    );
}

#[test]
fn a_lease_url_of_another_scheme_or_without_a_path_is_refused_by_name() {
    for bad in ["postgress://db/x", "mysql://h/d", "sqlite://", "", "a\0b"] {
        let (name, reason) = refusal(LeaseStoreUrl::parse(bad));
        assert_eq!(name, "leases", "{bad:?}: {reason}");
    }
    let (_, reason) = refusal(LeaseStoreUrl::parse("postgress://db/x"));
    assert!(reason.contains("postgress"), "{reason}");
}

#[test]
fn durable_urls_name_a_directory_or_a_bucket_and_prefix() {
    let dir = |p: &str| Ok(DurableStoreUrl::Dir(PathBuf::from(p)));
    assert_eq!(DurableStoreUrl::parse("durable"), dir("durable"));
    assert_eq!(
        DurableStoreUrl::parse("file:///srv/durable"),
        dir("/srv/durable")
    );
    assert_eq!(
        DurableStoreUrl::parse("file://rel/durable"),
        dir("rel/durable")
    );
    for bad in ["gs://bucket/x", "file://", "", "http://h/x"] {
        let (name, reason) = refusal(DurableStoreUrl::parse(bad));
        assert_eq!(name, "durable", "{bad:?}: {reason}");
    }
}

#[cfg(feature = "s3")]
#[test]
fn s3_urls_take_whole_segments_as_their_prefix() {
    let s3 = |bucket: &str, prefix: &str| {
        Ok(DurableStoreUrl::S3 {
            bucket: bucket.into(),
            prefix: prefix.into(),
        })
    };
    assert_eq!(
        DurableStoreUrl::parse("s3://acme-ledgers"),
        s3("acme-ledgers", "")
    );
    assert_eq!(
        DurableStoreUrl::parse("s3://acme-ledgers/"),
        s3("acme-ledgers", "")
    );
    assert_eq!(
        DurableStoreUrl::parse("s3://acme-ledgers/prod"),
        s3("acme-ledgers", "prod/")
    );
    assert_eq!(
        DurableStoreUrl::parse("s3://acme-ledgers/a/b/"),
        s3("acme-ledgers", "a/b/")
    );
    assert_eq!(
        DurableStoreUrl::parse("s3://acme-ledgers/prod").map(|u| u.to_string()),
        Ok("s3://acme-ledgers/prod/".to_string())
    );
    for bad in [
        "s3://",
        "s3://Bad_Bucket/x",
        "s3://acme-ledgers/a//b",
        "s3://ab",
    ] {
        let (name, reason) = refusal(DurableStoreUrl::parse(bad));
        assert_eq!(name, "durable", "{bad:?}: {reason}");
    }
}

#[cfg(not(feature = "s3"))]
#[test]
fn an_s3_url_without_the_feature_is_refused_saying_so() {
    let (_, reason) = refusal(DurableStoreUrl::parse("s3://acme-ledgers/prod"));
    assert!(reason.contains("`s3` feature"), "{reason}");
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_url_keeps_its_parameters_takes_its_table_and_hides_its_password() {
    let url = "postgres://lh:s3cret@db.internal:5432/leasehold?table=fleet_a&application_name=r1";
    let Ok(LeaseStoreUrl::Postgres(pg)) = LeaseStoreUrl::parse(url) else {
        panic!("not a PostgreSQL URL");
    };
    assert_eq!(pg.table(), "fleet_a");
    assert_eq!(
        pg.connection(),
        "postgres://lh:s3cret@db.internal:5432/leasehold?application_name=r1"
    );
    let shown = format!("{pg} {pg:?} {}", LeaseStoreUrl::Postgres(pg.clone()));
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(
        shown.contains("lh:***@db.internal:5432/leasehold"),
        "{shown}"
    );
    assert!(shown.contains("table=fleet_a"), "{shown}");

    let Ok(LeaseStoreUrl::Postgres(pg)) = LeaseStoreUrl::parse("postgresql://h/d") else {
        panic!("not a PostgreSQL URL");
    };
    assert_eq!(
        (pg.table(), pg.connection()),
        (DEFAULT_PG_TABLE, "postgresql://h/d")
    );

    let hidden = LeaseStoreUrl::parse("postgres://h/d?password=p4ss&user=u").map(|u| u.to_string());
    assert_eq!(
        hidden,
        Ok("postgres://h/d?password=***&user=u&table=leasehold_leases".to_string())
    );
    for bad in [
        "postgres://h/d?table=Bad-Name",
        "postgres://h/d?table=a&table=b",
    ] {
        let (name, reason) = refusal(LeaseStoreUrl::parse(bad));
        assert_eq!(name, "leases", "{bad:?}: {reason}");
        assert!(!reason.contains("p4ss"));
    }
}

#[cfg(not(feature = "postgres"))]
#[test]
fn a_postgres_url_without_the_feature_is_refused_saying_so() {
    let (_, reason) = refusal(LeaseStoreUrl::parse("postgres://h/d"));
    assert!(reason.contains("`postgres` feature"), "{reason}");
}
