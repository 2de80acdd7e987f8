//! The configuration from `LEASEHOLD_*` environment variables ([`ENV_VARS`] lists each, with
//! its default and meaning; docs/operations.md has the same table).
//!
//! ```text
//! LEASEHOLD_REPLICA_ID=replica-a                           required
//! LEASEHOLD_STATE_ROOT=/var/lib/leasehold/state            default: state
//! LEASEHOLD_LEASES=postgres://lh@db/leasehold?table=lh     default: sqlite://leases.db
//! LEASEHOLD_DURABLE=s3://acme-ledgers/prod                 default: durable
//! LEASEHOLD_TTL=30s  LEASEHOLD_DRAIN_TIMEOUT=2m  …         durations: 500ms, 30s, 2m, 1h 30m
//! LEASEHOLD_TRANSPORT_BIND=0.0.0.0:7070                    the fleet (env/transport.rs)
//! LEASEHOLD_FLEET_KEY_FILE=/etc/leasehold/fleet.key        its key, never logged
//! ```
//!
//! Reading is pure ([`EnvConfig::from_vars`] takes the variables as a list; [`EnvConfig::read`]
//! the process's): every bad value is [`Error::InvalidOption`] whose `name` is the variable,
//! and nothing is opened. [`EnvConfig::open`] then opens the stores (creating what is missing,
//! as a replica's first start does) and gives a [`RuntimeConfigBuilder`] the host may still
//! change (an observer, a clock); [`EnvConfig::build`] validates too, naming the variable of a
//! value out of range. An empty variable counts as unset. A `LEASEHOLD_*` variable no entry of
//! [`ENV_VARS`] names (a typo, another tool's) is reported to `tracing` and otherwise ignored.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Duration;

use leasehold::stores::{DurableStoreUrl, IfMissing, LeaseStoreUrl};
use leasehold::{Error, ReplicaId};

use super::builder::RuntimeConfigBuilder;
use super::{Compaction, Durability, RuntimeConfig};

/// One environment variable [`EnvConfig`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVar {
    /// The variable, `LEASEHOLD_…`.
    pub name: &'static str,
    /// The option of [`RuntimeConfig`] it sets (its range errors carry this name).
    pub option: &'static str,
    /// What it is when unset, as text.
    pub default: &'static str,
    /// What it means and the form it takes.
    pub meaning: &'static str,
}

const fn var(
    name: &'static str,
    option: &'static str,
    default: &'static str,
    meaning: &'static str,
) -> EnvVar {
    EnvVar {
        name,
        option,
        default,
        meaning,
    }
}

