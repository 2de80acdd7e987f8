//! How a tenant leaves this replica: the handoff's drain and flush, abandon, forget, and a lost
//! lease. Each verb checks the state first; each asynchronous step re-checks it when it comes
//! back, so a verb that overtook it (an abandon, a forget, a lost lease) wins.

use actix::prelude::*;
use leasehold::sweep::sweep_dead_epochs;
use leasehold::{Error, paths};
use tokio::sync::oneshot;

use super::actor::TenantActor;
use super::messages::*;
use super::publish::Published;
use crate::events::Event;
use crate::lease_actor::{LeaseLost, Unregister};
use crate::status::TenantStatus;
use crate::supervisor::StopWhenUnheld;

type Reply<T> = ResponseActFuture<TenantActor, Result<T, Error>>;

fn ready<T: 'static>(value: Result<T, Error>) -> Reply<T> {
    Box::pin(actix::fut::ready(value))
}

impl TenantActor {
    /// The refusal for a verb that comes too late: `Draining` while leaving, `Fenced` after.
    fn refusal(&self) -> Error {
        if self.status.is_final() || self.status == TenantStatus::Opening {
            self.fenced()
        } else {
            self.draining()
        }
    }

    /// Tells a handoff waiting for the drain that it was overtaken.
    fn settle_drain(&mut self) {
        if let Some(waiting) = self.drain.take() {
            let _ = waiting.send(Err(self.draining()));
        }
    }

    /// Ends the tenure locally: the cell never holds again and the renewal chain lets go.
    fn end_tenure(&mut self) {
        self.cell.end();
        self.lease_actor.do_send(Unregister {
            key: self.key().clone(),
            epoch: self.cell.epoch,
        });
    }

    /// Enters a final state and tells the supervisor.
    fn finish(&mut self, to: TenantStatus) {
        self.move_to(to);
        self.gone.do_send(TenantGone {
            key: self.key().clone(),
            epoch: self.cell.epoch,
            status: to,
        });
    }

    /// Stops after the lease was lost: nothing is flushed, the local file stays.
    pub(super) fn lose(&mut self) {
        self.end_tenure();
        self.settle_drain();
        self.tickets.clear();
        self.close_ledger();
        self.finish(TenantStatus::Abandoned);
    }

    /// Hands the lease back, then (for a flushed handoff) drops the local copy.
    fn release(&mut self, flushed: bool) -> Reply<()> {
        self.releasing = true;
        self.close_ledger();
        self.end_tenure();
        let rt = self.rt.clone();
        let key = self.key().clone();
        let epoch = self.cell.epoch;
        let call = async move { rt.leases.release(&key, rt.replica.as_str(), epoch).await };
        Box::pin(call.into_actor(self).map(move |released, act, _| {
            if let Err(e) = released {
                tracing::warn!(key = %act.key(), error = %e, "releasing the lease failed; it will expire");
            }
            if flushed {
                let key = act.key();
                if let Err(e) = paths::remove_tenant_dir(&act.rt.state_root, key.org(), key.tenant()) {
                    tracing::warn!(key = %key, error = %e, "dropping the local copy failed");
                }
            }
            let to = match act.status {
                TenantStatus::Abandoning => TenantStatus::Abandoned,
                _ => TenantStatus::Released,
            };
            act.rt.events.emit(Event::Released {
                key: act.key().to_string(),
                epoch,
                flushed,
            });
            act.finish(to);
            Ok(())
        }))
    }

    /// What a flush does once its upload is back (or was not needed).
    fn after_flush(&mut self, outcome: Result<Option<(Published, u64)>, Error>) -> Reply<()> {
        let key = self.key().to_string();
        if self.status != TenantStatus::Flushing {
            // An abandon, a forget or a lost lease took the tenant while the upload ran.
            return ready(Err(self.draining()));
        }
        match outcome {
            Ok(published) => {
                if let Some((Published { image, taken_at_ms }, commits)) = published {
                    self.published_commits = commits;
                    self.rt.events.emit(Event::SnapshotPublished {
                        key,
                        image,
                        taken_at_ms,
                    });
                }
                self.release(true)
            }
            Err(error) => {
                self.rt.events.emit(Event::SnapshotFailed {
                    key: key.clone(),
                    error: error.to_string(),
                });
                if error.is_fenced() {
                    self.rt.events.emit(Event::Lost {
                        key,
                        epoch: self.cell.epoch,
                    });
                    self.lose();
                } else {
                    self.move_to(TenantStatus::Serving);
                }
                ready(Err(error))
            }
        }
    }
}

