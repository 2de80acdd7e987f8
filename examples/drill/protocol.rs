//! The line protocol between the driver and its replicas, and the timings both sides share.
//!
//! One JSON object per line. The driver writes [`Request`]s to a replica's stdin, each with an
//! id; the replica handles them concurrently and writes one [`Line::Reply`] per request, with
//! that id, in whatever order they finish. Between replies it writes what its runtime reports
//! ([`Line::Opened`], [`Line::Published`], [`Line::Released`], …) so the checker knows every
//! tenure. Every time is `CLOCK_MONOTONIC` in milliseconds ([`leasehold::SystemClock`]), which
//! every process on the host reads alike — never a lease store's clock (on PostgreSQL that is
//! the server's wall clock).
//!
//! ```text
//! driver → replica   {"id":7,"op":{"kind":"write","tenant":2,"key":"t2-c1-000042"}}
//! replica → driver   {"type":"reply","id":7,"answer":{"written":{"epoch":3,"run_at":…,"ack_at":…}}}
//! replica → driver   {"type":"published","tenant":2,"epoch":3,"seq":4,"taken_at":…}
//! ```

use std::time::Duration;

use leasehold::ids::IdError;
use leasehold::{Clock, LeaseKey, OrgId, SystemClock, TenantId, derive_tenant_id};
use serde::{Deserialize, Serialize};

/// The organization every drill tenant belongs to.
pub const ORG: &str = "drill";

/// Lease duration of every replica: short, so that faults play out in seconds.
pub const TTL: Duration = Duration::from_millis(2_000);
/// How long before the lease's end a holder stops acting.
pub const MARGIN: Duration = Duration::from_millis(500);
/// How often a replica renews its leases.
pub const RENEW_EVERY: Duration = Duration::from_millis(400);
/// How often a tenant with new writes publishes an image: the declared crash tail.
pub const SNAPSHOT_EVERY: Duration = Duration::from_millis(500);
/// How long a handoff waits for admitted work.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(3);
/// The deadline of every store call.
pub const STORE_DEADLINE: Duration = Duration::from_secs(1);
/// How long a tenant stays open with nothing to do before its replica passivates it: short, so
/// that the `passivate` fault (a tenant's clients fall silent) plays out in a second.
pub const PASSIVATE_AFTER: Duration = Duration::from_millis(800);
/// Every replica's `reconcile_every`: short, so that the erasure bound (docs/guarantees.md,
/// "the erasure bound": `put_lifetime` + `reconcile_every` + one sweep) fits in a run.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(1);
/// Every replica's `put_lifetime` unless a run's puts may live longer (`Tuning::put_lifetime`).
pub const PUT_LIFETIME: Duration = Duration::from_secs(3);

/// With a change log: how many segments since the newest image call for a new one (compaction,
/// checked every [`SNAPSHOT_EVERY`]); small, so that a short run takes images the store watcher
/// reads.
pub const COMPACT_SEGMENTS: u64 = 64;

/// How acknowledged writes are kept beyond a replica (`--durability`,
/// `leasehold_actors::Durability`); the checker's loss rules follow from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// RPO 0 (the runtime's default): acknowledged once the segment is put and the tip moved.
    Shipped,
    /// Acknowledged at the local commit, shipped every `--async-every-ms`.
    Async,
    /// No change log: safe beyond the replica once the next image is published.
    Images,
}

impl Mode {
    /// The mode as written on the command line.
    pub fn as_arg(self) -> &'static str {
        match self {
            Mode::Shipped => "shipped",
            Mode::Async => "async",
            Mode::Images => "images",
        }
    }

    /// The runtime's setting, `every` being the `Async` period.
    pub fn durability(self, every: Duration) -> leasehold_actors::Durability {
        match self {
            Mode::Shipped => leasehold_actors::Durability::Shipped,
            Mode::Async => leasehold_actors::Durability::Async { every },
            Mode::Images => leasehold_actors::Durability::Images,
        }
    }
}

