//! The route table of `docs/architecture.md` row by row, then the placement: rendezvous hashing
//! is balanced and moves few tenants when a replica joins or leaves.

use super::*;
use crate::ids::{LeaseKey, OrgId, TenantId};
use crate::lease::LeaseRecord;

const ME: &str = "r-me";

fn lease(owner: &str, left_ms: u64) -> Lookup {
    Lookup {
        record: Some(LeaseRecord {
            key: "acme/t1".into(),
            owner: owner.into(),
            epoch: 4,
            expires_at_ms: 10_000,
            released: left_ms == 0,
            floor: 0,
            head: None,
            tip: None,
        }),
        lease_left_ms: left_ms,
        holder: None,
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

/// A live lease of `owner` whose record is live (or not).
fn held_by(owner: &str, record_live: bool, left_ms: u64) -> Lookup {
    Lookup {
        holder: Some(view(owner, record_live)),
        ..lease(owner, left_ms)
    }
}

fn input<'a>(local: LocalState, lookup: &'a Lookup) -> RouteInput<'a> {
    RouteInput {
        me: ME,
        local,
        lookup,
        hops: 0,
        max_hops: DEFAULT_MAX_HOPS,
        time_left_ms: 5_000,
        open: false,
        unreachable: None,
        placed: None,
    }
}

fn forward(to: &str, open: bool) -> Route {
    Route::Forward {
        to: to.into(),
        endpoint: format!("http://{to}"),
        open,
    }
}

#[test]
fn row_serving_or_opening_here_runs_here_whatever_the_store_says() {
    for lookup in [
        Lookup::vacant(),
        held_by("r2", true, 900),
        held_by(ME, true, 900),
    ] {
        assert_eq!(decide(&input(LocalState::Serving, &lookup)), Route::RunHere);
        assert_eq!(decide(&input(LocalState::Opening, &lookup)), Route::RunHere);
    }
}

#[test]
fn row_leaving_here_waits_for_the_successor_a_step_at_a_time() {
    let lookup = held_by("r2", true, 900);
    let wait = decide(&input(LocalState::Leaving, &lookup));
    assert_eq!(
        wait,
        Route::WaitForSuccessor {
            wait_ms: WAIT_STEP_MS
        }
    );
    let almost = RouteInput {
        time_left_ms: 7,
        ..input(LocalState::Leaving, &lookup)
    };
    assert_eq!(decide(&almost), Route::WaitForSuccessor { wait_ms: 7 });
}

#[test]
fn row_another_live_holder_with_a_live_endpoint_is_forwarded_to() {
    let lookup = held_by("r2", true, 900);
    assert_eq!(
        decide(&input(LocalState::Absent, &lookup)),
        forward("r2", false)
    );
    let second_hop = RouteInput {
        hops: 2,
        ..input(LocalState::Absent, &lookup)
    };
    assert_eq!(decide(&second_hop), forward("r2", false), "re-routed");
}

#[test]
fn row_hops_exhausted_is_moved_naming_the_holder() {
    let lookup = held_by("r2", true, 900);
    let spent = RouteInput {
        hops: DEFAULT_MAX_HOPS,
        ..input(LocalState::Absent, &lookup)
    };
    let moved = Route::Moved {
        holder: "r2".into(),
    };
    assert_eq!(decide(&spent), moved);
}

#[test]
fn row_a_dead_holder_is_waited_out_if_its_lease_ends_in_time_else_unavailable() {
    for lookup in [held_by("r2", false, 900), lease("r2", 900)] {
        let wait = Route::WaitForLeaseEnd {
            holder: "r2".into(),
            wait_ms: LEASE_POLL_MS,
        };
        assert_eq!(decide(&input(LocalState::Absent, &lookup)), wait);
        let short = RouteInput {
            time_left_ms: 900,
            ..input(LocalState::Absent, &lookup)
        };
        let unavailable = Route::Unavailable {
            holder: "r2".into(),
            lease_left_ms: 900,
        };
        assert_eq!(decide(&short), unavailable);
    }
}

#[test]
fn row_an_unreachable_holder_is_treated_as_dead() {
    let lookup = held_by("r2", true, 900);
    let failed = RouteInput {
        unreachable: Some("r2"),
        ..input(LocalState::Absent, &lookup)
    };
    assert!(matches!(decide(&failed), Route::WaitForLeaseEnd { .. }));
    let other = RouteInput {
        unreachable: Some("r3"),
        ..input(LocalState::Absent, &lookup)
    };
    assert_eq!(decide(&other), forward("r2", false));
}

#[test]
fn row_a_live_lease_of_mine_not_open_here_is_waited_out_never_broken() {
    // An earlier process of this replica id holds it: an acquire would be refused.
    let lookup = held_by(ME, true, 150);
    let wait = Route::WaitForLeaseEnd {
        holder: ME.into(),
        wait_ms: 150,
    };
    assert_eq!(decide(&input(LocalState::Absent, &lookup)), wait);
}

#[test]
fn row_nobody_live_asks_the_placement_then_opens_or_forwards_to_open() {
    for lookup in [Lookup::vacant(), lease("r2", 0), held_by("r2", true, 0)] {
        assert_eq!(decide(&input(LocalState::Absent, &lookup)), Route::Place);
        let mine = view(ME, true);
        let here = RouteInput {
            placed: Some(&mine),
            ..input(LocalState::Absent, &lookup)
        };
        assert_eq!(decide(&here), Route::OpenHere);
        let theirs = view("r3", true);
        let there = RouteInput {
            placed: Some(&theirs),
            ..input(LocalState::Absent, &lookup)
        };
        assert_eq!(decide(&there), forward("r3", true));
    }
}

