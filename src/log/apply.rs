//! Applying a segment to a database file: its pages written in place, the file cut to the
//! segment's size, and the rolling checksum checked before and after (docs/guarantees.md, the
//! change log: a segment applies only to exactly the state it was cut from).
//!
//! Blocking file I/O without fsync: a restore applies its segments one after another and then
//! calls [`finish`] once. Run it with `spawn_blocking`, never on an async thread.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::{LogError, PageSums, Segment};

/// Applies `seg` to the database file at `path`, whose sums are `sums` (created if missing,
/// for a tenant restored from nothing), and brings `sums` along.
///
/// Refused as [`LogError::OutOfChain`], with nothing written, when the segment's `sum_before`
/// is not the file's sum ("does not apply to this state") or its page size is not the file's.
/// Pages that make a sum other than `sum_after` are [`LogError::Corrupt`], found before the file
/// is written; `sums` has then moved and must be discarded with the restore.
pub fn apply(path: &Path, sums: &mut PageSums, seg: &Segment) -> Result<(), LogError> {
    let h = &seg.header;
    let what = || format!("segment {} of {} at {}", h.pos, h.key, path.display());
    if h.sum_before != sums.total() {
        return Err(LogError::OutOfChain {
            what: what(),
            reason: format!(
                "it does not apply to this state: it was cut from sum {:016x}, the database's is {:016x}",
                h.sum_before,
                sums.total()
            ),
        });
    }
    if sums.db_pages() > 0 && sums.page_size() != h.page_size {
        return Err(LogError::OutOfChain {
            what: what(),
            reason: format!(
                "page size {}, the database's is {}",
                h.page_size,
                sums.page_size()
            ),
        });
    }
    sums.set_page_size(h.page_size)
        .map_err(|reason| LogError::OutOfChain {
            what: what(),
            reason,
        })?;
    // The sums move first (per changed page, never per database), so a wrong `sum_after` is
    // caught before a byte is written.
    sums.resize(h.db_pages);
    for page in &seg.pages {
        sums.set(page.pgno, &page.data);
    }
    if sums.total() != h.sum_after {
        return Err(LogError::Corrupt {
            what: what(),
            reason: format!(
                "its pages make sum {:016x}, it says {:016x}",
                sums.total(),
                h.sum_after
            ),
        });
    }
    write_pages(path, seg)
}

fn write_pages(path: &Path, seg: &Segment) -> Result<(), LogError> {
    let file =
        crate::private::file_options(OpenOptions::new().write(true).create(true).truncate(false))
            .open(path)
            .map_err(|e| LogError::io("open", path, &e))?;
    crate::private::make_private(&file).map_err(|e| LogError::io("chmod", path, &e))?;
    let size = u64::from(seg.header.page_size);
    for page in &seg.pages {
        let at = u64::from(page.pgno - 1) * size;
        file.write_all_at(&page.data, at)
            .map_err(|e| LogError::io("write", path, &e))?;
    }
    file.set_len(u64::from(seg.header.db_pages) * size)
        .map_err(|e| LogError::io("truncate", path, &e))
}

/// Fsyncs the database file at `path` once every segment is applied.
pub fn finish(path: &Path) -> Result<(), LogError> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| LogError::io("fsync", path, &e))
}
