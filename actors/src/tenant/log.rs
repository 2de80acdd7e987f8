//! The tenant's change log (`Shipped` and `Async`): committed changes wait here, are cut into
//! a segment at the next log position, and shipped one segment at a time — the segment put in
//! the durable store, then the tip moved by compare-and-set in the lease store. Runs that
//! commit while a segment is in flight form the next one (docs/guarantees.md, the change log).
//!
//! [`LogShip`] is the bookkeeping, run on the actor's thread; [`ship`] is the store calls of one
//! segment, run as a future whose completion the actor feeds back.

use std::collections::VecDeque;
use std::sync::Arc;

use leasehold::clock::duration_ms;
use leasehold::deadline::put_deadline;
use leasehold::durable::Put;
use leasehold::layout::{LogPos, segment_key};
use leasehold::lease::LeaseError;
use leasehold::log::{Changes, Segment};
use leasehold::plan::reconcile::PutOf;
use leasehold::{Error, LeaseKey};
use tokio::sync::watch;

use super::messages::Finisher;
use crate::lease_actor::LeaseCell;
use crate::reconcile::Deadlines;
use crate::runtime::Runtime;

/// How many more times a tip move of unknown outcome (a timeout) is asked again: repeating a
/// move that landed is recognised by the store, so the retry is safe.
const TIP_RETRIES: u32 = 2;

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
}

impl LogShip {
    /// The log of the tenure of `key` at `epoch`, whose restore ended at `tip`, with the newest
    /// image holding `image_pos`.
    pub(crate) fn new(
        key: LeaseKey,
        epoch: u64,
        tip: Option<LogPos>,
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
        }
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

    /// The next segment to ship, if none is in flight and changes are pending. Callers whose
    /// batches wrote nothing are answered here once everything before them is in the log.
    pub(crate) fn cut(&mut self, created_at_ms: u64) -> Result<Option<Cut>, Error> {
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
        let segment = Segment::from_changes(&self.key, to, self.tip, changes, created_at_ms);
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
///
/// The put is entered in the replica's ledger before it is sent and leaves it only once the tip
/// names it: on every other way out — a failed put, a refused or unanswered move, or this future
/// dropped with its actor — the replica's reconciliation finds the segment named by the tip's
/// chain or deletes it once the put has settled (docs/guarantees.md, "Reconciling puts of unknown
/// outcome"). No put leaves a tenure known to be over; with `Async`, whose cuts come on a timer
/// rather than right after a commit's lease check or a confirmed tip move, none leaves once the
/// lease cell no longer holds (docs/guarantees.md, "the erasure bound").
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
    let may_send = match rt.durability {
        crate::config::Durability::Async { .. } => cell.holds(rt.now_ms()),
        // Right after a commit whose lease check passed, or a tip move the store confirmed:
        // the store, not the holder's clock, decides whether the segment counts.
        _ => !cell.is_ended(),
    };
    if !may_send {
        return Err(Error::Fenced {
            key: key.to_string(),
        });
    }
    let skey = segment_key(&key, to);
    let deadlines = Deadlines {
        puts_ms: duration_ms(put_deadline(rt.store_deadline, bytes.len())),
    };
    let put = PutOf::Segment { pos: to };
    let tracked = rt.reconciler().track(&cell, put, rt.now_ms(), deadlines);
    match rt.durable.put_if_absent(&skey, bytes.clone()).await {
        Ok(Put::Created) => tracked.answered(),
        Ok(Put::AlreadyExists) => {
            // An earlier try of this very put may have landed (a retried request): the
            // segment is ours only if it holds exactly these bytes.
            let found = rt
                .durable
                .get_sized(&skey, bytes.len() as u64)
                .await
                .map_err(|e| unshipped(e.to_string()))?;
            if found.as_deref() != Some(bytes.as_slice()) {
                tracked.not_ours(&skey);
                return Err(unshipped(format!("{skey} already holds other bytes")));
            }
            tracked.answered();
        }
        // No tip move was asked for it: the reconciliation deletes it once the put settles.
        Err(e) => return Err(unshipped(format!("put {skey}: {e}"))),
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
        tracked.asking();
        match rt.tips.move_tip(asked).await {
            Ok(_) => {
                tracked.named();
                return Ok(());
            }
            Err(e) if e.outcome_unknown() && tries < TIP_RETRIES => tries += 1,
            Err(LeaseError::NotHeld { .. }) if tries == 0 => {
                // The first and only ask was refused: the tip never named this segment, so no
                // restore can read it; the reconciliation takes it back (a zombie's segment
                // must not outlive a successor's forget).
                cell.end();
                tracked.refused();
                return Err(Error::Fenced {
                    key: key.to_string(),
                });
            }
            Err(e @ LeaseError::NotHeld { .. }) => {
                // An earlier try of this move may have landed before the lease went: unknown.
                cell.end();
                return Err(unshipped(format!("moving the tip to {to}: {e}")));
            }
            Err(e) => {
                if tries == 0 && !e.outcome_unknown() {
                    tracked.refused();
                }
                return Err(unshipped(format!("moving the tip to {to}: {e}")));
            }
        }
    }
}
