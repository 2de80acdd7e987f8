//! Putting a restored image in place of the tenant's local ledger file, or clearing it.
//!
//! The new file is written beside the old one, fsynced, and renamed over `ledger.db`, so the
//! path gets a **new inode**: a writer still holding the old file (a zombie sharing the state
//! root) keeps writing into an unlinked file and never into the restored one. The old `-wal`,
//! `-shm` and `-journal` go first: SQLite would otherwise replay a stale log into the new file.
//! The durable copy is the authority; a stale local file is replaced, never recovered
//! (predecessor check L2).

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{ImageError, has_sqlite_header, io_error, remove_if_present};

/// The files SQLite keeps beside a database, which must never outlive it.
const SIDECARS: [&str; 3] = ["-wal", "-shm", "-journal"];

/// Installs `bytes` (a verified image) as the ledger at `ledger_path`: write a temporary file in
/// the same directory, fsync it, remove the old `-wal`/`-shm`/`-journal`, rename it over the
/// ledger, fsync the directory. Bytes without the SQLite header are refused as
/// [`ImageError::Corrupt`] and nothing is touched. Close this replica's own connection first; a
/// connection still open elsewhere (a zombie) keeps the old, unlinked file and never reaches the
/// new one (`tests/image.rs` shows it writing and closing without touching the successor).
///
/// Blocking (copies and fsyncs): run it with `spawn_blocking` or on a `SyncArbiter`, never on
/// an actor's or a runtime's async thread.
pub fn install_image(bytes: &[u8], ledger_path: &Path) -> Result<(), ImageError> {
    if !has_sqlite_header(bytes) {
        return Err(ImageError::Corrupt {
            what: format!("the image to install at {}", ledger_path.display()),
            reason: "it does not start with the SQLite header".to_string(),
        });
    }
    let dir = parent_dir(ledger_path)?;
    let tmp = with_suffix(ledger_path, ".restoring");
    remove_if_present(&tmp)?;
    let installed = write_synced(&tmp, bytes)
        .and_then(|()| remove_sidecars(ledger_path))
        .and_then(|()| {
            std::fs::rename(&tmp, ledger_path).map_err(|e| io_error("rename over", ledger_path, &e))
        });
    if let Err(e) = installed {
        let _ = remove_if_present(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// Clears the local ledger for a tenant with no head: removes the `-wal`, `-shm`, `-journal`
/// and then the file itself, and fsyncs the directory. The next open starts an empty ledger; a
/// stale file of an abandoned tenure is never recovered. Missing files are not an error.
pub fn install_empty(ledger_path: &Path) -> Result<(), ImageError> {
    let dir = parent_dir(ledger_path)?;
    remove_sidecars(ledger_path)?;
    remove_if_present(ledger_path)?;
    if dir.exists() {
        sync_dir(dir)?;
    }
    Ok(())
}

fn parent_dir(path: &Path) -> Result<&Path, ImageError> {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .ok_or_else(|| ImageError::Io(format!("{}: no parent directory", path.display())))
}

/// `path` with `suffix` appended to its last component (`ledger.db` → `ledger.db-wal`).
pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = OsString::from(path.as_os_str());
    s.push(suffix);
    PathBuf::from(s)
}

fn remove_sidecars(ledger_path: &Path) -> Result<(), ImageError> {
    SIDECARS
        .iter()
        .try_for_each(|suffix| remove_if_present(&with_suffix(ledger_path, suffix)))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), ImageError> {
    let mut file =
        crate::private::create_new_file(path).map_err(|e| io_error("create", path, &e))?;
    file.write_all(bytes)
        .map_err(|e| io_error("write", path, &e))?;
    file.sync_all().map_err(|e| io_error("fsync", path, &e))
}

pub(crate) fn sync_dir(dir: &Path) -> Result<(), ImageError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error("fsync directory", dir, &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecars_are_named_after_the_ledger() {
        let p = Path::new("/s/orgs/a/tenants/t/ledger.db");
        assert_eq!(
            with_suffix(p, "-wal"),
            Path::new("/s/orgs/a/tenants/t/ledger.db-wal")
        );
    }

    #[test]
    fn install_empty_clears_every_file_of_the_ledger() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ledger.db");
        for suffix in ["", "-wal", "-shm", "-journal"] {
            std::fs::write(with_suffix(&db, suffix), b"x").unwrap();
        }
        install_empty(&db).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        install_empty(&db).unwrap();
    }
}
