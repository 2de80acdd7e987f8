//! Figures of typed messages on one replica (`#[ignore]`: run them by name, in release):
//! `cargo test --release --features testkit --test messages figure -- --ignored --nocapture`.
//! The numbers are in docs/benchmarks.md.

use std::time::{Duration, Instant};

use super::common::*;
use super::*;

fn percentiles(mut took: Vec<Duration>) -> (f64, f64) {
    took.sort();
    let at = |p: f64| took[((took.len() as f64 * p) as usize).min(took.len() - 1)];
    let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
    (ms(at(0.5)), ms(at(0.99)))
}

/// p50/p99 of a closure, a command sent to the address and a query, one after another on the
/// default `Shipped` (a lease file and a directory store), and of a query while eight callers
/// keep the tenant's writer busy.
#[actix_rt::test]
#[ignore = "a figure, not a check: run by name in release"]
async fn figure_a_message_against_a_closure_and_a_query_beside_a_busy_writer() {
    const N: usize = 400;
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("a", "a", bank);
    a.sup.send(&addr(), deposit("warm", 1)).await.unwrap();
    let t = a.sup.tenant(&org(), &tenant()).await.unwrap();
    // Interleaved, so that the machine's load falls on the three alike.
    let (mut closure, mut command, mut keyed) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..N {
        let started = Instant::now();
        t.run(move |l| {
            l.execute(
                "INSERT INTO accounts VALUES (?1, 1) ON CONFLICT (name) DO UPDATE SET cents = cents + 1",
                [format!("c{}", i % 10)],
            )
        })
        .await
        .unwrap();
        closure.push(started.elapsed());
        let started = Instant::now();
        a.sup
            .send(&addr(), deposit(&format!("m{}", i % 10), 1))
            .await
            .unwrap();
        command.push(started.elapsed());
        let started = Instant::now();
        a.sup
            .request(&addr(), deposit("k", 1))
            .idempotency_key(format!("key-{i}"))
            .await
            .unwrap();
        keyed.push(started.elapsed());
    }
    let mut query = Vec::new();
    for _ in 0..N {
        let started = Instant::now();
        a.sup.send(&addr(), balance_of("m1")).await.unwrap();
        query.push(started.elapsed());
    }
    let busy = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let (sup, busy) = (a.sup.clone(), busy.clone());
            actix_rt::spawn(async move {
                let mut n = 0u64;
                while busy.load(std::sync::atomic::Ordering::SeqCst) {
                    sup.send(&addr(), deposit(&format!("w{w}"), 1))
                        .await
                        .unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut beside = Vec::new();
    let began = Instant::now();
    for _ in 0..N / 2 {
        let started = Instant::now();
        a.sup.send(&addr(), balance_of("w1")).await.unwrap();
        beside.push(started.elapsed());
    }
    let window = began.elapsed();
    busy.store(false, std::sync::atomic::Ordering::SeqCst);
    let mut writes = 0;
    for w in writers {
        writes += w.await.unwrap();
    }
    for (what, took) in [
        ("closure (TenantRef::run)", closure),
        ("command (send)", command),
        ("keyed command (idempotency key)", keyed),
        ("query (send)", query),
        ("query beside 8 busy writers", beside),
    ] {
        let (p50, p99) = percentiles(took);
        eprintln!("{what:34} p50 {p50:7.3} ms  p99 {p99:7.3} ms");
    }
    eprintln!(
        "the 8 writers meanwhile: {writes} commands in {:.2} s ({:.0}/s)",
        window.as_secs_f64(),
        writes as f64 / window.as_secs_f64()
    );
}