/// Every variable [`EnvConfig`] reads, in the order of docs/operations.md's table.
pub const ENV_VARS: &[EnvVar] = &[
    var(
        "LEASEHOLD_REPLICA_ID",
        "replica_id",
        "(required)",
        "this replica's name, unique in the fleet: 1-128 of A-Z a-z 0-9 _ -",
    ),
    var(
        "LEASEHOLD_STATE_ROOT",
        "state_root",
        "state",
        "the directory of the local ledgers",
    ),
    var(
        "LEASEHOLD_LEASES",
        "leases",
        "sqlite://leases.db",
        "the lease store: sqlite://PATH, a path, or postgres://…[?table=NAME]",
    ),
    var(
        "LEASEHOLD_DURABLE",
        "durable",
        "durable",
        "the durable store: a path, file://PATH, or s3://BUCKET[/PREFIX]",
    ),
    var(
        "LEASEHOLD_DURABILITY",
        "durability",
        "shipped",
        "shipped, async (every 1 s), async:DURATION, or images",
    ),
    var(
        "LEASEHOLD_TTL",
        "ttl",
        "30s",
        "how long a lease runs per acquire or renew",
    ),
    var(
        "LEASEHOLD_MARGIN",
        "margin",
        "5s",
        "how long before its end a holder stops acting on a lease",
    ),
    var(
        "LEASEHOLD_RENEW_EVERY",
        "renew_every",
        "10s",
        "how often leases are renewed; off: only on request",
    ),
    var(
        "LEASEHOLD_SNAPSHOT_EVERY",
        "snapshot_every",
        "60s",
        "how often a tenant checks for an image due; off: only on request",
    ),
    var(
        "LEASEHOLD_COMPACTION_SEGMENTS",
        "compaction",
        "1000",
        "a new image after this many segments",
    ),
    var(
        "LEASEHOLD_COMPACTION_BYTES",
        "compaction",
        "64MiB",
        "a new image after this many bytes of segments",
    ),
    var(
        "LEASEHOLD_SEGMENT_LIMIT",
        "segment_limit",
        "1GiB",
        "the most bytes one segment takes (a run at most half)",
    ),
    var(
        "LEASEHOLD_SEGMENTS_IN_FLIGHT",
        "segments_in_flight",
        "1",
        "the most segments of one tenant under way at once (1: one at a time)",
    ),
    var(
        "LEASEHOLD_SHIP_LINGER",
        "ship_linger",
        "1ms",
        "how long a cut waits for the callers a segment just answered (off: never)",
    ),
    var(
        "LEASEHOLD_ASYNC_PENDING_LIMIT",
        "async_pending_limit",
        "64MiB",
        "with async: the most bytes committed and not yet shipped",
    ),
    var(
        "LEASEHOLD_RETAIN",
        "retain",
        "24h",
        "how long images and segments stay restorable",
    ),
    var(
        "LEASEHOLD_LOCAL_SWEEP_EVERY",
        "local_sweep_every",
        "60s",
        "how often local copies of tenants forgotten elsewhere go; off",
    ),
    var(
        "LEASEHOLD_DRAIN_TIMEOUT",
        "drain_timeout",
        "120s",
        "how long a handoff waits for admitted work",
    ),
    var(
        "LEASEHOLD_CLOSE_CONCURRENCY",
        "close_concurrency",
        "8",
        "how many tenants close() hands off at a time",
    ),
    var(
        "LEASEHOLD_MAX_OPEN",
        "max_open",
        "from RLIMIT_NOFILE",
        "how many tenants may be open at once",
    ),
    var(
        "LEASEHOLD_STORE_DEADLINE",
        "store_deadline",
        "10s",
        "the deadline of every store call",
    ),
    var(
        "LEASEHOLD_PUT_LIFETIME",
        "put_lifetime",
        "120s",
        "the longest a put may land after it was sent",
    ),
    var(
        "LEASEHOLD_RECONCILE_EVERY",
        "reconcile_every",
        "30s",
        "how often puts of unknown outcome are reconciled; off",
    ),
    var(
        "LEASEHOLD_IDEMPOTENCY_WINDOW",
        "idempotency_window",
        "24h",
        "how long a keyed command's reply is kept for its retries",
    ),
    var(
        "LEASEHOLD_ASK_TIMEOUT",
        "ask_timeout",
        "30s",
        "the deadline of a message sent without one",
    ),
    var(
        "LEASEHOLD_PASSIVATE_AFTER",
        "passivate_after",
        "60s",
        "how long an idle tenant stays open before it is passivated; off",
    ),
    var(
        "LEASEHOLD_ACCEPT_SHARED_PERMISSIONS",
        "accept_shared_permissions",
        "false",
        "start on a state root the group or others may enter (true/false)",
    ),
    var(
        "LEASEHOLD_ARBITERS",
        "arbiters",
        "the number of cores",
        "how many threads tenants live on",
    ),
    var(
        "LEASEHOLD_TRANSPORT_BIND",
        "bind",
        "(none: no transport)",
        "IP:PORT where this replica takes messages forwarded by its fleet (port 0: any free one); \
         set, the replica joins its fleet and needs a fleet key",
    ),
    var(
        "LEASEHOLD_TRANSPORT_ADVERTISE",
        "advertise",
        "the bound address",
        "the endpoint the other replicas reach this one at: http://HOST:PORT (or https://)",
    ),
    var(
        "LEASEHOLD_FLEET_KEY_FILE",
        "fleet_key",
        "(none)",
        "a private file (0600) holding the fleet key in hex, 64 digits or more; never logged",
    ),
    var(
        "LEASEHOLD_FLEET_KEY",
        "fleet_key",
        "(none)",
        "the fleet key in hex, when no file holds it (a file is safer); never logged",
    ),
    var(
        "LEASEHOLD_TRANSPORT_MAX_HOPS",
        "max_hops",
        "3",
        "how many forwards a message takes before it is answered Moved",
    ),
    var(
        "LEASEHOLD_TRANSPORT_HOLDER_CACHE",
        "holder_cache",
        "1s",
        "how long where a tenant held elsewhere was found is trusted before the lease store is read again; off reads it before every forward",
    ),
    var(
        "LEASEHOLD_PLACEMENT",
        "placement",
        "stay",
        "who opens a tenant nobody holds: stay (where the message arrived) or rendezvous",
    ),
];

