//! The driver's side of the replicas: [`Proc`] (one replica process, its pipes and its pending
//! requests), [`Slot`] (a replica name and state root that outlives restarts) and [`Cluster`]
//! (the slots, the routing table "which slot owns which tenant", and the history).
//!
//! ```text
//!  call(id, op) ──> pending[id] ──> writer task ──> child stdin
//!  child stdout ──> reader task ──┬─ Reply{id}  ──> pending[id] (or the history, if late)
//!                                 └─ other lines ─> history
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};

use crate::BreakSwitch;
use crate::backend::{Backend, Stores};
use crate::history::acts::LeaveKind;
use crate::history::{CallError, History, Outcome};
use crate::protocol::{Answer, Line, Op, Request};

/// Errors of the drill itself (not violations).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long a replica may take to start.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// Requests that may wait for a replica's stdin.
const QUEUE: usize = 4_096;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A request id, unique over the run.
pub fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Answer>>>>;

/// How to start one replica process.
#[derive(Debug, Clone)]
pub struct Spawn {
    /// This very binary.
    pub exe: PathBuf,
    /// The run directory (logs, state roots; on `sqlite-dir` the lease file and the durable
    /// directory).
    pub run_dir: PathBuf,
    /// Where the run keeps its leases and images.
    pub backend: Backend,
    /// The run's name (its table and bucket prefix on `postgres-s3`).
    pub run_name: String,
    /// The replica's name.
    pub name: String,
    /// Its state root.
    pub root: PathBuf,
    /// How many tenants the run has.
    pub tenants: u32,
    /// Deliberate bugs to switch on.
    pub breakage: Vec<BreakSwitch>,
    /// How acknowledged writes are kept beyond the replica.
    pub mode: crate::protocol::Mode,
    /// With `Async`: how often changes are shipped, in ms.
    pub async_every_ms: u64,
    /// Its slot, `None` for the final checker.
    pub slot: Option<usize>,
    /// How many times this slot was started before.
    pub generation: u32,
    /// Retention, compaction and slow backends of the run.
    pub tuning: crate::tuning::Tuning,
    /// Whether the replicas join the run's fleet (`--clients addresses`).
    pub transport: bool,
    /// Whether the replicas passivate idle tenants (runs with the `passivate` fault).
    pub passivate: bool,
}

/// One running replica process.
#[derive(Debug)]
pub struct Proc {
    /// `name#generation`.
    pub label: String,
    /// Its process id.
    pub pid: u32,
    /// Lines for its stdin; `None` once stdin is closed.
    tx: Mutex<Option<mpsc::Sender<String>>>,
    /// Requests waiting for their reply.
    pending: Pending,
    /// Set when its stdout closed (it exited).
    gone: Arc<AtomicBool>,
    /// The child, to kill and reap.
    child: tokio::sync::Mutex<Child>,
    /// The run's history: every handoff, forget and close sent is recorded there.
    history: Arc<History>,
}

