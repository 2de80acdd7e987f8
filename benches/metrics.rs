//! What recording metrics costs on the hot path (docs/benchmarks.md, "Metrics"): acknowledged
//! single-event runs, `Images` (no store call per run, so recording is the largest share it can
//! be) and `Shipped` (the default), one caller and 32 in flight on one tenant, with no recorder
//! and with the Prometheus recorder (`PrometheusMetrics`) — switched on and off between rounds
//! behind one installed recorder, the rounds interleaved so a drift of the machine falls on
//! both; and the cost of one record of each kind, alone.
//!
//! Run: `cargo bench --bench metrics` (embedded stores in a temp dir). Under `cargo test` (no
//! `--bench` argument) it runs once with tiny sizes, as a smoke test. Real time (`Instant`),
//! because that is the point.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use leasehold::durable::dir::DirStore;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::ledger::NewEvent;
use leasehold::{OrgId, ReplicaId, TenantId};
use leasehold_actors::metrics::prometheus::PrometheusMetrics;
use leasehold_actors::{Durability, RuntimeConfig, Supervisor, TenantRef};
use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit, counter,
    histogram,
};

/// A recorder that hands the Prometheus recorder's handles out while on, no-op ones while off.
struct Switch<R> {
    on: AtomicBool,
    inner: R,
}

impl<R: Recorder> Recorder for Switch<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, help: SharedString) {
        self.inner.describe_counter(key, unit, help)
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, help: SharedString) {
        self.inner.describe_gauge(key, unit, help)
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, help: SharedString) {
        self.inner.describe_histogram(key, unit, help)
    }
    fn register_counter(&self, key: &Key, meta: &Metadata<'_>) -> Counter {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_counter(key, meta)
        } else {
            Counter::noop()
        }
    }
    fn register_gauge(&self, key: &Key, meta: &Metadata<'_>) -> Gauge {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_gauge(key, meta)
        } else {
            Gauge::noop()
        }
    }
    fn register_histogram(&self, key: &Key, meta: &Metadata<'_>) -> Histogram {
        if self.on.load(Ordering::Relaxed) {
            self.inner.register_histogram(key, meta)
        } else {
            Histogram::noop()
        }
    }
}

struct Sizes {
    span: Duration,
    rounds: usize,
    callers: usize,
    records: usize,
}

const FULL: Sizes = Sizes {
    span: Duration::from_secs(3),
    rounds: 5,
    callers: 32,
    records: 2_000_000,
};

const SMOKE: Sizes = Sizes {
    span: Duration::from_millis(30),
    rounds: 1,
    callers: 4,
    records: 1_000,
};

async fn insert(t: &TenantRef, idem: String) {
    t.run(move |l| l.insert_event(&NewEvent::new("bench", idem)))
        .await
        .expect("run");
}

/// Acknowledged runs per second of `callers` callers on `t` for `span`.
async fn rate(t: &TenantRef, callers: usize, span: Duration, tag: &str) -> f64 {
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..callers {
        let (t, done, tag) = (t.clone(), done.clone(), tag.to_string());
        tasks.push(actix::spawn(async move {
            let mut i = 0;
            while started.elapsed() < span {
                insert(&t, format!("{tag}-{c}-{i}")).await;
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    for task in tasks {
        task.await.expect("caller");
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// `min–max` of the rounds.
fn range(v: &[f64]) -> String {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(0.0, f64::max);
    format!("{min:.0}–{max:.0}")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// ns per record of a counter and of a histogram.
fn records(n: usize) -> (f64, f64) {
    let started = Instant::now();
    for _ in 0..n {
        counter!("leasehold_bench_records_total").increment(1);
    }
    let c = started.elapsed().as_nanos() as f64 / n as f64;
    let started = Instant::now();
    for i in 0..n {
        histogram!("leasehold_bench_record_seconds").record(i as f64 * 1e-9);
    }
    (c, started.elapsed().as_nanos() as f64 / n as f64)
}

#[actix::main]
async fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let s = if full { &FULL } else { &SMOKE };
    let (recorder, prometheus) = PrometheusMetrics::recorder().expect("recorder");
    let switch: &'static Switch<_> = Box::leak(Box::new(Switch {
        on: AtomicBool::new(false),
        inner: recorder,
    }));
    metrics::set_global_recorder(switch).expect("the only recorder");
    leasehold_actors::metrics::describe();

    println!(
        "## Metrics on the hot path ({:?} rounds, {} of each)",
        s.span, s.rounds
    );
    let (off_c, off_h) = records(s.records);
    switch.on.store(true, Ordering::Relaxed);
    let (on_c, on_h) = records(s.records);
    switch.on.store(false, Ordering::Relaxed);
    println!("\n| one record | no recorder | Prometheus recorder |\n| --- | --- | --- |");
    println!("| counter increment | {off_c:.1} ns | {on_c:.1} ns |");
    println!("| histogram record | {off_h:.1} ns | {on_h:.1} ns |");

    println!(
        "\n| mode, callers | no recorder, runs/s (median, range) | Prometheus recorder, runs/s | difference | per run |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for (name, durability) in [
        ("Images", Durability::Images),
        ("Shipped", Durability::Shipped),
    ] {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut config = RuntimeConfig::new(
            ReplicaId::new("bench").expect("id"),
            dir.path().join("state"),
            Arc::new(SqliteLeaseStore::open(&dir.path().join("leases.db")).expect("leases")),
            Arc::new(DirStore::open(&dir.path().join("durable")).expect("durable")),
        );
        config.durability = durability;
        config.snapshot_every = None;
        let replica = Supervisor::start(config).expect("replica");
        let tenant = TenantId::new(format!("{:064x}", 7)).expect("tenant");
        let t = replica
            .open(&OrgId::new("bench").expect("org"), &tenant)
            .await
            .expect("open");
        for callers in [1, s.callers] {
            let (mut off, mut on) = (Vec::new(), Vec::new());
            for round in 0..s.rounds {
                for state in [false, true] {
                    switch.on.store(state, Ordering::Relaxed);
                    let tag = format!("{name}-{callers}-{round}-{state}");
                    let r = rate(&t, callers, s.span, &tag).await;
                    if state { on.push(r) } else { off.push(r) }
                }
            }
            switch.on.store(false, Ordering::Relaxed);
            let (off_range, on_range) = (range(&off), range(&on));
            let (off, on) = (median(off), median(on));
            let cost_us = (1.0 / on - 1.0 / off) * 1e6;
            println!(
                "| {name}, {callers} | {off:.0} ({off_range}) | {on:.0} ({on_range}) | {:+.1} % | {cost_us:+.2} µs |",
                (on / off - 1.0) * 100.0
            );
        }
        t.handoff().await.expect("handoff");
        replica.close().await.expect("close");
    }
    let text = prometheus.render();
    assert!(
        text.contains("leasehold_batch_runs_count"),
        "the recorder saw the runs"
    );
}
