//! Scale benchmark, one run printing everything (docs/benchmarks.md, "Scale"):
//!
//! 1. `hundred`: 100,000 tenants written once each through one replica with `max_open` 5,000
//!    (passivation lets the least recently used go): throughput, peak RSS, peak descriptors,
//!    memory per passivated tenant;
//! 2. `idle`: one hot tenant's write latency (p50/p99) alone and beside 99, 999 and 9,999 idle
//!    open tenants (fewer when the descriptor limit allows fewer; the run says so), the
//!    lease-store calls per renewal tick at each level (a counting lease-store wrapper), memory
//!    and descriptors per open tenant, and the lease-store calls of an idle check, a local
//!    sweep and a reconciliation at the top level;
//! 3. `reopen`: latency of the first write on a kept handle of a passivated tenant;
//! 4. `close`: `close()` of 500 and 5,000 tenants × 100 events beside the floor (the same work
//!    done directly on the files);
//! 5. `shipped`: `Shipped` with 1 and 32 callers beside raw rusqlite WAL + `NORMAL` and WAL +
//!    `FULL` on the same disk, durable bytes and store requests per 1,000 writes, and the stages
//!    of a batch;
//!
//! and a PNG (`LEASEHOLD_BENCH_PLOT`, default `target/scale.png`): write latency against open
//! tenants, and the stages of a batch.
//!
//! Run: `cargo bench --bench scale`; `LEASEHOLD_BENCH_PARTS=hundred,idle,reopen,close,shipped`
//! picks parts, `LEASEHOLD_SCALE_TENANTS` changes the 100,000. Under `cargo test` (no `--bench`
//! argument) it runs once with tiny sizes as a smoke test, without timing assertions. Real time
//! (`Instant`), because that is the point.

#[allow(dead_code)]
#[path = "runtime/backend.rs"]
mod backend;
#[path = "scale/counting.rs"]
mod counting;
#[path = "scale/durable.rs"]
mod durable;
#[path = "scale/lifecycle.rs"]
mod lifecycle;
#[path = "scale/many.rs"]
mod many;
#[allow(dead_code)]
#[path = "runtime/measure.rs"]
mod measure;
#[path = "scale/plot.rs"]
mod plot;
#[allow(dead_code)]
#[path = "scale/process.rs"]
mod process;
#[allow(dead_code)]
#[path = "runtime/raw.rs"]
mod raw;
#[path = "scale/shipped.rs"]
mod shipped;
#[path = "scale/stages.rs"]
mod stages;
#[allow(dead_code)]
#[path = "runtime/writes.rs"]
mod writes;

use std::path::{Path, PathBuf};
use std::time::Duration;

use backend::Backend;
use measure::{ms, ms_or_dash, quantile};
use process::mib;

/// Sizes of one run.
struct Sizes {
    /// Tenants of the `hundred` part, and its `max_open`, and its opens in flight.
    tenants: usize,
    max_open: usize,
    in_flight: usize,
    /// Open tenants at each level of the `idle` part (capped by the descriptor limit).
    levels: [usize; 3],
    tick: Duration,
    window: Duration,
    /// How long each latency or throughput figure runs.
    span: Duration,
    /// Reopens, and the segments each tenant has.
    reopens: usize,
    reopen_events: usize,
    /// Tenants closed at once, and their events.
    closes: [usize; 2],
    close_events: usize,
    /// Callers of the many-caller figure.
    callers: usize,
}

const FULL: Sizes = Sizes {
    tenants: 100_000,
    max_open: 5_000,
    in_flight: 64,
    levels: [100, 1_000, 10_000],
    tick: Duration::from_millis(500),
    window: Duration::from_secs(3),
    span: Duration::from_secs(3),
    reopens: 20,
    reopen_events: 100,
    closes: [500, 5_000],
    close_events: 100,
    callers: 32,
};
const SMOKE: Sizes = Sizes {
    tenants: 60,
    max_open: 20,
    in_flight: 8,
    levels: [4, 8, 12],
    tick: Duration::from_millis(50),
    window: Duration::from_millis(200),
    span: Duration::from_millis(40),
    reopens: 2,
    reopen_events: 3,
    closes: [3, 6],
    close_events: 3,
    callers: 4,
};

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".into(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

fn wants(part: &str) -> bool {
    std::env::var("LEASEHOLD_BENCH_PARTS")
        .map_or(true, |parts| parts.split(',').any(|p| p.trim() == part))
}

