//! The pinned sequences of the hardening: each hole of docs/guarantees.md ("hardening") shown
//! by the simulation's fault model, and the fault classes it added (docs/testing.md, "The
//! simulation's fault classes"), replayed on a correct build.

use crate::model::TTL_MS;
use crate::ops::At::Newest;
use crate::ops::{self, Op};
use crate::replay;

// ---- The holes of the hardening (docs/guarantees.md), each shown by the simulation's fault
// model on the unfixed runtime. Each is ignored until its fix merges; then its number leaves
// `ops::UNFIXED_HOLES` too, and the ops that found it join the generated mix.

/// Hole 1: an open whose acquire is in flight when `close()` begins completes afterwards and
/// serves, unreported: `close` returns no unflushed tenant, yet the tenure was never handed off
/// (its lease stays live, its writes would never reach an image). The generator finds it
/// with `LEASEHOLD_SIM_SEED=2026` once hole 1 leaves `ops::UNFIXED_HOLES` (600 cases).
#[test]
fn hole1_an_open_in_flight_when_close_begins_is_refused_or_handed_off() {
    use Op::*;
    replay(&[Open { r: 0, t: 0 }, OpenDuringClose { r: 0, t: 1 }]);
}

/// Hole 2: a snapshot's `publish_head` times out but lands later, between the handoff's newer
/// head and its release: the head moves back, and the successor would restore the older image.
/// The generator finds it with `LEASEHOLD_SIM_SEED=2026` (two snapshots, the first one's
/// `publish_head` landing at the end).
#[test]
fn hole2_a_late_publish_head_never_moves_the_head_back() {
    use Op::*;
    replay(&[
        Open { r: 0, t: 0 },
        Write { t: 0, at: Newest },
        Late(ops::Late::PublishHead),
        Snapshot { t: 0, at: Newest },
        Write { t: 0, at: Newest },
        LandBeforeRelease,
        Handoff { t: 0, at: Newest },
        Open { r: 1, t: 0 },
        Read { t: 0, at: Newest },
    ]);
}

/// Hole 4: with periodic snapshots on, a write acknowledged under a ticket while the tenant
/// drains is in no image until the drain ends: a crash then loses more than the crash bound
/// allows. Judged from the lease store's head and the image's bytes. The generator finds it
/// with `LEASEHOLD_SIM_SEED=2026`.
#[test]
fn hole4_a_write_acknowledged_while_draining_is_published_within_the_crash_bound() {
    use Op::*;
    replay(&[
        Periodic,
        Open { r: 0, t: 0 },
        DrainedHandoff {
            t: 0,
            at: Newest,
            pause: 0,
            renew: false,
        },
    ]);
}

/// Hole 5: a run blocking its actor's thread past `drain_timeout` stretches the handoff sent
/// after it: the drain deadline starts only when the tenant reads the drain request.
#[test]
fn hole5_a_handoff_behind_a_blocking_run_gives_up_at_its_deadline() {
    use Op::*;
    replay(&[Open { r: 0, t: 0 }, BlockingRun { t: 0, at: Newest }]);
}

/// Hole 6, the part no process can wait for: an image put the server completes after the client
/// gave up lands after `forget` returned, at or below the floor; it is a leftover until the
/// next sweep (an open's, or `leasehold sweep`), never read (docs/guarantees.md, "Erasure of late
/// puts"). The part this process still runs is waited for by the forget: `p5_…` in
/// `tests/durable_store.rs` and the drill's `forget-late-put` fault.
#[test]
fn hole6_a_late_put_the_server_completes_after_forget_is_swept_not_read() {
    use Op::*;
    replay(&[
        Open { r: 0, t: 0 },
        Write { t: 0, at: Newest },
        Late(ops::Late::Put),
        Snapshot { t: 0, at: Newest },
        Forget { t: 0, at: Newest },
        Land,
    ]);
}

/// The late landings of the lease calls whose rules already hold them: a renewal, a release,
/// an acquire and a `mark_forgotten` that time out and land later change the store only as
/// its rules allow, and the runtime reports each as a timeout.
#[test]
fn late_landings_of_renew_release_acquire_and_mark_forgotten_keep_the_model() {
    use Op::*;
    replay(&[
        Open { r: 0, t: 0 },
        Write { t: 0, at: Newest },
        Snapshot { t: 0, at: Newest },
        Late(ops::Late::Renew),
        Renew { r: 0 },
        Land,
        Late(ops::Late::MarkForgotten),
        LandBeforeRelease,
        Forget { t: 0, at: Newest },
        Late(ops::Late::Acquire),
        Open { r: 1, t: 0 },
        Land,
        Open { r: 1, t: 0 },
        Late(ops::Late::Release),
        Open { r: 2, t: 1 },
        Abandon { t: 1, at: Newest },
        Open { r: 0, t: 1 },
        Land,
        Advance { ms: TTL_MS + 1 },
        Open { r: 0, t: 1 },
        Read { t: 1, at: Newest },
    ]);
}

