//! The end of a run: stop every fault, close the replicas, start a fresh replica that opens
//! every tenant and reads its events, then read the floors from the lease store and list what
//! is left in the durable store and in every state root. What it gathers is [`Final`], which
//! the checker judges against the history. The stores are read through the [`LeaseStore`] and
//! [`DurableStore`] traits, behind no fault, so every backend serves (a lease file and a
//! directory, or PostgreSQL and S3).
//!
//! ```text
//!  SIGCONT the stopped · clear store faults · close every replica (handoffs) · shut them down
//!  fresh "checker" replica: open t0…tn (waiting out leases of the dead) · read · wait for sweeps
//!  lease store: floors · durable store: objects per tenant · state roots: local tenant directories
//! ```

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use leasehold::LeaseStore;
use leasehold::clock::duration_ms;
use leasehold::durable::DurableStore;

use crate::audit::{self, Plan};
use crate::backend::Stores;
use crate::cluster::{BoxError, Cluster, OPEN_TIMEOUT, Proc};
use crate::protocol::{self, Answer, LeaseFault, Mode, Op, StoreFault, now_ms};

/// What is left at the end of a run.
#[derive(Debug, Default)]
pub struct Final {
    /// Every idempotency key the fresh replica read, per tenant.
    pub keys: HashMap<u32, HashSet<String>>,
    /// Tenants the fresh replica could not open or read, with its last answer: their
    /// acknowledged writes are unreachable (`unreadable-at-end`).
    pub unreadable: HashMap<u32, String>,
    /// Each tenant's floor, from the lease store.
    pub floors: HashMap<u32, u64>,
    /// Each tenant's durable objects.
    pub objects: HashMap<u32, Vec<String>>,
    /// Local tenant directories left in the replicas' state roots: `(slot, tenant, files)`.
    pub local_dirs: Vec<(usize, u32, Vec<String>)>,
    /// The tenure marker of each of those directories that has a readable one, by `(slot,
    /// tenant)`: the epoch of the open that wrote its files (only an open creates the directory).
    pub local_markers: HashMap<(usize, u32), u64>,
    /// What could not be gathered (the drill failed, not the runtime).
    pub problems: Vec<String>,
    /// What the stores hold of each tenant after the last retention (`crate::storage`).
    pub storage: HashMap<u32, crate::storage::TenantStore>,
    /// The point-in-time restores of the end (`crate::pitr`).
    pub pitr_runs: Vec<crate::pitr::PitrRun>,
    /// `--clients addresses`: every note the fresh replica read, per tenant (duplicates kept).
    pub notes: HashMap<u32, Vec<protocol::NoteRow>>,
}

/// Stops the faults, closes the replicas, and gathers [`Final`].
pub async fn collect(c: &Arc<Cluster>, stores: &Stores, plan: &Plan) -> Result<Final, BoxError> {
    let h = &c.history;
    for i in 0..c.slots.len() {
        if c.is_stopped(i) {
            c.resume(i).await.ok();
        }
    }
    for i in 0..c.slots.len() {
        if let Some(proc) = c.proc(i) {
            let clear = Op::Fault {
                fault: StoreFault::Clear,
            };
            proc.call(clear, Duration::from_secs(2)).await.ok();
            let clear = Op::Lease {
                fault: LeaseFault::Clear,
            };
            proc.call(clear, Duration::from_secs(2)).await.ok();
            h.unimpair(&proc.label);
        }
    }
    // Every put that may still land lands now, while its process lives, and the replicas'
    // periodic passes finish every erasure (the erasure bound, counted from the last forget,
    // which came before the end); then nothing at or below a floor may be left, before any
    // open sweeps it.
    tokio::time::sleep(plan.settle().max(c.erasure_bound)).await;
    audit::erasure_before_reopen(c, stores).await;
    let closes = (0..c.slots.len()).map(|i| close_slot(c, i));
    for line in futures::future::join_all(closes)
        .await
        .into_iter()
        .flatten()
    {
        println!("[{:6.1}s] {line}", h.elapsed(now_ms()));
    }
    let mut fin = Final::default();
    let spec = c.spec("checker", c.run_dir().join("roots").join("checker"));
    let checker = Proc::spawn(&spec, h.clone()).await?;
    println!(
        "[{:6.1}s] fresh replica {} reads every tenant",
        h.elapsed(now_ms()),
        checker.label
    );
    for tenant in 0..c.tenants {
        match read_tenant(c, &checker, tenant).await {
            Ok(keys) => {
                fin.keys.insert(tenant, keys.into_iter().collect());
                if c.addresses() {
                    match checker
                        .call(Op::ReadNotes { tenant }, Duration::from_secs(20))
                        .await
                    {
                        Ok(Answer::Notes { notes, .. }) => {
                            fin.notes.insert(tenant, notes);
                        }
                        other => fin
                            .problems
                            .push(format!("t{tenant}: the notes could not be read: {other:?}")),
                    }
                }
            }
            Err(e) if checker.is_gone() => fin.problems.push(format!("t{tenant}: {e}")),
            Err(e) => {
                fin.unreadable.insert(tenant, e);
            }
        }
    }
    // The checker holds every tenant from here on: an orphan a killed upload left is deleted
    // once a replica has seen it for `put_lifetime` (docs/guarantees.md), counted from here.
    let opened_at = now_ms();
    for tenant in 0..c.tenants {
        let record = stores.leases.read(&protocol::lease_key(tenant)?).await?;
        fin.floors
            .insert(tenant, record.map_or(0, |record| record.floor));
    }
    let mut readable: Vec<u32> = fin.keys.keys().copied().collect();
    readable.sort_unstable();
    wait_for_sweeps(c, &checker, &fin.floors).await;
    println!(
        "[{:6.1}s] every tenant read; images and retention",
        h.elapsed(now_ms())
    );
    let retention_ran = if plan.mode == Mode::Images {
        Default::default()
    } else {
        audit::compact_all(c, &checker, &readable).await
    };
    wait_for_orphans(stores, c.tenants, opened_at, &plan.tuning).await;
    let closed = checker.call(Op::Close, Duration::from_secs(20)).await;
    crate::faults::judge_close(c, &checker.label, &closed);
    checker.shutdown(Duration::from_secs(5)).await;
    fin.storage = audit::storage(stores, c.tenants, &retention_ran).await;
    println!(
        "[{:6.1}s] stores listed; point-in-time restores",
        h.elapsed(now_ms())
    );
    let started = now_ms();
    fin.pitr_runs = audit::restores_at_end(c, stores, &readable, plan).await;
    println!(
        "[{:6.1}s] end audit done ({} restores in {} ms)",
        h.elapsed(now_ms()),
        fin.pitr_runs.len(),
        now_ms() - started
    );
    list_leftovers(c, stores.durable.as_ref(), &mut fin).await?;
    Ok(fin)
}

