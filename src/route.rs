//! Where a message for a tenant goes: a pure decision ([`decide`]) of what this replica knows of
//! the tenant, what the lease store said ([`Lookup`]), the hops so far and the time left — no
//! I/O, no clock. The router of `leasehold-actors` carries it out (docs/architecture.md, "The
//! route table"); the simulation can drive it without a network.
//!
//! ```text
//!  here: serving ────────────────────────────────────────────> RunHere
//!  here: opening ────────────────────────────────────────────> RunHere (the open is waited for)
//!  here: leaving (draining, flushing, releasing) ────────────> WaitForSuccessor, then decide again
//!  absent, lease live, held by me (an earlier process) ──────> its lease must run out first
//!  absent, lease live, another holder, live endpoint ────────> Forward (or Moved past max hops)
//!  absent, lease live, holder dead or unreachable ───────────> WaitForLeaseEnd if the lease ends
//!                                                               before the deadline, else
//!                                                               Unavailable
//!  absent, nobody live (free, released, expired) ────────────> the sender's placement chose me:
//!                                                               OpenHere; else Place, then
//!                                                               OpenHere or Forward { open }
//! ```
//!
//! A lease whose holder is dead is waited out, never broken: the store's clock says when it
//! ends, and only then does [`decide`] answer `OpenHere` (the takeover). So no message runs on a
//! replica whose lease does not hold (docs/guarantees.md, promise 11).

use crate::lease::{Lookup, ReplicaView};

mod placement;
mod recall;

pub use placement::{Placement, Rendezvous, Stay};
pub use recall::{recall, worth_remembering};

/// The most forwards a message takes by default before a replica answers `Moved`.
pub const DEFAULT_MAX_HOPS: u8 = 3;

/// How long a router waits before it looks again while a tenant is leaving, at most.
pub const WAIT_STEP_MS: u64 = 50;

/// How long a router waits before it looks again while it waits out a holder's lease, at
/// most: the holder may come back (advertise again), hand the tenant off, or its lease end.
pub const LEASE_POLL_MS: u64 = 200;

/// Where the tenant stands on this replica, as its supervisor knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalState {
    /// Open here and serving.
    Serving,
    /// An open of it is under way here.
    Opening,
    /// Open here and leaving: draining, flushing, abandoning or being forgotten.
    Leaving,
    /// Not open here.
    Absent,
}

/// Everything [`decide`] looks at.
#[derive(Debug, Clone, Copy)]
pub struct RouteInput<'a> {
    /// This replica's id.
    pub me: &'a str,
    /// Where the tenant stands here.
    pub local: LocalState,
    /// What the lease store said, in one round trip.
    pub lookup: &'a Lookup,
    /// How many times the message was forwarded before it reached this replica.
    pub hops: u8,
    /// The most forwards a message may take.
    pub max_hops: u8,
    /// How long the caller still waits, in milliseconds.
    pub time_left_ms: u64,
    /// The sender's placement chose this replica to open the tenant.
    pub open: bool,
    /// A replica this router already failed to reach for this message (nothing was sent):
    /// it is treated as dead until its lease runs out.
    pub unreachable: Option<&'a str>,
    /// The placement's choice, once asked ([`Route::Place`]).
    pub placed: Option<&'a ReplicaView>,
}

/// What to do with the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Run it here: this replica holds the tenant (or is opening it).
    RunHere,
    /// Nobody holds the tenant: open it here, then run it. After a dead holder's lease ran out
    /// this is the takeover.
    OpenHere,
    /// Send it to the replica `to` at `endpoint`; with `open`, the receiver opens the tenant
    /// (the placement chose it, nobody holds it).
    Forward {
        /// The receiver's id.
        to: String,
        /// Its endpoint.
        endpoint: String,
        /// Whether the receiver is to open the tenant.
        open: bool,
    },
    /// Nobody holds the tenant and the placement was not asked yet: ask it, then decide again
    /// with [`RouteInput::placed`].
    Place,
    /// The tenant is leaving this replica: look again in `wait_ms`.
    WaitForSuccessor {
        /// How long to wait before looking again.
        wait_ms: u64,
    },
    /// The holder cannot be reached and its lease ends before the caller's deadline: look
    /// again in `wait_ms` (at most [`LEASE_POLL_MS`]), until the lease has run out by the
    /// store's clock; then decide again (and take over).
    WaitForLeaseEnd {
        /// The holder.
        holder: String,
        /// How long to wait before looking again.
        wait_ms: u64,
    },
    /// The holder cannot be reached and its lease outlasts the caller's deadline.
    Unavailable {
        /// The holder.
        holder: String,
        /// How long its lease still runs.
        lease_left_ms: u64,
    },
    /// The message took `max_hops` forwards and the tenant is elsewhere still.
    Moved {
        /// Where the lease store says it is.
        holder: String,
    },
}

/// Where the message goes (see the module's table).
pub fn decide(input: &RouteInput<'_>) -> Route {
    match input.local {
        LocalState::Serving | LocalState::Opening => return Route::RunHere,
        LocalState::Leaving => {
            return Route::WaitForSuccessor {
                wait_ms: input.time_left_ms.min(WAIT_STEP_MS),
            };
        }
        LocalState::Absent => {}
    }
    match input.lookup.live_holder() {
        Some((holder, _)) => to_holder(input, holder),
        None => to_nobody(input),
    }
}

/// A live lease of `holder` and the tenant not open here.
fn to_holder(input: &RouteInput<'_>, holder: &str) -> Route {
    let reachable = input
        .lookup
        .live_endpoint()
        .filter(|_| holder != input.me && input.unreachable != Some(holder));
    match reachable {
        Some(_) if input.hops >= input.max_hops => Route::Moved {
            holder: holder.to_owned(),
        },
        Some(endpoint) => Route::Forward {
            to: holder.to_owned(),
            endpoint: endpoint.to_owned(),
            open: false,
        },
        None => wait_out(input, holder),
    }
}

/// A holder that cannot be reached (dead, unreachable, or an earlier process of this replica):
/// its lease is waited out if it ends in time, never broken.
fn wait_out(input: &RouteInput<'_>, holder: &str) -> Route {
    let left = input.lookup.lease_left_ms;
    if left < input.time_left_ms {
        Route::WaitForLeaseEnd {
            holder: holder.to_owned(),
            wait_ms: left.min(LEASE_POLL_MS),
        }
    } else {
        Route::Unavailable {
            holder: holder.to_owned(),
            lease_left_ms: left,
        }
    }
}

/// Nobody holds the tenant: open it here or where the placement says.
fn to_nobody(input: &RouteInput<'_>) -> Route {
    if input.open {
        return Route::OpenHere;
    }
    let Some(placed) = input.placed else {
        return Route::Place;
    };
    let elsewhere = placed.id != input.me
        && placed.live
        && input.unreachable != Some(placed.id.as_str())
        && input.hops < input.max_hops;
    if elsewhere {
        Route::Forward {
            to: placed.id.clone(),
            endpoint: placed.endpoint.clone(),
            open: true,
        }
    } else {
        Route::OpenHere
    }
}

/// The hop count a forward from a replica the message reached after `hops` forwards carries.
pub fn next_hop(hops: u8) -> u8 {
    hops.saturating_add(1)
}

#[cfg(test)]
mod tests;
