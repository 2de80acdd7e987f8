//! `leasehold sweep`: deletes what lies at or below each tenant's floor (a superseded owner's
//! late uploads, a forget's leftovers) — every tenant of the durable store, also those never
//! opened again, or one — and finishes the pending erasures of forgotten tenants whose forget
//! is at least `--put-lifetime` old (docs/guarantees.md, "the erasure bound"), as any replica's
//! periodic pass does (`leasehold::sweep::finish_erasure`). An erasure not yet due stays pending:
//! clearing it before every put that could still land has landed would let a late put outlive
//! the erasure. `--dry-run` deletes and clears nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use leasehold::LeaseKey;
use leasehold::durable::DurableStore;
use leasehold::lease::{LeaseStore, PendingErasure};
use leasehold::plan::dead_keys;
use leasehold::sweep::{SWEEP_PAGE_KEYS, finish_erasure, sweep_dead_epochs, tenants_of_store};
use serde::Serialize;

use super::{Outcome, entry_of, has_objects, unknown_tenant};
use crate::exit::{Exit, Failure};
use crate::progress::Progress;
use crate::report::ms;
use crate::time::words;

/// The most pending erasures one `erasures_due` call returns (a sweep run finishes at most this
/// many; the next run goes on).
const ERASURES: usize = 10_000;

/// The `--json` document of `sweep`.
#[derive(Debug, Default, Serialize)]
pub struct SweepReport {
    /// Whether nothing was deleted or cleared (`--dry-run`).
    pub dry_run: bool,
    /// Tenants whose objects were looked at.
    pub tenants: usize,
    /// Tenants that had objects at or below their floor.
    pub swept_tenants: usize,
    /// Objects deleted (with `--dry-run`: that would be).
    pub objects: usize,
    /// Keys of the store that are no tenant's (never touched).
    pub foreign_keys: usize,
    /// Pending erasures finished and cleared (with `--dry-run`: that would be).
    pub erasures_cleared: Vec<ErasureDone>,
    /// Pending erasures not yet due, left pending.
    pub erasures_pending: Vec<ErasureLeft>,
    /// Tenants whose sweep or erasure failed (the next run goes on from where this one stopped).
    pub failures: Vec<SweepFailure>,
}

/// A finished erasure.
#[derive(Debug, Serialize)]
pub struct ErasureDone {
    /// The tenant.
    pub key: String,
    /// The floor it swept.
    pub floor: u64,
}

/// An erasure left pending.
#[derive(Debug, Serialize)]
pub struct ErasureLeft {
    /// The tenant.
    pub key: String,
    /// Its floor.
    pub floor: u64,
    /// How long until it is due, by the lease store's clock (`null` when the store cannot tell).
    pub due_in_ms: Option<u64>,
}

/// A failure of one tenant.
#[derive(Debug, Serialize)]
pub struct SweepFailure {
    /// The tenant.
    pub key: String,
    /// What failed.
    pub error: String,
    /// The exit status it stands for.
    #[serde(skip)]
    pub exit: Option<Exit>,
}

/// What `sweep` is asked to do.
#[derive(Debug, Clone)]
pub struct SweepArgs {
    /// One tenant, or every tenant of the durable store.
    pub tenant: Option<LeaseKey>,
    /// Delete and clear nothing.
    pub dry_run: bool,
    /// The replicas' `put_lifetime`.
    pub put_lifetime: Duration,
}

/// Runs the sweep; `progress` shows the tenants done.
pub async fn run(
    leases: &dyn LeaseStore,
    durable: &dyn DurableStore,
    args: &SweepArgs,
) -> Result<Outcome, Failure> {
    let mut report = SweepReport {
        dry_run: args.dry_run,
        ..SweepReport::default()
    };
    let tenants = match &args.tenant {
        Some(key) => {
            if leases.read(key).await?.is_none() && !has_objects(durable, key).await? {
                return Err(unknown_tenant(key));
            }
            vec![key.clone()]
        }
        None => {
            eprintln!("listing the tenants of the durable store");
            let (keys, foreign) = tenants_of_store(durable).await?;
            report.foreign_keys = foreign;
            keys
        }
    };
    let progress = Progress::new("swept", "tenants", tenants.len());
    for (done, key) in tenants.iter().enumerate() {
        report.tenants += 1;
        match sweep_one(leases, durable, key, args.dry_run).await {
            Ok(0) => {}
            Ok(n) => {
                report.swept_tenants += 1;
                report.objects += n;
            }
            Err(e) => report.failures.push(failure(key, e)),
        }
        progress.set(done + 1);
    }
    progress.finish();
    erasures(leases, durable, args, &mut report).await?;
    let exit = report
        .failures
        .first()
        .map_or(Exit::Ok, |f| f.exit.unwrap_or(Exit::Failed));
    let human = human(&report);
    Outcome::new(&report, human, exit)
}