impl Proc {
    /// Starts a replica and waits until it is ready.
    pub async fn spawn(spec: &Spawn, history: Arc<History>) -> Result<Arc<Self>, BoxError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(spec.run_dir.join("logs").join(format!("{}.log", spec.name)))?;
        let mut cmd = Command::new(&spec.exe);
        cmd.arg("replica")
            .arg("--run-dir")
            .arg(&spec.run_dir)
            .arg("--backend")
            .arg(spec.backend.as_arg())
            .arg("--run-name")
            .arg(&spec.run_name)
            .arg("--name")
            .arg(&spec.name)
            .arg("--root")
            .arg(&spec.root)
            .arg("--tenants")
            .arg(spec.tenants.to_string())
            .arg("--durability")
            .arg(spec.mode.as_arg())
            .arg("--async-every-ms")
            .arg(spec.async_every_ms.to_string());
        cmd.args(spec.tuning.to_args());
        for switch in &spec.breakage {
            cmd.arg("--break").arg(switch.as_arg());
        }
        if spec.transport {
            cmd.arg("--transport");
        }
        if spec.passivate {
            cmd.arg("--passivate");
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .kill_on_drop(true);
        let mut child = cmd.spawn()?;
        let stdin = child.stdin.take().ok_or("no stdin pipe")?;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let mut lines = BufReader::new(stdout).lines();
        let label = format!("{}#{}", spec.name, spec.generation + 1);
        let pid = match tokio::time::timeout(READY_TIMEOUT, wait_ready(&mut lines)).await {
            Ok(Ok(pid)) => pid,
            Ok(Err(e)) => return Err(format!("{label} did not start: {e}").into()),
            Err(_) => return Err(format!("{label} not ready within {READY_TIMEOUT:?}").into()),
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(write_requests(stdin, rx));
        let proc = Arc::new(Self {
            label,
            pid,
            tx: Mutex::new(Some(tx)),
            pending: Arc::default(),
            gone: Arc::default(),
            child: tokio::sync::Mutex::new(child),
            history: history.clone(),
        });
        tokio::spawn(read_lines(
            lines,
            proc.label.clone(),
            spec.slot,
            proc.pending.clone(),
            proc.gone.clone(),
            history,
        ));
        Ok(proc)
    }

    /// Whether the process has exited.
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    /// Sends `op` as request `id` and waits at most `limit` for the reply.
    pub async fn call_with(&self, id: u64, op: Op, limit: Duration) -> Result<Answer, CallError> {
        let leave = match op {
            Op::Handoff { tenant } => Some((Some(tenant), LeaveKind::Handoff)),
            Op::Forget { tenant } => Some((Some(tenant), LeaveKind::Forget)),
            Op::Abandon { tenant } => Some((Some(tenant), LeaveKind::Abandon)),
            Op::Close => Some((None, LeaveKind::Close)),
            _ => None,
        };
        if let Some((tenant, kind)) = leave {
            // Before it is sent: the tenure it ends may end before the answer comes.
            self.history.leave(&self.label, tenant, kind);
        }
        let line = serde_json::to_string(&Request { id, op }).map_err(|_| CallError::NotSent)?;
        let (reply, answer) = oneshot::channel();
        lock(&self.pending).insert(id, reply);
        let sent = lock(&self.tx).as_ref().map(|tx| tx.try_send(line));
        if self.is_gone() || !matches!(sent, Some(Ok(()))) {
            lock(&self.pending).remove(&id);
            return Err(CallError::NotSent);
        }
        match tokio::time::timeout(limit, answer).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err(CallError::Gone),
            Err(_) => Err(CallError::Timeout),
        }
    }

    /// [`Proc::call_with`] under a fresh id.
    pub async fn call(&self, op: Op, limit: Duration) -> Result<Answer, CallError> {
        self.call_with(next_id(), op, limit).await
    }

    /// Sends a signal (`STOP`, `CONT`) with `kill(1)`.
    pub async fn signal(&self, signal: &str) -> Result<(), BoxError> {
        let status = Command::new("kill")
            .arg("-s")
            .arg(signal)
            .arg(self.pid.to_string())
            .status()
            .await?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill -s {signal} {} failed: {status}", self.pid).into())
        }
    }

    /// SIGKILL, then reap (at most five seconds).
    pub async fn kill(&self) {
        let mut child = self.child.lock().await;
        let _ = child.start_kill();
        let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    }

    /// Closes stdin (the replica exits at its end) and waits `limit`; kills it after that. Once
    /// it exited, waits (at most a second) until every line it printed is read into the history
    /// (its resource report is the last).
    pub async fn shutdown(&self, limit: Duration) {
        lock(&self.tx).take();
        let exited = {
            let mut child = self.child.lock().await;
            tokio::time::timeout(limit, child.wait()).await.is_ok()
        };
        if !exited {
            self.kill().await;
            return;
        }
        let read_all = async {
            while !self.is_gone() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), read_all).await;
    }
}

