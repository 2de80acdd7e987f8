//! The tenant's change log (`Shipped` and `Async`): committed changes wait here, are cut into
//! a segment at the next log position, and shipped — the segment put in the durable store, then
//! the tip moved by compare-and-set in the lease store. Up to `segments_in_flight` segments are
//! under way at once: their puts overlap, their tip moves go strictly in order (each is asked
//! only once the one before it is confirmed), and a segment whose predecessor was not shipped
//! never asks for its move. Batches that commit while the pipeline is full form the next
//! segment, or the next ones: a segment holds whole batches, at most `segment_limit` bytes
//! (docs/guarantees.md, the change log, "Limits" and "Pipelined segments").
//!
//! [`LogShip`] is the bookkeeping, run on the actor's thread; [`ship`] is the store calls of one
//! segment, run as a future whose completion the actor feeds back (in any order: the log answers
//! callers in log order).

use std::collections::VecDeque;

use leasehold::layout::LogPos;
use leasehold::log::segment::{SegmentCompression, encoded_bound};
use leasehold::log::{Changes, Segment};
use leasehold::{Error, LeaseKey};
use tokio::sync::{oneshot, watch};

use super::messages::Finisher;

/// How many more times a tip move of unknown outcome (a timeout) is asked again: repeating a
/// move that landed is recognised by the store, so the retry is safe.
const TIP_RETRIES: u32 = 2;

/// How many more times a segment put that timed out is sent again, while the lease cell holds:
/// the put is `put_if_absent` of the same bytes under the tenure's own key, so a try that
/// landed late is recognised (`AlreadyExists`, once every try settled, holding exactly these
/// bytes). A store that answers one
/// put late (a slow fsync under load, a stalled request) no longer ends the tenure.
const PUT_RETRIES: u32 = 2;

/// How many put deadlines one segment's put may take at most, counted by a flush: its sends
/// (`1 + PUT_RETRIES`), then, after an `AlreadyExists`, the wait for every try of its key to
/// settle and the look at its size.
pub(crate) const PUT_WAITS: u32 = 1 + PUT_RETRIES + 2;

/// How many times one segment's tip move is asked at most: a flush counts each at its longest
/// wait (`TipBatcher::longest_wait`).
pub(crate) const TIP_ASKS: u32 = 1 + TIP_RETRIES;

/// A segment cut and ready to go.
pub(crate) struct Cut {
    /// The tip it applies to.
    pub(crate) from: Option<LogPos>,
    /// Its position.
    pub(crate) to: LogPos,
    /// Its encoded bytes (compressed or not): what is put.
    pub(crate) bytes: Vec<u8>,
    /// Its place in the order of tip moves.
    pub(crate) order: TipOrder,
}

/// Where one segment's tip move stands among the segments in flight: it may be asked once
/// `after` (the segment before it, if that one is still in flight when this one is cut) says its
/// own move was confirmed, and it tells the next one through `done` once its move is confirmed.
/// `done` dropped unsent — the segment failed, or its work stopped — fails every later one
/// before it asks for its move, so the tip never skips a segment and never names one whose
/// predecessor is missing.
pub(crate) struct TipOrder {
    /// Resolves `Ok` once the segment before this one is the tip; `Err` if it never will be.
    pub(crate) after: Option<oneshot::Receiver<()>>,
    /// Sent once this segment is the tip.
    pub(crate) done: oneshot::Sender<()>,
}

/// A pause of the next cut right after a segment came back and answered `awaiting` callers:
/// callers that write again at once (a service's request loop) then go in the next segment
/// instead of the one after it, so a segment carries every waiting caller rather than half
/// of them. It ends once `awaiting` callers' runs have arrived, or at `ship_linger`
/// (docs/guarantees.md, "Pipelined segments").
struct Linger {
    /// Callers answered when it began.
    awaiting: usize,
    /// Callers of the batches committed since.
    arrived: usize,
}

/// A segment cut and sent, until the log has its outcome in order.
struct Flight {
    /// Its position.
    pos: LogPos,
    /// The size of its plain encoding: what a restore holds of it, decoded, and what it leaves
    /// committed and not in the log until it is shipped.
    plain: u64,
    /// Its callers, and the callers of batches without changes committed after it (answered
    /// once everything before them is in the log).
    callers: Vec<Finisher>,
    /// Its outcome, once its work came back (perhaps before the flights ahead of it).
    outcome: Option<Result<(), Error>>,
}

