//! The runtime's options, their defaults, and the checks that refuse absurd values before
//! anything starts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leasehold::clock::{SharedClock, SharedWallClock};
use leasehold::durable::SharedDurableStore;
use leasehold::lease::SharedLeaseStore;
use leasehold::ledger::LedgerOptions;
use leasehold::{Error, ReplicaId, SystemClock, SystemWallClock};

use crate::events::Observer;

mod builder;
mod env;

pub use builder::RuntimeConfigBuilder;
pub use env::{ENV_VARS, EnvConfig, EnvVar, parse_bytes, parse_duration};

/// The longest duration any option accepts (one day): anything longer is a unit mistake.
pub const MAX_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// How an acknowledged write is kept beyond this replica (docs/guarantees.md, the change log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The default, RPO 0: a batch is acknowledged only once its segment of the change log is
    /// in the durable store **and** the lease store moved the tenant's log tip past it. One
    /// segment is in flight per tenant; runs that arrive meanwhile form the next one.
    Shipped,
    /// Acknowledged at the local commit; the changes are shipped every `every` (RPO about
    /// `every`, plus one store deadline).
    Async {
        /// How often the changes of the tenant are shipped.
        every: Duration,
    },
    /// No change log: acknowledged at the local commit, safe beyond the replica only once the
    /// next image is published (`snapshot_every`, and the final image of a handoff). The
    /// runtime before the change log; the cheapest writes, the longest RPO.
    Images,
}

impl Durability {
    /// `Async` with the default period of 1 s.
    pub const ASYNC: Durability = Durability::Async {
        every: Duration::from_secs(1),
    };

    /// Whether the tenant keeps a change log (`Shipped` and `Async`).
    pub fn logged(self) -> bool {
        !matches!(self, Durability::Images)
    }
}

/// When a tenant with a change log takes a new image in the background, so that a restore
/// applies a bounded number of segments (docs/guarantees.md, the storage bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compaction {
    /// After this many segments since the newest image. Default 1,000.
    pub segments: u64,
    /// After this many bytes of segments since the newest image. Default 64 MiB.
    pub bytes: u64,
}

impl Default for Compaction {
    fn default() -> Self {
        Self {
            segments: 1_000,
            bytes: 64 << 20,
        }
    }
}

impl Compaction {
    /// Whether `segments` segments of `bytes` bytes since the newest image call for a new one.
    pub fn due(&self, segments: u64, bytes: u64) -> bool {
        segments > 0 && (segments >= self.segments || bytes >= self.bytes)
    }

    /// Whether a shipped segment, which brought the log since the newest image to `segments`
    /// segments of `bytes` bytes, calls for an image now, given that one was last asked for at
    /// `asked` (`None`: never since the newest image). Due, and a whole compaction's worth
    /// (segments or bytes) past the last ask: so a tenant whose images keep failing asks at most
    /// once per compaction's worth of shipped segments (and at every `snapshot_every`).
    pub fn due_again(&self, asked: Option<(u64, u64)>, segments: u64, bytes: u64) -> bool {
        if !self.due(segments, bytes) {
            return false;
        }
        match asked {
            Some((s, b)) if s <= segments => {
                segments >= s.saturating_add(self.segments) || bytes >= b.saturating_add(self.bytes)
            }
            _ => true,
        }
    }
}

/// The smallest [`RuntimeConfig::segment_limit`]: 64 KiB. A batch may take half of it, which
/// with the default 4 KiB pages is a handful of pages: small enough for tests to cut many
/// segments and refuse large batches cheaply, large enough for an ordinary write.
pub const MIN_SEGMENT_LIMIT: u64 = 64 << 10;

