//! The replica role: one process embedding a [`Supervisor`] on the run's stores (by default a
//! SQLite lease file and a durable directory shared with the other replicas; with
//! `--backend postgres-s3` a PostgreSQL table and an S3 prefix, see [`crate::backend`]) and a
//! state root of its own. Its lease store is wrapped in [`AcquireTimes`] and a
//! [`FaultyLeaseStore`], its durable store in a [`FaultyStore`]; the driver switches the faults.
//!
//! ```text
//!  stdin ── Request lines ──> one task per request ──> Supervisor / TenantRef
//!  stdout <── Reply lines <── writer thread <──────────┤
//!                                         Observer ────┘  (Opened, Published, Released, Lost, …)
//! ```
//!
//! Requests are served concurrently, so replies may come out of order. The process ends when
//! stdin closes (the driver is done or gone) or after `--lifetime-secs`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use leasehold::lease::SharedLeaseStore;
use leasehold::lease::sqlite::{ConnectionHold, SqliteLeaseStore};
use leasehold::ledger::NewEvent;
use leasehold::testkit::{FaultyLeaseStore, FaultyStore};
use leasehold::{Error, LeaseStore, OrgId, ReplicaId, TenantId};
use leasehold_actors::{Breakage, RuntimeConfig, Supervisor, TenantRef};
use tokio::io::AsyncBufReadExt;

use crate::acquire_times::AcquireTimes;
use crate::backend::{self, Backend};
use crate::cluster::BoxError;
use crate::protocol::{self, Answer, LeaseFault, Line, NOT_OPEN, Op, Request, StoreFault, now_ms};

mod observe;

use observe::Forwarder;
pub use observe::Output;

/// How the driver starts a replica (`drill replica …`).
#[derive(Debug, Clone, clap::Args)]
pub struct ReplicaArgs {
    /// The run directory: on `sqlite-dir`, `leases.db` and `durable/` are shared by every
    /// replica.
    #[arg(long)]
    pub run_dir: PathBuf,
    /// Where the run keeps its leases and images.
    #[arg(long, value_enum, default_value_t = Backend::SqliteDir)]
    pub backend: Backend,
    /// The run's name: its PostgreSQL table and S3 prefix on `postgres-s3`.
    #[arg(long, default_value = "drill")]
    pub run_name: String,
    /// This replica's name (its `replica_id`, the lease owner).
    #[arg(long)]
    pub name: String,
    /// This replica's own state root.
    #[arg(long)]
    pub root: PathBuf,
    /// How many tenants the run has (numbered from 0).
    #[arg(long)]
    pub tenants: u32,
    /// Deliberate bugs to switch on (`skip-commit-check`, `skip-final-image`, `ack-before-tip`,
    /// `passivate-unsettled`).
    #[arg(long = "break", value_enum)]
    pub breakage: Vec<crate::BreakSwitch>,
    /// How acknowledged writes are kept beyond this replica.
    #[arg(long, value_enum, default_value_t = protocol::Mode::Shipped)]
    pub durability: protocol::Mode,
    /// With `--durability async`: how often changes are shipped, in ms.
    #[arg(long, default_value_t = 1_000)]
    pub async_every_ms: u64,
    /// The process ends after this long whatever happens.
    #[arg(long, default_value_t = 3_600)]
    pub lifetime_secs: u64,
    /// Retention, compaction and slow backends, as the driver was given them.
    #[command(flatten)]
    pub tuning: crate::tuning::Tuning,
    /// Join the run's fleet: a transport on loopback and the typed messages of
    /// `--clients addresses` (`crate::addresses`); report every acquire (`acquired` lines).
    #[arg(long)]
    pub transport: bool,
    /// Passivate tenants idle for `protocol::PASSIVATE_AFTER` (runs with the `passivate` fault);
    /// off otherwise, so that a paused or cut-off replica's tenants are not let go as idle.
    #[arg(long)]
    pub passivate: bool,
}

