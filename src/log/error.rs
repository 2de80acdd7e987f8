//! Why a change-log call failed: [`LogError`], mapped into the crate [`crate::Error`].

use crate::durable::StoreError;
use crate::image::ImageError;
use crate::lease::LeaseError;

/// Why reading, applying or restoring the change log failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// A segment (or the state it was applied to) failed its checks: its SHA-256, its encoding,
    /// a field that contradicts where it was fetched from, or a sum that does not match the
    /// database it was applied to. A restore that meets one stops; it never serves a state the
    /// log does not vouch for (docs/guarantees.md, the change log).
    #[error("{what} is corrupt: {reason}")]
    Corrupt {
        /// The segment's durable key, the file, or the chain from a tip.
        what: String,
        /// Which check failed.
        reason: String,
    },
    /// A segment is sound in itself but does not belong where it was found: the chain from the
    /// tip does not lead to the image's position, a segment lies at or below the floor, or the
    /// tip lies below the image's position.
    #[error("{what} is out of chain: {reason}")]
    OutOfChain {
        /// The chain (from which tip, to which position).
        what: String,
        /// Where it breaks.
        reason: String,
    },
    /// A point-in-time restore was asked for a position or time the retained log cannot give:
    /// older than the oldest retained segment, newer than the tip, or not on the chain. Nothing
    /// was written.
    #[error("target {target} is outside the retention window: {reason}")]
    OutsideRetention {
        /// The target as asked.
        target: String,
        /// What the log holds.
        reason: String,
    },
    /// A point-in-time restore's destination exists (or its directory does not); a restore
    /// never overwrites a file. Nothing was written.
    #[error("destination {path}: {reason}")]
    Destination {
        /// The destination as given.
        path: String,
        /// Why it was refused.
        reason: String,
    },
    /// The durable store failed (an outage, a timeout). Never a reason to read something else.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The lease store failed or refused.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// Fetching or installing the image failed.
    #[error(transparent)]
    Image(#[from] ImageError),
    /// A local I/O error.
    #[error("i/o: {0}")]
    Io(String),
}

impl LogError {
    /// A [`LogError::Io`] naming what was done to which path.
    pub(crate) fn io(action: &str, path: &std::path::Path, e: &std::io::Error) -> Self {
        LogError::Io(format!("{action} {}: {e}", path.display()))
    }
}