/// Everything a [`crate::Supervisor`] needs. Build it with [`RuntimeConfig::new`], which fills in
/// the defaults, then change fields; or with [`RuntimeConfig::builder`]; or from `LEASEHOLD_*`
/// variables with [`RuntimeConfig::from_env`]. [`RuntimeConfig::validate`] runs at start.
#[derive(Clone)]
pub struct RuntimeConfig {
    /// This replica's name, written into every lease it holds.
    pub replica_id: ReplicaId,
    /// Where this replica keeps local ledgers: `<state_root>/orgs/<org>/tenants/<tenant>`.
    pub state_root: PathBuf,
    /// The lease store (SQLite on one host, PostgreSQL for a fleet).
    pub leases: SharedLeaseStore,
    /// The durable store for images (a directory, S3).
    pub durable: SharedDurableStore,
    /// The holder's monotonic clock. Default: the system's `CLOCK_MONOTONIC`.
    pub clock: SharedClock,
    /// The host's wall clock: the time stamped on segments (a point-in-time restore by time
    /// reads it; stamps are forced to rise along the log, so a host whose clock lags never
    /// stamps a later write before an earlier one) and on images, and retention's `now`.
    /// Default: the system's.
    pub wall_clock: SharedWallClock,
    /// How long a lease runs per acquire or renew. Default 30 s.
    pub ttl: Duration,
    /// How long before its end the holder stops acting on a lease. Default 5 s.
    pub margin: Duration,
    /// How often the lease actor renews every lease of the replica; `None` renews only when
    /// asked (`Supervisor::renew_now`), for tests with a manual clock. Default 10 s.
    pub renew_every: Option<Duration>,
    /// How an acknowledged write is kept beyond this replica. Default [`Durability::Shipped`]
    /// (RPO 0).
    pub durability: Durability,
    /// With `Images`: how often a tenant with new writes publishes an image (the crash RPO).
    /// With a change log: how often a tenant checks whether [`RuntimeConfig::compaction`] calls
    /// for a new image. `None`: only on request (and, with `Images`, at handoff). Default 60 s.
    pub snapshot_every: Option<Duration>,
    /// When a tenant with a change log takes a new image. Default: 1,000 segments or 64 MiB.
    pub compaction: Compaction,
    /// The most bytes one segment of the change log may take (`Shipped` and `Async`). A run whose
    /// pages would take more than half of it is refused before `COMMIT` with
    /// `Error::BatchTooLarge`, a batch of runs is committed once it reaches half of it, and
    /// committed batches waiting to ship are cut into as many segments as they need, each of
    /// whole batches — so every batch fits one segment and a restore never stops inside one
    /// (docs/guarantees.md, "Limits"). Between [`MIN_SEGMENT_LIMIT`] and the codec's limit
    /// (`leasehold::codec::LIMIT`, 1 GiB), which is the default.
    pub segment_limit: u64,
    /// How segments are written: plain (format 1, the default) or compressed by zstd (format 2:
    /// 3.5–7× fewer bytes stored and sent, the stored bytes never more than the plain
    /// encoding's, but compressed on the tenant's thread today, ~170 µs per 80 KB segment:
    /// docs/benchmarks.md, "Bytes and requests"). Both are always read; `segment_limit` bounds
    /// the plain size either way (docs/guarantees.md, "Limits").
    pub segment_compression: leasehold::log::segment::SegmentCompression,
    /// The most segments of one tenant's change log under way at once (`Shipped` and `Async`).
    /// Their puts overlap; their tip moves go strictly in log order, each asked only once the
    /// one before it is confirmed, so the tip never skips a segment (docs/guarantees.md,
    /// "Pipelined segments"). A batch committed while this many are in flight waits for the
    /// oldest to come back. 1 ships one segment at a time; `Async` always does (its RPO counts
    /// one segment in flight). Between 1 and 64; default 1: on a local disk the puts contend
    /// for its fsyncs and smaller segments only cost more puts; raise it for a store far away
    /// (S3: with 32 callers and 20 ms per put, 4 gave 1.5× the writes for 2.4× the `PUT`s;
    /// docs/benchmarks.md, "Pipelined segments").
    pub segments_in_flight: usize,
    /// How long, at most, the next segment waits to be cut after a segment answered two or more
    /// callers (`Shipped`): callers that write again at once go in it instead of the one after,
    /// so each segment carries every waiting caller, not half of them. The pause ends as soon
    /// as that many callers' runs have arrived; a lone caller never waits; a flush never does.
    /// `None`: cut at once. At most 100 ms; default 1 ms: callers whose messages are forwarded
    /// from another replica come back later than local ones, and at 500 µs their segments were
    /// a quarter smaller; a load whose callers do not write again at once pays up to the pause
    /// (0.26 ms at p50 measured with two callers pausing 2 ms): 500 µs or `None` suits it
    /// (docs/benchmarks.md, "`ship_linger` for forwarded callers").
    pub ship_linger: Option<Duration>,
    /// With `Async`: the most bytes a tenant lets wait committed and not yet in the change log
    /// (pending and in flight). A run is refused with `Error::LogBehind` while this much waits,
    /// so a crash loses at most this plus one batch (docs/guarantees.md, the numbers). Default
    /// 64 MiB: eight seconds of the slowest store a deadline allows for.
    pub async_pending_limit: u64,
    /// How long images and segments stay restorable (point-in-time restore) after a newer image
    /// made them unneeded for the current state; older ones are deleted. Default 24 h.
    pub retain: Duration,
    /// How often the replica drops local copies of tenants forgotten elsewhere (see
    /// `Supervisor::sweep_local`); `None` only at start, at tenure ends and at `close`. Default 60 s.
    pub local_sweep_every: Option<Duration>,
    /// How long a handoff waits for admitted work before it fails with `DrainTimeout`. Default 120 s.
    pub drain_timeout: Duration,
    /// How many tenants `close` hands off at a time. Default 8.
    pub close_concurrency: usize,
    /// How many tenants may be open (or opening) on this replica at once; an open beyond it is
    /// refused with `Error::OpenLimit`. Default: [`default_max_open`] of the process's
    /// descriptor limit (`RLIMIT_NOFILE`) when the configuration is made, so that the flushes of
    /// `close`, snapshots and store calls always find descriptors (docs/guarantees.md, the
    /// descriptor ceiling).
    pub max_open: usize,
    /// The deadline of every lease-store and durable-store call. Default 10 s.
    pub store_deadline: Duration,
    /// The longest a durable-store put may still land after it was sent: the backend's own
    /// bound on one put (an `S3Store`'s `S3Limits::op_timeout`, 120 s by default; a directory
    /// store's put ends with its process). A put of unknown outcome is judged only once it has
    /// settled, an orphan a crashed process left only once seen for this long, and a forgotten
    /// tenant is swept once more this long after its forget (docs/guarantees.md, "the erasure
    /// bound"). Default 120 s; at least `store_deadline`. Set it to the store's own bound.
    pub put_lifetime: Duration,
    /// How often the replica reconciles its puts of unknown outcome, looks again at orphan
    /// candidates, and sweeps the forgotten tenants whose erasure is due (whoever forgot them);
    /// `None`: only on `Supervisor::reconcile_now`, when a put it let go of was answered, and
    /// at `close`. Default 30 s.
    pub reconcile_every: Option<Duration>,
    /// How many arbiters (threads) tenants are placed on. Default: the number of cores.
    pub arbiters: usize,
    /// SQLite options of every ledger.
    pub ledger: LedgerOptions,
    /// Who hears the runtime's events, besides `tracing`. Default: nobody.
    pub observer: Option<Arc<dyn Observer>>,
    /// Start on a state root that lets the group or others in (refused by default with
    /// `Error::NotPrivate`: every tenant's ledger lives below it; docs/operations.md, "File
    /// permissions"). What the runtime creates is private (0700, 0600) either way. Default false.
    pub accept_shared_permissions: bool,
    /// The typed messages this replica knows (`Supervisor::send`): every replica of a fleet
    /// registers the same set. Default: none.
    pub messages: crate::message::Messages,
    /// How long the reply of a command sent with an idempotency key is kept: a second delivery
    /// of the key within this window returns the stored reply without running; a retry later
    /// than it may run again (docs/guarantees.md, promise 11). Pruned by age, judged by
    /// `wall_clock`. Default 24 h.
    pub idempotency_window: Duration,
    /// The deadline of `Supervisor::send` (and of a request given none): the longest a caller
    /// waits for a reply, an open, a handoff under way and the output gate included. Default 30 s.
    pub ask_timeout: Duration,
    /// How this replica takes messages forwarded by the other replicas of its fleet and sends
    /// its own: the transport's bind address, fleet key, limits, TLS. `None` (the default): no
    /// transport, the replica reaches no other and advertises nothing. The lease store must
    /// keep replica records (SQLite, PostgreSQL).
    pub transport: Option<crate::transport::TransportConfig>,
    /// How long a tenant stays open with nothing to do before it is passivated: its log settled
    /// (or, with `Images`, its final image published), its lease released, its connection,
    /// actor and local copy freed. The next message to its address, or call on a handle the
    /// host kept, reopens it (docs/guarantees.md, promise 12). With passivation on, an open
    /// that meets `max_open` passivates the least recently used idle tenant instead of being
    /// refused (refused with `Error::OpenLimit` only when none is idle). `None`: tenants stay
    /// open until handed off, and `max_open` refuses. Default 60 s.
    pub passivate_after: Option<Duration>,
    /// Deliberate bugs, to prove that the test harnesses catch a broken promise.
    #[cfg(feature = "fault-switches")]
    pub breakage: Breakage,
}

