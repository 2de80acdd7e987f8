//! `Shipped` with 1 and 32 callers on one tenant beside raw rusqlite WAL + `NORMAL` and WAL +
//! `FULL` on the same disk; from the same runs, through the counted stores, durable bytes and
//! store requests per 1,000 writes and the per-stage breakdown of a batch: the local commit (the
//! raw ledger's `Ledger::run`, measured alone), the segment's put and the tip's move (timed in
//! the store wrappers), and the rest (capture, encode, the actor's hops, the reply), which is
//! what remains of a write's time. Beside them, the floor of a design the runtime does not
//! have yet ([`colocated_floor`]): the segment and the tip move in one SQLite transaction, one
//! fsync per batch, and what `Shipped` would reach with it if nothing else changed.

use std::path::Path;
use std::time::Duration;

use leasehold::OrgId;
use leasehold_actors::Durability;

use crate::backend::{Backend, replica};
use crate::many::{counted, open_and_write};
use crate::measure::{Figure, sequential_async};
use crate::raw::{self, RAW_KINDS};
use crate::stages::{self, Sum};
use crate::writes::{in_flight, insert};

/// Bytes and requests of a run of writes.
pub struct Cost {
    /// Writes acknowledged.
    pub writes: usize,
    /// Segments (durable puts).
    pub puts: u64,
    /// Bytes put.
    pub bytes: u64,
    /// Durable-store requests of every kind.
    pub durable_requests: u64,
    /// Lease-store calls of every kind.
    pub lease_calls: u64,
    /// Tip-moving calls.
    pub tip_calls: u64,
    /// Mean put time.
    pub put_mean: Duration,
    /// Mean tip-move time.
    pub tip_mean: Duration,
    /// The runtime's own timings over the run (its histograms, [`crate::stages`]).
    pub runtime: RuntimeStages,
}

/// What the runtime's histograms recorded over one run.
#[derive(Debug, Default, Clone, Copy)]
pub struct RuntimeStages {
    /// Group commits (`leasehold_commit_seconds`).
    pub commit: Sum,
    /// Segment cuts (`leasehold_segment_cut_seconds`).
    pub cut: Sum,
    /// Outcome to next cut (`leasehold_segment_gap_seconds`).
    pub gap: Sum,
    /// Cut to tip moved (`leasehold_segment_ship_seconds`).
    pub ship: Sum,
}

impl RuntimeStages {
    fn read() -> Self {
        use leasehold_actors::metrics as m;
        Self {
            commit: stages::read(m::COMMIT_SECONDS),
            cut: stages::read(m::SEGMENT_CUT_SECONDS),
            gap: stages::read(m::SEGMENT_GAP_SECONDS),
            ship: stages::read(m::SEGMENT_SHIP_SECONDS),
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            commit: self.commit.since(before.commit),
            cut: self.cut.since(before.cut),
            gap: self.gap.since(before.gap),
            ship: self.ship.since(before.ship),
        }
    }
}

impl Cost {
    /// `n` per 1,000 writes.
    pub fn per_1000(&self, n: u64) -> f64 {
        n as f64 * 1000.0 / self.writes.max(1) as f64
    }
}

fn mean(d: &[Duration]) -> Duration {
    if d.is_empty() {
        return Duration::ZERO;
    }
    d.iter().sum::<Duration>() / d.len() as u32
}