#[test]
fn row_a_sender_placed_here_opens_here_without_asking_again() {
    let lookup = Lookup::vacant();
    let placed_here = RouteInput {
        open: true,
        hops: 1,
        ..input(LocalState::Absent, &lookup)
    };
    assert_eq!(decide(&placed_here), Route::OpenHere);
}

#[test]
fn row_a_placement_that_cannot_be_reached_or_spent_hops_opens_here() {
    let lookup = Lookup::vacant();
    let theirs = view("r3", true);
    let unreachable = RouteInput {
        placed: Some(&theirs),
        unreachable: Some("r3"),
        ..input(LocalState::Absent, &lookup)
    };
    assert_eq!(decide(&unreachable), Route::OpenHere);
    let spent = RouteInput {
        placed: Some(&theirs),
        hops: DEFAULT_MAX_HOPS,
        ..input(LocalState::Absent, &lookup)
    };
    assert_eq!(
        decide(&spent),
        Route::OpenHere,
        "nobody holds it: no one to move to"
    );
    let dead = view("r3", false);
    let gone = RouteInput {
        placed: Some(&dead),
        ..input(LocalState::Absent, &lookup)
    };
    assert_eq!(decide(&gone), Route::OpenHere);
}

#[test]
fn a_hop_count_saturates() {
    assert_eq!(next_hop(0), 1);
    assert_eq!(next_hop(u8::MAX), u8::MAX);
}

fn key(i: usize) -> LeaseKey {
    LeaseKey::new(
        &OrgId::new("acme").unwrap(),
        &TenantId::new(format!("t{i}")).unwrap(),
    )
}

fn replicas(n: usize) -> Vec<ReplicaView> {
    (0..n).map(|i| view(&format!("r{i}"), true)).collect()
}

/// The replica `Rendezvous` places `key` on, seen from `me` (`None`: `me`).
fn placed(key: &LeaseKey, me: &str, live: &[ReplicaView]) -> String {
    Rendezvous
        .place(key, me, live)
        .map_or(me.to_owned(), |r| r.id)
}

#[test]
fn rendezvous_is_the_same_from_every_replica_and_balanced() {
    let live = replicas(10);
    let mut counts = std::collections::HashMap::<String, usize>::new();
    for i in 0..10_000 {
        let k = key(i);
        let from_r0 = placed(&k, "r0", &live);
        assert_eq!(placed(&k, "r7", &live), from_r0, "every replica agrees");
        *counts.entry(from_r0).or_default() += 1;
    }
    assert_eq!(counts.len(), 10);
    for (replica, n) in counts {
        assert!((800..=1_200).contains(&n), "{replica} got {n} of 10,000");
    }
}

#[test]
fn rendezvous_moves_only_what_a_joining_replica_wins_or_a_leaving_one_held() {
    let ten = replicas(10);
    let eleven = replicas(11);
    let (mut joined, mut left) = (0, 0);
    for i in 0..10_000 {
        let k = key(i);
        let before = placed(&k, "r0", &ten);
        let after = placed(&k, "r0", &eleven);
        if before != after {
            assert_eq!(
                after, "r10",
                "a tenant moves only to the replica that joined"
            );
            joined += 1;
        }
        let nine: Vec<_> = ten.iter().filter(|r| r.id != "r3").cloned().collect();
        let without = placed(&k, "r0", &nine);
        if before != without {
            assert_eq!(before, "r3", "only the leaving replica's tenants move");
            left += 1;
        }
    }
    assert!(
        (700..=1_150).contains(&joined),
        "{joined} moved to the new replica"
    );
    assert!(
        (800..=1_200).contains(&left),
        "{left} moved off the leaving one"
    );
}

#[test]
fn stay_opens_where_the_message_arrived_and_dead_replicas_are_never_placed() {
    let live = replicas(3);
    assert_eq!(Stay.place(&key(1), "r0", &live), None);
    assert!(!Stay.needs_live_replicas());
    let dead: Vec<_> = replicas(3)
        .into_iter()
        .map(|r| ReplicaView { live: false, ..r })
        .collect();
    assert_eq!(Rendezvous.place(&key(1), "r9", &dead), None);
}

/// A remembered lookup is only ever a place to forward to: it comes back only for the
/// sender's own message, within its age, with its lease shortened by that age, and only when it
/// names a live holder other than this replica with a live endpoint — so `decide` can answer
/// nothing but `Forward` from it (never that a lease ran out: a takeover always reads the
/// store).
#[test]
fn a_remembered_holder_is_recalled_only_as_a_place_to_forward_to() {
    let there = held_by("r2", true, 900);
    assert!(worth_remembering(&there, ME));
    let got = recall(&there, 300, 1_000, ME, 0).expect("fresh enough");
    assert_eq!(
        got.lease_left_ms, 600,
        "the lease shortened by the record's age"
    );
    assert_eq!(
        decide(&input(LocalState::Absent, &got)),
        forward("r2", false)
    );
    assert_eq!(recall(&there, 1_001, 1_000, ME, 0), None, "too old");
    assert_eq!(
        recall(&there, 900, 5_000, ME, 0),
        None,
        "its lease may have run out"
    );
    assert_eq!(
        recall(&there, 0, 1_000, ME, 1),
        None,
        "a forwarded message looks up"
    );
    for never in [
        Lookup::vacant(),
        lease("r2", 0),
        held_by("r2", false, 900),
        held_by(ME, true, 900),
        lease("r2", 900),
    ] {
        assert!(!worth_remembering(&never, ME), "{never:?}");
        assert_eq!(recall(&never, 0, 1_000, ME, 0), None, "{never:?}");
    }
}
