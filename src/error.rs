//! The crate error: one variant per thing a caller can act on, each with a stable code string.
//!
//! Every module has its own `thiserror` enum ([`IdError`], [`StoreError`], [`LeaseError`],
//! [`LedgerError`], [`ImageError`], [`LogError`], [`PathError`]); they map into [`Error`] here. Errors compare
//! with `==` so tests can assert on them.

use crate::durable::StoreError;
use crate::ids::IdError;
use crate::image::ImageError;
use crate::layout::ImageRef;
use crate::lease::LeaseError;
use crate::ledger::LedgerError;
use crate::log::LogError;
use crate::paths::PathError;

/// Shorthand for results with the crate [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, in terms a caller can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The lease was not held when the call started or was lost before it committed. Nothing of
    /// the call was committed. Another replica may own the tenant now.
    #[error("fenced: this replica no longer holds the lease on {key}; nothing was committed")]
    Fenced {
        /// The tenant's lease key.
        key: String,
    },
    /// The tenant is being handed off, abandoned or forgotten and takes no new calls.
    #[error("draining: tenant {key} is {state} and takes no new calls")]
    Draining {
        /// The tenant's lease key.
        key: String,
        /// The state that refused the call (`draining`, `flushing`, `forgetting`…).
        state: String,
    },
    /// A handoff waited `after_ms` for admitted work to finish, gave up, and the tenant serves again.
    #[error(
        "drain timeout: tenant {key} still had work running after {after_ms} ms; it serves again"
    )]
    DrainTimeout {
        /// The tenant's lease key.
        key: String,
        /// How long the drain waited.
        after_ms: u64,
    },
    /// An id was refused; nothing was touched.
    #[error("invalid id: {0}")]
    InvalidId(#[from] IdError),
    /// A path or durable key or prefix was refused; nothing was touched.
    #[error("invalid path: {0}")]
    InvalidPath(String),
    /// An option is out of range; nothing was started.
    #[error("invalid option {name}: {reason}")]
    InvalidOption {
        /// The option's name, as in the configuration.
        name: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// Another replica holds a live lease on the tenant.
    #[error("lease held: {key} is held by {owner} at epoch {epoch}")]
    LeaseHeld {
        /// The tenant's lease key.
        key: String,
        /// The replica that holds it.
        owner: String,
        /// Its epoch.
        epoch: u64,
    },
    /// A lease store or durable store call failed, timed out or could not reach its backend.
    #[error("store: {0}")]
    Store(StoreError),
    /// An image, manifest or record failed its checks.
    #[error("corrupt: {0}")]
    Corrupt(String),
    /// SQLite refused or failed the statement, or the host's closure returned an error; its
    /// savepoint was rolled back.
    #[error("ledger: {0}")]
    Ledger(LedgerError),
    /// The tenant or the runtime has stopped and can no longer answer.
    #[error("closed: {0}")]
    Closed(String),
    /// Another replica holds the state root (its lock file): two replicas never share one.
    /// Nothing was started.
    #[error("state root locked: {root} is in use by {holder}")]
    StateRootLocked {
        /// The lock file of the state root.
        root: String,
        /// Who holds it (replica and process id), `unknown` if it could not be read.
        holder: String,
    },
    /// This replica has `limit` tenants open (`max_open`, derived from the descriptor limit):
    /// more would leave too few descriptors to flush them. Nothing was opened; close or hand
    /// off a tenant, or open it on another replica.
    #[error("open limit: {limit} tenants are open on this replica (max_open); none was opened")]
    OpenLimit {
        /// The replica's `max_open`.
        limit: usize,
    },
    /// A publish offered an image not newer than the head (docs/guarantees.md, promise 4: the
    /// head only moves forward). The lease is still held and nothing changed: a newer image is
    /// already published, typically because this publish landed after a newer one.
    #[error("stale head: {key} is already at {head:?}; {image:?} was not published")]
    StaleHead {
        /// The tenant's lease key.
        key: String,
        /// The head, at or past `image`.
        head: ImageRef,
        /// The image that was refused.
        image: ImageRef,
    },
    /// The lease store refused the credentials of its URL (SQLSTATE 28000, 28P01); nothing was
    /// started. The message never holds the password.
    #[error("authentication failed for user {user:?}: {reason}")]
    AuthFailed {
        /// The user the URL names.
        user: String,
        /// What the server said.
        reason: String,
    },
    /// A batch's segment of the change log was not shipped within its deadline, or the lease
    /// store did not confirm its log tip: **the outcome is unknown**. The writes may be in the
    /// durable log (a put or a tip move that landed late) or not; the tenure ended and the next
    /// open restores whatever the log holds. Retry with the same idempotency keys, which makes
    /// the retry safe either way (docs/guarantees.md, the change log).
    #[error(
        "unshipped: the segment of tenant {key} was not confirmed ({reason}); the outcome is unknown, retry with the same idempotency keys"
    )]
    Unshipped {
        /// The tenant's lease key.
        key: String,
        /// What failed.
        reason: String,
    },
    /// A run changed more pages than one batch of the change log may take (half of the
    /// runtime's `segment_limit`, so that every committed batch fits one segment): it was rolled
    /// back before `COMMIT` and nothing of it was committed or acknowledged, in every logged mode
    /// (docs/guarantees.md, "Limits"). Split it into smaller runs; the tenant serves on.
    #[error(
        "batch too large: its pages take {bytes} bytes as a segment of the change log, more than the {limit} one batch may take; nothing of it was committed: split it into smaller runs"
    )]
    BatchTooLarge {
        /// The bytes its pages take as a segment (measured, never less than they do).
        bytes: u64,
        /// The most one batch may take.
        limit: u64,
    },
    /// An `Async` tenant has `pending_bytes` committed and not yet in the change log, as many as
    /// it may let wait (`async_pending_limit`): the run was refused before it ran, nothing of it
    /// was committed. The log is behind the writes; retry shortly (docs/guarantees.md, the
    /// numbers).
    #[error(
        "log behind: tenant {key} has {pending_bytes} bytes committed and not yet shipped, at its limit of {limit}; nothing was run: retry shortly"
    )]
    LogBehind {
        /// The tenant's lease key.
        key: String,
        /// Bytes committed and not yet in the change log (pending and in flight).
        pending_bytes: u64,
        /// `async_pending_limit`.
        limit: u64,
    },
    /// The database the lease store's URL names does not exist (SQLSTATE 3D000); nothing was
    /// started.
    #[error("unknown database {database:?}: {reason}")]
    UnknownDatabase {
        /// The database the URL names.
        database: String,
        /// What the server said.
        reason: String,
    },
    /// A store opened as existing only (`leasehold::stores`, `IfMissing::Refuse`: what an
    /// operator command does) is not there: a lease file, a durable directory or a lease table
    /// that does not exist. Nothing was created.
    #[error("missing {store}: {location} does not exist; nothing was created")]
    StoreMissing {
        /// Which store (`lease file`, `durable directory`, `lease table`).
        store: &'static str,
        /// Where it was looked for (a path, a table name; never a password).
        location: String,
    },
    /// A directory or file that holds tenants' data (the state root, the durable directory, the
    /// lease file) lets the group or others in: leasehold keeps its files private (directories
    /// 0700, files 0600) and refuses to start on one that is not, unless told to accept it
    /// (`accept_shared_permissions`, docs/operations.md "File permissions"). Nothing was started.
    #[error(
        "not private: {path} has mode {mode:04o}, which lets the group or others in; make it private (chmod go-rwx) or accept it knowingly (accept_shared_permissions)"
    )]
    NotPrivate {
        /// The path.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// No message of this name and schema version is registered on the replica that received
    /// it (every replica of a fleet registers the same set): nothing ran, nothing was written.
    #[error(
        "unknown message {name:?} version {version}: this replica registers no such message; nothing ran"
    )]
    UnknownMessage {
        /// The message's name.
        name: String,
        /// Its schema version.
        version: u32,
    },
    /// A message could not be taken as it came: its body does not decode as the registered
    /// type, its idempotency key is not allowed, or the key was used before for another
    /// message. Nothing ran, nothing was written.
    #[error("bad message: {reason}; nothing ran")]
    BadMessage {
        /// What is wrong with it.
        reason: String,
    },
    /// A message body or reply takes more bytes than a message may (`codec::MESSAGE_LIMIT`).
    /// A body: nothing ran. A reply: its command was rolled back, nothing was written.
    #[error(
        "too large: {bytes} bytes, more than the {limit} a message may take; nothing was written"
    )]
    TooLarge {
        /// How many bytes it took (at least).
        bytes: u64,
        /// The most a message may take.
        limit: u64,
    },
    /// A message's deadline passed before its reply came. With `outcome_unknown` false nothing
    /// of it was written (it never reached its tenant, or it is a query); with
    /// `outcome_unknown` true it reached its tenant and **the outcome is unknown**: it may have
    /// run and may still be committed (retry with the same idempotency key, which makes the
    /// retry safe either way).
    #[error(
        "deadline exceeded: no reply from tenant {key} within {after_ms} ms ({})",
        reached(.outcome_unknown)
    )]
    DeadlineExceeded {
        /// The tenant's lease key.
        key: String,
        /// The deadline the caller gave.
        after_ms: u64,
        /// Whether a command had reached its tenant (it may have run and be committed).
        outcome_unknown: bool,
    },
}

