//! The reference service (`examples/service`) as two real processes on loopback ports, one
//! fleet (a shared SQLite lease file and durable directory, the transport between them), driven
//! by a real HTTP client: appends with idempotency keys go to either process for ten tenants,
//! one process gets SIGTERM mid-load, and every acknowledged append is read back through the
//! other process exactly once (docs/testing.md, "The reference service").
//!
//! The example is built with the cargo running these tests (as the drill is, tests/drill.rs).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Builds the example (a no-op when `cargo test` built it already) and returns its path.
fn service_binary() -> PathBuf {
    let test_exe = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test_exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps")
        .to_path_buf();
    let mut features = vec!["testkit"];
    for (on, name) in [
        (cfg!(feature = "postgres"), "postgres"),
        (cfg!(feature = "s3"), "s3"),
        (cfg!(feature = "cli"), "cli"),
    ] {
        if on {
            features.push(name);
        }
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "--quiet", "--example", "service", "--features"])
        .arg(features.join(" "));
    if !cfg!(debug_assertions) {
        build.arg("--release");
    }
    assert!(
        build.status().expect("cargo runs").success(),
        "the example builds"
    );
    let exe = profile_dir.join("examples").join("service");
    assert!(exe.exists(), "no service binary at {}", exe.display());
    exe
}

/// One service process and the base URL it printed.
struct Service {
    child: Child,
    base: String,
}

