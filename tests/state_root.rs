//! Hole 3 (docs/guarantees.md, assumption 5): two replicas never share a state root. A second
//! `Supervisor::start` on a root that a live replica holds, in this process or in another, is
//! refused with `StateRootLocked`, naming the root and its holder, and starts nothing; once the
//! holder is closed and dropped, the root can be taken again.

mod common;

use std::process::Command;
use std::sync::Arc;

use common::*;
use leasehold::durable::dir::DirStore;
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::{Error, ReplicaId};
use leasehold_actors::{RuntimeConfig, Supervisor};

/// The variable that turns this test binary into the child of the cross-process test.
const CHILD_ROOT: &str = "LEASEHOLD_STATE_ROOT_CHILD";

fn config(dir: &std::path::Path, replica: &str, root: &std::path::Path) -> RuntimeConfig {
    RuntimeConfig::new(
        ReplicaId::new(replica).unwrap(),
        root,
        Arc::new(SqliteLeaseStore::open(&dir.join("leases.db")).unwrap()),
        Arc::new(DirStore::open(&dir.join("durable")).unwrap()),
    )
}

#[actix_rt::test]
async fn hole3_a_second_replica_on_a_state_root_in_use_is_refused_in_this_process() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("replica-a", "shared-root", |_| {});
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let mut cfg = config(fleet.dir.path(), "replica-b", &a.state_root);
    cfg.leases = fleet.leases.shared();
    cfg.durable = fleet.durable.shared();
    let refused = Supervisor::start(cfg.clone());
    match &refused {
        Err(Error::StateRootLocked { root, holder }) => {
            assert!(root.contains("shared-root"), "{root}");
            assert!(holder.contains("replica-a"), "{holder}");
            assert!(holder.contains(&std::process::id().to_string()), "{holder}");
        }
        other => panic!("expected StateRootLocked, got {other:?}"),
    }
    assert_eq!(
        keys_of(&t).await,
        ["k-1"],
        "the holder serves on, untouched"
    );
    assert!(a.sup.close().await.unwrap().is_empty());
    drop((t, a));
    // The lock goes with the last of the closed replica.
    let mut again = None;
    eventually(5_000, "the state root to be free again", || {
        let started = Supervisor::start(cfg.clone());
        let free = started.is_ok();
        again = started.ok();
        async move { free }
    })
    .await;
    assert!(again.is_some());
}

/// The child's half of the next test: it tries the root its parent holds and reports.
#[actix_rt::test]
async fn hole3_child_process_entry() {
    let Ok(root) = std::env::var(CHILD_ROOT) else {
        return; // Only the child of the cross-process test runs this.
    };
    let dir = tempfile::tempdir().unwrap();
    let outcome = Supervisor::start(config(dir.path(), "replica-child", root.as_ref()));
    match outcome {
        Ok(_) => println!("CHILD-OUTCOME started"),
        Err(e) => println!("CHILD-OUTCOME {} {e}", e.code()),
    }
}

#[actix_rt::test]
async fn hole3_a_second_replica_on_a_state_root_in_use_is_refused_in_another_process() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("replica-parent", "held-root", |_| {});
    let child = |root: &std::path::Path| {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "hole3_child_process_entry", "--nocapture"])
            .env(CHILD_ROOT, root)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("CHILD-OUTCOME ").map(str::to_string))
            .unwrap_or_else(|| panic!("the child said nothing: {stdout}"))
    };
    let refused = child(&a.state_root);
    assert!(
        refused.starts_with("LEASEHOLD_STATE_ROOT_LOCKED")
            && refused.contains("replica-parent")
            && refused.contains(&std::process::id().to_string()),
        "{refused}"
    );
    assert!(a.sup.close().await.unwrap().is_empty());
    let root = a.state_root.clone();
    drop(a);
    let mut outcome = String::new();
    eventually(10_000, "the child to take the freed root", || {
        outcome = child(&root);
        let started = outcome == "started";
        async move { started }
    })
    .await;
}
