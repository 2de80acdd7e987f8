//! The durable change log: what a tenant's committed batches changed, page by page, shipped to
//! the durable store as numbered segments and fenced by the log tip in the lease record.
//!
//! ```text
//!  ledger.db-wal ──capture (after COMMIT)──► Changes (pages, database size, sums before/after)
//!                                               │ cut into a Segment at the next log position
//!                                               ▼
//!  durable store   <key>/e<epoch>/log-<seq>.seg  (put_if_absent), then the tip moves by
//!                                               compare-and-set in the lease store
//!                                               │ restore: head image + segments up to the tip,
//!                                               │ each checked against the state it applies to
//!                                               ▼
//!  ledger.db (byte for byte the writer's database after its last acknowledged batch)
//! ```
//!
//! - [`sums`] — the rolling checksum of a database: one hash per page, combined by XOR, so a
//!   change costs per changed page, never per database.
//! - [`segment`] — the segment format (encoded by [`crate::codec`]).
//! - [`capture`] — reading the pages a commit wrote from the WAL.
//! - [`apply`] — writing a segment's pages into a database file, checking its sums.
//! - [`restore`] — head image plus the segments from its position up to the tip.
//! - [`pitr`] — point-in-time restore to a plain SQLite file.
//! - [`error`] — [`LogError`].

pub mod apply;
pub mod capture;
pub mod error;
pub mod pitr;
pub mod restore;
pub mod segment;
pub mod sums;

pub use apply::{apply, finish};
pub use capture::Changes;
pub use error::LogError;
pub use pitr::{
    LatestReport, PitrReport, Target, check_destination, restore_latest, restore_to,
    restore_to_from,
};
pub use restore::{Restored, fetch_log, restore_log};
pub use segment::{Page, Segment, SegmentHeader};
pub use sums::PageSums;
