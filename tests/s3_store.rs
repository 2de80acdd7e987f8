//! Durable store on S3 (the storage layout of docs/architecture.md; promises 6 and 7 in docs/guarantees.md): `S3Store` against a real
//! S3-compatible server (moto) passes the conformance suite with and without a bucket prefix,
//! gives exactly one `Created` to sixteen racing puts of one key, keeps stores with neighbouring
//! prefixes (`a/`, `a2/`) apart, reads the usual AWS environment, and settles with a typed error
//! when the endpoint is gone or an object is too big for one conditional PUT. Through a
//! fault-injecting proxy (`late`): puts that land late, silent flows, dropped answers.
//!
//! The server comes from `LEASEHOLD_TEST_S3_ENDPOINT` and `LEASEHOLD_TEST_S3_BUCKET`, which
//! `scripts/test.sh` sets after starting moto; without them the tests that need a server fail and
//! say so.
#![cfg(feature = "s3")]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::future::join_all;
use leasehold::DurableStore;
use leasehold::durable::s3::{S3Config, S3Limits, S3Store};
use leasehold::durable::{Put, StoreError};
use leasehold::testkit::durable_store_conformance;

#[path = "s3_store/keep_alive.rs"]
mod keep_alive;
#[path = "s3_store/late.rs"]
mod late;

/// `(endpoint, bucket)` of the test server, or a failure that says how to get one.
fn server() -> (String, String) {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: these tests need an S3 server. Run them through \
                 scripts/test.sh (or scripts/with-servers.sh <cargo command>), which starts a \
                 throwaway moto on a loopback port and creates the bucket"
            )
        })
    };
    (
        var("LEASEHOLD_TEST_S3_ENDPOINT"),
        var("LEASEHOLD_TEST_S3_BUCKET"),
    )
}

/// A key segment no other run uses.
fn fresh(what: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("{what}-{}-{nanos}-{n}", std::process::id())
}

fn config(endpoint: &str, bucket: &str, prefix: &str) -> S3Config {
    S3Config {
        endpoint: Some(endpoint.to_string()),
        region: "us-east-1".to_string(),
        bucket: bucket.to_string(),
        prefix: prefix.to_string(),
        access_key_id: Some("testing".to_string()),
        secret_access_key: Some("testing".to_string()),
        allow_http: true,
    }
}

/// A store on the test server below `prefix`.
fn store(prefix: &str) -> S3Store {
    let (endpoint, bucket) = server();
    S3Store::new(config(&endpoint, &bucket, prefix)).expect("an S3 store on the test server")
}

