//! The PostgreSQL lease store through `testkit::FaultProxy` (docs/testing.md, "The backends
//! through a proxy"): a silent flow is never reused after a timeout (hole 8), statements held back
//! and delivered late are safe and their retries recognise them (hole 9), a refused acquire takes
//! one deadline (hole 14); and, without the proxy, a refused login is named (hole 13) and a table
//! made before acquire attempts is upgraded.

use super::*;

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
    eprintln!("hole 8: six calls after the flow went silent: {outcomes:?}");
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
    eprintln!("hole 14: a refused acquire behind a slow path settled after {took:?}");
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

#[tokio::test]
async fn hole9_a_replica_role_cannot_upgrade_an_old_table_and_is_told_the_statement() {
    const OLD: &str = "leasehold_test_old_shape_limited";
    const ROLE: &str = "leasehold_test_replica";
    let url = pg_url();
    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect for setup");
    let _driver = tokio::spawn(connection);
    let old_create = leasehold::lease::postgres::create_table_sql(OLD)
        .unwrap()
        .replace("attempt     int8,", "");
    admin
        .batch_execute(&format!(
            "DO $$ BEGIN CREATE ROLE {ROLE} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
             DROP TABLE IF EXISTS {OLD}; {old_create};
             GRANT SELECT, INSERT, UPDATE ON {OLD} TO {ROLE};"
        ))
        .await
        .expect("set up an old table for a replica role");
    let config: tokio_postgres::Config = url.parse().unwrap();
    let user = config.get_user().expect("the test URL names a user");
    let limited = url.replacen(&format!("://{user}@"), &format!("://{ROLE}@"), 1);
    let refused = PostgresLeaseStore::connect(&limited, OLD).await;
    let add = leasehold::lease::postgres::add_attempt_column_sql(OLD).unwrap();
    assert!(
        matches!(&refused, Err(Error::InvalidOption { name: "table", reason }) if reason.contains(&add)),
        "{refused:?}"
    );
    admin
        .batch_execute(&add)
        .await
        .expect("the operator upgrades the table");
    PostgresLeaseStore::connect(&limited, OLD)
        .await
        .expect("the replica role connects to the upgraded table");
}

/// A store straight to the server, to look behind the proxy.
async fn store_direct() -> PostgresLeaseStore {
    store().await
}
