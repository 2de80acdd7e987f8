//! The log's bookkeeping ([`LogShip`]) without actors: cuts, tip order, outcomes in any order,
//! failures, gates, aborts and the counts a flush and compaction read.

use super::*;
use leasehold::ids::{OrgId, TenantId};

fn log(segment_limit: u64) -> LogShip {
    pipelined(segment_limit, 1)
}

fn pipelined(segment_limit: u64, in_flight: usize) -> LogShip {
    let key = LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t1").unwrap());
    let start = LogStart {
        tip: None,
        image_pos: None,
        carried: (0, 0),
        tip_stamp_ms: 0,
    };
    LogShip::new(
        key,
        1,
        segment_limit,
        SegmentCompression::Off,
        in_flight,
        start,
    )
}

/// A batch that changed page `page` + 1 (page 1 would have to hold a database header).
fn changes(page: u32) -> Changes {
    let page = page + 1;
    Changes {
        page_size: 512,
        db_pages: page,
        pages: [(page, vec![page as u8; 512])].into(),
        sum_before: 0,
        sum_after: 0,
    }
}

type Heard = std::sync::Arc<std::sync::Mutex<Vec<(&'static str, bool)>>>;

/// A caller named `name` whose answer lands in `heard`.
fn caller(heard: &Heard, name: &'static str) -> Vec<Finisher> {
    let heard = heard.clone();
    vec![Box::new(move |outcome: Result<(), Error>| {
        heard.lock().unwrap().push((name, outcome.is_ok()));
    })]
}

fn pos(seq: u64) -> LogPos {
    LogPos { epoch: 1, seq }
}

fn unknown() -> Error {
    Error::Unshipped {
        key: "acme/t1".into(),
        reason: "a timeout".into(),
    }
}

#[test]
fn pipelined_cuts_chain_their_positions_up_to_the_limit_and_order_their_tip_moves() {
    let mut log = pipelined(1 << 20, 2);
    let heard = Heard::default();
    log.add(Some(changes(1)), caller(&heard, "a"));
    let first = log.cut(10).unwrap().expect("room for a first segment");
    log.add(Some(changes(2)), caller(&heard, "b"));
    let second = log.cut(11).unwrap().expect("room for a second segment");
    log.add(Some(changes(3)), caller(&heard, "c"));
    assert!(
        log.cut(12).unwrap().is_none(),
        "two in flight: the third waits"
    );
    assert_eq!((first.from, first.to), (None, pos(1)));
    assert_eq!((second.from, second.to), (Some(pos(1)), pos(2)));
    assert!(first.order.after.is_none(), "nothing before the first");
    assert_eq!(log.in_flight(), 2);
    assert_eq!(log.position(), Some(pos(2)));
    // The second's move waits for the first's: confirmed, it may go.
    let mut after = second.order.after.expect("the second waits for the first");
    assert!(after.try_recv().is_err(), "not before the first is the tip");
    first.order.done.send(()).unwrap();
    assert!(after.try_recv().is_ok());
    // The first back: room for the third, which waits for the second.
    log.shipped(pos(1), &Ok(()));
    let third = log.cut(13).unwrap().expect("room again");
    assert_eq!((third.from, third.to), (Some(pos(2)), pos(3)));
    let mut after = third.order.after.expect("the third waits for the second");
    drop(second.order.done);
    assert!(
        after
            .try_recv()
            .is_err_and(|e| e == oneshot::error::TryRecvError::Closed),
        "a second that never became the tip fails the third before its move"
    );
}

#[test]
fn outcomes_coming_back_out_of_order_are_answered_in_log_order() {
    let mut log = pipelined(1 << 20, 3);
    let heard = Heard::default();
    let tips = log.tips();
    for (page, name) in [(1, "a"), (2, "b"), (3, "c")] {
        log.add(Some(changes(page)), caller(&heard, name));
        assert!(log.cut(10).unwrap().is_some());
    }
    log.shipped(pos(2), &Ok(()));
    assert!(heard.lock().unwrap().is_empty(), "b waits for a");
    assert_eq!(*tips.borrow(), None);
    log.shipped(pos(1), &Ok(()));
    assert_eq!(*heard.lock().unwrap(), vec![("a", true), ("b", true)]);
    assert_eq!(*tips.borrow(), Some(pos(2)));
    assert!(!log.settled(), "c is still in flight");
    log.shipped(pos(3), &Ok(()));
    assert!(log.settled());
    assert_eq!(log.since_image(), (3, log.since_image().1));
}

#[test]
fn a_failed_segment_fails_every_later_one_and_everything_waiting() {
    let mut log = pipelined(1 << 20, 2);
    let heard = Heard::default();
    log.add(Some(changes(1)), caller(&heard, "a"));
    log.cut(10).unwrap().unwrap();
    log.add(Some(changes(2)), caller(&heard, "b"));
    log.cut(10).unwrap().unwrap();
    log.add(Some(changes(3)), caller(&heard, "waiting"));
    // The second's work ends first: its predecessor's move never came.
    log.shipped(pos(2), &Err(unknown()));
    assert!(
        heard.lock().unwrap().is_empty(),
        "nothing answered out of order"
    );
    log.shipped(pos(1), &Err(unknown()));
    assert_eq!(
        *heard.lock().unwrap(),
        vec![("a", false), ("waiting", false), ("b", false)]
    );
    assert!(log.failure().is_some());
    assert!(log.settled());
    assert!(log.cut(11).unwrap().is_none(), "a failed log cuts nothing");
    assert_eq!(log.position(), None, "the tip never moved");
}

#[test]
fn a_batch_without_changes_is_answered_only_once_every_segment_before_it_is_the_tip() {
    let mut log = pipelined(1 << 20, 2);
    let heard = Heard::default();
    log.add(Some(changes(1)), caller(&heard, "write"));
    log.cut(10).unwrap().unwrap();
    log.add(None, caller(&heard, "gate"));
    assert!(log.cut(10).unwrap().is_none(), "nothing to cut");
    assert!(
        heard.lock().unwrap().is_empty(),
        "the gate waits for the write"
    );
    log.shipped(pos(1), &Ok(()));
    assert_eq!(
        *heard.lock().unwrap(),
        vec![("write", true), ("gate", true)]
    );
    // With nothing in flight it is answered at once.
    log.add(None, caller(&heard, "idle gate"));
    log.cut(10).unwrap();
    assert_eq!(heard.lock().unwrap().last(), Some(&("idle gate", true)));
}

#[test]
fn a_stopping_tenant_answers_every_segment_in_flight_unknown() {
    let mut log = pipelined(1 << 20, 2);
    let heard = Heard::default();
    for (page, name) in [(1, "a"), (2, "b")] {
        log.add(Some(changes(page)), caller(&heard, name));
        log.cut(10).unwrap().unwrap();
    }
    log.abort();
    assert_eq!(*heard.lock().unwrap(), vec![("a", false), ("b", false)]);
    assert!(log.settled());
}

#[test]
fn in_flight_bytes_count_every_segment_under_way() {
    let mut log = pipelined(1 << 20, 2);
    let heard = Heard::default();
    for page in [1, 2] {
        log.add(Some(changes(page)), caller(&heard, "x"));
        log.cut(10).unwrap().unwrap();
    }
    let one = {
        let mut single = pipelined(1 << 20, 2);
        single.add(Some(changes(1)), Vec::new());
        single.cut(10).unwrap().unwrap();
        single.unshipped_bytes()
    };
    assert!(one > 0);
    assert!(log.unshipped_bytes() >= 2 * one - 16, "both segments count");
    assert_eq!(log.segments_to_settle(), 3, "two in flight, and the next");
}

#[test]
fn settling_counts_the_segment_in_flight_and_every_segment_the_waiting_batches_need() {
    let mut idle = log(1_000);
    assert_eq!(
        idle.segments_to_settle(),
        2,
        "nothing waits: one and the next"
    );
    idle.pending_bytes = 499;
    assert_eq!(idle.segments_to_settle(), 2);
    idle.pending_bytes = 2_400;
    // Batches of at most 500 bytes fill each segment but the last more than half: 5.
    assert_eq!(idle.segments_to_settle(), 6);
}

#[test]
fn a_long_run_of_batches_is_cut_into_several_chained_segments_at_once_each_within_the_limit() {
    // Two one-page batches fill a segment: nine go as four (the limit in flight) and one left,
    // cut one after another (as one `ship_next` loop does), each applying to the one before
    // and waiting for its move.
    let limit = encoded_bound(512, 2);
    let mut log = pipelined(limit, 4);
    let heard = Heard::default();
    for page in 1..=9 {
        log.add(Some(changes(page)), caller(&heard, "w"));
    }
    let cuts: Vec<Cut> = std::iter::from_fn(|| log.cut(10).unwrap())
        .take(4)
        .collect();
    assert_eq!(cuts.len(), 4, "four in flight, the limit");
    assert!(log.cut(10).unwrap().is_none(), "the ninth waits for room");
    let waiting = (2 * encoded_bound(512, 1)).div_ceil(limit) as u32;
    assert_eq!(
        log.segments_to_settle(),
        4 + waiting,
        "four in flight and the ninth batch's"
    );
    let key = LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t1").unwrap());
    for (i, cut) in cuts.iter().enumerate() {
        let seq = i as u64 + 1;
        assert_eq!(cut.to, pos(seq));
        assert_eq!(cut.from, (seq > 1).then(|| pos(seq - 1)));
        assert_eq!(cut.order.after.is_some(), seq > 1);
        let decoded = Segment::decode(&cut.bytes, &key, cut.to).unwrap();
        assert_eq!(decoded.pages.len(), 2, "two whole batches in each");
    }
    let mut cuts = cuts.into_iter();
    let (first, second, third) = (
        cuts.next().unwrap(),
        cuts.next().unwrap(),
        cuts.next().unwrap(),
    );
    let mut second_after = second.order.after.unwrap();
    let mut third_after = third.order.after.unwrap();
    first.order.done.send(()).unwrap();
    assert!(
        second_after.try_recv().is_ok(),
        "the first's move opens the second's"
    );
    drop(second.order.done);
    assert!(
        third_after
            .try_recv()
            .is_err_and(|e| e == oneshot::error::TryRecvError::Closed),
        "the second failed: the third never asks"
    );
}

#[test]
fn segments_count_toward_compaction_in_log_order_whatever_order_their_outcomes_come_in() {
    let mut log = pipelined(1 << 20, 4);
    let heard = Heard::default();
    for page in 1..=3 {
        log.add(Some(changes(page)), caller(&heard, "w"));
        log.cut(10).unwrap().unwrap();
    }
    log.shipped(pos(3), &Ok(()));
    log.shipped(pos(2), &Ok(()));
    assert_eq!(
        log.since_image().0,
        0,
        "nothing is on the chain before the first"
    );
    log.shipped(pos(1), &Ok(()));
    let (segments, bytes) = log.since_image();
    assert_eq!(segments, 3);
    // An image at the second cut holds the first two: only the third still counts.
    log.image_at(Some(pos(2)));
    let (after, left) = log.since_image();
    assert_eq!(after, 1);
    assert!(left > 0 && left < bytes);
    // An older image changes nothing.
    log.image_at(Some(pos(1)));
    assert_eq!(log.since_image(), (after, left));
}

#[test]
fn a_cut_after_a_segment_answered_many_callers_waits_for_as_many_to_write_again() {
    let mut log = pipelined(1 << 20, 1);
    let heard = Heard::default();
    let mut callers = caller(&heard, "a");
    callers.extend(caller(&heard, "b"));
    log.add(Some(changes(1)), callers);
    log.cut(10).unwrap().unwrap();
    log.add(Some(changes(2)), caller(&heard, "waiting"));
    let answered = log.shipped(pos(1), &Ok(()));
    assert_eq!(answered, 2);
    assert!(log.linger_for(answered), "two callers answered: pause");
    assert!(log.cut(11).unwrap().is_none(), "nobody came back yet");
    log.add(Some(changes(3)), caller(&heard, "a again"));
    assert!(log.cut(11).unwrap().is_none(), "one of two came back");
    log.add(Some(changes(4)), caller(&heard, "b again"));
    let cut = log.cut(11).unwrap().expect("both came back: cut");
    assert_eq!(cut.to, pos(2));
    let carried = log.shipped(pos(2), &Ok(()));
    assert_eq!(
        carried, 3,
        "the waiting caller and both that came back, in one segment"
    );
}

#[test]
fn a_lone_caller_never_waits_and_an_ended_pause_cuts_at_once() {
    let mut log = pipelined(1 << 20, 1);
    let heard = Heard::default();
    log.add(Some(changes(1)), caller(&heard, "lone"));
    log.cut(10).unwrap().unwrap();
    let answered = log.shipped(pos(1), &Ok(()));
    assert!(!log.linger_for(answered), "one caller: no pause");
    let mut both = caller(&heard, "a");
    both.extend(caller(&heard, "b"));
    log.add(Some(changes(2)), both);
    log.cut(10).unwrap().unwrap();
    let answered = log.shipped(pos(2), &Ok(()));
    assert!(log.linger_for(answered));
    log.add(Some(changes(3)), caller(&heard, "a again"));
    assert!(log.cut(11).unwrap().is_none());
    log.end_linger();
    assert!(log.cut(11).unwrap().is_some(), "the pause's time is up");
}

#[test]
fn nothing_is_cut_behind_a_segment_in_flight_that_already_failed() {
    let mut log = pipelined(1 << 20, 4);
    let heard = Heard::default();
    for (page, name) in [(1, "a"), (2, "b")] {
        log.add(Some(changes(page)), caller(&heard, name));
        log.cut(10).unwrap().unwrap();
    }
    // The second failed on its own while the first is still out.
    log.shipped(pos(2), &Err(unknown()));
    log.add(Some(changes(3)), caller(&heard, "c"));
    assert!(
        log.cut(11).unwrap().is_none(),
        "a segment cut now could never be named: no put"
    );
}
