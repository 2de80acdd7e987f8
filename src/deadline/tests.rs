//! Tests of [`super::Deadline`]: every call of a stalled store settles at its limit.

use std::sync::Arc;

use tokio::time::Instant;

use super::*;
use crate::durable::SharedDurableStore;
use crate::ids::{OrgId, TenantId};
use crate::lease::SharedLeaseStore;

/// A store that answers after `answer_after`, or never when it is `None`. Its lease answers
/// are refusals, so the tests can see errors pass through untouched.
#[derive(Debug)]
struct Stalled {
    answer_after: Option<Duration>,
}

impl Stalled {
    async fn wait(&self) {
        match self.answer_after {
            Some(after) => tokio::time::sleep(after).await,
            None => futures::future::pending().await,
        }
    }
}

fn held(key: &LeaseKey) -> LeaseError {
    LeaseError::Held {
        key: key.to_string(),
        owner: "other".into(),
        epoch: 7,
    }
}

#[async_trait]
impl DurableStore for Stalled {
    async fn put_if_absent(&self, _: &str, _: Vec<u8>) -> Result<Put, StoreError> {
        self.wait().await;
        Ok(Put::Created)
    }
    async fn get(&self, _: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.wait().await;
        Ok(Some(b"bytes".to_vec()))
    }
    async fn list(&self, _: &str) -> Result<Vec<String>, StoreError> {
        self.wait().await;
        Ok(vec!["a/b".into()])
    }
    async fn delete(&self, _: &str) -> Result<(), StoreError> {
        self.wait().await;
        Ok(())
    }
    async fn delete_keys(&self, _: &[String]) -> Result<(), StoreError> {
        self.wait().await;
        Ok(())
    }
    async fn delete_prefix(&self, _: &str) -> Result<usize, StoreError> {
        self.wait().await;
        Ok(2)
    }
}

