//! `S3Store` on moto through `testkit::FaultProxy` (docs/testing.md, "The backends through a
//! proxy"): every store call may land late (docs/guarantees.md, "Late landings"; promise 5,
//! "erasure of late puts"). A put held back past its deadline is an unknown outcome that lands
//! when delivered, and `Deadline::settle_puts` waits for it so that a sweep after it leaves
//! nothing; a silent flow costs one call, never the next; a put whose answer is dropped applied,
//! and its retry is told `AlreadyExists` by the conditional create.
//!
//! moto (werkzeug) answers every request with `Connection: close`, so each request opens a flow
//! of its own: the faults are armed on the next flow (`FaultProxy::on_next_flow`) before the
//! call that will use it.

use super::*;

use leasehold::deadline::Deadline;
use leasehold::lease::store_outcome_unknown;
use leasehold::testkit::{FaultProxy, Flow};

/// `host:port` of the moto server, for the proxy.
fn s3_upstream() -> String {
    let (endpoint, _) = server();
    endpoint
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("LEASEHOLD_TEST_S3_ENDPOINT must be http://host:port"))
        .trim_end_matches('/')
        .to_string()
}

/// A store below `prefix` whose endpoint is a new fault-injecting proxy in front of moto.
async fn proxied(prefix: &str, limits: S3Limits) -> (S3Store, FaultProxy) {
    let proxy = FaultProxy::start(&s3_upstream())
        .await
        .expect("start the proxy");
    let (_, bucket) = server();
    let endpoint = format!("http://{}", proxy.addr());
    let s = S3Store::with_limits(config(&endpoint, &bucket, prefix), limits)
        .expect("an S3 store through the proxy");
    (s, proxy)
}

/// Limits whose every request gives up after `request_timeout`, and whose retries are quick.
fn request_limits(request_timeout: Duration) -> S3Limits {
    S3Limits {
        connect_timeout: Duration::from_secs(2),
        request_timeout,
        max_retries: 2,
        retry_timeout: Duration::from_secs(10),
        init_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
        op_timeout: Duration::from_secs(30),
        ..S3Limits::default()
    }
}

fn is_unknown_timeout<T: std::fmt::Debug>(got: &Result<T, StoreError>) -> bool {
    matches!(got, Err(e @ StoreError::Timeout { .. }) if store_outcome_unknown(e))
}

/// Hole 6 on S3 (promise 5): a put held back past its `Deadline` is `Timeout`, runs on in the
/// wrapper's task, and lands when delivered; `settle_puts` waits for it (it times out while the
/// put is held, and once it returns the object is there), so a `delete_prefix` after it leaves
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_a_put_held_past_its_deadline_lands_late_and_settle_puts_waits_for_it() {
    let run = fresh("s3-late-put");
    // The request may take 20 s; the caller waits 0.5 s.
    let limits = request_limits(Duration::from_secs(20));
    let (s, proxy) = proxied(&format!("{run}/"), limits).await;
    let wrapped = Deadline::new(s, Duration::from_millis(500)).unwrap();
    let direct = store(&format!("{run}/"));
    let (tenant, key) = ("acme/t1/", "acme/t1/e00000001/snap-000001.db");
    let other = "acme/t1/e00000001/snap-000000.db";
    assert_eq!(
        wrapped.put_if_absent(other, b"older".to_vec()).await,
        Ok(Put::Created)
    );
    proxy.on_next_flow(Flow::hold);
    let late = wrapped.put_if_absent(key, b"image".to_vec()).await;
    assert!(
        is_unknown_timeout(&late),
        "the held put times out: {late:?}"
    );
    let flow = proxy.last_flow().expect("the put's connection");
    assert!(flow.held_bytes() > 0, "the PUT was held back: {flow:?}");
    assert_eq!(wrapped.puts_running(tenant), 1, "the put runs on");
    assert_eq!(direct.get(key).await, Ok(None), "not landed yet");
    let waited = wrapped
        .settle_puts(tenant, Duration::from_millis(300))
        .await;
    assert!(
        matches!(
            waited,
            Err(StoreError::Timeout {
                op: "settle_puts",
                ..
            })
        ),
        "settle_puts waits for the held put: {waited:?}"
    );
    let delivered = Instant::now();
    flow.release_held().await.expect("deliver the held PUT");
    wrapped
        .settle_puts(tenant, Duration::from_secs(10))
        .await
        .expect("the late put settles once delivered");
    eprintln!(
        "s3 late put: settled {:?} after delivery",
        delivered.elapsed()
    );
    assert_eq!(wrapped.puts_running(tenant), 0);
    assert_eq!(
        direct.get(key).await,
        Ok(Some(b"image".to_vec())),
        "the put landed after its caller heard Timeout"
    );
    assert_eq!(wrapped.delete_prefix(tenant).await, Ok(2), "both images");
    assert_eq!(
        direct.list(tenant).await,
        Ok(vec![]),
        "the sweep left nothing"
    );
}

