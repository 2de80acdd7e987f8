//! The damage faults: a segment of a tenant's change log flipped (`damage-segment`, one byte
//! XOR 0xff) or deleted (`drop-segment`, a gap in the chain), the tip's own among them
//! (docs/guarantees.md, the change log: "a segment that does not apply … fails the restore with
//! a typed error instead of serving a wrong state").
//!
//! ```text
//!  hold the tenant's open lock (no client reopens it meanwhile)
//!  a segment the restore needs: on the chain, above the head image's position, at or below the tip
//!    one in three: the owner hands off, then the tip's segment is damaged
//!    else: damaged while the owner keeps writing on top of it (0.3–1.5 s), then it hands off
//!  the next open, on another replica, must fail LEASEHOLD_CORRUPT naming that segment — or, if
//!  an image taken meanwhile holds its position, open and read the tenant whole
//!  put the original bytes back; release the lock: clients reopen, every write is judged as usual
//! ```
//!
//! The checker flags `damage-served` (the open succeeded though the restore needed the damaged
//! segment: a state the log does not vouch for) and `damage-not-typed` (it failed another way,
//! not a store outage). Because the segment is put back before anyone else opens the tenant,
//! the damage explains nothing else: no loss, no unreadable tenant, no failed restore is
//! excused by it; restores of the tenant while it was damaged are not kept
//! (`crate::pitr`), and the store watcher's tip reads of it fail meanwhile (noted, not judged).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use leasehold::LeaseStore;
use leasehold::durable::DurableStore;
use leasehold::image::parse_manifest;
use leasehold::layout::{LogPos, manifest_key, segment_key, segment_of};

use crate::cluster::{BoxError, Cluster, OPEN_TIMEOUT};
use crate::history::acts::DamageKind;
use crate::protocol::{self, Answer, Op, TTL, now_ms};
use crate::rng::Rng;

/// How long a handoff may take.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(12);

/// Injects one damage fault (`drop`: delete the segment, else flip a byte); `Ok(None)` when
/// no tenant has a segment its restore needs.
pub async fn damage(
    c: &Arc<Cluster>,
    drop: bool,
    rng: &mut Rng,
) -> Result<Option<String>, BoxError> {
    let Some((slot, owned)) = crate::faults::pick_owner(c, rng) else {
        return Ok(None);
    };
    let (Some(&tenant), Some(proc)) = (rng.pick(&owned), c.live(slot)) else {
        return Ok(None);
    };
    let Some(lock) = usize::try_from(tenant)
        .ok()
        .and_then(|t| c.open_locks.get(t))
    else {
        return Ok(None);
    };
    let _no_reopen = lock.lock().await;
    let at_tip = rng.chance(33);
    let mut damaged = None;
    if !at_tip {
        let Some(pos) = needed_segment(c, tenant, false, rng).await? else {
            return Ok(Some(format!("t{tenant} has no segment its restore needs")));
        };
        damaged = Some(apply(c, tenant, pos, drop, rng).await?);
        tokio::time::sleep(rng.millis(300, 1_500)).await;
    }
    let handed = proc.call(Op::Handoff { tenant }, LEAVE_TIMEOUT).await;
    c.history.graceful_asked();
    c.clear_owner_if(tenant, slot);
    if !matches!(handed, Ok(Answer::Done { .. })) {
        // The tenure must end before anyone can open the tenant: SIGKILL, restart.
        c.kill(slot).await;
        crate::faults::restart_slot(c, slot).await?;
    }
    let damaged = match damaged {
        Some(d) => d,
        None => {
            let Some(pos) = needed_segment(c, tenant, true, rng).await? else {
                return Ok(Some(format!("t{tenant} has no tip segment to damage")));
            };
            apply(c, tenant, pos, drop, rng).await?
        }
    };
    let text = reopen(c, tenant, slot, &damaged, rng).await?;
    repair(c, &damaged).await?;
    Ok(Some(format!(
        "{} {:?} {} of t{tenant}{}; {text}; put back",
        proc.label,
        damaged.kind,
        damaged.pos,
        if at_tip {
            " (the tip, after a handoff)"
        } else {
            " (owner writing on top)"
        },
    )))
}

