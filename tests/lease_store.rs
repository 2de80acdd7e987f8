//! Lease store (docs/guarantees.md, promises 1, 4, 5 and "Late landings"): the SQLite backend
//! passes the conformance suite, the suite catches broken stores, two stores on one file agree on a single winner, a reboot expires
//! every lease of the old boot, and the fault-injecting and deadline wrappers behave.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::join_all;
use leasehold::clock::{Clock, ManualClock};
use leasehold::deadline::Deadline;
use leasehold::durable::StoreError;
use leasehold::ids::{LeaseKey, OrgId, TenantId};
use leasehold::layout::{ImageRef, LogPos};
use leasehold::lease::sqlite::{SqliteLeaseStore, current_boot_id};
use leasehold::lease::{LeaseError, LeaseRecord, LeaseStore, RenewOutcome, SharedLeaseStore};
use leasehold::testkit::{self, FaultyLeaseStore, LeaseHarness, LeaseOp};
use tokio::sync::{Barrier, Notify};

#[path = "lease_store/model.rs"]
mod model;
#[path = "lease_store/replicas.rs"]
mod replicas;

use model::{Flaw, ModelStore, RenewIgnoresEpoch};

const TTL: Duration = Duration::from_secs(10);

/// A lease file of an older build, made private as an operator would (docs/operations.md, "File
/// permissions"): a file the group or others may read is refused.
fn make_private(path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn key(org: &str, tenant: &str) -> LeaseKey {
    LeaseKey::new(&OrgId::new(org).unwrap(), &TenantId::new(tenant).unwrap())
}

fn harness(store: SharedLeaseStore, clock: &ManualClock, org: &str) -> LeaseHarness {
    let clock = clock.clone();
    LeaseHarness {
        store,
        ttl: TTL,
        advance: Box::new(move |by| {
            clock.advance(by);
            async {}.boxed()
        }),
        org: OrgId::new(org).unwrap(),
    }
}

/// A SQLite store on a fresh file, its manual clock, and the directory that holds the file.
fn sqlite_store(boot: &str) -> (SqliteLeaseStore, ManualClock, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(1_000_000);
    let path = dir.path().join("leases.db");
    let store = SqliteLeaseStore::open_with(&path, Arc::new(clock.clone()), boot.into()).unwrap();
    (store, clock, dir)
}

/// The panic message of `check`, which must panic.
async fn violation(check: impl Future<Output = ()>) -> String {
    match AssertUnwindSafe(check).catch_unwind().await {
        Ok(()) => panic!("the conformance check passed a broken store"),
        Err(panic) => panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    }
}

#[tokio::test]
async fn sqlite_store_passes_the_lease_conformance_suite() {
    let (store, clock, _dir) = sqlite_store("boot-test");
    testkit::lease_store_conformance(&harness(Arc::new(store), &clock, "conformance")).await;
}

#[tokio::test]
async fn deadline_and_faulty_wrappers_pass_the_suite_when_nothing_goes_wrong() {
    let (store, clock, _dir) = sqlite_store("boot-test");
    let faulty = FaultyLeaseStore::new(Arc::new(store));
    let wrapped = Deadline::new(faulty.shared(), Duration::from_secs(30)).unwrap();
    testkit::lease_store_conformance(&harness(Arc::new(wrapped), &clock, "wrapped")).await;
}

#[tokio::test]
async fn the_in_memory_model_passes_the_suite_so_the_suite_is_not_sqlite_shaped() {
    let clock = ManualClock::new(0);
    let model = ModelStore::new(&clock, Flaw::None);
    testkit::lease_store_conformance(&harness(Arc::new(model), &clock, "model")).await;
}

#[tokio::test]
async fn hole2_sqlite_head_only_moves_forward_a_late_publish_is_stale() {
    let (store, clock, _dir) = sqlite_store("boot-test");
    let h = harness(Arc::new(store), &clock, "hole2");
    testkit::conformance_head_only_moves_forward(&h).await;
}

#[tokio::test]
async fn hole9_sqlite_a_retried_mark_forgotten_returns_the_record() {
    let (store, clock, _dir) = sqlite_store("boot-test");
    let h = harness(Arc::new(store), &clock, "hole9-forget");
    testkit::conformance_mark_forgotten_retried_returns_the_record(&h).await;
}

#[tokio::test]
async fn hole9_sqlite_a_retried_acquire_recognises_its_own_attempt() {
    let (store, clock, _dir) = sqlite_store("boot-test");
    let h = harness(Arc::new(store), &clock, "hole9-acquire");
    testkit::conformance_acquire_retry_recognises_its_own_attempt(&h).await;
}

#[tokio::test]
async fn hole9_an_acquire_that_timed_out_but_landed_is_recognised_by_its_retry() {
    // The first attempt lands in the store, but its answer comes too late: the caller sees
    // Timeout. Its retry with the same attempt gets the lease instead of Held for a ttl.
    let (store, _clock, _dir) = sqlite_store("boot-test");
    let faulty = FaultyLeaseStore::new(Arc::new(store));
    let gate = Arc::new(Notify::new());
    let wait = gate.clone();
    faulty.after_next(
        LeaseOp::Acquire,
        move || async move { wait.notified().await },
    );
    let bounded = Deadline::new(faulty.shared(), Duration::from_millis(50)).unwrap();
    let k = key("late", "t1");
    let first = bounded.acquire_attempt(&k, "a", TTL, 41).await;
    assert!(
        matches!(&first, Err(e) if e.outcome_unknown()),
        "the caller hears an unknown outcome: {first:?}"
    );
    let landed = faulty
        .inner()
        .read(&k)
        .await
        .unwrap()
        .expect("the attempt landed");
    // The retry under a generous deadline: on a loaded machine an acquire (an fsync of the
    // lease file) may take longer than the 50 ms that made the first one time out.
    let patient = Deadline::new(faulty.shared(), Duration::from_secs(10)).unwrap();
    let retry = patient.acquire_attempt(&k, "a", TTL, 41).await.unwrap();
    assert_eq!((retry.owner.as_str(), retry.epoch), ("a", landed.epoch));
    gate.notify_one();
}

#[tokio::test]
async fn the_suite_fails_a_store_whose_head_moves_back_or_whose_acquire_forgets_its_attempt() {
    let clock = ManualClock::new(0);
    let back = harness(
        Arc::new(ModelStore::new(&clock, Flaw::HeadMovesBack)),
        &clock,
        "m",
    );
    let message = violation(testkit::conformance_head_only_moves_forward(&back)).await;
    assert!(message.contains("the head only moves forward"), "{message}");
    let forgets = harness(
        Arc::new(ModelStore::new(&clock, Flaw::AcquireForgetsAttempt)),
        &clock,
        "m",
    );
    let message =
        violation(testkit::conformance_acquire_retry_recognises_its_own_attempt(&forgets)).await;
    assert!(message.contains("recognises its own attempt"), "{message}");
}

#[tokio::test]
async fn hole9_a_schema_1_lease_file_gains_the_attempt_column_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let old = rusqlite::Connection::open(&path).unwrap();
    old.execute_batch(
        "CREATE TABLE leases (key TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL,
            epoch INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL, boot_id TEXT NOT NULL,
            released INTEGER NOT NULL, floor INTEGER NOT NULL, head_epoch INTEGER,
            head_seq INTEGER, head_sha256 TEXT) STRICT;
         INSERT INTO leases VALUES ('acme/t1', 'a', 4, 0, 'boot-0', 1, 2, NULL, NULL, NULL);
         PRAGMA user_version = 1;",
    )
    .unwrap();
    drop(old);
    make_private(&path);
    let clock = ManualClock::new(10);
    let store = SqliteLeaseStore::open_with(&path, Arc::new(clock), "boot-1".into()).unwrap();
    let k = key("acme", "t1");
    let kept = store.read(&k).await.unwrap().unwrap();
    assert_eq!((kept.epoch, kept.floor), (4, 2));
    let taken = store.acquire_attempt(&k, "b", TTL, 3).await.unwrap();
    assert_eq!(taken.epoch, 5);
    let retry = store.acquire_attempt(&k, "b", TTL, 3).await.unwrap();
    assert_eq!(retry.epoch, 5);
    drop(store);
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, 5);
}

