//! Promise 6 (docs/guarantees.md, "what a closed replica leaves behind") for replicas of a
//! fleet: a replica with a transport that served and sent forwards, once closed and dropped,
//! leaves no thread, no descriptor (its server's socket, its client's pooled connections) and
//! no bound port behind. Threads and descriptors are counted for the whole process, so this file
//! holds one test: its binary runs nothing else at the same time.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use leasehold::ledger::{LedgerError, LedgerTx};
use leasehold_actors::transport::{FleetKey, TransportConfig};
use leasehold_actors::{Messages, TenantAddr, TenantMessage, live_tenants};
use serde::{Deserialize, Serialize};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Adds one to a counter; answers it.
#[derive(Debug, Serialize, Deserialize)]
struct Bump;

impl TenantMessage for Bump {
    type Reply = i64;
    const NAME: &'static str = "test.bump";

    fn handle(self, ledger: &mut LedgerTx<'_>) -> Result<i64, LedgerError> {
        ledger.execute("CREATE TABLE IF NOT EXISTS n (v INTEGER NOT NULL)", [])?;
        ledger.execute("INSERT INTO n VALUES (1)", [])?;
        ledger.query_row("SELECT count(*) FROM n", [], |r| r.get(0))
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[actix_rt::test]
async fn promise6_closed_replicas_of_a_fleet_leave_no_thread_descriptor_or_bound_port() {
    let fleet = Fleet::new().await;
    let (threads_before, fds_before, actors_before) = (threads(), fds(), live_tenants());
    let addr = TenantAddr::new(org(), tenant());
    let bump = || Messages::new().command::<Bump>().unwrap();

    // A tenure a message opened, ended by a handoff while its replica runs on: its actor goes
    // once the host lets go (the router's own handles do not keep it).
    let keep = fleet.replica_with("keep", "keep", |c| c.messages = bump());
    assert_eq!(keep.sup.send(&addr, Bump).await, Ok(1));
    assert_eq!(live_tenants(), actors_before + 1);
    let t = keep.sup.tenant(&org(), &tenant()).await.unwrap();
    t.handoff().await.unwrap();
    drop(t);
    eventually(5_000, "the ended tenure's actor to stop", || async {
        live_tenants() == actors_before
    })
    .await;
    assert!(keep.sup.close().await.unwrap().is_empty());
    drop(keep);

    let ports = [free_port(), free_port()];
    for round in 0..2 {
        let replicas: Vec<_> = ["a", "b"]
            .iter()
            .zip(ports)
            .map(|(id, port)| {
                let name = format!("{id}-{round}");
                fleet.replica_with(&name, &name, |c| {
                    c.messages = bump();
                    let key = FleetKey::new(vec![3; 32]).unwrap();
                    let bind = SocketAddr::from(([127, 0, 0, 1], port));
                    c.transport = Some(TransportConfig::new(bind, key));
                })
            })
            .collect();
        // a opens the tenant; b's messages are forwarded to a over the pooled client.
        let first = replicas[0].sup.send(&addr, Bump).await.unwrap();
        assert!(first > 1, "the tenant kept what the first replica wrote");
        for i in 1..=3 {
            let forwarded = replicas[1].sup.ask(&addr, Bump, Duration::from_secs(10));
            assert_eq!(forwarded.await, Ok(first + i), "round {round}");
        }
        for r in &replicas {
            assert!(r.sup.close().await.unwrap().is_empty());
        }
        drop(replicas);
    }
    // The ports were bound again by the second round; once closed, they are free.
    for port in ports {
        eventually(5_000, "the transport's port to be free", || async move {
            std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
        })
        .await;
    }
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