/// The replica's state, shared by the tasks serving requests.
struct Replica {
    /// The runtime.
    supervisor: Supervisor,
    /// The lease store behind the faults, to read the record of a tenure just acquired.
    leases: SharedLeaseStore,
    /// When each acquire of this replica returned.
    acquired: AcquireTimes,
    /// Whether a lease record's `expires_at_ms` is on the drill's clock (not on PostgreSQL).
    records_use_host_clock: bool,
    /// The lease store's fault switches.
    lease_faults: FaultyLeaseStore,
    /// The SQLite lease file's handle (`None` on PostgreSQL), and its connection while held.
    lease_file: Option<SqliteLeaseStore>,
    file_hold: std::cell::RefCell<Option<ConnectionHold>>,
    /// The durable store's fault switches.
    store: FaultyStore,
    /// Beneath them, the switch of puts that land late.
    late: crate::late_puts::LatePuts,
    /// Stdout.
    out: Output,
    /// The organization.
    org: OrgId,
    /// Tenant ids by number.
    tenants: Vec<TenantId>,
    /// Set once a close answered: the process then reports its resources at its end.
    closed: std::cell::Cell<bool>,
    /// Tickets held for the driver, by session.
    sessions: std::cell::RefCell<HashMap<u64, leasehold_actors::Ticket>>,
}

/// Runs the replica role until stdin closes. Blocks.
pub fn run(args: ReplicaArgs) -> Result<(), BoxError> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let out = Output::start();
    let served = actix::System::new().block_on(serve(args, out.clone()));
    out.flush();
    served
}

fn breakage(switches: &[crate::BreakSwitch]) -> Breakage {
    Breakage {
        skip_commit_check: switches.contains(&crate::BreakSwitch::SkipCommitCheck),
        skip_final_image: switches.contains(&crate::BreakSwitch::SkipFinalImage),
        ack_before_tip: switches.contains(&crate::BreakSwitch::AckBeforeTip),
        ignore_idempotency_keys: switches.contains(&crate::BreakSwitch::IgnoreIdempotencyKeys),
        passivate_unsettled: switches.contains(&crate::BreakSwitch::PassivateUnsettled),
        ..Breakage::default()
    }
}

