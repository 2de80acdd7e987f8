//! The registry of the messages a replica knows: `(name, version)` → how to decode the body and
//! run it. Built once before the replica starts (`RuntimeConfig::messages`); the erased entry
//! point ([`Messages::prepare`]) decodes a request before anything is sent to the tenant, so a
//! message that is unknown or does not decode never reaches a ledger.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;

use leasehold::Error;
use leasehold::codec::{MessageCodecError, decode_message, encode_message};
use leasehold::ledger::{LedgerRead, LedgerTx};

use super::{ErasedRequest, MessageKind, TenantMessage, TenantQuery, check_idempotency_key};

/// The longest message name.
const MAX_NAME: usize = 128;

/// A command decoded and ready to run in a savepoint: its reply encoded, or why it failed (the
/// handler's error, or a reply that cannot be encoded: either rolls the savepoint back).
pub(crate) type CommandCall = Box<dyn FnOnce(&mut LedgerTx<'_>) -> Result<Vec<u8>, Error> + Send>;

/// A query decoded and ready to read.
pub(crate) type QueryCall = Box<dyn FnOnce(&LedgerRead<'_>) -> Result<Vec<u8>, Error> + Send>;

/// A request the registry decoded: what the tenant runs.
pub(crate) enum Prepared {
    /// A command, with the idempotency key its reply is stored under, if any.
    Command {
        /// The message's name (stored beside its reply).
        name: String,
        /// The caller's idempotency key.
        key: Option<String>,
        /// The decoded command.
        call: CommandCall,
    },
    /// A query.
    Query {
        /// The decoded query.
        call: QueryCall,
    },
}

/// One registered type.
trait Entry: Send + Sync {
    /// Command or query.
    fn kind(&self) -> MessageKind;
    /// Decodes `body` into a call, or says why it cannot.
    fn prepare(&self, req: &ErasedRequest) -> Result<Prepared, Error>;
}

/// A registered [`TenantMessage`].
struct CommandEntry<M>(PhantomData<fn() -> M>);

/// A registered [`TenantQuery`].
struct QueryEntry<Q>(PhantomData<fn() -> Q>);

impl<M: TenantMessage> Entry for CommandEntry<M> {
    fn kind(&self) -> MessageKind {
        MessageKind::Command
    }

    fn prepare(&self, req: &ErasedRequest) -> Result<Prepared, Error> {
        let msg: M = decode_message(&req.body).map_err(|e| undecodable(req, e))?;
        if let Some(key) = &req.idempotency_key {
            check_idempotency_key(key)?;
        }
        let call: CommandCall = Box::new(move |tx| {
            let reply = msg.handle(tx)?;
            Ok(encode_message(&reply)?)
        });
        Ok(Prepared::Command {
            name: M::NAME.to_string(),
            key: req.idempotency_key.clone(),
            call,
        })
    }
}

impl<Q: TenantQuery> Entry for QueryEntry<Q> {
    fn kind(&self) -> MessageKind {
        MessageKind::Query
    }

    fn prepare(&self, req: &ErasedRequest) -> Result<Prepared, Error> {
        let query: Q = decode_message(&req.body).map_err(|e| undecodable(req, e))?;
        let call: QueryCall = Box::new(move |read| {
            let reply = query.query(read)?;
            Ok(encode_message(&reply)?)
        });
        Ok(Prepared::Query { call })
    }
}

/// Why a body was refused: too large, or not the registered type's bytes.
fn undecodable(req: &ErasedRequest, e: MessageCodecError) -> Error {
    match e {
        MessageCodecError::TooLarge { .. } => Error::from(e),
        other => Error::BadMessage {
            reason: format!(
                "the body of {} version {} does not decode: {other}",
                req.name, req.version
            ),
        },
    }
}

/// The messages a replica knows, by name and schema version. Cheap to clone.
///
/// ```
/// # use leasehold::ledger::{LedgerError, LedgerRead, LedgerTx};
/// # use leasehold_actors::{Messages, TenantMessage, TenantQuery};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Deposit;
/// # impl TenantMessage for Deposit { type Reply = (); const NAME: &'static str = "bank.deposit";
/// #     fn handle(self, _: &mut LedgerTx<'_>) -> Result<(), LedgerError> { Ok(()) } }
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Balance;
/// # impl TenantQuery for Balance { type Reply = i64; const NAME: &'static str = "bank.balance";
/// #     fn query(self, _: &LedgerRead<'_>) -> Result<i64, LedgerError> { Ok(0) } }
/// let messages = Messages::new().command::<Deposit>()?.query::<Balance>()?;
/// // The same name twice is refused, before anything starts.
/// assert!(messages.clone().command::<Deposit>().is_err());
/// # Ok::<(), leasehold::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct Messages {
    /// `(name, version)` → the registered type.
    entries: Arc<BTreeMap<(String, u32), Arc<dyn Entry>>>,
}

impl std::fmt::Debug for Messages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.list()).finish()
    }
}

