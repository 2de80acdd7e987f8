//! Errors on the wire: what a refusal becomes in a [`WireError`] (its stable code, its text,
//! the holder it names) and back. The transport's own refusals — before anything is decoded —
//! have codes of their own here; every other code is the [`Error::code`] of what the receiving
//! replica answered.

use leasehold::Error;
use leasehold::codec::{EnvelopeError, WireDetail, WireError};

/// The body is larger than the limit (413): refused before it was read.
pub(crate) const CODE_TOO_LARGE: &str = "LEASEHOLD_TOO_LARGE";
/// The sender is not of the fleet: no or a wrong MAC (401).
pub(crate) const CODE_UNAUTHENTICATED: &str = "LEASEHOLD_UNAUTHENTICATED";
/// The body is not an envelope: cut short, bytes after it, undecodable (400).
pub(crate) const CODE_BAD_MESSAGE: &str = "LEASEHOLD_BAD_MESSAGE";
/// The envelope is of a format this replica does not know (400): a newer build sent it.
pub(crate) const CODE_UNKNOWN_FORMAT: &str = "LEASEHOLD_UNKNOWN_FORMAT";
/// The message's name and schema version are not registered on the receiving replica.
pub(crate) const CODE_UNKNOWN_MESSAGE: &str = "LEASEHOLD_UNKNOWN_MESSAGE";
/// The message's deadline passed on the receiving replica.
pub(crate) const CODE_DEADLINE_EXCEEDED: &str = "LEASEHOLD_DEADLINE_EXCEEDED";

/// A refusal of the transport itself.
pub(crate) fn refusal(code: &str, message: impl Into<String>) -> WireError {
    WireError {
        code: code.to_owned(),
        message: message.into(),
        holder: None,
        detail: None,
    }
}

/// A body of `bytes` refused for being larger than `limit`.
pub(crate) fn too_large(bytes: usize, limit: usize, message: impl Into<String>) -> WireError {
    WireError {
        detail: Some(WireDetail::Size {
            bytes: bytes as u64,
            limit: limit as u64,
        }),
        ..refusal(CODE_TOO_LARGE, message)
    }
}

/// Why a body that passed the MAC is not an envelope, as a refusal.
pub(crate) fn undecodable(e: &EnvelopeError) -> WireError {
    match e {
        EnvelopeError::UnknownFormat { .. } => refusal(CODE_UNKNOWN_FORMAT, e.to_string()),
        EnvelopeError::TooLarge { bytes, limit } => too_large(*bytes, *limit, e.to_string()),
        _ => refusal(CODE_BAD_MESSAGE, e.to_string()),
    }
}

/// What the receiving replica answered, for the wire: its code, its text, and what
/// [`from_wire`] needs to make the same error again on the sender's side.
pub(crate) fn to_wire(e: &Error) -> WireError {
    let (holder, detail) = match e {
        Error::Moved { holder, .. } => (Some(holder.clone()), None),
        Error::ForwardFailed { to, .. } => (Some(to.clone()), None),
        Error::Unavailable {
            holder,
            lease_left_ms,
            ..
        } => (
            Some(holder.clone()),
            Some(WireDetail::Lease {
                epoch: 0,
                lease_left_ms: *lease_left_ms,
            }),
        ),
        Error::LeaseHeld { owner, epoch, .. } => (
            Some(owner.clone()),
            Some(WireDetail::Lease {
                epoch: *epoch,
                lease_left_ms: 0,
            }),
        ),
        Error::TooLarge { bytes, limit } => (
            None,
            Some(WireDetail::Size {
                bytes: *bytes,
                limit: *limit,
            }),
        ),
        Error::DeadlineExceeded {
            after_ms,
            outcome_unknown,
            ..
        } => (
            None,
            Some(WireDetail::Deadline {
                after_ms: *after_ms,
                outcome_unknown: *outcome_unknown,
            }),
        ),
        Error::Refused { code, message } => return refusal(code, message.clone()),
        _ => (None, None),
    };
    let message = match e {
        // The variant is made again from its reason alone.
        Error::BadMessage { reason } => reason.clone(),
        Error::Draining { state, .. } => state.clone(),
        Error::Closed(why) => why.clone(),
        Error::Unauthenticated { reason } => reason.clone(),
        // Outcomes unknown at the holder: made again on the sender's side (`from_wire`).
        Error::Unshipped { reason, .. } | Error::ForwardFailed { reason, .. } => reason.clone(),
        other => other.to_string(),
    };
    WireError {
        code: e.code().to_owned(),
        message,
        holder,
        detail,
    }
}

/// The message a refusal came back for: what the sender knows of it that the wire need not
/// carry back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent<'a> {
    /// The tenant's lease key.
    pub(crate) key: &'a str,
    /// The message's registered name.
    pub(crate) name: &'a str,
    /// Its schema version.
    pub(crate) version: u32,
}

