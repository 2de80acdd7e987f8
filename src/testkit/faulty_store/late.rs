//! Late puts: one model of a put that outlives its deadline (docs/testing.md, "Late landings and
//! pace"). Every store call may take effect after its caller gave up; for a put that means its
//! bytes land later. A test (or the simulation) arms a [`LatePuts`] rule; each put it takes is
//! **held**, and lands only when the test lets it ([`FaultyStore::land_late_puts`]).
//!
//! Two things vary, and nothing else:
//!
//! | [`LateAnswer`] | what the caller hears | who still runs the put |
//! |---|---|---|
//! | `Timeout` | [`StoreError::Timeout`] at once: its deadline passed | nobody in the caller's stack: the held bytes, registered for `settle_puts` when [`LateLanding::Tracked`] |
//! | `Hang` | nothing until it lands: the call does not return, so a `Deadline` above it gives up at its deadline and runs it on in its own task (and `settle_puts` sees it there) | the call itself |
//!
//! [`LateLanding`] says whether this process still knows of a `Timeout` put (`Tracked`: a put
//! the process still runs, `settle_puts` waits for it) or not (`Untracked`: a request the
//! server completes after the client gave up; only a sweep or a reconciliation by listing finds
//! what it leaves). A rule takes every matching put until cleared ([`LatePuts::every`]) or only
//! the next one ([`LatePuts::next`]); [`FaultyStore::hang_puts`] is the shorthand for "every put
//! hangs" and "let them go".

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::watch;

use super::{Faults, FaultyStore, KeyMatch, lock};
use crate::durable::{Put, PutEntry, StoreError};

/// What the caller of a late put hears.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateAnswer {
    /// [`StoreError::Timeout`] at once (outcome unknown); the bytes are held here.
    Timeout,
    /// No answer until the put lands: the call hangs (a `Deadline` above it times it out and
    /// keeps running it).
    Hang,
}

/// Whether [`crate::DurableStore::settle_puts`] can see a late put answered `Timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateLanding {
    /// The put stays registered until it lands, and `settle_puts` waits for it: a put this
    /// process still runs (a blocking write, a request whose answer is still awaited).
    Tracked,
    /// Nothing in this process knows of it: a request the server completes after the client
    /// gave up. Only a later sweep finds what it leaves.
    Untracked,
}

/// A rule that makes matching puts late. Build it with [`LatePuts::every`] or
/// [`LatePuts::next`], then say how the caller hears it and whether it is tracked.
#[derive(Clone)]
pub struct LatePuts {
    /// Which keys.
    matching: KeyMatch,
    /// How many more puts the rule takes; `None`: every matching put until cleared.
    takes: Option<usize>,
    /// What the caller hears.
    answer: LateAnswer,
    /// Whether `settle_puts` sees a put answered `Timeout`.
    landing: LateLanding,
}

impl std::fmt::Debug for LatePuts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LatePuts")
            .field("takes", &self.takes)
            .field("answer", &self.answer)
            .field("landing", &self.landing)
            .finish_non_exhaustive()
    }
}

impl LatePuts {
    /// Every put of a key for which `matching` is true, until the rule is cleared: answered
    /// `Timeout` at once, tracked.
    pub fn every(matching: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        Self {
            matching: Arc::new(matching),
            takes: None,
            answer: LateAnswer::Timeout,
            landing: LateLanding::Tracked,
        }
    }

    /// Only the next put of a key for which `matching` is true: answered `Timeout` at once,
    /// tracked.
    pub fn next(matching: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        Self {
            takes: Some(1),
            ..Self::every(matching)
        }
    }

    /// The caller hears nothing until the put lands ([`LateAnswer::Hang`]).
    pub fn hanging(self) -> Self {
        Self {
            answer: LateAnswer::Hang,
            ..self
        }
    }

    /// Whether `settle_puts` sees the held put ([`LateLanding`]).
    pub fn landing(self, landing: LateLanding) -> Self {
        Self { landing, ..self }
    }

    /// Nothing in this process knows of the put ([`LateLanding::Untracked`]).
    pub fn untracked(self) -> Self {
        self.landing(LateLanding::Untracked)
    }
}

/// A put answered `Timeout` and held: its key, bytes and (if tracked) its registration.
struct HeldPut {
    /// The key.
    key: String,
    /// The bytes.
    bytes: Vec<u8>,
    /// Registered in `late_tracked` until it lands.
    _tracked: Option<PutEntry>,
}

