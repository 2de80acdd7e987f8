//! One segment of the change log: the pages a run of committed batches changed, with the
//! database size after them and the sums before and after (see [`super::sums`]).
//!
//! Encoded by [`crate::codec`] (bincode 2, the bytes of bincode 1), then a SHA-256 of the
//! encoded bytes appended.

use serde::{Deserialize, Serialize};

use crate::layout::LogPos;

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
