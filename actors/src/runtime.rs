//! What the supervisor and every tenant actor share: the validated configuration, with the
//! stores wrapped so that every call has a deadline, and the event sink.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leasehold::clock::{SharedClock, SharedWallClock};
use leasehold::deadline::Deadline;
use leasehold::durable::SharedDurableStore;
use leasehold::lease::SharedLeaseStore;
use leasehold::ledger::LedgerOptions;
use leasehold::paths::{self, RootLock};
use leasehold::{Error, ReplicaId};

use crate::config::RuntimeConfig;
use crate::events::EventSink;

/// The shared, read-only part of a replica.
#[derive(Debug)]
pub(crate) struct Runtime {
    /// This replica's name.
    pub(crate) replica: ReplicaId,
    /// Where local ledgers live.
    pub(crate) state_root: PathBuf,
    /// The lease store, every call bounded by `store_deadline`.
    pub(crate) leases: SharedLeaseStore,
    /// Coalesces the tip moves of the replica's tenants into one lease-store call per round.
    pub(crate) tips: crate::tips::TipBatcher,
    /// The durable store, every call bounded by `store_deadline`.
    pub(crate) durable: SharedDurableStore,
    /// The holder's monotonic clock.
    pub(crate) clock: SharedClock,
    /// The host's wall clock: segments' and images' stamps, retention's `now`.
    pub(crate) wall_clock: SharedWallClock,
    /// Lease duration.
    pub(crate) ttl: Duration,
    /// Safety margin before a lease's end.
    pub(crate) margin: Duration,
    /// Renewal period, or `None` for renewals on request only.
    pub(crate) renew_every: Option<Duration>,
    /// The transport to the fleet's other replicas, if any (taken by `Supervisor::start`).
    pub(crate) transport: Option<crate::transport::TransportConfig>,
    /// Where tenants held elsewhere were found lately (`transport.holder_cache`): the router
    /// reads and fills it, an open here empties the tenant's entry.
    pub(crate) holders: Arc<crate::holders::Holders>,
    /// How acknowledged writes are kept beyond the replica.
    pub(crate) durability: crate::config::Durability,
    /// Periodic snapshot (or compaction check) period, or `None`.
    pub(crate) snapshot_every: Option<Duration>,
    /// When a logged tenant takes a new image.
    pub(crate) compaction: crate::config::Compaction,
    /// The most bytes one segment may take; a batch may take half of it.
    pub(crate) segment_limit: u64,
    /// How long a cut waits for the callers a segment just answered (`RuntimeConfig::ship_linger`).
    pub(crate) ship_linger: Option<std::time::Duration>,
    /// The most segments of one tenant under way at once (`RuntimeConfig::segments_in_flight`;
    /// see [`Runtime::log_pipeline`]).
    segments_in_flight: usize,
    /// How segments are written (compressed or plain).
    pub(crate) segment_compression: leasehold::log::segment::SegmentCompression,
    /// With `Async`: the most bytes committed and not yet shipped before runs are refused.
    pub(crate) async_pending_limit: u64,
    /// How long unneeded images and segments stay.
    pub(crate) retain: Duration,
    /// Periodic local sweep period, or `None`.
    pub(crate) local_sweep_every: Option<Duration>,
    /// How long a handoff waits for admitted work.
    pub(crate) drain_timeout: Duration,
    /// The deadline of every store call (a put's grows with its payload).
    pub(crate) store_deadline: Duration,
    /// How often the supervisor runs a reconciliation pass, if at all.
    pub(crate) reconcile_every: Option<Duration>,
    /// The replica's ledger of puts of unknown outcome and what its passes need: it outlives
    /// every tenant actor (and the supervisor), so a put whose work was dropped is still
    /// reconciled (docs/guarantees.md, "Reconciling puts of unknown outcome").
    pub(crate) reconcile: crate::reconcile::Cx,
    /// How many tenants `close` hands off at a time.
    pub(crate) close_concurrency: usize,
    /// How many tenants may be open (or opening) at once (docs/guarantees.md, the descriptor
    /// ceiling).
    pub(crate) max_open: usize,
    /// SQLite options of every ledger.
    pub(crate) ledger: LedgerOptions,
    /// Where events go.
    pub(crate) events: EventSink,
    /// The typed messages this replica knows.
    pub(crate) messages: crate::message::Messages,
    /// How long a command's stored reply is kept.
    pub(crate) idempotency_window: Duration,
    /// The deadline of a message sent without one.
    pub(crate) ask_timeout: Duration,
    /// How long a tenant stays open idle before it is passivated; `None`: never, and
    /// `max_open` refuses.
    pub(crate) passivate_after: Option<Duration>,
    /// Read connections of queries open at once, replica-wide (each holds three descriptors:
    /// docs/guarantees.md, the descriptor ceiling).
    pub(crate) queries: Arc<tokio::sync::Semaphore>,
    /// The state root's lock: held while anything of this replica lives, so no second replica
    /// starts on the same root (docs/guarantees.md, assumption 5).
    lock: std::sync::Mutex<Option<RootLock>>,
    /// Deliberate bugs, for harness tests.
    #[cfg(feature = "fault-switches")]
    pub(crate) breakage: crate::config::Breakage,
}

