//! A test replica without a supervisor: a real router, a real transport server and client on
//! loopback, a real SQLite lease store shared by every replica, and [`Host`], a stand-in for
//! the tenants: it opens a tenant by acquiring its lease, runs a message only while the lease
//! store says its tenure holds, and keeps each tenant's replies by idempotency key in a table
//! that travels with the tenant (as the ledger's does).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use leasehold::lease::{LeaseError, SharedLeaseStore};
use leasehold::route::{LocalState, Placement, Stay};
use leasehold::{Error, LeaseKey, OrgId, TenantId};
use tokio::time::Instant;

use crate::events::{EventLog, EventSink};
use crate::message::{ErasedRequest, MessageKind};
use crate::router::{FleetRouter, LocalDelivery};
use crate::transport::{FleetKey, ForwardClient, Server, TransportConfig};

/// How long the test replicas' leases and records run.
pub(crate) const TTL: Duration = Duration::from_millis(1_500);

/// One run of a message: which replica, which tenure, which key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ran {
    pub(crate) tenant: String,
    pub(crate) idem: String,
    pub(crate) replica: String,
    pub(crate) epoch: u64,
}

/// What every replica of a test shares: the runs (the oracle's record) and each tenant's
/// replies by idempotency key (the ledger's table, which travels with the tenant).
#[derive(Default)]
pub(crate) struct World {
    pub(crate) ran: Mutex<Vec<Ran>>,
    pub(crate) replies: Mutex<HashMap<(String, String), Vec<u8>>>,
}

/// The stand-in for a replica's tenants.
pub(crate) struct Host {
    me: String,
    leases: SharedLeaseStore,
    world: Arc<World>,
    /// Tenants open here: their epoch and state.
    pub(crate) open: Mutex<HashMap<LeaseKey, (u64, LocalState)>>,
    /// The replica is closing: it opens nothing more (`Closed`, as the supervisor refuses).
    pub(crate) closing: std::sync::atomic::AtomicBool,
    /// The supervisor is held up (its thread busy): asking where a tenant stands here does not
    /// answer.
    pub(crate) stalled: std::sync::atomic::AtomicBool,
    /// How many times a router here found a tenant leaving (a message waits for its successor).
    pub(crate) seen_leaving: std::sync::atomic::AtomicUsize,
}

impl Host {
    /// Sets where `key` stands here (a handoff under way: `Leaving`).
    pub(crate) fn set_state(&self, key: &LeaseKey, state: LocalState) {
        if let Some(t) = self.open.lock().unwrap().get_mut(key) {
            t.1 = state;
        }
    }

    /// Hands `key` back: releases its lease and forgets it here.
    pub(crate) async fn release(&self, key: &LeaseKey) {
        let epoch = self.open.lock().unwrap().remove(key).map(|t| t.0);
        if let Some(epoch) = epoch {
            self.leases.release(key, &self.me, epoch).await.unwrap();
        }
    }

    async fn run(self: Arc<Self>, key: LeaseKey, req: ErasedRequest) -> Result<Vec<u8>, Error> {
        let held = self.open.lock().unwrap().get(&key).copied();
        let epoch = match held {
            Some((epoch, LocalState::Serving)) => epoch,
            Some(_) => {
                return Err(Error::Draining {
                    key: key.to_string(),
                    state: "draining".into(),
                });
            }
            None if self.closing.load(std::sync::atomic::Ordering::SeqCst) => {
                return Err(Error::Closed("the replica is closing".into()));
            }
            None => match self.leases.acquire(&key, &self.me, TTL).await {
                Ok(record) => {
                    self.open
                        .lock()
                        .unwrap()
                        .insert(key.clone(), (record.epoch, LocalState::Serving));
                    record.epoch
                }
                Err(e @ LeaseError::Held { .. }) => return Err(e.into()),
                Err(e) => return Err(e.into()),
            },
        };
        // Fenced by the store: never run without a live tenure.
        let lookup = self.leases.lookup(&key).await?;
        if lookup.live_holder() != Some((self.me.as_str(), epoch)) {
            self.open.lock().unwrap().remove(&key);
            return Err(Error::Fenced {
                key: key.to_string(),
            });
        }
        let idem = req.idempotency_key.clone().unwrap_or_default();
        let slot = (key.to_string(), idem.clone());
        let stored = self.world.replies.lock().unwrap().get(&slot).cloned();
        if let Some(reply) = stored.filter(|_| !idem.is_empty()) {
            return Ok(reply);
        }
        self.world.ran.lock().unwrap().push(Ran {
            tenant: key.to_string(),
            idem,
            replica: self.me.clone(),
            epoch,
        });
        let reply = [req.body.as_slice(), b"@", self.me.as_bytes()].concat();
        self.world
            .replies
            .lock()
            .unwrap()
            .insert(slot, reply.clone());
        Ok(reply)
    }
}

/// A [`Host`] behind the router's seam.
struct Delivery(Arc<Host>);

impl LocalDelivery for Delivery {
    fn check(&self, req: &ErasedRequest) -> Result<MessageKind, Error> {
        match (req.name.as_str(), req.version) {
            ("note", 1) => Ok(MessageKind::Command),
            _ => Err(Error::UnknownMessage {
                name: req.name.clone(),
                version: req.version,
            }),
        }
    }

