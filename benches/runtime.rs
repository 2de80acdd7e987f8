//! Runtime benchmark, one run printing everything (docs/benchmarks.md, "The change log"):
//!
//! 1. acknowledged writes/s of the three durability modes (`Shipped`, `Async` every 1 s,
//!    `Images`) against plain rusqlite one-commit-per-insert (SQLite's default journal, WAL +
//!    `FULL`, WAL + `NORMAL`) and the raw ledger, with 1 caller and with 32 callers in flight;
//! 2. p50/p99 latency of the single caller;
//! 3. restore of an image plus 1,000 segments (`restore_log`, and a full open elsewhere);
//! 4. handoff latency and `close()` of 500 tenants, per mode;
//! 5. durable bytes after 100,000 events with compaction, against the ledger, before and after
//!    retention;
//! 6. the lease-store round trips (`move_tip`, `renew`, `renew_many`) and `Shipped` with 32
//!    tenants × 1 caller against 1 tenant × 32 callers: whether coalescing tip moves would pay.
//!
//! Run: `cargo bench --bench runtime` (the embedded defaults: SQLite lease file + durable
//! directory in a temp dir). `LEASEHOLD_BENCH_BACKEND=postgres-s3` (with `--features "postgres
//! s3"`, under `scripts/with-servers.sh`) measures parts 1, 2 and 6 on PostgreSQL + S3;
//! `LEASEHOLD_BENCH_PARTS=writes,tip,restore,lifecycle,storage` picks parts. Under `cargo test`
//! (no `--bench` argument) it runs once with tiny sizes, as a smoke test. Real time (`Instant`),
//! because that is the point.

#[path = "runtime/backend.rs"]
mod backend;
#[path = "runtime/lifecycle.rs"]
mod lifecycle;
#[path = "runtime/measure.rs"]
mod measure;
#[path = "runtime/raw.rs"]
mod raw;
#[path = "runtime/restore.rs"]
mod restore;
#[path = "runtime/storage.rs"]
mod storage;
#[path = "runtime/tip.rs"]
mod tip;
#[path = "runtime/writes.rs"]
mod writes;

use std::path::Path;
use std::time::Duration;

use backend::{Backend, MODES};
use measure::{Figure, ms, ms_or_dash, quantile};
use raw::RAW_KINDS;

/// Sizes of one run of the benchmark.
struct Sizes {
    /// How long each throughput figure runs.
    span: Duration,
    /// Callers in flight (and tenants, for the spread figure).
    callers: usize,
    /// Handoffs measured per mode.
    handoffs: usize,
    /// Tenants closed at once, per mode.
    tenants: usize,
    /// Events in each of those tenants.
    events: usize,
    /// Events in the image of the restore measurement.
    seed: usize,
    /// Segments after that image.
    segments: usize,
    /// Repetitions of each restore.
    reps: usize,
    /// Events of the storage measurement.
    storage_events: usize,
    /// Its compaction threshold in segments.
    compaction_segments: u64,
}

const FULL: Sizes = Sizes {
    span: Duration::from_secs(5),
    callers: 32,
    handoffs: 50,
    tenants: 500,
    events: 100,
    seed: 2_000,
    segments: 1_000,
    reps: 5,
    storage_events: 100_000,
    compaction_segments: 500,
};
const SMOKE: Sizes = Sizes {
    span: Duration::from_millis(40),
    callers: 4,
    handoffs: 2,
    tenants: 3,
    events: 3,
    seed: 10,
    segments: 6,
    reps: 1,
    storage_events: 120,
    compaction_segments: 5,
};

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".into(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

fn wants(part: &str, backend: Backend) -> bool {
    match std::env::var("LEASEHOLD_BENCH_PARTS") {
        Ok(parts) => parts.split(',').any(|p| p.trim() == part),
        Err(_) => backend == Backend::Embedded || matches!(part, "writes" | "tip"),
    }
}

fn ratio(a: &Figure, b: &Figure) -> String {
    format!("{:.2}x", a.rate() / b.rate().max(1e-9))
}

