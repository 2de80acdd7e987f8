//! A property of the retention plan, stated purely: applied again and again at increasing
//! `now`, the history growing in between (segments, images, tenures of either mode, failed
//! segments), it never deletes anything a restore needs — the restore of the head at the tip,
//! and a point-in-time restore to any moment of the window (docs/guarantees.md, the storage
//! bound and point-in-time restore).
//!
//! The restores are modelled after `crate::log::pitr` and `crate::log::restore`: a state is
//! named by what produced it (the empty database, the segment at a position, an image taken by
//! a tenure without a log), and "a segment applies to an image" is "the image holds the state
//! the segment was cut from" — what the rolling sums check.

use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;
use crate::ids::{OrgId, TenantId};
use crate::layout::segment_key;

/// A database state, named by what produced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The empty database.
    Empty,
    /// The state right after the segment at this position.
    After(LogPos),
    /// The state an image of a tenure without a log holds (writes no segment carries).
    Own(usize),
}

/// One segment put in the store.
#[derive(Debug, Clone, Copy)]
struct Seg {
    pos: LogPos,
    prev: Option<LogPos>,
    stamp: u64,
    /// The state it was cut from.
    applies_to: State,
}

/// One image put in the store.
#[derive(Debug, Clone, Copy)]
struct Img {
    info: ImageInfo,
    state: State,
}

/// What happens next in the tenant's life.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// The live tenure (with a log) ships a segment.
    Ship,
    /// The live tenure takes an image and the head moves to it.
    Image,
    /// The tenure ends and the next begins, with a log or without.
    Tenure { logged: bool },
    /// The live tenure's segment is put but its tip move fails; the tenure ends.
    FailedShip,
    /// The live tenure puts an image and its manifest, then crashes before its head moves: a
    /// complete image no head ever names, which no replica remembers; the next tenure begins
    /// in the same mode.
    UnnamedImage,
    /// The live tenure takes an image and the head moves to it, but the move's answer is lost:
    /// the tenure goes on building its images on the head it knew, so a later head passes the
    /// image by; its replica's reconciliation keeps it once the head is past it and leaves it
    /// to retention (docs/guarantees.md, "Reconciling puts of unknown outcome").
    UnknownHeadImage,
    /// The live tenure puts an image and its manifest, and its head move's answer is lost, the
    /// move never having landed: the tenure goes on; the reconciliation cannot tell this image
    /// from an `UnknownHeadImage` once the head moved past it, and keeps it too.
    LostHeadImage,
    /// Retention runs now, and its plan is applied.
    Retention,
}

fn step() -> impl Strategy<Value = (Step, u64)> {
    let step = prop_oneof![
        5 => Just(Step::Ship),
        2 => Just(Step::Image),
        1 => Just(Step::Tenure { logged: true }),
        1 => Just(Step::Tenure { logged: false }),
        1 => Just(Step::FailedShip),
        1 => Just(Step::UnnamedImage),
        1 => Just(Step::UnknownHeadImage),
        1 => Just(Step::LostHeadImage),
        2 => Just(Step::Retention),
    ];
    (step, 1..=5u64)
}

/// The tenant: everything put, what is still in the store, the lease record.
struct Tenant {
    key: LeaseKey,
    now: u64,
    retain: u64,
    epoch: u64,
    logged: bool,
    tip: Option<LogPos>,
    head: Option<(u64, u64)>,
    /// The head the live tenure knows (and builds its images on).
    known_head: Option<(u64, u64)>,
    /// Images of the live tenure whose head move's answer was lost, not judged yet by its
    /// replica's reconciliation ([`Tenant::reconcile_unknown`]).
    unknown: Vec<(u64, u64)>,
    /// The state the live tenure holds (its next segment is cut from it).
    state: State,
    next_image: u64,
    segments: Vec<Seg>,
    images: Vec<Img>,
    /// Keys still in the store.
    present: BTreeSet<String>,
}

impl Tenant {
    fn new(retain: u64) -> Self {
        Self {
            key: LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t1").unwrap()),
            now: 1_000,
            retain,
            epoch: 1,
            logged: true,
            tip: None,
            head: None,
            known_head: None,
            unknown: Vec::new(),
            state: State::Empty,
            next_image: 1,
            segments: Vec::new(),
            images: Vec::new(),
            present: BTreeSet::new(),
        }
    }

