//! The stores the lease-store tests use to show that the conformance suite can fail: a SQLite
//! store whose `renew` ignores the epoch, and an in-memory [`ModelStore`], correct unless given a
//! [`Flaw`] (docs/testing.md, "store conformance").

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::clock::{Clock, ManualClock};
use leasehold::ids::LeaseKey;
use leasehold::layout::{ImageRef, LogPos};
use leasehold::lease::sqlite::SqliteLeaseStore;
use leasehold::lease::{
    ErasureEntry, LeaseEntry, LeaseError, LeasePage, LeaseRecord, LeaseStore, PendingErasure,
    RenewOutcome, check_tip_step, page_limit,
};

/// A broken store: `renew` renews whatever tenure of `owner` is live, ignoring the epoch asked.
#[derive(Debug)]
pub struct RenewIgnoresEpoch(pub SqliteLeaseStore);

#[async_trait]
impl LeaseStore for RenewIgnoresEpoch {
    async fn read(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        self.0.read(key).await
    }
    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
        attempt: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        self.0.acquire_attempt(key, owner, ttl, attempt).await
    }
    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        let live = self.0.read(key).await?.map_or(epoch, |r| r.epoch);
        self.0.renew(key, owner, live, ttl).await
    }
    async fn renew_many(
        &self,
        owner: &str,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError> {
        self.0.renew_many(owner, leases, ttl).await
    }
    async fn release(&self, key: &LeaseKey, owner: &str, epoch: u64) -> Result<(), LeaseError> {
        self.0.release(key, owner, epoch).await
    }
    async fn publish_head(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        image: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError> {
        self.0.publish_head(key, owner, epoch, image).await
    }
    async fn move_tip(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        from: Option<LogPos>,
        to: LogPos,
    ) -> Result<LeaseRecord, LeaseError> {
        self.0.move_tip(key, owner, epoch, from, to).await
    }
    async fn mark_forgotten(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        self.0.mark_forgotten(key, owner, epoch).await
    }
    async fn erasures_due(
        &self,
        settled_for: Duration,
        limit: usize,
    ) -> Result<Vec<PendingErasure>, LeaseError> {
        self.0.erasures_due(settled_for, limit).await
    }
    async fn erasure_done(&self, key: &LeaseKey, floor: u64) -> Result<(), LeaseError> {
        self.0.erasure_done(key, floor).await
    }
    async fn list(&self, from: Option<&LeaseKey>, limit: usize) -> Result<LeasePage, LeaseError> {
        self.0.list(from, limit).await
    }
}

/// What is wrong with a [`ModelStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    /// Nothing: a correct store.
    None,
    /// `acquire` treats every unreleased lease as held, however old.
    AcquireIgnoresExpiry,
    /// `acquire` after a forget hands out the forgotten epoch again.
    ReuseEpochAfterForget,
    /// `publish_head` accepts any image of the live epoch, also one older than the head.
    HeadMovesBack,
    /// `acquire_attempt` ignores the attempt: a retry is refused as `Held`.
    AcquireForgetsAttempt,
    /// `move_tip` writes the tip for the live tenure without comparing it with `from`.
    TipIgnoresFrom,
    /// `erasures_due` reports a forget at once, before the settle time has passed.
    ErasureDueAtOnce,
    /// `list` starts after `from` instead of at it: a key at a page's edge is never shown.
    ListStartsAfterFrom,
}

/// A lease store in memory, correct unless given a [`Flaw`]; its clock is a [`ManualClock`].
#[derive(Debug)]
pub struct ModelStore {
    clock: ManualClock,
    rows: Mutex<HashMap<String, LeaseRecord>>,
    /// The `(owner, attempt)` that started each key's tenure.
    attempts: Mutex<HashMap<String, (String, u64)>>,
    /// The pending erasure of each forgotten key: its floor and when it was forgotten.
    erasures: Mutex<HashMap<String, (u64, u64)>>,
    flaw: Flaw,
}

impl ModelStore {
    /// A store reading `clock`, broken by `flaw`.
    pub fn new(clock: &ManualClock, flaw: Flaw) -> Self {
        let rows = Mutex::default();
        Self {
            clock: clock.clone(),
            rows,
            attempts: Mutex::default(),
            erasures: Mutex::default(),
            flaw,
        }
    }

