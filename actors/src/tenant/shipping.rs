//! How the tenant actor drives its change log: cut the next segment once the one in flight is
//! back, feed each outcome to the tenure, settle the log for a handoff's flush, and take images
//! at a cut, where the log position they hold is known (docs/guarantees.md, the change log).

use std::time::Instant;

use actix::prelude::*;
use leasehold::Error;
use leasehold::durable::StoreError;
use leasehold::image::ReadSnapshot;
use tokio::sync::oneshot;
use tracing::Instrument;

use super::actor::RetentionSweep;
use super::actor::{ImageWant, TenantActor};
use super::log::{Cut, ship};
use super::tenure::Input;
use crate::events::Event;

impl TenantActor {
    /// Ships the pending changes while fewer than `segments_in_flight` segments are under way
    /// (each cut as soon as there is room); answers callers the log already covers; takes wanted
    /// images at the cut; tells a waiting flush when the log has settled.
    pub(super) fn ship_next(&mut self, ctx: &mut Context<Self>) {
        loop {
            let wall_ms = self.rt.wall_ms();
            let Some(log) = self.log.as_mut() else {
                return;
            };
            let next = log.next_position();
            let began = Instant::now();
            match log.cut(wall_ms) {
                Ok(Some(cut)) => {
                    let gap = self.last_outcome.take().map(|at| began.duration_since(at));
                    crate::metrics::segment_cut(began.elapsed(), gap);
                    self.take_wanted_images(ctx);
                    self.send(cut, ctx);
                }
                Ok(None) => {
                    self.take_wanted_images(ctx);
                    self.check_flush(ctx);
                    return;
                }
                Err(error) => {
                    // The batches it held hear `error`; the log stops, and says so (a tenure
                    // never ends silently, docs/guarantees.md, "Limits").
                    if let Some(log) = self.log.as_mut() {
                        log.fail(error.clone());
                    }
                    self.rt.events.emit(Event::ShipFailed {
                        key: self.key().to_string(),
                        segment: next.to_string(),
                        error: error.to_string(),
                    });
                    self.feed(Input::Shipping, ctx);
                    self.feed(Input::Shipped(Err(error)), ctx);
                    self.check_flush(ctx);
                    return;
                }
            }
        }
    }

    fn send(&mut self, cut: Cut, ctx: &mut Context<Self>) {
        let Cut {
            from,
            to,
            bytes,
            order,
        } = cut;
        // What crosses the link (the metric); the log counts what the segment holds.
        let len = bytes.len() as u64;
        self.feed(Input::Shipping, ctx);
        let span = tracing::debug_span!("ship", key = %self.cell.key, epoch = self.cell.epoch,
            seq = to.seq, bytes = len);
        let started = Instant::now();
        let work =
            ship(self.rt.clone(), self.cell.clone(), from, to, bytes, order).instrument(span);
        ctx.spawn(work.into_actor(self).map(move |outcome, act, ctx| {
            if outcome.is_ok() {
                crate::metrics::segment_shipped(len, started.elapsed());
            }
            act.last_outcome = Some(Instant::now());
            if let Some(log) = act.log.as_mut() {
                let answered = log.shipped(to, &outcome);
                if let Some(linger) = act.rt.ship_linger
                    && log.linger_for(answered)
                {
                    ctx.run_later(linger, |act, ctx| {
                        if let Some(log) = act.log.as_mut() {
                            log.end_linger();
                        }
                        act.ship_next(ctx);
                    });
                }
            }
            if let Err(error) = &outcome {
                act.rt.events.emit(Event::ShipFailed {
                    key: act.key().to_string(),
                    segment: to.to_string(),
                    error: error.to_string(),
                });
            }
            let shipped = outcome.is_ok();
            act.feed(Input::Shipped(outcome), ctx);
            if shipped {
                act.compact_if_due(ctx);
            }
            act.ship_next(ctx);
        }));
    }

    /// Compaction follows the bytes as they grow: checked after every shipped segment, not only
    /// every `snapshot_every`, so the segments a restore holds stay near `compaction`
    /// (docs/guarantees.md, the storage bound). Only with periodic compaction on; an image under
    /// way is not doubled (the tenure's snapshot plan refuses a second upload), and a tenant
    /// whose images fail asks again only a whole compaction's worth later.
    fn compact_if_due(&mut self, ctx: &mut Context<Self>) {
        let compaction = self.rt.compaction;
        let Some(log) = self.log.as_mut() else {
            return;
        };
        if self.rt.snapshot_every.is_some() && log.ask_compaction(&compaction) {
            let held = self.held();
            self.feed(Input::Tick { held }, ctx);
        }
    }

