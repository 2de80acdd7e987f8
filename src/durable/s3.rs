//! `S3Store`: the durable store over any S3-compatible endpoint (feature `s3`), built on
//! `object_store`'s `AmazonS3`.
//!
//! ```text
//! put_if_absent   one PUT with If-None-Match: *        412 / 304 / 409 -> Put::AlreadyExists
//! get             GET                                   404 -> None
//! get_sized       GET; a long one on the transfer client as get
//! size            HEAD                                  404 -> None
//! list_page       ListObjectsV2 with start-after        raw keys; what is no store key is skipped
//! list            list_page until the end, sorted       keys below the store's own prefix
//! delete          DELETE                                a missing key is not an error
//! delete_keys     DeleteObjects in batches of 1000      a missing key is not an error
//! delete_prefix   list raw, then DeleteObjects in batches of 1000 (whole segments only);
//!                 a key object_store cannot name (`a//b`) gets a raw DELETE of its own
//! ```
//!
//! Listings go through [`raw`]: `object_store` refuses a whole page when one key on it does
//! not parse, so one foreign object would block listing and erasure of its tenant.
//!
//! Every key and prefix is validated ([`check_key`], [`check_prefix`], [`check_list_prefix`])
//! before any request is made. Every request has a deadline and bounded retries with exponential
//! backoff ([`S3Limits`]); every call as a whole has a deadline too ([`S3Limits::op_timeout`]).
//! A put or a sized get whose bytes take more than a second at the slowest rate the runtime gives
//! time for (8 MiB/s) goes through a second client whose HTTP timeout fits the largest object:
//! `request_timeout` does not cut it short, and `op_timeout`, the longest any call lives (which
//! the runtime's `put_lifetime` mirrors: docs/guarantees.md, the numbers), ends it.
//!
//! ## Size bound
//! `put_if_absent` is a single conditional `PUT`: multipart uploads have no conditional create
//! in `object_store`, and an object must appear whole or not at all. S3 caps a single `PUT` at
//! 5 GiB ([`S3_MAX_PUT_BYTES`]); a larger image is refused before any request with
//! [`StoreError::TooLarge`] (a definite refusal: nothing was sent). The bytes are also held in memory for the call, so the practical
//! bound is the replica's memory. Larger images would be split into numbered part objects, each
//! created by its own `put_if_absent`, with the manifest listing the parts and their digests:
//! the manifest stays the one object whose presence (and the head in the lease store) publishes
//! the image, so nothing about fencing changes. See `docs/operations.md`.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use object_store::client::{HttpError, HttpErrorKind, SpawnedReqwestConnector};
use object_store::path::Path;
use object_store::{ClientConfigKey, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::clock::duration_ms;
use crate::durable::{
    DurableStore, ListPage, Put, StoreError, check_key, check_list_prefix, check_prefix,
};
use crate::error::Error;
use crate::io_runtime::IoRuntime;

mod config;
mod raw;

pub use config::{S3Config, S3Limits};

use raw::{MAX_PAGE_KEYS, RawBucket, raw_client};

/// The largest object S3 accepts in one `PUT`: 5 GiB.
pub const S3_MAX_PUT_BYTES: u64 = 5 * 1024 * 1024 * 1024;

/// The durable store over an S3-compatible bucket, optionally below a key prefix.
#[derive(Debug, Clone)]
pub struct S3Store {
    /// The client.
    inner: AmazonS3,
    /// The client for long transfers (an object whose bytes take more than a second at the
    /// slowest rate): its HTTP timeout fits the largest object, and `op_timeout` ends a call
    /// that stalls ([`S3Limits::is_long_transfer`]).
    transfer: AmazonS3,
    /// The client for long gets: as `transfer`, and a connection that delivers nothing for
    /// `request_timeout` is given up (and the get retried).
    transfer_get: AmazonS3,
    /// The thread the clients' connections run on; it ends with the last clone.
    _io: IoRuntime,
    /// The bucket's name, for messages.
    bucket: String,
    /// `""` or whole segments ending with `/`, put before every key.
    prefix: String,
    /// Deadlines, retries and the size bound.
    limits: S3Limits,
    /// Raw listings and deletes, for keys `object_store` cannot name.
    raw: RawBucket,
}

impl S3Store {
    /// A store configured explicitly, with [`S3Limits::default`].
    pub fn new(config: S3Config) -> Result<Self, Error> {
        Self::with_limits(config, S3Limits::default())
    }

    /// A store configured explicitly, with the given limits.
    pub fn with_limits(config: S3Config, limits: S3Limits) -> Result<Self, Error> {
        let mut builder = AmazonS3Builder::new()
            .with_region(config.region)
            .with_allow_http(config.allow_http);
        if let Some(endpoint) = config.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        match (config.access_key_id, config.secret_access_key) {
            (Some(id), Some(secret)) => {
                builder = builder
                    .with_access_key_id(id)
                    .with_secret_access_key(secret);
            }
            (None, None) => {}
            _ => {
                return Err(Error::InvalidOption {
                    name: "access_key_id",
                    reason: "give both access_key_id and secret_access_key, or neither".into(),
                });
            }
        }
        Self::build(builder, &config.bucket, &config.prefix, limits)
    }

    /// A store configured from the usual AWS environment variables (`AWS_ENDPOINT_URL` or
    /// `AWS_ENDPOINT`, `AWS_REGION` or `AWS_DEFAULT_REGION`, `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_ALLOW_HTTP`, and the web-identity and
    /// container credential variables), for `bucket` below `prefix`, with [`S3Limits::default`].
    pub fn from_env(bucket: &str, prefix: &str) -> Result<Self, Error> {
        Self::build(
            AmazonS3Builder::from_env(),
            bucket,
            prefix,
            S3Limits::default(),
        )
    }

    /// Validates bucket, prefix and limits, then builds the client with conditional puts on,
    /// the limits' timeouts and retry policy.
    fn build(
        builder: AmazonS3Builder,
        bucket: &str,
        prefix: &str,
        limits: S3Limits,
    ) -> Result<Self, Error> {
        check_bucket(bucket)?;
        check_list_prefix(prefix).map_err(|e| Error::InvalidOption {
            name: "prefix",
            reason: e.to_string(),
        })?;
        limits.check()?;
        // Every connection runs on the store's own runtime thread, whichever runtime a call
        // comes from (`src/io_runtime.rs`).
        let io = IoRuntime::start("s3")?;
        let connector = || SpawnedReqwestConnector::new(io.handle().clone());
        let (client, bucket_url, region) = raw_client(
            &builder,
            bucket,
            limits.request_timeout,
            limits.connect_timeout,
            connector(),
        )?;
        let transfer = Self::client(
            builder.clone().with_http_connector(connector()),
            bucket,
            &limits,
            limits.transfer_request_timeout(),
        )?;
        // A long get gives up a connection that delivers nothing for `request_timeout` (and
        // retries, as a GET may be): the request timeout that fits the largest object would
        // otherwise hold a stalled connection until `op_timeout`. Not on puts: the answer to
        // an upload arrives only after its last byte.
        let transfer_get = Self::client(
            builder
                .clone()
                .with_http_connector(connector())
                .with_config(
                    AmazonS3ConfigKey::Client(ClientConfigKey::ReadTimeout),
                    format!("{}ms", duration_ms(limits.request_timeout)),
                ),
            bucket,
            &limits,
            limits.transfer_request_timeout(),
        )?;
        let inner = Self::client(
            builder.with_http_connector(connector()),
            bucket,
            &limits,
            limits.request_timeout,
        )?;
        let raw = RawBucket {
            client,
            bucket_url,
            region,
            credentials: inner.credentials().clone(),
            request_timeout: limits.request_timeout,
            retries: limits.max_retries,
            backoff: limits.init_backoff,
        };
        Ok(Self {
            inner,
            transfer,
            transfer_get,
            _io: io,
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
            limits,
            raw,
        })
    }

    /// An `object_store` client on `bucket` whose every request gives up after
    /// `request_timeout`.
    fn client(
        builder: AmazonS3Builder,
        bucket: &str,
        limits: &S3Limits,
        request_timeout: Duration,
    ) -> Result<AmazonS3, Error> {
        let timeout = |d: Duration| format!("{}ms", duration_ms(d));
        builder
            .with_bucket_name(bucket)
            // Always the standard If-None-Match: *, whatever the environment says.
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                timeout(request_timeout),
            )
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                timeout(limits.connect_timeout),
            )
            .with_retry(limits.retry())
            .build()
            .map_err(|e| Error::InvalidOption {
                name: "s3",
                reason: e.to_string(),
            })
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix inside the bucket (`""` or ending with `/`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The object path of a store key (already validated).
    fn path(&self, key: &str) -> Result<Path, StoreError> {
        parse_path(&format!("{}{key}", self.prefix))
    }

    /// Runs `fut` within [`S3Limits::op_timeout`]; running out is [`StoreError::Timeout`].
    async fn bounded<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.limits.op_timeout, fut).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Timeout {
                op,
                after_ms: duration_ms(self.limits.op_timeout),
            }),
        }
    }

    /// The client for moving `bytes` bytes in one request ([`S3Limits::is_long_transfer`]).
    fn client_for(&self, bytes: u64) -> &AmazonS3 {
        if self.limits.is_long_transfer(bytes) {
            &self.transfer
        } else {
            &self.inner
        }
    }

    /// The object at `path` read whole with `client`, or `None`.
    async fn get_with(
        &self,
        client: &AmazonS3,
        path: &Path,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let found = match client.get(path).await {
            Ok(found) => found,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(s3_error("get", &self.limits, e)),
        };
        match found.bytes().await {
            Ok(bytes) => Ok(Some(bytes.to_vec())),
            Err(e) => Err(s3_error("get", &self.limits, e)),
        }
    }

    /// Deletes `paths` with `DeleteObjects` (1000 a request); how many went. A path gone
    /// meanwhile counts as nothing and is no error.
    async fn delete_paths(&self, op: &'static str, paths: Vec<Path>) -> Result<usize, StoreError> {
        let locations = futures::stream::iter(paths.into_iter().map(Ok)).boxed();
        let results: Vec<_> = self.inner.delete_stream(locations).collect().await;
        let mut deleted = 0;
        for result in results {
            match result {
                Ok(_) => deleted += 1,
                // Gone meanwhile: deleted all the same, by someone.
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(s3_error(op, &self.limits, e)),
            }
        }
        Ok(deleted)
    }

    /// One page of raw keys below the store prefix `prefix`, after the store key (or marker)
    /// `start_after`: the keys with the store's own prefix taken off, and the next marker.
    async fn raw_page(
        &self,
        op: &'static str,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<(Vec<String>, Option<String>), StoreError> {
        let full = format!("{}{prefix}", self.prefix);
        let after = start_after.map(|a| format!("{}{a}", self.prefix));
        let page = (self.raw)
            .list_page(op, &full, after.as_deref(), max_keys)
            .await?;
        let keys: Vec<String> = page
            .keys
            .iter()
            .filter_map(|k| k.strip_prefix(self.prefix.as_str()).map(str::to_owned))
            .collect();
        let next = page.truncated.then(|| keys.last().cloned()).flatten();
        Ok((keys, next))
    }

    /// Every raw key (store prefix taken off) below `prefix`, page after page.
    async fn raw_keys(&self, op: &'static str, prefix: &str) -> Result<Vec<String>, StoreError> {
        let (mut all, mut after) = (Vec::new(), None::<String>);
        loop {
            let (keys, next) = self
                .raw_page(op, prefix, after.as_deref(), MAX_PAGE_KEYS)
                .await?;
            all.extend(keys);
            match next {
                Some(next) => after = Some(next),
                None => return Ok(all),
            }
        }
    }
}

