//! The transport against a real server on loopback: a good forward, then every kind of bad
//! request, each followed by a good one on the same pooled client — each refused with its code
//! before anything ran, and the pool still usable (docs/guarantees.md, promise 11, bad input).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use leasehold::Error;
use leasehold::codec::{ENVELOPE_FORMAT, Envelope, encode_envelope};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::wire::{
    CODE_BAD_MESSAGE, CODE_TOO_LARGE, CODE_UNAUTHENTICATED, CODE_UNKNOWN_FORMAT,
    CODE_UNKNOWN_MESSAGE,
};
use super::*;

/// An inbound that knows the message `echo` v1 and runs it (answering its body reversed),
/// counting what it ran; any other name or version is refused before it runs.
#[derive(Default)]
pub(crate) struct Echo {
    /// The idempotency keys of the messages that ran, in order.
    pub(crate) ran: Mutex<Vec<String>>,
}

impl Inbound for Echo {
    fn deliver(&self, e: Envelope) -> BoxFuture<'static, Result<Vec<u8>, Error>> {
        let known: BTreeSet<(&str, u32)> = [("echo", 1)].into();
        if !known.contains(&(e.name.as_str(), e.version)) {
            let refused = Error::Refused {
                code: CODE_UNKNOWN_MESSAGE.into(),
                message: format!("no message {} version {}", e.name, e.version),
            };
            return Box::pin(async move { Err(refused) });
        }
        self.ran.lock().unwrap().push(e.idempotency_key.clone());
        let mut reply = e.body;
        reply.reverse();
        Box::pin(async move { Ok(reply) })
    }
}

pub(crate) fn key() -> FleetKey {
    FleetKey::new(vec![7; 32]).unwrap()
}

pub(crate) fn config() -> TransportConfig {
    TransportConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), key())
}

pub(crate) fn envelope(name: &str, idem: &str, body: &[u8]) -> Envelope {
    Envelope {
        format: ENVELOPE_FORMAT,
        from: "r-test".into(),
        org: "acme".into(),
        tenant: "t1".into(),
        name: name.into(),
        version: 1,
        idempotency_key: idem.into(),
        deadline_ms: 5_000,
        hops: 1,
        open: false,
        body: body.to_vec(),
    }
}

const T: Duration = Duration::from_secs(5);

async fn good(client: &ForwardClient, server: &Server, idem: &str) {
    let reply = client
        .forward(server.endpoint(), &envelope("echo", idem, b"abc"), T)
        .await;
    assert_eq!(
        reply,
        Ok(b"cba".to_vec()),
        "the pool still serves after {idem}"
    );
}