/// One committed batch waiting to be cut: what it changed (nothing, for a batch that wrote
/// nothing) and who waits for it.
struct Committed {
    /// Its changes; `None` when it wrote nothing.
    changes: Option<Changes>,
    /// Its callers (`Shipped`), answered once it is in the log.
    callers: Vec<Finisher>,
}

/// Where the tenure's log stands.
pub(crate) struct LogShip {
    /// The tenant's key.
    key: LeaseKey,
    /// The tenure's epoch: the directory its segments go to.
    epoch: u64,
    /// The most bytes one segment may take (`segment_limit`; its plain size, whether it is
    /// written compressed or not).
    segment_limit: u64,
    /// How segments are written.
    compression: SegmentCompression,
    /// The tip the lease store confirmed last (or the restore found).
    tip: Option<LogPos>,
    /// The segments in flight, oldest first, with their callers: kept here, not in the shipping
    /// futures, so that a tenant that stops with segments in flight still answers them
    /// (outcome unknown).
    in_flight: VecDeque<Flight>,
    /// The most segments in flight at once (`segments_in_flight`, at least 1).
    max_in_flight: usize,
    /// The receiver of the newest cut's [`TipOrder::done`], for the next cut's `after`.
    last_done: Option<oneshot::Receiver<()>>,
    /// A pause of the next cut, if one runs.
    linger: Option<Linger>,
    /// Batches committed since the last cut, oldest first.
    pending: VecDeque<Committed>,
    /// The bytes their pages take ([`encoded_bound`] of each batch, summed).
    pending_bytes: u64,
    /// Plain sizes of the segments shipped since the newest image's position, oldest first:
    /// what a restore holds of them decoded, whether they were stored compressed or not.
    since_image: VecDeque<(u64, u64)>,
    /// The log position the newest image holds.
    image_pos: Option<LogPos>,
    /// Segments and bytes since the newest image that earlier tenures shipped (counted until an
    /// image holds the restored tip), so compaction is due across tenures too.
    carried: (u64, u64),
    /// Segments and bytes since the newest image when a shipped segment last asked for a
    /// compaction image (`Compaction::due_again`).
    compaction_asked: Option<(u64, u64)>,
    /// Set once a segment failed: nothing more is cut, and every later caller is refused.
    failed: Option<Error>,
    /// Publishes the confirmed tip (an image may move the head only to a position at or below it).
    tips: watch::Sender<Option<LogPos>>,
    /// The newest stamp on the chain this tenure knows (its restore's, then its own cuts'): a
    /// segment is stamped no earlier, so stamps rise along the log whatever the hosts' wall
    /// clocks say (docs/guarantees.md, point-in-time restore by time).
    last_stamp_ms: u64,
}

/// Where a tenure's log starts: what the restore found.
pub(crate) struct LogStart {
    /// The tip the restore ended at.
    pub(crate) tip: Option<LogPos>,
    /// The position the newest image holds.
    pub(crate) image_pos: Option<LogPos>,
    /// Segments and bytes since that image, shipped by earlier tenures.
    pub(crate) carried: (u64, u64),
    /// The stamp of the tip's segment (or of the head's manifest): the tenure stamps no earlier.
    pub(crate) tip_stamp_ms: u64,
}

impl LogShip {
    /// The log of the tenure of `key` at `epoch`, whose segments take at most `segment_limit`
    /// bytes (plain) and are written with `compression`, at most `max_in_flight` of them under
    /// way at once, starting where the restore left it.
    pub(crate) fn new(
        key: LeaseKey,
        epoch: u64,
        segment_limit: u64,
        compression: SegmentCompression,
        max_in_flight: usize,
        start: LogStart,
    ) -> Self {
        let (tips, _) = watch::channel(start.tip);
        Self {
            key,
            epoch,
            segment_limit,
            compression,
            tip: start.tip,
            in_flight: VecDeque::new(),
            max_in_flight: max_in_flight.max(1),
            last_done: None,
            linger: None,
            pending: VecDeque::new(),
            pending_bytes: 0,
            since_image: VecDeque::new(),
            image_pos: start.image_pos,
            carried: start.carried,
            compaction_asked: None,
            failed: None,
            tips,
            last_stamp_ms: start.tip_stamp_ms,
        }
    }

