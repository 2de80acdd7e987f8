//! The requests `object_store` cannot make for [`super::S3Store`]: a ListObjectsV2 page that
//! returns keys exactly as the bucket holds them, and a DELETE of any such key.
//!
//! `object_store` refuses a whole listing page when one key on it does not parse as its `Path`
//! (`a//b`, a trailing `/`); one foreign object would then block every listing and erasure of
//! its tenant. Here the page comes back raw: [`super::S3Store`] skips what is no store key in
//! listings and deletes it in `delete_prefix` (docs/guarantees.md, promise 5).
//!
//! Requests are signed with `object_store`'s own SigV4 signer and credentials and sent with its
//! HTTP client (the store's connect and request timeouts). Both are safe to repeat, so a 5xx
//! answer, a lost connection or a timeout is retried up to `S3Limits::max_retries` times with a
//! doubling backoff from `S3Limits::init_backoff`; the call as a whole stays under `op_timeout`.

use std::time::Duration;

use http::{Method, Request, StatusCode};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey, AwsAuthorizer, AwsCredentialProvider};
use object_store::client::{HttpClient, HttpConnector, HttpErrorKind, HttpRequestBody};
use object_store::{ClientConfigKey, ClientOptions};

use crate::durable::StoreError;
use crate::error::Error;

/// Most keys one ListObjectsV2 page returns.
pub(super) const MAX_PAGE_KEYS: usize = 1000;

/// A signed-request client for one bucket.
#[derive(Debug, Clone)]
pub(super) struct RawBucket {
    /// The HTTP client, with the store's timeouts.
    pub(super) client: HttpClient,
    /// `<endpoint>/<bucket>` (path style) or the bucket's own host (virtual-hosted style).
    pub(super) bucket_url: String,
    /// The signing region.
    pub(super) region: String,
    /// Where the signing credentials come from.
    pub(super) credentials: AwsCredentialProvider,
    /// The deadline of one request, for the errors that report it.
    pub(super) request_timeout: Duration,
    /// How many times a request that failed in a way worth repeating is retried.
    pub(super) retries: usize,
    /// The first wait before a retry; it doubles.
    pub(super) backoff: Duration,
}

/// One raw page: keys as the bucket holds them, and whether more follow.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct RawPage {
    /// The keys, in the bucket's (byte) order.
    pub(super) keys: Vec<String>,
    /// Whether the listing goes on after the last key.
    pub(super) truncated: bool,
}

impl RawBucket {
    /// Up to `max_keys` (at most [`MAX_PAGE_KEYS`]) keys under `prefix` after `start_after`.
    pub(super) async fn list_page(
        &self,
        op: &'static str,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<RawPage, StoreError> {
        let mut query = format!(
            "list-type=2&max-keys={}&prefix={}",
            max_keys.clamp(1, MAX_PAGE_KEYS),
            encode(prefix, false)
        );
        if let Some(after) = start_after {
            query.push_str(&format!("&start-after={}", encode(after, false)));
        }
        let url = format!("{}?{query}", self.bucket_url);
        let body = self.send(op, Method::GET, &url).await?;
        parse_page(&body).map_err(|message| StoreError::Backend {
            op,
            message: format!("a listing page that does not parse: {message}"),
        })
    }

    /// Deletes the object whose raw key is `key`; a missing one is not an error.
    pub(super) async fn delete(&self, op: &'static str, key: &str) -> Result<(), StoreError> {
        let url = format!("{}/{}", self.bucket_url, encode(key, true));
        self.send(op, Method::DELETE, &url).await.map(|_| ())
    }

    /// A transport error as a [`StoreError`].
    fn http_error(&self, op: &'static str, kind: HttpErrorKind, message: String) -> StoreError {
        match kind {
            HttpErrorKind::Timeout => StoreError::Timeout {
                op,
                after_ms: crate::clock::duration_ms(self.request_timeout),
            },
            HttpErrorKind::Connect | HttpErrorKind::Request | HttpErrorKind::Interrupted => {
                StoreError::Unavailable { op, message }
            }
            _ => StoreError::Backend { op, message },
        }
    }

    /// Sends a request until it answers or fails in a way not worth repeating, or the retries
    /// run out; the body of a 2xx answer (a 404 counts as an empty one).
    async fn send(
        &self,
        op: &'static str,
        method: Method,
        url: &str,
    ) -> Result<String, StoreError> {
        let mut wait = self.backoff;
        for _ in 0..self.retries {
            match self.send_once(op, method.clone(), url).await {
                Err(StoreError::Unavailable { .. } | StoreError::Timeout { .. }) => {
                    tokio::time::sleep(wait).await;
                    wait = wait.saturating_mul(2);
                }
                answer => return answer,
            }
        }
        self.send_once(op, method, url).await
    }

