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
use std::time::Duration;

use async_trait::async_trait;

pub mod dir;
mod in_flight;
#[cfg(feature = "s3")]
pub mod s3;

pub use in_flight::{PutEntry, PutsInFlight};

/// One page of a listing ([`DurableStore::list_page`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPage {
    /// Keys of this page, sorted, each greater than the marker the page was asked after.
    pub keys: Vec<String>,
    /// Where the next page starts (pass it as `start_after`), or `None`: the listing is done.
    /// It may lie past the last key of `keys` when the backend skipped keys that are no store
    /// key (a foreign object), so a page can be short, even empty, and still not the last.
    pub next: Option<String>,
}

/// The default [`DurableStore::list_page`]: one full listing, cut to the page.
pub fn page_of(listed: Vec<String>, start_after: Option<&str>, max_keys: usize) -> ListPage {
    let max_keys = max_keys.max(1);
    let mut keys: Vec<String> = listed
        .into_iter()
        .filter(|k| start_after.is_none_or(|after| k.as_str() > after))
        .collect();
    let next = if keys.len() > max_keys {
        keys.truncate(max_keys);
        keys.last().cloned()
    } else {
        None
    };
    ListPage { keys, next }
}

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
    /// The object is larger than the backend takes in one put (S3: 5 GiB, `S3_MAX_PUT_BYTES`);
    /// refused before any request, so nothing was written: a definite refusal, not an unknown
    /// outcome (docs/guarantees.md, "Limits").
    #[error("{op}: {key} is {bytes} bytes; the store takes at most {limit} in one put")]
    TooLarge {
        /// The operation.
        op: &'static str,
        /// The object's key.
        key: String,
        /// Its size.
        bytes: u64,
        /// The most the store takes in one put.
        limit: u64,
    },
    /// The store itself does not exist (a directory, a lease file or table) and the caller asked
    /// not to create it; nothing was created.
    #[error("missing {store}: {location} does not exist; nothing was created")]
    Missing {
        /// Which store (`lease file`, `lease table`, `durable directory`, `bucket`).
        store: &'static str,
        /// Where it was looked for (a path, a table or bucket name; never a password).
        location: String,
    },
    /// The store's directory or file lets the group or others in, and the caller did not accept
    /// that (docs/operations.md, "File permissions"); nothing was touched.
    #[error("{path} has mode {mode:04o}, which lets the group or others in")]
    NotPrivate {
        /// The path.
        path: String,
        /// Its permission bits.
        mode: u32,
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

    /// The object under `key`, whose size the caller expects to be about `expected_bytes` (a
    /// manifest names an image's size): a store that bounds its calls gives the call as much
    /// time as a put of that size ([`crate::deadline::put_deadline`]). The answer is the same as
    /// [`DurableStore::get`]'s; a wrong guess changes only how long the call may take.
    async fn get_sized(
        &self,
        key: &str,
        expected_bytes: u64,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let _ = expected_bytes;
        self.get(key).await
    }

    /// The size in bytes of the object under `key`, or `None` when there is none: what a reader
    /// asks before a get whose deadline must grow with the object (a segment of the change log,
    /// whose size no manifest names; docs/guarantees.md, the numbers). Backends answer from
    /// metadata (a `stat`, one `HEAD` on S3); the default reads the object, so a wrapper that
    /// does not pass the call on is correct but slow.
    async fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let found = self.get(key).await?;
        Ok(found.map(|bytes| u64::try_from(bytes.len()).unwrap_or(u64::MAX)))
    }

    /// Every key under `prefix`, sorted. `prefix` is `""` or ends with `/`.
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError>;

    /// At most `max_keys` (at least 1) keys under `prefix` greater than `start_after`, sorted,
    /// and where the next page starts. A caller that works page by page keeps its progress when
    /// a later page fails (docs/guarantees.md, promise 5). The default cuts one full
    /// [`DurableStore::list`] to the page; backends override it with a listing that starts at
    /// the marker.
    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, StoreError> {
        Ok(page_of(self.list(prefix).await?, start_after, max_keys))
    }

    /// Deletes `key`; a missing key is not an error.
    async fn delete(&self, key: &str) -> Result<(), StoreError>;

    /// Deletes each of `keys`; a missing key is not an error. Every key is checked before any is
    /// deleted (one bad key: [`StoreError::InvalidKey`], nothing touched). A backend with a bulk
    /// delete makes it one request (S3: `DeleteObjects`, 1000 keys each); the default deletes
    /// one by one. A sweep deletes each listing page with one call.
    async fn delete_keys(&self, keys: &[String]) -> Result<(), StoreError> {
        keys.iter().try_for_each(|k| check_key(k))?;
        for key in keys {
            self.delete(key).await?;
        }
        Ok(())
    }

    /// Deletes every key under `prefix`, which must be non-empty and end with `/`; whole segments
    /// only. Returns how many objects went.
    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError>;

    /// Waits until every put of a key under `prefix` (`""` for all) that this store still runs
    /// on its own — one whose caller was already told [`StoreError::Timeout`], or went away —
    /// has settled, for at most `limit`; running out is [`StoreError::Timeout`] (`settle_puts`).
    /// A store that runs no put beyond its caller's wait answers at once (the default).
    /// [`crate::deadline::Deadline`] tracks its puts; wrappers pass the call on.
    async fn settle_puts(&self, prefix: &str, limit: Duration) -> Result<(), StoreError> {
        let _ = limit;
        check_list_prefix(prefix)
    }

    /// [`DurableStore::settle_puts`] for the puts of exactly `key` (a valid key): the replica's
    /// reconciliation waits for one put without waiting for every other put of its tenure
    /// (docs/guarantees.md, "Reconciling puts of unknown outcome"). The default waits for the
    /// puts of the directory `key` lies in, which includes them; [`crate::deadline::Deadline`]
    /// and the test kit's wrappers wait for the key alone.
    async fn settle_put(&self, key: &str, limit: Duration) -> Result<(), StoreError> {
        check_key(key)?;
        let dir = key.rsplit_once('/').map_or("", |(dir, _)| dir);
        if dir.is_empty() {
            return self.settle_puts("", limit).await;
        }
        self.settle_puts(&format!("{dir}/"), limit).await
    }
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
    async fn get_sized(&self, key: &str, expected: u64) -> Result<Option<Vec<u8>>, StoreError> {
        (**self).get_sized(key, expected).await
    }
    async fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        (**self).size(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        (**self).list(prefix).await
    }
    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, StoreError> {
        (**self).list_page(prefix, start_after, max_keys).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        (**self).delete(key).await
    }
    async fn delete_keys(&self, keys: &[String]) -> Result<(), StoreError> {
        (**self).delete_keys(keys).await
    }
    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        (**self).delete_prefix(prefix).await
    }
    async fn settle_puts(&self, prefix: &str, limit: Duration) -> Result<(), StoreError> {
        (**self).settle_puts(prefix, limit).await
    }
    async fn settle_put(&self, key: &str, limit: Duration) -> Result<(), StoreError> {
        (**self).settle_put(key, limit).await
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
    fn a_page_is_cut_after_its_marker_and_names_the_next_one() {
        let keys = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let all = keys(&["a/1", "a/2", "a/3"]);
        assert_eq!(
            page_of(all.clone(), None, 2),
            ListPage {
                keys: keys(&["a/1", "a/2"]),
                next: Some("a/2".into())
            }
        );
        assert_eq!(
            page_of(all.clone(), Some("a/2"), 2),
            ListPage {
                keys: keys(&["a/3"]),
                next: None
            }
        );
        assert_eq!(page_of(all, Some("a/1"), 0).keys, keys(&["a/2"]));
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
