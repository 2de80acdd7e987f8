//! [`RuntimeConfigBuilder`]: the configuration built step by step, beside the plain struct.
//!
//! ```ignore
//! let config = RuntimeConfig::builder(ReplicaId::new("replica-a")?, "/var/lib/leasehold/state")
//!     .leases(Arc::new(SqliteLeaseStore::open(Path::new("/var/lib/leasehold/leases.db"))?))
//!     .durable(Arc::new(DirStore::open(Path::new("/var/lib/leasehold/durable"))?))
//!     .ttl(Duration::from_secs(20))
//!     .build()?; // validated: every refusal names its option
//! ```
//!
//! Each setter sets one field of [`RuntimeConfig`] (whose documentation gives its meaning and
//! default); what is not set keeps the default of [`RuntimeConfig::new`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use leasehold::clock::{SharedClock, SharedWallClock};
use leasehold::durable::SharedDurableStore;
use leasehold::lease::SharedLeaseStore;
use leasehold::ledger::LedgerOptions;
use leasehold::{Error, ReplicaId};

use super::{Compaction, Durability, RuntimeConfig};
use crate::events::Observer;

/// One change to the defaults, applied in the order it was asked for.
type Edit = Box<dyn FnOnce(&mut RuntimeConfig) + Send>;

/// A [`RuntimeConfig`] built step by step: [`RuntimeConfig::builder`], the stores, any option,
/// then [`RuntimeConfigBuilder::build`], which validates.
#[must_use = "a builder does nothing until build() is called"]
pub struct RuntimeConfigBuilder {
    /// This replica's name.
    replica_id: ReplicaId,
    /// Where local ledgers live.
    state_root: PathBuf,
    /// The lease store; `build` refuses a configuration without one.
    leases: Option<SharedLeaseStore>,
    /// The durable store; `build` refuses a configuration without one.
    durable: Option<SharedDurableStore>,
    /// The options set, each a change to [`RuntimeConfig::new`]'s defaults.
    edits: Vec<Edit>,
}

impl std::fmt::Debug for RuntimeConfigBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeConfigBuilder")
            .field("replica_id", &self.replica_id)
            .field("state_root", &self.state_root)
            .field("leases", &self.leases.is_some())
            .field("durable", &self.durable.is_some())
            .field("options_set", &self.edits.len())
            .finish()
    }
}

impl RuntimeConfig {
    /// A builder for replica `replica_id` keeping its ledgers under `state_root`; give it the
    /// stores ([`RuntimeConfigBuilder::leases`], [`RuntimeConfigBuilder::durable`]) and any
    /// option, then [`RuntimeConfigBuilder::build`].
    pub fn builder(replica_id: ReplicaId, state_root: impl Into<PathBuf>) -> RuntimeConfigBuilder {
        RuntimeConfigBuilder {
            replica_id,
            state_root: state_root.into(),
            leases: None,
            durable: None,
            edits: Vec::new(),
        }
    }
}

/// A setter of one field: `fn name(self, value: Type) -> Self`.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(self, value: $ty) -> Self {
                self.edit(move |c| c.$name = value)
            }
        )*
    };
}

impl RuntimeConfigBuilder {
    /// Adds a change to the defaults.
    fn edit(mut self, edit: impl FnOnce(&mut RuntimeConfig) + Send + 'static) -> Self {
        self.edits.push(Box::new(edit));
        self
    }

    /// The lease store (required).
    pub fn leases(mut self, leases: SharedLeaseStore) -> Self {
        self.leases = Some(leases);
        self
    }

    /// The durable store (required).
    pub fn durable(mut self, durable: SharedDurableStore) -> Self {
        self.durable = Some(durable);
        self
    }

    /// Who hears the runtime's events besides `tracing` ([`RuntimeConfig::observer`]).
    pub fn observer(self, observer: Arc<dyn Observer>) -> Self {
        self.edit(move |c| c.observer = Some(observer))
    }

