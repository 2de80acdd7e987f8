//! The durable store: an object store whose only write is [`DurableStore::put_if_absent`].
//!
//! Keys are `/`-separated segments of `[A-Za-z0-9._-]`, none empty, none `.` or `..`, no leading
//! `/`. A prefix is `""` (everything; `list` only) or whole segments ending with `/`:
//! `acme/` never matches `acme2/…`. Anything else is [`StoreError::InvalidKey`] and touches nothing.
//!
//! Backends: [`dir`] (the embedded default: a directory, atomic and durable puts) and, with the
//! `s3` feature, `s3`. Both pass `testkit::durable_store_conformance`. [`crate::deadline`]
//! wraps any store so that every call settles.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

pub mod dir;
#[cfg(feature = "s3")]
pub mod s3;

/// What a `put_if_absent` came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// The object did not exist and now holds the bytes.
    Created,
    /// An object of that key existed; it was left as it was.
    AlreadyExists,
}

/// Why a store call (durable or lease) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The key or prefix breaks the naming rules; nothing was touched.
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The key or prefix as given.
        key: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The backend could not be reached (an outage, a refused or lost connection).
    #[error("{op}: store unavailable: {message}")]
    Unavailable {
        /// The operation (`put_if_absent`, `acquire`, …).
        op: &'static str,
        /// What the backend said.
        message: String,
    },
    /// The call did not settle within its deadline; its effect is unknown.
    #[error("{op}: no answer within {after_ms} ms")]
    Timeout {
        /// The operation.
        op: &'static str,
        /// The deadline that ran out.
        after_ms: u64,
    },
    /// A local I/O error.
    #[error("{op}: i/o error: {message}")]
    Io {
        /// The operation.
        op: &'static str,
        /// The error, as text.
        message: String,
    },
    /// Any other error the backend returned.
    #[error("{op}: {message}")]
    Backend {
        /// The operation.
        op: &'static str,
        /// The error, as text.
        message: String,
    },
}

impl StoreError {
    /// An [`StoreError::Io`] from a `std::io::Error`.
    pub fn io(op: &'static str, e: &std::io::Error) -> Self {
        StoreError::Io {
            op,
            message: e.to_string(),
        }
    }
}

/// An object store holding images and manifests. Every call must settle: wrap a backend that
/// can hang in [`crate::deadline::Deadline`].
#[async_trait]
pub trait DurableStore: Send + Sync + fmt::Debug + 'static {
    /// Writes `bytes` under `key` unless an object of that key exists. Atomic: a reader sees the
    /// whole object or none, also after a crash. An object is never overwritten.
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError>;

    /// The object under `key`, or `None`.
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError>;

    /// Every key under `prefix`, sorted. `prefix` is `""` or ends with `/`.
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError>;

    /// Deletes `key`; a missing key is not an error.
    async fn delete(&self, key: &str) -> Result<(), StoreError>;

    /// Deletes every key under `prefix`, which must be non-empty and end with `/`; whole segments
    /// only. Returns how many objects went.
    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError>;
}

/// Shared handle to a durable store.
pub type SharedDurableStore = Arc<dyn DurableStore>;

#[async_trait]
impl<S: DurableStore + ?Sized> DurableStore for Arc<S> {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        (**self).put_if_absent(key, bytes).await
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        (**self).get(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        (**self).list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        (**self).delete(key).await
    }
    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        (**self).delete_prefix(prefix).await
    }
}

fn check_segment(key: &str, seg: &str) -> Result<(), StoreError> {
    let bad = |reason| {
        Err(StoreError::InvalidKey {
            key: key.to_string(),
            reason,
        })
    };
    if seg.is_empty() {
        return bad("empty segment (a leading '/', a trailing '/' or '//')");
    }
    if seg == "." || seg == ".." {
        return bad("'.' or '..' segment");
    }
    if !seg
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return bad("a character outside A-Z a-z 0-9 . _ -");
    }
    Ok(())
}

/// Checks an object key: one or more valid segments, no trailing `/`.
pub fn check_key(key: &str) -> Result<(), StoreError> {
    if key.len() > 1024 {
        return Err(StoreError::InvalidKey {
            key: key.chars().take(64).collect(),
            reason: "longer than 1024 bytes",
        });
    }
    key.split('/').try_for_each(|seg| check_segment(key, seg))
}

/// Checks a prefix for `delete_prefix`: non-empty whole segments ending with `/`.
pub fn check_prefix(prefix: &str) -> Result<(), StoreError> {
    match prefix.strip_suffix('/') {
        Some(body) if !body.is_empty() => check_key(body),
        Some(_) => Err(StoreError::InvalidKey {
            key: prefix.to_string(),
            reason: "a prefix must name at least one segment",
        }),
        None => Err(StoreError::InvalidKey {
            key: prefix.to_string(),
            reason: "a prefix must end with '/' so that it takes whole segments only",
        }),
    }
}

/// Checks a prefix for `list`: `""` or a valid prefix.
pub fn check_list_prefix(prefix: &str) -> Result<(), StoreError> {
    if prefix.is_empty() {
        Ok(())
    } else {
        check_prefix(prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_whole_valid_segments() {
        for good in ["acme/t1/e00000001/snap-000001.db", "a", "a.b/c_d-e"] {
            assert_eq!(check_key(good), Ok(()), "{good}");
        }
        for bad in [
            "", "/a", "a/", "a//b", "a/../b", "a/./b", "a/b\0", "a b", "a\\b",
        ] {
            assert!(check_key(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn prefixes_end_with_a_slash_and_name_a_segment() {
        assert_eq!(check_prefix("acme/"), Ok(()));
        assert_eq!(check_prefix("acme/t1/e00000001/"), Ok(()));
        for bad in ["acme", "", "/", "acme//", "../", "acme/../"] {
            assert!(check_prefix(bad).is_err(), "{bad:?}");
        }
        assert_eq!(check_list_prefix(""), Ok(()));
        assert!(check_list_prefix("acme").is_err());
    }
}
