//! Passivation's pure decisions, row by row: who is idle, who is the least recently used, when
//! the next check is due.

use std::collections::HashMap;

use super::*;

/// A replica's tenants as the supervisor would see them: name → standing.
#[derive(Default)]
struct Tenants(HashMap<&'static str, Standing>);

impl Tenants {
    fn open(&mut self, recency: &mut Recency<&'static str>, key: &'static str, at: u64) {
        let s = Standing {
            touches: 0,
            last_ms: at,
            serving: true,
        };
        self.0.insert(key, s);
        recency.note(key, s);
    }

    fn touch(&mut self, key: &'static str, at: u64) {
        let s = self.0.get_mut(key).unwrap();
        s.touches += 1;
        s.last_ms = at;
    }

    fn look(&self) -> impl FnMut(&&'static str) -> Option<Standing> + '_ {
        |k| self.0.get(k).copied()
    }
}

fn keys(chosen: &[Chosen<&'static str>]) -> Vec<&'static str> {
    chosen.iter().map(|c| c.key).collect()
}

#[test]
fn row_an_untouched_tenant_is_idle_once_passivate_after_has_passed() {
    let (mut r, mut t) = (Recency::default(), Tenants::default());
    t.open(&mut r, "a", 1_000);
    let after = 60_000;
    assert!(
        r.pick(Some(idle_before(60_999, after)), 10, t.look())
            .is_empty()
    );
    assert_eq!(r.len(), 1, "not due: kept");
    let due = r.pick(Some(idle_before(61_000, after)), 10, t.look());
    assert_eq!(keys(&due), ["a"]);
    assert_eq!(due[0].touches, 0, "judged at the count it was noted with");
    assert_eq!(r.len(), 0, "taken out while its passivation runs");
}

#[test]
fn row_a_tenant_touched_since_it_was_noted_is_noted_again_not_passivated() {
    let (mut r, mut t) = (Recency::default(), Tenants::default());
    t.open(&mut r, "a", 1_000);
    t.touch("a", 50_000);
    let due = r.pick(Some(idle_before(61_000, 60_000)), 10, t.look());
    assert!(due.is_empty(), "active 11 s ago");
    assert_eq!(r.oldest_ms(), Some(50_000), "noted at its new stamp");
    let due = r.pick(Some(idle_before(110_000, 60_000)), 10, t.look());
    assert_eq!(keys(&due), ["a"]);
}

#[test]
fn row_a_tenant_touched_long_ago_but_after_its_note_is_judged_on_its_real_stamp() {
    let (mut r, mut t) = (Recency::default(), Tenants::default());
    t.open(&mut r, "a", 1_000);
    t.touch("a", 2_000);
    // Idle since 2 s, checked at 100 s: re-noted, looked at again in the same walk, passivated.
    let due = r.pick(Some(idle_before(100_000, 60_000)), 10, t.look());
    assert_eq!(keys(&due), ["a"]);
    assert_eq!(due[0].touches, 1);
}

#[test]
fn row_a_tenant_that_does_not_serve_keeps_its_place_and_is_skipped() {
    let (mut r, mut t) = (Recency::default(), Tenants::default());
    t.open(&mut r, "leaving", 1_000);
    t.open(&mut r, "b", 2_000);
    t.0.get_mut("leaving").unwrap().serving = false;
    let due = r.pick(None, 1, t.look());
    assert_eq!(keys(&due), ["b"], "the next least recently used");
    assert_eq!(
        r.oldest_ms(),
        Some(1_000),
        "the leaving one keeps its place"
    );
}

#[test]
fn row_a_tenant_gone_meanwhile_drops_out() {
    let (mut r, mut t) = (Recency::default(), Tenants::default());
    t.open(&mut r, "gone", 1_000);
    t.open(&mut r, "b", 2_000);
    t.0.remove("gone");
    assert_eq!(keys(&r.pick(None, 1, t.look())), ["b"]);
    assert_eq!(r.len(), 0);
}

#[test]
fn row_eviction_picks_the_least_recently_used_whatever_its_age() {
    let (mut r, mut t) = (Recency::default(), Tenants::default());
    for (k, at) in [("a", 1_000), ("b", 2_000), ("c", 3_000)] {
        t.open(&mut r, k, at);
    }
    t.touch("a", 4_000);
    // Nobody is idle for long; at max_open the least recently used goes: b (a ran at 4 s).
    assert_eq!(keys(&r.pick(None, 1, t.look())), ["b"]);
    assert_eq!(keys(&r.pick(None, 1, t.look())), ["c"]);
    assert_eq!(keys(&r.pick(None, 1, t.look())), ["a"]);
    assert!(
        r.pick(None, 1, t.look()).is_empty(),
        "nobody left: refuse the open"
    );
}

#[test]
fn row_no_idle_tenant_at_all_gives_nobody() {
    let (mut r, mut t) = (Recency::default(), Tenants::default());
    t.open(&mut r, "a", 1_000);
    t.0.get_mut("a").unwrap().serving = false;
    assert!(r.pick(None, 1, t.look()).is_empty());
    assert_eq!(r.len(), 1);
}

#[test]
fn ties_of_one_millisecond_go_in_the_order_they_were_noted() {
    let (mut r, mut t) = (Recency::default(), Tenants::default());
    for k in ["z", "a", "m"] {
        t.open(&mut r, k, 5_000);
    }
    assert_eq!(keys(&r.pick(None, 3, t.look())), ["z", "a", "m"]);
}

#[test]
fn a_walk_ends_while_every_tenant_is_touched_at_each_look() {
    let (mut r, mut t) = (Recency::default(), Tenants::default());
    for (k, at) in [("a", 1), ("b", 2), ("c", 3)] {
        t.open(&mut r, k, at);
    }
    let mut clock = 10;
    let mut busy = |k: &&'static str| {
        clock += 1;
        let s = t.0.get_mut(k).unwrap();
        s.touches += 1;
        s.last_ms = clock;
        Some(*s)
    };
    assert!(r.pick(None, 1, &mut busy).is_empty(), "ends, finds nobody");
    assert_eq!(r.len(), 3, "every one kept");
}

#[test]
fn the_next_check_falls_when_the_oldest_could_be_idle_long_enough() {
    assert_eq!(next_check_ms(None, 60_000), None);
    assert_eq!(next_check_ms(Some(1_000), 60_000), Some(61_000));
    assert_eq!(next_check_ms(Some(u64::MAX), 1), Some(u64::MAX));
    assert_eq!(
        idle_before(30_000, 60_000),
        0,
        "nobody before the replica's own start"
    );
    assert_eq!(idle_before(61_000, 60_000), 1_001);
}

#[test]
fn an_overdue_oldest_is_looked_at_again_after_a_backoff_not_at_once() {
    // Due later: waited for exactly, whoever arms it.
    assert_eq!(idle_check_wait_ms(61_000, 1_000, 60_000, true), 60_000);
    assert_eq!(idle_check_wait_ms(61_000, 1_000, 60_000, false), 60_000);
    // Overdue right after a check: the oldest is a tenant leaving by another way (skipped, it
    // keeps its place). Looked at again after an eighth of `passivate_after`, within 1 ms and
    // 1 s, not every millisecond while it leaves.
    assert_eq!(idle_check_wait_ms(61_000, 61_000, 60_000, true), 1_000);
    assert_eq!(idle_check_wait_ms(61_000, 90_000, 60_000, true), 1_000);
    assert_eq!(idle_check_wait_ms(1_800, 2_000, 800, true), 100);
    assert_eq!(idle_check_wait_ms(5, 9, 4, true), 1);
    // Overdue when armed for another reason (a tenant noted or gone): at once, so a stream of
    // other tenants ending never puts off a tenant that fell due.
    assert_eq!(idle_check_wait_ms(61_000, 90_000, 60_000, false), 1);
}

#[test]
fn an_activity_cell_counts_touches_and_keeps_the_latest_stamp() {
    let a = Activity::new(7);
    assert_eq!(a.standing(true).touches, 0);
    assert_eq!(a.last_ms(), 7);
    a.touch(20);
    a.touch(15);
    assert_eq!(a.touches(), 2);
    assert_eq!(a.last_ms(), 20, "a late writer never moves it back");
}
