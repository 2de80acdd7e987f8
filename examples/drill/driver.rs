//! The driver role: sets up a run directory, starts the replicas, runs the clients and the fault
//! schedule for `--seconds`, then hands over to the finale and the checker and prints the
//! verdict.
//!
//! ```text
//!  run dir: roots/replica-N/ · roots/checker/ · logs/replica-N.log
//!  stores (crate::backend): sqlite-dir: leases.db · durable/ in the run dir
//!                           postgres-s3: table and bucket prefix drill_<seed>_<pid>
//!  t=0 start N replicas ─> clients (tenants × clients-per-tenant) + fault schedule + progress
//!  t=seconds ─> finale (stop faults, close, fresh replica reads) ─> checker ─> summary, exit
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::BreakSwitch;
use crate::backend::{self, Backend, Stores};
use crate::checker::{self, Report, Tolerance, Violation};
use crate::cluster::{BoxError, Cluster, Spawn};
use crate::faults::{self, FaultKind};
use crate::finale::{self, Final};
use crate::gaps::KnownGap;
use crate::history::{History, Record};
use crate::protocol::{Mode, now_ms};
use crate::store_rules::LossRules;
use crate::{clients, rng::Rng, watcher};

/// Options of a drill run.
#[derive(Debug, Clone, clap::Args)]
pub struct DriveArgs {
    /// Seed of the fault schedule and of every random choice (default: random, always printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// How long clients write and faults are injected.
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
    /// How many replica processes.
    #[arg(long, default_value_t = 3)]
    pub replicas: usize,
    /// How many tenants.
    #[arg(long, default_value_t = 6)]
    pub tenants: u32,
    /// How many concurrent clients write to each tenant.
    #[arg(long, default_value_t = 2)]
    pub clients_per_tenant: u32,
    /// Deliberate bugs to switch on in the replicas, to show the checker catches them.
    #[arg(long = "break", value_enum)]
    pub breakage: Vec<BreakSwitch>,
    /// Known gaps to report without failing the run, comma-separated (`crate::gaps`: each
    /// named after the holes it stands for; CI tolerates those today's runtime shows).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub tolerate: Vec<KnownGap>,
    /// Fail the run when a replica process that closed and dropped its supervisor still holds
    /// more threads or file descriptors than before it started (default: report only).
    #[arg(long)]
    pub fail_on_leak: bool,
    /// The fault kinds to inject, comma-separated (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub faults: Vec<FaultKind>,
    /// Run directory (default: a temporary directory, removed after a clean run).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the run directory after a clean run too.
    #[arg(long)]
    pub keep: bool,
    /// Where leases and images live: `sqlite-dir` (a lease file and a directory in the run
    /// directory) or `postgres-s3` (a table and a bucket prefix named after the run, on the
    /// servers `scripts/with-servers.sh` starts; needs the `postgres` and `s3` features).
    #[arg(long, value_enum, default_value_t = Backend::SqliteDir)]
    pub backend: Backend,
    /// How the replicas keep acknowledged writes beyond themselves: `shipped` (the runtime's
    /// default, RPO 0: no acknowledged write may be lost), `async` (losses within
    /// `--async-every-ms` + one store deadline + slack) or `images` (losses within the
    /// snapshot tail). The checker's loss rules follow (docs/testing.md, process drill).
    #[arg(long, value_enum, default_value_t = Mode::Shipped)]
    pub durability: Mode,
    /// With `--durability async`: how often the replicas ship their changes, in ms.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub async_every_ms: u64,
    /// A large-batch client on tenant 0: one run carrying a blob of this many MiB every
    /// `--large-batch-every-ms` (one segment of about that size; default 0: none).
    #[arg(long, default_value_t = 0)]
    pub large_batch_mib: u32,
    /// How often the large-batch client writes, in ms (±50 %).
    #[arg(long, default_value_t = 1_500)]
    pub large_batch_every_ms: u64,
    /// How long after a forget returned nothing of the forgotten epochs may be left, puts
    /// that land late included: the erasure is listed again then (`forgotten-object-left`).
    /// Default: the runtime's bound T for the replicas' settings (`put_lifetime` +
    /// `reconcile_every` + one sweep, docs/guarantees.md "the erasure bound"; about 8 s).
    #[arg(long)]
    pub erasure_bound_ms: Option<u64>,
    /// Point-in-time restores per tenant at the end (positions and times the store watcher
    /// read, and the final tip), and one every few seconds during the run; 0: none.
    #[arg(long, default_value_t = 2)]
    pub pitr_targets: usize,
    /// Retention, compaction and slow backends, passed on to every replica.
    #[command(flatten)]
    pub tuning: crate::tuning::Tuning,
    /// How clients reach their tenants: `owners` (writes through the replica the driver
    /// routes each tenant to, opening it where nobody holds it) or `addresses` (typed
    /// messages to the tenant's address through random replicas, which run them wherever the
    /// tenant is: every replica runs a transport; `crate::addresses`).
    #[arg(long, value_enum, default_value_t = Clients::Owners)]
    pub clients: Clients,
}

