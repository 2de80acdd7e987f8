//! The model of reading the change log back: what an open restores (the head image, falling
//! back along its bases, plus the segments from its position up to the tip), what a
//! point-in-time restore to a position or a time must give, and what a damaged or missing
//! segment makes of both (docs/guarantees.md, the change log). Nothing here shares code with the
//! runtime: the walk is written from the documented rules.
//!
//! - A restore never serves a state the log does not vouch for: a segment that is missing or
//!   fails its checks, a chain that does not lead to the image's position, or a segment cut on
//!   another state than the one it is applied to, is `Corrupt` (typed), never a wrong ledger.
//! - A point-in-time restore walks back from the tip by `prev` to the target, then on to the
//!   newest image at or before it; a segment missing on the way is the end of the retention
//!   window (`OutsideRetention`), one damaged is `Corrupt`; otherwise it gives exactly the
//!   content the log holds at the target.
//! - After a mode change (`Shipped`, then `Images`, then `Shipped`) the later segments were cut
//!   on the `Images` tenure's image (`beyond_log`); a restore to a position after it must use
//!   that image (hole 4 of the change-log review). Until its fix merges
//!   ([`crate::ops::UNFIXED_LOG_HOLES`]) the model takes the runtime as it is: such an image is
//!   never used, and the walk that passes it is `Corrupt`.

use super::{Pos, Res, State};
use crate::ops::log_hole_fixed;

/// The target of a point-in-time restore, as the checker resolved it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PitrTarget {
    /// The state right after the segment at this position.
    Position(Pos),
    /// The state as of a wall-clock time: the last segment cut before op `op` began (the tip
    /// then, `expect`; `None`: there was no log yet).
    Time {
        /// Milliseconds since the Unix epoch.
        unix_ms: u64,
        /// The tip of the tenant when op `op` began.
        expect: Option<Pos>,
        /// The op whose start the time marks.
        op: usize,
    },
}

/// What an open restored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    /// The ledger's content.
    pub content: Vec<String>,
    /// The image it started from.
    pub image: Option<(u64, u64)>,
    /// How many segments it applied.
    pub segments: u64,
    /// The identity of the restored bytes.
    pub state: u64,
}

/// Why a walk stopped short.
enum Stop {
    /// A segment it needs is missing.
    Missing,
    /// A segment fails its checks, or the chain does not meet the image.
    Corrupt,
    /// A damaged object retention may have deleted meanwhile: `Corrupt` while it is there, the
    /// end of the window once it is gone (seed 1796180657680107252); the segment's position,
    /// when it is a segment (the checker then looks whether it is still listed).
    CorruptUnlessGone(Option<Pos>),
}

impl State {
    /// What an open of tenant `t` restores: the head (or, for a damaged head, a base), then the
    /// segments from its position up to the tip, each applied to the state it was cut on. A
    /// failure is `Corrupt`; `Err((Corrupt, true))` when it came only as the segments were
    /// applied to the installed file (the tenure's marker is written by then).
    pub(super) fn restore(&self, t: usize) -> Result<Restored, (Res, bool)> {
        self.restore_fetched(t)
            .map_err(|res| (res, false))?
            .map_err(|res| (res, true))
    }

