//! Events: what the runtime tells an [`Observer`] and `tracing` about every state change.
//!
//! Observers run on a thread of their own behind a bounded queue (promise 9 in docs/guarantees.md): an
//! observer that panics is caught, one that blocks only fills its queue, after which events are
//! dropped and counted — the runtime never waits for an observer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::layout::ImageRef;

use crate::status::TenantStatus;

/// How many events may wait for a slow observer before new ones are dropped.
pub const OBSERVER_QUEUE: usize = 10_000;

/// Something that happened in the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A tenant was opened: its lease acquired and its head restored.
    Opened {
        /// `<org>/<tenant>`.
        key: String,
        /// The epoch of this tenure.
        epoch: u64,
        /// The image restored, if any.
        restored: Option<ImageRef>,
    },
    /// A tenant moved from one state to another.
    StateChanged {
        /// `<org>/<tenant>`.
        key: String,
        /// The state it left.
        from: TenantStatus,
        /// The state it entered.
        to: TenantStatus,
    },
    /// One renewal round trip renewed `leases` leases.
    Renewed {
        /// How many leases were renewed.
        leases: usize,
    },
    /// A renewal round trip failed; no lease was extended.
    RenewFailed {
        /// The error, as text.
        error: String,
    },
    /// A lease was found gone at renewal: the tenant stops serving.
    Lost {
        /// `<org>/<tenant>`.
        key: String,
        /// The epoch that ended.
        epoch: u64,
    },
    /// An image was published: uploaded and made the head.
    SnapshotPublished {
        /// `<org>/<tenant>`.
        key: String,
        /// The new head.
        image: ImageRef,
        /// Holder-clock time (ms) just before the image was taken: every write acknowledged
        /// before it is in the image.
        taken_at_ms: u64,
    },
    /// An image could not be published; the head did not move.
    SnapshotFailed {
        /// `<org>/<tenant>`.
        key: String,
        /// The error, as text.
        error: String,
    },
    /// A segment of the change log could not be shipped (or its tip not moved): the tenure
    /// ends, and its callers hear `Fenced` or `Unshipped` (docs/guarantees.md, the change log).
    ShipFailed {
        /// `<org>/<tenant>`.
        key: String,
        /// The segment's log position, `e<epoch>/log-<seq>`.
        segment: String,
        /// The error, as text.
        error: String,
    },
    /// A run was refused with nothing of it committed, and the tenant serves on: its pages would
    /// not fit one segment of the change log (`BatchTooLarge`, before `COMMIT`), or an `Async`
    /// tenant's log is as far behind as it may be (`LogBehind`, before the run ran)
    /// (docs/guarantees.md, "Limits").
    BatchRefused {
        /// `<org>/<tenant>`.
        key: String,
        /// The error its caller heard, as text.
        error: String,
    },
    /// A handoff gave up waiting for admitted work; the tenant serves again.
    DrainTimeout {
        /// `<org>/<tenant>`.
        key: String,
        /// How long it waited.
        after_ms: u64,
    },
    /// A tenure ended and its lease was handed back (or lost, for `flushed: false` after a lapse).
    Released {
        /// `<org>/<tenant>`.
        key: String,
        /// The epoch that ended.
        epoch: u64,
        /// True only when the final image was published and the lease still held.
        flushed: bool,
    },
    /// A tenant was erased: nothing at or below `floor` remains.
    Forgotten {
        /// `<org>/<tenant>`.
        key: String,
        /// The floor that was raised.
        floor: u64,
    },
    /// Dead epochs of a tenant were deleted.
    Swept {
        /// `<org>/<tenant>`.
        key: String,
        /// How many objects went.
        objects: usize,
    },
    /// Objects a replica put (or a crashed process left) that nothing names and nothing can
    /// name any more were deleted (docs/guarantees.md, "Reconciling puts of unknown outcome").
    TakenBack {
        /// `<org>/<tenant>`.
        key: String,
        /// How many objects went.
        objects: usize,
    },
    /// A tenure that ended on this replica with a move of unknown outcome was fenced: its lease,
    /// which may still have been live in the store, was released so that no late move of it
    /// can land (docs/guarantees.md, "Reconciling puts of unknown outcome").
    TenureFenced {
        /// `<org>/<tenant>`.
        key: String,
        /// The ended tenure.
        epoch: u64,
    },
    /// A replica dropped its local copy of a tenant whose tenure is at or below the floor: a
    /// successor forgot the tenant while this replica was stopped, cut off or crashed.
    LocalCopyDropped {
        /// `<org>/<tenant>`.
        key: String,
        /// The dead tenure the copy belonged to.
        epoch: u64,
    },
    /// A sweep failed; the next open tries again.
    SweepFailed {
        /// `<org>/<tenant>`.
        key: String,
        /// The error, as text.
        error: String,
    },
    /// The replica was dropped without `close()` and no handle of it is left (no `Supervisor`,
    /// no `TenantRef` or `Ticket` a host holds): nothing can reach it, so it stops like a
    /// crash — renewals stop, its tenants stop without a flush, their leases run out after
    /// `ttl` (docs/guarantees.md, promise 6).
    ReplicaDropped {
        /// How many tenants were open.
        tenants: usize,
    },
    /// A command sent with an idempotency key was delivered again: the reply stored with its
    /// first delivery was returned and nothing ran (docs/guarantees.md, promise 11).
    ReplyReplayed {
        /// `<org>/<tenant>`.
        key: String,
        /// The message's name.
        name: String,
    },
    /// A message addressed to a tenant that was leaving this replica (draining, flushing,
    /// being forgotten) waited for it to leave before it was routed again.
    MessageWaited {
        /// `<org>/<tenant>`.
        key: String,
        /// How long it waited.
        waited_ms: u64,
    },
    /// `close` handed off another tenant.
    CloseProgress {
        /// Tenants done (flushed or not).
        done: usize,
        /// Tenants to close.
        total: usize,
        /// Of those done, how many could not be flushed.
        unflushed: usize,
    },
}