/// How a [`Error::DeadlineExceeded`] reads, by whether its outcome is unknown.
fn reached(outcome_unknown: &bool) -> &'static str {
    if *outcome_unknown {
        "it reached the tenant and may have run; the outcome is unknown"
    } else {
        "nothing of it was written"
    }
}

impl Error {
    /// A stable, machine-readable code for this error (`LEASEHOLD_FENCED`, …).
    pub fn code(&self) -> &'static str {
        match self {
            Error::Fenced { .. } => "LEASEHOLD_FENCED",
            Error::Draining { .. } => "LEASEHOLD_DRAINING",
            Error::DrainTimeout { .. } => "LEASEHOLD_DRAIN_TIMEOUT",
            Error::InvalidId(_) => "LEASEHOLD_INVALID_ID",
            Error::InvalidPath(_) => "LEASEHOLD_INVALID_PATH",
            Error::InvalidOption { .. } => "LEASEHOLD_INVALID_OPTION",
            Error::LeaseHeld { .. } => "LEASEHOLD_LEASE_HELD",
            Error::Store(_) => "LEASEHOLD_STORE",
            Error::Corrupt(_) => "LEASEHOLD_CORRUPT",
            Error::Ledger(_) => "LEASEHOLD_LEDGER",
            Error::Closed(_) => "LEASEHOLD_CLOSED",
            Error::StateRootLocked { .. } => "LEASEHOLD_STATE_ROOT_LOCKED",
            Error::OpenLimit { .. } => "LEASEHOLD_OPEN_LIMIT",
            Error::StaleHead { .. } => "LEASEHOLD_STALE_HEAD",
            Error::AuthFailed { .. } => "LEASEHOLD_AUTH_FAILED",
            Error::UnknownDatabase { .. } => "LEASEHOLD_UNKNOWN_DATABASE",
            Error::Unshipped { .. } => "LEASEHOLD_UNSHIPPED",
            Error::BatchTooLarge { .. } => "LEASEHOLD_BATCH_TOO_LARGE",
            Error::LogBehind { .. } => "LEASEHOLD_LOG_BEHIND",
            Error::StoreMissing { .. } => "LEASEHOLD_STORE_MISSING",
            Error::NotPrivate { .. } => "LEASEHOLD_NOT_PRIVATE",
            Error::UnknownMessage { .. } => "LEASEHOLD_UNKNOWN_MESSAGE",
            Error::BadMessage { .. } => "LEASEHOLD_BAD_MESSAGE",
            Error::TooLarge { .. } => "LEASEHOLD_TOO_LARGE",
            Error::DeadlineExceeded { .. } => "LEASEHOLD_DEADLINE_EXCEEDED",
        }
    }

    /// True for the refusals of a tenant that is leaving this replica ([`Error::Draining`]).
    pub fn is_draining(&self) -> bool {
        matches!(self, Error::Draining { .. })
    }

    /// True when the lease was not held ([`Error::Fenced`]).
    pub fn is_fenced(&self) -> bool {
        matches!(self, Error::Fenced { .. })
    }

    /// True when a store call's outcome is unknown: it may have applied, or may still apply
    /// later (a timeout always; see [`LeaseError::outcome_unknown`]). The caller must not report
    /// "nothing happened"; it reads back or retries (docs/guarantees.md, "Late landings").
    pub fn is_outcome_unknown(&self) -> bool {
        match self {
            Error::Store(e) => crate::lease::store_outcome_unknown(e),
            Error::Unshipped { .. } => true,
            Error::DeadlineExceeded {
                outcome_unknown, ..
            } => *outcome_unknown,
            _ => false,
        }
    }
}

