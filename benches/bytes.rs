//! Bytes and requests benchmark, one run printing everything (docs/benchmarks.md, "Bytes and
//! requests"):
//!
//! 1. durable bytes and store requests (puts, gets, sizes, lists, deletes, counted by a wrapper
//!    around the durable store: `bytes/counting.rs`) per 1,000 acknowledged single-event writes,
//!    on `Shipped` and `Async` (every 1 s), with 1 caller and with 32 callers on one tenant,
//!    segments written plain (format 1) and compressed (format 2, zstd), each with its writes/s
//!    against raw rusqlite one-commit-per-insert (WAL + `FULL`, WAL + `NORMAL`) of the same run
//!    (an `Async` run refused with `LogBehind` — its log has `async_pending_limit` waiting — is
//!    retried after 1 ms and counted once, when acknowledged);
//! 2. the real segments of the plain runs compressed by zstd (levels 1, 3, 9) and by lz4_flex:
//!    size against plain, encode and decode time per segment, and the segment codec's own
//!    `encode_with` / `decode` (SHA-256 included) per segment;
//! 3. the cost per million writes at S3's list prices (us-east-1, Standard).
//!
//! Run: `cargo bench --bench bytes` (the embedded defaults: SQLite lease file + durable
//! directory in a temp dir). `LEASEHOLD_BENCH_BACKEND=postgres-s3` (with `--features "postgres
//! s3"`, under `scripts/with-servers.sh`) runs part 1 on PostgreSQL + S3 (moto). Under `cargo
//! test` (no `--bench` argument) it runs once with tiny sizes, as a smoke test. Real time
//! (`Instant`), because that is the point.

#[allow(dead_code)]
#[path = "runtime/backend.rs"]
mod backend;
#[path = "bytes/counting.rs"]
mod counting;
#[allow(dead_code)]
#[path = "runtime/measure.rs"]
mod measure;
#[allow(dead_code)]
#[path = "runtime/raw.rs"]
mod raw;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use backend::{Backend, Stores, replica, stores};
use counting::{Counting, Counts};
use leasehold::ledger::NewEvent;
use leasehold::log::Segment;
use leasehold::log::segment::SegmentCompression;
use leasehold::{LeaseKey, OrgId, TenantId};
use leasehold_actors::{Durability, TenantRef};
use measure::{Figure, sequential_async};
use raw::RAW_KINDS;

/// Sizes of one run.
struct Sizes {
    /// How long each write figure runs.
    span: Duration,
    /// Callers in flight in the "many callers" rows.
    callers: usize,
    /// Repetitions of each codec timing over the sample.
    reps: usize,
}

const FULL: Sizes = Sizes {
    span: Duration::from_secs(5),
    callers: 32,
    reps: 20,
};
const SMOKE: Sizes = Sizes {
    span: Duration::from_millis(60),
    callers: 4,
    reps: 1,
};

/// S3 Standard list prices, us-east-1, as published on 2026-12-01: PUT (and COPY, POST, LIST)
/// per 1,000 requests, GET (and SELECT, HEAD) per 1,000 requests, storage per GB-month (first
/// 50 TB).
const PUT_PER_1000: f64 = 0.005;
const GET_PER_1000: f64 = 0.0004;
const STORAGE_PER_GB_MONTH: f64 = 0.023;

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "unknown".into(),
        |s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
    )
}

/// One row of part 1.
struct Row {
    name: String,
    writes: Figure,
    counts: Counts,
}

impl Row {
    /// `n` per 1,000 acknowledged writes.
    fn per_1000(&self, n: u64) -> f64 {
        n as f64 * 1000.0 / self.writes.ops.max(1) as f64
    }