    fn local_state(&self, key: &LeaseKey) -> BoxFuture<'static, LocalState> {
        let state = self
            .0
            .open
            .lock()
            .unwrap()
            .get(key)
            .map_or(LocalState::Absent, |t| t.1);
        if self.0.stalled.load(std::sync::atomic::Ordering::SeqCst) {
            return Box::pin(futures::future::pending());
        }
        Box::pin(async move { state })
    }

    fn known_state(&self, key: &LeaseKey) -> Option<LocalState> {
        if self.0.stalled.load(std::sync::atomic::Ordering::SeqCst) {
            return None;
        }
        let open = self.0.open.lock().unwrap();
        let state = open
            .get(key)
            .map(|t| t.1)
            .filter(|s| matches!(s, LocalState::Serving | LocalState::Leaving));
        if state == Some(LocalState::Leaving) {
            let seen = &self.0.seen_leaving;
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        state
    }

    fn deliver_local(
        &self,
        key: &LeaseKey,
        req: ErasedRequest,
        _deadline: Instant,
    ) -> BoxFuture<'static, Result<Vec<u8>, Error>> {
        Box::pin(self.0.clone().run(key.clone(), req))
    }
}

/// A test replica.
pub(crate) struct Replica {
    pub(crate) id: String,
    pub(crate) host: Arc<Host>,
    pub(crate) router: FleetRouter,
    pub(crate) server: Option<Server>,
    pub(crate) events: EventLog,
    /// The sink the router emits to (its observer runs on a thread of its own).
    pub(crate) sink: EventSink,
    pub(crate) leases: SharedLeaseStore,
    pub(crate) epoch: u64,
}

pub(crate) fn fleet_key() -> FleetKey {
    FleetKey::new(vec![3; 32]).unwrap()
}

/// Options of a test replica.
pub(crate) struct Options {
    pub(crate) max_hops: u8,
    /// How long where a tenant was found is trusted (the transport's default: 1 s).
    pub(crate) holder_cache: Option<Duration>,
    pub(crate) placement: Arc<dyn Placement>,
    /// Advertise this endpoint instead of the server's (a proxy in front of it).
    pub(crate) advertise: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            max_hops: 3,
            holder_cache: TransportConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), fleet_key())
                .holder_cache,
            placement: Arc::new(Stay),
            advertise: None,
        }
    }
}

impl Replica {
    /// Starts replica `id` on the shared store and advertises it.
    pub(crate) async fn start(
        id: &str,
        leases: SharedLeaseStore,
        world: Arc<World>,
        o: Options,
    ) -> Self {
        let mut cfg = TransportConfig::new(SocketAddr::from(([127, 0, 0, 1], 0)), fleet_key());
        cfg.max_hops = o.max_hops;
        let host = Arc::new(Host {
            me: id.into(),
            leases: leases.clone(),
            world,
            open: Mutex::default(),
            closing: Default::default(),
            stalled: Default::default(),
            seen_leaving: Default::default(),
        });
        let events = EventLog::new();
        let sink = EventSink::new(Some(Arc::new(events.clone())));
        let client = ForwardClient::new(&cfg).unwrap();
        let router = FleetRouter::new(
            id,
            leases.clone(),
            Arc::new(Delivery(host.clone())),
            client,
            o.placement,
            o.max_hops,
            sink.clone(),
        )
        .remembering(Arc::new(crate::holders::Holders::new(o.holder_cache)));
        let server = Server::start(&cfg, Arc::new(router.clone())).unwrap();
        let endpoint = o.advertise.unwrap_or_else(|| server.endpoint().to_owned());
        let record = leases.advertise(id, &endpoint, 1, TTL).await.unwrap();
        Self {
            id: id.into(),
            host,
            router,
            server: Some(server),
            events,
            sink,
            leases,
            epoch: record.epoch,
        }
    }

    /// Renews this replica's record and leases once (its renewal chain's tick).
    pub(crate) async fn renew(&self) {
        let leases: Vec<_> = self
            .host
            .open
            .lock()
            .unwrap()
            .iter()
            .map(|(k, t)| (k.clone(), t.0))
            .collect();
        self.leases
            .renew_replica(&self.id, self.epoch, &leases, TTL)
            .await
            .unwrap();
    }

    /// Sends a `note` to `tenant` through this replica's router, with the idempotency key
    /// `idem` (none when it starts with `-`; the body is `idem` either way).
    pub(crate) async fn send(
        &self,
        tenant: &str,
        idem: &str,
        deadline: Duration,
    ) -> Result<Vec<u8>, Error> {
        let req = ErasedRequest {
            name: "note".into(),
            version: 1,
            idempotency_key: Some(idem.to_owned()).filter(|k| !k.starts_with('-')),
            body: idem.as_bytes().to_vec(),
        };
        self.router
            .send(&key(tenant), req, Instant::now() + deadline)
            .await
    }

    /// The process dies: its server stops, its renewals stop, nothing is handed back.
    pub(crate) async fn kill(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop().await;
        }
    }

    /// Events of `kind` emitted so far, once the observer has seen them all.
    pub(crate) async fn counted(&self, kind: &str) -> usize {
        assert!(self.sink.delivered(Duration::from_secs(5)).await);
        self.count(kind)
    }

    /// Events of `kind` seen by this replica's observer.
    pub(crate) fn count(&self, kind: &str) -> usize {
        self.events
            .events()
            .iter()
            .filter(|e| e.kind() == kind)
            .count()
    }
}

pub(crate) fn key(tenant: &str) -> LeaseKey {
    LeaseKey::new(
        &OrgId::new("acme").unwrap(),
        &TenantId::new(tenant).unwrap(),
    )
}

/// A fresh SQLite lease store (real clock) and the directory that holds it.
pub(crate) fn store() -> (SharedLeaseStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store =
        leasehold::lease::sqlite::SqliteLeaseStore::open(&dir.path().join("leases.db")).unwrap();
    (Arc::new(store), dir)
}
