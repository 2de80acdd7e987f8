//! TLS to PostgreSQL (docs/operations.md, "TLS"): libpq's `sslmode` and `sslrootcert` in the
//! URL, against the throwaway cluster that `scripts/lib/servers.sh` starts with TLS on (a
//! self-signed certificate for 127.0.0.1 and localhost, `LEASEHOLD_TEST_PG_CA`). Whether a
//! connection is encrypted is read from the server's own `pg_stat_ssl`, over a separate plain
//! connection: the oracle is the server, not the store under test.
#![cfg(feature = "postgres")]

use std::sync::atomic::{AtomicU64, Ordering};

use leasehold::Error;
use leasehold::ids::{LeaseKey, OrgId, TenantId};
use leasehold::lease::LeaseStore;
use leasehold::lease::postgres::tls::SslMode;
use leasehold::lease::postgres::{PgOptions, PostgresLeaseStore};

const TABLE: &str = "leasehold_test_leases";

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: run these tests through scripts/test.sh or scripts/with-servers.sh"
        )
    })
}

/// The server's URL with `params` added to its query.
fn url_with(params: &str) -> String {
    let url = var("LEASEHOLD_TEST_PG_URL");
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{params}")
}

/// An application name no other connection of this run uses.
fn app(what: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "tls_{what}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Connects with `params`, reads one key (so that a pooled connection is open), and returns
/// the store.
async fn connect(params: &str) -> Result<PostgresLeaseStore, Error> {
    let store =
        PostgresLeaseStore::connect_with(&url_with(params), TABLE, PgOptions::default()).await?;
    let key = LeaseKey::new(&OrgId::new("tls").unwrap(), &TenantId::new("t1").unwrap());
    store.read(&key).await?;
    Ok(store)
}

/// Whether the server says the connection of application `name` is encrypted.
async fn encrypted(name: &str) -> bool {
    let plain = url_with("sslmode=disable");
    let (client, conn) = tokio_postgres::connect(&plain, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = $1 LIMIT 1",
            &[&name],
        )
        .await
        .unwrap_or_else(|e| panic!("no connection named {name}: {e}"));
    row.get(0)
}

#[tokio::test]
async fn verify_full_with_the_clusters_certificate_is_encrypted_and_checked() {
    let name = app("full");
    let params = format!(
        "application_name={name}&sslmode=verify-full&sslrootcert={}",
        var("LEASEHOLD_TEST_PG_CA")
    );
    let store = connect(&params)
        .await
        .expect("verify-full with the right root");
    assert_eq!(store.sslmode(), SslMode::VerifyFull);
    assert!(encrypted(&name).await, "the server sees TLS");
}

#[tokio::test]
async fn verify_full_against_an_untrusted_certificate_is_refused_and_says_why() {
    // The platform's roots do not hold the cluster's throwaway CA.
    let refused = connect(&format!(
        "application_name={}&sslmode=verify-full",
        app("untrusted")
    ))
    .await
    .expect_err("an untrusted certificate is refused");
    let text = refused.to_string();
    assert!(text.contains("certificate"), "{text}");
}

#[tokio::test]
async fn verify_full_checks_the_name_and_verify_ca_only_the_chain() {
    // Connect to 127.0.0.1 under a name the certificate does not hold.
    let url = var("LEASEHOLD_TEST_PG_URL");
    let wrong = url.replacen("@127.0.0.1:", "@wrong-name.invalid:", 1);
    assert_ne!(wrong, url, "the test URL names 127.0.0.1");
    let ca = var("LEASEHOLD_TEST_PG_CA");
    let with = |mode: &str, name: &str| {
        format!(
            "{wrong}?hostaddr=127.0.0.1&application_name={name}&sslmode={mode}&sslrootcert={ca}"
        )
    };
    let full = PostgresLeaseStore::connect(&with("verify-full", &app("name")), TABLE).await;
    let text = full.expect_err("the name is checked").to_string();
    assert!(text.contains("certificate"), "{text}");
    let name = app("ca");
    let _open = PostgresLeaseStore::connect(&with("verify-ca", &name), TABLE)
        .await
        .expect("verify-ca checks only the chain");
    assert!(encrypted(&name).await);
}

#[tokio::test]
async fn require_and_prefer_encrypt_without_checking_and_disable_stays_plain() {
    for (mode, want) in [("require", true), ("prefer", true), ("disable", false)] {
        let name = app(mode);
        let store = connect(&format!("application_name={name}&sslmode={mode}"))
            .await
            .unwrap_or_else(|e| panic!("sslmode={mode}: {e}"));
        assert_eq!(encrypted(&name).await, want, "sslmode={mode}");
        drop(store);
    }
    let name = app("default");
    let _open = connect(&format!("application_name={name}")).await.unwrap();
    assert!(
        encrypted(&name).await,
        "no sslmode is prefer, as with libpq"
    );
}

#[tokio::test]
async fn a_missing_root_file_or_a_bad_mode_is_refused_before_connecting() {
    let missing = connect("sslmode=verify-full&sslrootcert=/nonexistent/root.pem").await;
    let e = missing.err().unwrap();
    assert_eq!(e.code(), "LEASEHOLD_INVALID_OPTION");
    assert!(e.to_string().contains("/nonexistent/root.pem"), "{e}");
    let bad = connect("sslmode=allow").await.err().unwrap();
    assert_eq!(bad.code(), "LEASEHOLD_INVALID_OPTION");
}