mod transport;

/// One option read from a variable, applied to the builder when the stores are open.
type Set = Box<dyn FnOnce(RuntimeConfigBuilder) -> RuntimeConfigBuilder + Send>;

/// The configuration the environment gives, read and checked but nothing opened yet.
#[must_use = "open() or build() opens the stores"]
pub struct EnvConfig {
    /// `LEASEHOLD_REPLICA_ID`.
    pub replica_id: ReplicaId,
    /// `LEASEHOLD_STATE_ROOT`.
    pub state_root: PathBuf,
    /// `LEASEHOLD_LEASES`.
    pub leases: LeaseStoreUrl,
    /// `LEASEHOLD_DURABLE`.
    pub durable: DurableStoreUrl,
    /// The options the variables set, with the variable of each (to name it in a range error).
    options: Vec<(&'static EnvVar, Set)>,
    /// The transport, when `LEASEHOLD_TRANSPORT_BIND` is set (its key file is read at open).
    transport: Option<transport::TransportVars>,
}

impl std::fmt::Debug for EnvConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set: Vec<_> = self.options.iter().map(|(v, _)| v.name).collect();
        f.debug_struct("EnvConfig")
            .field("replica_id", &self.replica_id)
            .field("state_root", &self.state_root)
            .field("leases", &self.leases)
            .field("durable", &self.durable)
            .field("set", &set)
            .field("transport", &self.transport)
            .finish()
    }
}

impl RuntimeConfig {
    /// The configuration of the process's `LEASEHOLD_*` variables, stores opened (created if
    /// missing) and validated: [`EnvConfig::read`] then [`EnvConfig::build`].
    pub async fn from_env() -> Result<RuntimeConfig, Error> {
        EnvConfig::read()?.build().await
    }
}

impl RuntimeConfigBuilder {
    /// A builder of the process's `LEASEHOLD_*` variables, stores opened: the host may still
    /// set an observer, a clock or any option before `build()`.
    pub async fn from_env() -> Result<RuntimeConfigBuilder, Error> {
        EnvConfig::read()?.open().await
    }
}

/// The variables of the environment that start with `LEASEHOLD_`.
struct Vars(BTreeMap<String, std::ffi::OsString>);

impl Vars {
    /// The value of `v`: `None` when unset or empty; a value that is not UTF-8 is refused.
    fn get(&self, v: &'static EnvVar) -> Result<Option<&str>, Error> {
        let Some(raw) = self.0.get(v.name) else {
            return Ok(None);
        };
        let text = raw.to_str().ok_or_else(|| bad(v, "is not valid UTF-8"))?;
        Ok((!text.trim().is_empty()).then(|| text.trim()))
    }
}

fn bad(v: &'static EnvVar, reason: impl std::fmt::Display) -> Error {
    Error::InvalidOption {
        name: v.name,
        reason: reason.to_string(),
    }
}

fn lookup(name: &str) -> &'static EnvVar {
    ENV_VARS
        .iter()
        .find(|v| v.name == name)
        .unwrap_or(&ENV_VARS[0])
}

/// A duration like `500ms`, `30s`, `2m`, `1h 30m` (humantime's forms).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?} is not a duration like 500ms, 30s, 2m or 1h 30m: {e}"))
}

/// A duration, or `off` for none.
pub(crate) fn parse_period(text: &str) -> Result<Option<Duration>, String> {
    if text.eq_ignore_ascii_case("off") {
        Ok(None)
    } else {
        parse_duration(text).map(Some)
    }
}

/// A size in bytes: a whole number, alone or with `B`, `KiB`, `MiB` or `GiB` (`64MiB`, `64 MiB`).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let digits = text.trim_end_matches(|c: char| !c.is_ascii_digit());
    let unit = text[digits.len()..].trim();
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return Err(format!("{text:?}: the unit must be B, KiB, MiB or GiB")),
    };
    let number: u64 = digits
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a size like 4096, 64KiB or 1GiB"))?;
    number
        .checked_mul(scale)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// `shipped`, `images`, `async` (every 1 s) or `async:DURATION`.
