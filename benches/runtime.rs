//! Runtime benchmark: acknowledged `run` throughput through the tenant actor against the raw
//! ledger and plain rusqlite (same machine, same run), for one sequential caller and for 32
//! callers in flight; handoff latency of a small tenant; `close()` of 500 tenants with 100
//! events each. Real time (`Instant`), because that is the point.
//!
//! Run: `cargo bench --bench runtime` (about a minute on 2 cores). Under `cargo test` (no
//! `--bench` argument) it runs once with tiny sizes, as a smoke test. Figures go into
//! `docs/benchmarks.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use leasehold::durable::dir::DirStore;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::ledger::{Ledger, LedgerOptions, NewEvent};
use leasehold::{OrgId, ReplicaId, TenantId};
use leasehold_actors::{Event, Observer, RuntimeConfig, Supervisor, TenantRef};
use rusqlite::Connection;

/// Sizes of one run of the benchmark.
struct Sizes {
    /// Acknowledged runs per throughput measurement.
    runs: usize,
    /// Callers in flight for the concurrent measurement.
    callers: usize,
    /// Handoffs measured for the latency figures.
    handoffs: usize,
    /// Tenants closed at once.
    tenants: usize,
    /// Events in each of those tenants.
    events: usize,
}

const FULL: Sizes = Sizes {
    runs: 20_000,
    callers: 32,
    handoffs: 50,
    tenants: 500,
    events: 100,
};
const SMOKE: Sizes = Sizes {
    runs: 200,
    callers: 8,
    handoffs: 3,
    tenants: 10,
    events: 5,
};

/// Counts `close_progress` events and prints every 50th.
struct Progress(AtomicUsize);

impl Observer for Progress {
    fn on_event(&self, event: &Event) {
        if let Event::CloseProgress {
            done,
            total,
            unflushed,
        } = event
        {
            self.0.store(*done, Ordering::Relaxed);
            if done % 50 == 0 || done == total {
                println!("    close: {done}/{total} tenants handed off ({unflushed} unflushed)");
            }
        }
    }
}

fn raw_rusqlite(dir: &std::path::Path, n: usize) -> f64 {
    let conn = Connection::open(dir.join("raw.db")).expect("open raw");
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;
         CREATE TABLE events (seq INTEGER PRIMARY KEY AUTOINCREMENT, ts_ms INTEGER NOT NULL,
           actor TEXT NOT NULL, kind TEXT NOT NULL, subject TEXT, payload TEXT NOT NULL,
           idem_key TEXT NOT NULL UNIQUE, run_id TEXT);",
    )
    .expect("schema");
    let started = Instant::now();
    for i in 0..n {
        // A cached statement, as any careful rusqlite user writes it: the fair baseline.
        conn.prepare_cached(
            "INSERT INTO events (ts_ms, actor, kind, payload, idem_key) VALUES (?1, 'host', 'bench', '{}', ?2)",
        )
        .and_then(|mut insert| insert.execute(rusqlite::params![i as i64, format!("k-{i}")]))
        .expect("insert");
    }
    n as f64 / started.elapsed().as_secs_f64()
}

fn raw_ledger(dir: &std::path::Path, n: usize) -> f64 {
    let mut ledger = Ledger::open(&dir.join("ledger.db"), &LedgerOptions::default()).expect("open");
    let started = Instant::now();
    for i in 0..n {
        ledger
            .run(|l| l.insert_event(&NewEvent::new("bench", format!("k-{i}"))))
            .expect("run");
    }
    n as f64 / started.elapsed().as_secs_f64()
}

fn replica(dir: &std::path::Path, name: &str, observer: Option<Arc<dyn Observer>>) -> Supervisor {
    let leases = SqliteLeaseStore::open(&dir.join("leases.db")).expect("lease file");
    let durable = DirStore::open(&dir.join("durable")).expect("durable dir");
    let mut config = RuntimeConfig::new(
        ReplicaId::new(name).expect("id"),
        dir.join("nodes").join(name),
        Arc::new(leases),
        Arc::new(durable),
    );
    config.snapshot_every = None;
    config.observer = observer;
    Supervisor::start(config).expect("supervisor")
}

async fn insert(t: &TenantRef, idem: String) {
    t.run(move |l| l.insert_event(&NewEvent::new("bench", idem)))
        .await
        .expect("run");
}