    /// [`State::restore`]: the fetch's failure outside, the install's inside.
    fn restore_fetched(&self, t: usize) -> Result<Result<Restored, Res>, Res> {
        let ts = &self.tenants[t];
        let image = match ts.head {
            Some(head) => Some(ts.restorable(head)?),
            None => None,
        };
        let base = image.and_then(|at| ts.objects[&at].log);
        let start = self.start_of(t, image);
        let Some(tip) = ts.tip else {
            // No log: the image alone (a position without a tip is out of chain).
            return match base {
                None => Ok(Ok(Restored {
                    content: start.0,
                    image,
                    segments: 0,
                    state: start.1,
                })),
                Some(_) => Err(Res::Corrupt),
            };
        };
        if Some(tip) == base {
            return Ok(Ok(Restored {
                content: start.0,
                image,
                segments: 0,
                state: start.1,
            }));
        }
        // Walk back from the tip to the image's position (or the start of the log).
        let mut chain = Vec::new();
        let mut pos = tip;
        loop {
            if pos.0 <= ts.floor || base.is_some_and(|b| pos.1 <= b.1) {
                return Err(Res::Corrupt);
            }
            let Some(seg) = ts.segments.get(&pos) else {
                return Err(Res::Corrupt);
            };
            if seg.damaged {
                return Err(Res::Corrupt);
            }
            chain.push(pos);
            match (seg.prev, base) {
                (prev, b) if prev == b => break,
                (None, Some(_)) => return Err(Res::Corrupt),
                (Some(prev), _) => pos = prev,
                (None, None) => unreachable!("prev == base above"),
            }
        }
        Ok(match self.apply_chain(t, start, &chain) {
            Some((content, state)) => Ok(Restored {
                content,
                image,
                segments: chain.len() as u64,
                state,
            }),
            None => Err(Res::Corrupt),
        })
    }

    /// What a restore starts from: `image`'s content and bytes, or an empty database.
    fn start_of(&self, t: usize, image: Option<(u64, u64)>) -> (Vec<String>, u64) {
        let image = image.map(|at| &self.tenants[t].objects[&at]);
        image.map_or((Vec::new(), 0), |i| (i.content.clone(), i.state))
    }

    /// Applies the segments of `chain` (newest first) to `start`: the content and bytes after
    /// the newest, or `None` when one was cut on other bytes.
    fn apply_chain(
        &self,
        t: usize,
        start: (Vec<String>, u64),
        chain: &[Pos],
    ) -> Option<(Vec<String>, u64)> {
        let mut at = start;
        for pos in chain.iter().rev() {
            let seg = &self.tenants[t].segments[pos];
            if seg.before != at.1 {
                return None;
            }
            at = (seg.content.clone(), seg.after);
        }
        Some(at)
    }

    /// The position `back` segments before the tip of tenant `t`, along the chain.
    pub fn chain_position(&self, t: usize, back: usize) -> Option<Pos> {
        let ts = &self.tenants[t];
        let mut pos = ts.tip?;
        for _ in 0..back {
            pos = (*ts.links.get(&pos)?)?;
        }
        Some(pos)
    }

    /// The positions of tenant `t`'s chain, from the tip, at which a point-in-time restore has
    /// a segment to apply (no image of the log holds exactly that position): first those right
    /// after an image taken beyond the log (a mode change), then those right after another
    /// image (where a restore meets the image it starts from), then the others.
    pub fn replayed_positions(&self, t: usize) -> Vec<Pos> {
        let ts = &self.tenants[t];
        let held = |p: Pos, beyond: bool| {
            (ts.objects.values()).any(|image| image.log == Some(p) && image.beyond_log == beyond)
        };
        let mut ranked: [Vec<Pos>; 3] = Default::default();
        let mut pos = ts.tip;
        while let Some(at) = pos {
            let prev = ts.links.get(&at).copied().flatten();
            if !held(at, false) {
                let rank = match prev {
                    Some(p) if held(p, true) => 0,
                    Some(p) if held(p, false) => 1,
                    _ => 2,
                };
                ranked[rank].push(at);
            }
            pos = prev;
        }
        ranked.concat()
    }

    /// Every outcome a point-in-time restore of tenant `t` to `target` may have.
    pub(super) fn pitr(&self, t: usize, target: PitrTarget) -> Vec<Res> {
        match self.pitr_walk(t, target) {
            Ok((content, racing)) if racing => vec![Res::Keys(content), Res::OutsideRetention],
            Ok((content, _)) => vec![Res::Keys(content)],
            Err(Stop::Missing) => vec![Res::OutsideRetention],
            Err(Stop::Corrupt) => vec![Res::Corrupt],
            Err(Stop::CorruptUnlessGone(_)) => vec![Res::Corrupt, Res::OutsideRetention],
        }
    }

