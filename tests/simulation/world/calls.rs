//! The world's calls into the runtime, each reduced to what the model predicts ([`Res`]):
//! runs that insert or read events, tickets, snapshots, and the mapping of errors; every call
//! bounded by [`SETTLE`] so that a hang is reported, not waited for.

use std::future::Future;
use std::time::{Duration, Instant};

use leasehold::durable::StoreError;
use leasehold::ledger::{LedgerError, NewEvent};
use leasehold::{Error, LeaseKey};
use leasehold_actors::{TenantRef, TenantStatus, Ticket};

use super::{SETTLE, tenant_ids};
use crate::model::Res;

/// Tenant `t`'s lease key.
pub fn key_of(t: usize) -> LeaseKey {
    let (org, tenant) = tenant_ids(t);
    LeaseKey::new(&org, &tenant)
}

/// Polls the tenant's status until the handoff's drain has begun (`true`) or the tenant is
/// neither serving nor draining (`false`: the drain was refused).
pub(crate) async fn wait_for_drain(h: &TenantRef) -> bool {
    let until = Instant::now() + SETTLE;
    loop {
        match h.status().await {
            TenantStatus::Draining => return true,
            TenantStatus::Serving if Instant::now() < until => {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            _ => return false,
        }
    }
}

/// What an error is to the model.
pub fn res_of(e: &Error) -> Res {
    match e {
        Error::Fenced { .. } => Res::Fenced,
        Error::Draining { .. } => Res::Draining,
        Error::LeaseHeld { .. } => Res::LeaseHeld,
        Error::Store(StoreError::Unavailable { .. }) => Res::StoreDown,
        Error::Store(StoreError::Timeout { .. }) => Res::StoreTimeout,
        Error::Corrupt(_) => Res::Corrupt,
        Error::Closed(_) => Res::Closed,
        Error::DrainTimeout { .. } => Res::DrainTimeout,
        Error::Unshipped { .. } => Res::Unshipped,
        other => Res::Other(format!("{}: {other}", other.code())),
    }
}

/// `fut`, or `Other("did not settle")` after [`SETTLE`].
pub(crate) async fn settle_raw<T>(fut: impl Future<Output = T>) -> Result<T, Res> {
    tokio::time::timeout(SETTLE, fut)
        .await
        .map_err(|_| Res::Other(format!("did not settle within {SETTLE:?}")))
}

pub(crate) async fn settle(fut: impl Future<Output = Result<Res, Error>>) -> Res {
    match settle_raw(fut).await {
        Ok(Ok(res)) => res,
        Ok(Err(e)) => res_of(&e),
        Err(late) => late,
    }
}

pub(crate) async fn count(fut: impl Future<Output = Result<usize, Error>>) -> Result<Res, Error> {
    fut.await.map(Res::Count)
}

pub(crate) async fn unit(fut: impl Future<Output = Result<(), Error>>) -> Result<Res, Error> {
    fut.await.map(|()| Res::Ok)
}

pub(crate) fn event(
    id: String,
) -> impl FnOnce(&mut leasehold::ledger::LedgerTx<'_>) -> Result<Res, LedgerError> + Send + 'static
{
    move |l| {
        l.insert_event(&NewEvent::new("sim", id))?
            .ok_or_else(|| LedgerError::Host("a duplicate event id".into()))?;
        Ok(Res::Ok)
    }
}

pub(crate) fn insert(
    h: &TenantRef,
    id: String,
) -> impl Future<Output = Result<Res, Error>> + use<> {
    h.run(event(id))
}

pub(crate) fn ticket_insert(
    t: &Ticket,
    id: String,
) -> impl Future<Output = Result<Res, Error>> + use<> {
    t.run(event(id))
}

pub(crate) fn read(h: &TenantRef) -> impl Future<Output = Result<Res, Error>> + use<> {
    h.run(|l| {
        let events = l.events_after(0, 10_000)?;
        Ok(Res::Keys(events.into_iter().map(|e| e.idem_key).collect()))
    })
}

pub(crate) async fn snapshot(h: &TenantRef) -> Result<Res, Error> {
    let head = h.snapshot().await?;
    Ok(Res::Head(head.map(|i| (i.epoch, i.seq))))
}

/// Admit, one ticket write, drop.
pub(crate) async fn ticket_work(h: &TenantRef, id: String) -> Vec<Res> {
    match settle_raw(h.admit()).await {
        Ok(Ok(ticket)) => vec![Res::Ok, settle(ticket_insert(&ticket, id)).await],
        Ok(Err(e)) => vec![res_of(&e)],
        Err(late) => vec![late],
    }
}
