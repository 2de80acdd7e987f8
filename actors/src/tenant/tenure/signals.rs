//! What the tenure and its actor say to each other: the [`Effect`]s the state machine decides,
//! the [`Input`]s the actor feeds back, who waits for an answer ([`Waiter`]) and what a snapshot
//! request comes to ([`SnapshotPlan`]).

use leasehold::Error;
use tokio::time::Instant;

use crate::events::Event;
use crate::passivation::PassivationReason;
use crate::status::TenantStatus;
use crate::tenant::publish::Published;

/// Who waits for an answer the actor holds the channel of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiter {
    /// The handoff's caller (its drain half or, once drained, its flush half).
    Handoff,
    /// The abandon's callers.
    Abandon,
    /// The forget's caller.
    Forget,
}

/// What the actor must do. Effects are carried out in order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect {
    /// Take and publish an image of `commits` committed batches — or, with `image == false`
    /// (nothing new since the head), only confirm that the lease holds; feed back
    /// [`Input::Published`].
    Publish {
        /// Batches committed when the image is taken.
        commits: u64,
        /// True for a handoff's final image.
        final_image: bool,
        /// False when the head already holds every commit.
        image: bool,
    },
    /// Wake the handoff's caller at `deadline` ([`Input::DrainDeadline`]).
    ArmDrainTimer {
        /// The handoff's deadline.
        deadline: Instant,
    },
    /// Tell the handoff's caller that the drain is over and the flush begins.
    Drained,
    /// Commit any open batch and close the ledger connection (the file stays).
    CloseLedger,
    /// The lease cell never holds again, and the renewal chain lets go of it.
    EndTenure,
    /// Delete the local directory; feed back [`Input::DirRemoved`].
    RemoveDir,
    /// Hand the lease back; feed back [`Input::LeaseReleased`].
    ReleaseLease,
    /// Tell the supervisor a forget began (`close` waits for it).
    ForgetBegun,
    /// Raise the floor to this epoch; feed back [`Input::FloorRaised`].
    MarkForgotten,
    /// Wait for late puts, delete every durable copy at or below `floor` and the local
    /// directory; feed back [`Input::Erased`].
    Erase {
        /// The raised floor.
        floor: u64,
    },
    /// Answer a waiter the actor keeps (a handoff, abandon or forget under way).
    Reply(Waiter, Result<(), Error>),
    /// Answer the caller of the input just fed (a handoff, abandon or forget refused or done
    /// at once); it is not kept as a waiter.
    Answer(Result<(), Error>),
    /// Emit an event (also to `tracing`).
    Emit(Event),
    /// A passivation's flush failed and the tenure serves on: tell the supervisor, before the
    /// status reads `serving` again, so that it puts the tenant back in its order of last
    /// activity as used now — whoever sees `serving` and then asks the supervisor (an idle
    /// check, an eviction) finds it there.
    ServesOn,
    /// The tenure is over: tell the supervisor and stop the actor.
    Finish(TenantStatus),
}

/// What happened, as the actor saw it.
#[derive(Debug, Clone)]
pub(crate) enum Input {
    /// A handoff was called; the caller stops waiting for the drain at `deadline`.
    Handoff {
        /// Counted from the call, on the caller's side (promise 6).
        deadline: Instant,
        /// Whether the lease holds now.
        held: bool,
    },
    /// A ticket was dropped.
    Retire {
        /// Its id.
        ticket: u64,
    },
    /// The drain timer fired.
    DrainDeadline {
        /// The deadline it was armed for.
        deadline: Instant,
    },
    /// The snapshot interval fired.
    Tick {
        /// Whether the lease holds now.
        held: bool,
    },
    /// A batch committed locally. `lapsed`: the lease ran out during the commit.
    Committed {
        /// The lease ran out during the commit: the tenure ends.
        lapsed: bool,
    },
    /// A publish came back.
    Published {
        /// Batches it covers.
        commits: u64,
        /// Whether it was the final image of a handoff.
        final_image: bool,
        /// The image published (`None`: nothing was uploaded), or why not (`Err(Fenced)`: the
        /// lease did not hold).
        outcome: Result<Option<Published>, Error>,
        /// The lease store refused the head's move: the lease is gone for good (not only
        /// lapsed on the holder's clock, which a renewal may still revive).
        lease_gone: bool,
    },
    /// A segment of the change log went out (it counts as an upload under way: a forget
    /// raises the floor only once it is back).
    Shipping,
    /// A segment came back: `Ok` once its tip moved; an error stops the log and ends the tenure
    /// (docs/guarantees.md, the change log).
    Shipped(Result<(), Error>),
    /// An abandon was called.
    Abandon,
    /// A forget was called.
    Forget,
    /// The renewal chain found the lease lost.
    LeaseLost,
    /// `mark_forgotten` came back with the raised floor.
    FloorRaised(Result<u64, Error>),
    /// The erase came back.
    Erased(Result<(), Error>),
    /// The local directory was removed (or failed to be: the error is only logged).
    DirRemoved,
    /// The release came back (a failure is only logged: the lease then expires).
    LeaseReleased,
    /// The supervisor asks the tenure to let go (docs/architecture.md, "Passivation"): it was
    /// judged idle at activity count `judged`; `touches` is the count now (a tenant touched
    /// since is not idle).
    Passivate {
        /// Idle for `passivate_after`, or the least recently used at `max_open`.
        reason: PassivationReason,
        /// The activity count it was judged idle at.
        judged: u64,
        /// The activity count now.
        touches: u64,
        /// How long it had been idle when judged (ms), for the event.
        idle_ms: u64,
    },
}

/// What a snapshot request comes to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SnapshotPlan {
    /// Refused with this error.
    Refuse(Error),
    /// Nothing changed since the last image: answer the current head.
    Unchanged,
    /// Publish an image covering `commits` batches (an upload is counted as under way).
    Publish {
        /// Batches committed when the image is taken.
        commits: u64,
    },
}
