//! The model of the storage bound in the change log's cases (`Op::Log`): compaction takes an
//! image once enough segments were shipped since the newest one, and retention, which runs
//! after every image a logged tenure publishes, may then delete what no moment of the window
//! needs (docs/guarantees.md, the storage bound).
//!
//! Retention runs on the wall clock (`retain` is a few ms of real time here), so the model does
//! not say *which* objects it deletes: after an image, every other image and every segment at or
//! below the head image's position is **retired** — there or not, until a listing shows it
//! gone ([`State::refine`]). What it must keep is judged from the stores instead
//! ([`State::retention_breach`]: the head, every image younger than `retain` by its manifest's
//! own stamp, and the window's base with every segment above it), and every point-in-time
//! restore is checked against what the listing shows.

use std::collections::BTreeMap;

use super::{COMPACT_SEGMENTS, Pos, State, Status};
use crate::ops::log_hole_fixed;

impl State {
    /// Retention may run for tenant `t` (an image was just published by a logged tenure): in
    /// the change log's cases every image but the head, and every segment at or below the head
    /// image's position, may go.
    pub(super) fn retain(&mut self, t: usize) {
        if !self.log_case {
            return;
        }
        let ts = &mut self.tenants[t];
        let head = ts.head;
        let covered = head
            .and_then(|h| ts.objects.get(&h))
            .and_then(|image| image.log)
            .map_or(0, |p| p.1);
        for (at, image) in ts.objects.iter_mut() {
            if Some(*at) != head {
                image.retired = true;
            }
        }
        for (at, seg) in ts.segments.iter_mut() {
            if at.1 <= covered {
                seg.retired = true;
            }
        }
        if log_hole_fixed(8) {
            // Retention by listing: an image no manifest names, older than the longest put,
            // goes too.
            let lone: Vec<(u64, u64)> = ts.lone.iter().copied().collect();
            ts.lone.clear();
            ts.lone_retired.extend(lone);
        }
    }

    /// What a listing shows of tenant `t` settles what retention did: a retired object that is
    /// not listed is gone for good.
    pub fn refine(
        &mut self,
        t: usize,
        listed: &[String],
        image_key: impl Fn((u64, u64)) -> String,
        segment_key: impl Fn(Pos) -> String,
    ) {
        let chain = self.chain_of(t);
        let ts = &mut self.tenants[t];
        let gone = chain
            .into_iter()
            .filter(|p| !listed.contains(&segment_key(*p)));
        ts.retention_judged.extend(gone);
        ts.objects
            .retain(|at, image| !image.retired || listed.contains(&image_key(*at)));
        ts.segments
            .retain(|at, seg| !seg.retired || listed.contains(&segment_key(*at)));
        ts.lone_retired
            .retain(|at| listed.contains(&image_key(*at)));
    }

    /// Compaction in the change log's cases: a serving logged tenure that holds its lease, has
    /// committed since its newest image and shipped [`COMPACT_SEGMENTS`] segments since takes
    /// an image at its tip (the checker waits for it, within the crash bound).
    pub(super) fn compact(&mut self) {
        if !self.log_case {
            return;
        }
        let due: Vec<(usize, u64)> = self
            .tenures
            .iter()
            .filter(|(k, tenure)| {
                tenure.mode.logged()
                    && tenure.status == Status::Serving
                    && tenure.dirty
                    && tenure.since_image >= COMPACT_SEGMENTS
                    && self.holds(**k)
                    && self.store_live(k.0, tenure.replica, k.1)
                    && k.1 > self.tenants[k.0].floor
            })
            .map(|(k, _)| *k)
            .collect();
        for k in due {
            let _ = self.publish(k, false);
        }
    }

