//! [`S3Config`] (where the bucket is and who the store is) and [`S3Limits`] (deadlines, retries
//! and the size bound) of an [`super::S3Store`].

use std::fmt;
use std::time::Duration;

use object_store::{BackoffConfig, RetryConfig};

use super::S3_MAX_PUT_BYTES;
use crate::clock::duration_ms;
use crate::deadline::{MIN_PUT_BYTES_PER_SEC, put_deadline};
use crate::error::Error;

/// Where the store is and who it is, given explicitly (see [`super::S3Store::from_env`] for the usual
/// AWS environment variables).
#[derive(Clone, PartialEq, Eq)]
pub struct S3Config {
    /// The endpoint URL (`http://127.0.0.1:9000`, `https://s3.eu-west-1.amazonaws.com`), or
    /// `None` for AWS itself (derived from the region).
    pub endpoint: Option<String>,
    /// The region (`us-east-1` for most S3-compatible servers).
    pub region: String,
    /// The bucket; it must exist.
    pub bucket: String,
    /// A key prefix inside the bucket: `""` or whole segments ending with `/` (`prod/`). Every
    /// key of this store lies below it, and the store sees nothing outside it.
    pub prefix: String,
    /// The access key id, or `None` to let the AWS credential chain find one (instance
    /// metadata, web identity, container credentials).
    pub access_key_id: Option<String>,
    /// The secret access key, with `access_key_id`.
    pub secret_access_key: Option<String>,
    /// Whether a plain `http://` endpoint is allowed (test servers only).
    pub allow_http: bool,
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "…"),
            )
            .field("allow_http", &self.allow_http)
            .finish()
    }
}

/// Deadlines, retries and the size bound of an [`super::S3Store`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Limits {
    /// How long opening a connection may take.
    pub connect_timeout: Duration,
    /// The deadline of one HTTP request, body included.
    pub request_timeout: Duration,
    /// How many times a failed request (5xx, connection error, or a timeout of a request that is
    /// safe to repeat) is retried.
    pub max_retries: usize,
    /// No retry starts later than this after the first attempt.
    pub retry_timeout: Duration,
    /// The first backoff between retries; it doubles (with jitter) up to `max_backoff`.
    pub init_backoff: Duration,
    /// The longest backoff between retries.
    pub max_backoff: Duration,
    /// The deadline of one whole call (a `list` of many pages, a `delete_prefix`).
    pub op_timeout: Duration,
    /// The largest object `put_if_absent` sends; at most [`S3_MAX_PUT_BYTES`].
    pub max_object_bytes: u64,
}

impl Default for S3Limits {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            max_retries: 3,
            retry_timeout: Duration::from_secs(30),
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            op_timeout: Duration::from_secs(120),
            max_object_bytes: S3_MAX_PUT_BYTES,
        }
    }
}

impl S3Limits {
    /// Refuses limits that cannot work.
    pub(super) fn check(&self) -> Result<(), Error> {
        let bad = |name, reason: &str| {
            Err(Error::InvalidOption {
                name,
                reason: reason.to_string(),
            })
        };
        if duration_ms(self.connect_timeout) == 0 || duration_ms(self.request_timeout) == 0 {
            return bad(
                "request_timeout",
                "connect and request timeouts must be at least 1 ms",
            );
        }
        if duration_ms(self.op_timeout) == 0 {
            return bad("op_timeout", "must be at least 1 ms");
        }
        if self.max_object_bytes == 0 || self.max_object_bytes > S3_MAX_PUT_BYTES {
            return bad(
                "max_object_bytes",
                "must be between 1 byte and 5 GiB (one S3 PUT)",
            );
        }
        Ok(())
    }

    /// Whether a call that moves `bytes` bytes of one object in one request is a long
    /// transfer: more than one second at the slowest rate the runtime gives time for
    /// ([`MIN_PUT_BYTES_PER_SEC`]). A long one goes through the client whose HTTP timeout fits
    /// the largest object ([`S3Limits::transfer_request_timeout`]), so `request_timeout` does
    /// not cut it short; `op_timeout` still ends it, as every call (the longest a put lives,
    /// which the runtime's `put_lifetime` mirrors).
    pub(super) fn is_long_transfer(&self, bytes: u64) -> bool {
        bytes > MIN_PUT_BYTES_PER_SEC
    }

    /// The HTTP timeout of the client for long transfers: one request of the largest object
    /// ([`S3Limits::max_object_bytes`]) at the slowest rate. `op_timeout` ends a transfer
    /// before that.
    pub(super) fn transfer_request_timeout(&self) -> Duration {
        let largest = usize::try_from(self.max_object_bytes).unwrap_or(usize::MAX);
        put_deadline(self.request_timeout, largest)
    }

    /// The retry policy handed to `object_store`.
    pub(super) fn retry(&self) -> RetryConfig {
        RetryConfig {
            backoff: BackoffConfig {
                init_backoff: self.init_backoff,
                max_backoff: self.max_backoff,
                base: 2.0,
            },
            max_retries: self.max_retries,
            retry_timeout: self.retry_timeout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_longer_than_a_second_at_the_slowest_rate_is_a_long_one() {
        let limits = S3Limits::default();
        assert!(
            !limits.is_long_transfer(1024),
            "a small object uses the usual client"
        );
        assert!(!limits.is_long_transfer(MIN_PUT_BYTES_PER_SEC));
        assert!(limits.is_long_transfer(MIN_PUT_BYTES_PER_SEC + 1));
        // The long-transfer client lets one request carry the largest object (5 GiB) at 8 MiB/s,
        // on top of the request timeout (30 s): 670 s, where every request was cut at 30 s.
        assert_eq!(
            limits.transfer_request_timeout(),
            Duration::from_secs(30 + 5 * 1024 / 8)
        );
    }
}
