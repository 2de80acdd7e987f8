//! Errors on the wire: what a refusal becomes in a [`WireError`] (its stable code, its text,
//! the holder it names) and back. The transport's own refusals — before anything is decoded —
//! have codes of their own here; every other code is the [`Error::code`] of what the receiving
//! replica answered.

use leasehold::Error;
use leasehold::codec::{EnvelopeError, WireError};

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

/// A refusal of the transport itself.
pub(crate) fn refusal(code: &str, message: impl Into<String>) -> WireError {
    WireError {
        code: code.to_owned(),
        message: message.into(),
        holder: None,
    }
}

/// Why a body that passed the MAC is not an envelope, as a refusal.
pub(crate) fn undecodable(e: &EnvelopeError) -> WireError {
    match e {
        EnvelopeError::UnknownFormat { .. } => refusal(CODE_UNKNOWN_FORMAT, e.to_string()),
        EnvelopeError::TooLarge { .. } => refusal(CODE_TOO_LARGE, e.to_string()),
        _ => refusal(CODE_BAD_MESSAGE, e.to_string()),
    }
}

/// What the receiving replica answered, for the wire.
pub(crate) fn to_wire(e: &Error) -> WireError {
    let holder = match e {
        Error::Moved { holder, .. } | Error::Unavailable { holder, .. } => Some(holder.clone()),
        Error::LeaseHeld { owner, .. } => Some(owner.clone()),
        Error::Refused { code, message } => return refusal(code, message.clone()),
        _ => None,
    };
    WireError {
        code: e.code().to_owned(),
        message: e.to_string(),
        holder,
    }
}

/// A refusal that came back for a message to tenant `key`, as the error a caller can act on;
/// a code this build has no variant for is [`Error::Refused`].
pub(crate) fn from_wire(key: &str, w: WireError) -> Error {
    let key = key.to_owned();
    match (w.code.as_str(), w.holder) {
        ("LEASEHOLD_MOVED", Some(holder)) => Error::Moved { key, holder },
        ("LEASEHOLD_UNAVAILABLE", Some(holder)) => Error::Unavailable {
            key,
            holder,
            lease_left_ms: 0,
        },
        ("LEASEHOLD_LEASE_HELD", Some(owner)) => Error::LeaseHeld {
            key,
            owner,
            epoch: 0,
        },
        (CODE_UNAUTHENTICATED, _) => Error::Unauthenticated { reason: w.message },
        ("LEASEHOLD_FENCED", _) => Error::Fenced { key },
        ("LEASEHOLD_DRAINING", _) => Error::Draining {
            key,
            state: w.message,
        },
        ("LEASEHOLD_CLOSED", _) => Error::Closed(w.message),
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

    #[test]
    fn refusals_keep_their_code_and_holder_across_the_wire() {
        let moved = Error::Moved {
            key: "acme/t".into(),
            holder: "r2".into(),
        };
        let w = to_wire(&moved);
        assert_eq!(
            (w.code.as_str(), w.holder.as_deref()),
            ("LEASEHOLD_MOVED", Some("r2"))
        );
        assert_eq!(from_wire("acme/t", w), moved);
        let fenced = Error::Fenced {
            key: "acme/t".into(),
        };
        assert_eq!(from_wire("acme/t", to_wire(&fenced)), fenced);
        let unknown = refusal(CODE_UNKNOWN_MESSAGE, "no bank.deposit v2");
        assert_eq!(
            from_wire("acme/t", unknown),
            Error::Refused {
                code: CODE_UNKNOWN_MESSAGE.into(),
                message: "no bank.deposit v2".into()
            }
        );
        let refused = Error::Refused {
            code: "LEASEHOLD_NEWER".into(),
            message: "m".into(),
        };
        assert_eq!(
            to_wire(&refused).code,
            "LEASEHOLD_NEWER",
            "a passed-on code stays"
        );
        assert!(routes_again(&fenced) && !routes_again(&refused));
    }
}