impl From<crate::codec::MessageCodecError> for Error {
    fn from(e: crate::codec::MessageCodecError) -> Self {
        match e {
            crate::codec::MessageCodecError::TooLarge { bytes, limit } => Error::TooLarge {
                bytes: bytes as u64,
                limit: limit as u64,
            },
            other => Error::BadMessage {
                reason: other.to_string(),
            },
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::InvalidKey { .. } => Error::InvalidPath(e.to_string()),
            StoreError::Missing { store, location } => Error::StoreMissing { store, location },
            StoreError::NotPrivate { path, mode } => Error::NotPrivate { path, mode },
            other => Error::Store(other),
        }
    }
}

impl From<LeaseError> for Error {
    fn from(e: LeaseError) -> Self {
        match e {
            LeaseError::Held { key, owner, epoch } => Error::LeaseHeld { key, owner, epoch },
            LeaseError::NotHeld { key, .. } => Error::Fenced { key },
            LeaseError::Stale { key, head, image } => Error::StaleHead { key, head, image },
            // The segment's move was refused: the batch is not in the log (docs/guarantees.md,
            // "The log tip").
            LeaseError::TipMoved { ref key, .. } | LeaseError::TipOutOfOrder { ref key, .. } => {
                Error::Unshipped {
                    key: key.clone(),
                    reason: e.to_string(),
                }
            }
            LeaseError::Store(s) => s.into(),
        }
    }
}