/// A silent flow (a NAT that forgot it) costs the call on it and no other: a put on it times
/// out at the client's request timeout (a conditional PUT is not repeated), every later call
/// runs on a fresh connection and succeeds, and the stalled PUT never arrives. A get on a
/// silent flow is retried by `object_store` on a fresh connection within the same call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_a_silent_flow_times_out_and_the_next_call_succeeds() {
    const REQUEST: Duration = Duration::from_millis(500);
    let run = fresh("s3-stall");
    let (s, proxy) = proxied(&format!("{run}/"), request_limits(REQUEST)).await;
    let direct = store(&format!("{run}/"));
    proxy.on_next_flow(Flow::stall);
    let mut outcomes = Vec::new();
    for i in 0..6 {
        let started = Instant::now();
        let got = s.put_if_absent(&format!("k{i}"), b"v".to_vec()).await;
        outcomes.push((got, started.elapsed()));
    }
    eprintln!("s3: six puts, the first on a silent flow: {outcomes:?}");
    assert!(
        is_unknown_timeout(&outcomes[0].0),
        "the put on the silent flow times out: {outcomes:?}"
    );
    assert!(outcomes[0].1 < REQUEST * 4, "bounded by the client timeout");
    assert!(
        outcomes[1..].iter().all(|(o, _)| *o == Ok(Put::Created)),
        "every later call runs on a fresh connection: {outcomes:?}"
    );
    let silent = &proxy.flows()[0];
    assert_eq!(
        silent.bytes_to_server(),
        0,
        "nothing crossed the silent flow"
    );
    assert_eq!(
        direct.get("k0").await,
        Ok(None),
        "the stalled put never arrived"
    );

    // A get is safe to repeat: object_store retries it, on a fresh connection.
    let before = proxy.flows().len();
    proxy.on_next_flow(Flow::stall);
    let started = Instant::now();
    let got = s.get("k1").await;
    let took = started.elapsed();
    eprintln!("s3: a get whose first try went to a silent flow: {got:?} after {took:?}");
    assert_eq!(got, Ok(Some(b"v".to_vec())), "retried within the call");
    assert!(
        took >= REQUEST,
        "the first try waited out its timeout: {took:?}"
    );
    assert_eq!(
        proxy.flows().len(),
        before + 2,
        "the silent flow, then a fresh one"
    );
    let all = store("").delete_prefix(&format!("{run}/")).await;
    assert_eq!(all, Ok(5), "k1..k5");
}

/// A put whose answer is lost with the server's close (a connection cut after the server
/// applied the PUT): `object_store` takes the cut for a request never sent and repeats the
/// conditional PUT, whose `412` it reports as `AlreadyExists`. The caller is told
/// `AlreadyExists` for the object it created itself: `AlreadyExists` from `S3Store` does not
/// prove that another writer took the key (docs/testing.md, "The backends through a proxy").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_whose_connection_is_cut_after_it_applied_is_told_already_exists() {
    let run = fresh("s3-cut");
    let limits = request_limits(Duration::from_secs(1));
    let (s, proxy) = proxied(&format!("{run}/"), limits).await;
    let direct = store(&format!("{run}/"));
    let key = "acme/t1/e00000001/snap-000001.db";
    // The answer is dropped and the server's close passed on at once: the client reads EOF.
    proxy.on_next_flow(|f: &Flow| {
        f.drop_next_answer();
        f.pass_close_after_dropped_answer();
    });
    let got = s.put_if_absent(key, b"first".to_vec()).await;
    eprintln!(
        "s3: a put cut after it applied: {got:?}, {} flows",
        proxy.flows().len()
    );
    assert_eq!(got, Ok(Put::AlreadyExists), "its own object, repeated");
    assert_eq!(proxy.flows().len(), 2, "the PUT was sent twice");
    assert_eq!(direct.get(key).await, Ok(Some(b"first".to_vec())));
    let all = store("").delete_prefix(&format!("{run}/")).await;
    assert_eq!(all, Ok(1));
}

/// A put whose answer never arrives applied: the caller hears `Timeout` (outcome unknown), the
/// object is there, and a retry of the same `put_if_absent` is `AlreadyExists` (the conditional
/// create, `If-None-Match: *`, refuses the second PUT; it never overwrites).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_whose_answer_is_dropped_applied_and_its_retry_is_already_exists() {
    let run = fresh("s3-dropped");
    let limits = request_limits(Duration::from_secs(1));
    let (s, proxy) = proxied(&format!("{run}/"), limits).await;
    let direct = store(&format!("{run}/"));
    let key = "acme/t1/e00000001/snap-000001.db";
    proxy.on_next_flow(Flow::drop_next_answer);
    let got = s.put_if_absent(key, b"first".to_vec()).await;
    assert!(is_unknown_timeout(&got), "no answer: {got:?}");
    let flow = proxy.last_flow().expect("the put's connection");
    assert!(
        flow.wait_from_server_beyond(0, Duration::from_secs(5))
            .await,
        "the server did answer"
    );
    assert_eq!(
        direct.get(key).await,
        Ok(Some(b"first".to_vec())),
        "the put applied although its caller heard Timeout"
    );
    let retry = s.put_if_absent(key, b"second".to_vec()).await;
    assert_eq!(retry, Ok(Put::AlreadyExists), "the retry never overwrites");
    assert_eq!(direct.get(key).await, Ok(Some(b"first".to_vec())));
    assert_eq!(proxy.flows().len(), 2, "one request each");
    let all = store("").delete_prefix(&format!("{run}/")).await;
    assert_eq!(all, Ok(1));
}