#[async_trait]
impl DurableStore for S3Store {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        check_key(key)?;
        let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if size > self.limits.max_object_bytes {
            return Err(StoreError::TooLarge {
                op: "put_if_absent",
                key: key.to_string(),
                bytes: size,
                limit: self.limits.max_object_bytes,
            });
        }
        let path = self.path(key)?;
        let opts = PutOptions::from(PutMode::Create);
        let client = self.client_for(size);
        self.bounded("put_if_absent", async {
            match client.put_opts(&path, PutPayload::from(bytes), opts).await {
                Ok(_) => Ok(Put::Created),
                Err(
                    object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. }
                    | object_store::Error::NotModified { .. },
                ) => Ok(Put::AlreadyExists),
                Err(e) => Err(s3_error("put_if_absent", &self.limits, e)),
            }
        })
        .await
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        check_key(key)?;
        let path = self.path(key)?;
        self.bounded("get", self.get_with(&self.inner, &path)).await
    }

    async fn get_sized(&self, key: &str, expected: u64) -> Result<Option<Vec<u8>>, StoreError> {
        check_key(key)?;
        let path = self.path(key)?;
        let client = if self.limits.is_long_transfer(expected) {
            &self.transfer_get
        } else {
            &self.inner
        };
        self.bounded("get", self.get_with(client, &path)).await
    }

    async fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        check_key(key)?;
        let path = self.path(key)?;
        self.bounded("size", async {
            match self.inner.head(&path).await {
                Ok(meta) => Ok(Some(meta.size)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(s3_error("size", &self.limits, e)),
            }
        })
        .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        check_list_prefix(prefix)?;
        self.bounded("list", async {
            let mut keys = self.raw_keys("list", prefix).await?;
            keys.retain(|k| check_key(k).is_ok());
            keys.sort();
            Ok(keys)
        })
        .await
    }

    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, StoreError> {
        check_list_prefix(prefix)?;
        self.bounded("list_page", async {
            let (mut keys, next) = self
                .raw_page("list_page", prefix, start_after, max_keys)
                .await?;
            keys.retain(|k| check_key(k).is_ok());
            Ok(ListPage { keys, next })
        })
        .await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        check_key(key)?;
        let path = self.path(key)?;
        self.bounded("delete", async {
            match self.inner.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(s3_error("delete", &self.limits, e)),
            }
        })
        .await
    }

    async fn delete_keys(&self, keys: &[String]) -> Result<(), StoreError> {
        keys.iter().try_for_each(|k| check_key(k))?;
        let paths = keys
            .iter()
            .map(|k| self.path(k))
            .collect::<Result<Vec<_>, _>>()?;
        self.bounded("delete_keys", self.delete_paths("delete_keys", paths))
            .await
            .map(|_| ())
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        check_prefix(prefix)?;
        self.bounded("delete_prefix", async {
            let (mut paths, mut foreign) = (Vec::new(), Vec::new());
            for key in self.raw_keys("delete_prefix", prefix).await? {
                match Path::parse(format!("{}{key}", self.prefix)) {
                    Ok(path) if path.as_ref() == format!("{}{key}", self.prefix) => {
                        paths.push(path)
                    }
                    _ => foreign.push(key),
                }
            }
            let mut deleted = self.delete_paths("delete_prefix", paths).await?;
            // What object_store cannot name, one raw DELETE each (under the prefix only).
            for key in foreign {
                let raw = format!("{}{key}", self.prefix);
                self.raw.delete("delete_prefix", &raw).await?;
                deleted += 1;
            }
            Ok(deleted)
        })
        .await
    }
}

