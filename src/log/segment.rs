//! One segment of the change log: the pages a run of committed batches changed, with the
//! database size after them and the sums before and after (see [`super::sums`]).
//!
//! Two formats, both read; the writer picks per segment ([`Segment::encode_with`]):
//!
//! ```text
//!  format 1 (plain):
//!  ┌──────────────────────────────────────────────┬──────────────────────────┐
//!  │ codec bytes of Segment { header, pages }     │ SHA-256 of those bytes   │
//!  └──────────────────────────────────────────────┴──────────────────────────┘
//!  format 2 (zstd, `SegmentCompression::Zstd`):
//!  ┌────────────┬──────────────┬──────────────────────────────┬──────────────────────────┐
//!  │ u32 LE = 2 │ u64 LE raw   │ zstd frame of the codec bytes │ SHA-256 of everything    │
//!  │            │ length       │ of Segment { header, pages }  │ before it                │
//!  └────────────┴──────────────┴──────────────────────────────┴──────────────────────────┘
//! ```
//!
//! The codec bytes start with the header's `format`, so the first four bytes name the format in
//! both, and the header inside says the same format as the bytes around it. A segment is written
//! as format 2 unless compression is off or would not make it smaller; so the stored bytes are
//! never more than the plain encoding's, which is what `segment_limit` and [`encoded_bound`]
//! measure (the raw size: docs/guarantees.md, "Limits").
//!
//! [`Segment::decode`] checks, in this order: the SHA-256 (of the stored bytes, so corruption is
//! caught before anything is decompressed), the format, the raw length a format-2 segment claims
//! (at most the codec's limit, refused before anything is allocated: [`crate::codec::decompress`]),
//! the decompression and the encoding (every byte), then that the segment says what its key says
//! — format, tenant, position — and that it is well formed: a valid page size, `db_pages ≥ 1`,
//! pages strictly ascending within `1..=db_pages` and each exactly one page long, and a `prev`
//! exactly one before it, of its epoch or an older one (or none for the first segment). Whether
//! it applies to a state is [`super::apply`]'s check.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Changes, LogError};
use crate::ids::LeaseKey;
use crate::layout::{LogPos, segment_key};

/// The segment format this build writes: the codec bytes compressed by zstd (read: this and
/// [`SEGMENT_FORMAT_PLAIN`]).
pub const SEGMENT_FORMAT: u32 = 2;

/// The plain segment format (the codec bytes uncompressed): still read, and written when
/// compression is off or would not make a segment smaller.
pub const SEGMENT_FORMAT_PLAIN: u32 = 1;

/// The bytes a format-2 segment puts before its zstd frame: the format and the raw length.
pub const COMPRESSED_PREFIX_LEN: usize = 4 + 8;

/// How a segment is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SegmentCompression {
    /// Format 2 (zstd) when it makes the segment smaller, else format 1.
    Zstd,
    /// Always format 1, uncompressed (the runtime's default: `RuntimeConfig::segment_compression`).
    #[default]
    Off,
}

/// A segment's stored bytes and the size of its plain encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    /// The bytes put in the durable store.
    pub bytes: Vec<u8>,
    /// The plain encoding's size (codec bytes and SHA-256): what `segment_limit` bounds
    /// ([`encoded_len`]); at least `bytes.len()`.
    pub raw_len: u64,
}

/// The header and pages of a segment, borrowed: what the codec encodes (the same bytes as
/// [`Segment`]'s).
#[derive(Serialize)]
struct SegmentRef<'a> {
    header: &'a SegmentHeader,
    pages: &'a [Page],
}

/// What a segment says about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentHeader {
    /// The format the segment was written in ([`SEGMENT_FORMAT`] or [`SEGMENT_FORMAT_PLAIN`]);
    /// [`Segment::encode_with`] sets it to the one it writes.
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
    /// Its bytes (`page_size` of them), encoded as one byte string: the same bytes on the wire
    /// as a sequence of `u8` (a length, then the bytes), without a call per byte
    /// (`pages_encode_as_before` pins it).
    #[serde(with = "serde_bytes")]
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

/// The most bytes a stored segment can take, in either format: the codec's limit
/// ([`crate::codec::LIMIT`]) and its SHA-256 (a format-2 segment is stored only when it is
/// smaller than its plain encoding). A reader refuses an object larger than this under a
/// segment's key before it fetches a byte of it (docs/guarantees.md, "Limits").
pub const MAX_STORED_LEN: u64 = crate::codec::LIMIT as u64 + CHECKSUM_LEN as u64;

/// What each page adds to an encoded segment besides its bytes: its number (4 bytes) and the
/// length of its bytes (8).
pub const ENCODED_PER_PAGE: u64 = 12;

/// The longest lease key a segment can name: two ids of at most [`crate::ids::MAX_ID_LEN`] bytes
/// and the `/` between them.
const MAX_KEY_LEN: u64 = 2 * crate::ids::MAX_ID_LEN as u64 + 1;

