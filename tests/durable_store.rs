//! The durable store: [`DirStore`] against the conformance suite, a broken store shown to fail
//! it, the predecessor's P2, crash safety of the staging directory, and each fault of
//! [`FaultyStore`].

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use futures::FutureExt;
use leasehold::deadline::Deadline;
use leasehold::durable::dir::{DirStore, STAGING_DIR, STALE_STAGING};
use leasehold::durable::{Put, SharedDurableStore, StoreError};
use leasehold::image::{fetch_restorable, take_image, upload_image};
use leasehold::sweep::sweep_dead_epochs;
use leasehold::testkit::{
    FaultyStore, INJECTED_OUTAGE, LatePuts, MemStore, Pace, StoreOp,
    conformance_delete_prefix_takes_whole_segments, durable_store_conformance,
};
use leasehold::{DurableStore, LeaseKey};
use tempfile::TempDir;

fn dir_store() -> (TempDir, DirStore) {
    let dir = tempfile::tempdir().unwrap();
    // The root of a durable directory must be private (docs/operations.md, "File permissions").
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let store = DirStore::open(dir.path()).unwrap();
    (dir, store)
}

fn faulty() -> (TempDir, FaultyStore) {
    let (dir, store) = dir_store();
    (dir, FaultyStore::new(Arc::new(store)))
}

fn outage(op: &'static str) -> StoreError {
    StoreError::Unavailable {
        op,
        message: INJECTED_OUTAGE.to_string(),
    }
}

/// A store that deletes by raw string prefix, without the whole-segment check.
#[derive(Debug)]
struct RawPrefixStore(DirStore);

#[async_trait]
impl DurableStore for RawPrefixStore {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        self.0.put_if_absent(key, bytes).await
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.0.get(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.0.list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.0.delete(key).await
    }
    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        let doomed: Vec<String> = (self.0.list("").await?.into_iter())
            .filter(|k| k.starts_with(prefix))
            .collect();
        for key in &doomed {
            self.0.delete(key).await?;
        }
        Ok(doomed.len())
    }
}

#[tokio::test]
async fn dir_store_passes_the_durable_conformance_suite() {
    let (dir, store) = dir_store();
    durable_store_conformance(&store, "conf-dir").await;
    assert!(store.list("").await.unwrap().is_empty());
    // Only the staging directory is left, and it is empty.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1);
    assert_eq!(
        std::fs::read_dir(dir.path().join(STAGING_DIR))
            .unwrap()
            .count(),
        0
    );
}

#[tokio::test]
async fn faulty_store_without_faults_passes_the_durable_conformance_suite() {
    let (_dir, store) = faulty();
    durable_store_conformance(&store, "conf-faulty").await;
}

#[tokio::test]
async fn a_store_deleting_by_raw_prefix_fails_the_whole_segment_check() {
    let (_dir, store) = dir_store();
    let broken = RawPrefixStore(store);
    let check = conformance_delete_prefix_takes_whole_segments(&broken, "conf-broken");
    let panic = AssertUnwindSafe(check).catch_unwind().await.unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("delete_prefix takes whole segments only"),
        "{message}"
    );
}

#[tokio::test]
async fn p2_delete_by_prefix_takes_whole_segments_only() {
    let (_dir, store) = dir_store();
    let put = |k: &'static str| store.put_if_absent(k, b"x".to_vec());
    assert_eq!(
        put("acme/t1/e00000001/snap-000001.db").await,
        Ok(Put::Created)
    );
    assert_eq!(
        put("acme2/t9/e00000001/snap-000001.db").await,
        Ok(Put::Created)
    );
    assert!(matches!(
        store.delete_prefix("acme").await,
        Err(StoreError::InvalidKey { .. })
    ));
    assert_eq!(store.list("acme/").await.unwrap().len(), 1, "nothing went");
    assert_eq!(
        store.list("acme2/").await.unwrap().len(),
        1,
        "the neighbour stays"
    );
    assert_eq!(store.delete_prefix("acme/").await, Ok(1));
    assert_eq!(
        store.list("").await.unwrap(),
        vec!["acme2/t9/e00000001/snap-000001.db"]
    );
}