/// One stage of a batch and its time.
pub type Stage = (&'static str, Duration);

/// What the part saw.
pub struct Shipped {
    /// Raw rusqlite: (name, 1 caller, `callers` callers).
    pub raw: Vec<(&'static str, Figure, Figure)>,
    /// The raw ledger, 1 caller (the commit stage).
    pub ledger: Figure,
    /// `Shipped`, 1 caller, and its cost.
    pub one: (Figure, Cost),
    /// `Shipped`, `callers` callers, and its cost.
    pub many: (Figure, Cost),
    /// Callers of the second figure.
    pub callers: usize,
    /// The co-located floor at the 1-caller and the many-caller segment sizes.
    pub colocated: [Figure; 2],
}

/// The floor of one batch if the segment and the tip move were one SQLite transaction on the
/// embedded stores (WAL + `FULL`: one fsync of the WAL per batch, no file per segment): a blob
/// of `bytes` inserted under a fresh key and the tenant's tip moved by compare-and-set, one
/// transaction after another for `span`. The runtime does not do this (its segments are files
/// of the durable store, its tips rows of the lease store); this measures what it would buy.
pub fn colocated_floor(dir: &Path, tag: &str, bytes: usize, span: Duration) -> Figure {
    let path = dir.join(format!("colocated-{tag}.db"));
    let conn = rusqlite::Connection::open(&path).expect("open co-located file");
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
         CREATE TABLE segments (key TEXT PRIMARY KEY, bytes BLOB NOT NULL);
         CREATE TABLE tips (key TEXT PRIMARY KEY, seq INTEGER NOT NULL);
         INSERT INTO tips VALUES ('t', 0);",
    )
    .expect("co-located schema");
    let blob = vec![0x5au8; bytes];
    crate::measure::sequential(span, |i| {
        let seq = i as i64;
        let step = || -> rusqlite::Result<()> {
            conn.execute_batch("BEGIN IMMEDIATE")?;
            conn.prepare_cached("INSERT INTO segments VALUES (?1, ?2)")?
                .execute(rusqlite::params![format!("t/{:012}", seq + 1), &blob])?;
            let moved = conn
                .prepare_cached("UPDATE tips SET seq = ?1 WHERE key = 't' AND seq = ?2")?
                .execute(rusqlite::params![seq + 1, seq])?;
            assert_eq!(moved, 1, "the tip moves once per segment");
            conn.execute_batch("COMMIT")
        };
        step().expect("co-located batch");
    })
}

/// What `Shipped` would reach with the co-located floor in place of its put and tip move, all
/// else as measured: (1 caller: mean latency; many callers: writes/s at the measured writes
/// per segment). A projection, not a measurement of the runtime.
pub fn projected(sh: &Shipped) -> (Duration, f64) {
    let colo = |f: &Figure| f.took / f.ops.max(1) as u32;
    let one = mean(&sh.one.0.latencies).saturating_sub(sh.one.1.put_mean + sh.one.1.tip_mean)
        + colo(&sh.colocated[0]);
    let (many, cost) = (&sh.many.0, &sh.many.1);
    let batch = many.took / cost.puts.max(1) as u32;
    let projected_batch =
        batch.saturating_sub(cost.put_mean + cost.tip_mean) + colo(&sh.colocated[1]);
    let per_segment = many.ops as f64 / cost.puts.max(1) as f64;
    (one, per_segment / projected_batch.as_secs_f64().max(1e-9))
}

impl Shipped {
    /// The stages of one batch (a segment: the run's time over its segments) with 1 caller and
    /// with many, from the runtime's own timings where it has them: the gap from the previous
    /// segment's outcome to this cut (the commits in it, and the rest of it: the callers
    /// answered coming back, `ship_linger`), the cut, the put and the tip move (timed in the
    /// store wrappers), the ship's own hops (its timing less put and tip), and what none of
    /// them covers. Before the runtime timed its stages, the commit was the raw ledger's alone
    /// and everything but put and tip was one stage.
    pub fn stages(&self) -> [(String, Vec<Stage>); 2] {
        let split = |fig: &Figure, c: &Cost| {
            let batch = fig.took / (c.puts.max(1) as u32);
            let r = &c.runtime;
            let per = |s: Sum| Duration::from_secs_f64(s.total.max(0.0) / c.puts.max(1) as f64);
            let each = |s: Sum| Duration::from_secs_f64(s.total.max(0.0) / s.count.max(1) as f64);
            let commits = per(r.commit);
            let gap = per(r.gap);
            let cut = each(r.cut);
            let ship = each(r.ship);
            let hops = ship.saturating_sub(c.put_mean + c.tip_mean);
            let known = gap.max(commits) + cut + ship;
            vec![
                ("commits", commits),
                ("callers back, linger", gap.saturating_sub(commits)),
                ("cut (encode)", cut),
                ("put", c.put_mean),
                ("tip move", c.tip_mean),
                ("ship's hops", hops),
                ("unaccounted", batch.saturating_sub(known)),
            ]
        };
        [
            ("1 caller".to_string(), split(&self.one.0, &self.one.1)),
            (
                format!("{} callers", self.callers),
                split(&self.many.0, &self.many.1),
            ),
        ]
    }
}

async fn costed<F: std::future::Future<Output = Figure>>(
    c: &crate::many::Counted,
    run: F,
) -> (Figure, Cost) {
    c.leases.take();
    c.durable.take();
    let before = RuntimeStages::read();
    let figure = run.await;
    let runtime = RuntimeStages::read().since(before);
    let (l, d) = (c.leases.take(), c.durable.take());
    let cost = Cost {
        writes: figure.ops,
        puts: d.of("put"),
        bytes: d.put_bytes,
        durable_requests: d.total(),
        lease_calls: l.total(),
        tip_calls: l.of("move_tip") + l.of("move_tips"),
        put_mean: mean(&d.puts),
        tip_mean: mean(&l.tip_moves),
        runtime,
    };
    (figure, cost)
}

/// Measures the baselines and `Shipped`, `span` each.
pub async fn measure(backend: Backend, dir: &Path, callers: usize, span: Duration) -> Shipped {
    let mut raws = Vec::new();
    for (n, kind) in RAW_KINDS.iter().enumerate().skip(1) {
        println!("    {}: 1 and {callers} callers ...", kind.name);
        let one = raw::one_caller(dir, *kind, &format!("s{n}"), span);
        let many = raw::many_callers(dir, *kind, &format!("s{n}"), callers, span);
        raws.push((kind.name, one, many));
    }
    println!("    raw ledger (the commit stage) ...");
    let ledger = raw::ledger(dir, span);
    let c = counted(backend, dir, "shipped").await;
    let a = replica(&c.stores, "shipping", Durability::Shipped, |_| {});
    let org = OrgId::new("shipped").expect("org");
    let t = open_and_write(&a, &org, "hot").await.expect("open");
    if let Some(latency) = crate::durable::added_put_latency() {
        println!("    (every durable put takes {latency:?} more: LEASEHOLD_BENCH_PUT_LATENCY_MS)");
    }
    if let Ok(us) = std::env::var("LEASEHOLD_BENCH_SHIP_LINGER_US") {
        println!("    (ship_linger = {us} µs, 0 = off: LEASEHOLD_BENCH_SHIP_LINGER_US)");
    }
    if let Ok(codec) = std::env::var("LEASEHOLD_BENCH_SEGMENT_COMPRESSION") {
        println!("    (segment_compression = {codec}: LEASEHOLD_BENCH_SEGMENT_COMPRESSION)");
    }
    if let Ok(depth) = std::env::var("LEASEHOLD_BENCH_SEGMENTS_IN_FLIGHT") {
        println!("    (segments_in_flight = {depth}: LEASEHOLD_BENCH_SEGMENTS_IN_FLIGHT)");
    }
    println!("    Shipped: 1 caller ...");
    let one = costed(&c, sequential_async(span, |i| insert(&t, format!("s-{i}")))).await;
    println!("    Shipped: {callers} callers ...");
    let many = costed(&c, in_flight(std::slice::from_ref(&t), callers, "c", span)).await;
    let unflushed = a.close().await.expect("close");
    assert!(unflushed.is_empty(), "unflushed {unflushed:?}");
    let size = |c: &Cost| (c.bytes / c.puts.max(1)) as usize;
    println!(
        "    co-located floor: segment + tip in one SQLite transaction, {} and {} bytes ...",
        size(&one.1),
        size(&many.1)
    );
    let colocated = [
        colocated_floor(dir, "one", size(&one.1), span),
        colocated_floor(dir, "many", size(&many.1), span),
    ];
    Shipped {
        raw: raws,
        ledger,
        one,
        many,
        callers,
        colocated,
    }
}
