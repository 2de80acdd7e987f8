//! Storage benchmark: the ledger's commit path against plain rusqlite, and image + restore time
//! for each image method at three ledger sizes. Real time (`Instant`), because that is the point.
//!
//! Run: `cargo bench --bench storage` (about 45 s of measuring on 2 cores, after the build).
//! Set `LEASEHOLD_BENCH_DIR` to measure on another file system than the default temporary
//! directory's. Figures and the machine they came from are kept in `docs/benchmarks.md`.

use std::path::Path;
use std::time::{Duration, Instant};

use leasehold::image::{self, ImageFile, ImageMethod, install_image, take_image_with};
use leasehold::ledger::{Ledger, LedgerOptions, NewEvent, Synchronous};
use rusqlite::Connection;
use serde_json::json;

/// Events per measured run of the single-event commit benchmark.
const SINGLE_EVENTS: usize = 20_000;
/// Events per measured run of the batch benchmark, and calls per batch.
const BATCH_EVENTS: usize = 200_000;
const BATCH_SIZE: usize = 100;
/// Events per measured run with `synchronous=FULL` (one fsync per commit).
const FULL_EVENTS: usize = 1_000;
/// Rounds of each throughput measurement; the median and the best are reported (the machine may
/// be shared: interference only slows a round down, so the best is the steadier figure).
const ROUNDS: usize = 5;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        // `cargo test --all-targets` runs bench binaries without `--bench`: building it is the check.
        println!("storage benchmark: built; run it with `cargo bench --bench storage`");
        return;
    }
    let root = match std::env::var_os("LEASEHOLD_BENCH_DIR") {
        Some(dir) => tempfile::tempdir_in(dir),
        None => tempfile::tempdir(),
    }
    .expect("a temporary directory for the benchmark");
    let started = Instant::now();
    println!("{}", load());
    println!(
        "# leasehold storage benchmark (in {})",
        root.path().display()
    );
    let (normal, full) = (Synchronous::Normal, Synchronous::Full);
    commit_section(
        root.path(),
        "1 event per transaction",
        SINGLE_EVENTS,
        1,
        normal,
    );
    commit_section(
        root.path(),
        "100 events per transaction",
        BATCH_EVENTS,
        BATCH_SIZE,
        normal,
    );
    commit_section(
        root.path(),
        "1 event per transaction, FULL",
        FULL_EVENTS,
        1,
        full,
    );
    image_section(root.path());
    println!(
        "done in {:.1} s; {}",
        started.elapsed().as_secs_f64(),
        load()
    );
}

// ---- commit throughput -----------------------------------------------------------------------

fn event(i: usize) -> NewEvent {
    NewEvent::new("deposited", format!("k-{i}"))
        .subject("account-42")
        .payload(json!({"amount": i, "currency": "EUR"}))
}

/// The ledger: `Ledger::run` per event (batch 1), or `begin`, one `run_savepoint` per event and
/// `commit` (the actor's group commit).
fn ledger_events_per_s(path: &Path, events: usize, batch: usize, sync: Synchronous) -> f64 {
    let mut ledger = Ledger::open(path, &LedgerOptions { synchronous: sync }).expect("open");
    let start = Instant::now();
    if batch == 1 {
        for i in 0..events {
            ledger.run(|tx| tx.insert_event(&event(i))).expect("run");
        }
    } else {
        for chunk in 0..events / batch {
            ledger.begin().expect("begin");
            for i in chunk * batch..(chunk + 1) * batch {
                ledger
                    .run_savepoint(|tx| tx.insert_event(&event(i)))
                    .expect("call");
            }
            ledger.commit().expect("commit");
        }
    }
    let rate = events as f64 / start.elapsed().as_secs_f64();
    ledger.close().expect("close");
    rate
}

