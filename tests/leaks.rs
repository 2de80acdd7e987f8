//! Hole 7 (docs/guarantees.md, promise 6): nothing outlives its use. A tenure that ended stops
//! its actor once no host handle is left; a replica that was closed and whose last
//! `Supervisor` handle was dropped leaves no thread, no file descriptor and no tenant actor
//! behind. Threads and descriptors are counted for the whole process, so this file holds one
//! test: its binary runs nothing else at the same time.

mod common;

use std::time::Duration;

use common::*;
use leasehold::TenantId;
use leasehold_actors::live_tenants;

/// Threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Open file descriptors of this process.
fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[actix_rt::test]
async fn hole7_ended_tenures_and_closed_replicas_leave_no_actor_thread_or_descriptor() {
    let fleet = Fleet::new().await;
    let (threads_before, fds_before, actors_before) = (threads(), fds(), live_tenants());

    // A tenure that ends while its replica runs: its actor goes once the host lets go.
    // A periodic snapshot keeps an actor busy for ever unless it is stopped.
    let hourly = |c: &mut leasehold_actors::RuntimeConfig| {
        c.snapshot_every = Some(Duration::from_secs(3_600));
        c.local_sweep_every = Some(Duration::from_secs(3_600));
    };
    let keep = fleet.replica_with("replica-keep", "replica-keep", hourly);
    let t = keep.open().await;
    insert(&t, "k-1").await.unwrap();
    assert_eq!(live_tenants(), actors_before + 1);
    t.handoff().await.unwrap();
    drop(t);
    eventually(5_000, "the ended tenure's actor to stop", || async {
        live_tenants() == actors_before
    })
    .await;
    assert!(keep.sup.close().await.unwrap().is_empty());
    drop(keep);

    // Three replicas with tenants, closed and dropped.
    for round in 0..3 {
        let name = format!("replica-{round}");
        let r = fleet.replica_with(&name, &name, hourly);
        let mut held = Vec::new();
        for i in 0..3 {
            let id = TenantId::new(format!("t{round}-{i}")).unwrap();
            let t = r.sup.open(&org(), &id).await.unwrap();
            insert(&t, "k").await.unwrap();
            held.push(t);
        }
        assert!(r.sup.close().await.unwrap().is_empty());
        drop(held);
        drop(r);
    }
    // Idle threads of the blocking pool leave after 10 s: the bound covers them.
    eventually(
        30_000,
        "threads, descriptors and actors back to the baseline",
        || async {
            // The host's lease store keeps its pool's connections (PostgreSQL): not the
            // replicas'.
            fleet.close_idle_connections();
            threads() <= threads_before && fds() <= fds_before && live_tenants() == actors_before
        },
    )
    .await;
}