#[async_trait]
impl LeaseStore for Stalled {
    async fn read(&self, _: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        self.wait().await;
        Ok(None)
    }
    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        _: &str,
        _: Duration,
        _: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        self.wait().await;
        Err(held(key))
    }
    async fn renew(
        &self,
        key: &LeaseKey,
        _: &str,
        _: u64,
        _: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        self.wait().await;
        Err(held(key))
    }
    async fn renew_many(
        &self,
        _: &str,
        leases: &[(LeaseKey, u64)],
        _: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError> {
        self.wait().await;
        Ok(vec![RenewOutcome::Lost; leases.len()])
    }
    async fn release(&self, key: &LeaseKey, _: &str, _: u64) -> Result<(), LeaseError> {
        self.wait().await;
        Err(held(key))
    }
    async fn publish_head(
        &self,
        key: &LeaseKey,
        _: &str,
        _: u64,
        _: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError> {
        self.wait().await;
        Err(held(key))
    }
    async fn move_tip(
        &self,
        key: &LeaseKey,
        _: &str,
        _: u64,
        _: Option<LogPos>,
        _: LogPos,
    ) -> Result<LeaseRecord, LeaseError> {
        self.wait().await;
        Err(held(key))
    }
    async fn mark_forgotten(
        &self,
        key: &LeaseKey,
        _: &str,
        _: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        self.wait().await;
        Err(held(key))
    }
    async fn erasures_due(
        &self,
        _: Duration,
        _: usize,
    ) -> Result<Vec<crate::lease::PendingErasure>, LeaseError> {
        self.wait().await;
        Ok(Vec::new())
    }
    async fn erasure_done(&self, _: &LeaseKey, _: u64) -> Result<(), LeaseError> {
        self.wait().await;
        Ok(())
    }
    async fn list(
        &self,
        _: Option<&LeaseKey>,
        _: usize,
    ) -> Result<crate::lease::LeasePage, LeaseError> {
        self.wait().await;
        Ok(crate::lease::LeasePage::default())
    }
}

const LIMIT: Duration = Duration::from_millis(250);

fn key() -> LeaseKey {
    LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t1").unwrap())
}

fn image() -> ImageRef {
    ImageRef {
        epoch: 1,
        seq: 1,
        sha256: "00".repeat(32),
    }
}

fn timeout(op: &'static str) -> StoreError {
    StoreError::Timeout { op, after_ms: 250 }
}

#[test]
fn a_zero_limit_is_refused() {
    let refused = Deadline::new(Stalled { answer_after: None }, Duration::ZERO).unwrap_err();
    assert!(matches!(
        refused,
        Error::InvalidOption {
            name: "store_deadline",
            ..
        }
    ));
    assert_eq!(refused.code(), "LEASEHOLD_INVALID_OPTION");
}

#[tokio::test(start_paused = true)]
async fn every_durable_call_to_a_store_that_never_answers_times_out_at_the_limit() {
    let inner: SharedDurableStore = Arc::new(Stalled { answer_after: None });
    let store = Deadline::new(inner, LIMIT).unwrap();
    let start = Instant::now();
    assert_eq!(
        store.put_if_absent("a/b", vec![1]).await,
        Err(timeout("put_if_absent"))
    );
    assert_eq!(
        start.elapsed(),
        LIMIT,
        "the call gave up exactly at its limit"
    );
    assert_eq!(store.get("a/b").await, Err(timeout("get")));
    assert_eq!(store.list("a/").await, Err(timeout("list")));
    assert_eq!(store.delete("a/b").await, Err(timeout("delete")));
    assert_eq!(
        store.delete_prefix("a/").await,
        Err(timeout("delete_prefix"))
    );
}

#[tokio::test(start_paused = true)]
async fn every_lease_call_to_a_store_that_never_answers_times_out_at_the_limit() {
    let inner: SharedLeaseStore = Arc::new(Stalled { answer_after: None });
    let store = Deadline::new(inner, LIMIT).unwrap();
    let (k, ttl) = (key(), Duration::from_secs(10));
    let expired = |op| LeaseError::Store(timeout(op));
    let start = Instant::now();
    assert_eq!(store.read(&k).await, Err(expired("read")));
    assert_eq!(start.elapsed(), LIMIT);
    assert_eq!(store.acquire(&k, "a", ttl).await, Err(expired("acquire")));
    assert_eq!(store.renew(&k, "a", 1, ttl).await, Err(expired("renew")));
    let many = store.renew_many("a", &[(k.clone(), 1)], ttl).await;
    assert_eq!(many, Err(expired("renew_many")));
    assert_eq!(store.release(&k, "a", 1).await, Err(expired("release")));
    let published = store.publish_head(&k, "a", 1, &image()).await;
    assert_eq!(published, Err(expired("publish_head")));
    let tip = LogPos { epoch: 1, seq: 1 };
    let moved = store.move_tip(&k, "a", 1, None, tip).await;
    assert_eq!(moved, Err(expired("move_tip")));
    let forgotten = store.mark_forgotten(&k, "a", 1).await;
    assert_eq!(forgotten, Err(expired("mark_forgotten")));
    let due = store.erasures_due(LIMIT, 10).await;
    assert_eq!(due, Err(expired("erasures_due")));
    assert_eq!(
        store.erasure_done(&k, 1).await,
        Err(expired("erasure_done"))
    );
    assert_eq!(store.list(Some(&k), 10).await, Err(expired("list")));
}

#[tokio::test(start_paused = true)]
async fn answers_within_the_limit_pass_through_unchanged() {
    let inner = Stalled {
        answer_after: Some(LIMIT / 2),
    };
    let store = Deadline::new(inner, LIMIT).unwrap();
    assert_eq!(store.get("a/b").await, Ok(Some(b"bytes".to_vec())));
    assert_eq!(store.delete_prefix("a/").await, Ok(2));
    let k = key();
    assert_eq!(store.read(&k).await, Ok(None));
    assert_eq!(store.acquire(&k, "a", LIMIT).await, Err(held(&k)));
    assert_eq!(store.limit(), LIMIT);
}

#[tokio::test(start_paused = true)]
async fn hole11_a_bulk_delete_of_many_keys_is_not_cut_at_the_plain_limit() {
    // Found by the drill on PostgreSQL + S3: a page of a sweep answered after the plain
    // deadline, so the forget and every later sweep failed the same way.
    let inner = Stalled {
        answer_after: Some(LIMIT * 4),
    };
    let store = Deadline::new(inner, LIMIT).unwrap();
    let keys: Vec<String> = (0..100).map(|i| format!("a/k{i}")).collect();
    assert_eq!(store.delete_keys(&keys).await, Ok(()));
    assert_eq!(
        store.delete_keys(&keys[..1]).await,
        Err(StoreError::Timeout {
            op: "delete_keys",
            after_ms: 260
        }),
        "one key gets the plain limit and 10 ms"
    );
}

#[tokio::test(start_paused = true)]
async fn an_answer_later_than_the_limit_is_a_timeout() {
    let inner = Stalled {
        answer_after: Some(LIMIT * 2),
    };
    let store = Deadline::new(inner, LIMIT).unwrap();
    assert_eq!(store.get("a/b").await, Err(timeout("get")));
    let ttl = Duration::from_secs(1);
    let renewed = store.renew(&key(), "a", 1, ttl).await;
    assert_eq!(renewed, Err(LeaseError::Store(timeout("renew"))));
}
