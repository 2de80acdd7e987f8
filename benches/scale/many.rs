//! The many-tenant parts of the scale benchmark: counted stores, 100,000 tenants written once
//! each through one replica at `max_open` (passivation evicting the least recently used), and
//! one hot tenant beside ever more idle open tenants (its latency, the lease-store calls per
//! renewal tick, memory and descriptors per open tenant).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use leasehold::{Error, OrgId, TenantId};
use leasehold_actors::{Durability, Event, Observer, Supervisor, TenantRef};

use crate::backend::{Backend, Stores, replica, stores};
use crate::counting::Counting;
use crate::durable::CountingDurable;
use crate::measure::{Figure, sequential_async};
use crate::process::{FdPeak, fds, mib, peak_rss, per, reset_peak_rss, rss};
use crate::writes::insert;

/// Stores whose every call is counted.
pub struct Counted {
    /// The stores, wrapped.
    pub stores: Stores,
    /// The lease store's counts.
    pub leases: Arc<Counting>,
    /// The durable store's counts.
    pub durable: Arc<CountingDurable>,
}

/// Fresh stores named `name`, wrapped in the counters.
pub async fn counted(backend: Backend, dir: &Path, name: &str) -> Counted {
    let mut s = stores(backend, dir, name).await;
    let leases = Arc::new(Counting::new(s.leases.clone()));
    let durable = Arc::new(CountingDurable::new(s.durable.clone()));
    s.leases = leases.clone();
    s.durable = durable.clone();
    Counted {
        stores: s,
        leases,
        durable,
    }
}

/// Counts `passivated` events.
#[derive(Default)]
pub struct Passivations(pub AtomicU64);