impl Event {
    /// A short name of the event's kind (`opened`, `released`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Opened { .. } => "opened",
            Event::StateChanged { .. } => "state_changed",
            Event::Renewed { .. } => "renewed",
            Event::RenewFailed { .. } => "renew_failed",
            Event::Lost { .. } => "lost",
            Event::SnapshotPublished { .. } => "snapshot_published",
            Event::SnapshotFailed { .. } => "snapshot_failed",
            Event::ShipFailed { .. } => "ship_failed",
            Event::BatchRefused { .. } => "batch_refused",
            Event::DrainTimeout { .. } => "drain_timeout",
            Event::Released { .. } => "released",
            Event::Forgotten { .. } => "forgotten",
            Event::Swept { .. } => "swept",
            Event::TakenBack { .. } => "taken_back",
            Event::TenureFenced { .. } => "tenure_fenced",
            Event::SweepFailed { .. } => "sweep_failed",
            Event::LocalCopyDropped { .. } => "local_copy_dropped",
            Event::ReplicaDropped { .. } => "replica_dropped",
            Event::CloseProgress { .. } => "close_progress",
            Event::ReplyReplayed { .. } => "reply_replayed",
            Event::MessageWaited { .. } => "message_waited",
        }
    }
}

/// Hears the runtime's events. Called on a thread of its own, one event at a time, in order.
pub trait Observer: Send + Sync + 'static {
    /// One event. A panic here is caught and counted; blocking here delays only other events.
    fn on_event(&self, event: &Event);
}

enum Item {
    Event(Event),
    Barrier(tokio::sync::oneshot::Sender<()>),
}

/// Emits events to `tracing` at once and to the observer through its queue.
#[derive(Clone)]
pub struct EventSink {
    /// The observer's queue; `None` when there is no observer.
    queue: Option<SyncSender<Item>>,
    /// Events dropped because the queue was full.
    dropped: Arc<AtomicU64>,
    /// Observer calls that panicked.
    panics: Arc<AtomicU64>,
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink")
            .field("observer", &self.queue.is_some())
            .field("dropped", &self.dropped.load(Ordering::Relaxed))
            .field("panics", &self.panics.load(Ordering::Relaxed))
            .finish()
    }
}

