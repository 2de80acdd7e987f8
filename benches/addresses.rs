//! Tenant addresses benchmark, one run printing everything (docs/benchmarks.md, "Tenant
//! addresses"): two replicas in this process, each with a transport on loopback, sharing one
//! SQLite lease file and one durable directory, on the runtime's default durability (`Shipped`:
//! a command's reply leaves once its segment is put and the tip moved). Replica A holds the
//! tenant; a message sent through A runs there (local), one sent through B is forwarded one hop
//! to A (the path of docs/architecture.md, "The path of a forwarded message").
//!
//! 1. p50/p99 of a command and of a query, local against forwarded, one caller, interleaved
//!    (so the machine's load falls on both alike): what a forward adds;
//! 2. commands/s and queries/s with 32 callers in flight, local against forwarded;
//! 3. a query's p50/p99 (local and forwarded) while 8 callers keep the tenant's writer busy,
//!    against the idle query of part 1;
//! 4. the raw rusqlite baseline for scale: one caller, one commit per insert (WAL +
//!    `synchronous=FULL`, and `NORMAL`, the ledger's setting);
//! 5. two local callers that pause 2 ms between writes: the segment after
//!    one that answered both waits up to `ship_linger` for them, and they are not back yet —
//!    what the pause costs a load that does not write again at once.
//!
//! Run: `cargo bench --bench addresses` (`LEASEHOLD_BENCH_DURABILITY=async`: the replicas on
//! `Async`, so that a command's reply waits for no shipping and the hop's cost stands alone;
//! part 1 only; `LEASEHOLD_BENCH_SHIP_LINGER_US=N`, 0 for off: both replicas' `ship_linger`;
//! `LEASEHOLD_BENCH_HOLDER_CACHE=off`: the sender reads the lease store before every forward).
//! Under `cargo test` (no `--bench` argument) it runs once
//! with tiny sizes, as a smoke test. Real time (`Instant`), because that is the point.

#[allow(dead_code)]
#[path = "runtime/measure.rs"]
mod measure;
#[allow(dead_code)]
#[path = "runtime/raw.rs"]
mod raw;

use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use leasehold::ledger::{LedgerError, LedgerRead, LedgerTx, NewEvent};
use leasehold::{OrgId, ReplicaId, TenantId};
use leasehold_actors::{
    DirStore, Durability, FleetKey, Messages, RuntimeConfig, SqliteLeaseStore, Supervisor,
    TenantAddr, TenantMessage, TenantQuery, TransportConfig,
};
use measure::{Figure, concurrent_async, ms, quantile};
use serde::{Deserialize, Serialize};

/// Sizes of one run.
struct Sizes {
    /// Calls of each kind in part 1 (and queries in part 3).
    calls: usize,
    /// How long each throughput figure runs.
    span: Duration,
    /// Callers in flight in part 2.
    callers: usize,
    /// Writers keeping the tenant busy in part 3.
    writers: usize,
}

const FULL: Sizes = Sizes {
    calls: 1_000,
    span: Duration::from_secs(4),
    callers: 32,
    writers: 8,
};

const SMOKE: Sizes = Sizes {
    calls: 20,
    span: Duration::from_millis(200),
    callers: 4,
    writers: 2,
};

/// How long each of part 5's two callers pauses between its writes.
const THINK: Duration = Duration::from_millis(2);

/// A command: appends one event.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Add {
    key: String,
}

impl TenantMessage for Add {
    type Reply = ();
    const NAME: &'static str = "bench.add";

    fn handle(self, ledger: &mut LedgerTx<'_>) -> Result<(), LedgerError> {
        ledger.insert_event(&NewEvent::new("bench.add", self.key))?;
        Ok(())
    }
}

/// A read-only query: the newest event's sequence number.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Newest;

impl TenantQuery for Newest {
    type Reply = i64;
    const NAME: &'static str = "bench.newest";

    fn query(self, ledger: &LedgerRead<'_>) -> Result<i64, LedgerError> {
        let seq: Option<i64> = ledger.query_row("SELECT max(seq) FROM events", [], |r| r.get(0))?;
        Ok(seq.unwrap_or(0))
    }
}

