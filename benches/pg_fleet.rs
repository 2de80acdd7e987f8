//! The lease store at fleet scale: how many tip moves and renewals one PostgreSQL sustains
//! (docs/operations.md, "One PostgreSQL for a fleet"). Four replicas (each its own store and
//! pool, as four processes would have), 10,000 tenants held, then:
//!
//! - renewals: each replica renews all of its leases in one `renew_many` round trip, in a loop;
//! - tip moves: each replica runs 4 shippers, each moving the tips of its own tenants in batches
//!   of 1, 8, 32 and 128 moves per `move_tips` call (one statement: how the runtime coalesces
//!   the tip moves of many tenants' batches, `actors/src/tips.rs`).
//!
//! Run: `LEASEHOLD_TEST_PG_FSYNC=on scripts/with-servers.sh cargo bench --bench pg_fleet
//! --features postgres` (a throwaway PostgreSQL cluster with its commits fsynced, as in
//! production; without the variable the test cluster runs with `fsync=off`).
//! `LEASEHOLD_TEST_PG_URL` names another server. `cargo test --all-targets` only builds it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::LeaseKey;
use leasehold::ids::{OrgId, TenantId};
use leasehold::layout::LogPos;
use leasehold::lease::postgres::{PgOptions, PostgresLeaseStore};
use leasehold::lease::{LeaseStore, TipMove};

const REPLICAS: usize = 4;
const TENANTS: usize = 10_000;
const SHIPPERS: usize = 4;
const PHASE: Duration = Duration::from_secs(4);
const TTL: Duration = Duration::from_secs(600);

/// One tenant held by a replica, with the tip it last saw.
#[derive(Clone)]
struct Held {
    key: LeaseKey,
    epoch: u64,
    tip: Option<LogPos>,
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "pg_fleet benchmark: built; run it with scripts/with-servers.sh cargo bench --bench pg_fleet --features postgres"
        );
        return;
    }
    let Ok(url) = std::env::var("LEASEHOLD_TEST_PG_URL") else {
        eprintln!("LEASEHOLD_TEST_PG_URL is not set: run through scripts/with-servers.sh");
        std::process::exit(2);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(run(&url));
}

