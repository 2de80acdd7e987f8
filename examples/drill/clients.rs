//! The clients: tasks that write events with unique ids to their tenant through whichever
//! replica the routing table says owns it, and open the tenant somewhere when nobody does.
//!
//! ```text
//!  loop until the end:  owner? ──no──> open on a random live replica (LeaseHeld: follow the
//!                         │                holder if it is live, else wait for the lease to end)
//!                        yes ──> write ──ok──> next
//!                                     └─fail/unknown──> drop the route, try again
//! ```

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::{Cluster, OpenError, WRITE_TIMEOUT, next_id};
use crate::history::Outcome;
use crate::protocol::{Op, now_ms};
use crate::rng::Rng;

/// Runs client `client` of `tenant` until `end_ms` (driver clock).
pub async fn run(cluster: Arc<Cluster>, tenant: u32, client: u32, seed: u64, end_ms: u64) {
    let mut rng = Rng::new(seed ^ (u64::from(tenant) << 32) ^ u64::from(client));
    let mut n = 0u64;
    while now_ms() < end_ms {
        let Some(slot) = cluster.owner(tenant) else {
            ensure_open(&cluster, tenant, &mut rng).await;
            continue;
        };
        let Some(proc) = cluster.live(slot) else {
            cluster.clear_owner_if(tenant, slot);
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        n += 1;
        let key = format!("t{tenant}-c{client}-{n:06}");
        let outcome = cluster
            .write(&proc, tenant, key, false, WRITE_TIMEOUT)
            .await;
        match outcome {
            Outcome::Ok { .. } => {}
            Outcome::Fail { .. } | Outcome::Unknown { .. } | Outcome::Pending => {
                cluster.clear_owner_if(tenant, slot);
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
        tokio::time::sleep(rng.millis(4, 14)).await;
    }
}

/// What the key of every large batch's write holds (`t<tenant>-big-<n>`).
pub const LARGE_KEY: &str = "-big-";

/// The large-batch client of `tenant`: every `every` (±50 %) one run carrying a blob of `mib`
/// MiB (one segment of about that size, `Op::WriteBlob`) through the tenant's owner, until
/// `end_ms`. Its writes are judged like every other; with a slow store
/// (`--store-mib-per-sec`) each segment's put and every later restore meet sized deadlines.
pub async fn run_large(
    cluster: Arc<Cluster>,
    tenant: u32,
    mib: u32,
    every: Duration,
    seed: u64,
    end_ms: u64,
) {
    let mut rng = Rng::new(seed ^ 0xb16_b10b ^ u64::from(tenant));
    let every_ms = every.as_millis() as u64;
    // A blob's put, at the slowest rate the runtime's deadlines assume (8 MiB/s), and slack.
    let limit = WRITE_TIMEOUT + Duration::from_secs(2 * u64::from(mib).div_ceil(8) + 2);
    let mut n = 0u64;
    while now_ms() < end_ms {
        tokio::time::sleep(rng.millis(every_ms / 2, every_ms * 3 / 2)).await;
        let Some(slot) = cluster.owner(tenant) else {
            continue; // the small clients open it
        };
        let Some(proc) = cluster.live(slot) else {
            continue;
        };
        n += 1;
        let key = format!("t{tenant}{LARGE_KEY}{n:06}");
        let id = next_id();
        cluster.history.invoke(id, tenant, &key, &proc.label, false);
        let op = Op::WriteBlob { tenant, key, mib };
        let result = proc.call_with(id, op, limit).await;
        let outcome = cluster.history.complete(id, &result);
        if !matches!(outcome, Outcome::Ok { .. }) {
            cluster.clear_owner_if(tenant, slot);
        }
    }
}

/// Opens `tenant` on a random live replica unless someone already routed it. One client of a
/// tenant opens at a time; the others wait for it and then use its route.
pub async fn ensure_open(cluster: &Cluster, tenant: u32, rng: &mut Rng) {
    let Some(lock) = usize::try_from(tenant)
        .ok()
        .and_then(|t| cluster.open_locks.get(t))
    else {
        return;
    };
    let _one_at_a_time = lock.lock().await;
    if cluster.owner(tenant).is_some() {
        return;
    }
    let Some(&slot) = rng.pick(&cluster.live_slots()) else {
        tokio::time::sleep(Duration::from_millis(100)).await;
        return;
    };
    match cluster.open_on(tenant, slot).await {
        Ok(_) => {}
        Err(OpenError::Held(Some(holder))) => {
            // The holder may be live (an open whose reply we missed): follow it. A stopped or
            // dead holder's lease has to run out first.
            match cluster.slot_named(&holder) {
                Some(i) if cluster.live(i).is_some() && rng.chance(50) => {
                    cluster.set_owner(tenant, i);
                }
                _ => tokio::time::sleep(Duration::from_millis(150)).await,
            }
        }
        Err(_) => tokio::time::sleep(Duration::from_millis(150)).await,
    }
}

/// How many times an address client sends one note before it moves on.
const SEND_ATTEMPTS: u32 = 3;

/// Runs address client `client` of `tenant` until `end_ms` (`--clients addresses`): each note
/// goes to the tenant's address through a random live replica, which runs it wherever the
/// tenant is; a note of unknown outcome is sent again with the same key (its idempotency key)
/// through another random replica, so a retry that finds it ran returns the stored reply.
/// Every fifth round, a query asks a random replica for a note this client had acknowledged.
/// The replica the reply names as the runner becomes the tenant's route (what the faults
/// pick their owners from).
pub async fn run_addresses(
    cluster: Arc<Cluster>,
    tenant: u32,
    client: u32,
    seed: u64,
    end_ms: u64,
) {
    let mut rng = Rng::new(seed ^ 0xadd ^ (u64::from(tenant) << 32) ^ u64::from(client));
    let mut n = 0u64;
    let mut acked: Vec<String> = Vec::new();
    while now_ms() < end_ms {
        n += 1;
        let key = format!("t{tenant}-a{client}-{n:06}");
        for attempt in 1..=SEND_ATTEMPTS {
            let Some(&slot) = rng.pick(&cluster.live_slots()) else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let Some(proc) = cluster.live(slot) else {
                continue;
            };
            let id = next_id();
            cluster.history.invoke(id, tenant, &key, &proc.label, false);
            cluster.history.through_address(id);
            let op = Op::Send {
                tenant,
                key: key.clone(),
            };
            let mut result = proc.call_with(id, op, WRITE_TIMEOUT).await;
            match &result {
                Ok(crate::protocol::Answer::Sent { ran_on, .. }) => {
                    cluster.history.ran_on(id, ran_on);
                    if let Some(runner) = cluster.slot_named(ran_on) {
                        cluster.set_owner(tenant, runner);
                    }
                }
                // A retry's refusal says nothing of the earlier attempt, which may have run.
                Ok(crate::protocol::Answer::Failed { code, .. })
                    if attempt > 1 && crate::protocol::is_definite_refusal(code) =>
                {
                    result = Err(crate::history::CallError::Timeout);
                }
                _ => {}
            }
            match cluster.history.complete(id, &result) {
                Outcome::Ok { .. } => {
                    acked.push(key.clone());
                    break;
                }
                Outcome::Fail { .. } => break,
                Outcome::Unknown { .. } | Outcome::Pending => {
                    tokio::time::sleep(rng.millis(20, 80)).await;
                }
            }
        }
        if n.is_multiple_of(5)
            && let Some(asked) = rng.pick(&acked).cloned()
        {
            ask(&cluster, tenant, asked, &mut rng).await;
        }
        tokio::time::sleep(rng.millis(4, 14)).await;
    }
}

/// Sends the query for note `key` of `tenant` through a random live replica and records what it
/// answered.
async fn ask(cluster: &Cluster, tenant: u32, key: String, rng: &mut Rng) {
    let Some(proc) = rng
        .pick(&cluster.live_slots())
        .and_then(|&slot| cluster.live(slot))
    else {
        return;
    };
    let op = Op::Ask {
        tenant,
        key: key.clone(),
    };
    if let Ok(crate::protocol::Answer::Seen {
        note,
        sent_at,
        answered_at,
    }) = proc.call(op, WRITE_TIMEOUT).await
    {
        cluster.history.query(crate::history::addresses::QueryOp {
            tenant,
            key,
            via: proc.label.clone(),
            sent_at,
            answered_at,
            note,
        });
    }
}