    /// Signs and sends one request; the body of a 2xx answer (a 404 counts as an empty one).
    async fn send_once(
        &self,
        op: &'static str,
        method: Method,
        url: &str,
    ) -> Result<String, StoreError> {
        let backend = |message: String| StoreError::Backend { op, message };
        let credential = self
            .credentials
            .get_credential()
            .await
            .map_err(|e| backend(format!("no credentials: {e}")))?;
        let mut request = Request::builder()
            .method(method)
            .uri(url)
            .body(HttpRequestBody::empty())
            .map_err(|e| backend(format!("{url}: {e}")))?;
        AwsAuthorizer::new(&credential, "s3", &self.region)
            .try_authorize(&mut request, None)
            .map_err(|e| backend(format!("signing failed: {e}")))?;
        let response = self
            .client
            .execute(request)
            .await
            .map_err(|e| self.http_error(op, e.kind(), e.to_string()))?;
        let status = response.status();
        let body = response
            .into_body()
            .bytes()
            .await
            .map_err(|e| self.http_error(op, e.kind(), e.to_string()))?;
        let text = String::from_utf8_lossy(&body).into_owned();
        match status {
            s if s.is_success() || s == StatusCode::NOT_FOUND => Ok(text),
            s if s.is_server_error() => Err(StoreError::Unavailable {
                op,
                message: format!("{s}: {text}"),
            }),
            s => Err(backend(format!("{s}: {text}"))),
        }
    }
}

/// The raw requests' client (the store's timeouts), bucket URL and signing region, as the
/// builder names them: its endpoint (or AWS's, from the region), path or virtual-hosted style.
pub(super) fn raw_client(
    builder: &AmazonS3Builder,
    bucket: &str,
    request_timeout: Duration,
    connect_timeout: Duration,
    connector: impl HttpConnector,
) -> Result<(HttpClient, String, String), Error> {
    let value = |key: AmazonS3ConfigKey| builder.get_config_value(&key);
    let region = value(AmazonS3ConfigKey::Region).unwrap_or_else(|| "us-east-1".to_owned());
    let virtual_hosted = value(AmazonS3ConfigKey::VirtualHostedStyleRequest)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let bucket_url = match (value(AmazonS3ConfigKey::Endpoint), virtual_hosted) {
        (Some(endpoint), false) => format!("{}/{bucket}", endpoint.trim_end_matches('/')),
        (Some(endpoint), true) => endpoint.trim_end_matches('/').to_owned(),
        (None, false) => format!("https://s3.{region}.amazonaws.com/{bucket}"),
        (None, true) => format!("https://{bucket}.s3.{region}.amazonaws.com"),
    };
    let allow_http = value(AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp))
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let options = ClientOptions::new()
        .with_allow_http(allow_http)
        .with_timeout(request_timeout)
        .with_connect_timeout(connect_timeout);
    let client = connector
        .connect(&options)
        .map_err(|e| Error::InvalidOption {
            name: "s3",
            reason: e.to_string(),
        })?;
    Ok((client, bucket_url, region))
}

/// Percent-encodes every byte but the unreserved ones (and `/` in a path), as SigV4 does.
fn encode(raw: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(raw.len());
    for b in raw.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'.' | b'_' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The keys and the truncation flag of a ListObjectsV2 answer.
fn parse_page(xml: &str) -> Result<RawPage, String> {
    if !xml.contains("<ListBucketResult") {
        return Err(xml.chars().take(200).collect());
    }
    let mut keys = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find("<Key>") {
        let after = &rest[start + "<Key>".len()..];
        let end = after.find("</Key>").ok_or("a <Key> without its end")?;
        keys.push(unescape(&after[..end])?);
        rest = &after[end..];
    }
    Ok(RawPage {
        keys,
        truncated: xml.contains("<IsTruncated>true</IsTruncated>"),
    })
}

/// Resolves the five XML entities and numeric character references.
fn unescape(text: &str) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let tail = &rest[amp + 1..];
        let semi = tail.find(';').ok_or("an '&' without ';'")?;
        let entity = &tail[..semi];
        let ch = match entity {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = match entity.strip_prefix("#x") {
                    Some(hex) => u32::from_str_radix(hex, 16).ok(),
                    None => entity.strip_prefix('#').and_then(|d| d.parse().ok()),
                };
                code.and_then(char::from_u32)
                    .ok_or_else(|| format!("an unknown entity &{entity};"))?
            }
        };
        out.push(ch);
        rest = &tail[semi + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_gives_its_keys_raw_and_unescaped() {
        let xml = "<?xml version=\"1.0\"?><ListBucketResult><IsTruncated>true</IsTruncated>\
                   <Contents><Key>a/e00000001//notes.txt</Key></Contents>\
                   <Contents><Key>a/b&amp;c&#x41;&#66;</Key></Contents></ListBucketResult>";
        assert_eq!(
            parse_page(xml),
            Ok(RawPage {
                keys: vec!["a/e00000001//notes.txt".into(), "a/b&cAB".into()],
                truncated: true
            })
        );
        assert!(parse_page("<Error>denied</Error>").is_err());
        assert!(parse_page("<ListBucketResult><Key>a&bogus;</Key>").is_err());
    }

    #[test]
    fn paths_keep_their_slashes_and_queries_do_not() {
        assert_eq!(encode("a//b c~+", true), "a//b%20c~%2B");
        assert_eq!(encode("a/b", false), "a%2Fb");
    }
}
