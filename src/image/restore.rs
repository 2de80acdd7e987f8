//! Publishing an image to the durable store, and fetching the one to restore.
//!
//! Publishing is `put_if_absent` of the image, then of its manifest; the caller then moves the
//! head by compare-and-set in the lease store (promise 4 in docs/guarantees.md). Restoring reads exactly what
//! the head names — never a listing — and falls back along the manifests' `base` references
//! when an image is missing or fails its checks, never to the floor or below.

use super::manifest::{MAX_MANIFEST_BYTES, check_fields, image_name, parse_manifest, verify};
use super::{FORMAT_VERSION, ImageError, ImageFile, Manifest, has_sqlite_header, sha256_hex};
use crate::durable::{DurableStore, Put, StoreError};
use crate::ids::LeaseKey;
use crate::layout::{ImageRef, LogPos, image_key, manifest_key};

/// Uploads `image` as `(epoch, seq)` of `key`: the image, then its manifest, each with
/// `put_if_absent`. `log` is the change-log position the image holds (`None` for an image
/// taken without a log), recorded in the manifest. Returns the manifest. It does **not** move the head; the caller does the
/// compare-and-set in the lease store.
///
/// The file is read back and must still match `image` (size, SHA-256, SQLite header), else
/// [`ImageError::Corrupt`] and nothing is uploaded. An object already under either key is
/// [`ImageError::AlreadyExists`]: objects are never overwritten, and the same `(epoch, seq)`
/// taken twice is a bug or a zombie. After any failure, publish under the next `seq`.
///
/// An object already under a key holding exactly the bytes being put is taken for this very put
/// having landed before (an S3 client repeats a `PUT` whose connection was cut after the server
/// applied it, and then hears `AlreadyExists`): it is the uploader's own, not another writer's.
///
/// The file is read with `tokio::fs`; hashing it runs inline (about 90 ms per 100 MB on the
/// benchmark machine), as does verifying in [`fetch_restorable`].
// Eight plain arguments read better at the two call sites than a one-use struct.
#[allow(clippy::too_many_arguments)]
pub async fn upload_image(
    store: &dyn DurableStore,
    key: &LeaseKey,
    epoch: u64,
    seq: u64,
    image: &ImageFile,
    base: Option<ImageRef>,
    log: Option<LogPos>,
    beyond_log: bool,
    created_at_ms: u64,
) -> Result<Manifest, ImageError> {
    let image_at = ImageAt {
        key,
        epoch,
        seq,
        base,
        log,
        beyond_log,
        created_at_ms,
    };
    upload_image_checked(store, &image_at, image, &|| true).await
}

/// Where an image goes and what its manifest says (the arguments of [`upload_image`]).
#[derive(Debug, Clone)]
pub struct ImageAt<'a> {
    /// The tenant.
    pub key: &'a LeaseKey,
    /// The epoch of the tenure that took it.
    pub epoch: u64,
    /// Its number in the epoch.
    pub seq: u64,
    /// The image it was built on.
    pub base: Option<ImageRef>,
    /// The change-log position it holds.
    pub log: Option<LogPos>,
    /// It holds writes beyond `log` that no segment carries.
    pub beyond_log: bool,
    /// Wall-clock milliseconds when it was published.
    pub created_at_ms: u64,
}

/// [`upload_image`], asking `may_put` right before each of its two puts: `false` stops the
/// upload with [`ImageError::Fenced`] before that put is sent. The runtime passes its lease
/// check, so that no put leaves a replica that no longer believes it holds the lease, however
/// long the image took to copy (docs/guarantees.md, "the erasure bound").
pub async fn upload_image_checked(
    store: &dyn DurableStore,
    at: &ImageAt<'_>,
    image: &ImageFile,
    may_put: &(dyn Fn() -> bool + Sync),
) -> Result<Manifest, ImageError> {
    let ImageAt {
        key,
        epoch,
        seq,
        ref base,
        log,
        beyond_log,
        created_at_ms,
    } = *at;
    let base = base.clone();
    let bytes = tokio::fs::read(&image.path)
        .await
        .map_err(|e| super::io_error("read", &image.path, &e))?;
    check_local_image(image, &bytes)?;
    let manifest = Manifest {
        format: FORMAT_VERSION,
        key: key.to_string(),
        epoch,
        seq,
        size: image.size,
        sha256: image.sha256.clone(),
        base,
        created_at_ms,
        beyond_log,
        log,
    };
    let mkey = manifest_key(key, epoch, seq);
    check_fields(&manifest).map_err(|reason| ImageError::Corrupt {
        what: mkey.clone(),
        reason,
    })?;
    let json = manifest.to_json()?;
    let ikey = image_key(key, epoch, seq);
    for (object, bytes) in [(ikey, bytes), (mkey, json)] {
        if !may_put() {
            return Err(ImageError::Fenced { key: object });
        }
        put_new(store, &object, bytes).await?;
    }
    Ok(manifest)
}

