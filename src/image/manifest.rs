//! The manifest published beside every image, and the checks of fetched bytes.
//!
//! A manifest is JSON (format [`FORMAT_VERSION`]):
//!
//! ```json
//! { "format": 1, "key": "acme/t1", "epoch": 3, "seq": 2, "size": 8192,
//!   "sha256": "<64 lowercase hex>", "base": { "epoch": 3, "seq": 1, "sha256": "…" },
//!   "created_at_ms": 1700000000000, "log": { "epoch": 3, "seq": 41 } }
//! ```
//!
//! `log` (absent or `null` for an image taken without a change log) is the log position the
//! image holds.
//!
//! `base` names the image this one was built on (`null` for the first), so the images form a
//! chain that only goes back in `(epoch, seq)`; [`parse_manifest`] refuses one that does not.
//!
//! **Compatibility rule** (retention deletes a damaged manifest with its image, so a build must
//! tell a newer build's manifest from damage): every later format keeps a numeric top-level
//! `format` above [`FORMAT_VERSION`] and stays within [`MAX_MANIFEST_BYTES`], and a build that
//! changes what a manifest may hold — a field, a check relaxed — bumps `format`, never writes
//! format 1 that this build would refuse. [`is_newer_format`] is the test a build applies.

use serde::{Deserialize, Serialize};

use super::{FORMAT_VERSION, ImageError, SQLITE_HEADER, sha256_hex};
use crate::ids::LeaseKey;
use crate::layout::{ImageRef, LogPos, image_key, manifest_key};

/// The manifest of one image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The format version, [`FORMAT_VERSION`].
    pub format: u32,
    /// The tenant's lease key, `<org>/<tenant>`.
    pub key: String,
    /// The epoch of the tenure that took the image.
    pub epoch: u64,
    /// The image's number within its epoch, from 1.
    pub seq: u64,
    /// The image's size in bytes.
    pub size: u64,
    /// SHA-256 of the image, 64 lowercase hex characters.
    pub sha256: String,
    /// The image this one was built on (the head when it was taken), if any.
    pub base: Option<ImageRef>,
    /// Wall-clock milliseconds since the Unix epoch when it was published.
    pub created_at_ms: u64,
    /// The change-log position the image holds: every segment up to and including it is in
    /// the image, and a restore applies the segments after it. `None` for an image taken
    /// without a log (and in every manifest written before the log existed: the field is then
    /// absent, and the format stays 1).
    #[serde(default)]
    pub log: Option<LogPos>,
    /// True when the image holds writes made after `log` that no segment carries (an image of
    /// an `Images` tenure of a tenant with a log): a restore may continue the log from it, but
    /// a point-in-time restore never uses it for a moment of the log.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub beyond_log: bool,
}

impl Manifest {
    /// The reference to this image, as a head or a `base` names it.
    pub fn image_ref(&self) -> ImageRef {
        ImageRef {
            epoch: self.epoch,
            seq: self.seq,
            sha256: self.sha256.clone(),
        }
    }

    /// The manifest as the JSON bytes that are published.
    pub fn to_json(&self) -> Result<Vec<u8>, ImageError> {
        serde_json::to_vec_pretty(self)
            .map_err(|e| ImageError::Io(format!("manifest to JSON: {e}")))
    }
}

/// Whether `s` is a SHA-256 as manifests carry it: 64 lowercase hex characters.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Whether `bytes` start with the SQLite file header, `"SQLite format 3\0"`.
pub fn has_sqlite_header(bytes: &[u8]) -> bool {
    bytes.starts_with(SQLITE_HEADER)
}

/// The largest manifest this build reads: a real one is a few hundred bytes; anything larger
/// at a manifest's key is damage, refused before it is parsed.
pub const MAX_MANIFEST_BYTES: usize = 64 * 1024;

/// Whether `bytes` are a manifest of a format newer than this build reads (JSON, at most
/// [`MAX_MANIFEST_BYTES`], with a numeric `format` above [`FORMAT_VERSION`]): written by a
/// newer build, not damaged.
pub fn is_newer_format(bytes: &[u8]) -> bool {
    bytes.len() <= MAX_MANIFEST_BYTES
        && serde_json::from_slice::<serde_json::Value>(bytes)
            .ok()
            .and_then(|v| v.get("format").and_then(serde_json::Value::as_u64))
            .is_some_and(|v| v > u64::from(FORMAT_VERSION))
}

