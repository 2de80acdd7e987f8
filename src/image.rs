//! Images: consistent copies of a ledger, their manifests, verification, publish and restore.
//!
//! ```text
//!  ledger.db ──take_image──► snap.db (fsynced, size + SHA-256)
//!                               │ upload_image: put_if_absent image, then manifest
//!                               ▼
//!  durable store   <key>/e<epoch>/snap-<seq>.db + .json      (the caller then moves the head)
//!                               │ fetch_restorable(head, floor): head's manifest and image,
//!                               │ falling back along `base` (never to the floor or below)
//!                               ▼
//!  install_image ──► ledger.db (a new inode; stale -wal/-shm gone)
//! ```
//!
//! This module owns taking images ([`take_image`], and [`crate::ledger::Ledger::copy_image`] for
//! a frozen ledger) and the file-level helpers they share. [`manifest`] owns the manifest format
//! and the checks of fetched bytes; [`restore`] talks to the durable store; [`install`] puts a
//! restored image in place of the local file.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};
use sha2::{Digest, Sha256};

use crate::durable::StoreError;
use crate::ledger::LedgerError;

pub mod install;
pub mod manifest;
pub mod restore;

pub use install::{install_empty, install_image};
pub use manifest::{
    MAX_MANIFEST_BYTES, Manifest, has_sqlite_header, is_newer_format, is_sha256_hex,
    parse_manifest, verify,
};
pub use restore::{ImageAt, fetch_restorable, next_candidate, upload_image, upload_image_checked};

/// The manifest format this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The first 16 bytes of every SQLite database file.
pub const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// Why an image call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// A manifest or image failed its checks (or, for a restore, no image of the chain passed).
    #[error("{what} is corrupt: {reason}")]
    Corrupt {
        /// The object or file (a durable key, a path, or the chain from a head).
        what: String,
        /// Which check failed.
        reason: String,
    },
    /// An upload found an object under its key: objects are never overwritten, and the same
    /// `(epoch, seq)` being taken twice is a bug or a zombie. Take the next `seq`.
    #[error("{key} already exists: an object is never overwritten")]
    AlreadyExists {
        /// The durable key that was taken.
        key: String,
    },
    /// The uploader's check before a put said its lease no longer holds
    /// ([`restore::upload_image_checked`]): that put was never sent.
    #[error("{key} was not put: the uploader's lease no longer holds")]
    Fenced {
        /// The durable key that was not put.
        key: String,
    },
    /// The durable store failed (an outage, a timeout). Never a reason to fall back.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// SQLite failed while the image was taken.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A local I/O error.
    #[error("i/o: {0}")]
    Io(String),
}

impl From<rusqlite::Error> for ImageError {
    fn from(e: rusqlite::Error) -> Self {
        ImageError::Ledger(LedgerError::from(e))
    }
}

/// An image file on local disk: fsynced, with its size and SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// SHA-256 of its bytes, 64 lowercase hex characters.
    pub sha256: String,
}

/// How [`take_image_with`] copies a ledger that another connection may be writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageMethod {
    /// SQLite's online backup API, all pages in one step under one read transaction.
    Backup,
    /// `VACUUM INTO` from a read-only connection: a compacted, rebuilt copy.
    VacuumInto,
}

/// The method [`take_image`] uses: the faster of the two consistent ones on the benchmark
/// (`docs/benchmarks.md`).
pub const DEFAULT_METHOD: ImageMethod = ImageMethod::Backup;

/// How often the backup retries a step that found the source busy, and how long it waits.
const BACKUP_RETRIES: u32 = 500;
const BACKUP_RETRY_PAUSE: Duration = Duration::from_millis(10);

/// Takes a consistent image of the ledger at `db_path` into `dest`, while another connection
/// may be writing: it opens its own read-only connection and copies one snapshot. An existing
/// file at `dest` is replaced. The image is fsynced; its size and SHA-256 are returned.
///
/// Blocking (copies and fsyncs): run it with `spawn_blocking` or on a `SyncArbiter`, never on
/// an actor's or a runtime's async thread.
pub fn take_image(db_path: &Path, dest: &Path) -> Result<ImageFile, ImageError> {
    take_image_with(DEFAULT_METHOD, db_path, dest)
}

