//! Private by default: every directory leasehold creates is 0700 and every file 0600, whatever
//! the process's umask, and a directory or file that holds tenants' data and lets the group or
//! others in is refused unless the operator accepts it knowingly (docs/operations.md, "File
//! permissions"). PostgreSQL does the same for its data directory.
//!
//! The modes are set explicitly after each creation (`fchmod`, `chmod`), never left to the
//! umask, which may be wider (022: world-readable) or narrower (it may even take the owner's
//! own bits). SQLite creates a database's `-wal` and `-shm` with the database file's own mode,
//! so a database file created here first ([`create_sqlite_file`]) keeps its sidecars private
//! too.
//!
//! The checks are pure ([`is_private`]); the rest are thin calls on the file system.

use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mode of every directory leasehold creates.
pub const DIR_MODE: u32 = 0o700;

/// The mode of every file leasehold creates.
pub const FILE_MODE: u32 = 0o600;

/// The permission bits that let the group or others in.
const SHARED_BITS: u32 = 0o077;

/// Whether permission bits `mode` keep the group and others out.
pub fn is_private(mode: u32) -> bool {
    mode & SHARED_BITS == 0
}

/// The permission bits of `path` (following a symlink), if it exists.
pub fn mode_of(path: &Path) -> io::Result<Option<u32>> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(m.permissions().mode() & 0o7777)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// `Err(mode)` when `path` exists and lets the group or others in, unless `accept_shared`.
pub fn check_private(path: &Path, accept_shared: bool) -> io::Result<Result<(), u32>> {
    match mode_of(path)? {
        Some(mode) if !accept_shared && !is_private(mode) => Ok(Err(mode)),
        _ => Ok(Ok(())),
    }
}

/// Creates `path` and every missing parent as directories of mode [`DIR_MODE`]; directories
/// that exist are left as they are. Returns the directories it created, outermost first.
pub fn create_dir_all(path: &Path) -> io::Result<Vec<PathBuf>> {
    let mut missing = Vec::new();
    let mut at = Some(path);
    while let Some(dir) = at {
        if dir.as_os_str().is_empty() || dir.is_dir() {
            break;
        }
        missing.push(dir.to_path_buf());
        at = dir.parent();
    }
    missing.reverse();
    let mut created = Vec::new();
    for dir in missing {
        if create_dir(&dir)? {
            created.push(dir);
        }
    }
    Ok(created)
}

/// Creates the directory `path` (its parent must exist) with mode [`DIR_MODE`]. `Ok(false)`
/// when it existed already (left as it is).
pub fn create_dir(path: &Path) -> io::Result<bool> {
    match std::fs::create_dir(path) {
        Ok(()) => {
            std::fs::set_permissions(path, Permissions::from_mode(DIR_MODE))?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => Ok(false),
        Err(e) => Err(e),
    }
}

/// `options` with the mode of a new file set to [`FILE_MODE`] (the umask may still take bits
/// away: call [`make_private`] on a file it created).
pub fn file_options(options: &mut OpenOptions) -> &mut OpenOptions {
    options.mode(FILE_MODE)
}

/// Sets the mode of an open file to [`FILE_MODE`].
pub fn make_private(file: &File) -> io::Result<()> {
    file.set_permissions(Permissions::from_mode(FILE_MODE))
}

/// Creates a new file at `path` (refused if anything is there) for writing, mode [`FILE_MODE`].
pub fn create_new_file(path: &Path) -> io::Result<File> {
    let file = file_options(OpenOptions::new().write(true).create_new(true)).open(path)?;
    make_private(&file)?;
    Ok(file)
}

/// Writes `bytes` to a new file at `path` of mode [`FILE_MODE`], or replaces the contents of
/// the file there (whose mode is then set to [`FILE_MODE`] too).
pub fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut file = file_options(OpenOptions::new().write(true).create(true).truncate(true))
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)?;
    make_private(&file)?;
    file.write_all(bytes)
}

/// Creates an empty SQLite database file at `path` of mode [`FILE_MODE`] if none is there, so
/// that SQLite opens it instead of creating it with its own mode (0644 less the umask); its
/// `-wal` and `-shm` then take the same mode. An empty file is a valid empty database.
pub fn create_sqlite_file(path: &Path) -> io::Result<()> {
    match create_new_file(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_modes_without_group_or_other_bits_are_private() {
        for mode in [0o700, 0o600, 0o400, 0o1700, 0o000] {
            assert!(is_private(mode), "{mode:o}");
        }
        for mode in [0o755, 0o644, 0o710, 0o701, 0o720, 0o604, 0o640] {
            assert!(!is_private(mode), "{mode:o}");
        }
    }

    #[test]
    fn directories_and_files_are_created_private_and_existing_ones_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, Permissions::from_mode(0o755)).unwrap();
        let deep = shared.join("a/b");
        let created = create_dir_all(&deep).unwrap();
        assert_eq!(created, [shared.join("a"), deep.clone()]);
        for d in &created {
            assert_eq!(mode_of(d).unwrap(), Some(DIR_MODE));
        }
        assert_eq!(mode_of(&shared).unwrap(), Some(0o755), "left as it was");
        assert_eq!(check_private(&shared, false).unwrap(), Err(0o755));
        assert_eq!(check_private(&shared, true).unwrap(), Ok(()));
        assert_eq!(
            check_private(&dir.path().join("none"), false).unwrap(),
            Ok(())
        );
        let file = deep.join("f");
        write_file(&file, b"x").unwrap();
        assert_eq!(mode_of(&file).unwrap(), Some(FILE_MODE));
        std::fs::set_permissions(&file, Permissions::from_mode(0o644)).unwrap();
        write_file(&file, b"y").unwrap();
        assert_eq!(
            mode_of(&file).unwrap(),
            Some(FILE_MODE),
            "rewritten private"
        );
        let db = deep.join("x.db");
        create_sqlite_file(&db).unwrap();
        create_sqlite_file(&db).unwrap();
        assert_eq!(mode_of(&db).unwrap(), Some(FILE_MODE));
        assert!(create_new_file(&db).is_err(), "never over an existing file");
    }
}