impl Observer for Passivations {
    fn on_event(&self, event: &Event) {
        if matches!(event, Event::Passivated { .. }) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Opens `id` and writes one event to it, trying again (up to 20 times, 50 ms apart) when the
/// open meets `max_open` with no idle tenant to let go: the eviction is under way.
pub async fn open_and_write(a: &Supervisor, org: &OrgId, id: &str) -> Result<TenantRef, Error> {
    let id = TenantId::new(id).expect("tenant id");
    let mut tries = 0;
    loop {
        match a.open(org, &id).await {
            Ok(t) => {
                insert(&t, "once".into()).await;
                return Ok(t);
            }
            Err(Error::OpenLimit { .. }) if tries < 20 => {
                tries += 1;
                actix_rt::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// What the 100,000-tenant run saw.
pub struct Hundred {
    /// Tenants written.
    pub tenants: usize,
    /// Opens that failed (after their retries).
    pub failed: usize,
    /// From the first open to the last acknowledged write.
    pub took: Duration,
    /// Peak resident memory of the process during the run.
    pub peak_rss: u64,
    /// Peak open descriptors (sampled every 50 ms).
    pub peak_fds: usize,
    /// Resident memory when `max_open` tenants had been written (none passivated yet).
    pub rss_full: u64,
    /// Resident memory at the end (`max_open` open, the rest passivated).
    pub rss_end: u64,
    /// Descriptors at the end.
    pub fds_end: usize,
    /// Passivations seen.
    pub passivated: u64,
    /// Lease-store and durable-store calls during the run.
    pub calls: (BTreeMap<&'static str, u64>, BTreeMap<&'static str, u64>),
    /// How long the replica's `close()` took afterwards.
    pub close: Duration,
}

/// `tenants` tenants written once each, `in_flight` at a time, through one replica with
/// `max_open` (passivation on, `passivate_after` one hour: every eviction is at `max_open`).
pub async fn hundred_thousand(
    backend: Backend,
    dir: &Path,
    tenants: usize,
    max_open: usize,
    in_flight: usize,
) -> Hundred {
    let c = counted(backend, dir, "hundred").await;
    let seen = Arc::new(Passivations::default());
    let observer: Arc<dyn Observer> = seen.clone();
    let a = replica(&c.stores, "many", Durability::Shipped, |cfg| {
        cfg.max_open = max_open;
        cfg.passivate_after = Some(Duration::from_secs(3_600));
        cfg.observer = Some(observer);
    });
    let org = OrgId::new("many").expect("org");
    reset_peak_rss();
    let fd_peak = FdPeak::start();
    let started = Instant::now();
    let (mut failed, mut done, mut rss_full) = (0, 0, 0);
    let mut writes = futures::stream::iter(0..tenants)
        .map(|i| {
            let (a, org) = (a.clone(), org.clone());
            async move {
                open_and_write(&a, &org, &format!("t{i:06}"))
                    .await
                    .map(drop)
            }
        })
        .buffer_unordered(in_flight);
    while let Some(written) = writes.next().await {
        if let Err(e) = written {
            failed += 1;
            if failed <= 5 {
                println!("    an open failed: {e}");
            }
        }
        done += 1;
        if done == max_open {
            rss_full = rss();
        }
        if done % (tenants / 10).max(1) == 0 {
            println!(
                "    {done}/{tenants} written in {:.1} s; {} passivated; RSS {:.0} MiB, {} descriptors",
                started.elapsed().as_secs_f64(),
                seen.0.load(Ordering::Relaxed),
                mib(rss()),
                fds()
            );
        }
    }
    drop(writes);
    let took = started.elapsed();
    let (peak_rss, peak_fds) = (peak_rss(), fd_peak.peak());
    let (rss_end, fds_end) = (rss(), fds());
    let calls = (c.leases.take().calls, c.durable.take().calls);
    let closing = Instant::now();
    let unflushed = a.close().await.expect("close");
    assert!(unflushed.is_empty(), "unflushed {unflushed:?}");
    Hundred {
        tenants,
        failed,
        took,
        peak_rss,
        peak_fds,
        rss_full,
        rss_end,
        fds_end,
        passivated: seen.0.load(Ordering::Relaxed),
        calls,
        close: closing.elapsed(),
    }
}

/// The lease-store calls of an idle window.
pub struct Tick {
    /// Renewal ticks (`renew_many` calls) in the window.
    pub ticks: u64,
    /// Every call in the window, by operation.
    pub calls: BTreeMap<&'static str, u64>,
    /// Leases carried per `renew_many`.
    pub leases_per_renewal: f64,
    /// The median `renew_many` time.
    pub renew_p50: Duration,
}

impl Tick {
    /// All calls per renewal tick.
    pub fn per_tick(&self) -> f64 {
        self.calls.values().sum::<u64>() as f64 / self.ticks.max(1) as f64
    }
}

/// One level of the idle part.
pub struct Level {
    /// Tenants open, the hot one included.
    pub open: usize,
    /// The hot tenant's sequential writes.
    pub hot: Figure,
    /// The lease-store calls of an idle window.
    pub tick: Tick,
    /// Resident memory and descriptors with `open` tenants open.
    pub rss: u64,
    /// Descriptors.
    pub fds: usize,
}

/// What the idle part saw.
pub struct Idle {
    /// Each level, the first being the hot tenant alone.
    pub levels: Vec<Level>,
    /// Lease-store calls, by operation, of one local sweep and one reconciliation at the last
    /// level, and of the idle check.
    pub sweeps: Vec<(&'static str, BTreeMap<&'static str, u64>)>,
}

/// The sizes of the idle part.
pub struct IdleSizes {
    /// Tenants open at each level (the hot one included).
    pub levels: Vec<usize>,
    /// The renewal tick.
    pub tick: Duration,
    /// How long each idle window is.
    pub window: Duration,
    /// How long the hot tenant writes at each level.
    pub span: Duration,
}

/// One hot tenant, then ever more idle tenants opened beside it (written once each), measuring
/// at each level the hot tenant's write latency, the lease-store calls of an idle window, and
/// the process's memory and descriptors.
pub async fn idle(backend: Backend, dir: &Path, s: &IdleSizes) -> Idle {
    let c = counted(backend, dir, "idle").await;
    let most = s.levels.iter().copied().max().unwrap_or(1);
    let a = replica(&c.stores, "idle", Durability::Shipped, |cfg| {
        cfg.max_open = most + 16;
        cfg.renew_every = Some(s.tick);
        cfg.passivate_after = Some(Duration::from_secs(3_600));
    });
    let org = OrgId::new("idle").expect("org");
    let hot = open_and_write(&a, &org, "hot").await.expect("hot");
    let mut levels = Vec::new();
    let mut open = 1;
    for &level in std::iter::once(&1).chain(&s.levels) {
        if level > open {
            println!(
                "    opening {} idle tenants (to {level} open) ...",
                level - open
            );
            let mut opens = futures::stream::iter(open..level)
                .map(|i| {
                    let (a, org) = (a.clone(), org.clone());
                    async move { open_and_write(&a, &org, &format!("idle{i:06}")).await }
                })
                .buffer_unordered(32);
            while let Some(t) = opens.next().await {
                t.expect("open an idle tenant");
            }
            open = level;
        }
        // Let the opens' own calls settle, then count an idle window.
        actix_rt::time::sleep(s.tick * 2).await;
        c.leases.take();
        actix_rt::time::sleep(s.window).await;
        let counted = c.leases.take();
        let mut renewals = counted.renewals.clone();
        renewals.sort();
        let tick = Tick {
            ticks: counted.of("renew_many"),
            leases_per_renewal: counted.renewed_leases as f64
                / counted.of("renew_many").max(1) as f64,
            renew_p50: renewals
                .get(renewals.len() / 2)
                .copied()
                .unwrap_or_default(),
            calls: counted.calls,
        };
        let (rss_now, fds_now) = (rss(), fds());
        println!(
            "    {level} open: the hot tenant writes for {:?} ...",
            s.span
        );
        let hot_writes = sequential_async(s.span, |i| insert(&hot, format!("h{level}-{i}"))).await;
        println!(
            "    {level} open: {:.1} lease-store calls per tick ({} ticks), RSS {:.0} MiB, {fds_now} descriptors, hot p50 {:.2} ms",
            tick.per_tick(),
            tick.ticks,
            mib(rss_now),
            hot_writes.quantile(0.5).unwrap_or_default().as_secs_f64() * 1e3
        );
        levels.push(Level {
            open: level,
            hot: hot_writes,
            tick,
            rss: rss_now,
            fds: fds_now,
        });
    }
    let mut sweeps = Vec::new();
    c.leases.take();
    let n = a.passivate_idle_now().await.expect("idle check");
    assert_eq!(n, 0, "nothing is idle for an hour");
    sweeps.push(("idle check (passivate_idle_now)", c.leases.take().calls));
    a.sweep_local().await.expect("sweep");
    sweeps.push(("local sweep (sweep_local)", c.leases.take().calls));
    a.reconcile_now().await.expect("reconcile");
    sweeps.push(("reconciliation (reconcile_now)", c.leases.take().calls));
    println!("    closing ({open} tenants, not measured) ...");
    let unflushed = a.close().await.expect("close");
    assert!(unflushed.is_empty(), "unflushed {unflushed:?}");
    Idle { levels, sweeps }
}

/// Memory and descriptors per open tenant between the first level and the last.
pub fn per_open(idle: &Idle) -> (f64, f64) {
    let (first, last) = (&idle.levels[0], &idle.levels[idle.levels.len() - 1]);
    let n = last.open - first.open;
    (
        per(last.rss, first.rss, n),
        per(last.fds as u64, first.fds as u64, n),
    )
}