/// Error code of a request for a tenant that is not open on the replica (it never ran).
pub const NOT_OPEN: &str = "DRILL_NOT_OPEN";
/// Error code of a request the replica could not parse or serve at all.
pub const BAD_REQUEST: &str = "DRILL_BAD_REQUEST";

/// The key tenant ids are derived with (`derive_tenant_id`), shared by driver and replicas.
const TENANT_KEY: &[u8] = b"leasehold-drill-tenant-key";
/// The issuer tenant ids are derived with.
const ISSUER: &str = "https://drill.invalid";

/// The host's monotonic clock, in milliseconds: the one clock of every drill timestamp.
pub fn now_ms() -> u64 {
    SystemClock.now_ms()
}

/// The organization of every tenant.
pub fn org() -> Result<OrgId, IdError> {
    OrgId::new(ORG)
}

/// The derived id of tenant number `index`.
pub fn tenant_id(index: u32) -> Result<TenantId, IdError> {
    derive_tenant_id(TENANT_KEY, ISSUER, &format!("tenant-{index}"))
}

/// The lease key of tenant number `index`.
pub fn lease_key(index: u32) -> Result<LeaseKey, IdError> {
    Ok(LeaseKey::new(&org()?, &tenant_id(index)?))
}

/// One request to a replica.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// Unique over the whole run; the reply carries it back.
    pub id: u64,
    /// What to do.
    pub op: Op,
}

/// What a request asks of a replica. Tenants are numbered `0..tenants`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Op {
    /// Append one event whose idempotency key is `key` to an open tenant.
    Write {
        /// The tenant.
        tenant: u32,
        /// The event's idempotency key, unique over the run.
        key: String,
    },
    /// Append one event whose idempotency key is `key` to an open tenant, in the same run as a
    /// blob of `mib` MiB of seeded bytes put in the host table `drill_blobs` (one of three rows,
    /// replaced in turn): a large batch, one segment of about that size.
    WriteBlob {
        /// The tenant.
        tenant: u32,
        /// The event's idempotency key, unique over the run.
        key: String,
        /// The blob's size in MiB.
        mib: u32,
    },
    /// Open a tenant here (acquire its lease, restore its head).
    Open {
        /// The tenant.
        tenant: u32,
    },
    /// Hand an open tenant off gracefully.
    Handoff {
        /// The tenant.
        tenant: u32,
    },
    /// Forget (erase) an open tenant.
    Forget {
        /// The tenant.
        tenant: u32,
    },
    /// Publish an image of an open tenant now.
    Snapshot {
        /// The tenant.
        tenant: u32,
    },
    /// Read every idempotency key of an open tenant's ledger.
    Read {
        /// The tenant.
        tenant: u32,
    },
    /// Switch a fault of this replica's durable store.
    Fault {
        /// Which one.
        fault: StoreFault,
    },
    /// Switch a fault of this replica's lease store.
    Lease {
        /// Which one.
        fault: LeaseFault,
    },
    /// Admit a ticket on an open tenant and keep it as session `session` (its runs are accepted
    /// while the tenant drains, docs/guarantees.md promise 6).
    Admit {
        /// The tenant.
        tenant: u32,
        /// The session's id, unique over the run.
        session: u64,
    },
    /// Append one event through the ticket of session `session` (answered like `Write`).
    SessionWrite {
        /// The tenant.
        tenant: u32,
        /// The session.
        session: u64,
        /// The event's idempotency key, unique over the run.
        key: String,
    },
    /// Drop the ticket of session `session`.
    Retire {
        /// The session.
        session: u64,
    },
    /// Run the idle check now (`Supervisor::passivate_idle_now`): every tenant idle for
    /// [`PASSIVATE_AFTER`] is passivated.
    Passivate,
    /// Close the replica: hand off every open tenant.
    Close,
    /// Send the command `drill.note` with idempotency key `key` to the tenant's address
    /// through this replica (`--clients addresses`): it runs wherever the tenant is
    /// (`crate::addresses`). Answered [`Answer::Sent`].
    Send {
        /// The tenant.
        tenant: u32,
        /// The note's key, also the command's idempotency key.
        key: String,
    },
    /// Send the query `drill.seen` for `key` to the tenant's address through this replica.
    /// Answered [`Answer::Seen`].
    Ask {
        /// The tenant.
        tenant: u32,
        /// The note's key.
        key: String,
    },
    /// Read every note (`drill_notes`) of an open tenant. Answered [`Answer::Notes`].
    ReadNotes {
        /// The tenant.
        tenant: u32,
    },
    /// Abandon an open tenant (stops like a crash, hands the lease back).
    Abandon {
        /// The tenant.
        tenant: u32,
    },
}