/// How clients reach their tenants (`--clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Clients {
    /// Through the owner the driver routes each tenant to.
    Owners,
    /// Through tenant addresses, from random replicas.
    Addresses,
}

fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Rng::new(nanos ^ u64::from(std::process::id())).next_u64() % 1_000_000_000
}

/// Runs a drill. Exit code 0: no violation; 1: violations; 2: the drill itself failed.
pub async fn run(mut args: DriveArgs) -> Result<ExitCode, BoxError> {
    let seed = args.seed.unwrap_or_else(random_seed);
    if args.tuning.put_lifetime_ms.is_none() {
        // The replicas' put_lifetime covers the run's longest put (a large image on a slow
        // link, a put landing late): the runtime's bound must hold for every put it sends.
        let longest = crate::audit::longest_put(&args.tuning, args.large_batch_mib);
        let lifetime = longest.max(crate::protocol::PUT_LIFETIME);
        args.tuning.put_lifetime_ms = Some(lifetime.as_millis() as u64);
    }
    let kinds = if args.faults.is_empty() {
        FaultKind::ALL.to_vec()
    } else {
        args.faults.clone()
    };
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    let broken: Vec<&str> = args.breakage.iter().map(|b| b.as_arg()).collect();
    println!(
        "drill: seed={seed} backend={} durability={} seconds={} replicas={} tenants={} clients={}{} \
         faults={} break={} (rerun: --seed {seed})",
        args.backend.as_arg(),
        durability_text(&args),
        args.seconds,
        args.replicas,
        args.tenants,
        args.tenants * args.clients_per_tenant,
        if args.clients == Clients::Addresses {
            " through addresses"
        } else {
            ""
        },
        names.join(","),
        if broken.is_empty() {
            "none".into()
        } else {
            broken.join(",")
        },
    );
    let (run_dir, temp) = match &args.dir {
        Some(dir) => {
            let used = std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some());
            if used {
                return Err(format!("the run directory {} is not empty", dir.display()).into());
            }
            (dir.clone(), None)
        }
        None => {
            let temp = tempfile::Builder::new().prefix("drill-").tempdir()?;
            (temp.path().to_path_buf(), Some(temp))
        }
    };
    std::fs::create_dir_all(run_dir.join("logs"))?;
    std::fs::create_dir_all(run_dir.join("roots"))?;
    let run_name = backend::run_name(seed);
    let stores = backend::open(args.backend, &run_dir, &run_name).await?;
    println!("drill: leases and images in {}", stores.location);
    let history = Arc::new(History::new());
    let template = Spawn {
        exe: std::env::current_exe()?,
        run_dir: run_dir.clone(),
        backend: args.backend,
        run_name,
        name: String::new(),
        root: PathBuf::new(),
        tenants: args.tenants,
        breakage: args.breakage.clone(),
        mode: args.durability,
        async_every_ms: args.async_every_ms,
        slot: None,
        generation: 0,
        tuning: args.tuning.clone(),
        transport: args.clients == Clients::Addresses,
        passivate: kinds.contains(&FaultKind::Passivate),
    };
    let mut cluster = Cluster::new(
        template,
        args.replicas.max(1),
        history.clone(),
        stores.clone(),
    );
    cluster.erasure_bound = args
        .erasure_bound_ms
        .map_or_else(|| args.tuning.erasure_bound(), Duration::from_millis);
    let cluster = Arc::new(cluster);
    let outcome = drive(&cluster, &args, seed, kinds, &stores).await;
    let verdict = match outcome {
        Ok((record, fin)) => judge(&record, &fin, &args, seed, &history),
        Err(e) => {
            println!("drill: the drill itself failed: {e}");
            2
        }
    };
    for i in 0..cluster.slots.len() {
        cluster.kill(i).await;
    }
    let keep = args.keep || verdict != 0;
    if let Some(temp) = temp {
        if keep {
            let kept = temp.keep();
            println!("drill: run directory kept: {}", kept.display());
        }
    } else {
        println!("drill: run directory: {}", run_dir.display());
    }
    if verdict != 0 {
        let dump = run_dir.join("history.txt");
        if std::fs::write(&dump, dump_history(&history.snapshot())).is_ok() {
            println!("drill: full history in {}", dump.display());
        }
    }
    Ok(ExitCode::from(verdict))
}