    fn seg_key(&self, pos: LogPos) -> String {
        segment_key(&self.key, pos)
    }

    fn has(&self, key: &str) -> bool {
        self.present.contains(key)
    }

    fn image_present(&self, i: &Img) -> bool {
        self.has(&image_key(&self.key, i.info.epoch, i.info.seq))
            && self.has(&manifest_key(&self.key, i.info.epoch, i.info.seq))
    }

    fn next_pos(&self) -> LogPos {
        LogPos {
            epoch: self.epoch,
            seq: self.tip.map_or(1, |t| t.seq + 1),
        }
    }

    fn put_segment(&mut self) -> Seg {
        let seg = Seg {
            pos: self.next_pos(),
            prev: self.tip,
            stamp: self.now,
            applies_to: self.state,
        };
        self.segments.push(seg);
        self.present.insert(self.seg_key(seg.pos));
        seg
    }

    /// The state a new tenure restores: the head's, plus the segments after it.
    fn restored_state(&self) -> State {
        let head = self.head.and_then(|(e, s)| {
            self.images
                .iter()
                .find(|i| (i.info.epoch, i.info.seq) == (e, s))
        });
        match (head, self.tip) {
            (Some(h), tip) if h.info.log == tip => h.state,
            (_, Some(tip)) => State::After(tip),
            (_, None) => State::Empty,
        }
    }

    fn apply(&mut self, step: Step) {
        match step {
            Step::Ship if self.logged => {
                let seg = self.put_segment();
                self.tip = Some(seg.pos);
                self.state = State::After(seg.pos);
            }
            Step::Image => {
                let index = self.images.len();
                // A tenure without a log holds writes no segment carries; so does a tenure with
                // a log that has shipped nothing since it restored such an image.
                let state = if self.logged {
                    self.state
                } else {
                    State::Own(index)
                };
                let beyond_log =
                    self.tip.is_some() && state != self.tip.map_or(State::Empty, State::After);
                let info = ImageInfo {
                    epoch: self.epoch,
                    seq: self.next_image,
                    log: self.tip,
                    created_at_ms: self.now,
                    beyond_log,
                    base: self.known_head,
                    damaged: false,
                };
                self.next_image += 1;
                self.images.push(Img { info, state });
                self.present
                    .insert(image_key(&self.key, info.epoch, info.seq));
                self.present
                    .insert(manifest_key(&self.key, info.epoch, info.seq));
                self.head = Some((info.epoch, info.seq));
                self.known_head = self.head;
                // The new head is built on the head the tenure knew, so its chain passes the
                // images whose head move was lost by: the reconciliation judges them now.
                self.reconcile_unknown();
                self.state = state;
            }
            Step::FailedShip if self.logged => {
                self.put_segment();
                self.new_tenure(true);
            }
            Step::UnnamedImage => {
                let (head, known) = (self.head, self.known_head);
                // The head does not move: nothing is passed by.
                let pending = std::mem::take(&mut self.unknown);
                self.apply(Step::Image);
                (self.head, self.known_head, self.unknown) = (head, known, pending);
                self.new_tenure(self.logged);
            }
            Step::UnknownHeadImage => {
                let known = self.known_head;
                let pending = std::mem::take(&mut self.unknown);
                self.apply(Step::Image);
                self.unknown = pending;
                self.unknown.extend(self.head);
                self.known_head = known;
            }
            Step::LostHeadImage => {
                let (head, known) = (self.head, self.known_head);
                let pending = std::mem::take(&mut self.unknown);
                self.apply(Step::Image);
                let lost = self.head;
                (self.head, self.known_head, self.unknown) = (head, known, pending);
                self.unknown.extend(lost);
            }
            Step::Tenure { logged } => self.new_tenure(logged),
            Step::Retention => self.retain_now(),
            Step::Ship | Step::FailedShip => {}
        }
    }

    /// The replica's reconciliation of the images whose head move's answer was lost, its tenure
    /// unable to move the head to them any more (`crate::plan::reconcile::verdict`): an image
    /// the head names, or one the head moved past (a head that once named it or not), is kept
    /// and left to retention; one with the head below it was never named and goes.
    fn reconcile_unknown(&mut self) {
        for (e, s) in std::mem::take(&mut self.unknown) {
            if self.head.is_none_or(|h| h < (e, s)) {
                self.present.remove(&image_key(&self.key, e, s));
                self.present.remove(&manifest_key(&self.key, e, s));
            }
        }
    }