    /// The transport to the fleet's other replicas ([`RuntimeConfig::transport`]).
    pub fn transport(self, transport: crate::transport::TransportConfig) -> Self {
        self.edit(move |c| c.transport = Some(transport))
    }

    setters! {
        /// [`RuntimeConfig::clock`].
        clock: SharedClock;
        /// [`RuntimeConfig::wall_clock`].
        wall_clock: SharedWallClock;
        /// [`RuntimeConfig::ttl`].
        ttl: Duration;
        /// [`RuntimeConfig::margin`].
        margin: Duration;
        /// [`RuntimeConfig::renew_every`] (`None`: only on request).
        renew_every: Option<Duration>;
        /// [`RuntimeConfig::durability`].
        durability: Durability;
        /// [`RuntimeConfig::snapshot_every`] (`None`: only on request).
        snapshot_every: Option<Duration>;
        /// [`RuntimeConfig::compaction`].
        compaction: Compaction;
        /// [`RuntimeConfig::segment_limit`].
        segment_limit: u64;
        /// [`RuntimeConfig::segment_compression`].
        segment_compression: leasehold::log::segment::SegmentCompression;
        /// [`RuntimeConfig::segments_in_flight`].
        segments_in_flight: usize;
        /// [`RuntimeConfig::ship_linger`] (`None`: cut at once).
        ship_linger: Option<Duration>;
        /// [`RuntimeConfig::async_pending_limit`].
        async_pending_limit: u64;
        /// [`RuntimeConfig::retain`].
        retain: Duration;
        /// [`RuntimeConfig::local_sweep_every`] (`None`: only at start, tenure ends and close).
        local_sweep_every: Option<Duration>;
        /// [`RuntimeConfig::drain_timeout`].
        drain_timeout: Duration;
        /// [`RuntimeConfig::close_concurrency`].
        close_concurrency: usize;
        /// [`RuntimeConfig::max_open`].
        max_open: usize;
        /// [`RuntimeConfig::store_deadline`].
        store_deadline: Duration;
        /// [`RuntimeConfig::put_lifetime`].
        put_lifetime: Duration;
        /// [`RuntimeConfig::reconcile_every`] (`None`: only on request, on answers, at close).
        reconcile_every: Option<Duration>;
        /// [`RuntimeConfig::arbiters`].
        arbiters: usize;
        /// [`RuntimeConfig::ledger`].
        ledger: LedgerOptions;
        /// [`RuntimeConfig::accept_shared_permissions`].
        accept_shared_permissions: bool;
        /// [`RuntimeConfig::messages`].
        messages: crate::message::Messages;
        /// [`RuntimeConfig::idempotency_window`].
        idempotency_window: Duration;
        /// [`RuntimeConfig::ask_timeout`].
        ask_timeout: Duration;
        /// [`RuntimeConfig::passivate_after`] (`None`: no passivation; `max_open` refuses).
        passivate_after: Option<Duration>;
    }

    /// Deliberate bugs for harness tests ([`RuntimeConfig::breakage`]). Never in production.
    #[cfg(feature = "fault-switches")]
    pub fn breakage(self, breakage: super::Breakage) -> Self {
        self.edit(move |c| c.breakage = breakage)
    }

    /// The configuration, validated ([`RuntimeConfig::validate`]): a missing store is
    /// [`Error::InvalidOption`] (`leases`, `durable`), and so is every option out of range,
    /// named as in [`RuntimeConfig`].
    pub fn build(self) -> Result<RuntimeConfig, Error> {
        let missing = |name: &'static str| Error::InvalidOption {
            name,
            reason: format!("no {name} store was given (RuntimeConfigBuilder::{name})"),
        };
        let leases = self.leases.ok_or_else(|| missing("leases"))?;
        let durable = self.durable.ok_or_else(|| missing("durable"))?;
        let mut config = RuntimeConfig::new(self.replica_id, self.state_root, leases, durable);
        for edit in self.edits {
            edit(&mut config);
        }
        config.validate()?;
        Ok(config)
    }
}