    /// A handoff's flush: ship everything committed, then go on once the log has settled.
    pub(super) fn flush_log(&mut self, commits: u64, ctx: &mut Context<Self>) {
        self.flush_wanted = Some(commits);
        if let Some(log) = self.log.as_mut() {
            log.end_linger();
        }
        self.ship_next(ctx);
    }

    /// Feeds the flush its outcome once the log has settled: `Ok` when everything committed is
    /// in the log, the log's failure otherwise.
    fn check_flush(&mut self, ctx: &mut Context<Self>) {
        let Some(log) = self.log.as_ref() else {
            return;
        };
        if self.flush_wanted.is_none() || !log.settled() {
            return;
        }
        let outcome = match log.failure() {
            Some(error) => Err(error.clone()),
            // Everything acknowledged is in the log; a flush still counts only while the lease
            // holds, as with images (promise 2 in docs/guarantees.md).
            None if !self.cell.holds(self.rt.now_ms()) => Err(self.fenced()),
            None => Ok(None),
        };
        if let Some(commits) = self.flush_wanted.take() {
            let lease_gone = self.cell.is_ended();
            self.feed(
                Input::Published {
                    commits,
                    final_image: true,
                    outcome,
                    lease_gone,
                },
                ctx,
            );
        }
    }

    /// Wants a new image of a logged ledger: taken now if nothing is pending (the log position
    /// is then exactly the segment in flight or the tip), else right after the next cut.
    pub(super) fn want_image(&mut self, want: ImageWant, ctx: &mut Context<Self>) {
        self.image_wanted.push(want);
        let pending = self.log.as_ref().is_some_and(|l| l.has_pending());
        if !pending {
            self.take_wanted_images(ctx);
        }
    }

    /// Takes one image for every wanted one, if nothing is pending: its read transaction
    /// begins now, on the actor's thread, so it holds exactly the log's position.
    fn take_wanted_images(&mut self, ctx: &mut Context<Self>) {
        let Some(log) = self.log.as_ref() else {
            return;
        };
        if self.image_wanted.is_empty() || log.has_pending() || self.image_busy {
            return;
        }
        self.image_busy = true;
        let position = log.position();
        let tips = log.tips();
        let stamp_floor_ms = log.last_stamp();
        let wanted = std::mem::take(&mut self.image_wanted);
        let commits = wanted.iter().map(|w| w.commits).max().unwrap_or(0);
        // The tenure counted each wanted image as an upload: each hears the outcome.
        let (asked, replies): (Vec<u64>, Vec<_>) =
            wanted.into_iter().map(|w| (w.commits, w.reply)).unzip();
        let snapshot = match self.ledger.as_ref() {
            Some(ledger) => ReadSnapshot::begin(ledger.path())
                .map(|s| {
                    let page_one = ledger.page_one().unwrap_or_default().to_vec();
                    let sum = ledger.sums().map_or(0, |s| s.total());
                    (s, page_one, sum)
                })
                .map_err(Error::from),
            None => Err(Error::Closed("the ledger was closed".into())),
        };
        let publisher = self.publisher.clone();
        let work = async move {
            let outcome = match snapshot {
                Ok(snapshot) => {
                    publisher
                        .publish_at((commits, stamp_floor_ms), snapshot, position, tips)
                        .await
                }
                Err(e) => Err(e),
            };
            (outcome, publisher.head().await)
        };
        ctx.spawn(work.into_actor(self).map(move |(outcome, head), act, ctx| {
            act.image_busy = false;
            act.note_image_outcome(&outcome);
            if let Ok(Some(published)) = &outcome
                && let Some(log) = act.log.as_mut()
            {
                log.image_at(published.log);
                act.sweep_retention(ctx);
            }
            let answer = match &outcome {
                Ok(Some(published)) => Ok(Some(published.image.clone())),
                Ok(None) => Ok(head),
                Err(e) => Err(e.clone()),
            };
            // Published, but a forget or a lost lease took the tenant meanwhile: as with images,
            // the caller hears that the tenant is leaving, not a head about to be erased.
            let status = act.tenure.status();
            let answer = match status {
                crate::TenantStatus::Abandoning
                | crate::TenantStatus::Abandoned
                | crate::TenantStatus::Forgetting
                | crate::TenantStatus::Forgotten
                    if answer.is_ok() =>
                {
                    Err(Error::Draining {
                        key: act.key().to_string(),
                        state: status.as_str().to_string(),
                    })
                }
                _ => answer,
            };
            for reply in replies.into_iter().flatten() {
                let _ = reply.send(answer.clone());
            }
            let lease_gone = act.cell.is_ended();
            for commits in asked {
                act.feed(
                    Input::Published {
                        commits,
                        final_image: false,
                        outcome: outcome.clone(),
                        lease_gone,
                    },
                    ctx,
                );
            }
            // Wanted meanwhile: taken now if nothing is pending, else at the next cut.
            act.take_wanted_images(ctx);
        }));
    }