/// Parses the manifest fetched from `manifest_key(key, epoch, seq)` and checks it: at most
/// [`MAX_MANIFEST_BYTES`], valid JSON,
/// format [`FORMAT_VERSION`], the same key, epoch and seq as where it was fetched from, a
/// well-formed SHA-256, and a `base` that is older than the image. Anything else is
/// [`ImageError::Corrupt`] naming the manifest's key.
pub fn parse_manifest(
    bytes: &[u8],
    key: &LeaseKey,
    epoch: u64,
    seq: u64,
) -> Result<Manifest, ImageError> {
    let what = manifest_key(key, epoch, seq);
    let corrupt = |reason: String| ImageError::Corrupt {
        what: what.clone(),
        reason,
    };
    if bytes.len() > MAX_MANIFEST_BYTES {
        return Err(corrupt(format!(
            "{} bytes; a manifest is at most {MAX_MANIFEST_BYTES}",
            bytes.len()
        )));
    }
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not JSON: {e}")))?;
    match value.get("format").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(FORMAT_VERSION) => {}
        Some(v) => {
            return Err(corrupt(format!(
                "format version {v}; this build reads {FORMAT_VERSION}"
            )));
        }
        None => return Err(corrupt("no numeric format version".to_string())),
    }
    let manifest: Manifest =
        serde_json::from_value(value).map_err(|e| corrupt(format!("not a manifest: {e}")))?;
    if manifest.key != key.as_str() || manifest.epoch != epoch || manifest.seq != seq {
        return Err(corrupt(format!(
            "it describes {}/e{:08}/snap-{:06}, not the image it was fetched for",
            manifest.key, manifest.epoch, manifest.seq
        )));
    }
    check_fields(&manifest).map_err(corrupt)?;
    Ok(manifest)
}

/// The checks every manifest passes, read or written: well-formed hashes and a chain that
/// only goes back.
pub(super) fn check_fields(m: &Manifest) -> Result<(), String> {
    if !is_sha256_hex(&m.sha256) {
        return Err(format!(
            "sha256 {:?} is not 64 lowercase hex characters",
            m.sha256
        ));
    }
    if let Some(base) = &m.base {
        if !is_sha256_hex(&base.sha256) {
            return Err(format!(
                "base sha256 {:?} is not 64 lowercase hex characters",
                base.sha256
            ));
        }
        if (base.epoch, base.seq) >= (m.epoch, m.seq) {
            return Err(format!(
                "base e{:08}/snap-{:06} is not older than the image itself",
                base.epoch, base.seq
            ));
        }
    }
    Ok(())
}

/// Checks fetched image bytes against their manifest: the size, the SHA-256, and the SQLite
/// header. A failure is [`ImageError::Corrupt`] naming the image.
pub fn verify(manifest: &Manifest, bytes: &[u8]) -> Result<(), ImageError> {
    let corrupt = |reason: String| ImageError::Corrupt {
        what: image_name(manifest),
        reason,
    };
    if bytes.len() as u64 != manifest.size {
        return Err(corrupt(format!(
            "{} bytes, the manifest says {}",
            bytes.len(),
            manifest.size
        )));
    }
    let actual = sha256_hex(bytes);
    if actual != manifest.sha256 {
        return Err(corrupt(format!(
            "SHA-256 is {actual}, the manifest says {}",
            manifest.sha256
        )));
    }
    if !has_sqlite_header(bytes) {
        return Err(corrupt(
            "it does not start with the SQLite header".to_string(),
        ));
    }
    Ok(())
}

