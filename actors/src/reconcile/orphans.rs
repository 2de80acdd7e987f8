//! What a crashed process left in a live tenant, found by listing: objects of dead tenures that
//! nothing names ([`leasehold::plan::orphans::orphans`]). A candidate is deleted once this
//! replica has seen it for `put_lifetime` (its own clock, [`OrphanAges`]): the first look (the
//! pass after an open, or after a new image) notes it, and a pass looks again when it is due
//! (docs/guarantees.md, "Reconciling puts of unknown outcome").
//!
//! [`OrphanAges`]: leasehold::plan::orphans::OrphanAges

use leasehold::clock::duration_ms;
use leasehold::plan::orphans::orphans;
use leasehold::sweep::SWEEP_PAGE_KEYS;
use leasehold::{Error, LeaseKey};

use super::{Cx, ReconcileReport};
use crate::events::Event;

/// Lists `tenant`, deletes the orphans this replica has seen for `put_lifetime`, and has the
/// pass look again at the others when they are due. Returns how many objects went.
pub(crate) async fn look(cx: &Cx, tenant: &LeaseKey) -> Result<usize, Error> {
    // The record first: a tenure that acquires after it is read is above its epoch, never judged.
    let Some(record) = cx.leases.read(tenant).await? else {
        return Ok(0);
    };
    let prefix = tenant.prefix();
    let (mut listed, mut after) = (Vec::new(), None::<String>);
    loop {
        let page = cx
            .durable
            .list_page(&prefix, after.as_deref(), SWEEP_PAGE_KEYS)
            .await?;
        listed.extend(page.keys);
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let candidates = orphans(tenant, &listed, &record);
    let (now, settle) = (cx.now_ms(), duration_ms(cx.put_lifetime));
    let due = cx
        .reconciler
        .ledger()
        .orphans
        .due(tenant, &candidates, now, settle);
    for chunk in due.chunks(SWEEP_PAGE_KEYS) {
        cx.durable.delete_keys(chunk).await?;
    }
    let mut ledger = cx.reconciler.ledger();
    ledger.orphans.forget(&due);
    if candidates.len() > due.len() {
        let at = now.saturating_add(settle);
        let recheck = ledger.rechecks.entry(tenant.clone()).or_insert(at);
        *recheck = (*recheck).min(at);
    } else {
        ledger.rechecks.remove(tenant);
    }
    drop(ledger);
    if !due.is_empty() {
        cx.events.emit(Event::TakenBack {
            key: tenant.to_string(),
            objects: due.len(),
        });
    }
    Ok(due.len())
}

/// Looks again at every tenant whose orphan candidates are due.
pub(crate) async fn recheck_due(cx: &Cx, report: &mut ReconcileReport) {
    let now = cx.now_ms();
    let due: Vec<LeaseKey> = {
        let mut ledger = cx.reconciler.ledger();
        let due: Vec<LeaseKey> = ledger
            .rechecks
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in &due {
            ledger.rechecks.remove(key);
        }
        due
    };
    for tenant in due {
        match look(cx, &tenant).await {
            Ok(deleted) => report.deleted += deleted,
            Err(e) => {
                report.failures += 1;
                tracing::debug!(key = %tenant, error = %e, "looking for orphans failed; again at the next pass");
                cx.reconciler.ledger().rechecks.insert(tenant, now);
            }
        }
    }
}

/// Has the next pass look for orphans of `tenant` (beside an open, after a new image): one
/// listing per tenant per pass at most, whatever asks.
pub(crate) fn look_soon(cx: &Cx, tenant: LeaseKey) {
    let now = cx.now_ms();
    let mut ledger = cx.reconciler.ledger();
    let at = ledger.rechecks.entry(tenant).or_insert(now);
    *at = (*at).min(now);
}