/// Deliberate bugs (feature `fault-switches`): each breaks one promise on purpose so that a
/// test can show the drill's checker and the simulation's model catch it. Never in production.
#[cfg(feature = "fault-switches")]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Breakage {
    /// Commit and acknowledge without checking the lease (breaks promise 1).
    pub skip_commit_check: bool,
    /// Finish a handoff without publishing the final image, yet report it flushed (breaks
    /// promise 2).
    pub skip_final_image: bool,
    /// With `Shipped`, acknowledge a batch at its local commit, before its segment is shipped
    /// and the tip moved (breaks the RPO 0 of the change log).
    pub ack_before_tip: bool,
    /// Answer a query as soon as it has read, without waiting for the log to hold what it saw
    /// (breaks the output gate, promise 11).
    pub reply_before_log: bool,
    /// Run a command sent with an idempotency key without looking for its stored reply
    /// (breaks exactly-once delivery, promise 11).
    pub ignore_idempotency_keys: bool,
    /// Passivate without settling the change log or publishing the final image: what was
    /// acknowledged and not yet shipped (`Async`) or imaged (`Images`) is let go with the local
    /// copy (breaks promise 12).
    pub passivate_unsettled: bool,
}

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("replica_id", &self.replica_id)
            .field("state_root", &self.state_root)
            .field("ttl", &self.ttl)
            .field("margin", &self.margin)
            .field("renew_every", &self.renew_every)
            .field("durability", &self.durability)
            .field("snapshot_every", &self.snapshot_every)
            .field("compaction", &self.compaction)
            .field("segment_limit", &self.segment_limit)
            .field("segment_compression", &self.segment_compression)
            .field("segments_in_flight", &self.segments_in_flight)
            .field("ship_linger", &self.ship_linger)
            .field("async_pending_limit", &self.async_pending_limit)
            .field("retain", &self.retain)
            .field("local_sweep_every", &self.local_sweep_every)
            .field("drain_timeout", &self.drain_timeout)
            .field("close_concurrency", &self.close_concurrency)
            .field("max_open", &self.max_open)
            .field("store_deadline", &self.store_deadline)
            .field("put_lifetime", &self.put_lifetime)
            .field("reconcile_every", &self.reconcile_every)
            .field("arbiters", &self.arbiters)
            .field("accept_shared_permissions", &self.accept_shared_permissions)
            .field("messages", &self.messages)
            .field("idempotency_window", &self.idempotency_window)
            .field("ask_timeout", &self.ask_timeout)
            .field("transport", &self.transport)
            .field("passivate_after", &self.passivate_after)
            .finish_non_exhaustive()
    }
}