    fn is_live(&self, r: &LeaseRecord) -> bool {
        !r.released
            && (self.flaw == Flaw::AcquireIgnoresExpiry || self.clock.now_ms() < r.expires_at_ms)
    }

    /// Applies `change` to the live record of `(owner, epoch)`, or refuses with `NotHeld`.
    fn change(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        change: impl FnOnce(&mut LeaseRecord) -> bool,
    ) -> Result<LeaseRecord, LeaseError> {
        let mut rows = self.rows.lock().unwrap();
        let now = self.clock.now_ms();
        let held = rows.get_mut(key.as_str()).filter(|r| {
            !r.released && now < r.expires_at_ms && r.owner == owner && r.epoch == epoch
        });
        if let Some(r) = held
            && change(r)
        {
            return Ok(r.clone());
        }
        Err(LeaseError::NotHeld {
            key: key.to_string(),
            owner: owner.into(),
            epoch,
        })
    }
}

#[async_trait]
impl LeaseStore for ModelStore {
    async fn read(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, LeaseError> {
        Ok(self.rows.lock().unwrap().get(key.as_str()).cloned())
    }
    async fn acquire_attempt(
        &self,
        key: &LeaseKey,
        owner: &str,
        ttl: Duration,
        attempt: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        let mut rows = self.rows.lock().unwrap();
        let mut attempts = self.attempts.lock().unwrap();
        let old = rows.get(key.as_str()).cloned();
        if let Some(live) = old.as_ref().filter(|r| self.is_live(r)) {
            let mine = attempts.get(key.as_str()) == Some(&(owner.to_owned(), attempt));
            if mine && self.flaw != Flaw::AcquireForgetsAttempt {
                let end = self.clock.now_ms() + ttl.as_millis() as u64;
                let renewed = LeaseRecord {
                    expires_at_ms: live.expires_at_ms.max(end),
                    ..live.clone()
                };
                rows.insert(key.to_string(), renewed.clone());
                return Ok(renewed);
            }
            return Err(LeaseError::Held {
                key: key.to_string(),
                owner: live.owner.clone(),
                epoch: live.epoch,
            });
        }
        if let Some(spent) = old.as_ref()
            && attempts.get(key.as_str()) == Some(&(owner.to_owned(), attempt))
        {
            // An attempt starts at most one tenure.
            return Err(LeaseError::Held {
                key: key.to_string(),
                owner: spent.owner.clone(),
                epoch: spent.epoch,
            });
        }
        let last = old.as_ref().map_or(0, |r| r.epoch);
        let floor = old.as_ref().map_or(0, |r| r.floor);
        let reuse = self.flaw == Flaw::ReuseEpochAfterForget && floor == last && last > 0;
        let record = LeaseRecord {
            key: key.to_string(),
            owner: owner.into(),
            epoch: if reuse { last } else { last + 1 },
            expires_at_ms: self.clock.now_ms() + ttl.as_millis() as u64,
            released: false,
            floor,
            head: old.as_ref().and_then(|r| r.head.clone()),
            tip: old.and_then(|r| r.tip),
        };
        rows.insert(key.to_string(), record.clone());
        attempts.insert(key.to_string(), (owner.to_owned(), attempt));
        Ok(record)
    }
    async fn renew(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        ttl: Duration,
    ) -> Result<LeaseRecord, LeaseError> {
        let end = self.clock.now_ms() + ttl.as_millis() as u64;
        self.change(key, owner, epoch, |r| {
            r.expires_at_ms = end;
            true
        })
    }
    async fn renew_many(
        &self,
        owner: &str,
        leases: &[(LeaseKey, u64)],
        ttl: Duration,
    ) -> Result<Vec<RenewOutcome>, LeaseError> {
        let mut outcomes = Vec::new();
        for (key, epoch) in leases {
            let renewed = self.renew(key, owner, *epoch, ttl).await.is_ok();
            outcomes.push(if renewed {
                RenewOutcome::Renewed
            } else {
                RenewOutcome::Lost
            });
        }
        Ok(outcomes)
    }
    async fn release(&self, key: &LeaseKey, owner: &str, epoch: u64) -> Result<(), LeaseError> {
        self.change(key, owner, epoch, |r| {
            r.released = true;
            true
        })
        .map(|_| ())
    }
    async fn publish_head(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        image: &ImageRef,
    ) -> Result<LeaseRecord, LeaseError> {
        let mut stale = None;
        let moved = self.change(key, owner, epoch, |r| {
            let allowed = epoch > r.floor && image.epoch == epoch;
            let behind = r.head.as_ref().filter(|h| {
                self.flaw != Flaw::HeadMovesBack && (h.epoch, h.seq) >= (image.epoch, image.seq)
            });
            match behind {
                Some(head) if allowed && head != image => {
                    stale = Some(head.clone());
                    false
                }
                Some(_) => allowed,
                None => {
                    if allowed {
                        r.head = Some(image.clone());
                    }
                    allowed
                }
            }
        });
        match stale {
            Some(head) => Err(LeaseError::Stale {
                key: key.to_string(),
                head,
                image: image.clone(),
            }),
            None => moved,
        }
    }
    async fn move_tip(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
        from: Option<LogPos>,
        to: LogPos,
    ) -> Result<LeaseRecord, LeaseError> {
        check_tip_step(key, epoch, from, to)?;
        let mut elsewhere = None;
        let moved = self.change(key, owner, epoch, |r| {
            if epoch <= r.floor {
                return false;
            }
            if r.tip == Some(to) || r.tip == from || self.flaw == Flaw::TipIgnoresFrom {
                r.tip = Some(to);
                return true;
            }
            elsewhere = Some(r.tip);
            false
        });
        match elsewhere {
            Some(tip) => Err(LeaseError::TipMoved {
                key: key.to_string(),
                tip,
                from,
                to,
            }),
            None => moved,
        }
    }
    async fn mark_forgotten(
        &self,
        key: &LeaseKey,
        owner: &str,
        epoch: u64,
    ) -> Result<LeaseRecord, LeaseError> {
        let forgotten = self.change(key, owner, epoch, |r| {
            r.floor = epoch;
            r.head = None;
            r.tip = None;
            true
        })?;
        let now = self.clock.now_ms();
        let mut erasures = self.erasures.lock().unwrap();
        let pending = erasures.entry(key.to_string()).or_insert((epoch, now));
        if pending.0 != epoch {
            *pending = (epoch, now);
        }
        Ok(forgotten)
    }
    async fn erasures_due(
        &self,
        settled_for: Duration,
        limit: usize,
    ) -> Result<Vec<PendingErasure>, LeaseError> {
        let now = self.clock.now_ms();
        let settled = settled_for.as_millis() as u64;
        let mut due: Vec<(u64, String, u64)> = self
            .erasures
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, (_, at))| self.flaw == Flaw::ErasureDueAtOnce || now >= at + settled)
            .map(|(k, (floor, at))| (*at, k.clone(), *floor))
            .collect();
        due.sort();
        Ok(due
            .into_iter()
            .take(limit)
            .map(|(_, key, floor)| PendingErasure {
                key: LeaseKey::parse(&key).unwrap(),
                floor,
            })
            .collect())
    }
    async fn erasure_done(&self, key: &LeaseKey, floor: u64) -> Result<(), LeaseError> {
        let mut erasures = self.erasures.lock().unwrap();
        if erasures.get(key.as_str()).is_some_and(|(f, _)| *f == floor) {
            erasures.remove(key.as_str());
        }
        Ok(())
    }
    async fn list(&self, from: Option<&LeaseKey>, limit: usize) -> Result<LeasePage, LeaseError> {
        let now = self.clock.now_ms();
        let rows = self.rows.lock().unwrap();
        let erasures = self.erasures.lock().unwrap();
        let mut keys: Vec<&String> = rows.keys().collect();
        keys.sort();
        let starts = |k: &&String| match from {
            None => true,
            Some(f) if self.flaw == Flaw::ListStartsAfterFrom => k.as_str() > f.as_str(),
            Some(f) => k.as_str() >= f.as_str(),
        };
        let mut chosen = keys.into_iter().filter(|k| starts(k));
        let limit = page_limit(limit);
        let mut page = LeasePage::default();
        for key in chosen.by_ref().take(limit) {
            let record = rows[key].clone();
            let live = self.is_live(&record);
            page.entries.push(LeaseEntry {
                remaining: live
                    .then(|| Duration::from_millis(record.expires_at_ms.saturating_sub(now))),
                erasure: erasures.get(key).map(|&(floor, at)| ErasureEntry {
                    floor,
                    age: Some(Duration::from_millis(now.saturating_sub(at))),
                }),
                record,
            });
        }
        page.next = chosen.next().map(|k| LeaseKey::parse(k).unwrap());
        Ok(page)
    }
}