/// The late-put state every clone of one [`FaultyStore`] shares.
pub(super) struct LateState {
    /// The rules, oldest first: a put takes the first that matches.
    rules: std::sync::Mutex<Vec<LatePuts>>,
    /// The puts answered `Timeout` and held, oldest first.
    held: std::sync::Mutex<Vec<HeldPut>>,
    /// Bumped by every landing: hung puts wait for it to move.
    landings: watch::Sender<u64>,
    /// Puts hanging now.
    hanging: std::sync::atomic::AtomicUsize,
}

impl Default for LateState {
    fn default() -> Self {
        Self {
            rules: std::sync::Mutex::new(Vec::new()),
            held: std::sync::Mutex::new(Vec::new()),
            landings: watch::Sender::new(0),
            hanging: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

impl LateState {
    /// The answer of the first rule that takes a put of `key` (using up one of its takes).
    fn take(&self, key: &str) -> Option<(LateAnswer, LateLanding)> {
        let mut rules = lock(&self.rules);
        let at = rules.iter().position(|r| (r.matching)(key))?;
        let rule = &mut rules[at];
        let taken = (rule.answer, rule.landing);
        if let Some(n) = rule.takes.as_mut() {
            *n -= 1;
            if *n == 0 {
                rules.remove(at);
            }
        }
        Some(taken)
    }
}

/// What a put met at the late-put step.
pub(super) enum Late {
    /// No rule took it: it goes on.
    OnTime,
    /// Held: its caller hears `Timeout` now.
    Held,
}

impl Faults {
    /// The late-put step of a put of `key`: held (answered `Timeout`), hung until the next
    /// landing, or let through.
    pub(super) async fn late_step(&self, key: &str, bytes: &[u8]) -> Late {
        match self.late.take(key) {
            None => Late::OnTime,
            Some((LateAnswer::Timeout, landing)) => {
                let tracked =
                    (landing == LateLanding::Tracked).then(|| self.late_tracked.enter(key));
                lock(&self.late.held).push(HeldPut {
                    key: key.to_owned(),
                    bytes: bytes.to_vec(),
                    _tracked: tracked,
                });
                Late::Held
            }
            Some((LateAnswer::Hang, _)) => {
                let mut landings = self.late.landings.subscribe();
                let before = *landings.borrow_and_update();
                self.late.hanging.fetch_add(1, Ordering::SeqCst);
                // The sender lives as long as `self`, so this only returns at a landing.
                let _ = landings.wait_for(|n| *n > before).await;
                self.late.hanging.fetch_sub(1, Ordering::SeqCst);
                Late::OnTime
            }
        }
    }
}

impl FaultyStore {
    /// Arms `rule`: the puts it takes are late (see the module docs). Rules are tried oldest
    /// first.
    pub fn late_puts(&self, rule: LatePuts) {
        lock(&self.faults.late.rules).push(rule);
    }

    /// Disarms every rule; the puts held so far stay held until they land.
    pub fn clear_late_puts(&self) {
        lock(&self.faults.late.rules).clear();
    }

    /// Every late put lands now: the held ones reach the wrapped store (if-absent, as any put),
    /// oldest first, and the hung ones go on in their callers. Returns the keys of the held puts
    /// that wrote their object.
    pub async fn land_late_puts(&self) -> Result<Vec<String>, StoreError> {
        self.faults.late.landings.send_modify(|n| *n += 1);
        let due = std::mem::take(&mut *lock(&self.faults.late.held));
        let mut landed = Vec::new();
        for put in due {
            self.faults.puts.fetch_add(1, Ordering::SeqCst);
            let written = self.faults.inner.put_if_absent(&put.key, put.bytes).await?;
            if written == Put::Created {
                landed.push(put.key);
            }
        }
        Ok(landed)
    }

    /// How many late puts have not landed yet (held and hung).
    pub fn late_puts_held(&self) -> usize {
        lock(&self.faults.late.held).len() + self.faults.late.hanging.load(Ordering::SeqCst)
    }

    /// The keys of the puts held (answered `Timeout`), oldest first.
    pub fn held_puts(&self) -> Vec<String> {
        let held = lock(&self.faults.late.held);
        held.iter().map(|put| put.key.clone()).collect()
    }

    /// Shorthand: while `hang`, every put hangs ([`LatePuts::every`] of every key,
    /// [`LatePuts::hanging`]); `false` clears the hanging rules and lets the hung puts go on
    /// (other rules stay armed, and the held puts stay held until
    /// [`FaultyStore::land_late_puts`]).
    pub fn hang_puts(&self, hang: bool) {
        if hang {
            self.late_puts(LatePuts::every(|_| true).hanging());
            return;
        }
        lock(&self.faults.late.rules).retain(|rule| rule.answer != LateAnswer::Hang);
        self.faults.late.landings.send_modify(|n| *n += 1);
    }
}