fn check_local_image(image: &ImageFile, bytes: &[u8]) -> Result<(), ImageError> {
    let corrupt = |reason: &str| ImageError::Corrupt {
        what: image.path.display().to_string(),
        reason: reason.to_string(),
    };
    if bytes.len() as u64 != image.size || sha256_hex(bytes) != image.sha256 {
        return Err(corrupt("the file changed since the image was taken"));
    }
    if !has_sqlite_header(bytes) {
        return Err(corrupt("it does not start with the SQLite header"));
    }
    Ok(())
}

/// Puts `bytes` under `key` unless it is taken. An object found there with exactly these bytes
/// is this put's own earlier landing (a retried request), and counts as created.
async fn put_new(store: &dyn DurableStore, key: &str, bytes: Vec<u8>) -> Result<(), ImageError> {
    let expected_bytes = bytes.len() as u64;
    let kept = bytes.clone();
    match store.put_if_absent(key, bytes).await? {
        Put::Created => Ok(()),
        Put::AlreadyExists => {
            let found = store.get_sized(key, expected_bytes).await?;
            if found.as_deref() == Some(kept.as_slice()) {
                return Ok(());
            }
            Err(ImageError::AlreadyExists {
                key: key.to_string(),
            })
        }
    }
}

/// The image to try after `failed`'s image was missing or failed its checks: the one its
/// manifest was built on, if there is one and its epoch is above the floor (and it is older than
/// `failed`, so a walk along the chain always ends).
pub fn next_candidate(failed: &Manifest, floor: u64) -> Option<ImageRef> {
    failed
        .base
        .as_ref()
        .filter(|b| b.epoch > floor && (b.epoch, b.seq) < (failed.epoch, failed.seq))
        .cloned()
}

/// Fetches the image to restore for a tenant whose lease record names `head` and `floor`.
///
/// - No head: `Ok(None)` — the tenant has never published an image; start empty.
/// - Otherwise the manifest and image the head names (by key, never by a listing). The manifest
///   must parse and match the head (epoch, seq, SHA-256); the image must verify. If the image
///   is missing or fails its checks, the manifest's `base` is tried, and so on down the chain
///   ([`next_candidate`]), never to an image whose epoch is at or below `floor`.
///
/// **An image was expected, so an empty ledger is never the answer:** when the chain runs out or
/// reaches the floor with nothing valid, when a manifest on it is missing or corrupt, or when
/// the head itself lies at or below the floor, the result is [`ImageError::Corrupt`] naming
/// every failure, and the caller must not serve the tenant. A store error (an outage, a
/// timeout) is returned as it is and is never a reason to fall back.
pub async fn fetch_restorable(
    store: &dyn DurableStore,
    key: &LeaseKey,
    head: Option<&ImageRef>,
    floor: u64,
) -> Result<Option<(Manifest, Vec<u8>)>, ImageError> {
    let Some(head) = head else {
        return Ok(None);
    };
    let mut failures = Vec::new();
    if head.epoch <= floor {
        failures.push(format!(
            "the head {} is at or below the floor {floor} and may not be read",
            ref_name(key, head)
        ));
        return Err(chain_failed(key, head, floor, &failures));
    }
    let mut wanted = head.clone();
    loop {
        let manifest = match fetch_manifest(store, key, &wanted).await {
            Ok(m) => m,
            Err(ImageError::Corrupt { what, reason }) => {
                failures.push(format!("{what}: {reason}"));
                return Err(chain_failed(key, head, floor, &failures));
            }
            Err(other) => return Err(other),
        };
        match fetch_image(store, key, &manifest).await? {
            Ok(bytes) => return Ok(Some((manifest, bytes))),
            Err(failure) => failures.push(failure),
        }
        match next_candidate(&manifest, floor) {
            Some(base) => wanted = base,
            None => {
                failures.push(chain_end(key, &manifest, floor));
                return Err(chain_failed(key, head, floor, &failures));
            }
        }
    }
}

/// What is at a manifest's key, read without downloading more than [`MAX_MANIFEST_BYTES`].
pub(crate) enum ManifestBytes {
    /// No object there.
    Missing,
    /// An object of this many bytes, more than a manifest can be: damage, not downloaded.
    Oversized(u64),
    /// The object's bytes.
    Bytes(Vec<u8>),
}

/// Reads the object at the manifest key `mkey`, asking its size first (one `size` call): an
/// object larger than [`MAX_MANIFEST_BYTES`] is damage and is not downloaded — on a slow link
/// its download would outlast the store deadline and answer `Timeout` on every try, for ever.
pub(crate) async fn get_manifest_bytes(
    store: &dyn DurableStore,
    mkey: &str,
) -> Result<ManifestBytes, StoreError> {
    match store.size(mkey).await? {
        None => return Ok(ManifestBytes::Missing),
        Some(size) if size > MAX_MANIFEST_BYTES as u64 => {
            return Ok(ManifestBytes::Oversized(size));
        }
        Some(_) => {}
    }
    Ok(match store.get(mkey).await? {
        Some(bytes) => ManifestBytes::Bytes(bytes),
        None => ManifestBytes::Missing,
    })
}

