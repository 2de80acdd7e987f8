//! The end audit, in the order the finale runs it (docs/testing.md, the process drill):
//!
//! ```text
//!  faults cleared ─> settle: wait past the longest put deadline (and a late put's delay), so
//!                    every put that may still land has landed while its process lives
//!  erasure       ─> before anything reopens a tenant: nothing at or below any floor
//!                    (forgotten-object-left, "at the end")
//!  … replicas closed, a fresh replica opens and reads every tenant …
//!  compaction    ─> the fresh replica takes an image of each tenant; retention runs after it
//!                    (its `swept` line); then the stores are listed: storage rules
//!                    (`crate::storage`) judge each tenant against that last retention
//!  restores      ─> point-in-time restores at the end (`crate::pitr`), the final tip included
//! ```
//!
//! Everything here reads the stores through the traits, behind no fault, on either backend.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use leasehold::LeaseStore;
use leasehold::durable::DurableStore;
use leasehold::image::parse_manifest;
use leasehold::layout::{epoch_of, manifest_of};

use crate::backend::Stores;
use crate::cluster::{Cluster, Proc};
use crate::pitr::{self, PitrRun, PitrTarget};
use crate::protocol::{self, Answer, Mode, Op, STORE_DEADLINE, now_ms};
use crate::rng::Rng;
use crate::storage::TenantStore;
use crate::tuning::Tuning;

/// How late a `late` put lands (`crate::opt_in`'s `forget-late-put`, `crate::late_puts`).
pub const LATE_PUT: Duration = Duration::from_millis(1_600);

/// What the end audit is told about the run.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Retention, compaction and slow backends.
    pub tuning: Tuning,
    /// The replicas' durability.
    pub mode: Mode,
    /// Point-in-time restores per tenant at the end (0: none).
    pub pitr_targets: usize,
    /// The large-batch client's blob, in MiB (0: none).
    pub large_batch_mib: u32,
    /// The run's seed (which targets are chosen).
    pub seed: u64,
}

impl Plan {
    /// The longest a put of this run may still land after its caller gave up: the deadline of
    /// its largest object (an image of three blobs, or 1 MiB) on the run's link, or a late
    /// put's delay, and half a store deadline more.
    pub fn settle(&self) -> Duration {
        longest_put(&self.tuning, self.large_batch_mib)
    }
}

/// The longest a put of a run may still land after its caller gave up: the deadline of its
/// largest object (an image of three blobs of `large_batch_mib`, or 1 MiB) on the run's link,
/// or a late put's delay, and half a store deadline more.
pub fn longest_put(tuning: &Tuning, large_batch_mib: u32) -> Duration {
    let largest = (3 * large_batch_mib as usize).max(1) << 20;
    tuning.put_allowance(largest).max(LATE_PUT) + STORE_DEADLINE / 2
}

/// Lists every tenant with a floor before any reopen, and flags what is left at or below it.
pub async fn erasure_before_reopen(c: &Cluster, stores: &Stores) {
    for tenant in 0..c.tenants {
        let Ok(key) = protocol::lease_key(tenant) else {
            continue;
        };
        let floor = match stores.leases.read(&key).await {
            Ok(Some(record)) if record.floor > 0 => record.floor,
            _ => continue,
        };
        let Ok(objects) = stores.durable.list(&key.prefix()).await else {
            c.history
                .note(Some(tenant), "end audit: listing failed".to_string());
            continue;
        };
        let dead: Vec<&String> = objects
            .iter()
            .filter(|o| epoch_of(&key, o).is_some_and(|e| e <= floor))
            .collect();
        if !dead.is_empty() {
            c.history.flag(
                "forgotten-object-left",
                Some(tenant),
                format!(
                    "at the end, past every put's deadline and before any reopen, t{tenant} \
                     (floor {floor}) keeps {} objects at or below the floor {}: {:?}",
                    dead.len(),
                    crate::gaps::leftover_tag(&dead),
                    dead.iter().take(4).collect::<Vec<_>>()
                ),
            );
        }
    }
}