impl Service {
    fn start(exe: &Path, dir: &Path, id: &str) -> Service {
        let mut child = Command::new(exe)
            .args(["--http", "127.0.0.1:0", "--replica-id", id])
            .arg("--state-root")
            .arg(dir.join(id))
            .arg("--leases")
            .arg(format!("sqlite://{}", dir.join("leases.db").display()))
            .arg("--durable")
            .arg(dir.join("durable"))
            .args(["--transport-bind", "127.0.0.1:0", "--deadline", "10s"])
            .env("LEASEHOLD_FLEET_KEY", "7e".repeat(32))
            .env("SERVICE_ADMIN_TOKEN", ADMIN_TOKEN)
            .env(
                "RUST_LOG",
                std::env::var("SERVICE_TEST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the service starts");
        let stdout = child.stdout.take().expect("its stdout");
        let name = id.to_string();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let verbose = std::env::var("SERVICE_TEST_VERBOSE").is_ok();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if verbose {
                    eprintln!("[{name}] {line}");
                }
                if let Some(url) = line.strip_prefix("listening on ") {
                    let _ = tx.send(url.to_string());
                }
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the service prints where it listens");
        Service { child, base }
    }

    /// Sends SIGTERM.
    fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// Waits for the process to exit (bounded) and returns its exit code.
    fn wait(mut self, limit: Duration) -> Option<i32> {
        let until = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.code();
            }
            if Instant::now() > until {
                let _ = self.child.kill();
                panic!("the service did not exit within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

const TENANTS: usize = 10;

/// The admin routes' token in these tests.
const ADMIN_TOKEN: &str = "test-admin-token";

/// `Authorization` for the admin routes.
fn bearer() -> String {
    format!("Bearer {ADMIN_TOKEN}")
}

fn tenant_url(base: &str, t: usize) -> String {
    format!("{base}/tenants/acme/t{t}/events")
}

/// Appends `key` to tenant `t` through `first`, then (on a refused connection, a 503 or a 504:
/// the outcome may be unknown, the key makes the retry safe) through the other process and back
/// in turn, until acknowledged or `limit` passes. `true` when acknowledged.
async fn append(
    client: &reqwest::Client,
    first: &str,
    fallback: &str,
    t: usize,
    key: &str,
    limit: Instant,
) -> bool {
    let mut base = first;
    let began = Instant::now();
    while Instant::now() < limit {
        let asked = Instant::now();
        let sent = client
            .post(tenant_url(base, t))
            .header("Idempotency-Key", key)
            .json(&serde_json::json!({ "kind": "test.appended", "payload": { "key": key } }))
            .send()
            .await;
        match sent {
            Ok(reply) if reply.status().is_success() => {
                if std::env::var("SERVICE_TEST_VERBOSE").is_ok() && base != first {
                    eprintln!(
                        "{key} t{t} via {base}: acknowledged after {:?}",
                        began.elapsed()
                    );
                }
                return true;
            }
            Ok(reply) if reply.status().is_client_error() => {
                panic!("append of {key} refused: {:?}", reply.text().await)
            }
            other => {
                if std::env::var("SERVICE_TEST_VERBOSE").is_ok() {
                    let what = match other {
                        Ok(reply) => format!("{}: {:?}", reply.status(), reply.text().await),
                        Err(e) => format!("{e}"),
                    };
                    eprintln!("{key} t{t} via {base}: {what} after {:?}", asked.elapsed());
                }
                base = if base == first { fallback } else { first };
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    if std::env::var("SERVICE_TEST_VERBOSE").is_ok() {
        eprintln!("{key} t{t}: never acknowledged in {:?}", began.elapsed());
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_any_one_answers_and_a_sigterm_mid_load_loses_no_acknowledged_append() {
    let exe = service_binary();
    let dir = tempfile::tempdir().expect("a scratch directory");
    let a = Service::start(&exe, dir.path(), "a");
    let b = Service::start(&exe, dir.path(), "b");
    let (a_base, b_base) = (a.base.clone(), b.base.clone());
    let client = reqwest::Client::new();
    let acknowledged: Arc<Mutex<BTreeMap<usize, Vec<String>>>> = Arc::default();

    // Four callers, each to both processes in turn, for ten tenants.
    let load_until = Instant::now() + Duration::from_millis(2_500);
    let mut callers = Vec::new();
    for c in 0..4 {
        let (client, acknowledged) = (client.clone(), acknowledged.clone());
        let (a_base, b_base) = (a_base.clone(), b_base.clone());
        callers.push(tokio::spawn(async move {
            let mut n = 0;
            while Instant::now() < load_until {
                let t = (c * 7 + n) % TENANTS;
                let key = format!("c{c}-{n}");
                let (first, fallback) = if n % 2 == 0 {
                    (&a_base, &b_base)
                } else {
                    (&b_base, &a_base)
                };
                let limit = Instant::now() + Duration::from_secs(20);
                // After a's SIGTERM its port refuses: the caller goes to b with the same key.
                if append(&client, first, fallback, t, &key, limit).await {
                    acknowledged.lock().unwrap().entry(t).or_default().push(key);
                }
                n += 1;
            }
            n
        }));
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    a.terminate();
    let code = tokio::task::spawn_blocking(move || a.wait(Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(code, Some(0), "a flushed every tenant at SIGTERM");
    let mut sent = 0;
    for caller in callers {
        sent += caller.await.unwrap();
    }

    // Everything acknowledged, read back through b, exactly once.
    let acknowledged = acknowledged.lock().unwrap().clone();
    let total: usize = acknowledged.values().map(Vec::len).sum();
    assert!(
        total >= 20,
        "the load acknowledged only {total} of {sent} appends"
    );
    for (t, keys) in &acknowledged {
        let events: Vec<serde_json::Value> = client
            .get(format!("{}?limit=10000", tenant_url(&b_base, *t)))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for e in &events {
            *seen.entry(e["key"].as_str().unwrap()).or_default() += 1;
        }
        for key in keys {
            assert_eq!(
                seen.get(key.as_str()),
                Some(&1),
                "tenant t{t}: {key} read back once"
            );
        }
    }
    // The named query and the admin list answer through b as well.
    let counts: serde_json::Value = client
        .get(format!("{b_base}/tenants/acme/t0/queries/count-by-kind"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(counts[0][0], "test.appended", "{counts}");
    let open: Vec<serde_json::Value> = client
        .get(format!("{b_base}/admin/tenants"))
        .header("authorization", bearer())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        open.len(),
        TENANTS,
        "b holds every tenant once a is gone: {open:?}"
    );
    // The admin verbs, the health and metrics routes, and refusals of bad input.
    let post = |path: String| {
        client
            .post(format!("{b_base}{path}"))
            .header("authorization", bearer())
            .send()
    };
    // Without the token the admin routes refuse and do nothing.
    let anonymous = client
        .post(format!("{b_base}/admin/tenants/acme/t3/forget"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let status = |path: &'static str| client.get(format!("{b_base}{path}")).send();
    assert_eq!(status("/healthz").await.unwrap().status(), 200);
    let metrics = status("/metrics").await.unwrap().text().await.unwrap();
    assert!(metrics.contains("leasehold_open_tenants"), "{metrics}");
    for (verb, t) in [("handoff", 1), ("abandon", 2), ("forget", 3)] {
        let reply = post(format!("/admin/tenants/acme/t{t}/{verb}"))
            .await
            .unwrap();
        assert_eq!(reply.status(), 200, "{verb}: {:?}", reply.text().await);
    }
    let after_forget: Vec<serde_json::Value> = client
        .get(tenant_url(&b_base, 3))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        after_forget.is_empty(),
        "a forgotten tenant keeps nothing: {after_forget:?}"
    );
    let unknown = post("/admin/tenants/acme/t0/explode".into()).await.unwrap();
    assert_eq!(unknown.status(), 400);
    let not_open = post("/admin/tenants/acme/t9999/handoff".into())
        .await
        .unwrap();
    assert_eq!(not_open.status(), 404);
    let bad_id = client
        .get(format!("{b_base}/tenants/ac..me/t0/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad_id.status(), 400);
    let no_key = client
        .post(tenant_url(&b_base, 0))
        .json(&serde_json::json!({ "kind": "x" }))
        .send()
        .await
        .unwrap();
    assert_eq!(no_key.status(), 400);
    b.terminate();
    let code = tokio::task::spawn_blocking(move || b.wait(Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(code, Some(0), "b flushed every tenant at SIGTERM");
    eprintln!("service: {total} of {sent} appends acknowledged, each read back once");
}

/// Bad ids and bodies on every route (a hostile caller): each refused with a 4xx whose body is
/// the service's refusal — JSON with a stable `code` — nothing appended, and the service
/// answers on. (Seen before the fix: a body that is not JSON, a missing content type, an
/// oversize body and a query string that does not parse got actix-web's plain-text errors.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_refuses_bad_ids_and_bodies_with_a_coded_json_refusal() {
    let exe = service_binary();
    let dir = tempfile::tempdir().expect("a scratch directory");
    let a = Service::start(&exe, dir.path(), "a");
    let base = a.base.clone();
    let client = reqwest::Client::new();
    let events = format!("{base}/tenants/acme/t0/events");
    let json = |body: &str| body.to_owned();
    let long_key = "k".repeat(257);
    let long_id = "t".repeat(200);
    let cases: Vec<(&str, reqwest::RequestBuilder)> = vec![
        (
            "a bad org id",
            client
                .post(format!("{base}/tenants/a.b/t0/events"))
                .header("Idempotency-Key", "k")
                .json(&serde_json::json!({ "kind": "x" })),
        ),
        (
            "a tenant id too long",
            client.get(format!("{base}/tenants/acme/{long_id}/events")),
        ),
        (
            "a body that is not JSON",
            client
                .post(&events)
                .header("Idempotency-Key", "k")
                .header("content-type", "application/json")
                .body(json("{\"kind\": ")),
        ),
        (
            "a body without a kind",
            client
                .post(&events)
                .header("Idempotency-Key", "k")
                .json(&serde_json::json!({ "payload": 1 })),
        ),
        (
            "no content type",
            client
                .post(&events)
                .header("Idempotency-Key", "k")
                .body(json("{\"kind\": \"x\"}")),
        ),
        (
            "a body over the limit",
            client
                .post(&events)
                .header("Idempotency-Key", "k")
                .header("content-type", "application/json")
                .body(format!("{{\"kind\": \"{}\"}}", "x".repeat(2 << 20))),
        ),
        (
            "no idempotency key",
            client
                .post(&events)
                .json(&serde_json::json!({ "kind": "x" })),
        ),
        (
            "an idempotency key of 257 bytes",
            client
                .post(&events)
                .header("Idempotency-Key", long_key.as_str())
                .json(&serde_json::json!({ "kind": "x" })),
        ),
        (
            "after that is no number",
            client.get(format!("{events}?after=abc")),
        ),
        ("a negative limit", client.get(format!("{events}?limit=-1"))),
        (
            "an unknown admin verb",
            client
                .post(format!("{base}/admin/tenants/acme/t0/explode"))
                .header("authorization", bearer()),
        ),
        (
            "a handoff of a tenant not open here",
            client
                .post(format!("{base}/admin/tenants/acme/t0/handoff"))
                .header("authorization", bearer()),
        ),
        (
            "a bad id on an admin route",
            client
                .post(format!("{base}/admin/tenants/acme/a.b/forget"))
                .header("authorization", bearer()),
        ),
        (
            "an admin route without the token",
            client.post(format!("{base}/admin/tenants/acme/t0/forget")),
        ),
        (
            "an admin route with a wrong token",
            client
                .post(format!("{base}/admin/tenants/acme/t0/forget"))
                .header("authorization", "Bearer nope"),
        ),
        (
            "an idempotency key that is not ASCII",
            client
                .post(&events)
                .header(
                    "Idempotency-Key",
                    reqwest::header::HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap(),
                )
                .json(&serde_json::json!({ "kind": "x" })),
        ),
    ];
    for (what, request) in cases {
        let reply = request.send().await.expect("the service answers");
        let status = reply.status();
        let text = reply.text().await.unwrap_or_default();
        assert!(status.is_client_error(), "{what}: {status} {text}");
        let refusal: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{what}: {status}, not a JSON refusal ({e}): {text:?}"));
        assert!(
            refusal["code"].as_str().is_some_and(|c| !c.is_empty()),
            "{what}: no code in {text}"
        );
    }
    // Nothing was appended, and the service answers on.
    let good = client
        .post(&events)
        .header("Idempotency-Key", "good")
        .json(&serde_json::json!({ "kind": "x" }))
        .send()
        .await
        .expect("the service answers");
    assert!(good.status().is_success(), "{:?}", good.text().await);
    let read: Vec<serde_json::Value> = client
        .get(&events)
        .send()
        .await
        .expect("the service answers")
        .json()
        .await
        .expect("events as JSON");
    assert_eq!(read.len(), 1, "{read:?}");
    a.terminate();
    assert_eq!(a.wait(Duration::from_secs(60)), Some(0));
}