    fn new_tenure(&mut self, logged: bool) {
        // The ended tenure's reconciliation, fenced.
        self.reconcile_unknown();
        self.known_head = self.head;
        self.epoch += 1;
        self.next_image = 1;
        self.logged = logged;
        self.state = self.restored_state();
    }

    fn retain_now(&mut self) {
        let listed: Vec<String> = self.present.iter().cloned().collect();
        let images: Vec<ImageInfo> = self
            .images
            .iter()
            .filter(|i| self.image_present(i))
            .map(|i| i.info)
            .collect();
        let plan = retention_plan(&RetentionInput {
            key: &self.key,
            listed: &listed,
            images: &images,
            head: self.head,
            tip: self.tip,
            holder_epoch: self.epoch,
            floor: 0,
            now_ms: self.now,
            retain_ms: self.retain,
        });
        for doomed in plan {
            self.present.remove(&doomed);
        }
    }

    /// The segment of the chain at `pos`, if it is still in the store.
    fn segment_at(&self, pos: LogPos) -> Option<&Seg> {
        let seg = self.segments.iter().find(|s| s.pos == pos)?;
        self.has(&self.seg_key(pos)).then_some(seg)
    }

    /// Whether a kept image at `at` holds `state` (a target's own position: not beyond its log).
    fn image_holds(&self, at: Option<LogPos>, state: State, exact: bool) -> bool {
        self.images.iter().any(|i| {
            i.info.log == at
                && i.state == state
                && !(exact && i.info.beyond_log)
                && self.image_present(i)
        })
    }

    /// The point-in-time restore's walk, modelled: back from the tip to the target, then on to
    /// an image holding the state the kept segments apply to (or the log's start).
    fn restore_to(&self, position: Option<LogPos>, time: Option<u64>) -> Result<(), String> {
        let Some(mut pos) = self.tip else {
            return Err("no log".into());
        };
        let (mut found, mut need) = (false, None::<State>);
        loop {
            found |= position == Some(pos);
            if found
                && self.image_holds(Some(pos), need.unwrap_or(State::After(pos)), need.is_none())
            {
                return Ok(());
            }
            let seg = self.segment_at(pos).ok_or(format!("{pos} is missing"))?;
            if !found && time.is_some_and(|t| seg.stamp <= t) {
                found = true;
                if self.image_holds(Some(pos), State::After(pos), true) {
                    return Ok(());
                }
            }
            if found {
                if need.is_some_and(|n| n != State::After(pos)) {
                    return Err(format!("no image at {pos} holds the state {need:?}"));
                }
                need = Some(seg.applies_to);
            }
            match seg.prev {
                Some(q) => pos = q,
                None if !found => return Err("before the log".into()),
                None => {
                    let need = need.unwrap_or(State::Empty);
                    return match need == State::Empty || self.image_holds(None, need, false) {
                        true => Ok(()),
                        false => Err(format!("no image at the log's start holds {need:?}")),
                    };
                }
            }
        }
    }

    /// The restore of an open: the head, then the segments after it up to the tip.
    fn restore_head(&self) -> Result<(), String> {
        let Some((e, s)) = self.head else {
            return self.restore_to(self.tip, None).or_else(|e| match self.tip {
                None => Ok(()),
                Some(_) => Err(e),
            });
        };
        let head = self
            .images
            .iter()
            .find(|i| (i.info.epoch, i.info.seq) == (e, s) && self.image_present(i))
            .ok_or("the head is gone")?;
        let mut at = self.tip;
        while at != head.info.log {
            let pos = at.ok_or("the walk passed the head")?;
            at = self
                .segment_at(pos)
                .ok_or(format!("{pos} is missing"))?
                .prev;
        }
        Ok(())
    }