/// The durable key of the image a manifest describes (or a readable stand-in if the manifest's
/// key does not parse).
pub(super) fn image_name(m: &Manifest) -> String {
    match LeaseKey::parse(&m.key) {
        Ok(key) => image_key(&key, m.epoch, m.seq),
        Err(_) => format!("image {:?} e{:08} seq {:06}", m.key, m.epoch, m.seq),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{OrgId, TenantId};

    fn key() -> LeaseKey {
        LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t1").unwrap())
    }

    fn manifest() -> Manifest {
        Manifest {
            format: FORMAT_VERSION,
            key: "acme/t1".into(),
            epoch: 3,
            seq: 2,
            size: 5,
            sha256: sha256_hex(b"bytes"),
            base: Some(ImageRef {
                epoch: 3,
                seq: 1,
                sha256: "a".repeat(64),
            }),
            created_at_ms: 17,
            beyond_log: false,
            log: Some(LogPos { epoch: 3, seq: 41 }),
        }
    }

    #[test]
    fn a_manifest_round_trips() {
        let m = manifest();
        let parsed = parse_manifest(&m.to_json().unwrap(), &key(), 3, 2).unwrap();
        assert_eq!(parsed, m);
    }

    #[test]
    fn a_manifest_larger_than_the_bound_is_corrupt_before_it_is_parsed() {
        let mut json = manifest().to_json().unwrap();
        // Valid JSON still: whitespace after the object.
        json.resize(MAX_MANIFEST_BYTES + 1, b' ');
        match parse_manifest(&json, &key(), 3, 2) {
            Err(ImageError::Corrupt { what, reason }) => {
                assert!(what.ends_with("snap-000002.json"), "{what}");
                assert!(reason.contains("at most 65536"), "{reason}");
            }
            other => panic!("an oversized manifest is corrupt: {other:?}"),
        }
        json.truncate(MAX_MANIFEST_BYTES);
        assert_eq!(parse_manifest(&json, &key(), 3, 2).unwrap(), manifest());
    }

    #[test]
    fn a_manifest_of_a_newer_format_is_told_from_damage() {
        let mut newer: serde_json::Value =
            serde_json::from_slice(&manifest().to_json().unwrap()).unwrap();
        newer["format"] = serde_json::json!(FORMAT_VERSION + 1);
        let newer = serde_json::to_vec(&newer).unwrap();
        assert!(parse_manifest(&newer, &key(), 3, 2).is_err());
        assert!(is_newer_format(&newer));
        assert!(!is_newer_format(&manifest().to_json().unwrap()));
        assert!(!is_newer_format(b"not json"));
        assert!(!is_newer_format(br#"{"format":"2"}"#));
    }

    #[test]
    fn a_manifest_written_before_the_log_parses_with_no_position() {
        let old = format!(
            r#"{{"format":1,"key":"acme/t1","epoch":3,"seq":2,"size":5,"sha256":"{}","base":null,"created_at_ms":17}}"#,
            sha256_hex(b"bytes")
        );
        let parsed = parse_manifest(old.as_bytes(), &key(), 3, 2).unwrap();
        assert_eq!(parsed.log, None);
        assert_eq!(parsed.base, None);
        let mut m = manifest();
        m.log = None;
        let json = String::from_utf8(m.to_json().unwrap()).unwrap();
        assert!(json.contains("\"log\": null"), "{json}");
    }

    #[test]
    fn sha256_hex_is_64_lowercase_hex() {
        assert!(is_sha256_hex(&"0123456789abcdef".repeat(4)));
        assert!(!is_sha256_hex(&"A".repeat(64)));
        assert!(!is_sha256_hex(&"a".repeat(63)));
        assert!(!is_sha256_hex(&"g".repeat(64)));
    }

    #[test]
    fn a_base_must_be_older() {
        let mut m = manifest();
        m.base = Some(ImageRef {
            epoch: 3,
            seq: 2,
            sha256: "a".repeat(64),
        });
        assert!(check_fields(&m).is_err());
        m.base = Some(ImageRef {
            epoch: 2,
            seq: 9,
            sha256: "a".repeat(64),
        });
        assert_eq!(check_fields(&m), Ok(()));
    }

    #[test]
    fn verify_checks_size_hash_and_header() {
        let mut m = manifest();
        assert!(
            matches!(verify(&m, b"bytes"), Err(ImageError::Corrupt { reason, .. }) if reason.contains("header"))
        );
        assert!(verify(&m, b"byte").is_err());
        let mut image = SQLITE_HEADER.to_vec();
        image.extend_from_slice(b"rest");
        m.size = image.len() as u64;
        m.sha256 = sha256_hex(&image);
        assert_eq!(verify(&m, &image), Ok(()));
        image[17] ^= 1;
        assert!(verify(&m, &image).is_err());
    }
}