/// An object path from validated segments.
fn parse_path(full: &str) -> Result<Path, StoreError> {
    // Validated keys always parse; this guards the invariant rather than the input.
    Path::parse(full).map_err(|e| StoreError::Backend {
        op: "path",
        message: format!("{full:?} is not an object path: {e}"),
    })
}

/// Checks a bucket name: 3 to 63 characters of `[a-z0-9.-]`, starting and ending with a letter
/// or digit (the S3 rules, less the ones about IP-address look-alikes).
pub fn check_bucket(bucket: &str) -> Result<(), Error> {
    let edge_ok = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    let chars_ok = bucket
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    if (3..=63).contains(&bucket.len())
        && chars_ok
        && edge_ok(bucket.bytes().next())
        && edge_ok(bucket.bytes().last())
    {
        Ok(())
    } else {
        Err(Error::InvalidOption {
            name: "bucket",
            reason: format!("{bucket:?} is not an S3 bucket name (3-63 of a-z 0-9 . -)"),
        })
    }
}

/// An `object_store` error as a [`StoreError`]: no connection, a lost one, or a server error
/// that outlived the retries is `Unavailable`; a request that ran out of time is `Timeout`;
/// anything else (refused credentials, a bad request) is `Backend`.
fn s3_error(op: &'static str, limits: &S3Limits, e: object_store::Error) -> StoreError {
    match http_kind(&e) {
        Some(HttpErrorKind::Timeout) => StoreError::Timeout {
            op,
            after_ms: duration_ms(limits.request_timeout),
        },
        Some(HttpErrorKind::Connect | HttpErrorKind::Request | HttpErrorKind::Interrupted) => {
            StoreError::Unavailable {
                op,
                message: e.to_string(),
            }
        }
        _ if is_server_error(&e) => StoreError::Unavailable {
            op,
            message: e.to_string(),
        },
        _ => StoreError::Backend {
            op,
            message: e.to_string(),
        },
    }
}