fn calls(m: &std::collections::BTreeMap<&'static str, u64>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

async fn hundred(backend: Backend, dir: &Path, s: &Sizes) {
    let tenants = std::env::var("LEASEHOLD_SCALE_TENANTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(s.tenants);
    println!(
        "\n## 1. {tenants} tenants written once each, max_open {}, {} opens in flight",
        s.max_open, s.in_flight
    );
    let h = many::hundred_thousand(backend, dir, tenants, s.max_open, s.in_flight).await;
    let passivated = h.tenants.saturating_sub(s.max_open).max(1);
    println!(
        "RESULT hundred: {} tenants in {:.1} s = {:.0} tenants/s (open + 1 acknowledged write each); {} failed; {} passivations",
        h.tenants,
        h.took.as_secs_f64(),
        h.tenants as f64 / h.took.as_secs_f64(),
        h.failed,
        h.passivated
    );
    println!(
        "RESULT hundred: peak RSS {:.0} MiB, peak descriptors {}; at the end {:.0} MiB and {} descriptors; RSS at {} written {:.0} MiB, so {:.0} bytes per passivated tenant",
        mib(h.peak_rss),
        h.peak_fds,
        mib(h.rss_end),
        h.fds_end,
        s.max_open,
        mib(h.rss_full),
        process::per(h.rss_end, h.rss_full, passivated)
    );
    println!("RESULT hundred: lease-store calls: {}", calls(&h.calls.0));
    println!("RESULT hundred: durable requests: {}", calls(&h.calls.1));
    println!(
        "RESULT hundred: close() of the {} still open: {:.2} s",
        s.max_open.min(h.tenants),
        h.close.as_secs_f64()
    );
}

async fn idle(backend: Backend, dir: &Path, s: &Sizes) -> Vec<(usize, Duration, Duration)> {
    let limit = process::raise_fd_limit(40_000);
    // What `max_open` allows under this limit (3 descriptors a tenant, the runtime's reserve of
    // about 300), with room for the benchmark's own files.
    let fits = (limit.saturating_sub(600) / 3) as usize;
    let levels: Vec<usize> = s.levels.iter().map(|l| (*l).min(fits)).collect();
    println!(
        "\n## 2. one hot tenant beside idle open tenants: levels {levels:?} (wanted {:?}; descriptor limit {limit}, 3 per open tenant)",
        s.levels
    );
    let sizes = many::IdleSizes {
        levels,
        tick: s.tick,
        window: s.window,
        span: s.span,
    };
    let idle = many::idle(backend, dir, &sizes).await;
    println!(
        "| open tenants | hot p50 | hot p99 | writes/s | renewal ticks | lease-store calls per tick | leases per renew_many | renew_many p50 | calls in the window | RSS | descriptors |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |");
    for l in &idle.levels {
        println!(
            "| {} | {} | {} | {:.0} | {} | {:.2} | {:.0} | {:.2} ms | {} | {:.0} MiB | {} |",
            l.open,
            ms_or_dash(l.hot.quantile(0.5)),
            ms_or_dash(l.hot.quantile(0.99)),
            l.hot.rate(),
            l.tick.ticks,
            l.tick.per_tick(),
            l.tick.leases_per_renewal,
            ms(l.tick.renew_p50),
            calls(&l.tick.calls),
            mib(l.rss),
            l.fds
        );
    }
    let (bytes, fds) = many::per_open(&idle);
    println!(
        "RESULT idle: per open tenant {:.1} KiB resident memory, {fds:.2} descriptors",
        bytes / 1024.0
    );
    for (what, n) in &idle.sweeps {
        println!(
            "RESULT idle: {what} at {} open: {} lease-store calls ({})",
            idle.levels[idle.levels.len() - 1].open,
            n.values().sum::<u64>(),
            calls(n)
        );
    }
    idle.levels
        .iter()
        .map(|l| {
            (
                l.open,
                l.hot.quantile(0.5).unwrap_or_default(),
                l.hot.quantile(0.99).unwrap_or_default(),
            )
        })
        .collect()
}

async fn reopen(backend: Backend, dir: &Path, s: &Sizes) {
    println!(
        "\n## 3. reopen of a passivated tenant ({} single-event segments) x {}",
        s.reopen_events, s.reopens
    );
    let r = lifecycle::reopen(backend, dir, s.reopens, s.reopen_events).await;
    println!(
        "RESULT reopen: first write on a kept handle of a passivated tenant ({} segments): median {:.2} ms, p90 {:.2} ms, max {:.2} ms; the next write median {:.2} ms",
        r.segments,
        ms(quantile(&r.reopen, 0.5)),
        ms(quantile(&r.reopen, 0.9)),
        ms(r.reopen[r.reopen.len() - 1]),
        ms(quantile(&r.write, 0.5))
    );
}

async fn close(backend: Backend, dir: &Path, s: &Sizes) {
    println!(
        "\n## 4. close() beside the floor (Shipped, {} events each)",
        s.close_events
    );
    for tenants in s.closes {
        let (took, unflushed) = lifecycle::close_many(backend, dir, tenants, s.close_events).await;
        let floor = lifecycle::close_floor(dir, tenants, s.close_events, 8).await;
        println!(
            "RESULT close: {tenants} tenants: close() {:.2} s ({unflushed} unflushed); floor, 8 at a time like close_concurrency, {:.2} s ({:.1}x)",
            took.as_secs_f64(),
            floor.as_secs_f64(),
            took.as_secs_f64() / floor.as_secs_f64().max(1e-9)
        );
    }
}

async fn shipped(backend: Backend, dir: &Path, s: &Sizes) -> Vec<(String, Vec<shipped::Stage>)> {
    println!("\n## 5. Shipped beside raw rusqlite ({:?} each)", s.span);
    let sh = shipped::measure(backend, dir, s.callers, s.span).await;
    println!(
        "| path | 1 caller, writes/s | p50 | p99 | {} callers, writes/s |",
        s.callers
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    for (name, one, many) in &sh.raw {
        println!(
            "| {name} | {:.0} | {} | {} | {:.0} |",
            one.rate(),
            ms_or_dash(one.quantile(0.5)),
            ms_or_dash(one.quantile(0.99)),
            many.rate()
        );
    }
    println!(
        "| Shipped | {:.0} | {} | {} | {:.0} |",
        sh.one.0.rate(),
        ms_or_dash(sh.one.0.quantile(0.5)),
        ms_or_dash(sh.one.0.quantile(0.99)),
        sh.many.0.rate()
    );
    for (name, idx) in [("WAL+NORMAL", 1), ("WAL+FULL", 0)] {
        println!(
            "RESULT shipped: vs raw {name}: 1 caller {:.2}x, {} callers {:.2}x",
            sh.one.0.rate() / sh.raw[idx].1.rate().max(1e-9),
            s.callers,
            sh.many.0.rate() / sh.raw[idx].2.rate().max(1e-9)
        );
    }
    println!(
        "| per 1,000 writes | segments (puts) | bytes put | durable requests | lease-store calls | tip-moving calls |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (name, (_, c)) in [("1 caller", &sh.one), ("many callers", &sh.many)] {
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
            c.per_1000(c.puts),
            c.per_1000(c.bytes),
            c.per_1000(c.durable_requests),
            c.per_1000(c.lease_calls),
            c.per_1000(c.tip_calls)
        );
    }
    for (name, f) in ["1 caller's", "many callers'"].iter().zip(&sh.colocated) {
        println!(
            "RESULT co-located floor at the {name} segment size: {:.0} batches/s, p50 {}, p99 {} (the put + tip move it would replace: {:.3} ms mean)",
            f.rate(),
            ms_or_dash(f.quantile(0.5)),
            ms_or_dash(f.quantile(0.99)),
            ms(if name.starts_with('1') {
                sh.one.1.put_mean + sh.one.1.tip_mean
            } else {
                sh.many.1.put_mean + sh.many.1.tip_mean
            })
        );
    }
    let (one, many) = shipped::projected(&sh);
    println!(
        "RESULT projected Shipped with the co-located floor (all else as measured): 1 caller {:.3} ms mean; {} callers {:.0} writes/s = {:.2}x raw WAL+NORMAL",
        ms(one),
        s.callers,
        many,
        many / sh.raw[1].2.rate().max(1e-9)
    );
    let commit = |c: &shipped::Cost| {
        let r = c.runtime.commit;
        Duration::from_secs_f64(r.total.max(0.0) / r.count.max(1) as f64)
    };
    println!(
        "RESULT commit: the raw ledger's alone p50 {}; the runtime's group commit with its pages captured, mean {:.3} ms (1 caller), {:.3} ms (many callers, {:.1} commits a segment)",
        ms_or_dash(sh.ledger.quantile(0.5)),
        ms(commit(&sh.one.1)),
        ms(commit(&sh.many.1)),
        sh.many.1.runtime.commit.count as f64 / sh.many.1.puts.max(1) as f64
    );
    let stages = sh.stages();
    for (name, st) in &stages {
        println!(
            "RESULT stages, {name}: {}",
            st.iter()
                .map(|(n, d)| format!("{n} {:.3} ms", ms(*d)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    stages.to_vec()
}

async fn bench(s: Sizes, plot_to: PathBuf) {
    let backend = Backend::from_env();
    let dir = tempfile::tempdir().expect("temp dir");
    println!(
        "# leasehold scale benchmark on {} (load average {} at the start)",
        backend.name(),
        load()
    );
    if wants("hundred") {
        hundred(backend, dir.path(), &s).await;
    }
    let latency = if wants("idle") {
        idle(backend, dir.path(), &s).await
    } else {
        Vec::new()
    };
    if wants("reopen") {
        reopen(backend, dir.path(), &s).await;
    }
    if wants("close") {
        close(backend, dir.path(), &s).await;
    }
    let stages = if wants("shipped") {
        // The runtime's histograms, summed for the per-stage breakdown: installed only now, so
        // the parts before (the last) measure the runtime with no recorder, as before.
        if !stages::install() {
            println!("(another metrics recorder is installed: the runtime's stage timings read 0)");
        }
        shipped(backend, dir.path(), &s).await
    } else {
        Vec::new()
    };
    if !latency.is_empty() && !stages.is_empty() {
        match plot::draw(&plot_to, &latency, &stages) {
            Ok(()) => println!("\nplot: {}", plot_to.display()),
            Err(e) => println!("\nplot skipped: {e}"),
        }
    }
    println!("\n(load average {} at the end)", load());
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let sizes = if full { FULL } else { SMOKE };
    let plot_to = std::env::var_os("LEASEHOLD_BENCH_PLOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let target = std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| "target".into());
            Path::new(&target).join(if full { "scale.png" } else { "scale-smoke.png" })
        });
    actix::System::new().block_on(bench(sizes, plot_to));
}
