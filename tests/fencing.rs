//! Promise 1 beyond the predecessor's checks: a run whose lease lapses before its commit is rolled
//! back (nothing reaches the local file) and its caller gets `Fenced`; runs that wait together
//! commit together, each in its own savepoint; every store call is bounded by its deadline.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use leasehold::Error;
use leasehold::LeaseStore;
use leasehold::ledger::{LedgerError, NewEvent};

fn count_on_disk(file: &std::path::Path, idem: &str) -> i64 {
    let conn =
        rusqlite::Connection::open_with_flags(file, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row(
        "SELECT count(*) FROM events WHERE idem_key = ?1",
        [idem],
        |r| r.get(0),
    )
    .unwrap()
}

#[actix_rt::test]
async fn a_run_whose_lease_lapses_before_commit_is_rolled_back_and_fenced() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    insert(&t, "kept").await.unwrap();
    let clock = a.clock.clone().unwrap();
    let outcome = t
        .run(move |l| {
            l.insert_event(&NewEvent::new("test", "doomed"))?;
            // The lease runs out while the run is inside its bracket.
            clock.advance(TTL);
            Ok(())
        })
        .await;
    assert!(
        matches!(outcome, Err(Error::Fenced { .. })),
        "got {outcome:?}"
    );
    let file = a.ledger_file();
    assert_eq!(
        count_on_disk(&file, "doomed"),
        0,
        "nothing of the fenced run was committed"
    );
    assert_eq!(count_on_disk(&file, "kept"), 1);
}

/// A manual clock that, once armed, reads normally `n` more times and then jumps past the lease.
#[derive(Debug, Clone)]
struct JumpClock {
    base: leasehold::ManualClock,
    reads_left: Arc<std::sync::atomic::AtomicI64>,
}

impl JumpClock {
    fn arm(&self, n: i64) {
        self.reads_left
            .store(n, std::sync::atomic::Ordering::SeqCst);
    }
}

impl leasehold::Clock for JumpClock {
    fn now_ms(&self) -> u64 {
        let left = self
            .reads_left
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        let jump = if left <= 0 && left > i64::MIN / 2 {
            TTL.as_millis() as u64
        } else {
            0
        };
        self.base.now_ms() + jump
    }
}

#[actix_rt::test]
async fn a_run_whose_lease_lapses_during_its_commit_is_reported_fenced_and_ends_the_tenure() {
    let fleet = Fleet::with_store_clock().await;
    fleet.assert_store_clock_is_manual();
    let clock = JumpClock {
        base: leasehold::ManualClock::new(5_000),
        reads_left: Arc::new(std::sync::atomic::AtomicI64::new(i64::MIN)),
    };
    let c2 = clock.clone();
    let a = fleet.replica_with("replica-a", "replica-a", move |c| {
        images(c);
        c.clock = Arc::new(c2);
        // The test counts the clock's reads of one run (below); no idle check reads it between.
        c.passivate_after = None;
    });
    let t = a.open().await;
    insert(&t, "kept").await.unwrap();
    // Reads: the run's activity stamp (passivation's idle bookkeeping), the admission check and
    // the check before COMMIT see the lease; the one after does not.
    clock.arm(3);
    let outcome = insert(&t, "late").await;
    assert!(
        matches!(outcome, Err(Error::Fenced { .. })),
        "got {outcome:?}"
    );
    assert!(
        a.saw(|e| matches!(e, leasehold_actors::Event::Lost { .. }))
            .await,
        "the tenure ended"
    );
    assert_eq!(t.status().await, leasehold_actors::TenantStatus::Abandoned);
    let b = fleet.replica_images("replica-b");
    fleet.advance(TTL + Duration::from_millis(1));
    let next = b.open().await;
    assert_eq!(
        keys_of(&next).await,
        Vec::<String>::new(),
        "nothing of the lapsed tenure counts"
    );
}