impl Messages {
    /// No message registered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the command `M`. Refused ([`Error::InvalidOption`], `messages`) if its name is
    /// not allowed, or if `(NAME, VERSION)` is registered already, or `NAME` as a query.
    pub fn command<M: TenantMessage>(self) -> Result<Self, Error> {
        self.register(
            M::NAME,
            M::VERSION,
            Arc::new(CommandEntry::<M>(PhantomData)),
        )
    }

    /// Registers the query `Q`, with the same rules as [`Messages::command`].
    pub fn query<Q: TenantQuery>(self) -> Result<Self, Error> {
        self.register(Q::NAME, Q::VERSION, Arc::new(QueryEntry::<Q>(PhantomData)))
    }

    /// Whether `(name, version)` is registered, and as what.
    pub fn kind_of(&self, name: &str, version: u32) -> Option<MessageKind> {
        self.entries
            .get(&(name.to_string(), version))
            .map(|e| e.kind())
    }

    /// Every registered message: name, version, kind, in order of name and version.
    pub fn list(&self) -> impl Iterator<Item = (&str, u32, MessageKind)> {
        self.entries
            .iter()
            .map(|((name, version), e)| (name.as_str(), *version, e.kind()))
    }

    /// Whether no message is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn register(mut self, name: &str, version: u32, entry: Arc<dyn Entry>) -> Result<Self, Error> {
        check_name(name)?;
        let refuse = |reason: String| {
            Err(Error::InvalidOption {
                name: "messages",
                reason,
            })
        };
        if self.entries.contains_key(&(name.to_string(), version)) {
            return refuse(format!("{name:?} version {version} is registered twice"));
        }
        let other_kind = self
            .list()
            .any(|(n, _, kind)| n == name && kind != entry.kind());
        if other_kind {
            return refuse(format!(
                "{name:?} is registered both as a command and as a query"
            ));
        }
        Arc::make_mut(&mut self.entries).insert((name.to_string(), version), entry);
        Ok(self)
    }

    /// Decodes `req` into what its tenant runs: [`Error::UnknownMessage`] for a name and
    /// version this replica does not register, [`Error::BadMessage`] (or
    /// [`Error::TooLarge`]) for a body that does not decode or a bad idempotency key. Nothing
    /// runs either way.
    pub(crate) fn prepare(&self, req: &ErasedRequest) -> Result<Prepared, Error> {
        let entry = self
            .entries
            .get(&(req.name.clone(), req.version))
            .ok_or_else(|| Error::UnknownMessage {
                name: req.name.clone(),
                version: req.version,
            })?;
        entry.prepare(req)
    }
}

