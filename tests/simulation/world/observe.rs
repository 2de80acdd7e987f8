//! What the checker reads after each op: [`World::observe`] reads the stores behind the faults,
//! the local directories and every tenure's status at once; [`World::final_sweep`] waits for
//! the sweep beside the final replica's open.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::future::join_all;
use leasehold_actors::{Event, TenantStatus};

use super::{SETTLE, Seen, World, key_of, tenant_ids};
use crate::model::{REPLICAS, TENANTS};
use crate::ops::log_hole_fixed;

impl World {
    /// Reads what the stores, the directories and the tenants say now (all at once).
    pub async fn observe(&mut self) -> Seen {
        let (leases, durable) = (&self.leases, &self.durable);
        let rows = join_all(
            (0..TENANTS).map(|t| async move { leases.inner().read(&key_of(t)).await.unwrap() }),
        );
        // One walk of the whole store: each tenant's objects, and nothing that is no tenant's.
        let listings = async move {
            let all = durable.inner().list("").await.unwrap();
            let mut by_tenant = vec![Vec::new(); TENANTS + 1];
            for key in all {
                let t = (0..TENANTS).find(|&t| key.starts_with(&key_of(t).prefix()));
                by_tenant[t.unwrap_or(TENANTS)].push(key);
            }
            by_tenant
        };
        // A tenure that ended on a failed segment hands its lease back after its caller heard
        // why: the statuses settle first (bounded), then the stores are read.
        let settle_until = std::time::Instant::now() + Duration::from_secs(2);
        // A handle bound to a newer tenure since: its old one was passivated (and is final).
        let rebound: Vec<_> = (self.handles.keys().copied())
            .filter(|&k| self.rebound(k))
            .collect();
        for k in rebound {
            self.finished.entry(k).or_insert(TenantStatus::Passivated);
        }
        let statuses = loop {
            let finished = &self.finished;
            let statuses: Vec<_> = join_all(
                self.handles
                    .iter()
                    .filter(|(k, _)| !finished.contains_key(k))
                    .map(|(k, h)| async move { (*k, h.status().await) }),
            )
            .await;
            let settling = statuses.iter().any(|(_, s)| *s == TenantStatus::Abandoning);
            if !settling || std::time::Instant::now() > settle_until {
                break statuses;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        let (rows, listings) = futures::join!(rows, listings);
        let dirs = self
            .roots
            .iter()
            .map(|root| {
                (0..TENANTS)
                    .map(|t| {
                        let (org, tenant) = tenant_ids(t);
                        leasehold::ids::tenant_root(root, &org, &tenant).exists()
                    })
                    .collect()
            })
            .collect();
        for (k, status) in &statuses {
            if status.is_final() {
                self.finished.insert(*k, *status);
            }
        }
        let mut statuses: BTreeMap<_, _> = statuses.into_iter().collect();
        statuses.extend(self.finished.iter().map(|(k, s)| (*k, *s)));
        let wall_ms = super::wall_ms();
        // What the retention rules judge from, once one of them is on.
        let judged = self.case.log_case && (log_hole_fixed(3) || log_hole_fixed(4));
        let (stamps, deletions) = match judged {
            true => (self.stamps(&listings).await, self.durable.deletions()),
            false => (Vec::new(), Vec::new()),
        };
        Seen {
            rows,
            listings,
            dirs,
            statuses,
            stamps,
            wall_ms,
            deletions,
        }
    }

    /// Waits until the final replica reports the sweep beside its open of tenant `t`; `true`
    /// if it swept, `false` if the sweep failed or never came.
    pub async fn final_sweep(&self, t: usize) -> bool {
        let key = key_of(t).to_string();
        let until = Instant::now() + SETTLE;
        while Instant::now() < until {
            let _ = self.sups[REPLICAS]
                .events_delivered(Duration::from_secs(1))
                .await;
            for event in self.events[REPLICAS].events() {
                match event {
                    Event::Swept { key: k, .. } if k == key => return true,
                    Event::SweepFailed { key: k, .. } if k == key => return false,
                    _ => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        false
    }
}
