//! One segment of the change log: the pages a run of committed batches changed, with the
//! database size after them and the sums before and after (see [`super::sums`]).
//!
//! Encoded by [`crate::codec`] (bincode 2, the bytes of bincode 1), then a SHA-256 of the
//! encoded bytes appended:
//!
//! ```text
//!  ┌──────────────────────────────────────────────┬──────────────────────────┐
//!  │ codec bytes of Segment { header, pages }     │ SHA-256 of those bytes   │
//!  └──────────────────────────────────────────────┴──────────────────────────┘
//! ```
//!
//! [`Segment::decode`] checks, in this order: the SHA-256, the encoding (every byte), then that
//! the segment says what its key says — format, tenant, position — and that it is well formed:
//! a valid page size, `db_pages ≥ 1`, pages strictly ascending within `1..=db_pages` and each
//! exactly one page long, and a `prev` exactly one before it, of its epoch or an older one (or
//! none for the first segment). Whether it applies to a state is [`super::apply`]'s check.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Changes, LogError};
use crate::ids::LeaseKey;
use crate::layout::{LogPos, segment_key};

/// The segment format this build writes and reads.
pub const SEGMENT_FORMAT: u32 = 1;

/// What a segment says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentHeader {
    /// [`SEGMENT_FORMAT`].
    pub format: u32,
    /// The tenant's lease key, `<org>/<tenant>`.
    pub key: String,
    /// Where it lies in the log (its key in the durable store).
    pub pos: LogPos,
    /// The position it applies to: the segment before it, or the image's position; `None` for
    /// the first segment applied to the tenant's image without a position (or to nothing).
    pub prev: Option<LogPos>,
    /// The database's page size.
    pub page_size: u32,
    /// How many pages the database has after it.
    pub db_pages: u32,
    /// The database's sum before it ([`super::PageSums::total`]).
    pub sum_before: u64,
    /// The database's sum after it.
    pub sum_after: u64,
    /// Wall-clock milliseconds since the Unix epoch when it was cut.
    pub created_at_ms: u64,
}

/// One changed page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// Its number, from 1.
    pub pgno: u32,
    /// Its bytes (`page_size` of them).
    pub data: Vec<u8>,
}

/// A segment: its header and its pages, in ascending page number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// What it says about itself.
    pub header: SegmentHeader,
    /// The changed pages.
    pub pages: Vec<Page>,
}

/// The length of the SHA-256 appended to every encoded segment.
pub const CHECKSUM_LEN: usize = 32;

/// What each page adds to an encoded segment besides its bytes: its number (4 bytes) and the
/// length of its bytes (8).
pub const ENCODED_PER_PAGE: u64 = 12;

/// The longest lease key a segment can name: two ids of at most [`crate::ids::MAX_ID_LEN`] bytes
/// and the `/` between them.
const MAX_KEY_LEN: u64 = 2 * crate::ids::MAX_ID_LEN as u64 + 1;

/// The bytes of the encoded segment ([`Segment::encode`], its SHA-256 included) of the tenant
/// whose key is `key_len` bytes long, with a `prev` or not, carrying `pages` pages of
/// `page_size` bytes: the codec's fixed-width fields, the key, the page count, each page, the
/// checksum. Pinned against [`Segment::encode`] by a test.
pub fn encoded_len(key_len: u64, prev: bool, page_size: u32, pages: u64) -> u64 {
    // format, key (length + bytes), pos, prev (tag + pos), page_size, db_pages, the two sums,
    // created_at_ms; then the page count.
    let header = 4 + (8 + key_len) + 16 + (1 + if prev { 16 } else { 0 }) + 4 + 4 + 8 + 8 + 8;
    let each = ENCODED_PER_PAGE.saturating_add(u64::from(page_size));
    (header + 8 + CHECKSUM_LEN as u64).saturating_add(pages.saturating_mul(each))
}

/// The most bytes an encoded segment of `pages` pages of `page_size` bytes takes, whoever the
/// tenant ([`encoded_len`] with the longest key and a `prev`): what a writer compares with its
/// segment limit before a batch commits (docs/guarantees.md, "Limits").
pub fn encoded_bound(page_size: u32, pages: u64) -> u64 {
    encoded_len(MAX_KEY_LEN, true, page_size, pages)
}

