//! Retries and error mapping of the SQLite lease store: how a busy or locked file is asked
//! again (bounded: [`MAX_ATTEMPTS`](super::MAX_ATTEMPTS)) and how a SQLite error becomes the
//! [`StoreError`] a caller can act on.

use rusqlite::ErrorCode;

use super::{MAX_ATTEMPTS, RETRY_PAUSE};
use crate::durable::StoreError;

/// Runs `attempt` until it succeeds, fails with something other than busy/locked, or
/// [`MAX_ATTEMPTS`] are used up.
pub(super) fn with_retries<T>(
    mut attempt: impl FnMut() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let mut tries = 1;
    loop {
        match attempt() {
            Err(e) if is_busy(&e) && tries < MAX_ATTEMPTS => {
                std::thread::sleep(RETRY_PAUSE * tries);
                tries += 1;
            }
            other => return other,
        }
    }
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Maps a SQLite error to the store error a caller can act on.
pub(super) fn store_error(op: &'static str, e: &rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Unavailable {
            op,
            message: format!("the lease file stayed locked after {MAX_ATTEMPTS} attempts: {e}"),
        },
        Some(
            ErrorCode::CannotOpen
            | ErrorCode::SystemIoFailure
            | ErrorCode::DiskFull
            | ErrorCode::PermissionDenied
            | ErrorCode::ReadOnly,
        ) => StoreError::Io {
            op,
            message: e.to_string(),
        },
        _ => StoreError::Backend {
            op,
            message: e.to_string(),
        },
    }
}
