//! What the history keeps of `--clients addresses` beside the writes: where each acknowledged
//! command ran (as its reply said), the queries sent to addresses and what they answered, and
//! when each forget returned (the floor it raised). The checker holds these against the
//! tenures the lease stores granted ([`crate::address_rules`]).

use std::collections::{HashMap, HashSet};

use super::{Grant, History, Record};
use crate::protocol::{NoteRow, now_ms};

/// One query `drill.seen` sent to a tenant's address.
#[derive(Debug, Clone)]
pub struct QueryOp {
    /// The tenant.
    pub tenant: u32,
    /// The note asked for.
    pub key: String,
    /// The replica process it was sent through.
    pub via: String,
    /// The sending replica's time before it sent the query.
    pub sent_at: u64,
    /// Its time when the answer came.
    pub answered_at: u64,
    /// What it answered.
    pub note: Option<NoteRow>,
}

/// A forget that returned: after `at`, nothing of the epochs at or below `floor` may answer.
#[derive(Debug, Clone, Copy)]
pub struct ForgetDone {
    /// The tenant.
    pub tenant: u32,
    /// The floor it raised.
    pub floor: u64,
    /// Driver time it was known to have returned.
    pub at: u64,
}

/// The address clients' part of the history.
#[derive(Debug, Clone, Default)]
pub struct AddressRecord {
    /// Request ids of the writes sent to an address (through any replica).
    pub sent: HashSet<u64>,
    /// Request id of a write → the replica its reply says ran it.
    pub ran_on: HashMap<u64, String>,
    /// Every query answered.
    pub queries: Vec<QueryOp>,
    /// Every forget known to have returned.
    pub forgets: Vec<ForgetDone>,
}

impl History {
    /// Records that write `req` (already invoked) is sent to its tenant's address: it may run
    /// on another replica than the one it went through.
    pub fn through_address(&self, req: u64) {
        self.lock().addresses.sent.insert(req);
    }

    /// Records that the command of write `req` ran on `replica`, as its reply says.
    pub fn ran_on(&self, req: u64, replica: &str) {
        self.lock()
            .addresses
            .ran_on
            .insert(req, replica.to_string());
    }

    /// Records an answered query.
    pub fn query(&self, op: QueryOp) {
        self.lock().addresses.queries.push(op);
    }

    /// Records that a forget of `tenant` raising its floor to `floor` returned by now.
    pub fn forgot(&self, tenant: u32, floor: u64) {
        self.lock().addresses.forgets.push(ForgetDone {
            tenant,
            floor,
            at: now_ms(),
        });
    }
}

/// Records the lease store's answer to `replica`'s acquire of `(tenant, epoch)` at `at` (an
/// `acquired` line): a grant, known exactly.
pub(super) fn granted(
    r: &mut Record,
    replica: &str,
    slot: Option<usize>,
    tenant: u32,
    epoch: u64,
    at: u64,
) {
    let tenure = r.tenures.entry((tenant, epoch)).or_default();
    match tenure.grants.iter_mut().find(|g| g.replica == replica) {
        Some(g) => g.acquired_hi = g.acquired_hi.min(at),
        None => tenure.grants.push(Grant {
            replica: replica.to_string(),
            slot,
            acquired_hi: at,
        }),
    }
}