    /// Every moment of the window `[now - retain, now]` (as the restore sees it: by stamps),
    /// and every position of the chain cut in it, restores.
    fn check_window(&self) -> Result<(), String> {
        self.restore_head().map_err(|e| format!("the head: {e}"))?;
        let cutoff = self.now.saturating_sub(self.retain);
        let mut moments = vec![cutoff, self.now];
        moments.extend(
            self.segments
                .iter()
                .map(|s| s.stamp)
                .filter(|t| *t >= cutoff),
        );
        moments.extend(
            self.images
                .iter()
                .map(|i| i.info.created_at_ms)
                .filter(|t| *t >= cutoff),
        );
        let first_stamp = self.chain().last().map(|s| s.stamp);
        for t in moments {
            if first_stamp.is_none_or(|f| t < f) {
                continue; // before the log: refused, as promised
            }
            self.restore_to(None, Some(t))
                .map_err(|e| format!("time {t}: {e}"))?;
        }
        for seg in self.chain().iter().filter(|s| s.stamp >= cutoff) {
            self.restore_to(Some(seg.pos), None)
                .map_err(|e| format!("position {}: {e}", seg.pos))?;
        }
        Ok(())
    }

    /// The chain from the tip, newest first (whether or not each segment is still stored).
    fn chain(&self) -> Vec<Seg> {
        let mut chain = Vec::new();
        let mut at = self.tip;
        while let Some(pos) = at {
            let Some(seg) = self.segments.iter().find(|s| s.pos == pos) else {
                break;
            };
            chain.push(*seg);
            at = seg.prev;
        }
        chain
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn storage_bound_retention_applied_again_and_again_never_deletes_what_a_moment_of_the_window_needs(
        steps in proptest::collection::vec(step(), 1..80),
        retain in 5..40u64,
    ) {
        let mut tenant = Tenant::new(retain);
        for (step, wait) in steps {
            tenant.now += wait;
            tenant.apply(step);
            if matches!(step, Step::Retention) {
                let checked = tenant.check_window();
                prop_assert!(
                    checked.is_ok(),
                    "{:?} at {} after {:?}; images {:?}; segments {:?}; present {:?}",
                    checked, tenant.now, step, tenant.images, tenant.segments, tenant.present
                );
            }
        }
    }
}

/// Hole 6b of the change log's final review: images whose head move landed unbeknown to their
/// tenure (`UnknownHeadImage`), and no old image on the head's chain of bases — the base is
/// then the newest old image by position, which the head passes by. When the reconciliation
/// took such an image back, a moment of the window could no longer be restored (time 1018:
/// `e00000001/log-000000000002 is missing`); it now keeps an image the head moved past and
/// leaves it to retention. Shrunk by the property test above.
#[test]
fn final_review_hole6b_a_base_the_head_passed_by_stays_and_the_window_restores() {
    let mut tenant = Tenant::new(5);
    let steps = [
        (Step::Ship, 1),
        (Step::Ship, 1),
        (Step::UnknownHeadImage, 1),
        (Step::UnknownHeadImage, 5),
        (Step::Ship, 3),
        (Step::UnknownHeadImage, 1),
        (Step::UnknownHeadImage, 5),
        (Step::Ship, 2),
        (Step::Retention, 1),
        (Step::UnknownHeadImage, 1),
        (Step::Image, 1),
        (Step::Retention, 1),
    ];
    for (step, wait) in steps {
        tenant.now += wait;
        tenant.apply(step);
        if matches!(step, Step::Retention) {
            let checked = tenant.check_window();
            assert!(checked.is_ok(), "{checked:?} at {}", tenant.now);
        }
    }
}

#[test]
fn the_model_restores_across_a_mode_switch_only_from_the_image_the_next_log_continued_from() {
    let mut t = Tenant::new(1_000);
    for step in [
        Step::Ship,
        Step::Ship,
        Step::Tenure { logged: false },
        Step::Image,
        Step::Tenure { logged: true },
        Step::Ship,
    ] {
        t.now += 1;
        t.apply(step);
    }
    let pos = |seq| LogPos { epoch: 1, seq };
    assert_eq!(t.restore_to(Some(pos(2)), None), Ok(()));
    assert_eq!(
        t.restore_to(Some(LogPos { epoch: 3, seq: 3 }), None),
        Ok(())
    );
    // Without the image of the tenure without a log, the segment after it applies to nothing.
    let image = image_key(&t.key, 2, 1);
    t.present.remove(&image);
    assert!(
        t.restore_to(Some(LogPos { epoch: 3, seq: 3 }), None)
            .is_err()
    );
    assert_eq!(t.restore_to(Some(pos(2)), None), Ok(()));
}