/// Limits that give up fast, for endpoints that are gone.
fn impatient() -> S3Limits {
    S3Limits {
        connect_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_millis(500),
        max_retries: 2,
        retry_timeout: Duration::from_secs(1),
        init_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        op_timeout: Duration::from_secs(3),
        ..S3Limits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_store_passes_the_durable_conformance_suite() {
    let started = Instant::now();
    durable_store_conformance(&store(""), &fresh("conf")).await;
    eprintln!("s3 conformance suite: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_store_below_a_bucket_prefix_passes_the_durable_conformance_suite() {
    let started = Instant::now();
    let prefix = format!("{}/replicas/", fresh("prefixed"));
    durable_store_conformance(&store(&prefix), "conf").await;
    eprintln!(
        "s3 conformance suite below a prefix: {:?}",
        started.elapsed()
    );
}

/// Rounds in which moto, the test server, may answer `Created` to more than one racer. Its
/// conditional put checks and writes under no lock (a threaded Werkzeug server): CI's run of
/// 2026-12-02 under load saw round 18 give two winners, `[0, 2]` (docs/testing.md, "Open
/// findings"). Real S3 creates a key once. A store that read a refusal as `Created` would give
/// every round sixteen winners, and one that read success as `AlreadyExists` none: both fail.
const SERVER_RACES_ALLOWED: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_racing_puts_of_one_key_create_it_exactly_once_every_round() {
    const RACERS: usize = 16;
    const ROUNDS: usize = 20;
    // One store (one client, one connection pool) per racer, as separate replicas would have.
    let stores: Vec<S3Store> = (0..RACERS).map(|_| store("")).collect();
    let area = fresh("race");
    let started = Instant::now();
    let mut server_races = Vec::new();
    for round in 0..ROUNDS {
        let key = format!("{area}/r{round:02}/e00000001/snap-000001.db");
        let bytes = |i: usize| format!("racer {i} of round {round}").into_bytes();
        let key = key.as_str();
        let puts = stores
            .iter()
            .enumerate()
            .map(|(i, s)| async move { (i, s.put_if_absent(key, bytes(i)).await) });
        let mut winners = Vec::new();
        for (i, result) in join_all(puts).await {
            match result {
                Ok(Put::Created) => winners.push(i),
                Ok(Put::AlreadyExists) => {}
                Err(e) => panic!("round {round}: racer {i}: {e}"),
            }
        }
        assert!(!winners.is_empty(), "round {round}: no put was Created");
        assert!(
            winners.len() <= 2,
            "round {round}: {} of {RACERS} puts were Created: {winners:?}",
            winners.len()
        );
        let held = stores[0].get(key).await.unwrap();
        assert!(
            winners.iter().any(|&w| held == Some(bytes(w))),
            "round {round}: the object is no winner's ({winners:?})"
        );
        if winners.len() > 1 {
            server_races.push((round, winners));
        }
    }
    assert!(
        server_races.len() <= SERVER_RACES_ALLOWED,
        "more than one put was Created in {} rounds of {ROUNDS}: {server_races:?}",
        server_races.len()
    );
    eprintln!(
        "{ROUNDS} rounds of {RACERS} racing puts: {:?}; rounds the server answered two \
         creators (moto): {server_races:?}",
        started.elapsed()
    );
    stores[0].delete_prefix(&format!("{area}/")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_with_prefixes_a_and_a2_do_not_see_each_other() {
    let run = fresh("prefixes");
    let a = store(&format!("{run}/a/"));
    let a2 = store(&format!("{run}/a2/"));
    let bare = store("");
    let key = "acme/t1/e00000001/snap-000001.db";
    assert_eq!(
        a.put_if_absent(key, b"in a".to_vec()).await,
        Ok(Put::Created)
    );
    assert_eq!(
        a2.put_if_absent(key, b"in a2".to_vec()).await,
        Ok(Put::Created)
    );
    assert_eq!(a.get(key).await, Ok(Some(b"in a".to_vec())));
    assert_eq!(a2.get(key).await, Ok(Some(b"in a2".to_vec())));
    assert_eq!(a.list("").await, Ok(vec![key.to_string()]));
    assert_eq!(a2.list("acme/").await, Ok(vec![key.to_string()]));
    assert_eq!(
        bare.list(&format!("{run}/")).await,
        Ok(vec![format!("{run}/a/{key}"), format!("{run}/a2/{key}")]),
        "the bucket holds both, each under its own prefix"
    );
    assert_eq!(a.delete_prefix("acme/").await, Ok(1));
    assert_eq!(a.list("").await, Ok(vec![]));
    assert_eq!(
        a2.get(key).await,
        Ok(Some(b"in a2".to_vec())),
        "a2 kept its object"
    );
    assert_eq!(a2.delete(key).await, Ok(()));
    assert_eq!(bare.list(&format!("{run}/")).await, Ok(vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_env_reads_the_usual_aws_variables() {
    let (_, bucket) = server();
    for name in [
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ] {
        assert!(
            std::env::var(name).is_ok(),
            "{name} is not set: run scripts/test.sh"
        );
    }
    let prefix = format!("{}/", fresh("env"));
    let s = S3Store::from_env(&bucket, &prefix).expect("a store from the environment");
    assert_eq!((s.bucket(), s.prefix()), (bucket.as_str(), prefix.as_str()));
    assert_eq!(s.put_if_absent("k", b"v".to_vec()).await, Ok(Put::Created));
    assert_eq!(
        s.put_if_absent("k", b"w".to_vec()).await,
        Ok(Put::AlreadyExists)
    );
    assert_eq!(s.get("k").await, Ok(Some(b"v".to_vec())));
    assert_eq!(s.delete_prefix("k/").await, Ok(0), "k/ is not k");
    assert_eq!(
        store("").get(&format!("{prefix}k")).await,
        Ok(Some(b"v".to_vec()))
    );
    assert_eq!(s.delete("k").await, Ok(()));
}

#[tokio::test]
async fn an_endpoint_that_is_gone_is_unavailable_within_the_deadline() {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let endpoint = format!("http://127.0.0.1:{port}");
    let s = S3Store::with_limits(config(&endpoint, "leasehold-test", ""), impatient()).unwrap();
    let started = Instant::now();
    for (what, got) in [
        (
            "put",
            s.put_if_absent("a/b", b"x".to_vec()).await.map(|_| ()),
        ),
        ("get", s.get("a/b").await.map(|_| ())),
        ("list", s.list("a/").await.map(|_| ())),
        ("delete", s.delete("a/b").await),
        ("delete_prefix", s.delete_prefix("a/").await.map(|_| ())),
    ] {
        assert!(
            matches!(
                got,
                Err(StoreError::Unavailable { .. } | StoreError::Timeout { .. })
            ),
            "{what}: {got:?}"
        );
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "five calls took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_settles_when_the_endpoint_hangs() {
    // Accepts connections and never answers a request.
    let hang = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", hang.local_addr().unwrap());
    let _accepting = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hang.accept().await {
            held.push(socket);
        }
    });
    let s = S3Store::with_limits(config(&endpoint, "leasehold-test", ""), impatient()).unwrap();
    for (what, call) in [
        (
            "put",
            s.put_if_absent("a/b", b"x".to_vec()).await.map(|_| ()),
        ),
        ("get", s.get("a/b").await.map(|_| ())),
    ] {
        assert!(
            matches!(
                call,
                Err(StoreError::Timeout { .. } | StoreError::Unavailable { .. })
            ),
            "{what}: {call:?}"
        );
    }
    let started = Instant::now();
    let got = s.list("a/").await;
    let took = started.elapsed();
    assert!(
        matches!(got, Err(StoreError::Timeout { .. })),
        "list: {got:?}"
    );
    // One request timeout per try, backoff between: well inside the call's deadline.
    assert!(
        took <= impatient().op_timeout + Duration::from_millis(500),
        "list took {took:?}"
    );
}

#[tokio::test]
async fn an_object_too_big_for_one_conditional_put_is_refused_before_any_request() {
    // Nothing listens at port 1: a request would be Unavailable, not this refusal.
    let limits = S3Limits {
        max_object_bytes: 8,
        ..impatient()
    };
    let s =
        S3Store::with_limits(config("http://127.0.0.1:1", "leasehold-test", ""), limits).unwrap();
    let refused = s.put_if_absent("a/b", vec![0; 9]).await;
    assert_eq!(
        refused,
        Err(StoreError::TooLarge {
            op: "put_if_absent",
            key: "a/b".into(),
            bytes: 9,
            limit: 8
        })
    );
    let refused = leasehold::Error::from(refused.unwrap_err());
    assert!(!refused.is_outcome_unknown(), "nothing was sent: {refused}");
    let bad = s.put_if_absent("a/../b", vec![0; 1]).await;
    assert!(matches!(bad, Err(StoreError::InvalidKey { .. })), "{bad:?}");
}

/// Writes `key` into the bucket with a raw HTTP PUT (curl), bypassing every key check: the
/// foreign objects a bucket shared with other tools may hold.
fn raw_put(key: &str) {
    let (endpoint, bucket) = server();
    let out = std::process::Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT"])
        .args(["--data-binary", "foreign", "--path-as-is"])
        .arg(format!("{endpoint}/{bucket}/{key}"))
        .output()
        .expect("curl runs");
    let code = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(code.starts_with('2'), "raw PUT of {key:?}: {code} {out:?}");
}

/// Hole 12 (promise 5): a key `object_store` cannot parse (`…/e00000001//notes.txt`) makes
/// neither `list` nor `list_page` nor `delete_prefix` fail; listings skip it and the tenant's
/// `delete_prefix` deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_a_foreign_key_s3_cannot_name_blocks_neither_listing_nor_erasure() {
    let run = fresh("foreign");
    let s = store(&format!("{run}/"));
    let image = "acme/t1/e00000001/snap-000001.db";
    s.put_if_absent(image, b"image".to_vec()).await.unwrap();
    raw_put(&format!("{run}/acme/t1/e00000001//notes.txt"));
    raw_put(&format!("{run}/acme/t2/e00000001//notes.txt"));
    assert_eq!(s.list("acme/t1/").await, Ok(vec![image.to_string()]));
    let page = s.list_page("acme/", None, 10).await.map(|p| p.keys);
    assert_eq!(page, Ok(vec![image.to_string()]));
    assert_eq!(
        s.delete_prefix("acme/t1/").await,
        Ok(2),
        "the image and the foreign key"
    );
    assert_eq!(s.list("").await, Ok(vec![]));
    // t2's foreign object is still there, outside the prefix deleted: t2's erasure takes it.
    assert_eq!(s.delete_prefix("acme/t2/").await, Ok(1));
    assert_eq!(s.delete_prefix("acme/").await, Ok(0));
}