impl Handler<BeginDrain> for TenantActor {
    type Result = Result<oneshot::Receiver<Result<(), Error>>, Error>;

    fn handle(&mut self, _msg: BeginDrain, _ctx: &mut Context<Self>) -> Self::Result {
        self.commit_batch();
        if self.status != TenantStatus::Serving {
            return Err(self.refusal());
        }
        if !self.cell.holds(self.rt.now_ms()) {
            return Err(self.fenced());
        }
        self.move_to(TenantStatus::Draining);
        let (tx, rx) = oneshot::channel();
        if self.tickets.is_empty() {
            let _ = tx.send(Ok(()));
        } else {
            self.drain = Some(tx);
        }
        Ok(rx)
    }
}

impl Handler<CancelDrain> for TenantActor {
    type Result = ();

    fn handle(&mut self, _msg: CancelDrain, _ctx: &mut Context<Self>) {
        if self.status == TenantStatus::Draining {
            self.drain = None;
            self.move_to(TenantStatus::Serving);
        }
    }
}

impl Handler<Flush> for TenantActor {
    type Result = ResponseActFuture<Self, Result<(), Error>>;

    fn handle(&mut self, _msg: Flush, _ctx: &mut Context<Self>) -> Self::Result {
        self.commit_batch();
        if self.status != TenantStatus::Draining || !self.tickets.is_empty() {
            return ready(Err(self.refusal()));
        }
        self.move_to(TenantStatus::Flushing);
        let needed = self.dirty() && !self.rt.skips_final_image();
        let upload = needed.then(|| self.begin_upload());
        let uploading = upload.is_some();
        // With nothing to publish the head already holds every commit, but the tenure must
        // still hold to call the handoff flushed.
        let held = self.cell.holds(self.rt.now_ms());
        let fenced = self.fenced();
        let work = async move {
            match upload {
                Some((publisher, commits)) => publisher.publish().await.map(|i| Some((i, commits))),
                None if held => Ok(None),
                None => Err(fenced),
            }
        };
        Box::pin(work.into_actor(self).then(move |outcome, act, _| {
            if uploading {
                act.finish_upload();
            }
            act.after_flush(outcome)
        }))
    }
}

impl Handler<Abandon> for TenantActor {
    type Result = ResponseActFuture<Self, Result<(), Error>>;

    fn handle(&mut self, _msg: Abandon, _ctx: &mut Context<Self>) -> Self::Result {
        self.commit_batch();
        let overtakable = matches!(
            self.status,
            TenantStatus::Serving | TenantStatus::Draining | TenantStatus::Flushing
        );
        if !overtakable || self.releasing {
            // Already leaving by another way (a forget keeps its lease), or already gone.
            return ready(Ok(()));
        }
        self.move_to(TenantStatus::Abandoning);
        self.settle_drain();
        self.tickets.clear();
        self.release(false)
    }
}

impl Handler<Forget> for TenantActor {
    type Result = ResponseActFuture<Self, Result<(), Error>>;

    fn handle(&mut self, _msg: Forget, _ctx: &mut Context<Self>) -> Self::Result {
        self.commit_batch();
        let may_start = matches!(
            self.status,
            TenantStatus::Serving | TenantStatus::Draining | TenantStatus::Flushing
        ) && !self.releasing;
        if !may_start {
            return ready(Err(self.refusal()));
        }
        self.move_to(TenantStatus::Forgetting);
        self.settle_drain();
        self.tickets.clear();
        self.close_ledger();
        let (done_tx, done_rx) = oneshot::channel();
        self.forgets.do_send(ForgetBegun {
            key: self.key().clone(),
            epoch: self.cell.epoch,
            done: done_rx,
        });
        let settled = self.uploads_settled();
        let erase = self.erase(settled);
        Box::pin(erase.into_actor(self).then(move |erased, act, _| {
            let ending = match erased {
                Ok(floor) => act.after_erase(floor, None),
                Err((error, Some(floor))) => act.after_erase(floor, Some(error)),
                Err((error, None)) => act.forget_failed(error),
            };
            // `close` waits for this: the tenure is over and its lease handed back.
            ending.map(move |outcome, _, _| {
                let _ = done_tx.send(());
                outcome
            })
        }))
    }
}

/// Why an erase stopped, and the floor if it had already been raised.
type EraseError = (Error, Option<u64>);