impl RuntimeConfig {
    /// A configuration with every default filled in.
    pub fn new(
        replica_id: ReplicaId,
        state_root: impl Into<PathBuf>,
        leases: SharedLeaseStore,
        durable: SharedDurableStore,
    ) -> Self {
        Self {
            replica_id,
            state_root: state_root.into(),
            leases,
            durable,
            clock: Arc::new(SystemClock),
            wall_clock: Arc::new(SystemWallClock),
            ttl: Duration::from_secs(30),
            margin: Duration::from_secs(5),
            renew_every: Some(Duration::from_secs(10)),
            durability: Durability::Shipped,
            snapshot_every: Some(Duration::from_secs(60)),
            compaction: Compaction::default(),
            segment_limit: leasehold::codec::LIMIT as u64,
            segment_compression: leasehold::log::segment::SegmentCompression::Off,
            segments_in_flight: 1,
            ship_linger: Some(Duration::from_millis(1)),
            async_pending_limit: 64 << 20,
            retain: Duration::from_secs(24 * 60 * 60),
            local_sweep_every: Some(Duration::from_secs(60)),
            drain_timeout: Duration::from_secs(120),
            close_concurrency: 8,
            max_open: default_max_open(leasehold::paths::open_files_limit(), 8),
            store_deadline: Duration::from_secs(10),
            put_lifetime: Duration::from_secs(120),
            reconcile_every: Some(Duration::from_secs(30)),
            arbiters: std::thread::available_parallelism().map_or(2, |n| n.get()),
            ledger: LedgerOptions::default(),
            observer: None,
            accept_shared_permissions: false,
            messages: crate::message::Messages::new(),
            idempotency_window: Duration::from_secs(24 * 60 * 60),
            ask_timeout: Duration::from_secs(30),
            transport: None,
            passivate_after: Some(Duration::from_secs(60)),
            #[cfg(feature = "fault-switches")]
            breakage: Breakage::default(),
        }
    }

