//! Replica records: where each live replica of a fleet can be reached, kept in the lease store
//! beside the leases and judged by the same clock (docs/architecture.md, "Tenant addresses").
//!
//! A replica **advertises** its endpoint ([`LeaseStore::advertise`](super::LeaseStore::advertise))
//! under a record of its own that runs out after a `ttl` like a lease, renews it with its leases
//! in one round trip ([`LeaseStore::renew_replica`](super::LeaseStore::renew_replica)) and
//! **withdraws** it at close. A router asks the store where a tenant is with one
//! [`LeaseStore::lookup`](super::LeaseStore::lookup): the lease, how long it still runs, and the
//! holder's record, each judged by the **store's** clock. So a replica that died is not reached
//! through an endpoint it once advertised: its record runs out with its renewals
//! (docs/guarantees.md, promise 11).
//!
//! ```text
//! replicas(id PRIMARY KEY, endpoint, epoch, incarnation, expires_at, withdrawn)
//! ```
//!
//! **Epochs and incarnations.** Every start of a replica process picks a fresh `incarnation`
//! ([`fresh_attempt`](super::fresh_attempt)). An advertise of another incarnation than the
//! record's bumps the epoch; one of the same incarnation (a retry, a late landing) refreshes the
//! record at the same epoch, unless that incarnation withdrew it: a withdrawn incarnation is
//! spent and an advertise of it changes nothing. Renewals and withdrawals name the epoch, so an
//! older process of the same replica id can neither keep the new one's record alive nor take it
//! away.

use super::{LeaseRecord, RenewOutcome};

/// A replica's record as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRecord {
    /// The replica's id (its `ReplicaId`: the owner name of the leases it holds).
    pub id: String,
    /// Where its transport takes forwarded messages (`http://127.0.0.1:7070`).
    pub endpoint: String,
    /// Grows by one at every advertise of a new incarnation.
    pub epoch: u64,
    /// When the record runs out, in milliseconds of the **store's** clock.
    pub expires_at_ms: u64,
    /// True once the replica withdrew it at close: never live again at this epoch.
    pub withdrawn: bool,
}

/// A replica as a router sees it: its endpoint and whether the store holds its record live now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaView {
    /// The replica's id.
    pub id: String,
    /// Its advertised endpoint. Trust it only while `live`.
    pub endpoint: String,
    /// The record's epoch.
    pub epoch: u64,
    /// Whether the record is live by the store's clock: advertised or renewed less than a
    /// `ttl` ago, not withdrawn (and, on SQLite, written in this boot).
    pub live: bool,
}

/// Where a tenant is, as one [`LeaseStore::lookup`](super::LeaseStore::lookup) round trip saw
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    /// The tenant's lease, live or not; `None` if it was never acquired.
    pub record: Option<LeaseRecord>,
    /// How long the lease still runs by the store's clock, in milliseconds; 0 when it is not
    /// live (never acquired, released, expired, or of an earlier boot).
    pub lease_left_ms: u64,
    /// The record of the lease's owner, if that replica ever advertised one.
    pub holder: Option<ReplicaView>,
}

impl Lookup {
    /// The lookup of a key that has no lease.
    pub fn vacant() -> Self {
        Self {
            record: None,
            lease_left_ms: 0,
            holder: None,
        }
    }

    /// Whether the lease is live by the store's clock.
    pub fn lease_live(&self) -> bool {
        self.lease_left_ms > 0
    }

    /// The live holder's id and epoch, when the lease is live.
    pub fn live_holder(&self) -> Option<(&str, u64)> {
        match &self.record {
            Some(r) if self.lease_live() => Some((r.owner.as_str(), r.epoch)),
            _ => None,
        }
    }

    /// The holder's endpoint, only when the lease is live **and** the holder's record is live:
    /// a dead replica's endpoint is never trusted.
    pub fn live_endpoint(&self) -> Option<&str> {
        let (owner, _) = self.live_holder()?;
        match &self.holder {
            Some(h) if h.live && h.id == owner => Some(h.endpoint.as_str()),
            _ => None,
        }
    }
}

/// What one [`LeaseStore::renew_replica`](super::LeaseStore::renew_replica) came to: the
/// replica's record and each lease, in the order asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRenewal {
    /// [`RenewOutcome::Renewed`] while the record is live at the epoch named;
    /// [`RenewOutcome::Lost`] when it ran out, was withdrawn or another incarnation advertised
    /// (the replica advertises again).
    pub record: RenewOutcome,
    /// What [`LeaseStore::renew_many`](super::LeaseStore::renew_many) would have answered.
    pub leases: Vec<RenewOutcome>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(owner: &str) -> LeaseRecord {
        LeaseRecord {
            key: "acme/t".into(),
            owner: owner.into(),
            epoch: 3,
            expires_at_ms: 10,
            released: false,
            floor: 0,
            head: None,
            tip: None,
        }
    }

    fn view(id: &str, live: bool) -> ReplicaView {
        ReplicaView {
            id: id.into(),
            endpoint: format!("http://{id}"),
            epoch: 1,
            live,
        }
    }

    #[test]
    fn an_endpoint_is_trusted_only_for_a_live_lease_and_a_live_record_of_its_owner() {
        let live = Lookup {
            record: Some(lease("a")),
            lease_left_ms: 5,
            holder: Some(view("a", true)),
        };
        assert_eq!(live.live_endpoint(), Some("http://a"));
        assert_eq!(live.live_holder(), Some(("a", 3)));
        let dead_replica = Lookup {
            holder: Some(view("a", false)),
            ..live.clone()
        };
        assert_eq!(dead_replica.live_endpoint(), None);
        assert_eq!(dead_replica.live_holder(), Some(("a", 3)));
        let expired = Lookup {
            lease_left_ms: 0,
            ..live.clone()
        };
        assert_eq!(
            (expired.live_endpoint(), expired.live_holder()),
            (None, None)
        );
        let other = Lookup {
            holder: Some(view("b", true)),
            ..live
        };
        assert_eq!(other.live_endpoint(), None, "a record of another replica");
        assert!(!Lookup::vacant().lease_live());
    }
}