#[tokio::test]
async fn a_leftover_staging_file_is_never_listed_nor_returned() {
    let (dir, store) = dir_store();
    // What a crash between the staging write and the link leaves behind.
    let leftover = dir.path().join(STAGING_DIR).join("4242-0-1.tmp");
    std::fs::write(&leftover, b"half an ima").unwrap();
    assert!(store.list("").await.unwrap().is_empty());
    let key = "acme/t1/e00000001/snap-000001.db";
    assert_eq!(store.get(key).await, Ok(None));
    assert_eq!(
        store.put_if_absent(key, b"whole".to_vec()).await,
        Ok(Put::Created)
    );
    assert_eq!(store.list("").await.unwrap(), vec![key]);
    assert_eq!(store.get(key).await, Ok(Some(b"whole".to_vec())));
    // A fresh leftover may be a put in flight elsewhere: opening again keeps it.
    DirStore::open(dir.path()).unwrap();
    assert!(leftover.exists());
}

/// Promise 5 (delete means delete): a crash's staging leftover holds an image's bytes; the
/// `delete_prefix` of its key's prefix (a forget's sweep) takes it at once, not an hour later at
/// some next open, and leaves the leftovers of other prefixes alone.
#[tokio::test]
async fn p5_delete_prefix_takes_the_staging_leftovers_of_keys_under_it() {
    let (dir, store) = dir_store();
    let staging = dir.path().join(STAGING_DIR);
    let mine = staging.join("4242-0-1~acme+t1+e00000001+snap-000001.db.tmp");
    let theirs = staging.join("4242-1-1~acme+t10+e00000001+snap-000001.db.tmp");
    let unnamed = staging.join("4242-2-1.tmp");
    for leftover in [&mine, &theirs, &unnamed] {
        std::fs::write(leftover, b"half an image").unwrap();
    }
    assert_eq!(store.delete_prefix("acme/t1/").await, Ok(0), "no object");
    assert!(
        !mine.exists(),
        "the leftover of acme/t1/ went with its prefix"
    );
    assert!(theirs.exists() && unnamed.exists(), "others stay");
}

#[tokio::test]
async fn a_stale_staging_file_goes_when_the_store_opens() {
    let (dir, _store) = dir_store();
    let leftover = dir.path().join(STAGING_DIR).join("4242-0-1.tmp");
    std::fs::write(&leftover, b"half").unwrap();
    let long_ago = SystemTime::now() - STALE_STAGING - Duration::from_secs(60);
    let file = std::fs::File::options()
        .write(true)
        .open(&leftover)
        .unwrap();
    file.set_modified(long_ago).unwrap();
    DirStore::open(dir.path()).unwrap();
    assert!(!leftover.exists());
}