async fn run(url: &str) {
    println!("{}", load());
    let table = format!("bench_fleet_{}", std::process::id());
    let mut stores = Vec::new();
    for _ in 0..REPLICAS {
        let store = PostgresLeaseStore::connect_with(url, &table, PgOptions::default())
            .await
            .expect("PostgreSQL answers");
        stores.push(Arc::new(store));
    }
    // Every replica acquires its share of the tenants.
    let began = Instant::now();
    let org = OrgId::new("bench").expect("an org");
    let mut held: Vec<Vec<Held>> = vec![Vec::new(); REPLICAS];
    let mut acquiring = Vec::new();
    for (r, store) in stores.iter().enumerate() {
        let (store, org) = (store.clone(), org.clone());
        acquiring.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for t in (r..TENANTS).step_by(REPLICAS) {
                let key = LeaseKey::new(&org, &TenantId::new(format!("t{t:05}")).expect("id"));
                let record = store
                    .acquire(&key, &format!("r{r}"), TTL)
                    .await
                    .expect("acquire");
                mine.push(Held {
                    key,
                    epoch: record.epoch,
                    tip: None,
                });
                if mine.len() % 500 == 0 {
                    eprint!(".");
                }
            }
            mine
        }));
    }
    for (r, task) in acquiring.into_iter().enumerate() {
        held[r] = task.await.expect("acquiring");
    }
    let acquire_s = began.elapsed().as_secs_f64();
    eprintln!();
    println!("# one PostgreSQL, {REPLICAS} replicas, {TENANTS} tenants");
    println!(
        "acquire: {TENANTS} leases in {acquire_s:.1} s ({:.0}/s, one statement each, {REPLICAS} replicas)",
        TENANTS as f64 / acquire_s
    );

    // Renewals: one renew_many per replica per round, every lease of the replica in it.
    let until = Instant::now() + PHASE;
    let mut renewing = Vec::new();
    for (r, store) in stores.iter().enumerate() {
        let store = store.clone();
        let leases: Vec<(LeaseKey, u64)> =
            held[r].iter().map(|h| (h.key.clone(), h.epoch)).collect();
        renewing.push(tokio::spawn(async move {
            let (mut calls, mut renewed, mut worst) = (0u64, 0u64, Duration::ZERO);
            while Instant::now() < until {
                let t = Instant::now();
                let out = store
                    .renew_many(&format!("r{r}"), &leases, TTL)
                    .await
                    .expect("renew");
                worst = worst.max(t.elapsed());
                calls += 1;
                renewed += out.len() as u64;
            }
            (calls, renewed, worst)
        }));
    }
    let (mut calls, mut renewed, mut worst) = (0, 0, Duration::ZERO);
    for task in renewing {
        let (c, n, w) = task.await.expect("renewing");
        calls += c;
        renewed += n;
        worst = worst.max(w);
    }
    let secs = PHASE.as_secs_f64();
    println!(
        "renewals: {:.0} leases/s in {:.0} renew_many calls/s ({} leases a call), slowest call {:.0} ms",
        renewed as f64 / secs,
        calls as f64 / secs,
        TENANTS / REPLICAS,
        worst.as_secs_f64() * 1e3
    );
    println!(
        "  at renew_every 10 s (one call per replica per tick), renewals alone would fill this PostgreSQL at {:.0} tenants",
        renewed as f64 / secs * 10.0
    );

    // Tip moves, coalesced `batch` at a time per call.
    println!("| moves per call | tip moves/s | calls/s | p50 call ms | p99 call ms |");
    println!("| ---: | ---: | ---: | ---: | ---: |");
    for batch in [1usize, 8, 32, 128] {
        let until = Instant::now() + PHASE;
        let mut shipping = Vec::new();
        for (r, store) in stores.iter().enumerate() {
            for s in 0..SHIPPERS {
                let store = store.clone();
                let mut mine: Vec<Held> =
                    held[r].iter().skip(s).step_by(SHIPPERS).cloned().collect();
                let owner = format!("r{r}");
                shipping.push(tokio::spawn(async move {
                    let (mut moves, mut lat) = (0u64, Vec::new());
                    let mut next = 0usize;
                    while Instant::now() < until {
                        let picked: Vec<usize> =
                            (0..batch).map(|i| (next + i) % mine.len()).collect();
                        next = (next + batch) % mine.len();
                        let call: Vec<TipMove> = picked
                            .iter()
                            .map(|&i| {
                                let h = &mine[i];
                                let seq = h.tip.map_or(1, |p| p.seq + 1);
                                TipMove {
                                    key: h.key.clone(),
                                    owner: owner.clone(),
                                    epoch: h.epoch,
                                    from: h.tip,
                                    to: LogPos {
                                        epoch: h.epoch,
                                        seq,
                                    },
                                }
                            })
                            .collect();
                        let t = Instant::now();
                        let out = store.move_tips(&call).await.expect("move_tips");
                        lat.push(t.elapsed());
                        for (&i, (m, o)) in picked.iter().zip(call.iter().zip(out)) {
                            if o.is_ok() {
                                mine[i].tip = Some(m.to);
                                moves += 1;
                            }
                        }
                    }
                    let tips: Vec<_> = mine.iter().map(|h| (h.key.clone(), h.tip)).collect();
                    (moves, lat, tips)
                }));
            }
        }
        let (mut moves, mut lat) = (0u64, Vec::new());
        let mut tips = std::collections::HashMap::new();
        for task in shipping {
            let (m, l, t) = task.await.expect("shipping");
            moves += m;
            lat.extend(l);
            tips.extend(t);
        }
        for list in held.iter_mut() {
            for h in list.iter_mut() {
                if let Some(tip) = tips.get(&h.key) {
                    h.tip = *tip;
                }
            }
        }
        lat.sort();
        let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e3;
        println!(
            "| {batch} | {:.0} | {:.0} | {:.2} | {:.2} |",
            moves as f64 / secs,
            lat.len() as f64 / secs,
            pct(0.5),
            pct(0.99)
        );
    }
    println!("# finished in {:.0} s", began.elapsed().as_secs_f64());
}

/// The machine's load when the run began, for the record.
fn load() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    format!("# load average {} on {cores} cores", load.trim())
}