impl Segment {
    /// The segment at `pos` of `key`, applying to `prev`, holding `changes` (its pages in
    /// ascending page number, as the map keeps them), cut at `created_at_ms`.
    pub fn from_changes(
        key: &LeaseKey,
        pos: LogPos,
        prev: Option<LogPos>,
        changes: Changes,
        created_at_ms: u64,
    ) -> Segment {
        Segment {
            header: SegmentHeader {
                format: SEGMENT_FORMAT,
                key: key.to_string(),
                pos,
                prev,
                page_size: changes.page_size,
                db_pages: changes.db_pages,
                sum_before: changes.sum_before,
                sum_after: changes.sum_after,
                created_at_ms,
            },
            pages: changes
                .pages
                .into_iter()
                .map(|(pgno, data)| Page { pgno, data })
                .collect(),
        }
    }

    /// The bytes put in the durable store: the codec bytes, then their SHA-256. A segment that
    /// [`Segment::decode`] would refuse for its shape is refused here too, so a writer never
    /// ships one.
    pub fn encode(&self) -> Result<Vec<u8>, LogError> {
        let what = || format!("segment {} of {}", self.header.pos, self.header.key);
        self.check_shape().map_err(|reason| LogError::Corrupt {
            what: what(),
            reason,
        })?;
        let mut bytes = crate::codec::encode(self).map_err(|e| LogError::Corrupt {
            what: what(),
            reason: e.to_string(),
        })?;
        let sum = Sha256::digest(&bytes);
        bytes.extend_from_slice(&sum);
        Ok(bytes)
    }

    /// Decodes and checks the bytes fetched from `segment_key(key, pos)`. Anything that fails a
    /// check is [`LogError::Corrupt`] naming that key; nothing of a refused segment is used.
    pub fn decode(bytes: &[u8], key: &LeaseKey, pos: LogPos) -> Result<Segment, LogError> {
        let corrupt = |reason: String| LogError::Corrupt {
            what: segment_key(key, pos),
            reason,
        };
        let Some(split) = bytes.len().checked_sub(CHECKSUM_LEN) else {
            return Err(corrupt(format!(
                "{} bytes, shorter than its SHA-256",
                bytes.len()
            )));
        };
        let (body, sum) = bytes.split_at(split);
        if Sha256::digest(body).as_slice() != sum {
            return Err(corrupt("its SHA-256 does not match its bytes".to_string()));
        }
        let seg: Segment = crate::codec::decode(body).map_err(|e| corrupt(e.to_string()))?;
        let h = &seg.header;
        if h.format != SEGMENT_FORMAT {
            return Err(corrupt(format!(
                "format {}; this build reads {SEGMENT_FORMAT}",
                h.format
            )));
        }
        if h.key != key.as_str() || h.pos != pos {
            return Err(corrupt(format!(
                "it says it is {} of {}, not the segment it was fetched as",
                h.pos, h.key
            )));
        }
        seg.check_shape().map_err(corrupt)?;
        Ok(seg)
    }

    /// The checks that need no context: page size, page numbers and lengths, and `prev`.
    fn check_shape(&self) -> Result<(), String> {
        let h = &self.header;
        if !is_page_size(h.page_size) {
            return Err(format!(
                "page size {} is not a SQLite page size",
                h.page_size
            ));
        }
        if h.db_pages == 0 {
            return Err("a database after a commit has at least one page, it says 0".into());
        }
        let mut last = 0u32;
        for page in &self.pages {
            if page.pgno <= last || page.pgno > h.db_pages {
                return Err(format!(
                    "page {} after page {last}: pages must ascend within 1..={}",
                    page.pgno, h.db_pages
                ));
            }
            if page.data.len() != h.page_size as usize {
                return Err(format!(
                    "page {} is {} bytes, not {}",
                    page.pgno,
                    page.data.len(),
                    h.page_size
                ));
            }
            if page.pgno == 1 && super::sums::header_page_size(&page.data) != Some(h.page_size) {
                return Err(format!(
                    "page 1's database header does not name page size {}",
                    h.page_size
                ));
            }
            last = page.pgno;
        }
        match h.prev {
            None if h.pos.seq == 1 => Ok(()),
            None => Err(format!(
                "no previous position, but it is number {}",
                h.pos.seq
            )),
            Some(prev) if prev.seq.checked_add(1) != Some(h.pos.seq) => Err(format!(
                "it follows {prev}, not the position right before {}",
                h.pos
            )),
            Some(prev) if prev.epoch > h.pos.epoch => {
                Err(format!("it follows {prev}, of a later epoch than its own"))
            }
            Some(_) => Ok(()),
        }
    }
}

/// Whether `size` is a SQLite page size: a power of two from 512 to 65,536.
pub fn is_page_size(size: u32) -> bool {
    (512..=65_536).contains(&size) && size.is_power_of_two()
}

#[cfg(test)]
mod tests;
