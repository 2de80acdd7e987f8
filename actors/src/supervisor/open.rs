//! Opening a tenant: acquire the lease, restore exactly the head read in that same operation,
//! open the ledger, start the tenant actor on an arbiter, join the renewal chain, and sweep dead
//! epochs beside the open (never in it).

use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use actix::prelude::*;
use leasehold::lease::{LeaseRecord, LeaseTerm};
use leasehold::ledger::Ledger;
use leasehold::sweep::sweep_dead_epochs;
use leasehold::{Error, LeaseKey, paths};
use tracing::Instrument;

use super::SupervisorActor;
use crate::events::Event;
use crate::lease_actor::{LeaseActor, LeaseCell, Register};
use crate::runtime::Runtime;
use crate::tenant::log::{LogShip, LogStart};
use crate::tenant::publish::{Inherited, Publisher};
use crate::tenant::{Bound, TenantActor, TenantParts, TenantRef};

/// What an open needs from the supervisor.
pub(super) struct OpenPlan {
    /// The shared runtime.
    pub(super) rt: Arc<Runtime>,
    /// The tenant to open.
    pub(super) key: LeaseKey,
    /// The arbiter the tenant actor will live on.
    pub(super) arbiter: ArbiterHandle,
    /// The renewal chain.
    pub(super) lease_actor: Addr<LeaseActor>,
    /// The supervisor itself.
    pub(super) supervisor: Addr<SupervisorActor>,
    /// The acquire attempt id: an earlier open of this key whose acquire's outcome stayed
    /// unknown passes its own on, so that its late landing is recognised, not a lock-out.
    pub(super) attempt: u64,
}

/// Runs a blocking step on the blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Closed(format!("blocking task failed: {e}")))?
}

/// Opens the tenant of `plan` (in a span `open` with its `key` and, once acquired, `epoch`).
/// On any failure after the acquire, the lease is released.
pub(super) async fn open_tenant(plan: OpenPlan) -> Result<TenantRef, Error> {
    let span = tracing::info_span!("open", key = %plan.key, epoch = tracing::field::Empty);
    let started = Instant::now();
    let opened = open_in_span(plan).instrument(span).await;
    if opened.is_ok() {
        crate::metrics::opened(started.elapsed());
    }
    opened
}

async fn open_in_span(plan: OpenPlan) -> Result<TenantRef, Error> {
    let rt = plan.rt.clone();
    let (record, sent_at) = acquire(&rt, &plan.key, plan.attempt).await?;
    tracing::Span::current().record("epoch", record.epoch);
    let term = LeaseTerm {
        sent_at_ms: sent_at,
        ttl: rt.ttl,
        margin: rt.margin,
    };
    let cell = Arc::new(LeaseCell::new(plan.key.clone(), record.epoch, term));
    match start(&plan, &record, cell.clone()).await {
        Ok(tenant) => {
            if record.floor > 0 {
                sweep_beside(rt.clone(), plan.key.clone(), record.floor);
            }
            Ok(tenant)
        }
        Err(error) => {
            cell.end();
            // A directory this failed open made and wrote nothing into goes: no empty trace of
            // a tenant that may be forgotten elsewhere (promise 5 in docs/guarantees.md).
            let (root, org, tenant) = (
                rt.state_root.clone(),
                plan.key.org().clone(),
                plan.key.tenant().clone(),
            );
            let _ = blocking(move || {
                paths::remove_empty_tenant_dir(&root, &org, &tenant)?;
                Ok(())
            })
            .await;
            let _ = rt
                .leases
                .release(&plan.key, rt.replica.as_str(), record.epoch)
                .await;
            Err(error)
        }
    }
}

/// How many times an open asks again after an acquire of unknown outcome (a timeout).
const ACQUIRE_RETRIES: u32 = 2;