async fn wait_ready(lines: &mut tokio::io::Lines<BufReader<ChildStdout>>) -> Result<u32, BoxError> {
    // Bounded by the caller's timeout.
    loop {
        let Some(line) = lines.next_line().await? else {
            return Err("it exited (see its log)".into());
        };
        if let Ok(Line::Ready { pid }) = serde_json::from_str(&line) {
            return Ok(pid);
        }
    }
}

async fn write_requests(mut stdin: tokio::process::ChildStdin, mut rx: mpsc::Receiver<String>) {
    while let Some(mut line) = rx.recv().await {
        line.push('\n');
        if stdin.write_all(line.as_bytes()).await.is_err() || stdin.flush().await.is_err() {
            break;
        }
    }
}

async fn read_lines(
    mut lines: tokio::io::Lines<BufReader<ChildStdout>>,
    label: String,
    slot: Option<usize>,
    pending: Pending,
    gone: Arc<AtomicBool>,
    history: Arc<History>,
) {
    while let Ok(Some(text)) = lines.next_line().await {
        match serde_json::from_str::<Line>(&text) {
            Ok(Line::Reply { id, answer }) => {
                let waiting = lock(&pending).remove(&id);
                match waiting {
                    Some(reply) => {
                        if let Err(answer) = reply.send(answer) {
                            history.late_reply(id, &answer);
                        }
                    }
                    None => history.late_reply(id, &answer),
                }
            }
            Ok(line) => history.on_line(&label, slot, &line),
            Err(e) => history.note(None, format!("{label}: unreadable line {text:?}: {e}")),
        }
    }
    gone.store(true, Ordering::SeqCst);
    lock(&pending).clear();
}

/// A replica name and state root; its process may be restarted.
#[derive(Debug)]
pub struct Slot {
    /// Its index.
    pub index: usize,
    /// The replica's name (`replica-1`, …).
    pub name: String,
    /// Its state root.
    pub root: PathBuf,
    /// The current process, if running.
    proc: Mutex<Option<Arc<Proc>>>,
    /// Set while the process is stopped (SIGSTOP).
    stopped: AtomicBool,
    /// How many processes were started in this slot.
    generation: AtomicU32,
}

/// Where a tenant could not be opened.
#[derive(Debug, Clone)]
pub enum OpenError {
    /// Another replica holds the lease (its name).
    Held(Option<String>),
    /// A refusal or error, with its code.
    Failed(String),
    /// No answer, or the slot has no live process.
    Unreachable,
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Held(holder) => write!(f, "lease held by {holder:?}"),
            OpenError::Failed(code) => f.write_str(code),
            OpenError::Unreachable => f.write_str("no answer"),
        }
    }
}

/// The replicas of a run, the routing table and the history.
#[derive(Debug)]
pub struct Cluster {
    /// The slots.
    pub slots: Vec<Slot>,
    /// The history.
    pub history: Arc<History>,
    /// How many tenants.
    pub tenants: u32,
    /// What every slot is started with (name, root and generation vary).
    template: Spawn,
    /// Which slot the driver believes owns each tenant.
    owners: Mutex<HashMap<u32, usize>>,
    /// One open at a time per tenant (clients).
    pub open_locks: Vec<tokio::sync::Mutex<()>>,
    /// The run's stores, unwrapped: the driver lists them right after a forget.
    pub stores: Stores,
    /// How long after a forget nothing of the forgotten epochs may be left, puts that land
    /// late included (`--erasure-bound-ms`).
    pub erasure_bound: Duration,
    /// The replicas' `retain`, when the run sets one (where the restores' window starts).
    pub retain: Option<Duration>,
}

/// How long an open may take (acquire, fetch and install an image).
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(6);
/// How long a write may take before it counts as unknown.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