    /// The damaged segment a point-in-time restore of tenant `t` to `target` stops at, when
    /// retention may have deleted it (either answer is allowed, and the listing tells which).
    pub fn pitr_damaged_retired_segment(&self, t: usize, target: PitrTarget) -> Option<Pos> {
        match self.pitr_walk(t, target) {
            Err(Stop::CorruptUnlessGone(at)) => at,
            _ => None,
        }
    }

    /// The walk of a point-in-time restore: the content, and whether it read an object that
    /// retention may be deleting at that moment (then `OutsideRetention` is allowed too).
    fn pitr_walk(&self, t: usize, target: PitrTarget) -> Result<(Vec<String>, bool), Stop> {
        let ts = &self.tenants[t];
        let tip = ts.tip.ok_or(Stop::Missing)?;
        if let PitrTarget::Position(p) = target
            && p.1 > tip.1
        {
            return Err(Stop::Missing);
        }
        let mut racing = false;
        let mut found = false;
        // The segments to apply, the target first.
        let mut kept: Vec<Pos> = Vec::new();
        let mut at = tip;
        let image = loop {
            if !found && let PitrTarget::Position(p) = target {
                if at == p {
                    found = true;
                } else if at.1 <= p.1 {
                    // The chain from the tip holds another segment there.
                    return Err(Stop::Missing);
                }
            }
            if found && let Some(image) = self.pitr_image(t, Some(at), &kept, &mut racing) {
                break Some(image);
            }
            let Some(seg) = ts.segments.get(&at) else {
                return Err(Stop::Missing);
            };
            racing |= seg.retired;
            if seg.damaged {
                return Err(if seg.retired {
                    Stop::CorruptUnlessGone(Some(at))
                } else {
                    Stop::Corrupt
                });
            }
            if !found
                && let PitrTarget::Time { expect, .. } = target
                && expect == Some(at)
            {
                // The newest segment cut at or before the time: no later one was.
                found = true;
                if let Some(image) = self.pitr_image(t, Some(at), &kept, &mut racing) {
                    break Some(image);
                }
            }
            if found
                && let Some(last) = kept.last()
                && seg.after != ts.segments[last].before
            {
                // A mode change: the later log continued from an image beyond the log here,
                // which is not retained (the end of the window) or fails its checks.
                return Err(self.image_missing_or_damaged(t, Some(at), &kept));
            }
            if found {
                kept.push(at);
            }
            match seg.prev {
                Some(prev) => at = prev,
                None if !found => return Err(Stop::Missing),
                None => match self.pitr_image(t, None, &kept, &mut racing) {
                    Some(image) => break Some(image),
                    // The log began on an empty database.
                    None if kept.last().is_none_or(|p| ts.segments[p].before == 0) => break None,
                    None => return Err(self.image_missing_or_damaged(t, None, &kept)),
                },
            }
        };
        let start = self.start_of(t, image);
        let (content, _) = self.apply_chain(t, start, &kept).ok_or(Stop::Corrupt)?;
        Ok((content, racing))
    }

    /// The newest image a point-in-time restore starts from at `at` (the chain's start for
    /// `None`): one whose manifest holds `at`, that verifies, and — unless hole 4 is fixed —
    /// not taken beyond the log. Once fixed, an image beyond the log is used where the next
    /// segment of the walk was cut on it (the chain continued from it after a mode change).
    fn pitr_image(
        &self,
        t: usize,
        at: Option<Pos>,
        kept: &[Pos],
        racing: &mut bool,
    ) -> Option<(u64, u64)> {
        let ts = &self.tenants[t];
        let next_cut_on = kept.last().map(|p| ts.segments[p].before);
        let chosen = ts
            .objects
            .iter()
            .rev()
            .filter(|(o, _)| o.0 > ts.floor)
            .filter(|(_, image)| image.log == at && !image.corrupt)
            .find(|(_, image)| match next_cut_on {
                // At the target itself: an image of the log's state there. One whose pages are
                // not the segment's state (a tenure that continued from an image beyond the log
                // and shipped nothing yet, then took an image) is checked and passed over, as
                // the runtime checks an image against the segment at its position.
                None => {
                    !image.beyond_log
                        && at
                            .and_then(|p| ts.segments.get(&p))
                            .is_none_or(|seg| seg.after == image.state)
                }
                Some(_) => {
                    !image.beyond_log || (log_hole_fixed(4) && next_cut_on == Some(image.state))
                }
            })
            .map(|(o, image)| (*o, image.retired));
        let (at, retired) = chosen?;
        *racing |= retired;
        Some(at)
    }