    /// Deletes, in the background, the images and segments of this tenant that no restore can
    /// need and that are older than `retain` (docs/guarantees.md, the storage bound). One sweep
    /// at a time: asked while one runs (a new image), another runs once it ends; a failure is
    /// reported and the next new image tries again.
    fn sweep_retention(&mut self, ctx: &mut Context<Self>) {
        if self.retention != RetentionSweep::Idle {
            if self.retention == RetentionSweep::Running {
                tracing::debug!(key = %self.key(),
                    "an image was published while retention runs: it runs again once it ends");
            }
            self.retention = RetentionSweep::RunningThenAgain;
            return;
        }
        self.retention = RetentionSweep::Running;
        let (rt, key) = (self.rt.clone(), self.key().clone());
        let work = async move {
            let record = rt.leases.read(&key).await.map_err(|e| e.to_string())?;
            let Some(record) = record else {
                return Ok(0);
            };
            leasehold::sweep::sweep_retention(
                rt.durable.as_ref(),
                &key,
                &record,
                rt.wall_ms(),
                rt.retain,
            )
            .await
            .map_err(|e| e.to_string())
        };
        ctx.spawn(work.into_actor(self).map(|swept, act, ctx| {
            let again = act.retention == RetentionSweep::RunningThenAgain;
            act.retention = RetentionSweep::Idle;
            // What crashed processes left beside the kept images and chain goes too, once seen
            // long enough (docs/guarantees.md, "Reconciling puts of unknown outcome").
            crate::reconcile::orphans::look_soon(&act.rt.reconcile, act.key().clone());
            let key = act.key().to_string();
            act.rt.events.emit(match swept {
                Ok(objects) => Event::Swept { key, objects },
                Err(error) => Event::SweepFailed { key, error },
            });
            if again {
                act.sweep_retention(ctx);
            }
        }));
    }

    /// Remembers an image the durable store refused for its size (S3 takes at most 5 GiB in
    /// one put): periodic images and compaction are then not taken again, only to be refused,
    /// until the ledger is smaller than that image (docs/guarantees.md, "Limits").
    pub(super) fn note_image_outcome<T>(&mut self, outcome: &Result<T, Error>) {
        if let Err(error @ Error::Store(StoreError::TooLarge { bytes, limit, .. })) = outcome {
            tracing::warn!(key = %self.key(), bytes, limit, %error,
                "the durable store refuses an image this large: no periodic image or compaction \
                 is taken until the ledger is smaller; the log keeps every write");
            self.image_too_large = Some((*bytes, error.clone()));
        }
    }

    /// Why a periodic image or compaction is not taken: the store refused an image no smaller
    /// than the ledger is now. `None` once the ledger is smaller.
    pub(super) fn image_refused_for_size(&mut self) -> Option<Error> {
        let (bytes, error) = self.image_too_large.as_ref()?;
        if self.publisher.ledger_bytes() < *bytes {
            self.image_too_large = None;
            return None;
        }
        Some(error.clone())
    }

    /// A compaction image that is not taken (the store refused one this large): the tick is
    /// over and reported failed, so the refusal is heard at every period, never retried.
    pub(super) fn image_not_taken(&mut self, refused: Error, ctx: &mut Context<Self>) {
        let lease_gone = self.cell.is_ended();
        self.feed(
            Input::Published {
                commits: 0,
                final_image: false,
                outcome: Err(refused),
                lease_gone,
            },
            ctx,
        );
    }

    /// An explicit snapshot of a logged tenant: a new image at the next cut.
    pub(super) fn snapshot_logged(
        &mut self,
        commits: u64,
        ctx: &mut Context<Self>,
    ) -> oneshot::Receiver<Result<Option<leasehold::layout::ImageRef>, Error>> {
        let (tx, rx) = oneshot::channel();
        self.want_image(
            ImageWant {
                commits,
                reply: Some(tx),
            },
            ctx,
        );
        rx
    }
}
