//! The faults that reach holes 1, 4 and 6 of the hardening (docs/testing.md); once opt-in,
//! now among the default kinds since their fixes.
//!
//! `close-during-open` (docs/guarantees.md promise 2): a tenant is handed off by its owner, then
//! another replica is asked to open it and, at once, to close. A close must refuse that open or
//! hand the tenant off; the checker fails a close that returned while a tenure granted to that
//! process had not ended and was not named unflushed (`graceful-not-flushed`).
//!
//! `forget-late-put` (docs/guarantees.md promise 5, delete means delete): the owner's image puts
//! land late ([`crate::late_puts::LatePuts`], 1.6 s, past the 1 s store deadline; segments go at
//! once, or the tenure would end before the forget); a snapshot is asked for and times out; the tenant is forgotten at once. The erasure is listed right after the
//! forget and again twice the store deadline later, when the late image has landed: a forget
//! that neither waits for the put to settle nor sweeps after it leaves an image at the floor
//! (`forgotten-object-left`).
//!
//! `drain-kill`: a crash in the middle of a long drain (docs/guarantees.md promise 3, the crash
//! tail while draining).
//!
//! ```text
//!  owner: admit a ticket ──> writes through it every ~10 ms (acknowledged while draining)
//!         handoff ──> the drain waits for the ticket (up to drain_timeout, 3 s)
//!         2.5–2.8 s into the drain: SIGKILL, restart on the same state root
//! ```
//!
//! Every write acknowledged through the ticket is in the history like any other; the checker's
//! tail bound then asks whether the tenure kept publishing while it drained. A runtime that
//! stops its periodic snapshots during a drain loses every write of the drain's first
//! half-second and more, acknowledged longer ago than the bound (`lost-beyond-tail`).
//!
//! Before snapshots ran while draining (hole 4) this fault was opt-in and failed every run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::cluster::{BoxError, Cluster, next_id};
use crate::history::Outcome;
use crate::protocol::{Answer, DRAIN_TIMEOUT, Op, STORE_DEADLINE, StoreFault};
use crate::rng::Rng;

