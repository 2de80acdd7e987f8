//! A hostile reviewer's attacks on the transport (docs/guarantees.md, promise 11 "only the fleet
//! may send", promise 6 "every call settles"): a man in the middle on a network without TLS
//! that answers a request with a signed reply it captured for another, and a peer that sends a
//! request's head and never its whole body.

use std::time::Instant;

use super::*;

/// A listener that answers every request on it with the same HTTP response (`mac`, `body`):
/// a man in the middle replaying a reply it captured. Answers once it has read the request's
/// head and `Content-Length` bytes of body.
async fn replaying(mac: String, body: Vec<u8>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let (mac, body) = (mac.clone(), body.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let Ok(n) = conn.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&seen).to_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if seen.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n\
                     {MAC_HEADER}: {mac}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(&body).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    at
}

/// Replies are signed so that a sender believes only what the holder answered. A reply signed
/// over its own bytes alone proves only that *some* replica said it to *some* request: a man in
/// the middle (plain HTTP between replicas) could answer a command that never reached its
/// holder with a reply captured for another, and the sender would report it run — an
/// acknowledged write that is nowhere. A reply must be signed for the request it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promise11_a_signed_reply_captured_for_one_request_is_not_the_answer_to_another() {
    let cfg = config();
    let inbound = Arc::new(Echo::default());
    let server = Server::start(&cfg, inbound.clone()).unwrap();
    // Request `a`, sent by a replica of the fleet; its signed reply captured off the wire.
    let a = encode_envelope(&envelope("echo", "a", b"abc")).unwrap();
    let request_mac = auth::sign(&key(), &a);
    let captured = reqwest::Client::new()
        .post(format!("{}{PATH}", server.endpoint()))
        .header(MAC_HEADER, request_mac)
        .body(a)
        .send()
        .await
        .unwrap();
    let mac = captured.headers()[MAC_HEADER].to_str().unwrap().to_owned();
    let body = captured.bytes().await.unwrap().to_vec();
    // Request `b` goes through the man in the middle, who answers it with `a`'s reply.
    let mitm = replaying(mac, body).await;
    let client = ForwardClient::new(&cfg).unwrap();
    let b = client
        .forward(&format!("http://{mitm}"), &envelope("echo", "b", b"xyz"), T)
        .await;
    assert!(
        matches!(b, Err(ForwardError::Lost(_))),
        "request b never reached a replica, yet its sender heard {b:?}"
    );
    assert_eq!(inbound.ran.lock().unwrap().clone(), vec!["a".to_owned()]);
    // The fleet's own replies still verify.
    good(&client, &server, "after").await;
    server.stop().await;
}

/// A peer that sends a request's head and part of its body, then nothing, holds a connection
/// and a buffer of the server's; stopping the transport (part of `close()`) must not wait for
/// it longer than a forward under way is given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promise6_stopping_the_server_is_not_held_by_a_body_that_never_comes() {
    let cfg = config();
    let server = Server::start(&cfg, Arc::new(Echo::default())).unwrap();
    let mut raw = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    let head = format!(
        "POST {PATH} HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n{MAC_HEADER}: 00\r\n\r\n"
    );
    raw.write_all(head.as_bytes()).await.unwrap();
    raw.write_all(&[0; 10]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let began = Instant::now();
    server.stop().await;
    let took = began.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "the server took {took:?} to stop behind a body that never came"
    );
    drop(raw);
}

/// A peer that sends a request's head (no key needed) and part of its body, then nothing,
/// holds a connection, a worker's slot and a buffer of the server's until it lets go: the
/// server must drop it after a while, or any number of such peers starve the fleet's forwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promise11_a_body_that_never_comes_does_not_hold_its_connection_for_ever() {
    let mut cfg = config();
    cfg.body_timeout = Duration::from_millis(500);
    let server = Server::start(&cfg, Arc::new(Echo::default())).unwrap();
    let mut raw = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    let head = format!(
        "POST {PATH} HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n{MAC_HEADER}: 00\r\n\r\n"
    );
    raw.write_all(head.as_bytes()).await.unwrap();
    raw.write_all(&[0; 10]).await.unwrap();
    let mut answer = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(20), raw.read_to_end(&mut answer)).await;
    assert!(
        ended.is_ok(),
        "the server still holds the connection after 20 s"
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // The server serves on.
    let client = ForwardClient::new(&cfg).unwrap();
    good(&client, &server, "after").await;
    server.stop().await;
}

/// A listener that answers every request with the head `head` and then `body_bytes` zero bytes,
/// and holds the connection open: a reply that claims or streams more than any reply may take.
async fn oversize_answers(head: String, body_bytes: usize) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let at = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let head = head.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 << 10];
                let _ = conn.read(&mut buf).await;
                let _ = conn.write_all(head.as_bytes()).await;
                let zeros = vec![0u8; 1 << 20];
                let mut sent = 0;
                while sent < body_bytes {
                    let n = zeros.len().min(body_bytes - sent);
                    if conn.write_all(&zeros[..n]).await.is_err() {
                        return;
                    }
                    sent += n;
                }
                // Hold the connection: the rest never comes.
                tokio::time::sleep(Duration::from_secs(30)).await;
            });
        }
    });
    at
}

/// A reply takes at most the envelope's limit (docs/guarantees.md, "a forwarded message's
/// size"). A responder that claims or streams more (a broken or hostile peer, a man in the
/// middle) must not make the sender buffer it, before its MAC could even be checked: the
/// sender stops reading at the limit and the answer is lost (the outcome unknown), at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promise11_a_reply_over_the_limit_is_not_read_whole() {
    let cfg = config();
    let client = ForwardClient::new(&cfg).unwrap();
    let limit = leasehold::codec::ENVELOPE_LIMIT;
    let claimed = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n{MAC_HEADER}: 00\r\n\
         content-length: {}\r\n\r\n",
        1u64 << 40
    );
    let chunked = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n{MAC_HEADER}: 00\r\n\
         transfer-encoding: chunked\r\n\r\n{:x}\r\n",
        1u64 << 40
    );
    for (what, head) in [("a claimed length", claimed), ("a chunked body", chunked)] {
        let at = oversize_answers(head, limit + (2 << 20)).await;
        let began = std::time::Instant::now();
        let answer = client
            .forward(&format!("http://{at}"), &envelope("echo", "big", b"x"), T)
            .await;
        let took = began.elapsed();
        assert!(
            matches!(&answer, Err(ForwardError::Lost(why)) if why.contains("limit")),
            "{what}: {answer:?}"
        );
        assert!(took < Duration::from_secs(3), "{what}: read for {took:?}");
    }
}
