//! The tenant's change log (`Shipped` and `Async`): committed changes wait here, are cut into
//! a segment at the next log position, and shipped one segment at a time — the segment put in
//! the durable store, then the tip moved by compare-and-set in the lease store. Runs that
//! commit while a segment is in flight form the next one (docs/guarantees.md, the change log).
//!
//! [`LogShip`] is the bookkeeping, run on the actor's thread; [`ship`] is the store calls of one
//! segment, run as a future whose completion the actor feeds back.

use std::collections::VecDeque;
use std::sync::Arc;

use leasehold::durable::Put;
use leasehold::layout::{LogPos, segment_key};
use leasehold::lease::LeaseError;
use leasehold::log::{Changes, Segment};
use leasehold::{Error, LeaseKey};
use tokio::sync::watch;

use super::messages::Finisher;
use crate::lease_actor::LeaseCell;
use crate::runtime::Runtime;

/// How many more times a tip move of unknown outcome (a timeout) is asked again: repeating a
/// move that landed is recognised by the store, so the retry is safe.
const TIP_RETRIES: u32 = 2;

/// How many times one segment's tip move is asked at most: a flush counts each at its longest
/// wait (`TipBatcher::longest_wait`).
pub(crate) const TIP_ASKS: u32 = 1 + TIP_RETRIES;

/// A segment cut and ready to go.
pub(crate) struct Cut {
    /// The tip it applies to.
    pub(crate) from: Option<LogPos>,
    /// Its position.
    pub(crate) to: LogPos,
    /// Its encoded bytes.
    pub(crate) bytes: Vec<u8>,
}

/// Where the tenure's log stands.
pub(crate) struct LogShip {
    /// The tenant's key.
    key: LeaseKey,
    /// The tenure's epoch: the directory its segments go to.
    epoch: u64,
    /// The tip the lease store confirmed last (or the restore found).
    tip: Option<LogPos>,
    /// The segment in flight.
    in_flight: Option<LogPos>,
    /// Changes committed since the last cut.
    pending: Option<Changes>,
    /// Callers of batches since the last cut (answered when their changes are in the log).
    waiting: Vec<Finisher>,
    /// Callers of the segment in flight: kept here, not in the shipping future, so that a
    /// tenant that stops with a segment in flight still answers them (outcome unknown).
    in_flight_callers: Vec<Finisher>,
    /// Sizes of the segments shipped since the newest image's position, oldest first.
    since_image: VecDeque<(u64, u64)>,
    /// The log position the newest image holds.
    image_pos: Option<LogPos>,
    /// Segments and bytes since the newest image that earlier tenures shipped (counted until an
    /// image holds the restored tip), so compaction is due across tenures too.
    carried: (u64, u64),
    /// Set once a segment failed: nothing more is cut, and every later caller is refused.
    failed: Option<Error>,
    /// Publishes the confirmed tip (an image may move the head only to a position at or below it).
    tips: watch::Sender<Option<LogPos>>,
    /// The newest stamp on the chain this tenure knows (its restore's, then its own cuts'): a
    /// segment is stamped no earlier, so stamps rise along the log whatever the hosts' wall
    /// clocks say (docs/guarantees.md, point-in-time restore by time).
    last_stamp_ms: u64,
}