#[tokio::test]
async fn a_put_of_ten_mib_round_trips_and_survives_a_reopen() {
    let (dir, store) = dir_store();
    let bytes: Vec<u8> = (0..10 * 1024 * 1024).map(|i| (i % 253) as u8).collect();
    let key = "acme/t1/e00000001/snap-000001.db";
    assert_eq!(
        store.put_if_absent(key, bytes.clone()).await,
        Ok(Put::Created)
    );
    let again = DirStore::open(dir.path()).unwrap();
    assert!(again.get(key).await.unwrap() == Some(bytes));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn puts_racing_deletes_that_prune_their_directory_still_land() {
    let (_dir, store) = dir_store();
    let store = Arc::new(store);
    for round in 0..50 {
        let old = format!("acme/t1/e00000001/snap-{round:06}.db");
        let new = format!("acme/t1/e00000001/snap-{:06}.db", round + 1);
        store.put_if_absent(&old, vec![1]).await.unwrap();
        // Deleting the only object prunes the directory the racing put needs.
        let (s1, s2) = (store.clone(), store.clone());
        let delete = tokio::spawn(async move { s1.delete(&old).await });
        let put = tokio::spawn(async move { s2.put_if_absent(&new, vec![2]).await });
        assert_eq!(delete.await.unwrap(), Ok(()));
        assert_eq!(put.await.unwrap(), Ok(Put::Created), "round {round}");
        store.delete_prefix("acme/").await.unwrap();
    }
}

#[tokio::test]
async fn a_symlink_inside_the_root_is_never_followed() {
    let (dir, store) = dir_store();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"outside").unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("lnk")).unwrap();
    assert!(matches!(
        store.get("lnk/secret").await,
        Err(StoreError::Io { .. })
    ));
    assert!(matches!(
        store.put_if_absent("lnk/new", b"x".to_vec()).await,
        Err(StoreError::Io { .. })
    ));
    assert!(matches!(
        store.delete("lnk/secret").await,
        Err(StoreError::Io { .. })
    ));
    assert!(matches!(
        store.list("lnk/").await,
        Err(StoreError::Io { .. })
    ));
    assert!(
        store.list("").await.unwrap().is_empty(),
        "a symlink is no object"
    );
    // Deleting a tree that holds the link removes the link only.
    std::fs::create_dir(dir.path().join("acme")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("acme/lnk")).unwrap();
    assert_eq!(store.delete_prefix("acme/").await, Ok(0));
    assert!(!dir.path().join("acme").exists());
    assert_eq!(
        std::fs::read(outside.path().join("secret")).unwrap(),
        b"outside"
    );
    assert!(!outside.path().join("new").exists());
}

#[tokio::test]
async fn faulty_outage_fails_every_call_and_touches_nothing() {
    let (_dir, store) = faulty();
    store.put_if_absent("a/k", b"k".to_vec()).await.unwrap();
    store.set_down(true);
    assert_eq!(
        store.put_if_absent("a/j", vec![]).await,
        Err(outage("put_if_absent"))
    );
    assert_eq!(store.get("a/k").await, Err(outage("get")));
    assert_eq!(store.list("a/").await, Err(outage("list")));
    assert_eq!(store.delete("a/k").await, Err(outage("delete")));
    assert_eq!(
        store.delete_prefix("a/").await,
        Err(outage("delete_prefix"))
    );
    store.set_down(false);
    assert_eq!(store.list("").await.unwrap(), vec!["a/k"]);
    assert_eq!((store.puts(), store.deletes()), (1, 0));
}

#[tokio::test]
async fn faulty_slow_put_delays_only_matching_keys() {
    let (_dir, store) = faulty();
    let delay = Duration::from_millis(400);
    store.slow_put(|k| k.ends_with(".db"), delay);
    let started = Instant::now();
    store
        .put_if_absent("a/snap-000001.json", vec![1])
        .await
        .unwrap();
    assert!(started.elapsed() < delay, "a manifest is not slowed");
    let started = Instant::now();
    store
        .put_if_absent("a/snap-000001.db", vec![1])
        .await
        .unwrap();
    assert!(started.elapsed() >= delay, "an image is slowed");
    store.clear_slow_put();
    let started = Instant::now();
    store
        .put_if_absent("a/snap-000002.db", vec![1])
        .await
        .unwrap();
    assert!(started.elapsed() < delay, "cleared");
}

#[tokio::test]
async fn faulty_fail_next_delete_fails_once_and_deletes_nothing() {
    let (_dir, store) = faulty();
    store.put_if_absent("a/k", b"k".to_vec()).await.unwrap();
    store.fail_next_delete();
    assert!(matches!(
        store.delete_prefix("a/").await,
        Err(StoreError::Unavailable {
            op: "delete_prefix",
            ..
        })
    ));
    assert_eq!(store.list("").await.unwrap(), vec!["a/k"]);
    assert_eq!(store.deletes(), 0);
    store.delete("a/k").await.unwrap();
    assert!(store.list("").await.unwrap().is_empty());
    assert_eq!(store.deletes(), 1);
}