/// How long before the drain's deadline the owner is killed, at least and at most.
const BEFORE_DEADLINE_MS: (u64, u64) = (200, 500);
/// How long one write through the ticket may take.
const SESSION_WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// Injects one `drain-kill`; `Ok(None)` when no replica owns a tenant.
pub async fn drain_kill(
    c: &Arc<Cluster>,
    n: usize,
    rng: &mut Rng,
) -> Result<Option<String>, BoxError> {
    let Some((slot, owned)) = crate::faults::pick_owner(c, rng) else {
        return Ok(None);
    };
    let (Some(proc), Some(&tenant)) = (c.live(slot), rng.pick(&owned)) else {
        return Ok(None);
    };
    let session = next_id();
    let admitted = proc
        .call(Op::Admit { tenant, session }, Duration::from_secs(2))
        .await;
    if !matches!(admitted, Ok(Answer::Done { .. })) {
        return Ok(Some(format!(
            "{} could not admit a ticket on t{tenant}: {admitted:?}",
            proc.label
        )));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let writer = {
        let (c, proc, stop, acked) = (c.clone(), proc.clone(), stop.clone(), acked.clone());
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let key = format!("t{tenant}-drain{n}-{i:05}");
                let outcome = c
                    .session_write(&proc, tenant, session, key, SESSION_WRITE_TIMEOUT)
                    .await;
                if !matches!(outcome, Outcome::Ok { .. }) {
                    break;
                }
                acked.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    // Let the ticket carry a few writes, then start the handoff: its drain waits for the ticket.
    tokio::time::sleep(rng.millis(100, 300)).await;
    let before_drain = acked.load(Ordering::SeqCst);
    let handing_off = {
        let proc = proc.clone();
        tokio::spawn(async move { proc.call(Op::Handoff { tenant }, DRAIN_TIMEOUT * 2).await })
    };
    let drain_ms = DRAIN_TIMEOUT.as_millis() as u64;
    let kill_after =
        drain_ms - rng.below(BEFORE_DEADLINE_MS.1 - BEFORE_DEADLINE_MS.0) - BEFORE_DEADLINE_MS.0;
    tokio::time::sleep(Duration::from_millis(kill_after)).await;
    c.kill(slot).await;
    stop.store(true, Ordering::SeqCst);
    let _ = writer.await;
    let _ = handing_off.await;
    let during = acked.load(Ordering::SeqCst) - before_drain;
    crate::faults::restart_slot(c, slot).await?;
    Ok(Some(format!(
        "{} drained t{tenant} behind a ticket carrying writes ({during} acknowledged during the \
         drain); SIGKILL {kill_after} ms into the drain, restarted",
        proc.label
    )))
}

/// How late the owner's puts land: past the store deadline.
pub const LATE_PUT_MS: u64 = 1_600;

/// Injects one `forget-late-put`; `Ok(None)` when no replica owns a tenant.
pub async fn forget_late_put(c: &Arc<Cluster>, rng: &mut Rng) -> Result<Option<String>, BoxError> {
    let Some((slot, owned)) = crate::faults::pick_owner(c, rng) else {
        return Ok(None);
    };
    let (Some(proc), Some(&tenant)) = (c.live(slot), rng.pick(&owned)) else {
        return Ok(None);
    };
    c.history.impair(&proc.label);
    let late = Op::Fault {
        fault: StoreFault::Late { ms: LATE_PUT_MS },
    };
    proc.call(late, Duration::from_secs(2))
        .await
        .map_err(|e| format!("late-put switch: {e:?}"))?;
    let snapshot = proc.call(Op::Snapshot { tenant }, STORE_DEADLINE * 3).await;
    let forgotten = proc
        .call(Op::Forget { tenant }, Duration::from_secs(12))
        .await;
    c.clear_owner_if(tenant, slot);
    let mut text = format!(
        "{}'s puts land {LATE_PUT_MS} ms late; snapshot of t{tenant}: {}; forget: {}",
        proc.label,
        short(&snapshot),
        short(&forgotten)
    );
    crate::audit::after_forget(c, tenant, slot, &forgotten).await;
    // The late put lands meanwhile; the erasure is listed again once the bound passed.
    tokio::time::sleep(c.erasure_bound).await;
    text += "; erasure listed right after and once the erasure bound passed";
    let clear = Op::Fault {
        fault: StoreFault::Clear,
    };
    proc.call(clear, Duration::from_secs(2)).await.ok();
    c.history.unimpair(&proc.label);
    Ok(Some(text))
}

/// An answer in a word or two, for a fault's line.
pub fn short(answer: &Result<Answer, crate::history::CallError>) -> String {
    match answer {
        Ok(Answer::Done { .. }) => "ok".into(),
        Ok(Answer::Failed { code, .. }) => code.clone(),
        other => format!("{other:?}"),
    }
}

/// Injects one `close-during-open`; `Ok(None)` when no tenant can be moved.
pub async fn close_during_open(
    c: &Arc<Cluster>,
    rng: &mut Rng,
) -> Result<Option<String>, BoxError> {
    let Some((owner, owned)) = crate::faults::pick_owner(c, rng) else {
        return Ok(None);
    };
    let others: Vec<usize> = c.live_slots().into_iter().filter(|&i| i != owner).collect();
    let (Some(proc), Some(&tenant), Some(&slot)) =
        (c.live(owner), rng.pick(&owned), rng.pick(&others))
    else {
        return Ok(None);
    };
    let handed = proc
        .call(Op::Handoff { tenant }, Duration::from_secs(12))
        .await;
    if !matches!(handed, Ok(Answer::Done { .. })) {
        return Ok(Some(format!(
            "{} could not hand t{tenant} off: {}",
            proc.label,
            short(&handed)
        )));
    }
    c.clear_owner_if(tenant, owner);
    let Some(target) = c.live(slot) else {
        return Ok(None);
    };
    // Both requests reach the replica back to back: the open's acquire is under way when the
    // close begins.
    // Polled once, the open's line is sent before the close's.
    let mut opening = Box::pin(target.call(Op::Open { tenant }, Duration::from_secs(6)));
    let first = futures::poll!(&mut opening);
    let closing = target.call(Op::Close, Duration::from_secs(25));
    let (opened, closed) = match first {
        std::task::Poll::Ready(opened) => (opened, closing.await),
        std::task::Poll::Pending => futures::join!(opening, closing),
    };
    if let Ok(Answer::Opened {
        epoch, acquired_hi, ..
    }) = &opened
    {
        c.history
            .grant(tenant, *epoch, &target.label, Some(slot), *acquired_hi);
    }
    crate::faults::judge_close(c, &target.label, &closed);
    c.shutdown(slot, Duration::from_secs(5)).await;
    crate::faults::restart_slot(c, slot).await?;
    Ok(Some(format!(
        "{} handed t{tenant} off; {} opened it ({}) while closing ({}); restarted",
        proc.label,
        target.label,
        match &opened {
            Ok(Answer::Opened { epoch, .. }) => format!("epoch {epoch}"),
            other => short(other),
        },
        match &closed {
            Ok(Answer::Closed { unflushed }) => format!("{} unflushed", unflushed.len()),
            other => short(other),
        }
    )))
}