fn parse_durability(text: &str) -> Result<Durability, String> {
    let lower = text.to_ascii_lowercase();
    match lower.as_str() {
        "shipped" => Ok(Durability::Shipped),
        "images" => Ok(Durability::Images),
        "async" => Ok(Durability::ASYNC),
        _ => match lower.strip_prefix("async:") {
            Some(every) => Ok(Durability::Async {
                every: parse_duration(every.trim())?,
            }),
            None => Err(format!(
                "{text:?} is not shipped, async, async:DURATION or images"
            )),
        },
    }
}

/// `true`/`false` (also `1`/`0`, `yes`/`no`).
fn parse_flag(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" => Ok(true),
        "false" | "0" | "no" => Ok(false),
        _ => Err(format!("{text:?} is not true or false")),
    }
}

fn parse_count(text: &str) -> Result<usize, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not a whole number"))
}

impl EnvConfig {
    /// Reads the process's `LEASEHOLD_*` variables ([`EnvConfig::from_vars`]).
    pub fn read() -> Result<Self, Error> {
        Self::from_vars(std::env::vars_os())
    }

    /// Reads `vars` (name and value pairs, as `std::env::vars_os` gives them): every bad value
    /// is [`Error::InvalidOption`] naming its variable; nothing is opened.
    pub fn from_vars<K, V>(vars: impl IntoIterator<Item = (K, V)>) -> Result<Self, Error>
    where
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let vars = Vars(
            vars.into_iter()
                .filter_map(|(k, v)| {
                    let k = k.as_ref().to_str()?.to_string();
                    k.starts_with("LEASEHOLD_")
                        .then(|| (k, v.as_ref().to_os_string()))
                })
                .collect(),
        );
        for name in vars.0.keys() {
            if !ENV_VARS.iter().any(|v| v.name == name) && !name.starts_with("LEASEHOLD_TEST_") {
                tracing::warn!(variable = %name, "a LEASEHOLD_ variable no option reads: ignored");
            }
        }
        let v = lookup("LEASEHOLD_REPLICA_ID");
        let replica_id = match vars.get(v)? {
            Some(id) => ReplicaId::new(id).map_err(|e| bad(v, e))?,
            None => return Err(bad(v, "is not set: every replica needs a name of its own")),
        };
        let text = |name| {
            vars.get(lookup(name))
                .map(|t| t.unwrap_or(lookup(name).default))
        };
        let state_root = PathBuf::from(text("LEASEHOLD_STATE_ROOT")?);
        let leases = LeaseStoreUrl::parse(text("LEASEHOLD_LEASES")?)
            .map_err(|e| renamed(e, lookup("LEASEHOLD_LEASES")))?;
        let durable = DurableStoreUrl::parse(text("LEASEHOLD_DURABLE")?)
            .map_err(|e| renamed(e, lookup("LEASEHOLD_DURABLE")))?;
        let options = options(&vars)?;
        let transport = transport::read(&vars)?;
        Ok(Self {
            replica_id,
            state_root,
            leases,
            durable,
            options,
            transport,
        })
    }

    /// Opens the stores (creating a missing lease file, directory or table, as a replica's
    /// first start does) and gives the builder with every option the variables set. The fleet
    /// key's file, if one is named, is read first.
    pub async fn open(self) -> Result<RuntimeConfigBuilder, Error> {
        let transport = self.transport.map(|t| t.config()).transpose()?;
        let leases = self.leases.open(IfMissing::Create).await?;
        let durable = self.durable.open(IfMissing::Create).await?;
        let mut builder = RuntimeConfig::builder(self.replica_id, self.state_root)
            .leases(leases)
            .durable(durable);
        for (_, set) in self.options {
            builder = set(builder);
        }
        if let Some(transport) = transport {
            builder = builder.transport(transport);
        }
        Ok(builder)
    }

    /// [`EnvConfig::open`], then validates: a value out of range is [`Error::InvalidOption`]
    /// naming the variable that set it.
    pub async fn build(self) -> Result<RuntimeConfig, Error> {
        let mut set: Vec<&'static EnvVar> = self.options.iter().map(|(v, _)| *v).collect();
        set.extend(self.transport.as_ref().map_or(Vec::new(), |t| t.set()));
        let built = self.open().await?.build();
        built.map_err(|e| match &e {
            Error::InvalidOption { name, .. } => match set.iter().find(|v| v.option == *name) {
                Some(v) => renamed(e, v),
                None => e,
            },
            _ => e,
        })
    }
}

/// `e`, an option's refusal, as the refusal of variable `v`.
fn renamed(e: Error, v: &'static EnvVar) -> Error {
    match e {
        Error::InvalidOption { name, reason } if name == v.option => bad(v, reason),
        Error::InvalidOption { name, reason } => bad(v, format!("{name}: {reason}")),
        other => other,
    }
}