#[tokio::test]
async fn a_schema_3_lease_file_gains_the_pending_erasures_and_keeps_its_leases() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let old = rusqlite::Connection::open(&path).unwrap();
    old.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE leases (key TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL,
            epoch INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL, boot_id TEXT NOT NULL,
            released INTEGER NOT NULL, floor INTEGER NOT NULL, head_epoch INTEGER,
            head_seq INTEGER, head_sha256 TEXT, attempt INTEGER, tip_epoch INTEGER,
            tip_seq INTEGER) STRICT;
         INSERT INTO leases VALUES ('acme/t1', 'a', 4, 500, 'boot-1', 0, 2, NULL, NULL, NULL, 7,
            4, 9);
         PRAGMA user_version = 3;",
    )
    .unwrap();
    drop(old);
    make_private(&path);
    let clock = ManualClock::new(10);
    let store =
        SqliteLeaseStore::open_with(&path, Arc::new(clock.clone()), "boot-1".into()).unwrap();
    let k = key("acme", "t1");
    let kept = store.read(&k).await.unwrap().unwrap();
    assert_eq!(
        (kept.epoch, kept.floor, kept.tip.map(|t| t.seq)),
        (4, 2, Some(9))
    );
    let forgotten = store.mark_forgotten(&k, "a", 4).await.unwrap();
    assert_eq!(forgotten.floor, 4);
    clock.advance(TTL);
    let due = store.erasures_due(TTL, 10).await.unwrap();
    assert_eq!(due.iter().map(|e| e.floor).collect::<Vec<_>>(), vec![4]);
    drop(store);
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, 5);
}