    /// Refuses zero, negative-in-effect and absurd values with [`Error::InvalidOption`].
    pub fn validate(&self) -> Result<(), Error> {
        positive("ttl", self.ttl)?;
        if self.margin.is_zero() {
            // No margin means acting up to the last instant of a lease another replica may
            // take at that same instant: the clocks' drift must have room (promise 1).
            return invalid("margin", "must be longer than zero");
        }
        if self.margin >= self.ttl {
            return invalid(
                "margin",
                "must be shorter than ttl, or the lease never holds",
            );
        }
        if let Some(every) = self.renew_every {
            positive("renew_every", every)?;
            if every >= self.ttl - self.margin {
                return invalid(
                    "renew_every",
                    "must be shorter than ttl - margin, or leases lapse between renewals",
                );
            }
        }
        if let Some(every) = self.snapshot_every {
            positive("snapshot_every", every)?;
        }
        if let Durability::Async { every } = self.durability {
            positive("durability", every)?;
        }
        if self.compaction.segments == 0 || self.compaction.bytes == 0 {
            return invalid("compaction", "segments and bytes must be at least 1");
        }
        if !(MIN_SEGMENT_LIMIT..=leasehold::codec::LIMIT as u64).contains(&self.segment_limit) {
            return invalid(
                "segment_limit",
                "must be between 64 KiB and the codec's limit of 1 GiB",
            );
        }
        if let Some(linger) = self.ship_linger {
            positive("ship_linger", linger)?;
            if linger > Duration::from_millis(100) {
                return invalid("ship_linger", "must be at most 100 ms");
            }
        }
        if !(1..=64).contains(&self.segments_in_flight) {
            return invalid("segments_in_flight", "must be between 1 and 64");
        }
        if self.async_pending_limit == 0 {
            return invalid("async_pending_limit", "must be at least 1 byte");
        }
        positive("retain", self.retain)?;
        if let Some(every) = self.local_sweep_every {
            positive("local_sweep_every", every)?;
        }
        positive("drain_timeout", self.drain_timeout)?;
        positive("store_deadline", self.store_deadline)?;
        positive("put_lifetime", self.put_lifetime)?;
        if self.put_lifetime < self.store_deadline {
            return invalid(
                "put_lifetime",
                "must be at least store_deadline: a put lives at least as long as its caller waits",
            );
        }
        if let Some(every) = self.reconcile_every {
            positive("reconcile_every", every)?;
        }
        positive("idempotency_window", self.idempotency_window)?;
        positive("ask_timeout", self.ask_timeout)?;
        if let Some(after) = self.passivate_after {
            positive("passivate_after", after)?;
        }
        if !(1..=10_000).contains(&self.close_concurrency) {
            return invalid("close_concurrency", "must be between 1 and 10000");
        }
        if !(1..=256).contains(&self.arbiters) {
            return invalid("arbiters", "must be between 1 and 256");
        }
        if self.max_open == 0 {
            return invalid("max_open", "must be at least 1");
        }
        if let Some(transport) = &self.transport {
            transport.validate()?;
        }
        if self.state_root.as_os_str().is_empty() {
            return invalid("state_root", "must not be empty");
        }
        if self
            .state_root
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            // The containment checks of every destructive local call refuse it too; refused
            // here, nothing starts on a root that no delete could ever clean.
            return invalid("state_root", "must not have a '..' component");
        }
        Ok(())
    }
}