    /// The stamp of a segment cut now, when the wall clock reads `wall_ms`: never before the
    /// newest stamp on the chain (a host whose clock lags its predecessor's stamps the time of
    /// the predecessor's last segment until its own clock passes it).
    pub(crate) fn stamp(&mut self, wall_ms: u64) -> u64 {
        self.last_stamp_ms = self.last_stamp_ms.max(wall_ms);
        self.last_stamp_ms
    }

    /// The newest stamp on the chain this tenure knows: an image of the log's position is
    /// stamped no earlier.
    pub(crate) fn last_stamp(&self) -> u64 {
        self.last_stamp_ms
    }

    /// A receiver of the confirmed tip.
    pub(crate) fn tips(&self) -> watch::Receiver<Option<LogPos>> {
        self.tips.subscribe()
    }

    /// The position of everything committed and cut: the newest segment in flight, else the
    /// tip. Only meaningful when nothing is pending.
    pub(crate) fn position(&self) -> Option<LogPos> {
        self.in_flight.back().map(|f| f.pos).or(self.tip)
    }

    /// The position the next segment will take.
    pub(crate) fn next_position(&self) -> LogPos {
        LogPos {
            epoch: self.epoch,
            seq: self.position().map_or(1, |t| t.seq + 1),
        }
    }

    /// Whether changes wait to be cut.
    pub(crate) fn has_pending(&self) -> bool {
        self.pending.iter().any(|c| c.changes.is_some())
    }

    /// The bytes committed and not yet in the log: the batches waiting to be cut and the
    /// segment in flight, at its plain size however it is stored (what `Async` bounds,
    /// docs/guarantees.md, the numbers).
    pub(crate) fn unshipped_bytes(&self) -> u64 {
        let in_flight: u64 = self.in_flight.iter().map(|f| f.plain).sum();
        self.pending_bytes.saturating_add(in_flight)
    }

    /// How many segments settling the log takes at most: those in flight (counted as at least
    /// one) and those the waiting batches are cut into. Each batch takes at most half of
    /// `segment_limit`, so every segment but the last of a cut is more than half full: at most
    /// ⌈2 × pending ÷ limit⌉. Each is counted at its longest wait, as if none overlapped.
    pub(crate) fn segments_to_settle(&self) -> u32 {
        let limit = self.segment_limit.max(1);
        let waiting = self.pending_bytes.saturating_mul(2).div_ceil(limit).max(1);
        let flying = (self.in_flight.len() as u64).max(1);
        u32::try_from(waiting.saturating_add(flying)).unwrap_or(u32::MAX)
    }

    /// Whether everything committed is in the log (or the log failed): nothing in flight,
    /// nothing pending, no caller waiting.
    pub(crate) fn settled(&self) -> bool {
        self.in_flight.is_empty() && self.pending.is_empty()
    }

    /// How many segments are in flight.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Why the log stopped, if it did.
    pub(crate) fn failure(&self) -> Option<&Error> {
        self.failed.as_ref()
    }

    /// Segments and bytes shipped since the newest image.
    pub(crate) fn since_image(&self) -> (u64, u64) {
        let bytes: u64 = self.since_image.iter().map(|(_, b)| b).sum();
        (
            self.since_image.len() as u64 + self.carried.0,
            bytes + self.carried.1,
        )
    }

    /// Whether the segments shipped since the newest image call for a compaction image now
    /// (`compaction`'s thresholds reached, and a whole compaction's worth past the last time
    /// this said yes); a yes is remembered.
    pub(crate) fn ask_compaction(&mut self, compaction: &crate::config::Compaction) -> bool {
        let (segments, bytes) = self.since_image();
        let due = compaction.due_again(self.compaction_asked, segments, bytes);
        if due {
            self.compaction_asked = Some((segments, bytes));
        }
        due
    }

    /// The newest image now holds `pos`: segments up to it no longer count toward compaction.
    pub(crate) fn image_at(&mut self, pos: Option<LogPos>) {
        let Some(pos) = pos else { return };
        if self.image_pos.is_some_and(|p| p.seq >= pos.seq) {
            return;
        }
        self.image_pos = Some(pos);
        // Any image of this tenure holds everything the earlier tenures shipped.
        self.carried = (0, 0);
        while self
            .since_image
            .front()
            .is_some_and(|(seq, _)| *seq <= pos.seq)
        {
            self.since_image.pop_front();
        }
    }

