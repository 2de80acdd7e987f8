//! How the tenant actor drives its change log: cut the next segment once the one in flight is
//! back, feed each outcome to the tenure, settle the log for a handoff's flush, and take images
//! at a cut, where the log position they hold is known (docs/guarantees.md, the change log).

use actix::prelude::*;
use leasehold::Error;
use leasehold::image::ReadSnapshot;
use tokio::sync::oneshot;

use super::actor::{ImageWant, TenantActor};
use super::log::{Cut, ship};
use super::tenure::Input;
use crate::events::Event;

/// Wall-clock milliseconds since the Unix epoch (a segment's `created_at_ms`).
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl TenantActor {
    /// Ships the pending changes if no segment is in flight; answers callers the log already
    /// covers; takes wanted images at the cut; tells a waiting flush when the log has settled.
    pub(super) fn ship_next(&mut self, ctx: &mut Context<Self>) {
        let Some(log) = self.log.as_mut() else {
            return;
        };
        match log.cut(wall_ms()) {
            Ok(Some(cut)) => {
                self.take_wanted_images(ctx);
                self.send(cut, ctx);
            }
            Ok(None) => {
                self.take_wanted_images(ctx);
                self.check_flush(ctx);
            }
            Err(error) => {
                let error = Error::Unshipped {
                    key: self.key().to_string(),
                    reason: format!("cutting a segment failed: {error}"),
                };
                if let Some(log) = self.log.as_mut() {
                    log.fail(error.clone());
                }
                self.feed(Input::Shipping, ctx);
                self.feed(Input::Shipped(Err(error)), ctx);
                self.check_flush(ctx);
            }
        }
    }

    fn send(&mut self, cut: Cut, ctx: &mut Context<Self>) {
        let Cut { from, to, bytes } = cut;
        let len = bytes.len() as u64;
        self.feed(Input::Shipping, ctx);
        let work = ship(self.rt.clone(), self.cell.clone(), from, to, bytes);
        ctx.spawn(work.into_actor(self).map(move |outcome, act, ctx| {
            if let Some(log) = act.log.as_mut() {
                log.shipped(to, len, &outcome);
            }
            if let Err(error) = &outcome {
                act.rt.events.emit(Event::ShipFailed {
                    key: act.key().to_string(),
                    segment: to.to_string(),
                    error: error.to_string(),
                });
            }
            act.feed(Input::Shipped(outcome), ctx);
            act.ship_next(ctx);
        }));
    }

    /// A handoff's flush: ship everything committed, then go on once the log has settled.
    pub(super) fn flush_log(&mut self, commits: u64, ctx: &mut Context<Self>) {
        self.flush_wanted = Some(commits);
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
                        .publish_at(commits, snapshot, position, tips)
                        .await
                }
                Err(e) => Err(e),
            };
            (outcome, publisher.head().await)
        };
        ctx.spawn(work.into_actor(self).map(move |(outcome, head), act, ctx| {
            act.image_busy = false;
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
    /// at a time; a failure is reported and the next new image tries again.
    fn sweep_retention(&mut self, ctx: &mut Context<Self>) {
        if self.retention_running {
            return;
        }
        self.retention_running = true;
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
                wall_ms(),
                rt.retain,
            )
            .await
            .map_err(|e| e.to_string())
        };
        ctx.spawn(work.into_actor(self).map(|swept, act, _| {
            act.retention_running = false;
            // What crashed processes left beside the kept images and chain goes too, once seen
            // long enough (docs/guarantees.md, "Reconciling puts of unknown outcome").
            crate::reconcile::orphans::look_soon(&act.rt.reconcile, act.key().clone());
            let key = act.key().to_string();
            act.rt.events.emit(match swept {
                Ok(objects) => Event::Swept { key, objects },
                Err(error) => Event::SweepFailed { key, error },
            });
        }));
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