    /// The S3 list price of a million writes: requests, and storage for a month of the bytes.
    fn cost_per_million(&self) -> (f64, f64, f64) {
        let c = &self.counts;
        let per_million = |n: u64| self.per_1000(n) * 1000.0;
        let puts = per_million(c.puts + c.lists) / 1000.0 * PUT_PER_1000;
        let gets = per_million(c.gets + c.sizes) / 1000.0 * GET_PER_1000;
        let storage = per_million(c.put_bytes) / 1e9 * STORAGE_PER_GB_MONTH;
        (puts, gets, storage)
    }
}

/// Writes for `span` on a fresh tenant of `durability` with `callers` callers, segments
/// written with `compression`; counts every durable call from after the open to after the
/// replica closed (an `Async` tenant ships what waits when it closes).
async fn measure_row(
    backend: Backend,
    dir: &std::path::Path,
    durability: Durability,
    callers: usize,
    compression: SegmentCompression,
    span: Duration,
    samples: &mut Vec<(String, Vec<u8>)>,
) -> Row {
    let mode = if durability == Durability::Shipped {
        "Shipped"
    } else {
        "Async 1 s"
    };
    let name = format!("{mode}, {callers} caller(s), {compression:?}");
    let tag = name.replace([' ', ',', '(', ')'], "-").to_lowercase();
    let base = stores(backend, dir, &tag).await;
    let counting = Arc::new(Counting::new(base.durable.clone()));
    let s = Stores {
        durable: counting.clone(),
        ..base
    };
    let a = replica(&s, "writer", durability, |c| {
        c.segment_compression = compression
    });
    let org = OrgId::new("bench").expect("org");
    let t = a
        .open(&org, &TenantId::new("hot").expect("id"))
        .await
        .expect("open");
    let opened = counting.counts();
    println!("  {name} for {span:?} ...");
    let writes = if callers == 1 {
        sequential_async(span, |i| insert(&t, format!("s-{i}"))).await
    } else {
        in_flight(&t, callers, span).await
    };
    let unflushed = a.close().await.expect("close");
    assert!(unflushed.is_empty(), "{name}: unflushed {unflushed:?}");
    let counts = counting.counts().since(opened);
    if compression == SegmentCompression::Off {
        let key = LeaseKey::new(&org, &TenantId::new("hot").expect("id"));
        samples.extend(
            counting
                .kept_segments()
                .into_iter()
                .map(|(k, b)| (format!("{key}|{k}"), b)),
        );
    }
    println!(
        "    {:.0} writes/s, {} segments, {} bytes",
        writes.rate(),
        counts.segment_puts,
        counts.put_bytes
    );
    Row {
        name,
        writes,
        counts,
    }
}