/// The bytes of the plain encoded segment (format 1, its SHA-256 included: the raw size a
/// compressed segment is measured by) of the tenant
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

    /// The bytes put in the durable store, compressed ([`SegmentCompression::Zstd`]). A segment
    /// that [`Segment::decode`] would refuse for its shape is refused here too, so a writer
    /// never ships one.
    pub fn encode(&self) -> Result<Vec<u8>, LogError> {
        self.encode_with(SegmentCompression::Zstd)
            .map(|encoded| encoded.bytes)
    }

    /// The bytes put in the durable store and the plain encoding's size: format 2 when
    /// `compression` is on and it makes the segment smaller, else format 1. The header's
    /// `format` is written as the format chosen, whatever it holds.
    pub fn encode_with(&self, compression: SegmentCompression) -> Result<Encoded, LogError> {
        let what = || format!("segment {} of {}", self.header.pos, self.header.key);
        self.check_shape().map_err(|reason| LogError::Corrupt {
            what: what(),
            reason,
        })?;
        let codec = |e: crate::codec::CodecError| LogError::Corrupt {
            what: what(),
            reason: e.to_string(),
        };
        let format = match compression {
            SegmentCompression::Zstd => SEGMENT_FORMAT,
            SegmentCompression::Off => SEGMENT_FORMAT_PLAIN,
        };
        let header = SegmentHeader {
            format,
            ..self.header.clone()
        };
        let mut codec_bytes = crate::codec::encode(&SegmentRef {
            header: &header,
            pages: &self.pages,
        })
        .map_err(codec)?;
        let raw_len = (codec_bytes.len() + CHECKSUM_LEN) as u64;
        if format == SEGMENT_FORMAT {
            let frame = crate::codec::compress(&codec_bytes).map_err(codec)?;
            if compression_pays(frame.len(), codec_bytes.len()) {
                let mut bytes =
                    Vec::with_capacity(COMPRESSED_PREFIX_LEN + frame.len() + CHECKSUM_LEN);
                bytes.extend_from_slice(&SEGMENT_FORMAT.to_le_bytes());
                bytes.extend_from_slice(&(codec_bytes.len() as u64).to_le_bytes());
                bytes.extend_from_slice(&frame);
                return Ok(Encoded {
                    bytes: sealed(bytes),
                    raw_len,
                });
            }
            // Not smaller: plain after all. The codec bytes begin with the header's format
            // (a u32, pinned by `golden_segment_bytes_are_pinned`), so only it changes.
            codec_bytes[..4].copy_from_slice(&SEGMENT_FORMAT_PLAIN.to_le_bytes());
        }
        Ok(Encoded {
            bytes: sealed(codec_bytes),
            raw_len,
        })
    }

    /// Decodes and checks the bytes fetched from `segment_key(key, pos)`, of either format.
    /// Anything that fails a check is [`LogError::Corrupt`] naming that key; nothing of a
    /// refused segment is used.
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
        let format = match body {
            [a, b, c, d, ..] => u32::from_le_bytes([*a, *b, *c, *d]),
            _ => {
                return Err(corrupt(format!(
                    "{} bytes, shorter than a format",
                    body.len()
                )));
            }
        };
        let seg: Segment = match format {
            SEGMENT_FORMAT_PLAIN => {
                crate::codec::decode(body).map_err(|e| corrupt(e.to_string()))?
            }
            SEGMENT_FORMAT => {
                let Some((claim, frame)) = body[4..].split_first_chunk::<8>() else {
                    return Err(corrupt("format 2, cut before its raw length".to_string()));
                };
                let raw = crate::codec::decompress(frame, u64::from_le_bytes(*claim))
                    .map_err(|e| corrupt(e.to_string()))?;
                crate::codec::decode(&raw).map_err(|e| corrupt(e.to_string()))?
            }
            other => {
                return Err(corrupt(format!(
                    "format {other}; this build reads {SEGMENT_FORMAT_PLAIN} and {SEGMENT_FORMAT}"
                )));
            }
        };
        let h = &seg.header;
        if h.format != format {
            return Err(corrupt(format!(
                "its header says format {}, its bytes are format {format}",
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

/// Whether a zstd frame of `frame_len` bytes, behind its prefix, is smaller than the
/// `plain_len` codec bytes it compresses: only then is a segment written as format 2.
pub fn compression_pays(frame_len: usize, plain_len: usize) -> bool {
    COMPRESSED_PREFIX_LEN.saturating_add(frame_len) < plain_len
}

/// `body` with its SHA-256 appended.
fn sealed(mut body: Vec<u8>) -> Vec<u8> {
    let sum = Sha256::digest(&body);
    body.extend_from_slice(&sum);
    body
}

/// Whether `size` is a SQLite page size: a power of two from 512 to 65,536.
pub fn is_page_size(size: u32) -> bool {
    (512..=65_536).contains(&size) && size.is_power_of_two()
}

#[cfg(test)]
mod tests;
