//! How a tenant's objects are named in the durable store, and the reference to one image.
//!
//! ```text
//! <org>/<tenant>/e00000003/snap-000001.db     image (a consistent copy of the ledger)
//! <org>/<tenant>/e00000003/snap-000001.json   its manifest
//! <org>/<tenant>/e00000003/log-000000000042.seg  segment 42 of the change log
//! ```
//! Image numbers count from 1 within an epoch. Log positions count from 1 across the tenant's
//! whole life (until a forget): each tenure continues the log where the tip it acquired stands,
//! in the directory of its own epoch.

use serde::{Deserialize, Serialize};

use crate::ids::LeaseKey;

/// One published image: enough to fetch it and check it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ImageRef {
    /// The epoch of the tenure that published it.
    pub epoch: u64,
    /// Its number within that epoch, from 1.
    pub seq: u64,
    /// SHA-256 of the image bytes, 64 lowercase hex characters.
    pub sha256: String,
}

/// A position in a tenant's change log: segment `seq`, shipped by the tenure of `epoch`.
///
/// `seq` grows by exactly one per segment over the tenant's life; `epoch` says whose directory
/// holds it. Positions order by `seq` (two tenures never ship the same `seq` onto one tip, see
/// docs/guarantees.md, the log tip).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LogPos {
    /// The epoch of the tenure that shipped the segment.
    pub epoch: u64,
    /// The segment's number in the tenant's log, from 1.
    pub seq: u64,
}

impl std::fmt::Display for LogPos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "e{:08}/log-{:012}", self.epoch, self.seq)
    }
}

/// `<key>/e<epoch:08>/log-<seq:012>.seg`.
pub fn segment_key(key: &LeaseKey, pos: LogPos) -> String {
    format!("{}log-{:012}.seg", epoch_prefix(key, pos.epoch), pos.seq)
}

/// The log position a key of `key` names: `Some` for `<key>/e<epoch:08>/log-<seq:012>.seg`.
pub fn segment_of(key: &LeaseKey, object_key: &str) -> Option<LogPos> {
    let epoch = epoch_of(key, object_key)?;
    let name = object_key.rsplit_once('/')?.1;
    let digits = name.strip_prefix("log-")?.strip_suffix(".seg")?;
    if digits.len() < 12 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(LogPos {
        epoch,
        seq: digits.parse().ok()?,
    })
}

/// The image a manifest key of `key` names: `Some((epoch, seq))` for
/// `<key>/e<epoch:08>/snap-<seq:06>.json`.
pub fn manifest_of(key: &LeaseKey, object_key: &str) -> Option<(u64, u64)> {
    let epoch = epoch_of(key, object_key)?;
    let name = object_key.rsplit_once('/')?.1;
    let digits = name.strip_prefix("snap-")?.strip_suffix(".json")?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((epoch, digits.parse().ok()?))
}

/// `<key>/e<epoch:08>/`: every object of one tenure.
pub fn epoch_prefix(key: &LeaseKey, epoch: u64) -> String {
    format!("{key}/e{epoch:08}/")
}

/// `<key>/e<epoch:08>/snap-<seq:06>.db`.
pub fn image_key(key: &LeaseKey, epoch: u64, seq: u64) -> String {
    format!("{}snap-{seq:06}.db", epoch_prefix(key, epoch))
}

/// `<key>/e<epoch:08>/snap-<seq:06>.json`.
pub fn manifest_key(key: &LeaseKey, epoch: u64, seq: u64) -> String {
    format!("{}snap-{seq:06}.json", epoch_prefix(key, epoch))
}

/// The epoch an object key of `key` lies in: `Some(3)` for `<key>/e00000003/…`, `None` for a key
/// outside `key`'s prefix or not shaped like the layout (such keys are never swept).
pub fn epoch_of(key: &LeaseKey, object_key: &str) -> Option<u64> {
    let rest = object_key.strip_prefix(&key.prefix())?;
    let (segment, _) = rest.split_once('/')?;
    let digits = segment.strip_prefix('e')?;
    if digits.len() < 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{OrgId, TenantId};

    fn key() -> LeaseKey {
        LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t1").unwrap())
    }

    #[test]
    fn names_follow_the_contract_layout() {
        assert_eq!(image_key(&key(), 3, 1), "acme/t1/e00000003/snap-000001.db");
        assert_eq!(
            manifest_key(&key(), 3, 1),
            "acme/t1/e00000003/snap-000001.json"
        );
        assert_eq!(epoch_prefix(&key(), 12), "acme/t1/e00000012/");
        let pos = LogPos { epoch: 3, seq: 42 };
        assert_eq!(
            segment_key(&key(), pos),
            "acme/t1/e00000003/log-000000000042.seg"
        );
        assert_eq!(segment_of(&key(), &segment_key(&key(), pos)), Some(pos));
        assert_eq!(segment_of(&key(), "acme/t1/e00000003/log-42.seg"), None);
        assert_eq!(
            manifest_of(&key(), &manifest_key(&key(), 3, 7)),
            Some((3, 7))
        );
        assert_eq!(manifest_of(&key(), &image_key(&key(), 3, 7)), None);
        assert_eq!(segment_of(&key(), "acme/t1/e00000003/snap-000001.db"), None);
    }

    #[test]
    fn epochs_are_read_back_only_from_keys_of_the_layout() {
        assert_eq!(
            epoch_of(&key(), "acme/t1/e00000003/snap-000001.db"),
            Some(3)
        );
        assert_eq!(epoch_of(&key(), "acme/t1/e123456789/x"), Some(123_456_789));
        assert_eq!(epoch_of(&key(), "acme/t10/e00000003/x"), None);
        assert_eq!(epoch_of(&key(), "acme/t1/base.json"), None);
        assert_eq!(epoch_of(&key(), "acme/t1/e0003/x"), None);
        assert_eq!(epoch_of(&key(), "acme/t1/eabcdefgh/x"), None);
    }
}