/// A fault of a replica's durable store ([`leasehold::testkit::FaultyStore`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreFault {
    /// Every call fails.
    Down,
    /// Puts do not return (the store deadline ends them).
    Hang,
    /// Every put waits this long first.
    Slow {
        /// The wait, in milliseconds.
        ms: u64,
    },
    /// Every image or manifest put writes this long after it was called, also when its caller
    /// gave up meanwhile ([`crate::late_puts::LatePuts`]; segments go at once).
    Late {
        /// The delay, in milliseconds.
        ms: u64,
    },
    /// No fault.
    Clear,
}

/// A fault of a replica's lease store ([`leasehold::testkit::FaultyLeaseStore`]): the replica
/// is cut off from the lease store while it keeps serving.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseFault {
    /// Every lease-store call fails (renewals too: the holder's term runs out).
    Down,
    /// Renewals wait (the store deadline ends them): the holder learns of no loss meanwhile.
    HoldRenewals,
    /// The replica's connection to the SQLite lease file is held idle (answered once no
    /// transaction of the replica is open on the file): the replica is about to be stopped, and
    /// a process stopped inside a write transaction stalls every replica of the file until it
    /// resumes. A no-op on PostgreSQL.
    HoldFile,
    /// The lease file's connection goes back to the replica (after `HoldFile`).
    ReleaseFile,
    /// No fault.
    Clear,
}

/// One line a replica writes to stdout.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Line {
    /// The replica's supervisor runs; requests may come.
    Ready {
        /// The replica's process id.
        pid: u32,
    },
    /// The answer to request `id`.
    Reply {
        /// The request's id.
        id: u64,
        /// What came of it.
        answer: Answer,
    },
    /// The runtime opened a tenant (reported by the runtime, whoever asked).
    Opened {
        /// The tenant.
        tenant: u32,
        /// The epoch of the new tenure.
        epoch: u64,
    },
    /// An image was published; every write acknowledged before `taken_at` is in it.
    Published {
        /// The tenant.
        tenant: u32,
        /// The tenure that published it.
        epoch: u64,
        /// Its number in that epoch.
        seq: u64,
        /// Holder-clock time just before the image was taken.
        taken_at: u64,
    },
    /// A tenure ended and its lease was handed back.
    Released {
        /// The tenant.
        tenant: u32,
        /// The tenure.
        epoch: u64,
        /// True only for a handoff whose final image was published.
        flushed: bool,
    },
    /// This replica's lease store answered an acquire of the tenant's lease at `epoch` (the
    /// store's word, read at the answer: `--transport` only, where the replica's router opens
    /// tenants the driver did not ask for).
    Acquired {
        /// The tenant.
        tenant: u32,
        /// The tenure acquired.
        epoch: u64,
        /// The replica's time when the answer came back.
        at: u64,
    },
    /// A tenure found its lease gone.
    Lost {
        /// The tenant.
        tenant: u32,
        /// The tenure.
        epoch: u64,
    },
    /// A tenant was erased up to `floor`.
    Forgotten {
        /// The tenant.
        tenant: u32,
        /// The floor raised.
        floor: u64,
    },
    /// A sweep of dead epochs finished (`objects`) or failed (`None`).
    Swept {
        /// The tenant.
        tenant: u32,
        /// How many objects went, or `None` if it failed.
        objects: Option<usize>,
    },
    /// After its close and the drop of its supervisor: what the process still holds.
    Resources {
        /// The counts.
        report: crate::history::Resources,
    },
    /// A segment of the change log could not be shipped: the tenure ends (reported for the
    /// timeline; the checker judges tenure ends from the stores and the driver's own acts).
    ShipFailed {
        /// The tenant.
        tenant: u32,
        /// The segment, `e<epoch>/log-<seq>`.
        segment: String,
        /// Why, as text.
        error: String,
    },
    /// An image could not be published.
    SnapshotFailed {
        /// The tenant.
        tenant: u32,
        /// Why, as text.
        error: String,
    },
}