/// Starts the replicas, runs the load and the faults until the end, then the finale.
async fn drive(
    cluster: &Arc<Cluster>,
    args: &DriveArgs,
    seed: u64,
    kinds: Vec<FaultKind>,
    stores: &Stores,
) -> Result<(Record, Final), BoxError> {
    let h = &cluster.history;
    let starts = (0..cluster.slots.len()).map(|i| cluster.start(i));
    for started in futures::future::join_all(starts).await {
        started?;
    }
    println!(
        "[{:6.1}s] {} replicas ready under {}",
        h.elapsed(now_ms()),
        cluster.slots.len(),
        cluster.run_dir().display()
    );
    let end_ms = now_ms() + args.seconds * 1_000;
    let stop_watching = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = tokio::spawn(watcher::run(
        stores.clone(),
        cluster.history.clone(),
        args.tenants,
        // `image-overdue` counts an image's upload at the runtime's assumed rate (8 MiB/s);
        // behind a throttled link, shared by every transfer of a replica, a store is slower
        // than that, which the runtime treats as a store not answering: not judged then.
        args.tuning
            .store_mib_per_sec
            .is_none()
            .then(|| args.tuning.compact_segments()),
        cluster.run_dir().join("watcher"),
        stop_watching.clone(),
    ));
    let restores = (args.pitr_targets > 0 && args.durability != Mode::Images).then(|| {
        tokio::spawn(crate::pitr::during_run(
            stores.clone(),
            cluster.history.clone(),
            args.tenants,
            args.tuning.retain(),
            cluster.run_dir().join("pitr-during"),
            stop_watching.clone(),
        ))
    });
    let mut tasks = Vec::new();
    for tenant in 0..args.tenants {
        for client in 0..args.clients_per_tenant {
            let c = cluster.clone();
            tasks.push(match args.clients {
                Clients::Owners => tokio::spawn(clients::run(c, tenant, client, seed, end_ms)),
                Clients::Addresses => {
                    tokio::spawn(clients::run_addresses(c, tenant, client, seed, end_ms))
                }
            });
        }
    }
    if args.large_batch_mib > 0 && args.tenants > 0 {
        tasks.push(tokio::spawn(clients::run_large(
            cluster.clone(),
            0,
            args.large_batch_mib,
            Duration::from_millis(args.large_batch_every_ms),
            seed,
            end_ms,
        )));
    }
    tasks.push(tokio::spawn(faults::run(
        cluster.clone(),
        kinds,
        seed,
        end_ms,
    )));
    tasks.push(tokio::spawn(progress(cluster.clone(), end_ms)));
    for task in tasks {
        task.await?;
    }
    let counts = h.counts();
    println!(
        "[{:6.1}s] load stopped: {} acked, {} refused, {} unknown; final check",
        h.elapsed(now_ms()),
        counts.ok,
        counts.failed,
        counts.unknown
    );
    let plan = crate::audit::Plan {
        tuning: args.tuning.clone(),
        mode: args.durability,
        pitr_targets: args.pitr_targets,
        large_batch_mib: args.large_batch_mib,
        seed,
    };
    let fin = finale::collect(cluster, stores, &plan).await;
    stop_watching.store(true, std::sync::atomic::Ordering::SeqCst);
    watcher.await?;
    if let Some(restores) = restores {
        restores.await?;
    }
    Ok((h.snapshot(), fin?))
}