/// [`take_image`] with a chosen method (the benchmark compares them).
pub fn take_image_with(
    method: ImageMethod,
    db_path: &Path,
    dest: &Path,
) -> Result<ImageFile, ImageError> {
    let src = Connection::open_with_flags(
        db_path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    src.busy_timeout(crate::ledger::BUSY_TIMEOUT)?;
    remove_if_present(dest)?;
    let copied = match method {
        ImageMethod::Backup => backup_into(&src, dest),
        ImageMethod::VacuumInto => vacuum_into(&src, dest),
    };
    if let Err(e) = copied {
        let _ = remove_if_present(dest);
        return Err(e);
    }
    src.close().map_err(|(_, e)| ImageError::from(e))?;
    seal(dest)
}

/// A read transaction on a ledger, begun at a moment the caller chooses: the image written from
/// it holds exactly the commits made before that moment, however long the copy takes and
/// whatever is committed meanwhile. The change log uses it to know the log position an image
/// holds (docs/guarantees.md, the change log).
#[derive(Debug)]
pub struct ReadSnapshot {
    /// A read-only connection with its read transaction open.
    conn: Connection,
}

impl ReadSnapshot {
    /// Opens a read-only connection to the ledger at `db_path` and begins its read transaction
    /// now (a first read fixes the snapshot). Cheap: no page is copied yet.
    pub fn begin(db_path: &Path) -> Result<Self, ImageError> {
        let conn = Connection::open_with_flags(
            db_path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(crate::ledger::BUSY_TIMEOUT)?;
        conn.execute_batch("BEGIN")?;
        let _: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
        Ok(Self { conn })
    }

    /// Writes the snapshot's image to `dest` (replaced if present), fsynced, with its size and
    /// SHA-256. Blocking, like [`take_image`].
    pub fn write_image(self, dest: &Path) -> Result<ImageFile, ImageError> {
        remove_if_present(dest)?;
        if let Err(e) = backup_into(&self.conn, dest) {
            let _ = remove_if_present(dest);
            return Err(e);
        }
        let _ = self.conn.execute_batch("COMMIT");
        self.conn.close().map_err(|(_, e)| ImageError::from(e))?;
        seal(dest)
    }
}

impl ReadSnapshot {
    /// [`ReadSnapshot::write_image`], made a byte-for-byte copy of the ledger as of the
    /// snapshot: SQLite's backup copies every page as it is but rewrites fields of page 1's
    /// header, so page 1 is set to `page_one` (the ledger's own page 1 at the snapshot), and the
    /// result must have the sums `sum` (the ledger's at the snapshot), else
    /// [`ImageError::Corrupt`] and no file is left. A change log applies its later segments to
    /// exactly these bytes (docs/guarantees.md, the change log).
    pub fn write_exact_image(
        self,
        dest: &Path,
        page_one: &[u8],
        sum: u64,
    ) -> Result<ImageFile, ImageError> {
        use std::io::{Seek, SeekFrom, Write};
        let written = self.write_image(dest)?;
        let exact = (|| {
            if !page_one.is_empty() {
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(dest)
                    .map_err(|e| io_error("open", dest, &e))?;
                file.seek(SeekFrom::Start(0))
                    .and_then(|_| file.write_all(page_one))
                    .map_err(|e| io_error("write page 1 of", dest, &e))?;
            }
            let sums = crate::log::PageSums::of_file(dest).map_err(ImageError::Io)?;
            if sums.total() != sum {
                return Err(ImageError::Corrupt {
                    what: dest.display().to_string(),
                    reason: format!(
                        "the image's sum is {:016x}, the ledger's at the snapshot {sum:016x}",
                        sums.total()
                    ),
                });
            }
            seal(dest)
        })();
        if exact.is_err() {
            let _ = remove_if_present(&written.path);
        }
        exact
    }
}

fn backup_into(src: &Connection, dest: &Path) -> Result<(), ImageError> {
    crate::private::create_sqlite_file(dest).map_err(|e| io_error("create", dest, &e))?;
    let mut dst = Connection::open(dest)?;
    // The image is fsynced once, by `seal`; a torn copy is never published.
    dst.execute_batch("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;")?;
    {
        let backup = Backup::new(src, &mut dst)?;
        let mut retries = 0;
        loop {
            match backup.step(-1)? {
                StepResult::Done => break,
                StepResult::More => {}
                _ if retries < BACKUP_RETRIES => {
                    retries += 1;
                    std::thread::sleep(BACKUP_RETRY_PAUSE);
                }
                other => {
                    return Err(ImageError::Io(format!(
                        "backup of {} did not finish: source {other:?} after {retries} retries",
                        dest.display()
                    )));
                }
            }
        }
    }
    dst.close().map_err(|(_, e)| ImageError::from(e))
}

fn vacuum_into(src: &Connection, dest: &Path) -> Result<(), ImageError> {
    let dest_text = dest
        .to_str()
        .ok_or_else(|| ImageError::Io(format!("{}: not a UTF-8 path", dest.display())))?;
    // An empty file of mode 0600 for SQLite to fill (it would create one of mode 0644).
    crate::private::create_sqlite_file(dest).map_err(|e| io_error("create", dest, &e))?;
    src.execute("VACUUM INTO ?1", [dest_text])?;
    Ok(())
}

/// Fsyncs the file at `path` and returns it with its size and SHA-256.
pub(crate) fn seal(path: &Path) -> Result<ImageFile, ImageError> {
    let mut file = std::fs::File::open(path).map_err(|e| io_error("open", path, &e))?;
    file.sync_all().map_err(|e| io_error("fsync", path, &e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| io_error("read", path, &e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok(ImageFile {
        path: path.to_path_buf(),
        size,
        sha256: hex::encode(hasher.finalize()),
    })
}

/// SHA-256 of `bytes`, as 64 lowercase hex characters.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Removes the file at `path`; a missing file is not an error.
pub(crate) fn remove_if_present(path: &Path) -> Result<(), ImageError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error("remove", path, &e)),
    }
}

/// An [`ImageError::Io`] naming what was done to which path.
pub(crate) fn io_error(action: &str, path: &Path, e: &std::io::Error) -> ImageError {
    ImageError::Io(format!("{action} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_is_lowercase_hex() {
        let h = sha256_hex(b"abc");
        assert_eq!(
            h,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(is_sha256_hex(&h));
    }

    #[test]
    fn a_read_snapshot_holds_the_commits_before_it_began_and_none_after() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ledger.db");
        let writer = Connection::open(&db).unwrap();
        writer
            .execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t (x); INSERT INTO t VALUES (1);")
            .unwrap();
        let snapshot = ReadSnapshot::begin(&db).unwrap();
        writer.execute("INSERT INTO t VALUES (2)", []).unwrap();
        let image = snapshot.write_image(&dir.path().join("img.db")).unwrap();
        writer.execute("INSERT INTO t VALUES (3)", []).unwrap();
        let copy = Connection::open(&image.path).unwrap();
        let n: i64 = copy
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1, "only the commit before the snapshot began");
    }

    #[test]
    fn seal_hashes_and_sizes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        let sealed = seal(&path).unwrap();
        assert_eq!(sealed.size, 3);
        assert_eq!(sealed.sha256, sha256_hex(b"abc"));
    }
}