impl From<LedgerError> for Error {
    fn from(e: LedgerError) -> Self {
        match e {
            LedgerError::TooLarge { bytes, limit } => Error::BatchTooLarge { bytes, limit },
            other => Error::Ledger(other),
        }
    }
}

impl From<ImageError> for Error {
    fn from(e: ImageError) -> Self {
        match e {
            ImageError::Store(s) => s.into(),
            ImageError::Ledger(l) => Error::Ledger(l),
            ImageError::Fenced { key } => Error::Fenced {
                // `<org>/<tenant>/e…/snap-….db`: the tenant is the first two segments.
                key: key.splitn(3, '/').take(2).collect::<Vec<_>>().join("/"),
            },
            other => Error::Corrupt(other.to_string()),
        }
    }
}

impl From<LogError> for Error {
    fn from(e: LogError) -> Self {
        match e {
            LogError::Store(s) => s.into(),
            LogError::Lease(l) => l.into(),
            LogError::Image(i) => i.into(),
            LogError::OutsideRetention { .. } => Error::InvalidOption {
                name: "target",
                reason: e.to_string(),
            },
            LogError::Destination { .. } => Error::InvalidPath(e.to_string()),
            LogError::Corrupt { .. } | LogError::OutOfChain { .. } | LogError::Io(_) => {
                Error::Corrupt(e.to_string())
            }
        }
    }
}