impl LogShip {
    /// The log of the tenure of `key` at `epoch`, whose restore ended at `tip` stamped
    /// `tip_stamp_ms` (or later), with the newest image holding `image_pos`.
    pub(crate) fn new(
        key: LeaseKey,
        epoch: u64,
        (tip, tip_stamp_ms): (Option<LogPos>, u64),
        image_pos: Option<LogPos>,
        carried: (u64, u64),
    ) -> Self {
        let (tips, _) = watch::channel(tip);
        Self {
            key,
            epoch,
            tip,
            in_flight: None,
            pending: None,
            waiting: Vec::new(),
            in_flight_callers: Vec::new(),
            since_image: VecDeque::new(),
            image_pos,
            carried,
            failed: None,
            tips,
            last_stamp_ms: tip_stamp_ms,
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

    /// The position of everything committed and cut: the segment in flight, else the tip. Only
    /// meaningful when nothing is pending.
    pub(crate) fn position(&self) -> Option<LogPos> {
        self.in_flight.or(self.tip)
    }

    /// Whether changes wait to be cut.
    pub(crate) fn has_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Whether everything committed is in the log (or the log failed): nothing in flight,
    /// nothing pending, no caller waiting.
    pub(crate) fn settled(&self) -> bool {
        self.in_flight.is_none() && self.pending.is_none() && self.waiting.is_empty()
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

    /// A batch committed: its changes (if it wrote any) join the pending ones, its callers wait
    /// for them. A caller of a log that failed is refused at once.
    pub(crate) fn add(&mut self, changes: Option<Changes>, callers: Vec<Finisher>) {
        if let Some(error) = &self.failed {
            for caller in callers {
                caller(Err(error.clone()));
            }
            return;
        }
        if let Some(changes) = changes {
            match self.pending.as_mut() {
                Some(pending) => pending.merge(changes),
                None => self.pending = Some(changes),
            }
        }
        self.waiting.extend(callers);
    }

    /// The next segment to ship, if none is in flight and changes are pending, stamped
    /// [`LogShip::stamp`] of `wall_ms`. Callers whose batches wrote nothing are answered here
    /// once everything before them is in the log.
    pub(crate) fn cut(&mut self, wall_ms: u64) -> Result<Option<Cut>, Error> {
        if self.in_flight.is_some() || self.failed.is_some() {
            return Ok(None);
        }
        let Some(changes) = self.pending.take() else {
            for caller in self.waiting.drain(..) {
                caller(Ok(()));
            }
            return Ok(None);
        };
        let to = LogPos {
            epoch: self.epoch,
            seq: self.tip.map_or(1, |t| t.seq + 1),
        };
        let stamp = self.stamp(wall_ms);
        let segment = Segment::from_changes(&self.key, to, self.tip, changes, stamp);
        let bytes = segment.encode().map_err(Error::from)?;
        self.in_flight = Some(to);
        self.in_flight_callers = std::mem::take(&mut self.waiting);
        Ok(Some(Cut {
            from: self.tip,
            to,
            bytes,
        }))
    }

    /// The segment at `to` of `bytes` bytes came back. On success the tip is `to`; on failure
    /// the log stops, and everyone waiting hears why.
    pub(crate) fn shipped(&mut self, to: LogPos, bytes: u64, outcome: &Result<(), Error>) {
        self.in_flight = None;
        let callers = std::mem::take(&mut self.in_flight_callers);
        match outcome {
            Ok(()) => {
                self.tip = Some(to);
                self.since_image.push_back((to.seq, bytes));
                self.tips.send_replace(self.tip);
                for caller in callers {
                    caller(Ok(()));
                }
            }
            Err(error) => {
                for caller in callers {
                    caller(Err(error.clone()));
                }
                self.fail(Error::Unshipped {
                    key: self.key.to_string(),
                    reason: format!("an earlier segment ({to}) was not shipped: {error}"),
                });
            }
        }
    }

    /// The tenant stopped (its actor is going): the callers of the segment in flight hear
    /// `Unshipped` (their writes may yet be in the log), and so does everyone waiting.
    pub(crate) fn abort(&mut self) {
        let error = Error::Unshipped {
            key: self.key.to_string(),
            reason: "the tenant stopped while its segment was in flight".to_string(),
        };
        for caller in self.in_flight_callers.drain(..) {
            caller(Err(error.clone()));
        }
        self.fail(error);
    }

    /// Stops the log: pending changes are never shipped, their callers hear `error`.
    pub(crate) fn fail(&mut self, error: Error) {
        self.pending = None;
        for caller in self.waiting.drain(..) {
            caller(Err(error.clone()));
        }
        if self.failed.is_none() {
            self.failed = Some(error);
        }
    }
}

/// Ships one segment: put it under its key, then move the tip from `from` to `to`. `Ok` only
/// when the lease store confirmed the tip: then the segment is the log's, whatever happens to
/// this replica next. A refused move (the lease is gone) is `Fenced` and ends the cell; any
/// other failure is [`Error::Unshipped`], whose outcome is unknown.
pub(crate) async fn ship(
    rt: Arc<Runtime>,
    cell: Arc<LeaseCell>,
    from: Option<LogPos>,
    to: LogPos,
    bytes: Vec<u8>,
) -> Result<(), Error> {
    let key = cell.key.clone();
    let unshipped = |reason: String| Error::Unshipped {
        key: key.to_string(),
        reason,
    };
    let skey = segment_key(&key, to);
    match rt.durable.put_if_absent(&skey, bytes.clone()).await {
        Ok(Put::Created) => {}
        Ok(Put::AlreadyExists) => {
            // An earlier try of this very put may have landed (a retried request): the
            // segment is ours only if it holds exactly these bytes.
            let found = rt
                .durable
                .get(&skey)
                .await
                .map_err(|e| unshipped(e.to_string()))?;
            if found.as_deref() != Some(bytes.as_slice()) {
                return Err(unshipped(format!("{skey} already holds other bytes")));
            }
        }
        Err(e) => {
            // No tip move was asked for it, so no restore will read it: once the put settles
            // (it may still land, `Deadline` tracks it), it is taken back, so that a late
            // landing leaves nothing behind (promise 5 in docs/guarantees.md).
            let (durable, epoch_prefix, late) = (
                rt.durable.clone(),
                leasehold::layout::epoch_prefix(&key, to.epoch),
                skey.clone(),
            );
            let limit = rt.drain_timeout;
            tokio::spawn(async move {
                let _ = durable.settle_puts(&epoch_prefix, limit).await;
                let _ = durable.delete(&late).await;
            });
            return Err(unshipped(format!("put {skey}: {e}")));
        }
    }
    let mut tries = 0;
    loop {
        let asked = leasehold::lease::TipMove {
            key: key.clone(),
            owner: rt.replica.as_str().to_string(),
            epoch: cell.epoch,
            from,
            to,
        };
        match rt.tips.move_tip(asked).await {
            Ok(_) => return Ok(()),
            Err(e) if e.outcome_unknown() && tries < TIP_RETRIES => tries += 1,
            Err(LeaseError::NotHeld { .. }) if tries == 0 => {
                cell.end();
                // The first and only ask was refused: the tip never named this segment, so no
                // restore can read it. A zombie (paused past its lease, its put landing after a
                // successor's forget and sweep) takes it back rather than leave bytes behind
                // (promise 5 in docs/guarantees.md); a failed delete leaves it to the next sweep.
                if let Err(e) = rt.durable.delete(&skey).await {
                    tracing::debug!(%key, error = %e, "a refused segment stays until the next sweep");
                }
                return Err(Error::Fenced {
                    key: key.to_string(),
                });
            }
            Err(e @ LeaseError::NotHeld { .. }) => {
                // An earlier try of this move may have landed before the lease went: unknown.
                cell.end();
                return Err(unshipped(format!("moving the tip to {to}: {e}")));
            }
            Err(e) => return Err(unshipped(format!("moving the tip to {to}: {e}"))),
        }
    }
}