    /// A batch committed: its changes (if it wrote any) wait to be cut, its callers wait for
    /// them. A caller of a log that failed is refused at once.
    pub(crate) fn add(&mut self, changes: Option<Changes>, callers: Vec<Finisher>) {
        if let Some(error) = &self.failed {
            for caller in callers {
                caller(Err(error.clone()));
            }
            return;
        }
        if let Some(changes) = &changes {
            let bytes = encoded_bound(changes.page_size, changes.pages.len() as u64);
            self.pending_bytes = self.pending_bytes.saturating_add(bytes);
        }
        if let Some(linger) = self.linger.as_mut() {
            linger.arrived += callers.len();
        }
        self.pending.push_back(Committed { changes, callers });
    }

    /// The next segment to ship, if fewer than `segments_in_flight` are under way and changes
    /// are pending: the oldest pending batches, whole, as many as fit `segment_limit` together
    /// (at least one), so a long run of batches goes as several segments and a restore never
    /// stops inside a batch. Callers of batches that wrote nothing are answered once everything
    /// before them is in the log: here if nothing is in flight, else with the newest segment in
    /// flight (or they ride with the segment cut before them). A single batch too large for a
    /// segment is an error (the batch was measured before it committed, so this does not
    /// happen). The segment is stamped [`LogShip::stamp`] of `wall_ms`.
    pub(crate) fn cut(&mut self, wall_ms: u64) -> Result<Option<Cut>, Error> {
        if self.in_flight.len() >= self.max_in_flight || self.failed.is_some() {
            return Ok(None);
        }
        // A segment in flight already failed (its outcome waits for the ones before it): the
        // log will stop, and a segment cut now could never be named.
        if self
            .in_flight
            .iter()
            .any(|f| f.outcome.as_ref().is_some_and(Result::is_err))
        {
            return Ok(None);
        }
        if let Some(linger) = &self.linger {
            if linger.arrived < linger.awaiting {
                return Ok(None);
            }
            self.linger = None;
        }
        while self.pending.front().is_some_and(|c| c.changes.is_none()) {
            if let Some(done) = self.pending.pop_front() {
                self.answer_once_logged(done.callers);
            }
        }
        let Some((changes, callers)) = self.take_segment() else {
            return Ok(None);
        };
        let from = self.position();
        let to = self.next_position();
        let stamp = self.stamp(wall_ms);
        let segment = Segment::from_changes(&self.key, to, from, changes, stamp);
        let limit = self.segment_limit;
        let encoded = segment
            .encode_with(self.compression)
            .map_err(|e| e.to_string())
            .and_then(|encoded| match encoded.raw_len {
                len if len > limit => Err(format!(
                    "it takes {len} bytes, more than segment_limit ({limit})"
                )),
                _ => Ok(encoded),
            });
        let encoded = match encoded {
            Ok(encoded) => encoded,
            Err(reason) => {
                let error = Error::Unshipped {
                    key: self.key.to_string(),
                    reason: format!("cutting segment {to} failed: {reason}"),
                };
                for caller in callers {
                    caller(Err(error.clone()));
                }
                return Err(error);
            }
        };
        // The segment before it still in flight: its move is asked only after that one's.
        let after = match self.in_flight.is_empty() {
            true => None,
            false => self.last_done.take(),
        };
        let (done, next) = oneshot::channel();
        self.last_done = Some(next);
        self.in_flight.push_back(Flight {
            pos: to,
            plain: encoded.raw_len,
            callers,
            outcome: None,
        });
        Ok(Some(Cut {
            from,
            to,
            bytes: encoded.bytes,
            order: TipOrder { after, done },
        }))
    }

    /// Answers `callers` (of batches that wrote nothing) once everything before them is in the
    /// log: now if nothing is in flight, else with the newest segment in flight.
    fn answer_once_logged(&mut self, callers: Vec<Finisher>) {
        match self.in_flight.back_mut() {
            Some(newest) => newest.callers.extend(callers),
            None => {
                for caller in callers {
                    caller(Ok(()));
                }
            }
        }
    }