impl TenantActor {
    /// Waits for uploads under way, raises the floor, deletes every epoch at or below it and the
    /// local directory. Renewals go on meanwhile: the lease is still registered.
    fn erase(
        &self,
        settled: oneshot::Receiver<()>,
    ) -> impl std::future::Future<Output = Result<u64, EraseError>> + 'static {
        let rt = self.rt.clone();
        let key = self.key().clone();
        let epoch = self.cell.epoch;
        async move {
            let _ = settled.await;
            let record = rt
                .leases
                .mark_forgotten(&key, rt.replica.as_str(), epoch)
                .await
                .map_err(|e| (Error::from(e), None))?;
            let floor = Some(record.floor);
            sweep_dead_epochs(rt.durable.as_ref(), &key, record.floor)
                .await
                .map_err(|e| (Error::from(e), floor))?;
            let root = rt.state_root.clone();
            let (org, tenant) = (key.org().clone(), key.tenant().clone());
            let removed =
                tokio::task::spawn_blocking(move || paths::remove_tenant_dir(&root, &org, &tenant))
                    .await
                    .map_err(|e| Error::Closed(format!("local delete task failed: {e}")));
            match removed {
                Ok(Ok(_)) => Ok(record.floor),
                Ok(Err(e)) => Err((Error::from(e), floor)),
                Err(e) => Err((e, floor)),
            }
        }
    }

    /// Ends the tenure after a forget (the floor is raised) and reports the tenant forgotten.
    /// With `incomplete`, some copy at or below the floor could not be deleted: the caller hears
    /// that error, and the copies go at the next open's sweep, `leasehold sweep`, or the local
    /// sweep.
    fn after_erase(&mut self, floor: u64, incomplete: Option<Error>) -> Reply<()> {
        self.end_tenure();
        let rt = self.rt.clone();
        let key = self.key().clone();
        let epoch = self.cell.epoch;
        let call = async move { rt.leases.release(&key, rt.replica.as_str(), epoch).await };
        Box::pin(call.into_actor(self).map(move |released, act, _| {
            if let Err(e) = released {
                tracing::warn!(key = %act.key(), error = %e, "releasing a forgotten lease failed");
            }
            let key = act.key().to_string();
            act.rt.events.emit(Event::Forgotten {
                key: key.clone(),
                floor,
            });
            act.rt.events.emit(Event::Released {
                key,
                epoch,
                flushed: false,
            });
            act.finish(TenantStatus::Forgotten);
            incomplete.map_or(Ok(()), Err)
        }))
    }

    /// A forget that could not raise the floor: nothing was forgotten, and the tenure ends like
    /// an abandon (the local file stays), so the lease is not renewed for ever by a tenant
    /// nobody can use. Forget again after opening the tenant anew.
    fn forget_failed(&mut self, error: Error) -> Reply<()> {
        self.end_tenure();
        let rt = self.rt.clone();
        let key = self.key().clone();
        let epoch = self.cell.epoch;
        let call = async move { rt.leases.release(&key, rt.replica.as_str(), epoch).await };
        Box::pin(call.into_actor(self).map(move |released, act, _| {
            if let Err(e) = released {
                tracing::warn!(key = %act.key(), error = %e, "releasing after a failed forget failed; the lease will expire");
            }
            act.rt.events.emit(Event::Released {
                key: act.key().to_string(),
                epoch,
                flushed: false,
            });
            act.finish(TenantStatus::Abandoned);
            Err(error)
        }))
    }
}

impl Handler<LeaseLost> for TenantActor {
    type Result = ();

    fn handle(&mut self, _msg: LeaseLost, _ctx: &mut Context<Self>) {
        // A tenure handing its lease back (after its final image was published) ends as it is.
        let stays = self.status.is_final()
            || self.releasing
            || matches!(
                self.status,
                TenantStatus::Forgetting | TenantStatus::Abandoning
            );
        if !stays {
            self.lose();
        }
    }
}

impl Handler<StopWhenUnheld> for TenantActor {
    type Result = ();

    /// A tenure that has ended stops as soon as no host handle is left (docs/guarantees.md,
    /// promise 6); until then it still answers `status`.
    fn handle(&mut self, _msg: StopWhenUnheld, ctx: &mut Context<Self>) {
        if self.status.is_final() {
            ctx.run_interval(std::time::Duration::from_millis(100), |_, ctx| {
                if !ctx.connected() {
                    ctx.stop();
                }
            });
        }
    }
}
