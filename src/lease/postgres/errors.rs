//! How the PostgreSQL lease store names what went wrong: driver and pool errors become the
//! [`StoreError`] a caller can act on (no connection, or a lost one, is `Unavailable`: the lease
//! is then unknown, never held), and a tenure that does not hold its lease becomes
//! [`LeaseError::NotHeld`].

use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;

use crate::durable::StoreError;
use crate::error::Error;
use crate::ids::LeaseKey;
use crate::lease::LeaseError;

/// [`LeaseError::NotHeld`] for this tenure.
pub(super) fn not_held(key: &LeaseKey, owner: &str, epoch: u64) -> LeaseError {
    LeaseError::NotHeld {
        key: key.to_string(),
        owner: owner.to_string(),
        epoch,
    }
}

/// Who the store logs in as, to name it when the server refuses the login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Login {
    /// The user the URL names.
    pub(super) user: String,
    /// The database the URL names.
    pub(super) database: String,
    /// The URL's `sslmode`: whether the connections are encrypted and what is checked.
    pub(super) sslmode: super::tls::SslMode,
}

/// A refused login as its own error: bad credentials (SQLSTATE 28000, 28P01) are
/// [`Error::AuthFailed`], an unknown database (3D000) [`Error::UnknownDatabase`]; anything else
/// is the store error of `op`.
pub(super) fn login_error(op: &'static str, e: PoolError, login: &Login) -> Error {
    let refused = match &e {
        PoolError::Backend(pg) => pg.as_db_error().map(|db| (db.code().code(), db.message())),
        _ => None,
    };
    match refused {
        Some((code @ ("28000" | "28P01"), message)) => Error::AuthFailed {
            user: login.user.clone(),
            reason: format!("{code}: {message}"),
        },
        Some((code @ "3D000", message)) => Error::UnknownDatabase {
            database: login.database.clone(),
            reason: format!("{code}: {message}"),
        },
        _ => Error::from(pool_error(op, e)),
    }
}

/// SQL states that say the server or the connection is gone or refusing, not that the statement
/// is wrong: class 08 (connection exception), 53 (insufficient resources), 57P0x (shutdown),
/// 57014 (cancelled by `statement_timeout`: rolled back, so nothing changed).
fn is_unavailable_state(state: &SqlState) -> bool {
    let code = state.code();
    code.starts_with("08")
        || code.starts_with("53")
        || matches!(code, "57P01" | "57P02" | "57P03" | "57014")
}

/// A driver error as a [`StoreError`]: no connection, or a lost one, is `Unavailable` (the lease
/// is then unknown, never held); a statement the server refused is `Backend`.
pub(super) fn pg_error(op: &'static str, e: &tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(db) if is_unavailable_state(db.code()) => StoreError::Unavailable {
            op,
            message: format!("{}: {}", db.code().code(), db.message()),
        },
        Some(db) => StoreError::Backend {
            op,
            message: format!("{}: {}", db.code().code(), db.message()),
        },
        None if is_connection_loss(e) => StoreError::Unavailable {
            op,
            message: with_cause(e),
        },
        None => StoreError::Backend {
            op,
            message: with_cause(e),
        },
    }
}

/// Whether the driver lost or never had its connection: the socket failed (refused, reset,
/// timed out) or the connection closed. The driver's error kinds are private; its `Display`
/// prints the kind alone, so the kind is read from there.
fn is_connection_loss(e: &tokio_postgres::Error) -> bool {
    const LOSS: [&str; 4] = [
        "error communicating with the server",
        "error connecting to server",
        "connection closed",
        "timeout waiting for server",
    ];
    e.is_closed() || LOSS.contains(&e.to_string().as_str()) || has_io_source(e)
}

/// Whether an `std::io::Error` is among the causes of `e`.
fn has_io_source(e: &tokio_postgres::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<std::io::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// The error and its cause, as one line.
fn with_cause(e: &tokio_postgres::Error) -> String {
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// A pool error as a [`StoreError`]: no connection within the wait or connect timeout is
/// `Unavailable`.
pub(super) fn pool_error(op: &'static str, e: PoolError) -> StoreError {
    match e {
        PoolError::Backend(pg) => pg_error(op, &pg),
        PoolError::Timeout(kind) => StoreError::Unavailable {
            op,
            message: format!("no database connection: pool {kind:?} timeout"),
        },
        PoolError::Closed => StoreError::Unavailable {
            op,
            message: "the connection pool is closed".to_string(),
        },
        other => StoreError::Backend {
            op,
            message: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_states_are_unavailable_and_statement_errors_are_not() {
        assert!(is_unavailable_state(&SqlState::CONNECTION_FAILURE));
        assert!(is_unavailable_state(&SqlState::TOO_MANY_CONNECTIONS));
        assert!(is_unavailable_state(&SqlState::ADMIN_SHUTDOWN));
        assert!(!is_unavailable_state(&SqlState::UNIQUE_VIOLATION));
        assert!(!is_unavailable_state(&SqlState::INSUFFICIENT_PRIVILEGE));
    }
}