impl EventSink {
    /// A sink feeding `observer` from a thread of its own, or only `tracing` when `None`.
    pub fn new(observer: Option<Arc<dyn Observer>>) -> Self {
        let dropped = Arc::new(AtomicU64::new(0));
        let panics = Arc::new(AtomicU64::new(0));
        let queue = observer.and_then(|obs| {
            let (tx, rx) = mpsc::sync_channel::<Item>(OBSERVER_QUEUE);
            let counted = panics.clone();
            std::thread::Builder::new()
                .name("leasehold-observer".into())
                .spawn(move || deliver(obs, rx, counted))
                .map_err(|e| tracing::error!(error = %e, "observer thread did not start"))
                .ok()
                .map(|_| tx)
        });
        Self {
            queue,
            dropped,
            panics,
        }
    }

    /// Emits `event`: to `tracing` and the metrics it moves now, to the observer when it gets
    /// to it.
    pub fn emit(&self, event: Event) {
        trace(&event);
        crate::metrics::on_event(&event);
        let Some(queue) = &self.queue else { return };
        match queue.try_send(Item::Event(event)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Resolves once the observer has seen every event emitted before this call (or at once
    /// when there is no observer). Waits at most `limit`; returns whether the barrier was reached.
    pub async fn delivered(&self, limit: Duration) -> bool {
        let Some(queue) = &self.queue else {
            return true;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        if queue.try_send(Item::Barrier(tx)).is_err() {
            return false;
        }
        matches!(tokio::time::timeout(limit, rx).await, Ok(Ok(())))
    }

    /// Events dropped because the observer's queue was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Observer calls that panicked.
    pub fn observer_panics(&self) -> u64 {
        self.panics.load(Ordering::Relaxed)
    }
}

fn deliver(observer: Arc<dyn Observer>, rx: mpsc::Receiver<Item>, panics: Arc<AtomicU64>) {
    while let Ok(item) = rx.recv() {
        match item {
            Item::Event(event) => {
                let call = std::panic::AssertUnwindSafe(|| observer.on_event(&event));
                if std::panic::catch_unwind(call).is_err() {
                    panics.fetch_add(1, Ordering::Relaxed);
                }
            }
            Item::Barrier(done) => {
                let _ = done.send(());
            }
        }
    }
}

fn trace(event: &Event) {
    match event {
        Event::Lost { key, epoch } => tracing::warn!(%key, epoch, "lease lost"),
        Event::SnapshotFailed { key, error } => tracing::warn!(%key, %error, "snapshot failed"),
        Event::ShipFailed {
            key,
            segment,
            error,
        } => tracing::warn!(%key, %segment, %error, "shipping a segment failed; the tenure ends"),
        Event::BatchRefused { key, error } => {
            tracing::warn!(%key, %error, "a run was refused; nothing of it was committed")
        }
        Event::DrainTimeout { key, after_ms } => tracing::warn!(%key, after_ms, "drain timeout"),
        Event::RenewFailed { error } => tracing::warn!(%error, "renewal failed"),
        Event::SweepFailed { key, error } => tracing::warn!(%key, %error, "sweep failed"),
        Event::CloseProgress {
            done,
            total,
            unflushed,
        } => tracing::info!(done, total, unflushed, "close progress"),
        Event::Renewed { leases } => tracing::debug!(leases, "renewed"),
        Event::ReplicaDropped { tenants } => tracing::warn!(
            tenants,
            "the replica was dropped without close() and no handle is left: it stops like a crash"
        ),
        other => tracing::info!(kind = other.kind(), event = ?other, "leasehold event"),
    }
}

/// An observer that keeps every event, for tests and examples.
#[derive(Debug, Default, Clone)]
pub struct EventLog {
    /// The events in the order they were delivered.
    events: Arc<Mutex<Vec<Event>>>,
}

impl EventLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of every event so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// Whether any event so far satisfies `pred`.
    pub fn any(&self, pred: impl Fn(&Event) -> bool) -> bool {
        self.events().iter().any(pred)
    }

    /// How many events so far satisfy `pred`.
    pub fn count(&self, pred: impl Fn(&Event) -> bool) -> usize {
        self.events().iter().filter(|e| pred(e)).count()
    }

    /// Forgets every event so far.
    pub fn clear(&self) {
        if let Ok(mut e) = self.events.lock() {
            e.clear();
        }
    }
}

impl Observer for EventLog {
    fn on_event(&self, event: &Event) {
        if let Ok(mut e) = self.events.lock() {
            e.push(event.clone());
        }
    }
}