#[tokio::test]
async fn faulty_hook_runs_once_before_its_op_and_may_switch_the_outage_on() {
    let (_dir, store) = faulty();
    let runs = Arc::new(AtomicUsize::new(0));
    let (handle, counter) = (store.clone(), runs.clone());
    store.before_next(
        StoreOp::List,
        Box::new(move || {
            async move {
                counter.fetch_add(1, Ordering::SeqCst);
                handle.set_down(true);
            }
            .boxed()
        }),
    );
    store.get("a/k").await.unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a get does not take a list hook"
    );
    assert_eq!(store.list("").await, Err(outage("list")));
    store.set_down(false);
    assert_eq!(store.list("").await, Ok(vec![]));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "one-shot");
}

#[tokio::test]
async fn faulty_put_hook_matching_fires_only_on_a_matching_key() {
    let (_dir, store) = faulty();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (handle, log) = (store.clone(), seen.clone());
    store.before_next_put_matching(
        |k| k.ends_with(".db"),
        Box::new(move || {
            async move {
                // "While the upload is in flight": the manifest is not there yet.
                let listed = handle.inner().list("").await.unwrap();
                log.lock().unwrap().push(listed);
            }
            .boxed()
        }),
    );
    store
        .put_if_absent("a/snap-000001.json", vec![])
        .await
        .unwrap();
    assert!(seen.lock().unwrap().is_empty());
    store
        .put_if_absent("a/snap-000001.db", vec![])
        .await
        .unwrap();
    store
        .put_if_absent("a/snap-000002.db", vec![])
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![vec!["a/snap-000001.json"]]);
}