#[tokio::test]
async fn a_schema_2_lease_file_gains_the_log_tip_and_keeps_its_leases() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let old = rusqlite::Connection::open(&path).unwrap();
    old.execute_batch(
        "PRAGMA journal_mode = WAL;
         CREATE TABLE leases (key TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL,
            epoch INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL, boot_id TEXT NOT NULL,
            released INTEGER NOT NULL, floor INTEGER NOT NULL, head_epoch INTEGER,
            head_seq INTEGER, head_sha256 TEXT, attempt INTEGER) STRICT;
         INSERT INTO leases VALUES ('acme/t1', 'a', 4, 500, 'boot-1', 0, 2, 4, 1, 'ab', 7);
         PRAGMA user_version = 2;",
    )
    .unwrap();
    drop(old);
    make_private(&path);
    let clock = ManualClock::new(10);
    let store = SqliteLeaseStore::open_with(&path, Arc::new(clock), "boot-1".into()).unwrap();
    let k = key("acme", "t1");
    let kept = store.read(&k).await.unwrap().unwrap();
    let fields = (kept.owner.as_str(), kept.epoch, kept.floor, kept.released);
    assert_eq!(fields, ("a", 4, 2, false), "the live lease is kept");
    assert_eq!((kept.head.map(|h| h.seq), kept.tip), (Some(1), None));
    let retry = store.acquire_attempt(&k, "a", TTL, 7).await.unwrap();
    assert_eq!(retry.epoch, 4, "its attempt is kept too");
    let to = LogPos { epoch: 4, seq: 1 };
    let moved = store.move_tip(&k, "a", 4, None, to).await.unwrap();
    assert_eq!(moved.tip, Some(to));
    drop(store);
    let reopened = SqliteLeaseStore::open(&path).unwrap();
    assert_eq!(reopened.read(&k).await.unwrap().unwrap().tip, Some(to));
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, 5);
}