async fn actor_sequential(t: &TenantRef, n: usize) -> f64 {
    let started = Instant::now();
    for i in 0..n {
        insert(t, format!("s-{i}")).await;
    }
    n as f64 / started.elapsed().as_secs_f64()
}

async fn actor_concurrent(t: &TenantRef, n: usize, callers: usize) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let t = t.clone();
            actix::spawn(async move {
                for i in 0..n / callers {
                    insert(&t, format!("c-{c}-{i}")).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("caller");
    }
    (n / callers * callers) as f64 / started.elapsed().as_secs_f64()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn handoff_latency(a: &Supervisor, org: &OrgId, handoffs: usize) -> Vec<Duration> {
    let mut took = Vec::new();
    for i in 0..handoffs {
        let id = TenantId::new(format!("small-{i}")).expect("id");
        let t = a.open(org, &id).await.expect("open");
        for k in 0..10 {
            insert(&t, format!("k-{k}")).await;
        }
        let started = Instant::now();
        t.handoff().await.expect("handoff");
        took.push(started.elapsed());
    }
    took.sort();
    took
}

async fn close_many(dir: &std::path::Path, s: &Sizes) -> (Duration, usize) {
    let progress = Arc::new(Progress(AtomicUsize::new(0)));
    let a = replica(dir, "replica-close", Some(progress.clone()));
    let org = OrgId::new("close").expect("org");
    let started = Instant::now();
    for i in 0..s.tenants {
        let t = a
            .open(&org, &TenantId::new(format!("t{i:04}")).expect("id"))
            .await
            .expect("open");
        let events = s.events;
        t.run(move |l| {
            for k in 0..events {
                l.insert_event(&NewEvent::new("bench", format!("k-{k}")))?;
            }
            Ok(())
        })
        .await
        .expect("fill");
        if (i + 1) % 100 == 0 {
            println!(
                "    opened and filled {}/{} tenants ({:?})",
                i + 1,
                s.tenants,
                started.elapsed()
            );
        }
    }
    let started = Instant::now();
    let unflushed = a.close().await.expect("close");
    (started.elapsed(), unflushed.len())
}

async fn bench(s: Sizes) {
    let dir = tempfile::tempdir().expect("temp dir");
    println!(
        "# leasehold runtime benchmark ({} runs, {} callers)",
        s.runs, s.callers
    );
    let rusqlite_rate = raw_rusqlite(dir.path(), s.runs);
    let ledger_rate = raw_ledger(dir.path(), s.runs);
    let a = replica(dir.path(), "replica-a", None);
    let org = OrgId::new("bench").expect("org");
    let t = a
        .open(&org, &TenantId::new("hot").expect("id"))
        .await
        .expect("open");
    let seq_rate = actor_sequential(&t, s.runs).await;
    let conc_rate = actor_concurrent(&t, s.runs, s.callers).await;
    println!("\n## acknowledged single-event commits (WAL, synchronous=NORMAL)");
    println!("| path | commits/s | vs plain rusqlite |");
    println!("| --- | ---: | ---: |");
    for (name, rate) in [
        ("plain rusqlite, one INSERT per transaction", rusqlite_rate),
        ("raw ledger (`Ledger::run`)", ledger_rate),
        ("actor, 1 sequential caller", seq_rate),
        (
            &format!("actor, {} callers in flight (group commit)", s.callers),
            conc_rate,
        ),
    ] {
        println!("| {name} | {rate:.0} | {:.2}x |", rate / rusqlite_rate);
    }
    println!("\n## handoff latency of a small tenant (10 events, final image + release)");
    let took = handoff_latency(&a, &org, s.handoffs).await;
    println!(
        "median {:?}, p90 {:?}, max {:?} over {} handoffs",
        percentile(&took, 0.5),
        percentile(&took, 0.9),
        took[took.len() - 1],
        took.len()
    );
    println!(
        "\n## close() of {} tenants with {} events each",
        s.tenants, s.events
    );
    let (took, unflushed) = close_many(dir.path(), &s).await;
    println!("close took {took:?} ({unflushed} unflushed; the predecessor needed 13.2 s for 500)");
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let sizes = if full { FULL } else { SMOKE };
    actix::System::new().block_on(bench(sizes));
}