impl Runtime {
    /// Validates `config`, takes the state root's lock and wraps the stores in deadlines.
    pub(crate) fn new(config: RuntimeConfig) -> Result<Arc<Self>, Error> {
        config.validate()?;
        let lock = paths::lock_state_root(
            &config.state_root,
            config.replica_id.as_str(),
            config.accept_shared_permissions,
        )?;
        let leases: SharedLeaseStore =
            Arc::new(Deadline::new(config.leases, config.store_deadline)?);
        let durable: SharedDurableStore =
            Arc::new(Deadline::new(config.durable, config.store_deadline)?);
        let events = EventSink::new(config.observer);
        let reconcile = crate::reconcile::Cx {
            replica: config.replica_id.clone(),
            leases: leases.clone(),
            durable: durable.clone(),
            clock: config.clock.clone(),
            events: events.clone(),
            put_lifetime: config.put_lifetime,
            reconciler: crate::reconcile::Reconciler::new(),
        };
        Ok(Arc::new(Self {
            replica: config.replica_id,
            state_root: config.state_root,
            tips: crate::tips::TipBatcher::new(
                leases.clone(),
                config.store_deadline,
                config.max_open,
            ),
            leases,
            durable,
            clock: config.clock,
            wall_clock: config.wall_clock,
            ttl: config.ttl,
            margin: config.margin,
            renew_every: config.renew_every,
            holders: Arc::new(crate::holders::Holders::new(
                config.transport.as_ref().and_then(|t| t.holder_cache),
            )),
            transport: config.transport,
            durability: config.durability,
            snapshot_every: config.snapshot_every,
            compaction: config.compaction,
            segment_limit: config.segment_limit,
            segments_in_flight: config.segments_in_flight,
            ship_linger: config.ship_linger,
            segment_compression: config.segment_compression,
            async_pending_limit: config.async_pending_limit,
            retain: config.retain,
            local_sweep_every: config.local_sweep_every,
            drain_timeout: config.drain_timeout,
            close_concurrency: config.close_concurrency,
            store_deadline: config.store_deadline,
            reconcile_every: config.reconcile_every,
            max_open: config.max_open,
            lock: std::sync::Mutex::new(Some(lock)),
            ledger: config.ledger,
            events,
            messages: config.messages,
            idempotency_window: config.idempotency_window,
            ask_timeout: config.ask_timeout,
            passivate_after: config.passivate_after,
            queries: Arc::new(tokio::sync::Semaphore::new(crate::config::QUERIES_AT_ONCE)),
            reconcile,
            #[cfg(feature = "fault-switches")]
            breakage: config.breakage,
        }))
    }

    /// Whether the lease check at commit is switched off (a deliberate bug).
    pub(crate) fn skips_commit_check(&self) -> bool {
        #[cfg(feature = "fault-switches")]
        return self.breakage.skip_commit_check;
        #[cfg(not(feature = "fault-switches"))]
        false
    }

    /// Whether a flush skips its final image (a deliberate bug).
    pub(crate) fn skips_final_image(&self) -> bool {
        #[cfg(feature = "fault-switches")]
        return self.breakage.skip_final_image;
        #[cfg(not(feature = "fault-switches"))]
        false
    }

    /// How many segments of one tenant's log may be under way at once: `segments_in_flight` on
    /// `Shipped`; one on `Async`, whose RPO in time counts the segment in flight and the next
    /// (docs/guarantees.md, the numbers) and whose cuts come once per period anyway.
    pub(crate) fn log_pipeline(&self) -> usize {
        match self.durability {
            crate::config::Durability::Async { .. } => 1,
            _ => self.segments_in_flight,
        }
    }

    /// Whether `Shipped` acknowledges before the tip moves (a deliberate bug).
    pub(crate) fn acks_before_tip(&self) -> bool {
        #[cfg(feature = "fault-switches")]
        return self.breakage.ack_before_tip;
        #[cfg(not(feature = "fault-switches"))]
        false
    }

    /// Whether a query answers before the log holds what it saw (a deliberate bug).
    pub(crate) fn replies_before_log(&self) -> bool {
        #[cfg(feature = "fault-switches")]
        return self.breakage.reply_before_log;
        #[cfg(not(feature = "fault-switches"))]
        false
    }

    /// Whether commands run without looking for their stored reply (a deliberate bug).
    pub(crate) fn ignores_idempotency_keys(&self) -> bool {
        #[cfg(feature = "fault-switches")]
        return self.breakage.ignore_idempotency_keys;
        #[cfg(not(feature = "fault-switches"))]
        false
    }

    /// Whether a passivation lets go without settling (a deliberate bug).
    pub(crate) fn skips_passivation_flush(&self) -> bool {
        #[cfg(feature = "fault-switches")]
        return self.breakage.passivate_unsettled;
        #[cfg(not(feature = "fault-switches"))]
        false
    }

    /// How long a caller waits for a tenant to leave (a handoff's or a passivation's flush that
    /// is under way): the drain and a few store calls.
    pub(crate) fn leave_limit(&self) -> Duration {
        self.drain_timeout + 4 * self.store_deadline
    }

    /// Lets go of the state root: a close that left nothing open and nothing erasing calls it,
    /// so a replica started on the same root right after `close()` finds it free.
    pub(crate) fn release_root(&self) {
        if let Ok(mut lock) = self.lock.lock() {
            lock.take();
        }
    }

    /// The replica's ledger of puts of unknown outcome.
    pub(crate) fn reconciler(&self) -> &crate::reconcile::Reconciler {
        &self.reconcile.reconciler
    }

    /// The holder's clock, now.
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The host's wall clock, now: milliseconds since the Unix epoch.
    pub(crate) fn wall_ms(&self) -> u64 {
        self.wall_clock.unix_ms()
    }
}
