//! Typed messages: what a host sends to a tenant's address instead of a closure.
//!
//! A **command** ([`TenantMessage`]) runs in the tenant's group commit exactly as a closure
//! given to `TenantRef::run` does (its own savepoint, fenced by the lease, acknowledged with its
//! batch); a **query** ([`TenantQuery`]) reads on a read connection of its own beside the write
//! batch. Both are serde types with a serde reply, a stable `NAME` and a schema `VERSION`,
//! registered once when the replica starts ([`Messages`]): every replica of a fleet registers
//! the same set, so a message can run on whichever replica holds its tenant.
//!
//! ```text
//!   host: send(addr, Deposit { .. })
//!     encode (codec::encode_message) ──> ErasedRequest { name, version, idempotency_key, body }
//!       ──> the registry: (name, version) → decode the body, or UnknownMessage / BadMessage
//!         ──> the tenant: run (command) or read (query), reply encoded ──> Vec<u8>
//!   host: decode the reply (codec::decode_message) ──> Deposit::Reply
//! ```
//!
//! The erased form is what a replica hands another one: bytes in, bytes out, the registry on
//! the receiving side deciding what they mean. Nothing runs for a message the registry does not
//! know or whose body does not decode. A closure cannot travel; `run(closure)` stays the
//! in-process primitive.

use leasehold::Error;
use leasehold::ledger::{LedgerError, LedgerRead, LedgerTx};
use serde::Serialize;
use serde::de::DeserializeOwned;

mod registry;

pub use registry::Messages;
pub(crate) use registry::{CommandCall, Prepared, QueryCall};

/// The longest idempotency key a command may carry, in bytes.
pub const MAX_IDEMPOTENCY_KEY: usize = 256;

/// A command a host sends to a tenant: it may write, and runs in the tenant's group commit like
/// a closure given to `TenantRef::run` — its own savepoint, committed only if the lease still
/// holds, acknowledged with its batch (on `Durability::Shipped`: once its segment is in the log).
///
/// ```
/// use leasehold::ledger::{LedgerError, LedgerTx};
/// use leasehold_actors::TenantMessage;
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Deposit {
///     account: String,
///     cents: i64,
/// }
///
/// impl TenantMessage for Deposit {
///     type Reply = i64; // the balance after the deposit
///     const NAME: &'static str = "bank.deposit";
///     fn handle(self, ledger: &mut LedgerTx<'_>) -> Result<i64, LedgerError> {
///         ledger.execute(
///             "CREATE TABLE IF NOT EXISTS accounts (name TEXT PRIMARY KEY, cents INTEGER NOT NULL)",
///             [],
///         )?;
///         ledger.execute(
///             "INSERT INTO accounts VALUES (?1, ?2)
///              ON CONFLICT (name) DO UPDATE SET cents = cents + excluded.cents",
///             (&self.account, self.cents),
///         )?;
///         ledger.query_row("SELECT cents FROM accounts WHERE name = ?1", [&self.account], |r| {
///             r.get(0)
///         })
///     }
/// }
/// ```
pub trait TenantMessage: Serialize + DeserializeOwned + Send + 'static {
    /// What the command answers; encoded with the same codec as the message.
    type Reply: Serialize + DeserializeOwned + Send + 'static;
    /// The message's name, stable across releases (`bank.deposit`): 1–128 characters of
    /// `[A-Za-z0-9._:/-]`.
    const NAME: &'static str;
    /// The schema version of the message's body and reply. A replica knows a message by name
    /// and version; change it when the body or reply changes shape (and keep the old type
    /// registered while replicas that send it may still run).
    const VERSION: u32 = 1;

    /// Runs the command in the tenant's ledger. An `Err` (or a panic) rolls back only this
    /// command's writes, and nothing is stored for its idempotency key: a retry runs it again.
    fn handle(self, ledger: &mut LedgerTx<'_>) -> Result<Self::Reply, LedgerError>;
}

/// A read-only message: it runs on a read connection of its own beside the tenant's write batch
/// (a slow report does not hold up writes), on the state committed when it began, and never
/// on a replica whose lease does not hold. Its reply leaves only once everything it could have
/// seen is acknowledged (docs/guarantees.md, promise 11).
pub trait TenantQuery: Serialize + DeserializeOwned + Send + 'static {
    /// What the query answers.
    type Reply: Serialize + DeserializeOwned + Send + 'static;
    /// The query's name; the same rules as [`TenantMessage::NAME`], and no command may share it.
    const NAME: &'static str;
    /// The schema version of its body and reply.
    const VERSION: u32 = 1;

    /// Reads the tenant's ledger. Every write is refused.
    fn query(self, ledger: &LedgerRead<'_>) -> Result<Self::Reply, LedgerError>;
}

/// Whether a registered message writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    /// A [`TenantMessage`]: runs in the group commit.
    Command,
    /// A [`TenantQuery`]: reads on a read connection.
    Query,
}