async fn writes(backend: Backend, dir: &Path, s: &Sizes) -> Option<(Figure, Figure)> {
    println!(
        "\n## 1-2. acknowledged single-event writes ({:?} each)",
        s.span
    );
    let mut raws = Vec::new();
    for (n, kind) in RAW_KINDS.iter().enumerate() {
        println!("  {}: 1 caller ...", kind.name);
        let one = raw::one_caller(dir, *kind, &n.to_string(), s.span);
        println!("    {:.0} writes/s", one.rate());
        println!(
            "  {}: {} callers on one connection ...",
            kind.name, s.callers
        );
        let many = raw::many_callers(dir, *kind, &n.to_string(), s.callers, s.span);
        println!("    {:.0} writes/s", many.rate());
        raws.push((kind.name.to_string(), one, many));
    }
    println!("  raw ledger (Ledger::run, WAL + NORMAL): 1 caller ...");
    let ledger = raw::ledger(dir, s.span);
    println!("    {:.0} writes/s", ledger.rate());
    let mut modes = Vec::new();
    for (name, durability) in MODES {
        let m = writes::mode(backend, dir, name, durability, s.callers, s.span).await;
        modes.push((name, m));
    }
    let (base_default, base_full) = (&raws[0], &raws[1]);
    println!(
        "\n| path | 1 caller, writes/s | p50 | p99 | {} callers, writes/s | 1 caller vs raw default / WAL+FULL | {} callers vs raw default / WAL+FULL |",
        s.callers, s.callers
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let row = |name: &str, one: &Figure, many: Option<&Figure>| {
        println!(
            "| {name} | {:.0} | {} | {} | {} | {} / {} | {} |",
            one.rate(),
            ms_or_dash(one.quantile(0.5)),
            ms_or_dash(one.quantile(0.99)),
            many.map_or("-".into(), |m| format!("{:.0}", m.rate())),
            ratio(one, &base_default.1),
            ratio(one, &base_full.1),
            many.map_or("-".into(), |m| format!(
                "{} / {}",
                ratio(m, &base_default.2),
                ratio(m, &base_full.2)
            )),
        );
    };
    for (name, one, many) in &raws {
        row(name, one, Some(many));
    }
    row("raw ledger (`Ledger::run`)", &ledger, None);
    for (name, m) in &modes {
        row(&format!("actor, {name}"), &m.one, Some(&m.many));
    }
    let shipped = &modes[0].1;
    println!(
        "\nGOAL (Shipped, {} callers >= 0.5x raw): {} of rusqlite defaults, {} of WAL+FULL, {} of WAL+NORMAL ({} backend)",
        s.callers,
        ratio(&shipped.many, &raws[0].2),
        ratio(&shipped.many, &raws[1].2),
        ratio(&shipped.many, &raws[2].2),
        backend.name()
    );
    let spread = shipped.spread.clone()?;
    Some((shipped.many.clone(), spread))
}

async fn tip(backend: Backend, dir: &Path, s: &Sizes, spread: Option<(Figure, Figure)>) {
    println!("\n## 6. lease-store round trips (does coalescing tip moves pay?)");
    let t = tip::measure(backend, dir, s.callers, s.span).await;
    println!("| call | calls/s | p50 | p99 |");
    println!("| --- | ---: | ---: | ---: |");
    for (name, f) in [
        ("move_tip (one lease)".to_string(), &t.move_tip),
        ("renew (one lease)".to_string(), &t.renew),
        (format!("renew_many ({} leases)", t.many), &t.renew_many),
        ("durable put_if_absent, 16 KiB".to_string(), &t.put),
        (
            format!("move_tip, {} callers at once, a lease each", t.many),
            &t.move_tip_many,
        ),
        (
            format!("durable put_if_absent 16 KiB, {} callers at once", t.many),
            &t.put_many,
        ),
    ] {
        println!(
            "| {name} | {:.0} | {} | {} |",
            f.rate(),
            ms_or_dash(f.quantile(0.5)),
            ms_or_dash(f.quantile(0.99))
        );
    }
    if let Some((one_tenant, spread)) = spread {
        println!(
            "Shipped: 1 tenant x {} callers {:.0} writes/s; {} tenants x 1 caller {:.0} writes/s ({})",
            s.callers,
            one_tenant.rate(),
            s.callers,
            spread.rate(),
            ratio(&spread, &one_tenant)
        );
    }
}

async fn restore_part(backend: Backend, dir: &Path, s: &Sizes) {
    println!(
        "\n## 3. restore of an image ({} events) + {} segments",
        s.seed, s.segments
    );
    let r = restore::measure(backend, dir, s.seed, s.segments, s.reps).await;
    println!(
        "restore_log: {} segments onto an image of {} bytes: median {:.1} ms, best {:.1} ms over {}",
        r.segments,
        r.image_bytes,
        ms(quantile(&r.restore_log, 0.5)),
        ms(r.restore_log[0]),
        r.restore_log.len()
    );
    println!(
        "full open on another replica: median {:.1} ms, best {:.1} ms over {}",
        ms(quantile(&r.open, 0.5)),
        ms(r.open[0]),
        r.open.len()
    );
}

async fn lifecycle_part(backend: Backend, dir: &Path, s: &Sizes) {
    println!(
        "\n## 4. handoff of a small tenant (10 events) x {}, close() of {} tenants x {} events",
        s.handoffs, s.tenants, s.events
    );
    let mut rows = Vec::new();
    for (name, durability) in MODES {
        let h = lifecycle::handoffs(backend, dir, name, durability, s.handoffs).await;
        let (took, unflushed) =
            lifecycle::close_many(backend, dir, name, durability, s.tenants, s.events).await;
        println!("    {name}: close() took {took:?}, {unflushed} unflushed");
        rows.push((name, h, took, unflushed));
    }
    println!(
        "| mode | handoff median | p90 | max | close() of {} | unflushed |",
        s.tenants
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (name, h, took, unflushed) in rows {
        println!(
            "| {name} | {:.1} ms | {:.1} ms | {:.1} ms | {:.2} s | {unflushed} |",
            ms(quantile(&h, 0.5)),
            ms(quantile(&h, 0.9)),
            ms(h[h.len() - 1]),
            took.as_secs_f64()
        );
    }
}

async fn storage_part(backend: Backend, dir: &Path, s: &Sizes) {
    println!(
        "\n## 5. durable bytes after {} events (Shipped, {} callers, compaction every {} segments, retain 1 s)",
        s.storage_events, s.callers, s.compaction_segments
    );
    let f = storage::measure(
        backend,
        dir,
        s.storage_events,
        s.callers,
        s.compaction_segments,
    )
    .await;
    let (db, file, wal) = f.ledger;
    println!(
        "ledger: {db} bytes (page_count x page_size; file {file} bytes + WAL {wal} bytes) after {} events",
        f.events
    );
    println!(
        "| durable store | images | manifests | segments | objects | bytes | bytes / ledger |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, t) in [
        ("right after the last write (runtime as is)", f.loaded),
        ("after 1 s idle + handoff (runtime as is)", f.after),
        ("after the retention plan", f.retained),
    ] {
        println!(
            "| {name} | {} ({} B) | {} | {} ({} B) | {} | {} | {:.2} |",
            t.images.0,
            t.images.1,
            t.manifests.0,
            t.segments.0,
            t.segments.1,
            t.objects(),
            t.bytes(),
            t.bytes() as f64 / db.max(1) as f64
        );
    }
    println!(
        "the runtime's own retention: {} sweeps deleted {} objects ({} failed)",
        f.swept.0, f.swept.1, f.swept.2
    );
    println!(
        "retention plan: {} objects, {} bytes; another replica then restored {} events (of {})",
        f.planned.0, f.planned.1, f.restored_events, f.events
    );
    assert_eq!(
        f.restored_events as usize, f.events,
        "restored after retention"
    );
}

async fn bench(s: Sizes) {
    let backend = Backend::from_env();
    let dir = tempfile::tempdir().expect("temp dir");
    println!(
        "# leasehold runtime benchmark on {} (load average {} at the start)",
        backend.name(),
        load()
    );
    let spread = if wants("writes", backend) {
        writes(backend, dir.path(), &s).await
    } else {
        None
    };
    if wants("tip", backend) {
        tip(backend, dir.path(), &s, spread).await;
    }
    if wants("restore", backend) {
        restore_part(backend, dir.path(), &s).await;
    }
    if wants("lifecycle", backend) {
        lifecycle_part(backend, dir.path(), &s).await;
    }
    if wants("storage", backend) {
        storage_part(backend, dir.path(), &s).await;
    }
    println!("\n(load average {} at the end)", load());
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let sizes = if full { FULL } else { SMOKE };
    actix::System::new().block_on(bench(sizes));
}
