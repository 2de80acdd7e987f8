//! The operations the simulation drives, and the proptest strategy that generates sequences of
//! them (proptest shrinks a failing sequence to a short one by itself).

use proptest::prelude::*;

use crate::model::{REPLICAS, TENANTS, TTL_MS};

/// Which tenure of a tenant an op addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// The newest tenure opened anywhere (the owner, as far as the host knows).
    Newest,
    /// The last tenure opened on replica `r`: perhaps a zombie's handle, or one long gone.
    On(usize),
    /// The `n`-th tenure before the newest (1: the one before it): a handle kept too long.
    Older(usize),
}

/// One step of a simulated run. `r` is a replica, `t` a tenant, `at` the tenure of `t` the op
/// addresses; an op with no tenure to address does nothing (`Skipped`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `Supervisor::open`.
    Open { r: usize, t: usize },
    /// A run inserting a fresh event.
    Write { t: usize, at: At },
    /// A run reading every event id (checked against the model).
    Read { t: usize, at: At },
    /// Admit, one ticket run inserting a fresh event, drop the ticket.
    Ticket { t: usize, at: At },
    /// `TenantRef::snapshot`.
    Snapshot { t: usize, at: At },
    /// `TenantRef::handoff`.
    Handoff { t: usize, at: At },
    /// A handoff that drains admitted work: a ticket write, the handoff begins, new work is
    /// refused, time passes (`pause` ms) and the owner renews (`renew`), another ticket write,
    /// the ticket goes, the handoff ends.
    DrainedHandoff {
        t: usize,
        at: At,
        pause: u64,
        renew: bool,
    },
    /// A handoff and a write sent at once, unordered.
    RaceHandoffWrite { t: usize, at: At },
    /// A handoff and a forget sent at once, unordered: the forget must win or be refused.
    RaceHandoffForget { t: usize, at: At },
    /// `TenantRef::abandon`.
    Abandon { t: usize, at: At },
    /// `TenantRef::forget`.
    Forget { t: usize, at: At },
    /// A snapshot (or handoff) while every put hangs: it must end at `store_deadline`.
    Stalled { t: usize, at: At, handoff: bool },
    /// Time passes on every clock.
    Advance { ms: u64 },
    /// `Supervisor::renew_now` on replica `r`.
    Renew { r: usize },
    /// The durable store goes down (`true`) or comes back.
    DurableDown(bool),
    /// The lease store goes down (`true`) or comes back.
    LeaseDown(bool),
    /// Puts become slightly slow (well within the deadline), or fast again.
    SlowPuts(bool),
    /// `Supervisor::sweep_local` on replica `r`: drop local copies of forgotten tenures.
    SweepLocal { r: usize },
    /// The head image's bytes are damaged in the store (bit rot): it fails its checksum.
    CorruptHead { t: usize },
    /// Every fault cleared and every lease left to expire: how each case ends (never generated).
    Settle,
}

impl Op {
    /// How many fresh event ids the op's writes need.
    pub fn writes(&self) -> usize {
        match self {
            Op::Write { .. } | Op::Ticket { .. } | Op::RaceHandoffWrite { .. } => 1,
            Op::DrainedHandoff { .. } => 2,
            _ => 0,
        }
    }
}

/// A replica the generator drives.
fn replica() -> impl Strategy<Value = usize> {
    0..REPLICAS
}

fn tenant() -> impl Strategy<Value = usize> {
    0..TENANTS
}

/// Mostly the newest tenure; now and then the last one of a replica, or an older one.
fn at() -> impl Strategy<Value = At> {
    prop_oneof![
        6 => Just(At::Newest),
        2 => replica().prop_map(At::On),
        1 => (1..=2usize).prop_map(At::Older),
    ]
}

fn on(make: fn(usize, At) -> Op) -> impl Strategy<Value = Op> {
    (tenant(), at()).prop_map(move |(t, at)| make(t, at))
}

/// A fault switch, more often turned off than on, so that outages stay short.
fn switch(make: fn(bool) -> Op) -> impl Strategy<Value = Op> {
    prop_oneof![1 => Just(make(true)), 2 => Just(make(false))]
}

/// `Supervisor::open` of a tenant on a replica.
fn open() -> impl Strategy<Value = Op> {
    (replica(), tenant()).prop_map(|(r, t)| Op::Open { r, t })
}

/// One op, weighted towards the everyday ones. A stall costs `store_deadline` of real time
/// whenever it catches an upload, so it is the rarest.
pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => open(),
        28 => on(|t, at| Op::Write { t, at }),
        6 => on(|t, at| Op::Read { t, at }),
        6 => on(|t, at| Op::Ticket { t, at }),
        10 => on(|t, at| Op::Snapshot { t, at }),
        8 => on(|t, at| Op::Handoff { t, at }),
        6 => (tenant(), at(), prop::sample::select(vec![0, 9_000, TTL_MS + 1]), any::<bool>())
            .prop_map(|(t, at, pause, renew)| Op::DrainedHandoff { t, at, pause, renew }),
        4 => on(|t, at| Op::RaceHandoffWrite { t, at }),
        3 => on(|t, at| Op::RaceHandoffForget { t, at }),
        4 => on(|t, at| Op::Abandon { t, at }),
        4 => on(|t, at| Op::Forget { t, at }),
        1 => (tenant(), at(), any::<bool>())
            .prop_map(|(t, at, handoff)| Op::Stalled { t, at, handoff }),
        6 => prop::sample::select(vec![1_000, 5_000, 9_000, TTL_MS + 1])
            .prop_map(|ms| Op::Advance { ms }),
        8 => replica().prop_map(|r| Op::Renew { r }),
        4 => switch(Op::DurableDown),
        4 => switch(Op::LeaseDown),
        2 => switch(Op::SlowPuts),
        1 => tenant().prop_map(|t| Op::CorruptHead { t }),
        2 => replica().prop_map(|r| Op::SweepLocal { r }),
    ]
}

/// A sequence of 5 to 25 ops: each tenant opened somewhere, then anything.
pub fn ops() -> impl Strategy<Value = Vec<Op>> {
    let rest = prop::collection::vec(op(), 3..=23);
    (replica(), replica(), rest).prop_map(|(r0, r1, rest)| {
        let mut ops = vec![Op::Open { r: r0, t: 0 }, Op::Open { r: r1, t: 1 }];
        ops.extend(rest);
        ops
    })
}
