//! Lease store on PostgreSQL (docs/guarantees.md, promises 1, 4 and 6, "Late landings"):
//! `PostgresLeaseStore` against a real server passes the conformance suite, grants each epoch of a
//! key to exactly one of eight replicas racing for it, and reports a server that went away or
//! hangs as unavailable (the lease unknown, never held), then recovers. Through the
//! fault-injecting proxy (`testkit::FaultProxy`): a silent flow is never reused after a timeout
//! (hole 8), statements held back and delivered late are safe (hole 9), a refused acquire takes
//! one deadline (hole 14); and a refused login is named (hole 13).
//!
//! The server comes from `LEASEHOLD_TEST_PG_URL`, which `scripts/test.sh` sets after starting a
//! throwaway cluster; without it the tests that need a server fail and say so.
#![cfg(feature = "postgres")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use futures::future::join_all;
use leasehold::Error;
use leasehold::durable::StoreError;
use leasehold::ids::{LeaseKey, OrgId, TenantId};
use leasehold::layout::ImageRef;
use leasehold::lease::postgres::{PgOptions, PostgresLeaseStore};
use leasehold::lease::{LeaseError, LeaseStore, RenewOutcome};
use leasehold::testkit::{FaultProxy, Flow, LeaseHarness, lease_store_conformance};
use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Barrier;
use tokio::task::JoinHandle;

/// The table every test of this file shares; orgs are unique per run, so runs can share it too.
const TABLE: &str = "leasehold_test_leases";

/// The ttl of the conformance suite: short, so that its real sleeps stay fast.
const SUITE_TTL: Duration = Duration::from_millis(400);

/// The server's URL, or a failure that says how to get one.
fn pg_url() -> String {
    std::env::var("LEASEHOLD_TEST_PG_URL").unwrap_or_else(|_| {
        panic!(
            "LEASEHOLD_TEST_PG_URL is not set: these tests need a PostgreSQL server. Run them \
             through scripts/test.sh (or scripts/with-servers.sh <cargo command>), which starts a \
             throwaway one on a loopback port"
        )
    })
}

/// An org id no other run uses.
fn fresh_org(what: &str) -> OrgId {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let n = N.fetch_add(1, Ordering::Relaxed);
    OrgId::new(format!("{what}-{}-{nanos}-{n}", std::process::id())).unwrap()
}

fn key(org: &OrgId, tenant: &str) -> LeaseKey {
    LeaseKey::new(org, &TenantId::new(tenant).unwrap())
}