/// Refuses a name that is empty, longer than [`MAX_NAME`] or outside `[A-Za-z0-9._:/-]`.
fn check_name(name: &str) -> Result<(), Error> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._:/-".contains(c);
    if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(allowed) {
        return Err(Error::InvalidOption {
            name: "messages",
            reason: format!(
                "a message name takes 1 to {MAX_NAME} characters of [A-Za-z0-9._:/-], not {name:?}"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold::ledger::LedgerError;

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Deposit(i64);

    impl TenantMessage for Deposit {
        type Reply = i64;
        const NAME: &'static str = "bank.deposit";
        fn handle(self, _: &mut LedgerTx<'_>) -> Result<i64, LedgerError> {
            Ok(self.0)
        }
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct DepositV2(i64, String);

    impl TenantMessage for DepositV2 {
        type Reply = i64;
        const NAME: &'static str = "bank.deposit";
        const VERSION: u32 = 2;
        fn handle(self, _: &mut LedgerTx<'_>) -> Result<i64, LedgerError> {
            Ok(self.0)
        }
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Balance;

    impl TenantQuery for Balance {
        type Reply = i64;
        const NAME: &'static str = "bank.balance";
        fn query(self, _: &LedgerRead<'_>) -> Result<i64, LedgerError> {
            Ok(0)
        }
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct BalanceNamedDeposit;

    impl TenantQuery for BalanceNamedDeposit {
        type Reply = i64;
        const NAME: &'static str = "bank.deposit";
        const VERSION: u32 = 3;
        fn query(self, _: &LedgerRead<'_>) -> Result<i64, LedgerError> {
            Ok(0)
        }
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct BadName;

    impl TenantQuery for BadName {
        type Reply = ();
        const NAME: &'static str = "bank deposit";
        fn query(self, _: &LedgerRead<'_>) -> Result<(), LedgerError> {
            Ok(())
        }
    }

    fn request(name: &str, version: u32, body: Vec<u8>) -> ErasedRequest {
        ErasedRequest {
            name: name.into(),
            version,
            idempotency_key: None,
            body,
        }
    }

    fn refused_option<T: std::fmt::Debug>(r: Result<T, Error>) -> String {
        match r {
            Err(Error::InvalidOption { name, reason }) => {
                assert_eq!(name, "messages");
                reason
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_name_is_registered_once_per_version_and_never_for_both_kinds() {
        let messages = Messages::new()
            .command::<Deposit>()
            .unwrap()
            .command::<DepositV2>()
            .unwrap()
            .query::<Balance>()
            .unwrap();
        assert!(refused_option(messages.clone().command::<Deposit>()).contains("twice"));
        assert!(refused_option(messages.clone().query::<BalanceNamedDeposit>()).contains("both"));
        assert!(refused_option(Messages::new().query::<BadName>()).contains("[A-Za-z0-9"));
        let listed: Vec<_> = messages.list().collect();
        assert_eq!(
            listed,
            [
                ("bank.balance", 1, MessageKind::Query),
                ("bank.deposit", 1, MessageKind::Command),
                ("bank.deposit", 2, MessageKind::Command),
            ]
        );
    }

    #[test]
    fn an_unknown_name_or_version_and_a_body_that_does_not_decode_are_refused_before_anything_runs()
    {
        let messages = Messages::new().command::<Deposit>().unwrap();
        let body = encode_message(&Deposit(5)).unwrap();
        assert!(matches!(
            messages.prepare(&request("bank.withdraw", 1, body.clone())),
            Err(Error::UnknownMessage { ref name, version: 1 }) if name == "bank.withdraw"
        ));
        assert!(matches!(
            messages.prepare(&request("bank.deposit", 2, body.clone())),
            Err(Error::UnknownMessage { version: 2, .. })
        ));
        let cut = &body[..body.len() - 1];
        assert!(matches!(
            messages.prepare(&request("bank.deposit", 1, cut.to_vec())),
            Err(Error::BadMessage { ref reason }) if reason.contains("bank.deposit version 1")
        ));
        let mut keyed = request("bank.deposit", 1, body.clone());
        keyed.idempotency_key = Some(String::new());
        assert!(matches!(
            messages.prepare(&keyed),
            Err(Error::BadMessage { .. })
        ));
        keyed.idempotency_key = Some("k".repeat(super::super::MAX_IDEMPOTENCY_KEY + 1));
        assert!(matches!(
            messages.prepare(&keyed),
            Err(Error::BadMessage { .. })
        ));
        assert!(matches!(
            messages.prepare(&request("bank.deposit", 1, body)),
            Ok(Prepared::Command { .. })
        ));
    }
}