/// A refusal that came back for the message `sent`, as the error the receiver's own caller
/// would have heard; a code this build has no variant for is [`Error::Refused`].
pub(crate) fn from_wire(sent: Sent<'_>, w: WireError) -> Error {
    let key = sent.key.to_owned();
    let (epoch, lease_left_ms) = match w.detail {
        Some(WireDetail::Lease {
            epoch,
            lease_left_ms,
        }) => (epoch, lease_left_ms),
        _ => (0, 0),
    };
    match (w.code.as_str(), w.holder) {
        ("LEASEHOLD_MOVED", Some(holder)) => Error::Moved { key, holder },
        ("LEASEHOLD_UNAVAILABLE", Some(holder)) => Error::Unavailable {
            key,
            holder,
            lease_left_ms,
        },
        ("LEASEHOLD_LEASE_HELD", Some(owner)) => Error::LeaseHeld { key, owner, epoch },
        (CODE_UNAUTHENTICATED, _) => Error::Unauthenticated { reason: w.message },
        ("LEASEHOLD_FENCED", _) => Error::Fenced { key },
        ("LEASEHOLD_DRAINING", _) => Error::Draining {
            key,
            state: w.message,
        },
        ("LEASEHOLD_CLOSED", _) => Error::Closed(w.message),
        // A command that may have run at the holder may have run: still an unknown outcome
        // for the sender's caller, who retries with the same key.
        ("LEASEHOLD_UNSHIPPED", _) => Error::Unshipped {
            key,
            reason: w.message,
        },
        ("LEASEHOLD_FORWARD_FAILED", holder) => Error::ForwardFailed {
            key,
            to: holder.unwrap_or_default(),
            reason: w.message,
        },
        (CODE_UNKNOWN_MESSAGE, _) => Error::UnknownMessage {
            name: sent.name.to_owned(),
            version: sent.version,
        },
        (CODE_BAD_MESSAGE, _) => Error::BadMessage { reason: w.message },
        (CODE_TOO_LARGE, _) => match w.detail {
            Some(WireDetail::Size { bytes, limit }) => Error::TooLarge { bytes, limit },
            _ => Error::TooLarge { bytes: 0, limit: 0 },
        },
        (CODE_DEADLINE_EXCEEDED, _) => match w.detail {
            Some(WireDetail::Deadline {
                after_ms,
                outcome_unknown,
            }) => Error::DeadlineExceeded {
                key,
                after_ms,
                outcome_unknown,
            },
            // Without its figures the receiver's word cannot be weighed: the outcome is
            // unknown, which a retry with the same key makes safe.
            _ => Error::DeadlineExceeded {
                key,
                after_ms: 0,
                outcome_unknown: true,
            },
        },
        (code, _) => Error::Refused {
            code: code.to_owned(),
            message: w.message,
        },
    }
}

/// Whether a refusal from the holder means "the tenant is not (or no longer) there": nothing
/// ran, and the sender routes the message again.
pub(crate) fn routes_again(e: &Error) -> bool {
    matches!(
        e,
        Error::Moved { .. }
            | Error::Unavailable { .. }
            | Error::LeaseHeld { .. }
            | Error::Fenced { .. }
            | Error::Draining { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command whose outcome is unknown at the holder (its segment in flight when the log
    /// failed: `Unshipped`; a further forward whose answer was lost: `ForwardFailed`) is an
    /// unknown outcome at the sender too, so its caller retries with the same key
    /// (docs/guarantees.md, promise 11). Seen failing: both came back as `Refused`, a
    /// definite refusal (`is_outcome_unknown()` false) of something that may have run.
    #[test]
    fn promise11_an_unknown_outcome_at_the_holder_is_an_unknown_outcome_at_the_sender() {
        let key = || "acme/t".to_owned();
        let unknown = [
            Error::Unshipped {
                key: key(),
                reason: "put: no answer within 3000 ms".into(),
            },
            Error::ForwardFailed {
                key: key(),
                to: "r3".into(),
                reason: "connection reset".into(),
            },
        ];
        for e in unknown {
            assert!(e.is_outcome_unknown());
            let heard = from_wire(SENT, to_wire(&e));
            assert!(heard.is_outcome_unknown(), "{e:?} came back as {heard:?}");
            assert_eq!(heard, e, "the same error, its figures included");
        }
    }

    const SENT: Sent<'static> = Sent {
        key: "acme/t",
        name: "bank.deposit",
        version: 2,
    };

    /// Every error a holder may answer comes back as the same error (the figures included).
    #[test]
    fn refusals_come_back_as_the_error_the_holder_answered() {
        let key = || "acme/t".to_owned();
        let same = [
            Error::Moved {
                key: key(),
                holder: "r2".into(),
            },
            Error::Unavailable {
                key: key(),
                holder: "r2".into(),
                lease_left_ms: 1_200,
            },
            Error::LeaseHeld {
                key: key(),
                owner: "r3".into(),
                epoch: 7,
            },
            Error::Fenced { key: key() },
            Error::Draining {
                key: key(),
                state: "flushing".into(),
            },
            Error::Closed("the replica is closing".into()),
            Error::Unauthenticated {
                reason: "no mac".into(),
            },
            Error::UnknownMessage {
                name: "bank.deposit".into(),
                version: 2,
            },
            Error::BadMessage {
                reason: "the body does not decode".into(),
            },
            Error::TooLarge {
                bytes: 17 << 20,
                limit: 16 << 20,
            },
            Error::DeadlineExceeded {
                key: key(),
                after_ms: 900,
                outcome_unknown: true,
            },
            Error::DeadlineExceeded {
                key: key(),
                after_ms: 900,
                outcome_unknown: false,
            },
        ];
        for e in same {
            assert_eq!(from_wire(SENT, to_wire(&e)), e, "{e:?}");
        }
        let unknown = refusal(CODE_UNKNOWN_MESSAGE, "no bank.deposit v2");
        assert_eq!(
            from_wire(SENT, unknown),
            Error::UnknownMessage {
                name: "bank.deposit".into(),
                version: 2
            }
        );
        let bare_deadline = refusal(CODE_DEADLINE_EXCEEDED, "late");
        assert!(from_wire(SENT, bare_deadline).is_outcome_unknown());
        let refused = Error::Refused {
            code: "LEASEHOLD_NEWER".into(),
            message: "m".into(),
        };
        assert_eq!(
            to_wire(&refused).code,
            "LEASEHOLD_NEWER",
            "a passed-on code stays"
        );
        assert_eq!(from_wire(SENT, to_wire(&refused)), refused);
        assert!(routes_again(&Error::Fenced { key: key() }) && !routes_again(&refused));
    }
}