async fn store() -> PostgresLeaseStore {
    PostgresLeaseStore::connect(&pg_url(), TABLE)
        .await
        .unwrap_or_else(|e| panic!("connect to {TABLE}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_passes_the_lease_conformance_suite() {
    let started = Instant::now();
    let harness = LeaseHarness {
        store: Arc::new(store().await),
        ttl: SUITE_TTL,
        advance: Box::new(|by| tokio::time::sleep(by).boxed()),
        org: fresh_org("pg-conformance"),
    };
    lease_store_conformance(&harness).await;
    eprintln!("postgres conformance suite: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_replicas_racing_for_one_key_have_exactly_one_winner_every_round() {
    const REPLICAS: usize = 8;
    const ROUNDS: u64 = 50;
    const TTL: Duration = Duration::from_millis(300);
    let url = pg_url();
    let stores = join_all((0..REPLICAS).map(|_| PostgresLeaseStore::connect(&url, TABLE))).await;
    let stores: Vec<Arc<PostgresLeaseStore>> = stores
        .into_iter()
        .map(|s| Arc::new(s.expect("connect a replica")))
        .collect();
    let key = key(&fresh_org("pg-race"), "contested");
    let started = Instant::now();
    for round in 1..=ROUNDS {
        let barrier = Arc::new(Barrier::new(REPLICAS));
        let racers = stores.iter().enumerate().map(|(i, store)| {
            let (store, barrier, key) = (store.clone(), barrier.clone(), key.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store.acquire(&key, &format!("replica-{i}"), TTL).await
            })
        });
        let results: Vec<_> = join_all(racers)
            .await
            .into_iter()
            .map(|r| r.expect("racer task"))
            .collect();
        let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        let [winner] = winners[..] else {
            panic!("round {round}: {} winners: {results:?}", winners.len());
        };
        assert_eq!(winner.epoch, round, "round {round}: the epoch grows by one");
        for lost in results.iter().filter_map(|r| r.as_ref().err()) {
            let named = LeaseError::Held {
                key: key.to_string(),
                owner: winner.owner.clone(),
                epoch: winner.epoch,
            };
            assert_eq!(
                lost, &named,
                "round {round}: a loser is told who holds the lease"
            );
        }
        let holder: usize = winner.owner["replica-".len()..].parse().unwrap();
        if round % 10 == 0 {
            // Let the lease lapse by the server's clock instead of releasing it.
            tokio::time::sleep(TTL + Duration::from_millis(50)).await;
        } else {
            stores[holder]
                .release(&key, &winner.owner, winner.epoch)
                .await
                .unwrap_or_else(|e| panic!("round {round}: release: {e}"));
        }
    }
    eprintln!(
        "{ROUNDS} rounds of {REPLICAS} racers: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn invalid_table_names_are_refused_before_connecting() {
    // Port 1 on loopback: nothing listens, and nothing is asked anyway.
    for bad in ["", "Leases", "1x", "a-b", "x;drop table y", &"a".repeat(64)] {
        let got = PostgresLeaseStore::connect("postgres://u@127.0.0.1:1/db", bad).await;
        assert!(
            matches!(got, Err(Error::InvalidOption { name: "table", .. })),
            "{bad:?}: {got:?}"
        );
    }
    let got = PostgresLeaseStore::connect("not a url", TABLE).await;
    assert!(
        matches!(got, Err(Error::InvalidOption { name: "url", .. })),
        "{got:?}"
    );
}

#[tokio::test]
async fn a_table_of_another_shape_is_refused() {
    let url = pg_url();
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect for setup");
    let _driver = tokio::spawn(connection);
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS leasehold_test_other_shape (key text PRIMARY KEY, holder text)",
        )
        .await
        .expect("create a table of another shape");
    let got = PostgresLeaseStore::connect(&url, "leasehold_test_other_shape").await;
    assert!(
        matches!(got, Err(Error::InvalidOption { name: "table", .. })),
        "{got:?}"
    );
}

#[tokio::test]
async fn a_replica_role_with_select_insert_update_on_a_precreated_table_suffices() {
    const ROLE: &str = "leasehold_test_replica";
    const LIMITED: &str = "leasehold_test_limited";
    let url = pg_url();
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect for setup");
    let _driver = tokio::spawn(connection);
    let create = leasehold::lease::postgres::create_table_sql(LIMITED).unwrap();
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN CREATE ROLE {ROLE} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
             {create};
             REVOKE ALL ON {LIMITED} FROM {ROLE};
             GRANT SELECT, INSERT, UPDATE ON {LIMITED} TO {ROLE};"
        ))
        .await
        .expect("set up the role and the table (the test URL must be a superuser's)");
    let config: tokio_postgres::Config = url.parse().unwrap();
    let user = config.get_user().expect("the test URL names a user");
    let limited_url = url.replacen(&format!("://{user}@"), &format!("://{ROLE}@"), 1);
    assert_ne!(limited_url, url, "cannot swap the user of {url}");

    let store = PostgresLeaseStore::connect(&limited_url, LIMITED)
        .await
        .expect("connect with SELECT, INSERT, UPDATE only");
    let key = key(&fresh_org("pg-limited"), "t1");
    let held = store.acquire(&key, "a", SUITE_TTL).await.unwrap();
    let image = leasehold::layout::ImageRef {
        epoch: held.epoch,
        seq: 1,
        sha256: "0".repeat(64),
    };
    store
        .publish_head(&key, "a", held.epoch, &image)
        .await
        .unwrap();
    store.mark_forgotten(&key, "a", held.epoch).await.unwrap();
    let renewed = store
        .renew_many("a", &[(key.clone(), held.epoch)], SUITE_TTL)
        .await;
    assert_eq!(renewed, Ok(vec![RenewOutcome::Renewed]));
    store.release(&key, "a", held.epoch).await.unwrap();
    let refused = PostgresLeaseStore::connect(&limited_url, "leasehold_test_no_create").await;
    assert!(
        matches!(refused, Err(Error::InvalidOption { name: "table", .. })),
        "creating a table needs CREATE on the schema: {refused:?}"
    );
}