/// The kind of the transport error behind `e`, if there is one.
fn http_kind(e: &object_store::Error) -> Option<HttpErrorKind> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(http) = s.downcast_ref::<HttpError>() {
            return Some(http.kind());
        }
        source = s.source();
    }
    None
}

/// Whether `e` reports a 5xx answer (after the retries ran out). `object_store` keeps the status
/// in a private type; its message is the only public trace of it.
fn is_server_error(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::Generic { .. })
        && e.to_string()
            .contains("Server returned non-2xx status code: 5")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(prefix: &str) -> S3Config {
        S3Config {
            endpoint: Some("http://127.0.0.1:1".into()),
            region: "us-east-1".into(),
            bucket: "leasehold-test".into(),
            prefix: prefix.into(),
            access_key_id: Some("testing".into()),
            secret_access_key: Some("testing".into()),
            allow_http: true,
        }
    }

    #[test]
    fn bucket_names_follow_the_s3_rules() {
        for good in ["abc", "leasehold-test", "a.b-c.1", &"a".repeat(63)] {
            assert_eq!(check_bucket(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "ab",
            "Abc",
            "-abc",
            "abc-",
            "a_b",
            "a/b",
            &"a".repeat(64),
        ] {
            assert!(check_bucket(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_prefix_is_whole_segments() {
        for good in ["", "a/", "prod/eu-1/"] {
            assert!(S3Store::new(config(good)).is_ok(), "{good:?}");
        }
        for bad in ["a", "/a/", "a//", "../", "a b/"] {
            assert!(
                matches!(
                    S3Store::new(config(bad)),
                    Err(Error::InvalidOption { name: "prefix", .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn half_given_credentials_are_refused() {
        let half = S3Config {
            secret_access_key: None,
            ..config("")
        };
        assert!(matches!(
            S3Store::new(half),
            Err(Error::InvalidOption { .. })
        ));
    }

    #[test]
    fn the_secret_is_not_printed() {
        let shown = format!("{:?}", config(""));
        assert!(!shown.contains("testing\", allow"), "{shown}");
        assert!(shown.contains("secret_access_key: Some(\"…\")"), "{shown}");
    }

    #[test]
    fn paths_carry_the_prefix() {
        let store = S3Store::new(config("a/")).unwrap();
        assert_eq!(store.path("x/y").unwrap().as_ref(), "a/x/y");
        assert_eq!(store.raw.bucket_url, "http://127.0.0.1:1/leasehold-test");
    }

    #[test]
    fn oversized_limits_are_refused() {
        let limits = S3Limits {
            max_object_bytes: S3_MAX_PUT_BYTES + 1,
            ..S3Limits::default()
        };
        assert!(S3Store::with_limits(config(""), limits).is_err());
    }
}