/// Prints a progress line every five seconds until `end_ms`.
async fn progress(cluster: Arc<Cluster>, end_ms: u64) {
    let h = &cluster.history;
    while now_ms() + 5_000 < end_ms {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let c = h.counts();
        println!(
            "[{:6.1}s] {} acked, {} refused, {} unknown, {} tenures, {} faults",
            h.elapsed(now_ms()),
            c.ok,
            c.failed,
            c.unknown,
            c.tenures,
            c.faults
        );
    }
}

/// The durability mode as printed: `shipped`, `async/<every>ms`, `images`.
fn durability_text(args: &DriveArgs) -> String {
    match args.durability {
        Mode::Async => format!("async/{}ms", args.async_every_ms),
        mode => mode.as_arg().to_string(),
    }
}

/// Runs the checker, prints violations and the summary line; returns the exit code.
fn judge(record: &Record, fin: &Final, args: &DriveArgs, seed: u64, history: &History) -> u8 {
    let tolerance = Tolerance {
        stale_local_copy: args.tolerate.contains(&KnownGap::StaleLocalCopy),
        fail_on_leak: args.fail_on_leak,
    };
    let rules = LossRules::of(args.durability, args.async_every_ms);
    let mut report = checker::evaluate(record, fin, tolerance, rules, args.tuning.retain());
    let known = crate::gaps::tolerate(&mut report.violations, &args.tolerate);
    report.tolerated.extend(known);
    let mut shown: std::collections::HashMap<&str, usize> = Default::default();
    for v in &report.violations {
        let n = shown.entry(v.rule).or_default();
        *n += 1;
        if *n <= 3 {
            println!("VIOLATION {}: {}", v.rule, v.detail);
            for line in excerpt(record, v, history) {
                println!("    {line}");
            }
        }
    }
    for (rule, n) in &shown {
        if *n > 3 {
            println!("VIOLATION {rule}: … and {} more", n - 3);
        }
    }
    let mut tolerated: std::collections::BTreeMap<&str, usize> = Default::default();
    for v in &report.tolerated {
        let n = tolerated.entry(v.rule).or_default();
        *n += 1;
        if *n <= 3 {
            println!("TOLERATED {} (known gap): {}", v.rule, v.detail);
        }
    }
    for (rule, n) in tolerated.iter().filter(|&(_, &n)| n > 3) {
        println!("TOLERATED {rule}: … and {} more", n - 3);
    }
    for v in &report.leaks_reported {
        println!(
            "LEAK (reported only; --fail-on-leak fails the run): {}",
            v.detail
        );
    }
    let problems: Vec<&String> = record.problems.iter().chain(&fin.problems).collect();
    for problem in &problems {
        println!("PROBLEM {problem}");
    }
    let e = &report.endings;
    println!(
        "drill: {} tenures ({} handed off, {} forgotten, {} lost, {} crashed), {} images, \
         {} zombie writes acknowledged, {} handoffs and closes asked ({} did not flush, each \
         explained by a fault), {} replica processes closed ({} leaking)",
        e.tenures,
        e.handed_off,
        e.forgotten,
        e.lost,
        e.crashed,
        e.images,
        report.zombie_acked,
        record.graceful_asked,
        report.graceful_explained,
        report.closed_replicas,
        report.leaks,
    );
    if args.clients == Clients::Addresses {
        print_addresses(record, &report);
    }
    print_summary(&report, record, args, seed, history);
    if !report.violations.is_empty() {
        1
    } else if !problems.is_empty() {
        2
    } else {
        0
    }
}

/// What the address clients did: how many acknowledged notes ran elsewhere than the replica
/// they were sent to (forwarded), how many queries found their note.
fn print_addresses(record: &Record, report: &Report) {
    let a = &record.addresses;
    let forwarded = record
        .writes
        .iter()
        .filter(|w| {
            a.ran_on
                .get(&w.req)
                .is_some_and(|ran| w.replica.split('#').next() != Some(ran.as_str()))
        })
        .count();
    let found = a.queries.iter().filter(|q| q.note.is_some()).count();
    println!(
        "drill addresses: {} notes acknowledged, {forwarded} of them ran on another replica than \
         the one they were sent to; {} queries answered ({found} found their note); {} forgets \
         returned; {} queries found nothing of a note lost within the tail",
        a.ran_on.len(),
        a.queries.len(),
        a.forgets.len(),
        report.queries_missed_lost
    );
}