#[tokio::test]
async fn a_refused_connection_is_unavailable() {
    let port = closed_port().await;
    let got =
        PostgresLeaseStore::connect(&format!("postgres://u@127.0.0.1:{port}/db"), TABLE).await;
    assert!(
        matches!(got, Err(Error::Store(StoreError::Unavailable { .. }))),
        "{got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_goes_away_is_unavailable_never_held_and_the_store_recovers() {
    let upstream = pg_upstream();
    let proxy = Proxy::start(&upstream, None).await;
    let opts = PgOptions {
        connect_timeout: Duration::from_millis(500),
        wait_timeout: Duration::from_millis(500),
        op_timeout: Duration::from_secs(2),
        ..PgOptions::default()
    };
    let store = PostgresLeaseStore::connect_with(&proxy.url(), TABLE, opts)
        .await
        .expect("connect through the proxy");
    let key = key(&fresh_org("pg-outage"), "t1");
    let held = store
        .acquire(&key, "a", Duration::from_secs(30))
        .await
        .unwrap();

    let port = proxy.port;
    proxy.stop().await;
    let leases = [(key.clone(), held.epoch)];
    for (what, got) in [
        ("read", store.read(&key).await.map(|_| ())),
        (
            "renew",
            store
                .renew(&key, "a", held.epoch, Duration::from_secs(30))
                .await
                .map(|_| ()),
        ),
        (
            "renew_many",
            store
                .renew_many("a", &leases, Duration::from_secs(30))
                .await
                .map(|_| ()),
        ),
        (
            "acquire",
            store
                .acquire(&key, "b", Duration::from_secs(30))
                .await
                .map(|_| ()),
        ),
    ] {
        assert!(
            matches!(got, Err(LeaseError::Store(StoreError::Unavailable { .. }))),
            "{what} during the outage: {got:?}"
        );
    }

    let _back = Proxy::start(&upstream, Some(port)).await;
    let renewed = store
        .renew_many("a", &leases, Duration::from_secs(30))
        .await
        .expect("renew_many after the outage");
    assert_eq!(
        renewed,
        vec![RenewOutcome::Renewed],
        "the lease outlived the outage"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_settles_when_the_server_hangs() {
    // A listener that accepts and never answers: connecting hangs in the startup handshake.
    let hang = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = hang.local_addr().unwrap().port();
    let _accepting = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hang.accept().await {
            held.push(socket);
        }
    });
    let opts = PgOptions {
        connect_timeout: Duration::from_millis(300),
        wait_timeout: Duration::from_millis(300),
        op_timeout: Duration::from_millis(600),
        ..PgOptions::default()
    };
    let started = Instant::now();
    let url = format!("postgres://u@127.0.0.1:{port}/db");
    let got = PostgresLeaseStore::connect_with(&url, TABLE, opts).await;
    let took = started.elapsed();
    assert!(
        matches!(
            got,
            Err(Error::Store(
                StoreError::Unavailable { .. } | StoreError::Timeout { .. }
            ))
        ),
        "{got:?}"
    );
    assert!(took < Duration::from_secs(2), "settled only after {took:?}");
}

/// A store on a pool of one connection through a new fault-injecting proxy, whose calls get
/// `op_timeout`.
async fn proxied(op_timeout: Duration) -> (PostgresLeaseStore, FaultProxy) {
    let proxy = FaultProxy::start(&pg_upstream())
        .await
        .expect("start the proxy");
    let url = pg_url().replacen(&pg_upstream(), &proxy.addr().to_string(), 1);
    let opts = PgOptions {
        pool_size: 1,
        connect_timeout: Duration::from_secs(2),
        wait_timeout: Duration::from_secs(2),
        op_timeout,
    };
    let store = PostgresLeaseStore::connect_with(&url, TABLE, opts)
        .await
        .expect("connect through the proxy");
    (store, proxy)
}

/// The proxy's only flow so far (the pool holds one connection).
fn only_flow(proxy: &FaultProxy) -> Flow {
    let flows = proxy.flows();
    assert_eq!(flows.len(), 1, "one connection so far: {flows:?}");
    flows[0].clone()
}

fn image(epoch: u64, seq: u64) -> ImageRef {
    ImageRef {
        epoch,
        seq,
        sha256: format!("{:064x}", epoch * 1_000 + seq),
    }
}

fn is_timeout<T: std::fmt::Debug>(got: &Result<T, LeaseError>) -> bool {
    matches!(got, Err(e @ LeaseError::Store(StoreError::Timeout { .. })) if e.outcome_unknown())
}

/// Holds the flow's next request back, runs `call` (which must time out), then delivers the
/// request late and waits until the server has answered it.
async fn land_late<T: std::fmt::Debug>(
    flow: &Flow,
    call: impl std::future::Future<Output = Result<T, LeaseError>>,
) {
    flow.hold();
    let got = call.await;
    assert!(is_timeout(&got), "the held call times out: {got:?}");
    assert!(flow.held_bytes() > 0, "the statement was held back");
    let seen = flow.bytes_from_server();
    flow.release_held().await.expect("deliver the held bytes");
    let answered = flow.wait_from_server_beyond(seen, Duration::from_secs(10));
    assert!(answered.await, "the server ran the late statement");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole8_a_timed_out_call_discards_its_connection_and_the_next_call_succeeds() {
    let (store, proxy) = proxied(Duration::from_millis(500)).await;
    let key = key(&fresh_org("pg-hole8"), "t1");
    let held = store
        .acquire(&key, "a", Duration::from_secs(30))
        .await
        .unwrap();
    let leases = [(key.clone(), held.epoch)];
    only_flow(&proxy).stall();
    let mut outcomes = Vec::new();
    for _ in 0..6 {
        let got = store
            .renew_many("a", &leases, Duration::from_secs(30))
            .await;
        outcomes.push(got.map_err(|e| e.to_string()));
    }
    assert!(
        outcomes[0].is_err(),
        "the call on the silent flow times out"
    );
    assert_eq!(
        outcomes[1..].iter().filter(|o| o.is_err()).count(),
        0,
        "every later call runs on a fresh connection: {outcomes:?}"
    );
    assert_eq!(outcomes[1], Ok(vec![RenewOutcome::Renewed]));
    assert_eq!(proxy.flows().len(), 2, "one fresh connection, then reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole9_a_publish_held_back_and_delivered_late_never_moves_the_head_back() {
    let (store, proxy) = proxied(Duration::from_millis(500)).await;
    let direct = store_direct().await;
    let key = key(&fresh_org("pg-hole9-publish"), "t1");
    let e = store
        .acquire(&key, "a", Duration::from_secs(30))
        .await
        .unwrap()
        .epoch;
    store
        .publish_head(&key, "a", e, &image(e, 1))
        .await
        .unwrap();
    let flow = only_flow(&proxy);
    flow.hold();
    let late = store.publish_head(&key, "a", e, &image(e, 2)).await;
    assert!(is_timeout(&late), "the held publish times out: {late:?}");
    let newer = direct
        .publish_head(&key, "a", e, &image(e, 3))
        .await
        .unwrap();
    assert_eq!(newer.head, Some(image(e, 3)));
    let seen = flow.bytes_from_server();
    flow.release_held().await.unwrap();
    assert!(
        flow.wait_from_server_beyond(seen, Duration::from_secs(10))
            .await
    );
    let head = direct.read(&key).await.unwrap().and_then(|r| r.head);
    assert_eq!(
        head,
        Some(image(e, 3)),
        "the late publish of seq 2 left the head at seq 3"
    );
    let retry = direct.publish_head(&key, "a", e, &image(e, 2)).await;
    assert!(
        matches!(&retry, Err(LeaseError::Stale { head, .. }) if *head == image(e, 3)),
        "{retry:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole9_an_acquire_that_lands_late_is_recognised_by_its_retry() {
    let (store, proxy) = proxied(Duration::from_millis(500)).await;
    let direct = store_direct().await;
    let org = fresh_org("pg-hole9-acquire");
    let (warm, key) = (key(&org, "warm"), key(&org, "t1"));
    store
        .acquire(&warm, "a", Duration::from_secs(30))
        .await
        .unwrap();
    let ttl = Duration::from_secs(30);
    land_late(
        &only_flow(&proxy),
        store.acquire_attempt(&key, "a", ttl, 77),
    )
    .await;
    let landed = direct
        .read(&key)
        .await
        .unwrap()
        .expect("the acquire landed");
    assert_eq!(landed.owner, "a");
    let retry = direct.acquire_attempt(&key, "a", ttl, 77).await;
    let retry = retry.expect("the retry of the same attempt gets the lease, not Held");
    assert_eq!(retry.epoch, landed.epoch);
    let other = direct.acquire(&key, "b", ttl).await;
    assert!(matches!(other, Err(LeaseError::Held { .. })), "{other:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole9_a_forget_that_lands_late_is_an_unknown_outcome_and_its_retry_returns_the_record() {
    let (store, proxy) = proxied(Duration::from_millis(500)).await;
    let direct = store_direct().await;
    let org = fresh_org("pg-hole9-forget");
    let (warm, key) = (key(&org, "warm"), key(&org, "t1"));
    let ttl = Duration::from_secs(30);
    let w = store.acquire(&warm, "a", ttl).await.unwrap().epoch;
    store.mark_forgotten(&warm, "a", w).await.unwrap();
    let e = store.acquire(&key, "a", ttl).await.unwrap().epoch;
    store
        .publish_head(&key, "a", e, &image(e, 1))
        .await
        .unwrap();
    land_late(&only_flow(&proxy), store.mark_forgotten(&key, "a", e)).await;
    let after = direct.read(&key).await.unwrap().unwrap();
    assert_eq!(
        (after.floor, after.head),
        (e, None),
        "the forget applied after its Timeout"
    );
    let retry = direct
        .mark_forgotten(&key, "a", e)
        .await
        .expect("a retry is not NotHeld");
    assert_eq!((retry.floor, retry.head), (e, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole9_a_dropped_answer_is_an_unknown_outcome_that_applied() {
    let (store, proxy) = proxied(Duration::from_millis(500)).await;
    let direct = store_direct().await;
    let key = key(&fresh_org("pg-hole9-answer"), "t1");
    let ttl = Duration::from_secs(30);
    let held = store.acquire(&key, "a", ttl).await.unwrap();
    // Renew once so that the connection has the statement prepared: the dropped answer is then
    // the answer to the renewal itself.
    let held = store.renew(&key, "a", held.epoch, ttl).await.unwrap();
    only_flow(&proxy).drop_next_answer();
    let got = store
        .renew(&key, "a", held.epoch, Duration::from_secs(300))
        .await;
    assert!(is_timeout(&got), "no answer: {got:?}");
    let now = direct.read(&key).await.unwrap().unwrap();
    assert!(
        now.expires_at_ms > held.expires_at_ms + 200_000,
        "the renewal applied although its caller heard Timeout: {} -> {}",
        held.expires_at_ms,
        now.expires_at_ms
    );
    let next = store.renew(&key, "a", held.epoch, ttl).await;
    assert!(
        next.is_ok(),
        "the next call runs on a fresh connection: {next:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hole14_a_refused_acquire_takes_one_deadline_and_names_acquire() {
    const OP: Duration = Duration::from_millis(1_000);
    let (store, proxy) = proxied(OP).await;
    let key = key(&fresh_org("pg-hole14"), "t1");
    store
        .acquire(&key, "a", Duration::from_secs(30))
        .await
        .unwrap();
    let refused = store.acquire(&key, "b", Duration::from_secs(30)).await;
    assert!(
        matches!(refused, Err(LeaseError::Held { .. })),
        "{refused:?}"
    );
    // Every request now takes 60 % of the deadline to arrive: the take and the read that
    // names the holder each fit, the two together do not.
    only_flow(&proxy).set_delay(OP * 6 / 10);
    let started = Instant::now();
    let got = store.acquire(&key, "b", Duration::from_secs(30)).await;
    let took = started.elapsed();
    assert!(
        matches!(
            got,
            Err(LeaseError::Store(StoreError::Timeout { op: "acquire", .. }))
        ),
        "one deadline for the operation, named after it: {got:?} after {took:?}"
    );
    assert!(took < OP * 3 / 2, "settled after {took:?}");
}

#[tokio::test]
async fn hole13_an_unknown_database_or_role_is_named_not_a_bad_table() {
    let url = pg_url();
    let config: tokio_postgres::Config = url.parse().unwrap();
    let db = config.get_dbname().expect("the test URL names a database");
    let at = url
        .rfind(&format!("/{db}"))
        .expect("the database is the URL's last part");
    let no_db = format!(
        "{}/leasehold_no_such_db{}",
        &url[..at],
        &url[at + 1 + db.len()..]
    );
    let got = PostgresLeaseStore::connect(&no_db, TABLE).await;
    assert!(
        matches!(&got, Err(Error::UnknownDatabase { database, .. }) if database == "leasehold_no_such_db"),
        "{got:?}"
    );
    let user = config.get_user().expect("the test URL names a user");
    let no_role = url.replacen(&format!("://{user}@"), "://leasehold_no_such_role@", 1);
    let got = PostgresLeaseStore::connect(&no_role, TABLE).await;
    assert!(
        matches!(&got, Err(Error::AuthFailed { user, .. }) if user == "leasehold_no_such_role"),
        "{got:?}"
    );
    let message = got.unwrap_err().to_string();
    assert!(message.contains("authentication failed"), "{message}");
}

#[tokio::test]
async fn hole9_a_table_made_before_attempts_gains_the_column_and_keeps_its_rows() {
    const OLD: &str = "leasehold_test_old_shape";
    let url = pg_url();
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect for setup");
    let _driver = tokio::spawn(connection);
    let old_create = leasehold::lease::postgres::create_table_sql(OLD)
        .unwrap()
        .replace("attempt     int8,", "");
    assert!(!old_create.contains("attempt"), "{old_create}");
    admin
        .batch_execute(&format!("DROP TABLE IF EXISTS {OLD}; {old_create};"))
        .await
        .expect("create a table of the shape before attempts");
    let org = fresh_org("pg-before-attempts");
    let key = key(&org, "t1");
    admin
        .execute(
            &format!(
                "INSERT INTO {OLD} (key, owner, epoch, expires_at, released, floor)
                 VALUES ($1, 'old', 3, clock_timestamp(), true, 1)"
            ),
            &[&key.as_str()],
        )
        .await
        .unwrap();
    let store = PostgresLeaseStore::connect(&url, OLD)
        .await
        .expect("a table made before attempts is upgraded");
    let ttl = Duration::from_secs(30);
    let taken = store.acquire_attempt(&key, "a", ttl, 5).await.unwrap();
    assert_eq!((taken.epoch, taken.floor), (4, 1), "the old row is kept");
    let retry = store.acquire_attempt(&key, "a", ttl, 5).await.unwrap();
    assert_eq!(retry.epoch, 4);
    PostgresLeaseStore::connect(&url, OLD)
        .await
        .expect("connecting again finds the column and changes nothing");
}

/// A store straight to the server, to look behind the proxy.
async fn store_direct() -> PostgresLeaseStore {
    store().await
}

/// A loopback port nothing listens on.
async fn closed_port() -> u16 {
    let probe = TcpListener::bind("127.0.0.1:0").await.unwrap();
    probe.local_addr().unwrap().port()
}

/// `host:port` of the test server, from its URL.
fn pg_upstream() -> String {
    let url = pg_url();
    let config: tokio_postgres::Config = url.parse().expect("LEASEHOLD_TEST_PG_URL parses");
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        other => panic!("LEASEHOLD_TEST_PG_URL must name a TCP host, not {other:?}"),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

/// A TCP proxy in front of the test server; stopping it drops every connection through it and
/// closes its port, as a server going away would.
struct Proxy {
    /// Its loopback port.
    port: u16,
    /// The accept loop, which owns every forwarding task.
    task: JoinHandle<()>,
    /// The URL of the test server with host and port replaced by the proxy's.
    url: String,
}

impl Proxy {
    async fn start(upstream: &str, port: Option<u16>) -> Proxy {
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_reuseaddr(true).unwrap();
        socket
            .bind(format!("127.0.0.1:{}", port.unwrap_or(0)).parse().unwrap())
            .unwrap();
        let listener = socket.listen(64).unwrap();
        let port = listener.local_addr().unwrap().port();
        let upstream = upstream.to_string();
        let task = tokio::spawn(async move {
            let mut links = tokio::task::JoinSet::new();
            while let Ok((mut client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                links.spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        let url = pg_url().replacen(&pg_upstream(), &format!("127.0.0.1:{port}"), 1);
        assert!(
            url.contains(&format!(":{port}")),
            "cannot point {url} at the proxy"
        );
        Proxy { port, task, url }
    }

    fn url(&self) -> String {
        self.url.clone()
    }

    /// Drops the listener and every link (the `JoinSet` aborts its tasks when dropped), and
    /// returns once they are gone.
    async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}