impl From<PathError> for Error {
    fn from(e: PathError) -> Self {
        match e {
            PathError::Locked { path, holder } => Error::StateRootLocked { root: path, holder },
            PathError::NotPrivate { path, mode } => Error::NotPrivate { path, mode },
            other => Error::InvalidPath(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_and_distinct() {
        let all = [
            Error::Fenced { key: "k".into() },
            Error::Draining {
                key: "k".into(),
                state: "draining".into(),
            },
            Error::DrainTimeout {
                key: "k".into(),
                after_ms: 1,
            },
            Error::InvalidId(IdError::Empty { kind: "org" }),
            Error::InvalidPath("p".into()),
            Error::InvalidOption {
                name: "ttl",
                reason: "zero".into(),
            },
            Error::LeaseHeld {
                key: "k".into(),
                owner: "o".into(),
                epoch: 1,
            },
            Error::Store(StoreError::Timeout {
                op: "get",
                after_ms: 5,
            }),
            Error::Corrupt("c".into()),
            Error::Ledger(LedgerError::Host("h".into())),
            Error::Closed("c".into()),
            Error::StateRootLocked {
                root: "r".into(),
                holder: "h".into(),
            },
            Error::OpenLimit { limit: 1 },
            Error::StaleHead {
                key: "k".into(),
                head: image(2),
                image: image(1),
            },
            Error::AuthFailed {
                user: "u".into(),
                reason: "r".into(),
            },
            Error::UnknownDatabase {
                database: "d".into(),
                reason: "r".into(),
            },
            Error::Unshipped {
                key: "k".into(),
                reason: "r".into(),
            },
            Error::BatchTooLarge { bytes: 2, limit: 1 },
            Error::LogBehind {
                key: "k".into(),
                pending_bytes: 2,
                limit: 1,
            },
            Error::StoreMissing {
                store: "lease file",
                location: "l".into(),
            },
            Error::NotPrivate {
                path: "p".into(),
                mode: 0o755,
            },
            Error::UnknownMessage {
                name: "n".into(),
                version: 1,
            },
            Error::BadMessage { reason: "r".into() },
            Error::TooLarge { bytes: 2, limit: 1 },
            Error::DeadlineExceeded {
                key: "k".into(),
                after_ms: 1,
                outcome_unknown: true,
            },
        ];
        let mut codes: Vec<_> = all.iter().map(Error::code).collect();
        assert!(codes.iter().all(|c| c.starts_with("LEASEHOLD_")));
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), all.len());
        assert_eq!(all[0].code(), "LEASEHOLD_FENCED");
    }

    fn image(seq: u64) -> ImageRef {
        ImageRef {
            epoch: 1,
            seq,
            sha256: "0".repeat(64),
        }
    }

    #[test]
    fn a_stale_publish_is_not_a_lost_lease_and_a_timeout_is_an_unknown_outcome() {
        let stale = Error::from(LeaseError::Stale {
            key: "k".into(),
            head: image(2),
            image: image(1),
        });
        assert!(!stale.is_fenced());
        assert_eq!(stale.code(), "LEASEHOLD_STALE_HEAD");
        assert!(!stale.is_outcome_unknown());
        let timeout = StoreError::Timeout {
            op: "publish_head",
            after_ms: 5,
        };
        assert!(LeaseError::Store(timeout.clone()).outcome_unknown());
        assert!(Error::from(LeaseError::Store(timeout)).is_outcome_unknown());
        let refused = LeaseError::NotHeld {
            key: "k".into(),
            owner: "o".into(),
            epoch: 1,
        };
        assert!(!refused.outcome_unknown());
        assert!(!Error::from(refused).is_outcome_unknown());
    }

    #[test]
    fn a_refused_tip_move_is_unshipped_and_the_lease_refusal_itself_is_definite() {
        let to = crate::layout::LogPos { epoch: 2, seq: 5 };
        let moved = LeaseError::TipMoved {
            key: "acme/t1".into(),
            tip: Some(crate::layout::LogPos { epoch: 2, seq: 6 }),
            from: Some(crate::layout::LogPos { epoch: 2, seq: 4 }),
            to,
        };
        assert!(!moved.outcome_unknown(), "nothing changed in the store");
        let unshipped = Error::from(moved);
        assert_eq!(unshipped.code(), "LEASEHOLD_UNSHIPPED");
        assert!(
            matches!(&unshipped, Error::Unshipped { key, reason } if key == "acme/t1" && reason.contains("log tip")),
            "{unshipped:?}"
        );
        let gap = LeaseError::TipOutOfOrder {
            key: "acme/t1".into(),
            epoch: 2,
            from: None,
            to,
        };
        assert!(!gap.outcome_unknown());
        assert_eq!(Error::from(gap).code(), "LEASEHOLD_UNSHIPPED");
    }

    #[test]
    fn a_message_refused_before_it_ran_is_a_known_outcome_and_a_lapsed_delivery_is_not() {
        let never = Error::DeadlineExceeded {
            key: "k".into(),
            after_ms: 5,
            outcome_unknown: false,
        };
        assert!(!never.is_outcome_unknown());
        let maybe = Error::DeadlineExceeded {
            key: "k".into(),
            after_ms: 5,
            outcome_unknown: true,
        };
        assert!(maybe.is_outcome_unknown());
        for refused in [
            Error::UnknownMessage {
                name: "n".into(),
                version: 2,
            },
            Error::BadMessage { reason: "r".into() },
            Error::TooLarge { bytes: 2, limit: 1 },
        ] {
            assert!(!refused.is_outcome_unknown(), "{refused:?}");
        }
        let big = crate::codec::MessageCodecError::TooLarge { bytes: 9, limit: 8 };
        assert_eq!(Error::from(big).code(), "LEASEHOLD_TOO_LARGE");
        let cut = crate::codec::MessageCodecError::Trailing { extra: 1 };
        assert_eq!(Error::from(cut).code(), "LEASEHOLD_BAD_MESSAGE");
    }
}
