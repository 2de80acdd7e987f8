//! A shared lease store is a lease store: `Arc<S>` forwards every call, so the runtime and its
//! wrappers can hold `Arc<dyn LeaseStore>`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{
    LeaseError, LeasePage, LeaseRecord, LeaseStore, Lookup, PendingErasure, RenewOutcome,
    ReplicaRecord, ReplicaRenewal, ReplicaView, TipMove, TipOutcomes,
};
use crate::ids::LeaseKey;
use crate::layout::{ImageRef, LogPos};

#[async_trait]
impl<S: LeaseStore + ?Sized> LeaseStore for Arc<S> {
    async fn read(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        (**self).read(key).await
    }
    async fn acquire(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        (**self).acquire(key, owner, ttl).await
    }
    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
        attempt: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        (**self).acquire_attempt(key, owner, ttl, attempt).await
    }
    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        (**self).renew(key, owner, epoch, ttl).await
    }
    async fn renew_many(
        &self,
        owner: &str,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError> {
        (**self).renew_many(owner, leases, ttl).await
    }
    async fn release(&self, key: &LeaseKey, owner: &str, epoch: u64) -> Result<(), LeaseError> {
        (**self).release(key, owner, epoch).await
    }
    async fn publish_head(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        image: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError> {
        (**self).publish_head(key, owner, epoch, image).await
    }
    async fn move_tip(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        from: Option<LogPos>,
        to: LogPos,
    ) -> Result<LeaseRecord, LeaseError> {
        (**self).move_tip(key, owner, epoch, from, to).await
    }
    async fn move_tips(&self, moves: &[TipMove]) -> Result<TipOutcomes, LeaseError> {
        (**self).move_tips(moves).await
    }
    fn batches_tip_moves(&self) -> bool {
        (**self).batches_tip_moves()
    }
    async fn mark_forgotten(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        (**self).mark_forgotten(key, owner, epoch).await
    }
    async fn erasures_due(
        &self,
        settled_for: Duration,
        limit: usize,
    ) -> Result<Vec<PendingErasure>, LeaseError> {
        (**self).erasures_due(settled_for, limit).await
    }
    async fn erasure_done(&self, key: &LeaseKey, floor: u64) -> Result<(), LeaseError> {
        (**self).erasure_done(key, floor).await
    }
    async fn list(&self, from: Option<&LeaseKey>, limit: usize) -> Result<LeasePage, LeaseError> {
        (**self).list(from, limit).await
    }
    async fn advertise(
        &self,
        replica: &str,
        endpoint: &str,
        incarnation: u64,
        ttl: Duration,
    ) -> Result<ReplicaRecord, LeaseError> {
        (**self)
            .advertise(replica, endpoint, incarnation, ttl)
            .await
    }
    async fn renew_replica(
        &self,
        replica: &str,
        epoch: u64,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<ReplicaRenewal, LeaseError> {
        (**self).renew_replica(replica, epoch, leases, ttl).await
    }
    async fn withdraw(&self, replica: &str, epoch: u64) -> Result<(), LeaseError> {
        (**self).withdraw(replica, epoch).await
    }
    async fn lookup(&self, key: &LeaseKey) -> Result<Lookup, LeaseError> {
        (**self).lookup(key).await
    }
    async fn live_replicas(&self) -> Result<Vec<ReplicaView>, LeaseError> {
        (**self).live_replicas().await
    }
}
