//! The tip batcher: how long a caller waits, and that a burst on a slow store that batches is
//! answered within it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::deadline::Deadline;
use leasehold::ids::{LeaseKey, OrgId, TenantId};
use leasehold::layout::{ImageRef, LogPos};
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::lease::{LeaseStore, RenewOutcome, TipOutcomes};

use super::*;

/// A SQLite lease store whose `move_tips` takes `per_call` more: a slow server that batches.
#[derive(Debug)]
struct SlowBatches {
    inner: SqliteLeaseStore,
    per_call: Duration,
}

#[async_trait]
impl LeaseStore for SlowBatches {
    async fn read(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        self.inner.read(key).await
    }
    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
        attempt: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        self.inner.acquire_attempt(key, owner, ttl, attempt).await
    }
    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        self.inner.renew(key, owner, epoch, ttl).await
    }
    async fn renew_many(
        &self,
        owner: &str,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError> {
        self.inner.renew_many(owner, leases, ttl).await
    }
    async fn release(&self, key: &LeaseKey, owner: &str, epoch: u64) -> Result<(), LeaseError> {
        self.inner.release(key, owner, epoch).await
    }
    async fn publish_head(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        image: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError> {
        self.inner.publish_head(key, owner, epoch, image).await
    }
    async fn move_tip(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        from: Option<LogPos>,
        to: LogPos,
    ) -> Result<LeaseRecord, LeaseError> {
        self.inner.move_tip(key, owner, epoch, from, to).await
    }
    async fn erasures_due(
        &self,
        settled_for: Duration,
        limit: usize,
    ) -> Result<Vec<leasehold::lease::PendingErasure>, LeaseError> {
        self.inner.erasures_due(settled_for, limit).await
    }
    async fn erasure_done(&self, key: &LeaseKey, floor: u64) -> Result<(), LeaseError> {
        self.inner.erasure_done(key, floor).await
    }
    async fn list(
        &self,
        from: Option<&LeaseKey>,
        limit: usize,
    ) -> Result<leasehold::lease::LeasePage, LeaseError> {
        self.inner.list(from, limit).await
    }
    async fn move_tips(&self, moves: &[TipMove]) -> Result<TipOutcomes, LeaseError> {
        tokio::time::sleep(self.per_call).await;
        self.inner.move_tips(moves).await
    }
    fn batches_tip_moves(&self) -> bool {
        true
    }
    async fn mark_forgotten(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        self.inner.mark_forgotten(key, owner, epoch).await
    }
    async fn advertise(
        &self,
        replica: &str,
        endpoint: &str,
        incarnation: u64,
        ttl: Duration,
    ) -> Result<leasehold::lease::ReplicaRecord, LeaseError> {
        self.inner
            .advertise(replica, endpoint, incarnation, ttl)
            .await
    }
    async fn renew_replica(
        &self,
        replica: &str,
        epoch: u64,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<leasehold::lease::ReplicaRenewal, LeaseError> {
        self.inner.renew_replica(replica, epoch, leases, ttl).await
    }
    async fn withdraw(&self, replica: &str, epoch: u64) -> Result<(), LeaseError> {
        self.inner.withdraw(replica, epoch).await
    }
    async fn lookup(&self, key: &LeaseKey) -> Result<leasehold::lease::Lookup, LeaseError> {
        self.inner.lookup(key).await
    }
    async fn live_replicas(&self) -> Result<Vec<leasehold::lease::ReplicaView>, LeaseError> {
        self.inner.live_replicas().await
    }
}

fn key(i: usize) -> LeaseKey {
    LeaseKey::new(
        &OrgId::new("acme").unwrap(),
        &TenantId::new(format!("t{i}")).unwrap(),
    )
}

#[test]
fn a_caller_waits_for_the_batch_ahead_of_it_then_its_own_share() {
    let d = Duration::from_secs(10);
    assert_eq!(tip_wait(Duration::ZERO, d), d + SLACK);
    assert_eq!(
        tip_wait(Duration::from_secs(4), d),
        Duration::from_secs(14) + SLACK
    );
    let one_call = Batches {
        in_one_call: true,
        store_deadline: d,
    };
    assert_eq!(
        one_call.bound(500),
        d,
        "a batch is one call, however many moves"
    );
    let one_by_one = Batches {
        in_one_call: false,
        ..one_call
    };
    assert_eq!(
        one_by_one.bound(3),
        3 * d,
        "the moves before it and its own"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_on_a_slow_store_that_batches_is_answered_and_shares_few_calls() {
    let dir = tempfile::tempdir().unwrap();
    let clock: leasehold::clock::SharedClock = Arc::new(leasehold::SystemClock);
    let inner =
        SqliteLeaseStore::open_with(&dir.path().join("leases.db"), clock, "boot".into()).unwrap();
    // Each batch takes half its deadline: a caller behind one waits for it, then its own. (At
    // 400 ms of a 500 ms deadline a batch outlived it under CI's load, 2026-12-02.)
    let deadline = Duration::from_millis(1_200);
    let slow = SlowBatches {
        inner,
        per_call: Duration::from_millis(600),
    };
    let leases: SharedLeaseStore = Arc::new(Deadline::new(slow, deadline).unwrap());
    let n = 200;
    for i in 0..n {
        leases
            .acquire(&key(i), "a", Duration::from_secs(60))
            .await
            .unwrap();
    }
    let batcher = Arc::new(TipBatcher::new(leases.clone(), deadline, 1_000));
    assert_eq!(batcher.longest_wait(), 2 * deadline + SLACK);
    let started = Instant::now();
    let calls = (0..n).map(|i| {
        let batcher = batcher.clone();
        async move {
            if i % 2 == 1 {
                // Half ask while the first batch is with the store.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let to = LogPos { epoch: 1, seq: 1 };
            let m = TipMove {
                key: key(i),
                owner: "a".into(),
                epoch: 1,
                from: None,
                to,
            };
            batcher.move_tip(m).await.map(|r| r.tip)
        }
    });
    let answers = futures::future::join_all(calls).await;
    let took = started.elapsed();
    for answer in &answers {
        assert_eq!(answer, &Ok(Some(LogPos { epoch: 1, seq: 1 })));
    }
    assert!(
        took < Duration::from_millis(5_000),
        "{n} moves in a few batches of 600 ms each, not one by one (120 s): {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_store_that_moves_one_tip_per_call_each_caller_waits_for_the_moves_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock: leasehold::clock::SharedClock = Arc::new(leasehold::SystemClock);
    let inner =
        SqliteLeaseStore::open_with(&dir.path().join("leases.db"), clock, "boot".into()).unwrap();
    let faulty = leasehold::testkit::FaultyLeaseStore::new(Arc::new(inner));
    faulty.one_move_per_call();
    assert!(!faulty.batches_tip_moves());
    let deadline = Duration::from_millis(500);
    let leases: SharedLeaseStore = Arc::new(Deadline::new(faulty.clone(), deadline).unwrap());
    let n = 30;
    for i in 0..n {
        leases
            .acquire(&key(i), "a", Duration::from_secs(60))
            .await
            .unwrap();
    }
    // Every move takes 100 ms, far inside its deadline: 30 asked at once take 3 s one by one,
    // longer than a constant wait of 2 × 500 ms + slack.
    slow_moves(faulty, n, Duration::from_millis(100));
    let max_open = 40;
    let batcher = Arc::new(TipBatcher::new(leases.clone(), deadline, max_open));
    assert_eq!(
        batcher.longest_wait(),
        deadline * (3 * max_open as u32) + SLACK,
        "every move the replica can have outstanding, one after another"
    );
    let calls = (0..n).map(|i| {
        let batcher = batcher.clone();
        async move {
            let m = TipMove {
                key: key(i),
                owner: "a".into(),
                epoch: 1,
                from: None,
                to: LogPos { epoch: 1, seq: 1 },
            };
            batcher.move_tip(m).await.map(|r| r.tip)
        }
    });
    for answer in futures::future::join_all(calls).await {
        assert_eq!(answer, Ok(Some(LogPos { epoch: 1, seq: 1 })));
    }
}

/// Makes each of the next `n` calls of `move_tip` take `delay`.
fn slow_moves(store: leasehold::testkit::FaultyLeaseStore, n: usize, delay: Duration) {
    let next = store.clone();
    store.before_next(leasehold::testkit::LeaseOp::MoveTip, move || async move {
        if n > 1 {
            slow_moves(next, n - 1, delay);
        }
        tokio::time::sleep(delay).await;
    });
}