impl Cluster {
    /// A cluster of `replicas` slots under the run directory of `template`; none started.
    pub fn new(template: Spawn, replicas: usize, history: Arc<History>, stores: Stores) -> Self {
        let slots = (0..replicas)
            .map(|index| {
                let name = format!("replica-{}", index + 1);
                Slot {
                    index,
                    root: template.run_dir.join("roots").join(&name),
                    name,
                    proc: Mutex::new(None),
                    stopped: AtomicBool::new(false),
                    generation: AtomicU32::new(0),
                }
            })
            .collect();
        let open_locks = (0..template.tenants)
            .map(|_| tokio::sync::Mutex::new(()))
            .collect();
        Self {
            slots,
            history,
            tenants: template.tenants,
            retain: template.tuning.retain(),
            template,
            owners: Mutex::new(HashMap::new()),
            open_locks,
            stores,
            erasure_bound: Duration::from_secs(2),
        }
    }

    /// Whether the run's clients send through tenant addresses.
    pub fn addresses(&self) -> bool {
        self.template.transport
    }

    /// The run directory.
    pub fn run_dir(&self) -> &Path {
        &self.template.run_dir
    }

    /// The spawn spec of a process that is not a slot's (the final checker).
    pub fn spec(&self, name: &str, root: PathBuf) -> Spawn {
        Spawn {
            name: name.to_string(),
            root,
            slot: None,
            generation: 0,
            breakage: Vec::new(),
            ..self.template.clone()
        }
    }

    /// Starts (or restarts) the process of slot `i` on its state root.
    pub async fn start(&self, i: usize) -> Result<(), BoxError> {
        let slot = &self.slots[i];
        let spec = Spawn {
            name: slot.name.clone(),
            root: slot.root.clone(),
            slot: Some(i),
            generation: slot.generation.fetch_add(1, Ordering::SeqCst),
            ..self.template.clone()
        };
        let proc = Proc::spawn(&spec, self.history.clone()).await?;
        slot.stopped.store(false, Ordering::SeqCst);
        *lock(&slot.proc) = Some(proc);
        Ok(())
    }

    /// The running process of slot `i` (stopped or not).
    pub fn proc(&self, i: usize) -> Option<Arc<Proc>> {
        lock(&self.slots[i].proc).clone().filter(|p| !p.is_gone())
    }

    /// The running, not stopped process of slot `i`.
    pub fn live(&self, i: usize) -> Option<Arc<Proc>> {
        self.proc(i).filter(|_| !self.is_stopped(i))
    }

    /// Whether slot `i` is stopped (SIGSTOP).
    pub fn is_stopped(&self, i: usize) -> bool {
        self.slots[i].stopped.load(Ordering::SeqCst)
    }