async fn serve(args: ReplicaArgs, out: Output) -> Result<(), BoxError> {
    let stores = backend::open(args.backend, &args.run_dir, &args.run_name).await?;
    let acquired = AcquireTimes::new(stores.leases.clone());
    let tuning = &args.tuning;
    let mut leases: SharedLeaseStore = Arc::new(acquired.clone());
    if tuning.lease_delay_ms > 0 {
        let delay = Duration::from_millis(tuning.lease_delay_ms);
        leases = Arc::new(crate::throttle::SlowLeases::new(leases, delay));
    }
    let lease_faults = FaultyLeaseStore::new(leases);
    let mut durable = stores.durable;
    if let Some(rate) = tuning.store_mib_per_sec {
        durable = Arc::new(crate::throttle::Link::new(durable, rate));
    }
    let late = crate::late_puts::LatePuts::new(durable, tuning.delete_one_by_one);
    let store = FaultyStore::new(Arc::new(late.clone()));
    // Every backend answers as S3 does when a put meets another put of its key under way (a
    // retry meeting its first try): `AlreadyExists`, nothing written (S3's 409).
    store.conflict_on_concurrent_creates(true);
    let org = protocol::org()?;
    let tenants = (0..args.tenants)
        .map(protocol::tenant_id)
        .collect::<Result<Vec<_>, _>>()?;
    let keys = (0..args.tenants)
        .map(|t| protocol::lease_key(t).map(|k| (k.to_string(), t)))
        .collect::<Result<HashMap<_, _>, _>>()?;
    let mut config = RuntimeConfig::new(
        ReplicaId::new(&args.name)?,
        args.root.clone(),
        lease_faults.shared(),
        store.shared(),
    );
    config.ttl = protocol::TTL;
    config.margin = protocol::MARGIN;
    config.renew_every = Some(protocol::RENEW_EVERY);
    config.snapshot_every = Some(protocol::SNAPSHOT_EVERY);
    config.durability = args
        .durability
        .durability(Duration::from_millis(args.async_every_ms));
    config.compaction.segments = tuning.compact_segments();
    if let Some(retain) = tuning.retain() {
        config.retain = retain;
    }
    config.drain_timeout = protocol::DRAIN_TIMEOUT;
    config.store_deadline = protocol::STORE_DEADLINE;
    config.passivate_after = args.passivate.then_some(protocol::PASSIVATE_AFTER);
    config.put_lifetime = tuning.put_lifetime();
    config.segments_in_flight = tuning.segments_in_flight(&args.name);
    config.reconcile_every = Some(protocol::RECONCILE_EVERY);
    config.arbiters = 2;
    config.breakage = breakage(&args.breakage);
    if args.transport {
        config.transport = Some(crate::addresses::transport()?);
        config.messages = crate::addresses::messages()?;
        crate::addresses::set_host(&args.name, acquired.clone());
        acquired.report_to(crate::addresses::reporter(out.clone(), keys.clone()));
    }
    config.observer = Some(Arc::new(Forwarder {
        out: out.clone(),
        tenants: keys,
    }));
    let baseline = crate::leaks::Baseline::now();
    let replica = Rc::new(Replica {
        supervisor: Supervisor::start(config)?,
        leases: stores.leases,
        acquired,
        records_use_host_clock: args.backend.records_use_host_clock(),
        lease_faults,
        lease_file: stores.lease_file,
        file_hold: std::cell::RefCell::default(),
        store,
        late,
        out,
        org,
        tenants,
        closed: std::cell::Cell::new(false),
        sessions: std::cell::RefCell::default(),
    });
    replica.out.send(&Line::Ready {
        pid: std::process::id(),
    });
    let lifetime = Duration::from_secs(args.lifetime_secs);
    let _ = tokio::time::timeout(lifetime, read_requests(replica.clone())).await;
    let _ = replica
        .supervisor
        .events_delivered(Duration::from_secs(1))
        .await;
    if replica.closed.get() {
        // After the close, drop the supervisor (every handle of this process) and see what is
        // left: the checker's `leak` rule (docs/testing.md, the process drill).
        let out = replica.out.clone();
        drop(replica);
        let report = baseline
            .report_after_drop(crate::leaks::live_tenant_actors)
            .await;
        out.send(&Line::Resources { report });
    }
    Ok(())
}

/// Reads requests until stdin closes, serving each on a task of its own.
async fn read_requests(replica: Rc<Replica>) {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        match serde_json::from_str::<Request>(&line) {
            Ok(Request { id, op }) => {
                let replica = replica.clone();
                actix::spawn(async move {
                    let answer = replica.handle(op).await;
                    replica.out.send(&Line::Reply { id, answer });
                });
            }
            Err(e) => eprintln!("drill replica: bad request line {line:?}: {e}"),
        }
    }
}

