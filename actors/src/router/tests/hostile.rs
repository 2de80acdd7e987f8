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