/// The option `set` of a value read with `parsed` from variable `v`.
fn with<T: Send + 'static>(
    v: &'static EnvVar,
    parsed: Result<T, String>,
    set: fn(RuntimeConfigBuilder, T) -> RuntimeConfigBuilder,
) -> Result<Set, Error> {
    let value = parsed.map_err(|reason| bad(v, reason))?;
    Ok(Box::new(move |b| set(b, value)))
}

/// Every option the variables set, each checked for its form.
fn options(vars: &Vars) -> Result<Vec<(&'static EnvVar, Set)>, Error> {
    type B = RuntimeConfigBuilder;
    let mut out: Vec<(&'static EnvVar, Set)> = Vec::new();
    for v in ENV_VARS {
        let Some(text) = vars.get(v)? else { continue };
        let set = match v.name {
            "LEASEHOLD_DURABILITY" => with(v, parse_durability(text), B::durability)?,
            "LEASEHOLD_TTL" => with(v, parse_duration(text), B::ttl)?,
            "LEASEHOLD_MARGIN" => with(v, parse_duration(text), B::margin)?,
            "LEASEHOLD_RENEW_EVERY" => with(v, parse_period(text), B::renew_every)?,
            "LEASEHOLD_SNAPSHOT_EVERY" => with(v, parse_period(text), B::snapshot_every)?,
            "LEASEHOLD_SEGMENT_LIMIT" => with(v, parse_bytes(text), B::segment_limit)?,
            "LEASEHOLD_SHIP_LINGER" => with(v, parse_period(text), B::ship_linger)?,
            "LEASEHOLD_SEGMENTS_IN_FLIGHT" => with(v, parse_count(text), B::segments_in_flight)?,
            "LEASEHOLD_ASYNC_PENDING_LIMIT" => with(v, parse_bytes(text), B::async_pending_limit)?,
            "LEASEHOLD_RETAIN" => with(v, parse_duration(text), B::retain)?,
            "LEASEHOLD_LOCAL_SWEEP_EVERY" => with(v, parse_period(text), B::local_sweep_every)?,
            "LEASEHOLD_DRAIN_TIMEOUT" => with(v, parse_duration(text), B::drain_timeout)?,
            "LEASEHOLD_CLOSE_CONCURRENCY" => with(v, parse_count(text), B::close_concurrency)?,
            "LEASEHOLD_MAX_OPEN" => with(v, parse_count(text), B::max_open)?,
            "LEASEHOLD_STORE_DEADLINE" => with(v, parse_duration(text), B::store_deadline)?,
            "LEASEHOLD_PUT_LIFETIME" => with(v, parse_duration(text), B::put_lifetime)?,
            "LEASEHOLD_RECONCILE_EVERY" => with(v, parse_period(text), B::reconcile_every)?,
            "LEASEHOLD_ARBITERS" => with(v, parse_count(text), B::arbiters)?,
            "LEASEHOLD_IDEMPOTENCY_WINDOW" => with(v, parse_duration(text), B::idempotency_window)?,
            "LEASEHOLD_ASK_TIMEOUT" => with(v, parse_duration(text), B::ask_timeout)?,
            "LEASEHOLD_PASSIVATE_AFTER" => with(v, parse_period(text), B::passivate_after)?,
            "LEASEHOLD_ACCEPT_SHARED_PERMISSIONS" => {
                with(v, parse_flag(text), B::accept_shared_permissions)?
            }
            // Read above (the stores and the name), below (compaction's two halves), or by
            // `env/transport.rs`.
            _ => continue,
        };
        out.push((v, set));
    }
    let (segments, bytes) = (
        lookup("LEASEHOLD_COMPACTION_SEGMENTS"),
        lookup("LEASEHOLD_COMPACTION_BYTES"),
    );
    let mut compaction = Compaction::default();
    let mut named = None;
    if let Some(text) = vars.get(segments)? {
        compaction.segments = parse_count(text).map_err(|r| bad(segments, r))? as u64;
        named = Some(segments);
    }
    if let Some(text) = vars.get(bytes)? {
        compaction.bytes = parse_bytes(text).map_err(|r| bad(bytes, r))?;
        named = named.or(Some(bytes));
    }
    if let Some(v) = named {
        out.push((v, Box::new(move |b| b.compaction(compaction))));
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