/// Acquires the lease of `key` under one attempt id: an acquire that timed out but landed is
/// recognised by its retry instead of locking this replica out for a `ttl` (hole 9 in
/// docs/testing.md; "Late landings" in docs/guarantees.md). Returns the record and when the
/// call that succeeded was sent, which the holder counts its lease from.
async fn acquire(rt: &Runtime, key: &LeaseKey, attempt: u64) -> Result<(LeaseRecord, u64), Error> {
    let mut tries = 0;
    loop {
        let sent_at = rt.now_ms();
        match rt
            .leases
            .acquire_attempt(key, rt.replica.as_str(), rt.ttl, attempt)
            .await
        {
            Ok(record) => return Ok((record, sent_at)),
            Err(e) if e.outcome_unknown() && tries < ACQUIRE_RETRIES => tries += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The holder's term of a lease, in milliseconds: `ttl − margin`.
fn term_ms(rt: &Runtime) -> u64 {
    leasehold::clock::duration_ms(rt.ttl.saturating_sub(rt.margin))
}

/// Whether an open still restoring (or about to serve) should renew its lease: less than half
/// the term is left by the holder's clock.
fn renewal_due(valid_until_ms: u64, now_ms: u64, term_ms: u64) -> bool {
    valid_until_ms.saturating_sub(now_ms) < term_ms / 2
}

/// How often an open still restoring looks at its term (real time; the judgment is on the
/// runtime's clock).
fn term_poll(rt: &Runtime) -> Duration {
    (rt.ttl.saturating_sub(rt.margin) / 8)
        .clamp(Duration::from_millis(10), Duration::from_millis(250))
}

/// Runs `work` (a restore's fetch from the durable store) while keeping the acquired lease's
/// term: whenever less than half of it is left, renews; a renewal the store refuses, or the
/// term running out by the holder's clock, ends the open `Fenced` (a lapsed term is never
/// revived: M42). Without it a restore longer than the term — a large tenant on a slow link —
/// was fenced at every open, and the tenant never opened again (hole 1's class,
/// docs/guarantees.md "Limits").
async fn keeping_the_term<T>(
    rt: &Runtime,
    key: &LeaseKey,
    epoch: u64,
    cell: &LeaseCell,
    work: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let fenced = || Error::Fenced {
        key: key.to_string(),
    };
    let renewals = async {
        loop {
            tokio::time::sleep(term_poll(rt)).await;
            let now = rt.now_ms();
            if !cell.holds(now) {
                return fenced();
            }
            if !renewal_due(cell.valid_until_ms(), now, term_ms(rt)) {
                continue;
            }
            match rt
                .leases
                .renew(key, rt.replica.as_str(), epoch, rt.ttl)
                .await
            {
                Ok(_) => {
                    cell.extend(now);
                    tracing::debug!(key = %key, epoch, "renewed while restoring");
                }
                // The term from the last renewal still counts; the next poll asks again.
                Err(e) if e.outcome_unknown() => {}
                Err(e) => return Error::from(e),
            }
        }
    };
    tokio::select! {
        done = work => done,
        ended = renewals => Err(ended),
    }
}

/// Restores, opens and starts the tenant of an acquired lease.
async fn start(
    plan: &OpenPlan,
    record: &LeaseRecord,
    cell: Arc<LeaseCell>,
) -> Result<TenantRef, Error> {
    let rt = &plan.rt;
    let (org, tenant) = (plan.key.org().clone(), plan.key.tenant().clone());
    let root = rt.state_root.clone();
    let dir = blocking(move || {
        let dir = paths::ensure_tenant_dir(&root, &org, &tenant)?;
        // Images an interrupted upload left behind are never needed again.
        paths::remove_scratch_files(&dir)?;
        Ok(dir)
    })
    .await?;
    let db_path = dir.join(paths::LEDGER_FILE);
    // The durable head and log are the authority: a local file left by an abandoned tenure is
    // replaced, never recovered (L2). Exactly the head and tip read by the acquire are fetched
    // (and checked) before anything local is touched.
    let fetch = leasehold::log::fetch_log(
        rt.durable.as_ref(),
        &plan.key,
        record.head.as_ref(),
        record.tip,
        record.floor,
    );
    let fetched = keeping_the_term(rt, &plan.key, record.epoch, &cell, async {
        fetch.await.map_err(Error::from)
    })
    .await?;
    let inherited = inherited(&fetched);
    let (tenure_dir, epoch, path) = (dir.clone(), record.epoch, db_path.clone());
    let restored = blocking(move || {
        // The files belong to this tenure from now on: a forget that raises the floor past it
        // makes them dead (see `local_copy_is_dead`). Marked first, so that no crash can leave
        // a ledger here that no marker names.
        paths::write_tenure(&tenure_dir, epoch)?;
        Ok(fetched.install(&path)?)
    })
    .await?;
    let head = restored.image.clone();
    let (path, options, sums) = (db_path.clone(), rt.ledger.clone(), restored.sums.clone());
    let logged = rt.durability.logged();
    // Every committed batch must fit one segment: a run may take half of it (a batch closes
    // once it reaches half), measured before COMMIT (docs/guarantees.md, "Limits").
    let run_limit = rt.segment_limit / 2;
    let ledger = blocking(move || {
        Ok(if logged {
            let mut ledger = Ledger::open_logged(&path, &options, &sums)?;
            ledger.limit_runs(run_limit);
            ledger
        } else {
            Ledger::open(&path, &options)?
        })
    })
    .await?;
    // A restore of a long log may have taken much of the term: if it took more than half,
    // renew once before serving, so the tenant is not handed out with almost no term left.
    // A restore that outlived the term is fenced (M42), never revived by a renewal.
    let sent_at = rt.now_ms();
    if cell.holds(sent_at) && renewal_due(cell.valid_until_ms(), sent_at, term_ms(rt)) {
        match rt
            .leases
            .renew(&plan.key, rt.replica.as_str(), record.epoch, rt.ttl)
            .await
        {
            Ok(_) => cell.extend(sent_at),
            Err(e) if e.outcome_unknown() => {} // the term from the acquire still counts
            Err(e) => return Err(e.into()),
        }
    }
    if !cell.holds(rt.now_ms()) {
        return Err(Error::Fenced {
            key: plan.key.to_string(),
        });
    }
    let publisher = Arc::new(Publisher::new(
        rt.clone(),
        cell.clone(),
        db_path,
        dir,
        head.clone(),
        restored.position,
        inherited,
    ));
    let log = logged.then(|| {
        LogShip::new(
            plan.key.clone(),
            record.epoch,
            rt.segment_limit,
            rt.segment_compression,
            rt.log_pipeline(),
            LogStart {
                tip: restored.position,
                image_pos: restored.image_log,
                carried: (restored.segments as u64, restored.segment_bytes),
                tip_stamp_ms: inherited.stamp_ms,
            },
        )
    });
    let ended = Arc::new(crate::status::StatusCell::new(crate::TenantStatus::Serving));
    let activity = Arc::new(crate::passivation::Activity::new(rt.now_ms()));
    let parts = TenantParts {
        rt: rt.clone(),
        cell: cell.clone(),
        ledger,
        publisher,
        lease_actor: plan.lease_actor.clone(),
        gone: plan.supervisor.clone().recipient(),
        forgets: plan.supervisor.clone().recipient(),
        serves_on: plan.supervisor.clone().recipient(),
        ended: ended.clone(),
        log,
        counted: crate::metrics::OpenTenant::new(),
        activity: activity.clone(),
    };
    let addr = TenantActor::start_in_arbiter(&plan.arbiter, move |_| TenantActor::new(parts));
    plan.lease_actor
        .send(Register {
            cell,
            on_lost: addr.clone().recipient(),
        })
        .await
        .map_err(|_| Error::Closed("the lease actor stopped".into()))?;
    rt.events.emit(Event::Opened {
        key: plan.key.to_string(),
        epoch: record.epoch,
        restored: head,
    });
    let bound = Bound {
        epoch: record.epoch,
        addr,
        ended,
        activity,
    };
    Ok(TenantRef::new(plan.key.clone(), bound, rt))
}

/// What a restore says about the images and segments the new tenure stamps and marks: the
/// newest stamp it saw (the tip's segment, the head's manifest), and the position of an image
/// beyond its log that no segment follows (docs/guarantees.md, stamps; point-in-time restore
/// across modes).
fn inherited(fetched: &leasehold::log::restore::Fetched) -> Inherited {
    let image = fetched.image.as_ref().map(|(m, _)| m);
    let stamp_ms = fetched
        .segments
        .last()
        .map(|s| s.header.created_at_ms)
        .into_iter()
        .chain(image.map(|m| m.created_at_ms))
        .max()
        .unwrap_or(0);
    let beyond_log_at = image
        .filter(|m| m.beyond_log && fetched.segments.is_empty())
        .and_then(|m| m.log);
    Inherited {
        stamp_ms,
        beyond_log_at,
    }
}

/// Sweeps the dead epochs of `key` in the background; a failure is reported and retried at the
/// next open.
fn sweep_beside(rt: Arc<Runtime>, key: LeaseKey, floor: u64) {
    actix::spawn(async move {
        let event = match sweep_dead_epochs(rt.durable.as_ref(), &key, floor).await {
            Ok(objects) => Event::Swept {
                key: key.to_string(),
                objects,
            },
            Err(e) => Event::SweepFailed {
                key: key.to_string(),
                error: e.to_string(),
            },
        };
        rt.events.emit(event);
    });
}

#[cfg(test)]
mod term_tests {
    use super::renewal_due;

    #[test]
    fn an_open_renews_once_less_than_half_its_term_is_left() {
        // A term of 8 s that runs until 10 s.
        assert!(!renewal_due(10_000, 2_000, 8_000), "all of it left");
        assert!(!renewal_due(10_000, 6_000, 8_000), "exactly half left");
        assert!(renewal_due(10_000, 6_001, 8_000), "less than half");
        assert!(renewal_due(10_000, 12_000, 8_000), "past its end");
    }
}