    /// Takes the oldest pending batches that fit one segment together, merged, with their
    /// callers (and those of the batches without changes among and right after them).
    fn take_segment(&mut self) -> Option<(Changes, Vec<Finisher>)> {
        let first = self.pending.pop_front()?;
        let mut callers = first.callers;
        let Some(mut changes) = first.changes else {
            self.answer_once_logged(callers);
            return None;
        };
        while let Some(next) = self.pending.front() {
            let fits = match &next.changes {
                None => true,
                Some(later) => {
                    let pages = merged_pages(&changes, later);
                    encoded_bound(later.page_size, pages) <= self.segment_limit
                }
            };
            if !fits {
                break;
            }
            let Some(next) = self.pending.pop_front() else {
                break;
            };
            if let Some(later) = next.changes {
                changes.merge(later);
            }
            callers.extend(next.callers);
        }
        self.pending_bytes = self
            .pending
            .iter()
            .filter_map(|c| c.changes.as_ref())
            .map(|c| encoded_bound(c.page_size, c.pages.len() as u64))
            .sum();
        Some((changes, callers))
    }

    /// Pauses the next cut after a segment answered `answered` callers, if two or more were
    /// answered and nothing is in flight (a lone caller never waits: its next run is all there
    /// is). Whether a pause began; [`LogShip::end_linger`] ends it at the latest.
    pub(crate) fn linger_for(&mut self, answered: usize) -> bool {
        let begins = answered >= 2 && self.in_flight.is_empty() && self.failed.is_none();
        if begins {
            self.linger = Some(Linger {
                awaiting: answered,
                arrived: 0,
            });
        }
        begins
    }

    /// Ends a pause of the next cut (its time is up, or a flush wants everything now).
    pub(crate) fn end_linger(&mut self) {
        self.linger = None;
    }

    /// The segment at `to` came back with `outcome` (its work may end before the work of a
    /// segment ahead of it). Outcomes are taken in log order: each segment whose outcome is
    /// known and that nothing unsettled precedes becomes the tip (`Ok`: its callers hear `Ok`)
    /// or fails (its callers hear why, and the log stops: everyone waiting hears it too). How
    /// many callers heard `Ok`.
    pub(crate) fn shipped(&mut self, to: LogPos, outcome: &Result<(), Error>) -> usize {
        if let Some(flight) = self.in_flight.iter_mut().find(|f| f.pos == to) {
            flight.outcome = Some(outcome.clone());
        }
        let tip_before = self.tip;
        let mut answered = 0;
        while self.in_flight.front().is_some_and(|f| f.outcome.is_some()) {
            let Some(flight) = self.in_flight.pop_front() else {
                break;
            };
            match flight.outcome {
                Some(Ok(())) => {
                    self.tip = Some(flight.pos);
                    self.since_image.push_back((flight.pos.seq, flight.plain));
                    answered += flight.callers.len();
                    for caller in flight.callers {
                        caller(Ok(()));
                    }
                }
                Some(Err(error)) => {
                    for caller in flight.callers {
                        caller(Err(error.clone()));
                    }
                    self.fail(Error::Unshipped {
                        key: self.key.to_string(),
                        reason: format!(
                            "an earlier segment ({}) was not shipped: {error}",
                            flight.pos
                        ),
                    });
                }
                None => {}
            }
        }
        if self.tip != tip_before {
            self.tips.send_replace(self.tip);
        }
        answered
    }

    /// The tenant stopped (its actor is going): the callers of the segments in flight hear
    /// `Unshipped` (their writes may yet be in the log), and so does everyone waiting.
    pub(crate) fn abort(&mut self) {
        let error = Error::Unshipped {
            key: self.key.to_string(),
            reason: "the tenant stopped while its segment was in flight".to_string(),
        };
        for flight in self.in_flight.drain(..) {
            for caller in flight.callers {
                caller(Err(error.clone()));
            }
        }
        self.fail(error);
    }

    /// Stops the log: pending changes are never shipped, their callers hear `error`.
    pub(crate) fn fail(&mut self, error: Error) {
        self.pending_bytes = 0;
        for waiting in self.pending.drain(..) {
            for caller in waiting.callers {
                caller(Err(error.clone()));
            }
        }
        if self.failed.is_none() {
            self.failed = Some(error);
        }
    }
}

/// How many pages `earlier` and `later` change together (a page both change counts once).
fn merged_pages(earlier: &Changes, later: &Changes) -> u64 {
    let new = later
        .pages
        .keys()
        .filter(|p| !earlier.pages.contains_key(p))
        .count();
    (earlier.pages.len() + new) as u64
}

mod ship;
pub(crate) use ship::ship;

#[cfg(test)]
mod tests;