/// The markers that tell [`Sendable`] apart for commands and queries (the type is inferred:
/// hosts never name them).
pub mod kind {
    /// The kind of every [`TenantMessage`](super::TenantMessage).
    #[derive(Debug)]
    pub enum Command {}
    /// The kind of every [`TenantQuery`](super::TenantQuery).
    #[derive(Debug)]
    pub enum Query {}
}

mod sealed {
    /// Only the runtime's blanket implementations make a type [`super::Sendable`].
    pub trait Sealed<K> {}
    impl<M: super::TenantMessage> Sealed<super::kind::Command> for M {}
    impl<Q: super::TenantQuery> Sealed<super::kind::Query> for Q {}
}

/// What `Supervisor::send` takes: every [`TenantMessage`] (kind [`kind::Command`]) and every
/// [`TenantQuery`] (kind [`kind::Query`]). Implemented by the runtime only.
pub trait Sendable<K>: sealed::Sealed<K> + Serialize + Send + 'static {
    /// The reply.
    type Reply: DeserializeOwned + Send + 'static;
    /// The registered name.
    const NAME: &'static str;
    /// The schema version.
    const VERSION: u32;
    /// Command or query.
    const KIND: MessageKind;
}

impl<M: TenantMessage> Sendable<kind::Command> for M {
    type Reply = M::Reply;
    const NAME: &'static str = M::NAME;
    const VERSION: u32 = M::VERSION;
    const KIND: MessageKind = MessageKind::Command;
}

impl<Q: TenantQuery> Sendable<kind::Query> for Q {
    type Reply = Q::Reply;
    const NAME: &'static str = Q::NAME;
    const VERSION: u32 = Q::VERSION;
    const KIND: MessageKind = MessageKind::Query;
}

/// A message with its type erased: what one replica hands another, and what the registry of the
/// replica that runs it decodes. Bytes are the codec's (`leasehold::codec::encode_message`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErasedRequest {
    /// The registered name.
    pub name: String,
    /// The schema version the sender encoded.
    pub version: u32,
    /// The caller's idempotency key (commands): a second delivery with the same key returns
    /// the reply stored with the first, without running. Ignored for queries.
    pub idempotency_key: Option<String>,
    /// The encoded message.
    pub body: Vec<u8>,
}

impl ErasedRequest {
    /// The request of a typed message: its body encoded, at most `codec::MESSAGE_LIMIT` bytes.
    pub fn of<K, M: Sendable<K>>(msg: &M, idempotency_key: Option<String>) -> Result<Self, Error> {
        Ok(Self {
            name: M::NAME.to_string(),
            version: M::VERSION,
            idempotency_key,
            body: leasehold::codec::encode_message(msg)?,
        })
    }
}

/// Refuses an idempotency key that is empty or longer than [`MAX_IDEMPOTENCY_KEY`].
pub(crate) fn check_idempotency_key(key: &str) -> Result<(), Error> {
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY {
        return Err(Error::BadMessage {
            reason: format!(
                "an idempotency key takes 1 to {MAX_IDEMPOTENCY_KEY} bytes, not {}",
                key.len()
            ),
        });
    }
    Ok(())
}
