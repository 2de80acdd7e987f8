//! A hostile reviewer's attacks on the router (docs/guarantees.md, promise 11): a holder that
//! could not be reached once is not given up on while it renews its lease and can be reached
//! again.

use super::*;

/// A holder whose endpoint refused one connection (it was moving its transport: a new endpoint
/// advertised a moment later) and that renews its lease: a message with time to spare must
/// reach it, not be refused `Unavailable` for a lease that never runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promise11_a_holder_unreachable_once_is_tried_again_while_it_renews() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let (leases, _dir) = store();
    let world = Arc::new(World::default());
    let a = Replica::start("ra", leases.clone(), world.clone(), Options::default()).await;
    let refusing = Options {
        advertise: Some(format!("http://{closed}")),
        ..Options::default()
    };
    let mut b = Replica::start("rb", leases.clone(), world.clone(), refusing).await;
    b.send("t9", "open", D).await.unwrap();
    let a = Arc::new(a);
    let sent = {
        let a = a.clone();
        tokio::spawn(async move { a.send("t9", "k9", Duration::from_secs(4)).await })
    };
    // The first forward finds the port closed (at once, on loopback); then the holder
    // advertises where it is.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let endpoint = b.server.as_ref().unwrap().endpoint().to_owned();
    b.epoch = leases
        .advertise("rb", &endpoint, 2, TTL)
        .await
        .unwrap()
        .epoch;
    // The holder renews its lease and record all along.
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while !sent.is_finished() && std::time::Instant::now() < until {
        b.renew().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let reply = sent.await.unwrap();
    assert_eq!(
        reply.as_deref().map_err(|e| e.to_string()),
        Ok(&b"k9@rb"[..]),
        "the holder was reachable again and renewing"
    );
    assert_eq!(ran_at(&world, "k9"), vec!["rb"]);
}

/// Pipes every connection on `listener` to `upstream`: the holder's port answering again.
async fn pipe(listener: tokio::net::TcpListener, upstream: std::net::SocketAddr) {
    while let Ok((mut inbound, _)) = listener.accept().await {
        tokio::spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

/// The same with the endpoint unchanged: the holder's port refused one connection (a full
/// backlog, a restart of its listener) and answers again, while the holder renews its lease. A
/// holder that renews is alive: the message must reach it, not be refused `Unavailable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promise11_a_holder_that_renews_after_refusing_a_connection_is_tried_again() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let (leases, _dir) = store();
    let world = Arc::new(World::default());
    let a = Replica::start("ra", leases.clone(), world.clone(), Options::default()).await;
    let refusing = Options {
        advertise: Some(format!("http://{port}")),
        ..Options::default()
    };
    let b = Replica::start("rb", leases.clone(), world.clone(), refusing).await;
    b.send("t10", "open", D).await.unwrap();
    let a = Arc::new(a);
    let sent = {
        let a = a.clone();
        tokio::spawn(async move { a.send("t10", "k10", Duration::from_secs(4)).await })
    };
    // The first forward finds the port closed (at once, on loopback); then it answers again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let listener = tokio::net::TcpListener::bind(port).await.unwrap();
    let server = b.server.as_ref().unwrap().local_addr();
    let piping = tokio::spawn(pipe(listener, server));
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while !sent.is_finished() && std::time::Instant::now() < until {
        b.renew().await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let reply = sent.await.unwrap();
    piping.abort();
    assert_eq!(
        reply.as_deref().map_err(|e| e.to_string()),
        Ok(&b"k10@rb"[..]),
        "the holder renewed and its port answered again"
    );
    assert_eq!(ran_at(&world, "k10"), vec!["rb"]);
}

/// Every call settles within its deadline (docs/guarantees.md, promise 11): asking where the
/// tenant stands here goes through the supervisor's mailbox, on the thread the replica started
/// on (the host's); a supervisor held up must not hold the caller past its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promise11_a_supervisor_held_up_does_not_hold_a_message_past_its_deadline() {
    let (a, _b, _world, _dir) = two(Options::default).await;
    a.host
        .stalled
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let began = std::time::Instant::now();
    let sent = tokio::time::timeout(
        Duration::from_secs(5),
        a.send("t11", "k11", Duration::from_millis(300)),
    )
    .await;
    let took = began.elapsed();
    assert!(
        matches!(sent, Ok(Err(Error::DeadlineExceeded { .. }))),
        "after {took:?}: {sent:?}"
    );
    assert!(took < Duration::from_millis(1_300), "{took:?}");
}