    /// Slots with a live process.
    pub fn live_slots(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| self.live(i).is_some())
            .collect()
    }

    /// The slot of the replica named `name`.
    pub fn slot_named(&self, name: &str) -> Option<usize> {
        self.slots.iter().position(|s| s.name == name)
    }

    /// SIGKILL slot `i`'s process and forget its routes. The slot is then empty.
    pub async fn kill(&self, i: usize) {
        let proc = lock(&self.slots[i].proc).take();
        if let Some(proc) = proc {
            self.history.impair(&proc.label);
            proc.kill().await;
        }
        self.slots[i].stopped.store(false, Ordering::SeqCst);
        self.clear_slot(i);
    }

    /// Closes slot `i`'s stdin and waits for it to exit (kills it after `limit`).
    pub async fn shutdown(&self, i: usize, limit: Duration) {
        let proc = lock(&self.slots[i].proc).take();
        if let Some(proc) = proc {
            proc.shutdown(limit).await;
        }
        self.clear_slot(i);
    }

    /// SIGSTOP slot `i` (an impairment until the driver ends it in the history).
    pub async fn pause(&self, i: usize) -> Result<(), BoxError> {
        let proc = self.proc(i).ok_or("no process to stop")?;
        self.history.impair(&proc.label);
        // Stopped while holding the lease store's lock, it stalls every replica's lease calls.
        self.history.impair(crate::history::EVERY_REPLICA);
        self.slots[i].stopped.store(true, Ordering::SeqCst);
        proc.signal("STOP").await
    }

    /// SIGCONT slot `i`.
    pub async fn resume(&self, i: usize) -> Result<(), BoxError> {
        let proc = self.proc(i).ok_or("no process to continue")?;
        let resumed = proc.signal("CONT").await;
        self.history.unimpair(crate::history::EVERY_REPLICA);
        self.slots[i].stopped.store(false, Ordering::SeqCst);
        resumed
    }

    /// The slot believed to own `tenant`.
    pub fn owner(&self, tenant: u32) -> Option<usize> {
        lock(&self.owners).get(&tenant).copied()
    }

    /// Routes `tenant` to slot `i`.
    pub fn set_owner(&self, tenant: u32, i: usize) {
        lock(&self.owners).insert(tenant, i);
    }

    /// Forgets the route of `tenant` if it still leads to slot `i`.
    pub fn clear_owner_if(&self, tenant: u32, i: usize) {
        let mut owners = lock(&self.owners);
        if owners.get(&tenant) == Some(&i) {
            owners.remove(&tenant);
        }
    }

    /// Forgets every route to slot `i`.
    pub fn clear_slot(&self, i: usize) {
        lock(&self.owners).retain(|_, slot| *slot != i);
    }

    /// The tenants routed to slot `i`.
    pub fn owned_by(&self, i: usize) -> Vec<u32> {
        let mut owned: Vec<u32> = lock(&self.owners)
            .iter()
            .filter(|&(_, &slot)| slot == i)
            .map(|(&t, _)| t)
            .collect();
        owned.sort_unstable();
        owned
    }

    /// Opens `tenant` on slot `i`; on success routes it there and records the grant.
    pub async fn open_on(&self, tenant: u32, i: usize) -> Result<u64, OpenError> {
        let proc = self.live(i).ok_or(OpenError::Unreachable)?;
        match proc.call(Op::Open { tenant }, OPEN_TIMEOUT).await {
            Ok(Answer::Opened {
                epoch, acquired_hi, ..
            }) => {
                self.history
                    .grant(tenant, epoch, &proc.label, Some(i), acquired_hi);
                self.set_owner(tenant, i);
                Ok(epoch)
            }
            Ok(Answer::Failed { code, owner, .. }) if code == "LEASEHOLD_LEASE_HELD" => {
                Err(OpenError::Held(owner))
            }
            Ok(Answer::Failed { code, message, .. }) => {
                // An open that failed may have acquired a tenure and written its files: the
                // timeline says so (`forgotten-local-file-left`, `orphan-object` triage).
                let text = format!("{}: open failed: {code}: {message}", proc.label);
                self.history.note(Some(tenant), text);
                Err(OpenError::Failed(code))
            }
            Ok(_) => Err(OpenError::Failed("unexpected answer".into())),
            Err(_) => Err(OpenError::Unreachable),
        }
    }

    /// Writes one event with idempotency key `key` to `tenant` through `proc`, recording it.
    pub async fn write(
        &self,
        proc: &Proc,
        tenant: u32,
        key: String,
        zombie: bool,
        limit: Duration,
    ) -> Outcome {
        let id = next_id();
        self.history.invoke(id, tenant, &key, &proc.label, zombie);
        let result = proc.call_with(id, Op::Write { tenant, key }, limit).await;
        self.history.complete(id, &result)
    }

    /// Writes one event through the ticket of `session` on `proc`, recording it like a write.
    pub async fn session_write(
        &self,
        proc: &Proc,
        tenant: u32,
        session: u64,
        key: String,
        limit: Duration,
    ) -> Outcome {
        let id = next_id();
        self.history.invoke(id, tenant, &key, &proc.label, false);
        let op = Op::SessionWrite {
            tenant,
            session,
            key,
        };
        let result = proc.call_with(id, op, limit).await;
        self.history.complete(id, &result)
    }
}