/// Descriptors one open tenant holds: its ledger, WAL and shared-memory files (measured; see
/// docs/guarantees.md, the descriptor ceiling).
pub const FDS_PER_TENANT: u64 = 3;

/// Descriptors one flush or snapshot needs while it runs (a second connection to the ledger
/// with its WAL and shared memory, the image file being written, the upload's file; measured,
/// with room to spare).
pub const FDS_PER_FLUSH: u64 = 8;

/// Descriptors the rest of the process may need: standard streams, the runtime's threads and
/// event queues, the lease store's connections, the durable store's calls, the host's own.
pub const FDS_BASE_RESERVE: u64 = 128;

/// How many queries (`TenantQuery`) of a replica read at once, each on a read connection of its
/// own (3 descriptors, as a tenant's ledger); more wait for a slot, within their deadline.
pub const QUERIES_AT_ONCE: usize = 16;

/// Descriptors the read connections of queries may hold at once.
pub const FDS_QUERY_RESERVE: u64 = QUERIES_AT_ONCE as u64 * FDS_PER_TENANT;

/// The largest number of open tenants that still leaves `close_concurrency` flushes (and as many
/// snapshots) and [`QUERIES_AT_ONCE`] queries their descriptors under a descriptor limit of `limit` (`None`: unlimited, which
/// caps at 1,000,000). At least 1.
pub fn default_max_open(limit: Option<u64>, close_concurrency: usize) -> usize {
    let limit = limit.unwrap_or(u64::MAX);
    let flushing = FDS_PER_FLUSH.saturating_mul(2 * close_concurrency as u64);
    let reserve = FDS_BASE_RESERVE.saturating_add(FDS_QUERY_RESERVE);
    let usable = limit.saturating_sub(reserve.saturating_add(flushing));
    let tenants = (usable / FDS_PER_TENANT).clamp(1, 1_000_000);
    usize::try_from(tenants).unwrap_or(1_000_000)
}

fn invalid(name: &'static str, reason: &str) -> Result<(), Error> {
    Err(Error::InvalidOption {
        name,
        reason: reason.to_string(),
    })
}