/// The manifest `wanted` names, parsed and matched against `wanted`.
async fn fetch_manifest(
    store: &dyn DurableStore,
    key: &LeaseKey,
    wanted: &ImageRef,
) -> Result<Manifest, ImageError> {
    let mkey = manifest_key(key, wanted.epoch, wanted.seq);
    let bytes = match get_manifest_bytes(store, &mkey).await? {
        ManifestBytes::Bytes(bytes) => bytes,
        ManifestBytes::Missing => {
            return Err(ImageError::Corrupt {
                what: mkey,
                reason: "the manifest is missing".to_string(),
            });
        }
        ManifestBytes::Oversized(size) => {
            return Err(ImageError::Corrupt {
                what: mkey,
                reason: format!("{size} bytes; a manifest is at most {MAX_MANIFEST_BYTES}"),
            });
        }
    };
    let manifest = parse_manifest(&bytes, key, wanted.epoch, wanted.seq)?;
    if manifest.sha256 != wanted.sha256 {
        return Err(ImageError::Corrupt {
            what: mkey,
            reason: format!(
                "it names SHA-256 {}, the reference to it says {}",
                manifest.sha256, wanted.sha256
            ),
        });
    }
    Ok(manifest)
}

/// The image `manifest` describes: `Ok(Ok(bytes))` if it verifies, `Ok(Err(why))` if it is
/// missing or fails its checks (a reason to fall back), `Err` if the store failed.
async fn fetch_image(
    store: &dyn DurableStore,
    key: &LeaseKey,
    manifest: &Manifest,
) -> Result<Result<Vec<u8>, String>, ImageError> {
    let ikey = image_key(key, manifest.epoch, manifest.seq);
    // The manifest names the size, so the read gets as long as a put of it would
    // (docs/guarantees.md, promise 6).
    let Some(bytes) = store.get_sized(&ikey, manifest.size).await? else {
        return Ok(Err(format!("{ikey}: the image is missing")));
    };
    // SHA-256 of the whole image, on a blocking thread: an open runs beside the renewals.
    let manifest = manifest.clone();
    let verified = tokio::task::spawn_blocking(move || match verify(&manifest, &bytes) {
        Ok(()) => Ok(bytes),
        Err(e) => Err(e.to_string()),
    });
    verified
        .await
        .map_err(|e| ImageError::Io(format!("the verifying task failed: {e}")))
}

fn chain_end(key: &LeaseKey, manifest: &Manifest, floor: u64) -> String {
    let this = image_name(manifest);
    match &manifest.base {
        None => format!("{this} was built on nothing: the chain ends there"),
        Some(base) if base.epoch <= floor => format!(
            "{this} was built on {}, at or below the floor {floor}: it may not be read",
            ref_name(key, base)
        ),
        Some(base) => format!(
            "{this} names {} as its base, which is not older",
            ref_name(key, base)
        ),
    }
}

fn chain_failed(key: &LeaseKey, head: &ImageRef, floor: u64, failures: &[String]) -> ImageError {
    ImageError::Corrupt {
        what: format!("the image chain from head {}", ref_name(key, head)),
        reason: format!(
            "no valid image above the floor {floor}; refusing to start the tenant empty: {}",
            failures.join("; ")
        ),
    }
}

fn ref_name(key: &LeaseKey, r: &ImageRef) -> String {
    image_key(key, r.epoch, r.seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(epoch: u64, seq: u64) -> ImageRef {
        ImageRef {
            epoch,
            seq,
            sha256: "b".repeat(64),
        }
    }

    fn built_on(epoch: u64, seq: u64, base: Option<ImageRef>) -> Manifest {
        Manifest {
            format: FORMAT_VERSION,
            key: "acme/t1".into(),
            epoch,
            seq,
            size: 1,
            sha256: "a".repeat(64),
            base,
            created_at_ms: 0,
            log: None,
            beyond_log: false,
        }
    }

    #[test]
    fn the_base_is_next_when_it_is_above_the_floor() {
        assert_eq!(
            next_candidate(&built_on(4, 1, Some(r(3, 7))), 2),
            Some(r(3, 7))
        );
        assert_eq!(
            next_candidate(&built_on(4, 2, Some(r(4, 1))), 0),
            Some(r(4, 1))
        );
    }

    #[test]
    fn nothing_at_or_below_the_floor_is_next() {
        assert_eq!(next_candidate(&built_on(4, 1, Some(r(3, 7))), 3), None);
        assert_eq!(next_candidate(&built_on(4, 1, Some(r(2, 7))), 3), None);
    }

    #[test]
    fn the_chain_ends_at_an_image_built_on_nothing() {
        assert_eq!(next_candidate(&built_on(4, 1, None), 0), None);
    }

    #[test]
    fn a_base_that_is_not_older_is_never_next() {
        assert_eq!(next_candidate(&built_on(4, 1, Some(r(4, 1))), 0), None);
        assert_eq!(next_candidate(&built_on(4, 1, Some(r(5, 1))), 0), None);
    }
}
