//! `leasehold forget`: forgets a tenant that no replica holds, on the runtime's erasure path
//! (docs/guarantees.md, promise 5): take its lease (refused, naming the holder, while a replica
//! holds it), raise its floor (`mark_forgotten`, which records the pending erasure), erase every
//! epoch at or below it (`leasehold::sweep::erase_floor`, as a replica's forget does), release
//! the lease — and, once `--put-lifetime` has passed since the floor rose (every put a replica
//! sent before could land by then), sweep once more and clear the pending erasure
//! (`leasehold::sweep::finish_erasure`, as a replica's periodic pass does). With `--no-wait` the
//! erasure stays pending for the fleet's pass or a later `leasehold sweep`.

use std::time::Duration;

use leasehold::durable::DurableStore;
use leasehold::lease::{LeaseError, LeaseStore};
use leasehold::sweep::{erase_floor, finish_erasure};
use leasehold::{Error, LeaseKey};
use serde::Serialize;

use super::{Outcome, entry_of, has_objects, unknown_tenant};
use crate::exit::{Exit, Failure};
use crate::report::ms;
use crate::time::words;

/// The lease the command holds while it raises the floor: long enough for a few store calls.
const TTL: Duration = Duration::from_secs(60);

/// How many times `mark_forgotten` is asked when its outcome is unknown (the store recognises
/// the same tenure's retry).
const MARK_TRIES: u32 = 3;

/// The `--json` document of `forget`.
#[derive(Debug, Serialize)]
pub struct ForgetReport {
    /// The tenant.
    pub key: String,
    /// The owner name the command took the lease as.
    pub owner: String,
    /// The epoch it took: now the floor.
    pub epoch: u64,
    /// The floor: nothing at or below it is ever read again.
    pub floor: u64,
    /// Objects deleted (both sweeps).
    pub objects: usize,
    /// `done` (swept again and cleared) or `pending` (`--no-wait`).
    pub erasure: &'static str,
    /// With `pending`: how long until it is due (`--put-lifetime` after the forget).
    pub erasure_due_in_ms: Option<u64>,
}

/// Forgets `key`. `waiting` is told how long the final sweep waits.
pub async fn run(
    leases: &dyn LeaseStore,
    durable: &dyn DurableStore,
    key: &LeaseKey,
    put_lifetime: Duration,
    no_wait: bool,
    waiting: impl FnOnce(Duration),
) -> Result<Outcome, Failure> {
    if leases.read(key).await?.is_none() && !has_objects(durable, key).await? {
        return Err(unknown_tenant(key));
    }
    let owner = format!("operator-{}", std::process::id());
    let taken = match leases.acquire(key, &owner, TTL).await {
        Ok(record) => record,
        Err(LeaseError::Held { owner, epoch, .. }) => {
            return Err(held(leases, key, &owner, epoch).await);
        }
        Err(e) => return Err(e.into()),
    };
    let floor = mark(leases, key, &owner, taken.epoch).await?;
    let marked_at = tokio::time::Instant::now();
    let erased = erase_floor(durable, key, floor).await;
    // Released whatever the erasure came to: the floor is up, and a later open of the tenant
    // starts above it. A release refused because the lease ran out changes nothing.
    match leases.release(key, &owner, taken.epoch).await {
        Ok(()) | Err(LeaseError::NotHeld { .. }) => {}
        Err(e) => {
            tracing::warn!(%key, error = %e, "releasing the forget's lease failed; it expires")
        }
    }
    let mut objects = erased.map_err(|e| {
        Failure::from(e).context(format!(
            "{key}: the floor rose to {floor}, but the erasure failed (it stays pending: run \
             `leasehold sweep {key}` once --put-lifetime has passed)"
        ))
    })?;
    let mut report = ForgetReport {
        key: key.to_string(),
        owner,
        epoch: taken.epoch,
        floor,
        objects,
        erasure: "pending",
        erasure_due_in_ms: Some(ms(put_lifetime)),
    };
    if !no_wait {
        let left =
            (marked_at + put_lifetime).saturating_duration_since(tokio::time::Instant::now());
        waiting(left);
        tokio::time::sleep_until(marked_at + put_lifetime).await;
        objects += finish_erasure(durable, leases, key, floor).await?;
        report.objects = objects;
        report.erasure = "done";
        report.erasure_due_in_ms = None;
    }
    let human = human(&report, put_lifetime);
    Outcome::new(&report, human, Exit::Ok)
}

/// Raises the floor for the command's tenure, asking again while the outcome is unknown.
async fn mark(
    leases: &dyn LeaseStore,
    key: &LeaseKey,
    owner: &str,
    epoch: u64,
) -> Result<u64, Failure> {
    let mut tries = 1;
    loop {
        match leases.mark_forgotten(key, owner, epoch).await {
            Ok(record) => return Ok(record.floor),
            Err(e) if e.outcome_unknown() && tries < MARK_TRIES => tries += 1,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The refusal of a tenant a replica holds, naming the holder and when its lease ends.
async fn held(leases: &dyn LeaseStore, key: &LeaseKey, owner: &str, epoch: u64) -> Failure {
    let left = entry_of(leases, key)
        .await
        .ok()
        .flatten()
        .and_then(|e| e.remaining)
        .map_or(String::new(), |left| {
            format!(" (its lease runs {} more unless renewed)", words(left))
        });
    let mut failure = Failure::from(Error::LeaseHeld {
        key: key.to_string(),
        owner: owner.to_owned(),
        epoch,
    });
    failure.message = format!(
        "{key} is held by {owner} at epoch {epoch}{left}: forget it through that replica \
         (TenantRef::forget), or stop it and run this again once its lease has ended; nothing was changed"
    );
    failure
}

/// The text of a forget's report.
fn human(r: &ForgetReport, put_lifetime: Duration) -> String {
    let mut out = format!(
        "forgot {} at epoch {}: floor {}, {} objects deleted\n",
        r.key, r.epoch, r.floor, r.objects
    );
    match r.erasure {
        "done" => out.push_str("swept again after --put-lifetime; the pending erasure is cleared\n"),
        _ => out.push_str(&format!(
            "the erasure stays pending: a replica's periodic pass or `leasehold sweep` finishes it once {} have passed\n",
            words(put_lifetime)
        )),
    }
    out
}