#[tokio::test]
async fn the_suite_fails_a_store_whose_tip_move_ignores_the_tip_seen() {
    let clock = ManualClock::new(0);
    let model = ModelStore::new(&clock, Flaw::TipIgnoresFrom);
    let h = harness(Arc::new(model), &clock, "m");
    let check = testkit::conformance_tip_moves_by_exactly_one_segment_from_the_tip_seen(&h);
    let message = violation(check).await;
    assert!(
        message.contains("a move from a tip not reached"),
        "{message}"
    );
    let check = testkit::conformance_a_new_tenure_continues_the_tip_and_the_old_one_cannot(&h);
    let message = violation(check).await;
    assert!(message.contains("B restarts the log"), "{message}");
}

#[tokio::test]
async fn the_suite_fails_a_store_that_reports_an_erasure_due_before_its_settle_time() {
    let clock = ManualClock::new(0);
    let model = ModelStore::new(&clock, Flaw::ErasureDueAtOnce);
    let h = harness(Arc::new(model), &clock, "m");
    let check = testkit::conformance_a_forget_leaves_an_erasure_due_after_the_settle_time(&h);
    let message = violation(check).await;
    assert!(message.contains("due at once"), "{message}");
}

#[tokio::test]
async fn the_suite_fails_a_store_whose_listing_starts_after_its_from() {
    let clock = ManualClock::new(0);
    let model = ModelStore::new(&clock, Flaw::ListStartsAfterFrom);
    let h = harness(Arc::new(model), &clock, "m");
    let check =
        testkit::conformance_a_listing_pages_every_lease_once_as_the_store_clock_sees_it(&h);
    let message = violation(check).await;
    assert!(message.contains("the keys seen, in order"), "{message}");
}

#[tokio::test]
async fn the_suite_fails_a_store_whose_renew_ignores_the_epoch() {
    let (store, clock, _dir) = sqlite_store("boot-test");
    let broken = Arc::new(RenewIgnoresEpoch(store));
    let h = harness(broken, &clock, "broken-renew");
    let message = violation(testkit::conformance_renew_refuses_a_wrong_tenure(&h)).await;
    assert!(
        message.contains("renew refuses a wrong tenure"),
        "{message}"
    );
    assert!(message.contains("renew with a later epoch"), "{message}");
    violation(testkit::lease_store_conformance(&h)).await;
}

#[tokio::test]
async fn the_suite_fails_a_store_whose_acquire_ignores_expiry_by_the_store_clock() {
    let clock = ManualClock::new(0);
    let h = harness(
        Arc::new(ModelStore::new(&clock, Flaw::AcquireIgnoresExpiry)),
        &clock,
        "m",
    );
    let message = violation(testkit::conformance_expiry_by_store_time_frees_the_key(&h)).await;
    assert!(
        message.contains("expiry by store time frees the key"),
        "{message}"
    );
}