/// `mib` MiB of bytes no codec shrinks, seeded by `key` (SplitMix64).
fn blob_bytes(key: &str, mib: u32) -> Vec<u8> {
    let seed = key
        .bytes()
        .fold(0x5eed_u64, |n, b| n.rotate_left(7) ^ u64::from(b));
    let mut rng = crate::rng::Rng::new(seed);
    let words = (mib as usize) * 1024 * 1024 / 8;
    let mut bytes = Vec::with_capacity(words * 8);
    for _ in 0..words {
        bytes.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    bytes
}

/// A runtime error as a definite refusal or error answer.
pub fn failed(e: &Error) -> Answer {
    let owner = match e {
        Error::LeaseHeld { owner, .. } => Some(owner.clone()),
        _ => None,
    };
    Answer::Failed {
        code: e.code().to_string(),
        message: e.to_string(),
        owner,
    }
}

fn refused(code: &str, message: String) -> Answer {
    Answer::Failed {
        code: code.to_string(),
        message,
        owner: None,
    }
}

impl Replica {
    async fn handle(&self, op: Op) -> Answer {
        let outcome = match op {
            Op::Write { tenant, key } => self.write(tenant, key).await,
            Op::WriteBlob { tenant, key, mib } => self.write_blob(tenant, key, mib).await,
            Op::Open { tenant } => self.open(tenant).await,
            Op::Handoff { tenant } => self.handoff(tenant).await,
            Op::Forget { tenant } => self.forget(tenant).await,
            Op::Snapshot { tenant } => self.snapshot(tenant).await,
            Op::Read { tenant } => self.read(tenant).await,
            Op::Fault { fault } => Ok(self.fault(fault)),
            Op::Lease {
                fault: LeaseFault::HoldFile,
            } => self.hold_file().await,
            Op::Lease { fault } => Ok(self.lease_fault(fault)),
            Op::Admit { tenant, session } => self.admit(tenant, session).await,
            Op::SessionWrite {
                tenant,
                session,
                key,
            } => self.session_write(tenant, session, key).await,
            Op::Retire { session } => {
                self.sessions.borrow_mut().remove(&session);
                Ok(Answer::Done { epoch: None })
            }
            Op::Passivate => match self.supervisor.passivate_idle_now().await {
                Ok(_) => Ok(Answer::Done { epoch: None }),
                Err(e) => Err(failed(&e)),
            },
            Op::Close => self.close().await,
            Op::Send { tenant, key } => match self.addr(tenant) {
                Ok(addr) => Ok(crate::addresses::send(&self.supervisor, addr, tenant, key).await),
                Err(refused) => Err(refused),
            },
            Op::Ask { tenant, key } => match self.addr(tenant) {
                Ok(addr) => Ok(crate::addresses::ask(&self.supervisor, addr, key).await),
                Err(refused) => Err(refused),
            },
            Op::ReadNotes { tenant } => self.read_notes(tenant).await,
            Op::Abandon { tenant } => self.abandon(tenant).await,
        };
        outcome.unwrap_or_else(|answer| answer)
    }

    fn tenant_id(&self, tenant: u32) -> Result<&TenantId, Answer> {
        let index = usize::try_from(tenant).unwrap_or(usize::MAX);
        self.tenants.get(index).ok_or_else(|| {
            refused(
                protocol::BAD_REQUEST,
                format!("no tenant number {tenant} in this run"),
            )
        })
    }

    /// The address of tenant number `tenant`.
    fn addr(&self, tenant: u32) -> Result<leasehold_actors::TenantAddr, Answer> {
        let id = self.tenant_id(tenant)?.clone();
        Ok(leasehold_actors::TenantAddr::new(self.org.clone(), id))
    }

    /// The tenant's handle if it is open here.
    async fn lookup(&self, tenant: u32) -> Result<TenantRef, Answer> {
        let id = self.tenant_id(tenant)?;
        self.supervisor
            .tenant(&self.org, id)
            .await
            .ok_or_else(|| refused(NOT_OPEN, format!("tenant {tenant} is not open here")))
    }

    async fn write(&self, tenant: u32, key: String) -> Result<Answer, Answer> {
        let handle = self.lookup(tenant).await?;
        let ran = handle
            .run(move |ledger| {
                let run_at = now_ms();
                ledger.insert_event(&NewEvent::new("drill.write", key))?;
                Ok(run_at)
            })
            .await;
        let ack_at = now_ms();
        // Read after the run: a handle whose tenure was passivated meanwhile reopened the
        // tenant and ran there (docs/architecture.md, "Passivation").
        let epoch = handle.epoch();
        let run_at = ran.map_err(|e| failed(&e))?;
        Ok(Answer::Written {
            epoch,
            run_at,
            ack_at,
        })
    }

    /// One run: a blob of `mib` MiB into `drill_blobs` (one of three rows, chosen by the key, so
    /// the ledger holds at most three blobs) and the event `key`.
    async fn write_blob(&self, tenant: u32, key: String, mib: u32) -> Result<Answer, Answer> {
        let handle = self.lookup(tenant).await?;
        let blob = blob_bytes(&key, mib);
        let row = key
            .bytes()
            .fold(0u64, |n, b| n.wrapping_mul(31).wrapping_add(u64::from(b)))
            % 3;
        let ran = handle
            .run(move |ledger| {
                let run_at = now_ms();
                ledger.execute(
                    "CREATE TABLE IF NOT EXISTS drill_blobs (id INTEGER PRIMARY KEY, data BLOB)",
                    [],
                )?;
                ledger.execute(
                    "INSERT OR REPLACE INTO drill_blobs (id, data) VALUES (?1, ?2)",
                    rusqlite::params![row as i64, blob],
                )?;
                ledger.insert_event(&NewEvent::new("drill.blob", key))?;
                Ok(run_at)
            })
            .await;
        let ack_at = now_ms();
        let epoch = handle.epoch(); // after the run, as in `write`
        let run_at = ran.map_err(|e| failed(&e))?;
        Ok(Answer::Written {
            epoch,
            run_at,
            ack_at,
        })
    }

    async fn admit(&self, tenant: u32, session: u64) -> Result<Answer, Answer> {
        let handle = self.lookup(tenant).await?;
        let epoch = Some(handle.epoch());
        let ticket = handle.admit().await.map_err(|e| failed(&e))?;
        self.sessions.borrow_mut().insert(session, ticket);
        Ok(Answer::Done { epoch })
    }

    async fn session_write(
        &self,
        tenant: u32,
        session: u64,
        key: String,
    ) -> Result<Answer, Answer> {
        let ran = {
            let sessions = self.sessions.borrow();
            let ticket = sessions
                .get(&session)
                .ok_or_else(|| refused(NOT_OPEN, format!("no session {session} here")))?;
            if ticket.tenant().key().to_string()
                != protocol::lease_key(tenant).map_or_else(|_| String::new(), |k| k.to_string())
            {
                return Err(refused(
                    protocol::BAD_REQUEST,
                    format!("session {session} is not of tenant {tenant}"),
                ));
            }
            let epoch = ticket.tenant().epoch();
            let run = ticket.run(move |ledger| {
                let run_at = now_ms();
                ledger.insert_event(&NewEvent::new("drill.write", key))?;
                Ok(run_at)
            });
            (epoch, run)
        };
        let (epoch, run) = ran;
        let ran = run.await;
        let ack_at = now_ms();
        let run_at = ran.map_err(|e| failed(&e))?;
        Ok(Answer::Written {
            epoch,
            run_at,
            ack_at,
        })
    }

    async fn open(&self, tenant: u32) -> Result<Answer, Answer> {
        let id = self.tenant_id(tenant)?.clone();
        let acquired_lo = now_ms();
        let handle = self
            .supervisor
            .open(&self.org, &id)
            .await
            .map_err(|e| failed(&e))?;
        let mut acquired_hi = now_ms();
        let key = leasehold::LeaseKey::new(&self.org, &id);
        // The acquire's answer came back after the store granted the lease.
        if let Some(at) = self.acquired.returned_at(&key, handle.epoch()) {
            acquired_hi = acquired_hi.min(at);
        }
        // On the host's clock (SQLite), the store stamped `expires_at = acquired + ttl`, unless
        // a renewal moved it since: either way `expires_at - ttl` is no earlier than the
        // acquire. PostgreSQL's `expires_at` is the server's wall clock: never compared.
        if self.records_use_host_clock
            && let Ok(Some(record)) = self.leases.read(&key).await
            && record.epoch == handle.epoch()
        {
            let ttl = leasehold::clock::duration_ms(protocol::TTL);
            acquired_hi = acquired_hi.min(record.expires_at_ms.saturating_sub(ttl));
        }
        Ok(Answer::Opened {
            epoch: handle.epoch(),
            acquired_lo,
            acquired_hi,
        })
    }

    async fn handoff(&self, tenant: u32) -> Result<Answer, Answer> {
        let handle = self.lookup(tenant).await?;
        let epoch = Some(handle.epoch());
        handle.handoff().await.map_err(|e| failed(&e))?;
        Ok(Answer::Done { epoch })
    }

    async fn forget(&self, tenant: u32) -> Result<Answer, Answer> {
        let handle = self.lookup(tenant).await?;
        let epoch = Some(handle.epoch());
        handle.forget().await.map_err(|e| failed(&e))?;
        Ok(Answer::Done { epoch })
    }

    async fn snapshot(&self, tenant: u32) -> Result<Answer, Answer> {
        let handle = self.lookup(tenant).await?;
        let epoch = Some(handle.epoch());
        handle.snapshot().await.map_err(|e| failed(&e))?;
        Ok(Answer::Done { epoch })
    }

    async fn read(&self, tenant: u32) -> Result<Answer, Answer> {
        /// Events read per page; the loop ends at the ledger's end.
        const PAGE: usize = 2_000;
        let handle = self.lookup(tenant).await?;
        let epoch = handle.epoch();
        let keys = handle
            .run(|ledger| {
                let mut keys = Vec::new();
                let mut after = 0;
                loop {
                    let page = ledger.events_after(after, PAGE)?;
                    let Some(last) = page.last() else { break };
                    after = last.seq;
                    keys.extend(page.into_iter().map(|e| e.idem_key));
                }
                Ok(keys)
            })
            .await
            .map_err(|e| failed(&e))?;
        Ok(Answer::Keys { epoch, keys })
    }

    async fn read_notes(&self, tenant: u32) -> Result<Answer, Answer> {
        let handle = self.lookup(tenant).await?;
        let epoch = handle.epoch();
        let notes = handle
            .run(crate::addresses::read_notes)
            .await
            .map_err(|e| failed(&e))?;
        Ok(Answer::Notes { epoch, notes })
    }

    async fn abandon(&self, tenant: u32) -> Result<Answer, Answer> {
        let handle = self.lookup(tenant).await?;
        let epoch = Some(handle.epoch());
        handle.abandon().await.map_err(|e| failed(&e))?;
        Ok(Answer::Done { epoch })
    }

    fn fault(&self, fault: StoreFault) -> Answer {
        match fault {
            StoreFault::Down => self.store.set_down(true),
            StoreFault::Hang => self.store.hang_puts(true),
            StoreFault::Slow { ms } => self.store.slow_put(|_| true, Duration::from_millis(ms)),
            StoreFault::Late { ms } => self.late.set(ms),
            StoreFault::Clear => {
                self.late.set(0);
                self.store.set_down(false);
                self.store.hang_puts(false);
                self.store.clear_slow_put();
            }
        }
        Answer::Done { epoch: None }
    }

    fn lease_fault(&self, fault: LeaseFault) -> Answer {
        match fault {
            LeaseFault::Down => self.lease_faults.set_down(true),
            LeaseFault::HoldRenewals => self.lease_faults.hold_renewals(),
            // Taken in `hold_file`.
            LeaseFault::HoldFile => {}
            LeaseFault::ReleaseFile => drop(self.file_hold.borrow_mut().take()),
            LeaseFault::Clear => {
                self.lease_faults.set_down(false);
                self.lease_faults.release_renewals();
                drop(self.file_hold.borrow_mut().take());
            }
        }
        Answer::Done { epoch: None }
    }

    /// Holds the lease file's connection idle; answers once it is held.
    async fn hold_file(&self) -> Result<Answer, Answer> {
        if let Some(file) = self.lease_file.clone() {
            let hold = tokio::task::spawn_blocking(move || file.hold_connection())
                .await
                .map_err(|e| Answer::Failed {
                    code: "DRILL_HOLD_FILE".into(),
                    message: format!("holding the lease file: {e}"),
                    owner: None,
                })?;
            *self.file_hold.borrow_mut() = Some(hold);
        }
        Ok(Answer::Done { epoch: None })
    }

    async fn close(&self) -> Result<Answer, Answer> {
        let unflushed = self.supervisor.close().await.map_err(|e| failed(&e))?;
        self.closed.set(true);
        // The observer has queued the handoffs' Released lines: they go out before the reply.
        let _ = self
            .supervisor
            .events_delivered(Duration::from_secs(2))
            .await;
        Ok(Answer::Closed {
            unflushed: unflushed.iter().map(|k| k.to_string()).collect(),
        })
    }
}