/// Close and crash of a replica, each followed by a restart on the same state root, and a
/// lease lapsing inside a run: a closed replica hands its tenants off, a crashed one loses
/// only what no image holds, and a lapsed write is refused.
#[test]
fn close_crash_restart_and_a_lapse_inside_a_run_keep_the_model() {
    use Op::*;
    replay(&[
        Open { r: 0, t: 0 },
        Open { r: 0, t: 1 },
        Write { t: 0, at: Newest },
        Write { t: 1, at: Newest },
        Close { r: 0 },
        Open { r: 1, t: 0 },
        Read { t: 0, at: Newest },
        Write { t: 0, at: Newest },
        Snapshot { t: 0, at: Newest },
        Write { t: 0, at: Newest },
        Crash { r: 1 },
        Advance { ms: TTL_MS + 1 },
        Open { r: 1, t: 0 },
        Read { t: 0, at: Newest },
        LapseInCommit { t: 0, at: Newest },
        Read { t: 0, at: Newest },
    ]);
}

/// A lease that lapses while a run's batch commits (after the check before COMMIT): the write
/// is refused, the tenure ends, and the successor restores only what an image held (promise 1;
/// docs/testing.md, "Mutation probe": a build that skips the check after COMMIT fails here).
#[test]
fn a_lease_lapsing_during_a_commit_fences_the_write_and_ends_the_tenure() {
    use Op::*;
    // With `Images`: with a change log, the tip's move is the check after the commit.
    replay(&[
        Images,
        Open { r: 0, t: 0 },
        Write { t: 0, at: Newest },
        Snapshot { t: 0, at: Newest },
        Write { t: 0, at: Newest },
        LapseDuringCommit { t: 0, at: Newest },
        Write { t: 0, at: Newest },
        Open { r: 1, t: 0 },
        Read { t: 0, at: Newest },
    ]);
}

/// A forget after a snapshot whose put hung past its deadline waits for that put (it is this
/// replica's, still running) and leaves nothing of the forgotten tenure (promise 5;
/// docs/testing.md, "Mutation probe": a build whose erase skips `settle_puts` fails here).
#[test]
fn a_forget_behind_a_hung_put_waits_for_it_and_leaves_nothing() {
    use Op::*;
    replay(&[
        Open { r: 0, t: 0 },
        Write { t: 0, at: Newest },
        ForgetBehindHungPut { t: 0, at: Newest },
        Open { r: 1, t: 0 },
        Read { t: 0, at: Newest },
    ]);
}

/// A forget that arrives while a snapshot's image is uploading waits for the upload and
/// erases it; the snapshot hears that its tenant is leaving.
#[test]
fn a_forget_during_an_upload_erases_what_the_upload_published() {
    use Op::*;
    replay(&[
        Open { r: 0, t: 0 },
        Write { t: 0, at: Newest },
        ForgetDuringUpload { t: 0, at: Newest },
        Open { r: 1, t: 0 },
        Read { t: 0, at: Newest },
        Write { t: 0, at: Newest },
        ForgetDuringUpload { t: 0, at: Newest },
        ForgetDuringUpload { t: 0, at: Newest },
    ]);
}

/// An image whose head move timed out, then a close whose flush publishes a newer image built
/// on the head the tenure knew (not on the unconfirmed one): the head has moved past the first
/// image, so the replica's reconciliation keeps it and leaves it to retention, which an
/// `Images` tenure does not run (docs/guarantees.md, "Reconciling puts of unknown outcome";
/// hole 6b of docs/testing.md: such an image may be the window's base). CI's seed
/// 1796149252224820253 found the sequence when the reconciliation took such an image back.
#[test]
fn an_image_off_the_heads_chain_after_a_late_head_move_is_kept() {
    use Op::*;
    replay(&[
        Images,
        Open { r: 0, t: 0 },
        Open { r: 1, t: 1 },
        Write { t: 1, at: Newest },
        Late(ops::Late::PublishHead),
        Snapshot { t: 1, at: Newest },
        Close { r: 1 },
    ]);
}