#[actix_rt::test]
async fn an_image_in_flight_when_a_commit_lapses_is_never_published() {
    let fleet = Fleet::new().await;
    let clock = JumpClock {
        base: leasehold::ManualClock::new(5_000),
        reads_left: Arc::new(std::sync::atomic::AtomicI64::new(i64::MIN)),
    };
    let c2 = clock.clone();
    let a = fleet.replica_with("replica-a", "replica-a", move |c| {
        images(c);
        c.clock = Arc::new(c2);
    });
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    let (held, mut gate) = gated();
    fleet.durable.before_next_put_matching(is_image, held);
    let uploading = actix_rt::spawn(t.snapshot());
    gate.reached().await;
    // The admission and pre-commit reads see the lease; the post-commit read finds it gone.
    clock.arm(2);
    let late = insert(&t, "late").await;
    assert!(matches!(late, Err(Error::Fenced { .. })), "got {late:?}");
    gate.open();
    let published = within(3_000, "the snapshot", uploading).await.unwrap();
    assert!(
        published.is_err(),
        "the image of an ended tenure is not published: {published:?}"
    );
    let record = fleet.leases.read(&key()).await.unwrap().unwrap();
    assert_eq!(record.head, None, "the head did not move");
}

#[actix_rt::test]
async fn concurrent_runs_each_commit_atomically_and_a_failing_one_rolls_back_alone() {
    let fleet = Fleet::new().await;
    let a = fleet.replica("replica-a");
    let t = a.open().await;
    let calls: Vec<_> = (0..32)
        .map(|i| {
            let event = NewEvent::new("test", format!("k-{i:02}"));
            t.run(move |l| {
                l.insert_event(&event)?;
                if i == 7 {
                    return Err(LedgerError::Host("run 7 gives up".into()));
                }
                Ok(i)
            })
        })
        .collect();
    let outcomes = futures::future::join_all(calls).await;
    for (i, outcome) in outcomes.iter().enumerate() {
        match i {
            7 => assert!(matches!(outcome, Err(Error::Ledger(LedgerError::Host(_))))),
            _ => assert_eq!(outcome.as_ref().ok(), Some(&i)),
        }
    }
    let keys = keys_of(&t).await;
    assert_eq!(keys.len(), 31);
    assert!(
        !keys.contains(&"k-07".to_string()),
        "only the failing run was rolled back"
    );
}

#[actix_rt::test]
async fn a_store_call_that_never_returns_is_bounded_by_its_deadline() {
    let fleet = Fleet::new().await;
    let a = fleet.replica_with("replica-a", "replica-a", |c| {
        images(c);
        c.store_deadline = Duration::from_millis(200)
    });
    let t = a.open().await;
    insert(&t, "k-1").await.unwrap();
    fleet.durable.hang_puts(true);
    let started = Instant::now();
    let outcome = within(5_000, "a snapshot over a hung store", t.snapshot()).await;
    assert!(
        matches!(
            outcome,
            Err(Error::Store(leasehold::durable::StoreError::Timeout { .. }))
        ),
        "got {outcome:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "settled by the deadline, took {:?}",
        started.elapsed()
    );
    let handoff = within(5_000, "a handoff over a hung store", t.handoff()).await;
    assert!(
        handoff.is_err(),
        "the handoff fails and the tenant serves again"
    );
    fleet.durable.hang_puts(false);
    insert(&t, "k-2").await.unwrap();
    t.handoff().await.unwrap();
}

#[actix_rt::test]
async fn a_zero_store_deadline_is_refused() {
    let fleet = Arc::new(Fleet::new().await);
    let mut cfg = leasehold_actors::RuntimeConfig::new(
        leasehold::ReplicaId::new("replica-x").unwrap(),
        fleet.dir.path().join("x"),
        fleet.leases.shared(),
        fleet.durable.shared(),
    );
    cfg.store_deadline = Duration::ZERO;
    let refused = leasehold_actors::Supervisor::start(cfg).map(|_| ());
    assert!(
        matches!(
            refused,
            Err(Error::InvalidOption {
                name: "store_deadline",
                ..
            })
        ),
        "{refused:?}"
    );
}