/// Closes slot `i`'s replica (hands its tenants off) and shuts it down.
async fn close_slot(c: &Cluster, i: usize) -> Option<String> {
    let proc = c.proc(i)?;
    let closed = proc.call(Op::Close, Duration::from_secs(30)).await;
    crate::faults::judge_close(c, &proc.label, &closed);
    c.shutdown(i, Duration::from_secs(5)).await;
    Some(match closed {
        Ok(Answer::Closed { unflushed }) => {
            format!("{} closed ({} unflushed)", proc.label, unflushed.len())
        }
        other => format!("{} did not close cleanly: {other:?}", proc.label),
    })
}

/// Opens `tenant` on the checker (waiting out a dead holder's lease) and reads its keys.
async fn read_tenant(c: &Cluster, checker: &Proc, tenant: u32) -> Result<Vec<String>, String> {
    let give_up = now_ms() + 3 * duration_ms(protocol::TTL) + 5_000;
    loop {
        let answer = checker.call(Op::Open { tenant }, OPEN_TIMEOUT).await;
        if let Ok(Answer::Opened {
            epoch, acquired_hi, ..
        }) = answer
        {
            c.history
                .grant(tenant, epoch, &checker.label, None, acquired_hi);
            break;
        }
        if now_ms() > give_up {
            return Err(format!("the checker could not open it: {answer:?}"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    match checker
        .call(Op::Read { tenant }, Duration::from_secs(20))
        .await
    {
        Ok(Answer::Keys { keys, .. }) => Ok(keys),
        other => Err(format!("the checker could not read it: {other:?}")),
    }
}

/// Waits (at most ten seconds) until the checker swept every tenant with a floor.
async fn wait_for_sweeps(c: &Cluster, checker: &Proc, floors: &HashMap<u32, u64>) {
    let give_up = now_ms() + 10_000;
    while now_ms() < give_up {
        let waiting = floors
            .iter()
            .filter(|&(&t, &floor)| floor > 0 && !c.history.swept(&checker.label, t))
            .count();
        if waiting == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("warning: the checker's sweeps did not all finish within 10 s");
}

/// While some tenant holds an image without its manifest or a manifest without its image (an
/// upload killed mid-way), keeps the checker up until its replica had the time the promise
/// gives it: the first reconciliation pass after the open notes the orphan, a pass
/// `put_lifetime` later deletes it — `put_lifetime` + 2 × `reconcile_every` + 1 s from
/// `opened_at`. The `orphan-object` rule judges what is left then; a run without such objects
/// waits for nothing.
async fn wait_for_orphans(
    stores: &Stores,
    tenants: u32,
    opened_at: u64,
    tuning: &crate::tuning::Tuning,
) {
    let allowed = tuning.put_lifetime() + 2 * protocol::RECONCILE_EVERY + Duration::from_secs(1);
    let give_up = opened_at + duration_ms(allowed);
    while now_ms() < give_up && lone_image_halves(stores, tenants).await > 0 {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// How many images lack their manifest, or manifests their image, above each tenant's floor.
async fn lone_image_halves(stores: &Stores, tenants: u32) -> usize {
    let mut lone = 0;
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
        let floor = record.map_or(0, |r| r.floor);
        let of = |suffix: &str| -> HashSet<&str> {
            objects
                .iter()
                .filter(|o| {
                    o.ends_with(suffix)
                        && leasehold::layout::epoch_of(&key, o).is_some_and(|e| e > floor)
                })
                .filter_map(|o| o.strip_suffix(suffix))
                .collect()
        };
        let (images, manifests) = (of(".db"), of(".json"));
        lone += images.symmetric_difference(&manifests).count();
    }
    lone
}

/// Lists every tenant's durable objects and the local tenant directories of every slot.
async fn list_leftovers(
    c: &Cluster,
    store: &dyn DurableStore,
    fin: &mut Final,
) -> Result<(), BoxError> {
    let org = protocol::org()?;
    for tenant in 0..c.tenants {
        let key = protocol::lease_key(tenant)?;
        fin.objects.insert(tenant, store.list(&key.prefix()).await?);
        let id = protocol::tenant_id(tenant)?;
        for slot in &c.slots {
            let dir = leasehold::ids::tenant_root(&slot.root, &org, &id);
            if let Ok(entries) = std::fs::read_dir(&dir) {
                let files = entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                fin.local_dirs.push((slot.index, tenant, files));
                if let Ok(Some(epoch)) = leasehold::paths::read_tenure(&slot.root, &org, &id) {
                    fin.local_markers.insert((slot.index, tenant), epoch);
                }
            }
        }
    }
    Ok(())
}