fn refused_with(reply: Result<client::RawReply, ForwardError>, status: u16, code: &str) {
    match reply {
        Ok(raw) => {
            assert_eq!(raw.status, status, "{:?}", raw.outcome);
            match raw.outcome {
                Err(w) => assert_eq!(w.code, code, "{}", w.message),
                Ok(bytes) => panic!("want {code}, got a reply {bytes:?}"),
            }
        }
        Err(e) => panic!("want {code}, got {e:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_request_is_refused_by_its_code_before_anything_runs_and_the_pool_serves_on() {
    let inbound = Arc::new(Echo::default());
    let mut cfg = config();
    cfg.body_limit = 4_096;
    let server = Server::start(&cfg, inbound.clone()).unwrap();
    let client = ForwardClient::new(&cfg).unwrap();
    let at = server.endpoint().to_owned();
    good(&client, &server, "good-0").await;

    // Oversize: refused on its Content-Length, before a byte is read.
    let big = encode_envelope(&envelope("echo", "big", &[1; 5_000])).unwrap();
    let mac = auth::sign(&key(), &big);
    refused_with(
        client.post(&at, big, Some(mac), T).await,
        413,
        CODE_TOO_LARGE,
    );
    good(&client, &server, "after-oversize").await;

    // Unauthenticated: no MAC, a MAC of another key, a MAC of other bytes.
    let body = encode_envelope(&envelope("echo", "forged", b"x")).unwrap();
    refused_with(
        client.post(&at, body.clone(), None, T).await,
        401,
        CODE_UNAUTHENTICATED,
    );
    let other = FleetKey::new(vec![8; 32]).unwrap();
    let forged = Some(auth::sign(&other, &body));
    refused_with(
        client.post(&at, body.clone(), forged, T).await,
        401,
        CODE_UNAUTHENTICATED,
    );
    let stale = Some(auth::sign(&key(), b"another body"));
    refused_with(
        client.post(&at, body, stale, T).await,
        401,
        CODE_UNAUTHENTICATED,
    );
    good(&client, &server, "after-unauthenticated").await;

    // Signed, but not an envelope: garbage, cut mid-way, bytes after it, a newer format.
    let whole = encode_envelope(&envelope("echo", "bad", b"xyz")).unwrap();
    let signed = |bytes: Vec<u8>| (Some(auth::sign(&key(), &bytes)), bytes);
    let mut newer = whole.clone();
    newer[..2].copy_from_slice(&9u16.to_le_bytes());
    for (bytes, code) in [
        (vec![1, 0, 0xff, 0xff], CODE_BAD_MESSAGE),
        (whole[..whole.len() / 2].to_vec(), CODE_BAD_MESSAGE),
        ([&whole[..], &[0]].concat(), CODE_BAD_MESSAGE),
        (newer, CODE_UNKNOWN_FORMAT),
    ] {
        let (mac, bytes) = signed(bytes);
        refused_with(client.post(&at, bytes, mac, T).await, 400, code);
        good(&client, &server, code).await;
    }

    // An unknown name, an unknown schema version: refused by the receiver before running.
    let unknown = client
        .forward(&at, &envelope("nope", "unknown", b"x"), T)
        .await;
    assert!(
        matches!(&unknown, Err(ForwardError::Refused(w)) if w.code == CODE_UNKNOWN_MESSAGE),
        "{unknown:?}"
    );
    let mut v2 = envelope("echo", "v2", b"x");
    v2.version = 2;
    let unknown = client.forward(&at, &v2, T).await;
    assert!(
        matches!(&unknown, Err(ForwardError::Refused(w)) if w.code == CODE_UNKNOWN_MESSAGE),
        "{unknown:?}"
    );
    good(&client, &server, "after-unknown").await;

    let ran = inbound.ran.lock().unwrap().clone();
    assert!(
        ran.iter()
            .all(|k| k.starts_with("good") || k.starts_with("after") || k.starts_with("LEASEHOLD")),
        "only good messages ran: {ran:?}"
    );
    assert_eq!(ran.len(), 8, "{ran:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_cut_mid_way_on_the_connection_runs_nothing_and_the_server_serves_on() {
    let inbound = Arc::new(Echo::default());
    let cfg = config();
    let server = Server::start(&cfg, inbound.clone()).unwrap();
    let client = ForwardClient::new(&cfg).unwrap();
    good(&client, &server, "before").await;
    let body = encode_envelope(&envelope("echo", "cut", b"hello")).unwrap();
    let mac = auth::sign(&key(), &body);
    let mut raw = tokio::net::TcpStream::connect(server.local_addr())
        .await
        .unwrap();
    let head = format!(
        "POST {PATH} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n{MAC_HEADER}: {mac}\r\n\r\n",
        body.len()
    );
    raw.write_all(head.as_bytes()).await.unwrap();
    raw.write_all(&body[..body.len() / 2]).await.unwrap();
    raw.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_millis(500), raw.read_to_end(&mut answer)).await;
    good(&client, &server, "after").await;
    let ran = inbound.ran.lock().unwrap().clone();
    assert_eq!(
        ran,
        vec!["before".to_owned(), "after".to_owned()],
        "the cut frame never ran"
    );
    server.stop().await;
}

/// An inbound that runs the message and never answers: its sender's answer is lost.
struct Silent(Mutex<usize>);

impl Inbound for Silent {
    fn deliver(&self, _: Envelope) -> BoxFuture<'static, Result<Vec<u8>, Error>> {
        *self.0.lock().unwrap() += 1;
        Box::pin(futures::future::pending())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_lost_after_sending_is_an_unknown_outcome_and_a_closed_port_is_not_sent() {
    let silent = Arc::new(Silent(Mutex::new(0)));
    let cfg = config();
    let server = Server::start(&cfg, silent.clone()).unwrap();
    let client = ForwardClient::new(&cfg).unwrap();
    let lost = client
        .forward(
            server.endpoint(),
            &envelope("echo", "k", b"x"),
            Duration::from_millis(300),
        )
        .await;
    assert!(matches!(lost, Err(ForwardError::Lost(_))), "{lost:?}");
    assert_eq!(*silent.0.lock().unwrap(), 1, "it reached the receiver");
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let not_sent = client
        .forward(&format!("http://{closed}"), &envelope("echo", "k", b"x"), T)
        .await;
    assert!(
        matches!(not_sent, Err(ForwardError::NotSent(_))),
        "{not_sent:?}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_not_signed_by_the_fleet_is_a_lost_answer() {
    let cfg = config();
    let server = Server::start(&cfg, Arc::new(Echo::default())).unwrap();
    let mut other = config();
    other.fleet_key = FleetKey::new(vec![9; 32]).unwrap();
    let client = ForwardClient::new(&other).unwrap();
    let reply = client
        .forward(server.endpoint(), &envelope("echo", "k", b"x"), T)
        .await;
    assert!(matches!(reply, Err(ForwardError::Lost(_))), "{reply:?}");
    server.stop().await;
}

#[test]
fn transport_options_that_cannot_work_are_refused_by_name() {
    let name = |c: TransportConfig| match c.validate() {
        Err(Error::InvalidOption { name, .. }) => name,
        other => panic!("{other:?}"),
    };
    assert_eq!(config().validate(), Ok(()));
    assert_eq!(
        name(TransportConfig {
            body_limit: 0,
            ..config()
        }),
        "body_limit"
    );
    assert_eq!(
        name(TransportConfig {
            max_hops: 0,
            ..config()
        }),
        "max_hops"
    );
    assert_eq!(
        name(TransportConfig {
            holder_cache: Some(Duration::ZERO),
            ..config()
        }),
        "holder_cache"
    );
    assert_eq!(
        name(TransportConfig {
            workers: 0,
            ..config()
        }),
        "workers"
    );
    assert_eq!(
        name(TransportConfig {
            body_timeout: Duration::ZERO,
            ..config()
        }),
        "body_timeout"
    );
    let bad = TransportConfig {
        advertise: Some("10.0.0.1:7070".into()),
        ..config()
    };
    assert_eq!(name(bad), "advertise");
}

#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_a_client_that_trusts_the_certificate_and_no_other() {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let tls = TlsConfig {
        cert_chain_pem: cert.cert.pem().into_bytes(),
        key_pem: cert.signing_key.serialize_pem().into_bytes(),
        trust_pem: cert.cert.pem().into_bytes(),
    };
    let mut cfg = config();
    cfg.tls = Some(tls);
    let server = Server::start(&cfg, Arc::new(Echo::default())).unwrap();
    assert!(
        server.endpoint().starts_with("https://"),
        "{}",
        server.endpoint()
    );
    let at = format!("https://localhost:{}", server.local_addr().port());
    let client = ForwardClient::new(&cfg).unwrap();
    let reply = client
        .forward(&at, &envelope("echo", "tls", b"abc"), T)
        .await;
    assert_eq!(reply, Ok(b"cba".to_vec()));
    let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let mut stranger = cfg.clone();
    if let Some(tls) = stranger.tls.as_mut() {
        tls.trust_pem = other.cert.pem().into_bytes();
    }
    let untrusting = ForwardClient::new(&stranger).unwrap();
    let refused = untrusting
        .forward(&at, &envelope("echo", "tls", b"abc"), T)
        .await;
    assert!(
        matches!(
            refused,
            Err(ForwardError::NotSent(_) | ForwardError::Lost(_))
        ),
        "{refused:?}"
    );
    let plain = ForwardClient::new(&config()).unwrap();
    let plain_reply = plain
        .forward(
            &format!("http://127.0.0.1:{}", server.local_addr().port()),
            &envelope("echo", "tls", b"abc"),
            T,
        )
        .await;
    assert!(
        plain_reply.is_err(),
        "plain HTTP is not served: {plain_reply:?}"
    );
    server.stop().await;
}

mod hostile;