/// One acknowledged single-event run; a run refused with `LogBehind` (an `Async` log that has
/// `async_pending_limit` waiting: nothing committed, retry shortly) is retried after 1 ms.
async fn insert(t: &TenantRef, idem: String) {
    loop {
        let key = idem.clone();
        match t
            .run(move |l| l.insert_event(&NewEvent::new("bench", key)))
            .await
        {
            Ok(_) => return,
            Err(e) if e.code() == "LEASEHOLD_LOG_BEHIND" => {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(e) => panic!("run: {e:?}"),
        }
    }
}

/// `callers` callers on `t`, each calling [`insert`] until `span` has passed.
async fn in_flight(t: &TenantRef, callers: usize, span: Duration) -> Figure {
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..callers {
        let (t, done) = (t.clone(), done.clone());
        tasks.push(actix::spawn(async move {
            let mut i = 0;
            while started.elapsed() < span {
                insert(&t, format!("c-{c}-{i}")).await;
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }));
    }
    for task in tasks {
        task.await.expect("caller");
    }
    Figure {
        ops: done.load(Ordering::Relaxed),
        took: started.elapsed(),
        latencies: Vec::new(),
    }
}

/// The time per item of `op` over `items`, `reps` times.
fn per_item<T>(items: &[T], reps: usize, mut op: impl FnMut(&T) -> usize) -> (Duration, usize) {
    let started = Instant::now();
    let mut out = 0;
    for _ in 0..reps {
        out = items.iter().map(&mut op).sum();
    }
    let n = (items.len() * reps).max(1) as u32;
    (started.elapsed() / n, out)
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// Part 2: the plain segments `samples` (key and stored bytes) compressed every way.
fn codec(samples: &[(String, Vec<u8>)], reps: usize) {
    println!(
        "\n## 2. real segments compressed ({} segments of the plain runs)",
        samples.len()
    );
    let segments: Vec<Segment> = samples
        .iter()
        .filter_map(|(name, bytes)| {
            let (key, path) = name.split_once('|')?;
            let (org, tenant) = key.split_once('/')?;
            let key = LeaseKey::new(&OrgId::new(org).ok()?, &TenantId::new(tenant).ok()?);
            let pos = leasehold::layout::segment_of(&key, path)?;
            Segment::decode(bytes, &key, pos).ok()
        })
        .collect();
    if segments.is_empty() {
        println!("  no segments to measure");
        return;
    }
    // The codec bytes inside each plain segment (what format 2 compresses).
    let raw: Vec<Vec<u8>> = samples
        .iter()
        .map(|(_, b)| b[..b.len() - leasehold::log::segment::CHECKSUM_LEN].to_vec())
        .collect();
    let plain: usize = raw.iter().map(Vec::len).sum();
    println!(
        "  mean plain segment: {:.0} bytes ({:.1} pages of {} bytes)",
        plain as f64 / raw.len() as f64,
        segments.iter().map(|s| s.pages.len()).sum::<usize>() as f64 / segments.len() as f64,
        segments[0].header.page_size
    );
    println!("\n| codec | stored / plain | encode per segment | decode per segment |");
    println!("| --- | ---: | ---: | ---: |");
    for level in [1, 3, 9] {
        let packed: Vec<Vec<u8>> = raw
            .iter()
            .map(|r| zstd::bulk::compress(r, level).expect("zstd"))
            .collect();
        let (enc, _) = per_item(&raw, reps, |r| {
            zstd::bulk::compress(r, level).expect("zstd").len()
        });
        let pairs: Vec<(&Vec<u8>, usize)> = packed.iter().zip(raw.iter().map(Vec::len)).collect();
        let (dec, _) = per_item(&pairs, reps, |(p, n)| {
            zstd::bulk::decompress(p, *n).expect("zstd").len()
        });
        let size: usize = packed.iter().map(Vec::len).sum();
        println!(
            "| zstd level {level} | {:.3} | {} | {} |",
            size as f64 / plain as f64,
            us(enc),
            us(dec)
        );
    }
    let packed: Vec<Vec<u8>> = raw
        .iter()
        .map(|r| lz4_flex::compress_prepend_size(r))
        .collect();
    let (enc, _) = per_item(&raw, reps, |r| lz4_flex::compress_prepend_size(r).len());
    let (dec, _) = per_item(&packed, reps, |p| {
        lz4_flex::decompress_size_prepended(p).expect("lz4").len()
    });
    let size: usize = packed.iter().map(Vec::len).sum();
    println!(
        "| lz4_flex (block) | {:.3} | {} | {} |",
        size as f64 / plain as f64,
        us(enc),
        us(dec)
    );
    for compression in [SegmentCompression::Off, SegmentCompression::Zstd] {
        let stored: Vec<(Vec<u8>, &Segment)> = segments
            .iter()
            .map(|s| (s.encode_with(compression).expect("encode").bytes, s))
            .collect();
        let (enc, size) = per_item(&segments, reps, |s| {
            s.encode_with(compression).expect("encode").bytes.len()
        });
        let (dec, _) = per_item(&stored, reps, |(b, s)| {
            let key = LeaseKey::new(
                &OrgId::new("bench").expect("org"),
                &TenantId::new("hot").expect("id"),
            );
            Segment::decode(b, &key, s.header.pos)
                .expect("decode")
                .pages
                .len()
        });
        println!(
            "| `Segment::encode_with({compression:?})` / `decode` (SHA-256 included) | {:.3} | {} | {} |",
            size as f64 / (plain + raw.len() * leasehold::log::segment::CHECKSUM_LEN) as f64,
            us(enc),
            us(dec)
        );
    }
}

fn print_rows(rows: &[Row], raws: &[(&str, Figure)]) {
    println!(
        "\n| run | writes/s | vs raw WAL+FULL / WAL+NORMAL | PUTs | bytes put | mean segment | GETs | HEADs | LISTs | DELETEs |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let rate = |n: &str| {
        raws.iter()
            .find(|(k, _)| k.contains(n))
            .map_or(1.0, |(_, f)| f.rate().max(1e-9))
    };
    for r in rows {
        let c = &r.counts;
        println!(
            "| {} | {:.0} | {:.2}x / {:.2}x | {:.1} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} |",
            r.name,
            r.writes.rate(),
            r.writes.rate() / rate("FULL"),
            r.writes.rate() / rate("NORMAL"),
            r.per_1000(c.puts),
            r.per_1000(c.put_bytes),
            c.segment_bytes as f64 / c.segment_puts.max(1) as f64,
            r.per_1000(c.gets),
            r.per_1000(c.sizes),
            r.per_1000(c.lists),
            r.per_1000(c.deletes),
        );
    }
    println!("(per 1,000 acknowledged writes; from after the open to after the replica closed)");
}

/// Part 3: the rows at S3's list prices.
fn print_costs(rows: &[Row]) {
    println!(
        "\n## 3. cost per million writes at S3 list prices (us-east-1 Standard, 2026-12-01: PUT/LIST ${PUT_PER_1000}/1,000, GET/HEAD ${GET_PER_1000}/1,000, ${STORAGE_PER_GB_MONTH}/GB-month; DELETE free)"
    );
    println!(
        "(storage: the bytes put, kept a month; compaction and retention delete most of them sooner)"
    );
    println!("\n| run | PUT + LIST | GET + HEAD | storage, per month kept | total (first month) |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for r in rows {
        let (puts, gets, storage) = r.cost_per_million();
        println!(
            "| {} | ${puts:.4} | ${gets:.4} | ${storage:.4} | ${:.4} |",
            r.name,
            puts + gets + storage
        );
    }
}

#[actix_rt::main]
async fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let s = if bench { FULL } else { SMOKE };
    let backend = Backend::from_env();
    println!("# leasehold bytes and requests benchmark");
    println!(
        "backend: {}; machine load (1, 5, 15 min): {}; {} cores",
        backend.name(),
        load(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let dir = tempfile::tempdir().expect("temp dir");
    println!("\n## 1. bytes and requests per 1,000 acknowledged single-event writes");
    let mut raws = Vec::new();
    for (n, kind) in RAW_KINDS.iter().enumerate() {
        if !kind.name.contains("WAL") {
            continue;
        }
        println!("  {}: 1 caller ...", kind.name);
        let f = raw::one_caller(dir.path(), *kind, &format!("raw-{n}"), s.span);
        println!("    {:.0} writes/s", f.rate());
        raws.push((kind.name, f));
    }
    let mut rows = Vec::new();
    let mut samples = Vec::new();
    for durability in [Durability::Shipped, Durability::ASYNC] {
        for callers in [1, s.callers] {
            for compression in [SegmentCompression::Off, SegmentCompression::Zstd] {
                rows.push(
                    measure_row(
                        backend,
                        dir.path(),
                        durability,
                        callers,
                        compression,
                        s.span,
                        &mut samples,
                    )
                    .await,
                );
            }
        }
    }
    println!(
        "\nraw rusqlite, 1 caller: {}",
        raws.iter()
            .map(|(n, f)| format!("{n} {:.0} writes/s", f.rate()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    print_rows(&rows, &raws);
    codec(&samples, s.reps);
    print_costs(&rows);
    println!("\nmachine load at the end (1, 5, 15 min): {}", load());
}