/// What came of a request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// The write was acknowledged (committed under the lease).
    Written {
        /// The tenure that acknowledged it.
        epoch: u64,
        /// Time inside the run, before its commit: a lower bound of the commit.
        run_at: u64,
        /// Time the acknowledgement reached the replica's host code: an upper bound of it.
        ack_at: u64,
    },
    /// The tenant is open here.
    Opened {
        /// Its tenure's epoch.
        epoch: u64,
        /// Time just before the open was sent (the acquire came after, if this request made it).
        acquired_lo: u64,
        /// A time by which the lease was surely acquired: when the acquire's answer came back,
        /// or (on the host's clock, SQLite) the record's `expires_at - ttl` if earlier.
        acquired_hi: u64,
    },
    /// Done; `epoch` is the tenure it applied to, when there was one.
    Done {
        /// The tenure.
        epoch: Option<u64>,
    },
    /// The replica closed; these tenants could not be flushed.
    Closed {
        /// Their lease keys.
        unflushed: Vec<String>,
    },
    /// Every idempotency key of the ledger, oldest first.
    Keys {
        /// The tenure read.
        epoch: u64,
        /// The keys.
        keys: Vec<String>,
    },
    /// A command sent to an address ran and was acknowledged: where and under which tenure it
    /// ran, as the code that ran it wrote in its note (its replica's name, the epoch of that
    /// replica's latest acquire of the tenant by the lease store's answer).
    Sent {
        /// The tenure it ran under.
        epoch: u64,
        /// Time inside the command, before its commit (the running replica's clock: the host's
        /// `CLOCK_MONOTONIC`, as every drill time).
        run_at: u64,
        /// Time the reply reached the sending replica.
        ack_at: u64,
        /// The replica that ran it.
        ran_on: String,
    },
    /// What a query sent to an address answered, and when it was sent and answered.
    Seen {
        /// The note of the key, if the tenant holds one.
        note: Option<NoteRow>,
        /// The sending replica's time before it sent the query.
        sent_at: u64,
        /// Its time when the answer came.
        answered_at: u64,
    },
    /// Every note of a tenant's ledger, oldest first.
    Notes {
        /// The tenure read.
        epoch: u64,
        /// The notes.
        notes: Vec<NoteRow>,
    },
    /// A definite refusal or error, with the runtime's stable code.
    Failed {
        /// `LEASEHOLD_FENCED`, `LEASEHOLD_DRAINING`, [`NOT_OPEN`], …
        code: String,
        /// The error, as text.
        message: String,
        /// For `LEASEHOLD_LEASE_HELD`: the replica that holds the lease.
        owner: Option<String>,
    },
}

/// One row of `drill_notes`: a command `drill.note` that ran, as it recorded itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoteRow {
    /// The note's key (the command's idempotency key).
    pub key: String,
    /// The replica that ran it.
    pub replica: String,
    /// The epoch of that replica's tenure, as its lease store answered its acquire.
    pub epoch: u64,
    /// Time inside the command.
    pub run_at: u64,
}

/// Whether a write refused with `code` surely did not commit (and must never be read).
pub fn is_definite_refusal(code: &str) -> bool {
    matches!(
        code,
        "LEASEHOLD_FENCED"
            | "LEASEHOLD_DRAINING"
            | "LEASEHOLD_INVALID_ID"
            | "LEASEHOLD_MOVED"
            | "LEASEHOLD_UNAVAILABLE"
            | "LEASEHOLD_UNKNOWN_MESSAGE"
            | "LEASEHOLD_BAD_MESSAGE"
            | NOT_OPEN
            | BAD_REQUEST
    )
}