/// A segment as the driver found it before damaging it.
struct Damaged {
    /// The tenant.
    tenant: u32,
    /// Its position.
    pos: LogPos,
    /// Its key.
    key: String,
    /// Its bytes before.
    original: Vec<u8>,
    /// What was done.
    kind: DamageKind,
    /// The history's index of the damage.
    index: usize,
}

/// A segment of `tenant` the restore needs right now: the tip's (`tip`), or one on the chain
/// above the head image's position, chosen at random; `None` if there is none.
async fn needed_segment(
    c: &Cluster,
    tenant: u32,
    tip: bool,
    rng: &mut Rng,
) -> Result<Option<LogPos>, BoxError> {
    let key = protocol::lease_key(tenant)?;
    let Some(record) = c.stores.leases.read(&key).await? else {
        return Ok(None);
    };
    let Some(top) = record.tip else {
        return Ok(None);
    };
    if tip {
        return Ok(Some(top));
    }
    let head_log = match &record.head {
        Some(head) => c
            .stores
            .durable
            .get(&manifest_key(&key, head.epoch, head.seq))
            .await?
            .and_then(|b| parse_manifest(&b, &key, head.epoch, head.seq).ok())
            .and_then(|m| m.log)
            .map_or(0, |p| p.seq),
        None => 0,
    };
    // The chain's segment at each position: the newest epoch that shipped it.
    let mut chain: BTreeMap<u64, u64> = BTreeMap::new();
    for object in c.stores.durable.list(&key.prefix()).await? {
        if let Some(p) = segment_of(&key, &object)
            && p.epoch > record.floor
            && p.seq > head_log
            && p.seq <= top.seq
        {
            let e = chain.entry(p.seq).or_insert(p.epoch);
            *e = (*e).max(p.epoch);
        }
    }
    let candidates: Vec<LogPos> = chain
        .into_iter()
        .map(|(seq, epoch)| LogPos { epoch, seq })
        .collect();
    Ok(rng.pick(&candidates).copied())
}

/// Damages the segment at `pos` of `tenant`: keeps its bytes, then flips one or deletes it.
async fn apply(
    c: &Cluster,
    tenant: u32,
    pos: LogPos,
    drop: bool,
    rng: &mut Rng,
) -> Result<Damaged, BoxError> {
    let key = segment_key(&protocol::lease_key(tenant)?, pos);
    let store = &c.stores.durable;
    let original = store
        .get(&key)
        .await?
        .ok_or_else(|| format!("{key} vanished before it could be damaged"))?;
    let kind = if drop {
        DamageKind::Drop
    } else {
        DamageKind::Flip {
            offset: rng.index(original.len()),
        }
    };
    store.delete(&key).await?;
    if let DamageKind::Flip { offset } = kind {
        let mut bytes = original.clone();
        if let Some(b) = bytes.get_mut(offset) {
            *b ^= 0xff;
        }
        store.put_if_absent(&key, bytes).await?;
    }
    let index = c.history.damaged(tenant, &key, pos, kind);
    Ok(Damaged {
        tenant,
        pos,
        key,
        original,
        kind,
        index,
    })
}