fn positive(name: &'static str, d: Duration) -> Result<(), Error> {
    if d.is_zero() {
        invalid(name, "must be longer than zero")
    } else if d > MAX_DURATION {
        invalid(name, "must be at most one day")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold::durable::dir::DirStore;
    use leasehold::lease::sqlite::SqliteLeaseStore;

    fn config(dir: &std::path::Path) -> RuntimeConfig {
        RuntimeConfig::new(
            ReplicaId::new("r").unwrap(),
            dir.join("state"),
            Arc::new(SqliteLeaseStore::open(&dir.join("leases.db")).unwrap()),
            Arc::new(DirStore::open(&dir.join("durable")).unwrap()),
        )
    }

    fn refused(c: &RuntimeConfig) -> &'static str {
        match c.validate() {
            Err(Error::InvalidOption { name, .. }) => name,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_defaults_are_valid() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(config(dir.path()).validate(), Ok(()));
    }

    #[test]
    fn zero_absurd_and_inconsistent_options_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let day = MAX_DURATION + Duration::from_millis(1);
        type Breaks = Box<dyn Fn(&mut RuntimeConfig)>;
        let cases: Vec<(&str, Breaks)> = vec![
            ("ttl", Box::new(|c| c.ttl = Duration::ZERO)),
            ("ttl", Box::new(move |c| c.ttl = day)),
            ("margin", Box::new(|c| c.margin = c.ttl)),
            (
                "renew_every",
                Box::new(|c| c.renew_every = Some(Duration::ZERO)),
            ),
            (
                "renew_every",
                Box::new(|c| c.renew_every = Some(c.ttl - c.margin)),
            ),
            (
                "snapshot_every",
                Box::new(|c| c.snapshot_every = Some(Duration::ZERO)),
            ),
            (
                "drain_timeout",
                Box::new(|c| c.drain_timeout = Duration::ZERO),
            ),
            ("drain_timeout", Box::new(move |c| c.drain_timeout = day)),
            (
                "store_deadline",
                Box::new(|c| c.store_deadline = Duration::ZERO),
            ),
            ("close_concurrency", Box::new(|c| c.close_concurrency = 0)),
            (
                "close_concurrency",
                Box::new(|c| c.close_concurrency = 10_001),
            ),
            ("segments_in_flight", Box::new(|c| c.segments_in_flight = 0)),
            (
                "ship_linger",
                Box::new(|c| c.ship_linger = Some(Duration::ZERO)),
            ),
            (
                "ship_linger",
                Box::new(|c| c.ship_linger = Some(Duration::from_millis(101))),
            ),
            (
                "segments_in_flight",
                Box::new(|c| c.segments_in_flight = 65),
            ),
            ("arbiters", Box::new(|c| c.arbiters = 0)),
            ("arbiters", Box::new(|c| c.arbiters = 257)),
            ("state_root", Box::new(|c| c.state_root = PathBuf::new())),
            ("max_open", Box::new(|c| c.max_open = 0)),
            (
                "durability",
                Box::new(|c| {
                    c.durability = Durability::Async {
                        every: Duration::ZERO,
                    }
                }),
            ),
            ("compaction", Box::new(|c| c.compaction.segments = 0)),
            ("retain", Box::new(|c| c.retain = Duration::ZERO)),
            (
                "segment_limit",
                Box::new(|c| c.segment_limit = MIN_SEGMENT_LIMIT - 1),
            ),
            (
                "segment_limit",
                Box::new(|c| c.segment_limit = leasehold::codec::LIMIT as u64 + 1),
            ),
            (
                "async_pending_limit",
                Box::new(|c| c.async_pending_limit = 0),
            ),
            (
                "put_lifetime",
                Box::new(|c| c.put_lifetime = c.store_deadline / 2),
            ),
            (
                "reconcile_every",
                Box::new(|c| c.reconcile_every = Some(Duration::ZERO)),
            ),
            (
                "idempotency_window",
                Box::new(|c| c.idempotency_window = Duration::ZERO),
            ),
            (
                "idempotency_window",
                Box::new(move |c| c.idempotency_window = day),
            ),
            ("ask_timeout", Box::new(|c| c.ask_timeout = Duration::ZERO)),
            (
                "passivate_after",
                Box::new(|c| c.passivate_after = Some(Duration::ZERO)),
            ),
            (
                "passivate_after",
                Box::new(move |c| c.passivate_after = Some(day)),
            ),
        ];
        for (name, break_it) in cases {
            let mut c = config(dir.path());
            break_it(&mut c);
            assert_eq!(refused(&c), name);
        }
    }

    /// Triage (docs/guarantees.md): a zero margin and a state root with `..` are refused by name.
    #[test]
    fn triage_a_zero_margin_and_a_state_root_with_dotdot_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(dir.path());
        c.margin = Duration::ZERO;
        assert_eq!(refused(&c), "margin");
        let mut c = config(dir.path());
        c.state_root = dir.path().join("a").join("..").join("state");
        assert_eq!(refused(&c), "state_root");
    }

    #[test]
    fn the_default_max_open_keeps_a_reserve_for_flushes() {
        assert_eq!(
            default_max_open(Some(20_000), 8),
            (20_000 - 128 - 48 - 128) / 3
        );
        assert_eq!(default_max_open(Some(10), 8), 1, "never zero");
        assert_eq!(default_max_open(None, 8), 1_000_000);
    }

    #[test]
    fn compaction_is_asked_again_only_a_whole_compaction_later() {
        let c = Compaction {
            segments: 10,
            bytes: 100,
        };
        assert!(!c.due_again(None, 3, 99), "not due");
        assert!(c.due_again(None, 3, 100), "due by bytes, never asked");
        assert!(c.due_again(None, 10, 5), "due by count, never asked");
        let asked = Some((3, 100));
        assert!(!c.due_again(asked, 4, 150), "asked already");
        assert!(c.due_again(asked, 4, 200), "a compaction's bytes later");
        assert!(c.due_again(asked, 13, 150), "a compaction's segments later");
        assert!(c.due_again(Some((50, 900)), 4, 100), "an image came since");
    }

    #[test]
    fn manual_renewals_and_no_periodic_snapshots_are_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = config(dir.path());
        c.renew_every = None;
        c.snapshot_every = None;
        c.passivate_after = None;
        assert_eq!(c.validate(), Ok(()));
    }
}