/// Plain rusqlite on the same schema (made by `Ledger::open`, then reopened raw): WAL, the same
/// `synchronous`, a cached INSERT, `BEGIN IMMEDIATE` … `COMMIT` around `batch` inserts.
fn raw_events_per_s(path: &Path, events: usize, batch: usize, sync: Synchronous) -> f64 {
    Ledger::open(path, &LedgerOptions::default())
        .and_then(Ledger::close)
        .expect("schema");
    let conn = Connection::open(path).expect("open raw");
    let level = if sync == Synchronous::Full {
        "FULL"
    } else {
        "NORMAL"
    };
    conn.execute_batch(&format!(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous={level};"
    ))
    .expect("pragmas");
    let sql = "INSERT INTO events (ts_ms, actor, kind, subject, payload, idem_key, run_id)
               VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
    let start = Instant::now();
    for chunk in 0..events / batch {
        conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
        for i in chunk * batch..(chunk + 1) * batch {
            let e = event(i);
            let payload = serde_json::to_string(&e.payload).expect("json");
            conn.prepare_cached(sql)
                .and_then(|mut s| {
                    s.execute(rusqlite::params![
                        1_i64, e.actor, e.kind, e.subject, payload, e.idem_key, e.run_id
                    ])
                })
                .expect("insert");
        }
        conn.execute_batch("COMMIT").expect("commit");
    }
    let rate = events as f64 / start.elapsed().as_secs_f64();
    drop(conn);
    rate
}

fn commit_section(root: &Path, title: &str, events: usize, batch: usize, sync: Synchronous) {
    println!("\n## commit throughput: {title} ({events} events, {ROUNDS} rounds)");
    let (mut ledger, mut raw) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let dir = root.join(format!("commit-{batch}-{sync:?}-{round}"));
        std::fs::create_dir_all(&dir).expect("dir");
        // Alternate which goes first, so neither always meets a warmer or a busier machine.
        let (l, r) = if round % 2 == 0 {
            let l = ledger_events_per_s(&dir.join("ledger.db"), events, batch, sync);
            (
                l,
                raw_events_per_s(&dir.join("raw.db"), events, batch, sync),
            )
        } else {
            let r = raw_events_per_s(&dir.join("raw.db"), events, batch, sync);
            (
                ledger_events_per_s(&dir.join("ledger.db"), events, batch, sync),
                r,
            )
        };
        println!(
            "  round {}: ledger {l:>9.0} ev/s   raw {r:>9.0} ev/s",
            round + 1
        );
        ledger.push(l);
        raw.push(r);
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
    let (lm, rm) = (median(&mut ledger), median(&mut raw));
    let (lb, rb) = (best_rate(&ledger), best_rate(&raw));
    println!(
        "  RESULT {title}: median ledger {lm:.0} raw {rm:.0} ev/s (ledger/raw {:.2}); \
         best ledger {lb:.0} raw {rb:.0} ev/s (ledger/raw {:.2})",
        lm / rm,
        lb / rb
    );
}

// ---- images and restores ---------------------------------------------------------------------

/// The three ledger sizes: name, approximate size, repetitions.
const SIZES: [(&str, u64, usize); 3] = [
    ("100 KB", 100 << 10, 7),
    ("10 MB", 10 << 20, 5),
    ("100 MB", 100 << 20, 3),
];

#[derive(Clone, Copy, Debug)]
enum Method {
    Backup,
    VacuumInto,
    CheckpointCopy,
}

/// Fills a ledger with ~1 KB events until its file is about `bytes` long; it stays open.
fn filled_ledger(path: &Path, bytes: u64) -> Ledger {
    let mut ledger = Ledger::open(path, &LedgerOptions::default()).expect("open");
    let pad = "x".repeat(900);
    let events = (bytes / 1100).max(1) as usize;
    for chunk in (0..events).collect::<Vec<_>>().chunks(1000) {
        ledger.begin().expect("begin");
        for &i in chunk {
            let e = NewEvent::new("filled", format!("k-{i}")).payload(json!({"i": i, "pad": pad}));
            ledger
                .run_savepoint(|tx| tx.insert_event(&e))
                .expect("insert");
        }
        ledger.commit().expect("commit");
    }
    ledger
}

fn take(method: Method, ledger: &mut Ledger, dest: &Path) -> ImageFile {
    match method {
        Method::Backup => take_image_with(ImageMethod::Backup, ledger.path(), dest),
        Method::VacuumInto => take_image_with(ImageMethod::VacuumInto, ledger.path(), dest),
        Method::CheckpointCopy => ledger.copy_image(dest),
    }
    .expect("image")
}