#[tokio::test]
async fn faulty_hung_puts_do_not_return_until_released() {
    let (_dir, store) = faulty();
    store.hang_puts(true);
    let hung = tokio::time::timeout(
        Duration::from_millis(200),
        store.put_if_absent("a/k", vec![]),
    );
    assert!(hung.await.is_err(), "a hung put does not return");
    let waiting = tokio::spawn({
        let store = store.clone();
        async move { store.put_if_absent("a/k", vec![]).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished());
    store.hang_puts(false);
    assert_eq!(waiting.await.unwrap(), Ok(Put::Created));
    assert_eq!(store.puts(), 1, "the abandoned put never reached the store");
}

#[tokio::test]
async fn faulty_store_is_shared_by_its_clones() {
    let (_dir, store) = faulty();
    let runtime_side: SharedDurableStore = store.shared();
    store.set_down(true);
    assert_eq!(runtime_side.get("a/k").await, Err(outage("get")));
    store.set_down(false);
    runtime_side.put_if_absent("a/k", vec![]).await.unwrap();
    runtime_side.delete("a/k").await.unwrap();
    assert_eq!((store.puts(), store.deletes()), (1, 1));
}

// ---- late puts, sized gets (docs/guarantees.md, promise 5 and 6) ---------------------------------

const SETTLE: Duration = Duration::from_secs(30);

/// Hole 6: a put that outlived its deadline lands after the caller heard `Timeout`;
/// `settle_puts` waits until it has landed, and a sweep after it deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p5_a_put_past_its_deadline_lands_later_and_settle_puts_waits_for_it_before_the_sweep() {
    let (_dir, faulty) = faulty();
    let store = Deadline::new(faulty.shared(), Duration::from_millis(50)).unwrap();
    let key = LeaseKey::parse("acme/t1").unwrap();
    let image = "acme/t1/e00000001/snap-000002.db";
    faulty.hang_puts(true);
    let put = store.put_if_absent(image, b"late".to_vec()).await;
    assert!(matches!(put, Err(StoreError::Timeout { .. })), "{put:?}");
    assert_eq!(store.puts_running("acme/t1/"), 1, "the put runs on");
    // As the runtime holds it: a clone of the wrapper, behind `Arc<dyn DurableStore>`.
    let shared: SharedDurableStore = Arc::new(store.clone());
    let settle = shared.settle_puts("acme/t1/", SETTLE);
    tokio::pin!(settle);
    assert!(
        futures::poll!(&mut settle).is_pending(),
        "settle_puts answered while the put was still under way"
    );
    assert_eq!(store.settle_puts("acme/t2/", Duration::ZERO).await, Ok(()));
    assert_eq!(faulty.inner().get(image).await, Ok(None), "not landed yet");
    faulty.hang_puts(false);
    assert_eq!(settle.await, Ok(()));
    assert_eq!(
        faulty.inner().get(image).await,
        Ok(Some(b"late".to_vec())),
        "the put landed after its caller heard Timeout, and before settle_puts answered"
    );
    assert_eq!(sweep_dead_epochs(&store, &key, 1).await, Ok(1));
    assert_eq!(store.list("acme/t1/").await, Ok(vec![]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_puts_of_a_put_that_never_ends_times_out_at_its_limit() {
    let (_dir, faulty) = faulty();
    let store = Deadline::new(faulty.shared(), Duration::from_millis(20)).unwrap();
    faulty.hang_puts(true);
    let put = store.put_if_absent("acme/t1/x", vec![1]).await;
    assert!(matches!(put, Err(StoreError::Timeout { .. })), "{put:?}");
    assert_eq!(
        store
            .settle_puts("acme/t1/", Duration::from_millis(30))
            .await,
        Err(StoreError::Timeout {
            op: "settle_puts",
            after_ms: 30
        })
    );
    faulty.hang_puts(false);
    assert_eq!(store.settle_puts("acme/", SETTLE).await, Ok(()));
    assert_eq!(faulty.puts(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_late_put_answers_timeout_and_lands_when_released() {
    let (_dir, faulty) = faulty();
    let key = "acme/t1/e00000001/snap-000003.db";
    faulty.late_puts(LatePuts::every(|k| k.ends_with(".db")));
    let put = faulty.put_if_absent(key, b"late".to_vec()).await;
    assert_eq!(
        put,
        Err(StoreError::Timeout {
            op: "put_if_absent",
            after_ms: 0
        })
    );
    assert_eq!(
        faulty.put_if_absent("acme/t1/m.json", vec![]).await,
        Ok(Put::Created)
    );
    assert_eq!((faulty.late_puts_held(), faulty.puts()), (1, 1));
    assert_eq!(faulty.inner().get(key).await, Ok(None));
    let settle = faulty.settle_puts("acme/t1/", SETTLE);
    tokio::pin!(settle);
    assert!(
        futures::poll!(&mut settle).is_pending(),
        "a tracked late put"
    );
    assert_eq!(faulty.land_late_puts().await, Ok(vec![key.to_string()]));
    assert_eq!(settle.await, Ok(()));
    assert_eq!(faulty.inner().get(key).await, Ok(Some(b"late".to_vec())));
    assert_eq!(faulty.late_puts_held(), 0);
    // Untracked: settle_puts cannot see it; it lands all the same once released.
    faulty.clear_late_puts();
    faulty.late_puts(LatePuts::every(|_| true).untracked());
    let unseen = "acme/t1/e00000001/snap-000004.db";
    assert!(faulty.put_if_absent(unseen, vec![4]).await.is_err());
    faulty.clear_late_puts();
    assert_eq!(faulty.settle_puts("acme/t1/", Duration::ZERO).await, Ok(()));
    assert_eq!(faulty.late_puts_held(), 1);
    assert_eq!(faulty.land_late_puts().await, Ok(vec![unseen.to_string()]));
    assert_eq!(faulty.late_puts_held(), 0);
    assert_eq!(faulty.inner().get(unseen).await, Ok(Some(vec![4])));
}

/// One model of late puts: a rule takes the next matching put (or every one until cleared);
/// its caller hears `Timeout` at once, or nothing until it lands (`hanging`); `hang_puts(false)`
/// lets the hung puts go on and leaves the other rules and the held puts as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_late_put_rules_take_what_they_match_and_answer_as_told() {
    let (_dir, faulty) = faulty();
    faulty.late_puts(LatePuts::next(|k| k.ends_with(".seg")));
    faulty.late_puts(LatePuts::next(|k| k.ends_with(".db")).hanging());
    assert_eq!(
        faulty.put_if_absent("a/e1/x.json", vec![]).await,
        Ok(Put::Created),
        "a key no rule matches goes through"
    );
    assert!(faulty.put_if_absent("a/e1/1.seg", vec![1]).await.is_err());
    assert_eq!(
        faulty.put_if_absent("a/e1/2.seg", vec![2]).await,
        Ok(Put::Created),
        "a `next` rule takes one put"
    );
    let hung = tokio::spawn({
        let faulty = faulty.clone();
        async move { faulty.put_if_absent("a/e1/1.db", vec![3]).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!hung.is_finished(), "a hanging put does not answer");
    assert_eq!(faulty.late_puts_held(), 2);
    assert_eq!(faulty.held_puts(), vec!["a/e1/1.seg".to_string()]);
    // An armed rule outlives `hang_puts(false)`; so does the held put.
    faulty.late_puts(LatePuts::every(|k| k.ends_with(".tmp")).untracked());
    faulty.hang_puts(false);
    assert_eq!(hung.await.unwrap(), Ok(Put::Created));
    assert!(faulty.put_if_absent("a/e1/z.tmp", vec![]).await.is_err());
    assert_eq!(
        faulty.held_puts(),
        vec!["a/e1/1.seg".to_string(), "a/e1/z.tmp".to_string()]
    );
    assert_eq!(
        faulty.land_late_puts().await,
        Ok(vec!["a/e1/1.seg".to_string(), "a/e1/z.tmp".to_string()])
    );
    assert_eq!(faulty.inner().get("a/e1/1.seg").await, Ok(Some(vec![1])));
    assert_eq!(faulty.late_puts_held(), 0);
}

/// A store on a paused clock whose reads take 100 ms per MiB (10 MiB/s, faster than the
/// 8 MiB/s a deadline allows for), behind a deadline of `limit`.
fn paced(limit: Duration) -> (FaultyStore, Deadline<SharedDurableStore>) {
    let faulty = FaultyStore::new(Arc::new(MemStore::new()));
    faulty.set_pace(Pace {
        per_mib_read: Duration::from_millis(100),
        ..Pace::default()
    });
    let store = Deadline::new(faulty.shared(), limit).unwrap();
    (faulty, store)
}

/// Hole 11: a get of an object whose size the caller knows gets a put's allowance.
#[tokio::test(start_paused = true)]
async fn p6_a_sized_get_has_as_long_as_a_put_of_that_size() {
    let (faulty, store) = paced(Duration::from_millis(250));
    let big = vec![7u8; 48 << 20];
    faulty
        .inner()
        .put_if_absent("a/big", big.clone())
        .await
        .unwrap();
    assert_eq!(
        store.get("a/big").await,
        Err(StoreError::Timeout {
            op: "get",
            after_ms: 250
        }),
        "4.8 s of reading against 250 ms"
    );
    let started = tokio::time::Instant::now();
    assert_eq!(store.get_sized("a/big", 48 << 20).await, Ok(Some(big)));
    assert_eq!(started.elapsed(), Duration::from_millis(4_800));
    assert_eq!(store.get_sized("a/missing", 1).await, Ok(None));
}

/// Hole 11, where it bit: restoring an image that took longer to read than one call's limit.
#[tokio::test(start_paused = true)]
async fn p6_a_restore_reads_its_image_within_a_deadline_grown_by_the_manifests_size() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("CREATE TABLE t(b BLOB); INSERT INTO t VALUES (zeroblob(2097152));")
        .unwrap();
    drop(conn);
    let image = take_image(&db, &dir.path().join("image.db")).unwrap();
    let (faulty, store) = paced(Duration::from_millis(50));
    let key = LeaseKey::parse("acme/t1").unwrap();
    let manifest = upload_image(
        faulty.inner().as_ref(),
        &key,
        1,
        1,
        &image,
        None,
        None,
        false,
        0,
    )
    .await
    .unwrap();
    let restored = fetch_restorable(&store, &key, Some(&manifest.image_ref()), 0).await;
    let (got, bytes) = restored
        .expect("the image is read in time")
        .expect("an image");
    assert_eq!((got, bytes.len() as u64), (manifest, image.size));
}

#[tokio::test]
async fn mem_store_passes_the_durable_conformance_suite() {
    durable_store_conformance(&MemStore::new(), "conf").await;
}