#[tokio::test]
async fn the_suite_fails_a_store_that_reuses_an_epoch_after_a_forget() {
    let clock = ManualClock::new(0);
    let h = harness(
        Arc::new(ModelStore::new(&clock, Flaw::ReuseEpochAfterForget)),
        &clock,
        "m",
    );
    let message = violation(testkit::conformance_epochs_are_never_reused(&h)).await;
    assert!(message.contains("epochs are never reused"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_on_one_file_grant_each_epoch_to_exactly_one_of_eight_racers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let processes = [
        Arc::new(SqliteLeaseStore::open(&path).unwrap()),
        Arc::new(SqliteLeaseStore::open(&path).unwrap()),
    ];
    let k = key("race", "t1");
    for round in 1..=50u64 {
        let start = Arc::new(Barrier::new(8));
        let racers = (0..8).map(|i| {
            let (store, k, start) = (Arc::clone(&processes[i % 2]), k.clone(), Arc::clone(&start));
            tokio::spawn(async move {
                start.wait().await;
                store
                    .acquire(&k, &format!("racer-{i}"), Duration::from_secs(60))
                    .await
            })
        });
        let results: Vec<_> = join_all(racers)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let winners: Vec<&LeaseRecord> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {results:?}");
        let winner = winners[0];
        assert_eq!(
            winner.epoch, round,
            "one acquisition per round, epochs consecutive"
        );
        for lost in results.iter().filter_map(|r| r.as_ref().err()) {
            let want = LeaseError::Held {
                key: k.to_string(),
                owner: winner.owner.clone(),
                epoch: round,
            };
            assert_eq!(lost, &want, "round {round}");
        }
        processes[0]
            .release(&k, &winner.owner, round)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_lease_written_in_another_boot_is_expired() {
    let (before, clock, dir) = sqlite_store("boot-a");
    let k = key("reboot", "t1");
    let old = before
        .acquire(&k, "old-owner", Duration::from_secs(3_600))
        .await
        .unwrap();
    assert_eq!(old.epoch, 1);
    let path = dir.path().join("leases.db");
    let after =
        SqliteLeaseStore::open_with(&path, Arc::new(clock.clone()), "boot-b".into()).unwrap();
    let refused = after.renew(&k, "old-owner", 1, TTL).await;
    assert!(
        matches!(refused, Err(LeaseError::NotHeld { .. })),
        "{refused:?}"
    );
    let next = after.acquire(&k, "new-owner", TTL).await.unwrap();
    assert_eq!((next.owner.as_str(), next.epoch), ("new-owner", 2));
}

#[tokio::test]
async fn the_default_store_judges_expiry_by_the_real_monotonic_clock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leases.db");
    let store = SqliteLeaseStore::open(&path).unwrap();
    assert_eq!(store.boot_id(), current_boot_id());
    let k = key("real-clock", "t1");
    let ttl = Duration::from_millis(300);
    let first = store.acquire(&k, "a", ttl).await.unwrap();
    let now = leasehold::SystemClock.now_ms();
    assert!(
        first.expires_at_ms > now && first.expires_at_ms <= now + 300,
        "{first:?} at {now}"
    );
    let other = SqliteLeaseStore::open(&path).unwrap();
    assert!(matches!(
        other.acquire(&k, "b", ttl).await,
        Err(LeaseError::Held { .. })
    ));
    tokio::time::sleep(Duration::from_millis(400)).await; // real time is the point here
    assert_eq!(other.acquire(&k, "b", ttl).await.unwrap().epoch, 2);
}

#[tokio::test]
async fn epochs_floor_and_head_survive_reopening_the_file() {
    let (store, clock, dir) = sqlite_store("boot-test");
    let k = key("reopen", "t1");
    store.acquire(&k, "a", TTL).await.unwrap();
    store.mark_forgotten(&k, "a", 1).await.unwrap();
    store.release(&k, "a", 1).await.unwrap();
    drop(store);
    let path = dir.path().join("leases.db");
    let reopened = SqliteLeaseStore::open_with(&path, Arc::new(clock), "boot-test".into()).unwrap();
    let next = reopened.acquire(&k, "b", TTL).await.unwrap();
    assert_eq!((next.epoch, next.floor), (2, 1));
}

#[tokio::test]
async fn opening_a_file_that_cannot_exist_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    // A missing directory is created (0700); one under a file cannot be.
    std::fs::write(dir.path().join("a-file"), b"x").unwrap();
    let refused = SqliteLeaseStore::open(&dir.path().join("a-file").join("leases.db"));
    match refused {
        Err(LeaseError::Store(StoreError::Io { op: "open", .. })) => {}
        other => panic!("want an i/o error, got {other:?}"),
    }
}

#[tokio::test]
async fn debug_output_names_the_file_and_stays_short() {
    let (store, _clock, _dir) = sqlite_store("boot-test");
    let shown = format!("{store:?}");
    assert!(shown.contains("leases.db") && shown.len() < 300, "{shown}");
}

#[tokio::test]
async fn an_outage_fails_every_call_without_reaching_the_store() {
    let (store, _clock, _dir) = sqlite_store("boot-test");
    let faulty = FaultyLeaseStore::new(Arc::new(store));
    let k = key("outage", "t1");
    faulty.set_down(true);
    let refused = faulty.acquire(&k, "a", TTL).await;
    let want = |op| StoreError::Unavailable {
        op,
        message: "outage injected by FaultyLeaseStore".into(),
    };
    assert_eq!(refused, Err(LeaseError::Store(want("acquire"))));
    assert_eq!(faulty.read(&k).await, Err(LeaseError::Store(want("read"))));
    assert_eq!(
        faulty.list(None, 10).await,
        Err(LeaseError::Store(want("list")))
    );
    assert_eq!(
        faulty.inner().read(&k).await,
        Ok(None),
        "nothing reached the store"
    );
    faulty.set_down(false);
    assert_eq!(faulty.acquire(&k, "a", TTL).await.unwrap().epoch, 1);
    assert_eq!(LeaseOp::ALL.len(), 17);
}

#[tokio::test]
async fn held_renewals_wait_and_are_counted_until_released() {
    let (store, _clock, _dir) = sqlite_store("boot-test");
    let faulty = FaultyLeaseStore::new(Arc::new(store));
    let k = key("held", "t1");
    faulty.acquire(&k, "a", TTL).await.unwrap();
    faulty.hold_renewals();
    let (one, many) = (faulty.clone(), faulty.clone());
    let (k1, k2) = (k.clone(), k.clone());
    let renew = tokio::spawn(async move { one.renew(&k1, "a", 1, TTL).await });
    let renew_many = tokio::spawn(async move { many.renew_many("a", &[(k2, 1)], TTL).await });
    while faulty.renewals_started() < 2 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !renew.is_finished() && !renew_many.is_finished(),
        "renewals wait while held"
    );
    faulty.release_renewals();
    assert_eq!(renew.await.unwrap().unwrap().epoch, 1);
    assert_eq!(
        renew_many.await.unwrap().unwrap(),
        vec![RenewOutcome::Renewed]
    );
    assert_eq!(faulty.renewals_started(), 2);
}

#[tokio::test]
async fn an_after_hook_pauses_the_forgetting_owner_while_a_successor_takes_over() {
    let (store, clock, _dir) = sqlite_store("boot-test");
    let faulty = FaultyLeaseStore::new(Arc::new(store));
    let k = key("after-hook", "t1");
    faulty.acquire(&k, "a", TTL).await.unwrap();
    let (paused, resume) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (p, r) = (Arc::clone(&paused), Arc::clone(&resume));
    faulty.after_next(LeaseOp::MarkForgotten, move || async move {
        p.notify_one();
        r.notified().await;
    });
    let forgetter = faulty.clone();
    let k1 = k.clone();
    let forget = tokio::spawn(async move { forgetter.mark_forgotten(&k1, "a", 1).await });
    paused.notified().await;
    clock.advance(TTL);
    let successor = faulty.acquire(&k, "b", TTL).await.unwrap();
    assert_eq!(
        (successor.epoch, successor.floor),
        (2, 1),
        "the forget committed first"
    );
    resume.notify_one();
    assert_eq!(
        forget.await.unwrap().unwrap().floor,
        1,
        "the inner result is handed back"
    );
    let again = faulty.mark_forgotten(&k, "b", 2).await.unwrap();
    assert_eq!(
        again.floor, 2,
        "the hook ran once; the second call went straight through"
    );
}

#[tokio::test]
async fn a_before_hook_runs_once_before_the_call_and_can_start_an_outage() {
    let (store, _clock, _dir) = sqlite_store("boot-test");
    let faulty = FaultyLeaseStore::new(Arc::new(store));
    let k = key("before-hook", "t1");
    let record = faulty.acquire(&k, "a", TTL).await.unwrap();
    let switch = faulty.clone();
    faulty.before_next(LeaseOp::PublishHead, move || async move {
        switch.set_down(true)
    });
    let image = ImageRef {
        epoch: 1,
        seq: 1,
        sha256: "00".repeat(32),
    };
    let refused = faulty.publish_head(&k, "a", 1, &image).await;
    assert!(matches!(
        refused,
        Err(LeaseError::Store(StoreError::Unavailable {
            op: "publish_head",
            ..
        }))
    ));
    faulty.set_down(false);
    assert_eq!(
        faulty.read(&k).await.unwrap(),
        Some(record),
        "the head did not move"
    );
    assert_eq!(
        faulty.publish_head(&k, "a", 1, &image).await.unwrap().head,
        Some(image)
    );
}
