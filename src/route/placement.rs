//! Placement: which replica opens a tenant nobody holds. [`Stay`] (the default) opens it where
//! the message arrived — locality, no extra hop; [`Rendezvous`] spreads tenants over the live
//! replicas by rendezvous hashing (highest random weight), so every replica that sees the same
//! live set picks the same one, and a replica joining or leaving moves only the tenants it wins
//! or held. Pure: the router asks the lease store for the live replicas and hands them in.

use std::fmt::Debug;

use crate::ids::LeaseKey;
use crate::lease::ReplicaView;

/// Chooses the replica that opens a tenant nobody holds.
pub trait Placement: Send + Sync + Debug + 'static {
    /// The replica of `live` (whose records are live by the store's clock) that should open
    /// `key`, or `None` for this replica (`me`). `me` may be missing from `live` (it has not
    /// advertised yet); it is a candidate all the same.
    fn place(&self, key: &LeaseKey, me: &str, live: &[ReplicaView]) -> Option<ReplicaView>;

    /// Whether the placement needs the live replicas at all (the router then skips asking the
    /// store for them).
    fn needs_live_replicas(&self) -> bool {
        true
    }
}

/// Opens a tenant nobody holds where the message arrived.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stay;

impl Placement for Stay {
    fn place(&self, _: &LeaseKey, _: &str, _: &[ReplicaView]) -> Option<ReplicaView> {
        None
    }

    fn needs_live_replicas(&self) -> bool {
        false
    }
}

/// Rendezvous hashing over the live replicas: each `(tenant, replica)` pair gets a weight from
/// a fixed hash (the same on every replica and every build), and the heaviest replica wins.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rendezvous;

impl Placement for Rendezvous {
    fn place(&self, key: &LeaseKey, me: &str, live: &[ReplicaView]) -> Option<ReplicaView> {
        let mine = weight(key.as_str(), me);
        let best = live
            .iter()
            .filter(|r| r.live && r.id != me)
            .map(|r| (weight(key.as_str(), &r.id), r))
            .max_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.id.cmp(&a.1.id)))?;
        // Ties (practically never) go to this replica: no hop.
        (best.0 > mine).then(|| best.1.clone())
    }
}

/// The weight of `replica` for `key`: FNV-1a over both (with a separator no id contains),
/// finished with splitmix64's mixer so that near keys get unrelated weights.
fn weight(key: &str, replica: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.bytes().chain([0xff]).chain(replica.bytes()) {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}