fn print_summary(report: &Report, record: &Record, args: &DriveArgs, seed: u64, h: &History) {
    let faults: Vec<String> = FaultKind::ALL
        .iter()
        .chain(&FaultKind::OPT_IN)
        .map(|k| format!("{}={}", k.name(), record.faults.get(k.name()).unwrap_or(&0)))
        .collect();
    let mut rules: Vec<&str> = report.violations.iter().map(|v| v.rule).collect();
    rules.sort_unstable();
    rules.dedup();
    println!(
        "drill summary: seed={seed} durability={} seconds={} faults[{}] acked={} large_acked={} \
         refused={} unknown={} forgotten={} lost_within_tail={} lost_otherwise={} tail_max_ms={} \
         tail_bound_ms={} images_read={} tips_read={} graceful={} closed={} leaks={} \
         ended={} ended_asked={} ended_by_fault={} ended_passivated={} pitr_checked={} pitr_outside={} \
         damage_caught={} durable_objects={} image_bytes={} violations={}{} tolerated={} \
         elapsed={:.1}s",
        durability_text(args),
        args.seconds,
        faults.join(" "),
        report.acked,
        report.large_acked,
        report.refused,
        report.unknown,
        report.forgotten,
        report.lost_within_tail,
        report.lost_otherwise,
        report.max_tail_ms,
        report.tail_bound_ms,
        record.images_read,
        record.tips_read,
        record.graceful_asked,
        report.closed_replicas,
        report.leaks,
        report.ends.ended,
        report.ends.asked,
        report.ends.faulted,
        report.ends.passivated,
        report.pitr.checked,
        report.pitr.outside,
        record.audit.damage_caught,
        report.held.objects,
        report.held.image_bytes,
        report.violations.len(),
        if rules.is_empty() {
            String::new()
        } else {
            format!(" ({})", rules.join(","))
        },
        report.tolerated.len(),
        h.elapsed(now_ms()),
    );
}

/// The timeline around a violation: its tenant's lifecycle lines and the faults.
fn excerpt(record: &Record, v: &Violation, h: &History) -> Vec<String> {
    let lo = v.at.saturating_sub(8_000);
    let hi = v.at.saturating_add(3_000);
    let lines: Vec<String> = record
        .timeline
        .iter()
        .filter(|n| v.at == 0 || (lo..=hi).contains(&n.at))
        .filter(|n| n.tenant.is_none() || n.tenant == v.tenant)
        .map(|n| {
            let who = n.tenant.map_or(String::new(), |t| format!("t{t} "));
            format!("[{:6.1}s] {who}{}", h.elapsed(n.at), n.text)
        })
        .collect();
    let skip = lines.len().saturating_sub(12);
    lines.into_iter().skip(skip).collect()
}

fn dump_history(record: &Record) -> String {
    let mut out = String::new();
    out.push_str("# timeline\n");
    for n in &record.timeline {
        out.push_str(&format!("{} {:?} {}\n", n.at, n.tenant, n.text));
    }
    out.push_str("# tenures\n");
    for ((tenant, epoch), t) in &record.tenures {
        out.push_str(&format!("t{tenant} e{epoch} {t:?}\n"));
    }
    out.push_str("# damaged segments\n");
    for d in &record.damages {
        out.push_str(&format!(
            "t{} {} {} {:?} at {} repaired {:?}\n",
            d.tenant, d.key, d.pos, d.kind, d.at, d.repaired_at
        ));
    }
    out.push_str("# writes\n");
    for w in &record.writes {
        out.push_str(&format!(
            "{} t{} {} {} req={} done={:?} zombie={} {:?}\n",
            w.invoke_ms, w.tenant, w.key, w.replica, w.req, w.done_ms, w.zombie, w.outcome
        ));
    }
    out
}