/// A large object on a link slower than one request's timeout allows, yet faster than the
/// slowest rate the runtime gives time for (8 MiB/s): its put and its sized get take as long as
/// their bytes need (up to `op_timeout`), not the client's `request_timeout`. Before, a put of
/// a large image (or a restore's sized get of one) on S3 was cut at `request_timeout` (30 s by
/// default: one HTTP request, body included), however long the runtime's sized deadline and
/// `op_timeout` waited: a 512 MiB image on an 8 MiB/s link needs 64 s. Here 12 MiB cross a
/// proxy that waits 1 ms before each 16 KiB chunk (at most 16 MiB/s: 0.75 s or more; 2.0 s
/// and 1.7 s measured) against a `request_timeout` of 300 ms, with no retries. Before the fix
/// the put answered `Timeout { op: "put_if_absent", after_ms: 300 }` after 320 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_put_and_sized_get_on_a_slow_link_take_the_time_of_their_bytes() {
    const REQUEST: Duration = Duration::from_millis(300);
    const BYTES: usize = 12 * 1024 * 1024;
    let run = fresh("s3-slow-link");
    let limits = S3Limits {
        max_retries: 0,
        ..request_limits(REQUEST)
    };
    let (s, proxy) = proxied(&format!("{run}/"), limits).await;
    let bytes: Vec<u8> = (0..BYTES).map(|i| (i % 251) as u8).collect();

    proxy.on_next_flow(|flow| flow.set_delay(Duration::from_millis(1)));
    let started = Instant::now();
    let put = s.put_if_absent("big", bytes.clone()).await;
    let took = started.elapsed();
    eprintln!("s3: a 12 MiB put on a slow link: {put:?} after {took:?}");
    assert_eq!(put, Ok(Put::Created), "after {took:?}");
    assert!(
        took > REQUEST,
        "the link was slower than one request's timeout: {took:?}"
    );

    proxy.on_next_flow(|flow| flow.set_download_delay(Duration::from_millis(1)));
    let started = Instant::now();
    let got = s.get_sized("big", BYTES as u64).await;
    let took = started.elapsed();
    eprintln!(
        "s3: a sized get of 12 MiB on a slow link: {:?} after {took:?}",
        got.as_ref().map(|b| b.as_ref().map(Vec::len))
    );
    assert!(got == Ok(Some(bytes)), "the object, whole, after {took:?}");
    assert!(
        took > REQUEST,
        "the link was slower than one request's timeout: {took:?}"
    );
    let all = store("").delete_prefix(&format!("{run}/")).await;
    assert_eq!(all, Ok(1));
}

/// Review (hostile): a GET whose connection stalls (no byte either way, no reset — a dead
/// pooled keep-alive connection, a server that stops sending) is given up after
/// `request_timeout` and retried on a new connection (a GET is safe to repeat), within
/// `op_timeout` — for a small object or an unsized get, and a large sized get too. A sized get
/// of more than 8 MiB first went through the transfer client alone, whose request timeout fits
/// 5 GiB at 8 MiB/s (`request_timeout` + 640 s): its stalled first request was never given up
/// and the call ended at `op_timeout` with `Timeout`, however fast the link was otherwise (here
/// `Timeout { op: "get", after_ms: 6000 }`). Large gets now go through a client whose read
/// timeout is `request_timeout`, a timer every arriving byte resets.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_a_large_sized_get_whose_first_connection_stalls_is_retried_like_a_small_one() {
    let run = fresh("s3-stall-retry");
    let limits = S3Limits {
        op_timeout: Duration::from_secs(6),
        ..request_limits(Duration::from_millis(1500))
    };
    let (s, proxy) = proxied(&format!("{run}/"), limits).await;
    for (name, size) in [("small", 1024 * 1024), ("large", 9 * 1024 * 1024)] {
        assert_eq!(
            s.put_if_absent(name, vec![7u8; size]).await,
            Ok(Put::Created)
        );
        proxy.on_next_flow(|flow| flow.stall());
        let started = Instant::now();
        let got = s.get_sized(name, size as u64).await;
        let took = started.elapsed();
        let got = got.map(|b| b.map(|b| b.len()));
        eprintln!("s3: a {name} sized get whose first connection stalls: {got:?} after {took:?}");
        assert_eq!(got, Ok(Some(size)), "{name}: after {took:?}");
    }
    let all = store("").delete_prefix(&format!("{run}/")).await;
    assert_eq!(all, Ok(2));
}