/// A replica of the pair: its own state root, the shared stores, a transport on loopback.
fn replica(
    dir: &Path,
    id: &str,
    leases: &Arc<SqliteLeaseStore>,
    durable: &Arc<DirStore>,
) -> Supervisor {
    let mut c = RuntimeConfig::new(
        ReplicaId::new(id).expect("a replica id"),
        dir.join(format!("state-{id}")),
        leases.clone(),
        durable.clone(),
    );
    c.snapshot_every = None;
    c.arbiters = 2;
    // `LEASEHOLD_BENCH_SHIP_LINGER_US=N` (0: off): the same run with another `ship_linger`.
    if let Some(us) = std::env::var("LEASEHOLD_BENCH_SHIP_LINGER_US")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        c.ship_linger = (us > 0).then(|| std::time::Duration::from_micros(us));
    }
    if async_mode() {
        c.durability = Durability::ASYNC;
    }
    c.messages = Messages::new()
        .command::<Add>()
        .and_then(Messages::query::<Newest>)
        .expect("distinct names");
    let key = FleetKey::new(*b"leasehold-bench-fleet-key-32byte").expect("a fleet key");
    let mut transport = TransportConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), key);
    // `LEASEHOLD_BENCH_HOLDER_CACHE=off`: the sender reads the lease store before every
    // forward, as before the holder cache.
    if std::env::var("LEASEHOLD_BENCH_HOLDER_CACHE").as_deref() == Ok("off") {
        transport.holder_cache = None;
    }
    c.transport = Some(transport);
    Supervisor::start(c).expect("a replica starts")
}

/// How many segments the durable directory under `dir` holds (nothing deletes one during a
/// run: no snapshots, so no retention).
fn segments(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => segments(&e.path()),
            _ => usize::from(e.path().extension().is_some_and(|x| x == "seg")),
        })
        .sum()
}

/// Whether `LEASEHOLD_BENCH_DURABILITY=async` asks for the replicas on `Async`.
fn async_mode() -> bool {
    std::env::var("LEASEHOLD_BENCH_DURABILITY").as_deref() == Ok("async")
}

/// p50 and p99 of sorted latencies, in milliseconds.
fn pcts(sorted: &[Duration]) -> (f64, f64) {
    (ms(quantile(sorted, 0.5)), ms(quantile(sorted, 0.99)))
}

fn row(name: &str, sorted: &[Duration]) -> (f64, f64) {
    let (p50, p99) = pcts(sorted);
    println!(
        "  {name:<44} p50 {p50:>7.3} ms   p99 {p99:>7.3} ms   ({} calls)",
        sorted.len()
    );
    (p50, p99)
}

/// Times `n` calls of each of `ops`, interleaved in a shuffled order each round: on `Shipped` a
/// command right after another pays for the work that follows an acknowledgement (up to a
/// millisecond here), so a fixed order would charge it to whichever op comes second.
async fn interleaved(
    n: usize,
    ops: &[&dyn Fn(usize) -> futures::future::LocalBoxFuture<'static, ()>],
) -> Vec<Vec<Duration>> {
    let mut took = vec![Vec::with_capacity(n); ops.len()];
    let mut order: Vec<usize> = (0..ops.len()).collect();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    for i in 0..n {
        for k in (1..order.len()).rev() {
            // xorshift64: a fixed seed, so two runs shuffle alike.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            order.swap(k, (rng % (k as u64 + 1)) as usize);
        }
        for &j in &order {
            let started = Instant::now();
            ops[j](i).await;
            took[j].push(started.elapsed());
        }
    }
    for t in &mut took {
        t.sort();
    }
    took
}

fn add(
    sup: &Supervisor,
    addr: &TenantAddr,
    key: String,
) -> futures::future::LocalBoxFuture<'static, ()> {
    let (sup, addr) = (sup.clone(), addr.clone());
    Box::pin(async move { sup.send(&addr, Add { key }).await.expect("a command") })
}