/// Has the fresh replica take an image of each of `tenants` (all at once) and waits (at most
/// ten seconds) for the retention that follows each; returns the tenants whose retention ran.
pub async fn compact_all(c: &Cluster, checker: &Proc, tenants: &[u32]) -> HashSet<u32> {
    let each = tenants.iter().map(|&t| compact(c, checker, t));
    futures::future::join_all(each)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// One tenant of [`compact_all`]: `Some(tenant)` when a retention ran after its new image.
async fn compact(c: &Cluster, checker: &Proc, tenant: u32) -> Option<u32> {
    let before = c.history.sweeps_of(&checker.label, tenant);
    let published = c.history.published_by(&checker.label, tenant);
    let answer = checker
        .call(Op::Snapshot { tenant }, Duration::from_secs(30))
        .await;
    if !matches!(answer, Ok(Answer::Done { .. })) {
        c.history.note(
            Some(tenant),
            format!("end audit: the fresh replica's image failed: {answer:?}"),
        );
        return None;
    }
    // Nothing new since the head: no image, so no retention after it.
    let give_up = now_ms() + 1_000;
    while c.history.published_by(&checker.label, tenant) == published && now_ms() < give_up {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if c.history.published_by(&checker.label, tenant) == published {
        return None;
    }
    // A retention ends after the image (its own, or one already under way, which its own
    // follows; stopping at that one is what `crate::storage::RETENTION_SLACK_MS` covers); then
    // none for a while.
    let give_up = now_ms() + 10_000;
    let mut last = before;
    let mut quiet_since = None;
    while now_ms() < give_up {
        let now = c.history.sweeps_of(&checker.label, tenant);
        if now != last {
            (last, quiet_since) = (now, Some(now_ms()));
        }
        if quiet_since.is_some_and(|at| now_ms() > at + 300) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (last.0 > before.0 && last.1).then_some(tenant)
}

/// What the stores hold of every tenant: record, listing, manifests.
pub async fn storage(
    stores: &Stores,
    tenants: u32,
    retention_ran: &HashSet<u32>,
) -> HashMap<u32, TenantStore> {
    let mut out = HashMap::new();
    for tenant in 0..tenants {
        let Ok(key) = protocol::lease_key(tenant) else {
            continue;
        };
        let (Ok(record), Ok(objects)) = (
            stores.leases.read(&key).await,
            stores.durable.list(&key.prefix()).await,
        ) else {
            continue;
        };
        let floor = record.as_ref().map_or(0, |r| r.floor);
        let mut manifests = Vec::new();
        for object in &objects {
            let Some((epoch, seq)) = manifest_of(&key, object).filter(|&(e, _)| e > floor) else {
                continue;
            };
            if let Ok(Some(bytes)) = stores.durable.get(object).await
                && let Ok(m) = parse_manifest(&bytes, &key, epoch, seq)
            {
                manifests.push(m);
            }
        }
        out.insert(
            tenant,
            TenantStore {
                record,
                objects,
                manifests,
                retention_ran: retention_ran.contains(&tenant),
            },
        );
    }
    out
}

/// Point-in-time restores of every tenant read at the end: the final tip and up to `n` tips
/// the watcher read (and their times).
pub async fn restores_at_end(
    c: &Cluster,
    stores: &Stores,
    readable: &[u32],
    plan: &Plan,
) -> Vec<PitrRun> {
    let mut runs = Vec::new();
    if plan.pitr_targets == 0 || plan.mode == Mode::Images {
        return runs;
    }
    let scratch = c.run_dir().join("pitr");
    if std::fs::create_dir_all(&scratch).is_err() {
        return runs;
    }
    let retain = plan.tuning.retain();
    let mut rng = Rng::new(plan.seed ^ 0x0e2d_a0d1);
    let mut work = Vec::new();
    for &tenant in readable {
        let Ok(key) = protocol::lease_key(tenant) else {
            continue;
        };
        let Ok(Some(record)) = stores.leases.read(&key).await else {
            continue;
        };
        let Some(tip) = record.tip else {
            continue;
        };
        let seen = c.history.tips_seen_of(tenant);
        let mut targets = vec![PitrTarget::FinalTip(tip)];
        targets.extend(pitr::targets(
            &seen,
            record.floor,
            record.tip,
            plan.pitr_targets,
            retain,
            &mut rng,
        ));
        let scratch = scratch.clone();
        // The tenants' restores run side by side, each tenant's one after another.
        work.push(async move {
            let mut runs = Vec::new();
            for target in targets {
                let run = pitr::restore_keys(
                    stores,
                    tenant,
                    record.tip,
                    record.floor,
                    target,
                    &scratch,
                    retain,
                )
                .await;
                runs.push(run);
            }
            runs
        });
    }
    runs.extend(futures::future::join_all(work).await.into_iter().flatten());
    runs
}

/// After a forget of `tenant` asked of slot `forgetter`: lists the erasure right after it
/// returned and once the erasure bound passed. A forget of unknown outcome (`LEASEHOLD_STORE`,
/// no answer) whose floor did rise (the lease store says so) is held to the same bound, from
/// when it answered: an erasure that timed out must still be finished.
pub async fn after_forget(
    c: &Arc<Cluster>,
    tenant: u32,
    forgetter: usize,
    answer: &Result<Answer, crate::history::CallError>,
) {
    let floor = match answer {
        Ok(Answer::Done { epoch: Some(floor) }) => {
            check_erasure(
                c,
                tenant,
                *floor,
                forgetter,
                "right after the forget returned",
            )
            .await;
            *floor
        }
        Ok(Answer::Done { .. }) | Ok(Answer::Failed { .. }) | Err(_) => {
            let key = match protocol::lease_key(tenant) {
                Ok(key) => key,
                Err(_) => return,
            };
            let raised = c.stores.leases.read(&key).await.ok().flatten();
            match (
                raised,
                c.history.forget_epoch(tenant, &c.slots[forgetter].name),
            ) {
                (Some(record), Some(epoch)) if record.floor >= epoch => record.floor,
                _ => return,
            }
        }
        Ok(_) => return,
    };
    // From now on nothing of the epochs at or below the floor may answer a message.
    c.history.forgot(tenant, floor);
    let (c, delay) = (c.clone(), c.erasure_bound);
    tokio::spawn(async move {
        // A put that outlived its deadline may land late, an erasure may have timed out
        // (docs/guarantees.md, promise 5): list again once the erasure bound passed.
        tokio::time::sleep(delay).await;
        let when = format!(
            "{} ms after the forget (the erasure bound)",
            delay.as_millis()
        );
        check_erasure(&c, tenant, floor, forgetter, &when).await;
    });
}

/// Lists what is left of `tenant` at or below `floor` right now: its durable objects, and its
/// directory in the state root of `forgetter` (the replica whose forget returned). Every
/// leftover is flagged, before any later open's sweep can remove it.
pub async fn check_erasure(c: &Cluster, tenant: u32, floor: u64, forgetter: usize, when: &str) {
    let (Ok(key), Ok(org), Ok(id)) = (
        protocol::lease_key(tenant),
        protocol::org(),
        protocol::tenant_id(tenant),
    ) else {
        return;
    };
    match c.stores.durable.list(&key.prefix()).await {
        Ok(objects) => {
            let dead: Vec<&String> = objects
                .iter()
                .filter(|o| leasehold::layout::epoch_of(&key, o).is_some_and(|e| e <= floor))
                .collect();
            if !dead.is_empty() {
                c.history.flag(
                    "forgotten-object-left",
                    Some(tenant),
                    format!(
                        "{when}, t{tenant} (floor {floor}) keeps {} objects at or below the \
                         floor {}: {:?}",
                        dead.len(),
                        crate::gaps::leftover_tag(&dead),
                        dead.iter().take(4).collect::<Vec<_>>()
                    ),
                );
            }
        }
        Err(e) => c.history.note(
            Some(tenant),
            format!("erasure check {when}: list failed: {e}"),
        ),
    }
    if when.starts_with("right after") {
        let dir = leasehold::ids::tenant_root(&c.slots[forgetter].root, &org, &id);
        // The forgotten tenure's files (its marker at or below the floor); a client may have
        // opened the tenant there again since, a tenure above it.
        let marker = leasehold::paths::read_tenure(&c.slots[forgetter].root, &org, &id);
        if matches!(marker, Ok(Some(epoch)) if epoch <= floor) {
            c.history.flag(
                "forgotten-local-file-left",
                Some(tenant),
                format!(
                    "{when}, the forgetting replica {} keeps t{tenant}'s directory {}",
                    c.slots[forgetter].name,
                    dir.display()
                ),
            );
        }
    }
}