/// Restore as a successor does it once the bytes are fetched: verify the SHA-256, install over
/// the local path (write, fsync, rename, fsync the directory), open the ledger.
fn restore(image: &ImageFile, bytes: &[u8], dest: &Path) -> Duration {
    let start = Instant::now();
    assert_eq!(image::sha256_hex(bytes), image.sha256, "image verifies");
    install_image(bytes, dest).expect("install");
    let mut ledger = Ledger::open(dest, &LedgerOptions::default()).expect("open restored");
    let count = ledger.run(|tx| tx.event_count()).expect("count");
    let took = start.elapsed();
    assert!(count > 0);
    ledger.close().expect("close");
    took
}

const METHODS: [Method; 3] = [Method::Backup, Method::VacuumInto, Method::CheckpointCopy];

/// Takes one image with `method` and restores it; returns (take, restore) seconds and the size.
fn image_round(method: Method, ledger: &mut Ledger, dir: &Path, rep: usize) -> (f64, f64, u64) {
    let dest = dir.join(format!("image-{method:?}-{rep}.db"));
    let start = Instant::now();
    let image = take(method, ledger, &dest);
    let took = start.elapsed().as_secs_f64();
    let bytes = std::fs::read(&image.path).expect("read image");
    let restored = restore(&image, &bytes, &dir.join("restored.db")).as_secs_f64();
    std::fs::remove_file(&dest).expect("cleanup");
    (took, restored, image.size)
}

fn image_section(root: &Path) {
    println!("\n## image + restore (median and best of the repetitions; MB/s of the image size)");
    for (name, bytes, reps) in SIZES {
        let dir = root.join(format!("image-{bytes}"));
        std::fs::create_dir_all(&dir).expect("dir");
        let fill = Instant::now();
        let mut ledger = filled_ledger(&dir.join("ledger.db"), bytes);
        ledger.checkpoint().expect("checkpoint");
        // Write the fill back now, so the first method measured does not pay for it.
        rustix::fs::sync();
        let size = std::fs::metadata(ledger.path()).map_or(0, |m| m.len());
        let fill_s = fill.elapsed().as_secs_f64();
        println!(
            "  {name}: ledger of {:.2} MB filled in {fill_s:.1} s",
            mb(size)
        );
        let mut took = [vec![], vec![], vec![]];
        let mut restored = [vec![], vec![], vec![]];
        let mut sizes = [0; 3];
        for rep in 0..reps {
            // Rotate the order, so no method always runs first (or right after another's fsync).
            for k in 0..METHODS.len() {
                let m = (rep + k) % METHODS.len();
                let (t, r, size) = image_round(METHODS[m], &mut ledger, &dir, rep);
                took[m].push(t);
                restored[m].push(r);
                sizes[m] = size;
            }
        }
        for (m, method) in METHODS.iter().enumerate() {
            report_image(name, *method, mb(sizes[m]), &mut took[m], &mut restored[m]);
        }
        ledger.close().expect("close");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}

fn report_image(name: &str, method: Method, image_mb: f64, took: &mut [f64], restored: &mut [f64]) {
    let (tb, rb) = (best_time(took), best_time(restored));
    let (tm, rm) = (median(took), median(restored));
    println!(
        "  RESULT {name} {method:?}: image {image_mb:.2} MB: take median {:.1} ms best {:.1} ms \
         ({:.0} MB/s); restore median {:.1} ms best {:.1} ms ({:.0} MB/s)",
        tm * 1e3,
        tb * 1e3,
        image_mb / tb,
        rm * 1e3,
        rb * 1e3,
        image_mb / rb
    );
}

/// The load average, so a reader can tell a quiet run from a busy one (Linux only).
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(
        |_| "load average unknown".to_string(),
        |l| {
            format!(
                "load average (1, 5, 15 min): {}",
                l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
            )
        },
    )
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn best_rate(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(0.0, f64::max)
}

fn best_time(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(f64::INFINITY, f64::min)
}

fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}