fn add_keyed(
    sup: &Supervisor,
    addr: &TenantAddr,
    key: String,
) -> futures::future::LocalBoxFuture<'static, ()> {
    let (sup, addr) = (sup.clone(), addr.clone());
    Box::pin(async move {
        let add = Add { key: key.clone() };
        sup.request(&addr, add)
            .idempotency_key(key)
            .await
            .expect("a keyed command")
    })
}

fn newest(sup: &Supervisor, addr: &TenantAddr) -> futures::future::LocalBoxFuture<'static, ()> {
    let (sup, addr) = (sup.clone(), addr.clone());
    Box::pin(async move {
        sup.send(&addr, Newest).await.expect("a query");
    })
}

async fn bench(sizes: Sizes) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let leases = Arc::new(SqliteLeaseStore::open(&dir.path().join("leases.db")).expect("leases"));
    let durable = Arc::new(DirStore::open(&dir.path().join("durable")).expect("durable"));
    let a = replica(dir.path(), "a", &leases, &durable);
    let b = replica(dir.path(), "b", &leases, &durable);
    let addr = TenantAddr::new(
        OrgId::new("bench").expect("an org"),
        TenantId::new("t1").expect("a tenant"),
    );
    // The first message opens the tenant on A (nobody holds it: it opens where it arrives).
    a.send(&addr, Add { key: "open".into() })
        .await
        .expect("open on a");
    b.send(&addr, Add { key: "warm".into() })
        .await
        .expect("a forward warms b's pool");
    println!(
        "tenant addresses: two replicas on loopback, one SQLite lease file, one durable \
         directory, {}; A holds the tenant, B forwards to it",
        if async_mode() {
            "Async (1 s)"
        } else {
            "Shipped"
        }
    );

    println!("1. one caller, interleaved ({} calls each)", sizes.calls);
    let seq = AtomicUsize::new(0);
    let next = || format!("k{}", seq.fetch_add(1, Ordering::Relaxed));
    let local_cmd = |_| add(&a, &addr, next());
    let fwd_cmd = |_| add(&b, &addr, next());
    let local_keyed = |_| add_keyed(&a, &addr, next());
    let local_q = |_| newest(&a, &addr);
    let fwd_q = |_| newest(&b, &addr);
    let ops: [&dyn Fn(usize) -> futures::future::LocalBoxFuture<'static, ()>; 5] =
        [&local_cmd, &local_keyed, &fwd_cmd, &local_q, &fwd_q];
    let took = interleaved(sizes.calls, &ops).await;
    let (lc, _) = row("command, local (through A)", &took[0]);
    let (lk, _) = row("command, local, with an idempotency key", &took[1]);
    let (fc, _) = row("command, forwarded one hop (through B)", &took[2]);
    let (lq, _) = row("query, local", &took[3]);
    let (fq, _) = row("query, forwarded one hop", &took[4]);
    println!(
        "  a forward adds {:.3} ms at p50 to a command ({:.3} ms over a keyed local one: a \
         forward carries a key, the router makes one), {:.3} ms to a query (target: <= 0.3 ms)",
        fc - lc,
        fc - lk,
        fq - lq
    );

    if async_mode() {
        // 32 callers on `Async` outrun the shipping within seconds and are refused
        // `LEASEHOLD_LOG_BEHIND` (the pending limit): the throughput parts are `Shipped`'s.
        a.close().await.expect("a closes");
        b.close().await.expect("b closes");
        return;
    }
    println!(
        "2. {} callers in flight, {:?} each",
        sizes.callers, sizes.span
    );
    let through = |sup: &Supervisor, query: bool, keyed: bool| {
        let sup = sup.clone();
        let addr = addr.clone();
        let seq = Rc::new(AtomicUsize::new(0));
        move |c: usize, i: usize| {
            let (sup, addr) = (sup.clone(), addr.clone());
            let n = seq.fetch_add(1, Ordering::Relaxed);
            async move {
                if query {
                    sup.send(&addr, Newest).await.expect("a query");
                } else if keyed {
                    let key = format!("c{c}-{i}-{n}");
                    let add = Add { key: key.clone() };
                    let keyed = sup.request(&addr, add).idempotency_key(key);
                    keyed.await.expect("a keyed command");
                } else {
                    let key = format!("c{c}-{i}-{n}");
                    sup.send(&addr, Add { key }).await.expect("a command");
                }
            }
        }
    };
    let mut rates = Vec::new();
    for (name, sup, query, keyed) in [
        ("commands/s, local", &a, false, false),
        ("commands/s, forwarded", &b, false, false),
        ("queries/s, local", &a, true, false),
        ("queries/s, forwarded", &b, true, false),
        (
            "commands/s, local, with an idempotency key",
            &a,
            false,
            true,
        ),
    ] {
        let run = through(sup, query, keyed);
        let before = segments(&dir.path().join("durable"));
        let fig: Figure = concurrent_async(sizes.callers, sizes.span, run).await;
        let cut = segments(&dir.path().join("durable")) - before;
        match query {
            true => println!("  {name:<44} {:>9.0}", fig.rate()),
            false => println!(
                "  {name:<44} {:>9.0}   ({:.0} segments per 1,000 writes)",
                fig.rate(),
                cut as f64 * 1000.0 / fig.ops.max(1) as f64
            ),
        }
        rates.push(fig.rate());
    }
    println!(
        "  forwarded / local: commands {:.2}x ({:.2}x a keyed local one: a forward carries a \
         key), queries {:.2}x (target: >= 0.5x)",
        rates[1] / rates[0],
        rates[1] / rates[4],
        rates[3] / rates[2]
    );

    println!(
        "3. a query while {} callers keep the tenant's writer busy",
        sizes.writers
    );
    let stop = Rc::new(AtomicBool::new(false));
    let written = Rc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for w in 0..sizes.writers {
        let (sup, addr, stop, written) = (a.clone(), addr.clone(), stop.clone(), written.clone());
        writers.push(actix_rt::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                sup.send(
                    &addr,
                    Add {
                        key: format!("w{w}-{i}"),
                    },
                )
                .await
                .expect("a write");
                written.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    actix_rt::time::sleep(Duration::from_millis(100)).await;
    let began = Instant::now();
    let before = written.load(Ordering::Relaxed);
    let took = interleaved(sizes.calls, &[&local_q, &fwd_q]).await;
    let writes = written.load(Ordering::Relaxed) - before;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.expect("a writer");
    }
    row("query, local, beside the writers", &took[0]);
    row("query, forwarded, beside the writers", &took[1]);
    println!(
        "  the writers meanwhile: {:.0} commands/s",
        writes as f64 / began.elapsed().as_secs_f64()
    );

    println!(
        "4. raw rusqlite, one caller, one commit per insert, {:?}",
        sizes.span
    );
    for (kind, tag) in [
        (raw::RAW_KINDS[1], "wal-full"),
        (raw::RAW_KINDS[2], "wal-normal"),
    ] {
        let fig = raw::one_caller(dir.path(), kind, tag, sizes.span);
        let (p50, p99) = pcts(&fig.latencies);
        println!(
            "  {:<58} p50 {p50:>7.3} ms   p99 {p99:>7.3} ms   {:>9.0}/s",
            kind.name,
            fig.rate()
        );
    }
    println!(
        "5. two callers that pause {:?} between writes (answered callers that do not come back \
         at once: what ship_linger costs them; {} writes each, local)",
        THINK,
        sizes.calls / 4
    );
    let mut pausing = Vec::new();
    for w in 0..2 {
        let (sup, addr) = (a.clone(), addr.clone());
        let n = sizes.calls / 4;
        pausing.push(actix_rt::spawn(async move {
            let mut took = Vec::with_capacity(n);
            for i in 0..n {
                let started = Instant::now();
                let key = format!("p{w}-{i}");
                sup.send(&addr, Add { key }).await.expect("a write");
                took.push(started.elapsed());
                actix_rt::time::sleep(THINK).await;
            }
            took
        }));
    }
    let mut took = Vec::new();
    for p in pausing {
        took.extend(p.await.expect("a pausing caller"));
    }
    took.sort();
    row("command, local, two pausing callers", &took);

    a.close().await.expect("a closes");
    b.close().await.expect("b closes");
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let sizes = if full { FULL } else { SMOKE };
    actix::System::new().block_on(bench(sizes));
}