/// Sweeps one tenant at its floor (or counts what would go); how many objects.
async fn sweep_one(
    leases: &dyn LeaseStore,
    durable: &dyn DurableStore,
    key: &LeaseKey,
    dry_run: bool,
) -> Result<usize, Failure> {
    let floor = leases.read(key).await?.map_or(0, |r| r.floor);
    if !dry_run {
        return Ok(sweep_dead_epochs(durable, key, floor).await?);
    }
    if floor == 0 {
        return Ok(0);
    }
    let (mut n, mut after) = (0, None::<String>);
    loop {
        let page = durable
            .list_page(&key.prefix(), after.as_deref(), SWEEP_PAGE_KEYS)
            .await?;
        n += dead_keys(key, &page.keys, floor).len();
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(n),
        }
    }
}

fn failure(key: &LeaseKey, e: Failure) -> SweepFailure {
    SweepFailure {
        key: key.to_string(),
        error: e.message,
        exit: Some(e.exit),
    }
}

/// Finishes the pending erasures that are due (of the one tenant asked for, or all) and lists
/// those that are not.
async fn erasures(
    leases: &dyn LeaseStore,
    durable: &dyn DurableStore,
    args: &SweepArgs,
    report: &mut SweepReport,
) -> Result<(), Failure> {
    let mine = |e: &PendingErasure| args.tenant.as_ref().is_none_or(|k| *k == e.key);
    let due: Vec<PendingErasure> = leases
        .erasures_due(args.put_lifetime, ERASURES)
        .await?
        .into_iter()
        .filter(mine)
        .collect();
    let all: Vec<PendingErasure> = leases
        .erasures_due(Duration::ZERO, ERASURES)
        .await?
        .into_iter()
        .filter(mine)
        .collect();
    let due_keys: BTreeSet<(String, u64)> =
        due.iter().map(|e| (e.key.to_string(), e.floor)).collect();
    for erasure in &due {
        let done = ErasureDone {
            key: erasure.key.to_string(),
            floor: erasure.floor,
        };
        if args.dry_run {
            report.erasures_cleared.push(done);
            continue;
        }
        match finish_erasure(durable, leases, &erasure.key, erasure.floor).await {
            Ok(n) => {
                report.objects += n;
                report.erasures_cleared.push(done);
            }
            Err(e) => report.failures.push(failure(&erasure.key, e.into())),
        }
    }
    for erasure in all {
        if due_keys.contains(&(erasure.key.to_string(), erasure.floor)) {
            continue;
        }
        let age = entry_of(leases, &erasure.key)
            .await?
            .and_then(|e| e.erasure)
            .and_then(|e| e.age);
        report.erasures_pending.push(ErasureLeft {
            key: erasure.key.to_string(),
            floor: erasure.floor,
            due_in_ms: age.map(|age| ms(args.put_lifetime.saturating_sub(age))),
        });
    }
    Ok(())
}

/// The text of a sweep's report.
fn human(r: &SweepReport) -> String {
    let verb = if r.dry_run {
        "would be deleted"
    } else {
        "deleted"
    };
    let mut out = format!(
        "{} tenants looked at, {} swept, {} objects {verb}, {} foreign keys left alone\n",
        r.tenants, r.swept_tenants, r.objects, r.foreign_keys
    );
    let cleared = if r.dry_run {
        "would be finished"
    } else {
        "finished"
    };
    for e in &r.erasures_cleared {
        out.push_str(&format!(
            "erasure of {} at floor {} {cleared}\n",
            e.key, e.floor
        ));
    }
    for e in &r.erasures_pending {
        let when = e.due_in_ms.map_or("later".into(), |ms| {
            format!("in {}", words(Duration::from_millis(ms)))
        });
        out.push_str(&format!(
            "erasure of {} at floor {} is not due yet (due {when}: --put-lifetime after its forget); run sweep again then\n",
            e.key, e.floor
        ));
    }
    for f in &r.failures {
        out.push_str(&format!("FAILED {}: {}\n", f.key, f.error));
    }
    out
}
