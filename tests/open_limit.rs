//! Hole 16 (docs/guarantees.md, the descriptor ceiling): opens stop short of the descriptor limit
//! with a reserve, refused with `OpenLimit` naming `max_open`, so that `close()` can still flush
//! every open tenant. Run under a lowered `RLIMIT_NOFILE` in a child process (this binary,
//! re-executed), so the limit touches no other test.

mod common;

use std::process::Command;

use common::*;
use leasehold::{Error, LeaseKey, TenantId};

/// The variable that turns this test binary into the child, with the soft limit to set.
const CHILD_LIMIT: &str = "LEASEHOLD_OPEN_LIMIT_CHILD";

/// Open file descriptors of this process.
fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// The child's half: lower the limit, open until refused, close, report.
#[actix_rt::test]
async fn hole16_child_process_entry() {
    let Ok(limit) = std::env::var(CHILD_LIMIT) else {
        return; // Only the child of the test below runs this.
    };
    let limit: u64 = limit.parse().unwrap();
    let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
    rustix::process::setrlimit(
        rustix::process::Resource::Nofile,
        rustix::process::Rlimit {
            current: Some(limit),
            maximum: hard,
        },
    )
    .unwrap();
    let fleet = Fleet::new().await;
    // For measuring the reserve by hand: a `max_open` forced past the default.
    let forced: Option<usize> = std::env::var("LEASEHOLD_OPEN_LIMIT_FORCE")
        .ok()
        .map(|v| v.parse().unwrap());
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        if let Some(n) = forced {
            c.max_open = n;
        }
        // The ceiling without passivation: with it, an open at `max_open` lets the least
        // recently used idle tenant go instead of being refused (tests/passivation.rs).
        c.passivate_after = None;
    });
    let mut opened = Vec::new();
    let mut per_tenant = 0;
    let refusal = loop {
        let id = TenantId::new(format!("t{:05}", opened.len())).unwrap();
        let before = fds();
        let t = match a.sup.open(&org(), &id).await {
            Ok(t) => t,
            Err(e) => break e,
        };
        if let Err(e) = insert(&t, "k").await {
            break e;
        }
        if opened.is_empty() {
            per_tenant = fds() - before;
        }
        opened.push((id, t));
    };
    let limit_named = match &refusal {
        Error::OpenLimit { limit } => *limit,
        _ => 0,
    };
    let unflushed = a.sup.close().await.unwrap();
    let mut flushed = 0;
    for (id, _) in &opened {
        if a.flushed(&LeaseKey::new(&org(), id)).await {
            flushed += 1;
        }
    }
    println!(
        "CHILD-OUTCOME opened={} code={} limit={} unflushed={} flushed={} fds_per_tenant={}",
        opened.len(),
        refusal.code(),
        limit_named,
        unflushed.len(),
        flushed,
        per_tenant,
    );
}

#[test]
fn hole16_at_the_descriptor_ceiling_opens_are_refused_and_close_flushes_every_open_tenant() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "hole16_child_process_entry", "--nocapture"])
        .env(CHILD_LIMIT, "600")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CHILD-OUTCOME "))
        .unwrap_or_else(|| {
            panic!(
                "the child said nothing: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    eprintln!("child: {line}");
    let field = |name: &str| -> String {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in {line}"))
            .to_string()
    };
    let opened: usize = field("opened").parse().unwrap();
    assert_eq!(field("code"), "LEASEHOLD_OPEN_LIMIT", "{line}");
    assert_eq!(field("limit").parse::<usize>().unwrap(), opened, "{line}");
    assert!(opened >= 50, "the reserve leaves room for tenants: {line}");
    assert_eq!(field("unflushed"), "0", "{line}");
    assert_eq!(field("flushed").parse::<usize>().unwrap(), opened, "{line}");
}