/// Opens the damaged tenant on another live replica and judges the answer; returns what came.
async fn reopen(
    c: &Cluster,
    tenant: u32,
    old: usize,
    d: &Damaged,
    rng: &mut Rng,
) -> Result<String, BoxError> {
    let key = protocol::lease_key(tenant)?;
    let needed = match c.stores.leases.read(&key).await? {
        Some(record) => still_needed(c, &record, d).await?,
        None => true,
    };
    let others: Vec<usize> = c.live_slots().into_iter().filter(|&i| i != old).collect();
    let slot = rng.pick(&others).copied().unwrap_or(old);
    let Some(proc) = c.live(slot) else {
        return Ok("no replica to open it".into());
    };
    let give_up = now_ms() + 3 * TTL.as_millis() as u64 + 2_000;
    let mut stores_failed = 0;
    loop {
        let answer = proc.call(Op::Open { tenant }, OPEN_TIMEOUT).await;
        match answer {
            Ok(Answer::Opened {
                epoch, acquired_hi, ..
            }) => {
                c.history
                    .grant(tenant, epoch, &proc.label, Some(slot), acquired_hi);
                c.set_owner(tenant, slot);
                if needed {
                    c.history.flag(
                        "damage-served",
                        Some(tenant),
                        format!(
                            "{} opened t{tenant} (epoch {epoch}) though its restore needs {} \
                             ({:?}): a state the log does not vouch for",
                            proc.label, d.key, d.kind
                        ),
                    );
                }
                return Ok(format!("{} opened it, epoch {epoch}", proc.label));
            }
            Ok(Answer::Failed { code, message, .. }) if code == "LEASEHOLD_CORRUPT" => {
                // By its key, or as `<position> of <tenant>` (a check after decoding).
                let names = message.contains(&d.key)
                    || (message.contains(&d.pos.to_string()) && message.contains(key.as_str()));
                if needed && names {
                    c.history.audit(|a| a.damage_caught += 1);
                    return Ok(format!("{} refused it: LEASEHOLD_CORRUPT", proc.label));
                }
                c.history.flag(
                    "damage-not-typed",
                    Some(tenant),
                    format!(
                        "{} refused t{tenant} as corrupt, but the damaged segment {} is {}: \
                         {message}",
                        proc.label,
                        d.key,
                        if needed {
                            "not the one named"
                        } else {
                            "below the head image"
                        }
                    ),
                );
                return Ok(format!("{} refused it: {message}", proc.label));
            }
            Ok(Answer::Failed { code, .. }) if code == "LEASEHOLD_LEASE_HELD" => {}
            Ok(Answer::Failed { code, message, .. }) if code == "LEASEHOLD_STORE" => {
                stores_failed += 1;
                if stores_failed >= 3 {
                    let text = format!("the open met a store failure three times: {message}");
                    c.history
                        .note(Some(tenant), format!("damage not judged: {text}"));
                    return Ok(text);
                }
            }
            Ok(Answer::Failed { code, message, .. }) => {
                c.history.flag(
                    "damage-not-typed",
                    Some(tenant),
                    format!(
                        "{} answered the open of t{tenant}, whose segment {} is damaged ({:?}), \
                         with {code}, not LEASEHOLD_CORRUPT: {message}",
                        proc.label, d.key, d.kind
                    ),
                );
                return Ok(format!("{} refused it: {code}", proc.label));
            }
            other => {
                if now_ms() > give_up {
                    return Ok(format!("no answer to the open: {other:?}"));
                }
            }
        }
        if now_ms() > give_up {
            return Ok("the lease stayed held".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Whether the restore from `record` still needs the damaged segment: it lies above the head
/// image's position (an image taken since may hold it).
async fn still_needed(
    c: &Cluster,
    record: &leasehold::lease::LeaseRecord,
    d: &Damaged,
) -> Result<bool, BoxError> {
    let key = protocol::lease_key(d.tenant)?;
    let Some(head) = &record.head else {
        return Ok(true);
    };
    let manifest = c
        .stores
        .durable
        .get(&manifest_key(&key, head.epoch, head.seq))
        .await?
        .and_then(|b| parse_manifest(&b, &key, head.epoch, head.seq).ok());
    let head_log = manifest.and_then(|m| m.log).map_or(0, |p| p.seq);
    Ok(d.pos.seq > head_log)
}

/// Puts the original bytes back (a flipped segment only while it is still there: retention may
/// have taken it since).
async fn repair(c: &Cluster, d: &Damaged) -> Result<(), BoxError> {
    let store = &c.stores.durable;
    let present = store.get(&d.key).await?.is_some();
    if matches!(d.kind, DamageKind::Flip { .. }) && !present {
        c.history.repaired(d.index);
        return Ok(());
    }
    store.delete(&d.key).await?;
    store.put_if_absent(&d.key, d.original.clone()).await?;
    c.history.repaired(d.index);
    Ok(())
}