    /// Why no image at `at` fits a walk that needs one there (`kept`: the segments it holds,
    /// the oldest last): `Corrupt` when one that would fit fails its checks — the state exists,
    /// damaged — else `Missing` (outside the retention window).
    fn image_missing_or_damaged(&self, t: usize, at: Option<Pos>, kept: &[Pos]) -> Stop {
        let ts = &self.tenants[t];
        let mut damaged = (ts.objects.iter()).filter(|(o, image)| {
            o.0 > ts.floor
                && image.log == at
                && image.corrupt
                && (!kept.is_empty() || !image.beyond_log)
        });
        match damaged.next() {
            None => Stop::Missing,
            // Retention may have deleted every such image meanwhile.
            Some((_, first)) if first.retired && damaged.all(|(_, image)| image.retired) => {
                Stop::CorruptUnlessGone(None)
            }
            Some(_) => Stop::Corrupt,
        }
    }

    /// Whether a point-in-time restore of tenant `t` to `target` must give the log's content,
    /// and whether the chain it restores passes a mode change (a segment cut on an image beyond
    /// the log): `Some(mode_change)` when its position is on the chain after `base_seq` (the
    /// window's base: the newest image of the chain older than `retain`, 0 when there is none)
    /// — or at it, by position, which the base's image holds — and nothing it may need was
    /// damaged behind the store's back (a segment above the base, or an image).
    pub fn pitr_inside_window(&self, t: usize, target: PitrTarget, base_seq: u64) -> Option<bool> {
        let ts = &self.tenants[t];
        let (position, at_base_ok) = match target {
            PitrTarget::Position(p) => (Some(p), true),
            // A time names the segment it restores to, which the base may cover.
            PitrTarget::Time { expect, .. } => (expect, false),
        };
        let chain = self.chain_of(t);
        let p = position.filter(|p| chain.contains(p))?;
        let inside = p.1 > base_seq || (at_base_ok && p.1 == base_seq);
        let damaged = chain
            .iter()
            .filter(|c| c.1 > base_seq)
            .any(|c| ts.deleted.contains(c) || ts.segments.get(c).is_some_and(|seg| seg.damaged));
        let corrupt = ts.objects.values().any(|image| image.corrupt);
        if !inside || damaged || corrupt {
            return None;
        }
        // A mode change between the base and the target: a segment not cut on its `prev`'s.
        let forked = chain
            .iter()
            .filter(|c| c.1 > base_seq && c.1 <= p.1)
            .any(|c| {
                let seg = ts.segments.get(c);
                let prev = seg.and_then(|s| s.prev).and_then(|q| ts.segments.get(&q));
                matches!((seg, prev), (Some(s), Some(q)) if s.before != q.after)
                    || seg.is_some_and(|s| {
                        (ts.objects.values()).any(|i| i.beyond_log && i.log == s.prev)
                    })
            });
        Some(forked)
    }

    /// Damages tenant `t`'s segment at `pos`: its bytes fail their checks, or (`delete`) it is
    /// gone. `Skipped` when there is no such segment.
    pub(super) fn damage(&mut self, t: usize, pos: Pos, delete: bool) -> Res {
        let ts = &mut self.tenants[t];
        if !ts.segments.contains_key(&pos) {
            return Res::Skipped;
        }
        if delete {
            ts.segments.remove(&pos);
            ts.deleted.insert(pos);
        } else if let Some(seg) = ts.segments.get_mut(&pos) {
            seg.damaged = true;
        }
        Res::Ok
    }
}
