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
use leasehold::layout::{ImageRef, LogPos};
use leasehold::lease::postgres::{PgOptions, PostgresLeaseStore};
use leasehold::lease::{LeaseError, LeaseStore, RenewOutcome};
use leasehold::testkit::{FaultProxy, Flow, LeaseHarness, lease_store_conformance};
use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::Barrier;
use tokio::task::JoinHandle;

#[path = "postgres_lease_store/late.rs"]
mod late;

/// The table every test of this file shares; orgs are unique per run, so runs can share it too.
const TABLE: &str = "leasehold_test_leases";

/// The ttl of the conformance suite: short, so that its real sleeps stay fast, and long enough
/// that the suite's margins (40 % of it) hold a few round trips on a loaded machine. At 400 ms a
/// CI run under load saw a renewed lease acquired by another owner 240 ms after the renewal and
/// five reads (docs/testing.md, "CI's time").
const SUITE_TTL: Duration = Duration::from_millis(1000);

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

#[tokio::test]
async fn a_table_made_before_the_log_tip_gains_its_columns_and_keeps_its_leases() {
    const OLD: &str = "leasehold_test_before_tip";
    let url = pg_url();
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect for setup");
    let _driver = tokio::spawn(connection);
    let org = fresh_org("pg-before-tip");
    let key = key(&org, "t1");
    admin
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {OLD};
             CREATE TABLE {OLD} (key text PRIMARY KEY, owner text NOT NULL, epoch int8 NOT NULL,
                expires_at timestamptz NOT NULL, released boolean NOT NULL DEFAULT false,
                floor int8 NOT NULL DEFAULT 0, head_epoch int8, head_seq int8, head_sha256 text,
                attempt int8);"
        ))
        .await
        .expect("create a table of the shape before the log tip");
    admin
        .execute(
            &format!(
                "INSERT INTO {OLD} (key, owner, epoch, expires_at, released, floor, attempt)
                 VALUES ($1, 'a', 3, clock_timestamp() + interval '30 seconds', false, 1, 9)"
            ),
            &[&key.as_str()],
        )
        .await
        .unwrap();
    let store = PostgresLeaseStore::connect(&url, OLD)
        .await
        .expect("a table made before the log tip is upgraded");
    let kept = store.read(&key).await.unwrap().expect("the row is kept");
    let fields = (
        kept.owner.as_str(),
        kept.epoch,
        kept.floor,
        kept.released,
        kept.tip,
    );
    assert_eq!(fields, ("a", 3, 1, false, None), "the live lease is kept");
    let retry = store
        .acquire_attempt(&key, "a", Duration::from_secs(30), 9)
        .await;
    assert_eq!(retry.unwrap().epoch, 3, "its attempt is kept too");
    let to = LogPos { epoch: 3, seq: 1 };
    let moved = store.move_tip(&key, "a", 3, None, to).await.unwrap();
    assert_eq!(moved.tip, Some(to));
    let again = PostgresLeaseStore::connect(&url, OLD)
        .await
        .expect("connecting again finds the columns and changes nothing");
    assert_eq!(again.read(&key).await.unwrap().unwrap().tip, Some(to));
    // The table gained the replica records' endpoint too: the holder `a` can advertise.
    let ttl = Duration::from_secs(30);
    let before = again.lookup(&key).await.unwrap();
    assert_eq!((before.lease_live(), before.holder), (true, None));
    again.advertise("a", "http://a:1", 1, ttl).await.unwrap();
    let seen = again.lookup(&key).await.unwrap();
    assert_eq!(seen.live_endpoint(), Some("http://a:1"));
}

/// A connection the pool opened during a call made on another runtime serves every later call,
/// whichever runtime makes it and whether that runtime still runs. The runtime's tip batches
/// run on a thread of their own that drives its runtime only while a batch is sent; a
/// connection opened there had its I/O task on that runtime, so a later call on any other
/// runtime that drew it from the pool (a renewal, a read) hung until the next batch — or until
/// its deadline when writes had stopped: `Timeout { op: "read", after_ms: 15000 }` in the
/// backend matrix's `change_log` tests, after a snapshot (2026-12-02). Here: a pool of one
/// connection, opened by a read on a runtime whose thread then waits outside it; a read from
/// this runtime must be answered well within its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_opened_on_a_runtime_that_stopped_running_serves_the_next_call() {
    let opts = PgOptions {
        pool_size: 1,
        op_timeout: Duration::from_secs(3),
        ..PgOptions::default()
    };
    let store = PostgresLeaseStore::connect_with(&pg_url(), TABLE, opts)
        .await
        .unwrap();
    let key = key(&fresh_org("pg-io"), "t");
    store
        .acquire(&key, "a", Duration::from_secs(30))
        .await
        .unwrap();
    // Whatever connection the pool held goes: the next call opens one.
    store.drop_idle_connections();
    let (opened_tx, opened_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let other = store.clone();
    let k = key.clone();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let read = runtime.block_on(other.read(&k));
        opened_tx.send(read.map(|r| r.is_some())).unwrap();
        // The runtime stays, but nothing drives it until the test is over.
        let _ = done_rx.recv();
        drop(runtime);
    });
    assert_eq!(opened_rx.recv().unwrap(), Ok(true));
    let started = Instant::now();
    let read = store.read(&key).await;
    let took = started.elapsed();
    done_tx.send(()).unwrap();
    thread.join().unwrap();
    assert!(
        matches!(read, Ok(Some(_))),
        "the read through the connection opened there: {read:?} after {took:?}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
}