    /// Whether tenant `t`'s listing breaks the storage bound's promise to keep the window
    /// (docs/guarantees.md): an image of the chain, or a segment of it, is gone though no newer
    /// image of the chain that was older than `retain` when it went (by its manifest's stamp,
    /// against the wall-clock time its delete reached the store, `deleted_at`) is kept to stand
    /// for it. Judged from the stores; `None` when it holds.
    #[allow(clippy::too_many_arguments)]
    pub fn retention_breach(
        &self,
        t: usize,
        listed: &[String],
        stamps: &BTreeMap<(u64, u64), u64>,
        deleted_at: impl Fn(&str) -> u64,
        retain_ms: u64,
        image_key: impl Fn((u64, u64)) -> String,
        segment_key: impl Fn(Pos) -> String,
    ) -> Option<String> {
        let ts = &self.tenants[t];
        let chain = self.chain_of(t);
        let candidates = self.base_candidates(t);
        // What may have stood for an object retention deleted before a damage took a
        // candidate off the chain (seeds 1796177778282040510, segments; 1796180657680107252,
        // images): the candidates as they were before any damage.
        let stood = self.stood_for_candidates(t);
        let head_chain = self.head_chain_of(t);
        // Still there at `when`, and older than `retain` then: listed, or deleted no earlier (a
        // later run of the same op may have replaced it with a newer base).
        let kept_old = |at: &(u64, u64), when: u64| {
            let key = image_key(*at);
            (listed.contains(&key) || deleted_at(&key) >= when)
                && stamps
                    .get(at)
                    .is_some_and(|&stamp| stamp + retain_ms < when)
        };
        // A kept image of the chain, older than `retain`, holding `above` or later (and, for
        // an image, newer than `than`): the window's base, standing for what went below it.
        let old_kept = |above: (u64, (u64, u64)), when: u64| {
            stood
                .iter()
                .any(|(at, seq)| (*seq, *at) > above && kept_old(at, when))
        };
        // The window's base is an image of the head's chain of bases whenever one is old enough
        // (`src/plan/retention.rs`): a candidate off that chain (no later head was built on it)
        // may go while one on it is kept, its segments judged by the segment rule below.
        // (An image of the log's start, taken without a log, is such a base too: it covers no
        // segment.)
        let chain_base_kept = |when: u64| {
            head_chain.iter().any(|at| {
                ts.objects.get(at).is_some_and(|image| !image.beyond_log) && kept_old(at, when)
            })
        };
        for (at, seq) in &candidates {
            let key = image_key(*at);
            let when = deleted_at(&key);
            let stood_for =
                old_kept((*seq, *at), when) || (!head_chain.contains(at) && chain_base_kept(when));
            if !listed.contains(&key) && !stood_for {
                return Some(format!(
                    "retention deleted image {at:?} (log seq {seq}) of tenant {t} at {when}, \
                     but no newer image of the chain older than retain then is kept to stand \
                     for it (stamps {stamps:?})"
                ));
            }
        }
        // A segment retention deleted is stood for by a kept old image at or past it that was
        // a candidate when it went: a damage since, deleting the segment at that image's
        // position, takes the image off the chain for later runs but not for this one.
        let segment_kept = |pos: Pos, when: u64| {
            stood
                .iter()
                .any(|(at, seq)| (*seq, *at) > (pos.1, (0, 0)) && kept_old(at, when))
        };
        for pos in &chain {
            let key = segment_key(*pos);
            let when = deleted_at(&key);
            let gone = !listed.contains(&key);
            let judged = ts.deleted.contains(pos) || ts.retention_judged.contains(pos);
            if gone && !judged && !segment_kept(*pos, when) {
                return Some(format!(
                    "retention deleted segment {pos:?} of tenant {t} at {when}, but no image of \
                     the chain at or past it, older than retain then, is kept (stamps {stamps:?})"
                ));
            }
        }
        None
    }

    /// [`State::base_candidates`] as they were before any damage deleted a segment at their
    /// position: what may have stood for the segments retention deleted before the damage.
    pub fn stood_for_candidates(&self, t: usize) -> Vec<((u64, u64), u64)> {
        self.candidates(t, false)
    }

    /// The images of tenant `t` a retention window may start from, with their position's
    /// `seq`: on the chain, not beyond the log, not past the head's position, and with the
    /// segment at their position not deleted behind the store's back (`Op::Damage`): retention
    /// judges an image on the chain by that segment (`src/plan/retention.rs`), which keeps it
    /// for that reason; once the world took it, the image is off the chain for retention, and
    /// a damaged store voids the window's promise there.
    pub fn base_candidates(&self, t: usize) -> Vec<((u64, u64), u64)> {
        self.candidates(t, true)
    }

    /// The base candidates of tenant `t`; `damage_counts`: an image whose position's segment a
    /// damage deleted is not one.
    fn candidates(&self, t: usize, damage_counts: bool) -> Vec<((u64, u64), u64)> {
        let ts = &self.tenants[t];
        let chain = self.chain_of(t);
        let head_log = ts
            .head
            .and_then(|h| ts.objects.get(&h))
            .and_then(|image| image.log)
            .map_or(0, |p| p.1);
        (ts.objects.iter())
            .filter(|(_, image)| !image.beyond_log)
            .filter_map(|(at, image)| {
                let log = image.log?;
                let judged = chain.contains(&log) && !(damage_counts && ts.deleted.contains(&log));
                (judged && log.1 <= head_log).then_some((*at, log.1))
            })
            .collect()
    }

    /// The images on tenant `t`'s head's chain of bases (the head, the image its manifest names
    /// as its base, and so on, as far as the model knows them).
    pub fn head_chain_of(&self, t: usize) -> Vec<(u64, u64)> {
        let ts = &self.tenants[t];
        let mut chain = Vec::new();
        let mut at = ts.head;
        while let Some(id) = at {
            if chain.contains(&id) {
                break;
            }
            chain.push(id);
            at = ts.objects.get(&id).and_then(|image| image.base);
        }
        chain
    }

    /// The positions on tenant `t`'s chain from its tip, by `prev` (also through segments that
    /// are gone).
    pub fn chain_of(&self, t: usize) -> Vec<Pos> {
        let ts = &self.tenants[t];
        let mut chain = Vec::new();
        let mut pos = ts.tip;
        while let Some(at) = pos {
            chain.push(at);
            pos = ts.links.get(&at).copied().flatten();
        }
        chain
    }
}
