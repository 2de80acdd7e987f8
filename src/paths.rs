//! Path containment: every destructive local call takes `(state_root, org, tenant)`, derives the
//! tenant's directory itself, checks it, and deletes the resolved path it checked.
//!
//! The checks: the state root has no `..` component; it is resolved once (symlinks *above* the
//! root are the operator's business); below it, `orgs/<org>/tenants/<tenant>` must be real
//! directories, none a symlink. Ids are validated by their types, so a segment cannot be `..` or
//! hold a `/`. A refused path is a typed [`PathError`] and nothing is touched.

use std::io;
use std::path::{Component, Path, PathBuf};

use crate::ids::{OrgId, TenantId, tenant_root};
use crate::private;

/// The ledger's file name inside a tenant's directory.
pub const LEDGER_FILE: &str = "ledger.db";

/// Why a local path was refused or could not be handled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path breaks a containment rule; nothing was touched.
    #[error("{path}: {reason}")]
    Refused {
        /// The path as given or derived.
        path: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// Another replica (in this process or another) holds the state root's lock file: two
    /// replicas never share a state root (docs/guarantees.md, assumption 5).
    #[error("{path}: the state root is in use by {holder}")]
    Locked {
        /// The lock file.
        path: String,
        /// Who holds it, as it wrote itself into the lock file (`unknown` if unreadable).
        holder: String,
    },
    /// The state root lets the group or others in (docs/operations.md, "File permissions"), and
    /// the replica was not told to accept that; nothing was started.
    #[error("{path} has mode {mode:04o}, which lets the group or others in")]
    NotPrivate {
        /// The state root.
        path: String,
        /// Its permission bits.
        mode: u32,
    },
    /// The file system failed.
    #[error("{path}: {message}")]
    Io {
        /// The path.
        path: String,
        /// The error, as text.
        message: String,
    },
}

fn refused(path: &Path, reason: &'static str) -> PathError {
    PathError::Refused {
        path: path.display().to_string(),
        reason,
    }
}

fn io_error(path: &Path, e: &io::Error) -> PathError {
    PathError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// The state root, resolved: refused if it has a `..` component; `None` if it does not exist.
fn resolve_root(state_root: &Path) -> Result<Option<PathBuf>, PathError> {
    if state_root.as_os_str().is_empty() {
        return Err(refused(state_root, "the state root is empty"));
    }
    if state_root.components().any(|c| c == Component::ParentDir) {
        return Err(refused(state_root, "the state root has a '..' component"));
    }
    match std::fs::canonicalize(state_root) {
        Ok(p) => Ok(Some(p)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(state_root, &e)),
    }
}

/// The tenant's directory, checked: `Some(path)` if it exists and every segment below the
/// resolved state root is a real directory; `None` if some segment does not exist.
pub fn checked_tenant_dir(
    state_root: &Path,
    org: &OrgId,
    tenant: &TenantId,
) -> Result<Option<PathBuf>, PathError> {
    let Some(root) = resolve_root(state_root)? else {
        return Ok(None);
    };
    let mut path = root;
    for segment in ["orgs", org.as_str(), "tenants", tenant.as_str()] {
        path.push(segment);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(refused(&path, "a symlink below the state root"));
            }
            Ok(m) if !m.is_dir() => return Err(refused(&path, "not a directory")),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&path, &e)),
        }
    }
    Ok(Some(path))
}

/// Creates the tenant's directory (and its parents) and returns it, checked.
pub fn ensure_tenant_dir(
    state_root: &Path,
    org: &OrgId,
    tenant: &TenantId,
) -> Result<PathBuf, PathError> {
    let root = root_or_create(state_root)?;
    // Check what exists before creating the rest, so nothing is created through a symlink.
    checked_tenant_dir(&root, org, tenant)?;
    let wanted = tenant_root(&root, org, tenant);
    private::create_dir_all(&wanted).map_err(|e| io_error(&wanted, &e))?;
    checked_tenant_dir(&root, org, tenant)?.ok_or_else(|| {
        refused(
            &wanted,
            "the tenant directory vanished while it was created",
        )
    })
}

/// The state root, resolved; created (0700, with its missing parents) when it does not exist.
fn root_or_create(state_root: &Path) -> Result<PathBuf, PathError> {
    if let Some(root) = resolve_root(state_root)? {
        return Ok(root);
    }
    private::create_dir_all(state_root).map_err(|e| io_error(state_root, &e))?;
    resolve_root(state_root)?.ok_or_else(|| refused(state_root, "the state root vanished"))
}

/// The tenant's ledger file, `<tenant dir>/ledger.db` (not checked: use it to open, not to delete).
pub fn ledger_path(state_root: &Path, org: &OrgId, tenant: &TenantId) -> PathBuf {
    tenant_root(state_root, org, tenant).join(LEDGER_FILE)
}

/// Deletes the tenant's directory and everything in it. Returns whether there was one.
pub fn remove_tenant_dir(
    state_root: &Path,
    org: &OrgId,
    tenant: &TenantId,
) -> Result<bool, PathError> {
    let Some(dir) = checked_tenant_dir(state_root, org, tenant)? else {
        return Ok(false);
    };
    // remove_dir_all does not follow symlinks inside the tree it removes.
    std::fs::remove_dir_all(&dir).map_err(|e| io_error(&dir, &e))?;
    Ok(true)
}

/// Deletes the tenant's directory if it holds nothing (an open that failed before it wrote
/// anything there leaves no trace of the tenant). Returns whether it went.
pub fn remove_empty_tenant_dir(
    state_root: &Path,
    org: &OrgId,
    tenant: &TenantId,
) -> Result<bool, PathError> {
    let Some(dir) = checked_tenant_dir(state_root, org, tenant)? else {
        return Ok(false);
    };
    match std::fs::remove_dir(&dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty => Ok(false),
        Err(e) => Err(io_error(&dir, &e)),
    }
}

/// Deletes the tenant's ledger files (`ledger.db`, `-wal`, `-shm`), keeping the directory.
pub fn remove_ledger_files(
    state_root: &Path,
    org: &OrgId,
    tenant: &TenantId,
) -> Result<(), PathError> {
    let Some(dir) = checked_tenant_dir(state_root, org, tenant)? else {
        return Ok(());
    };
    for suffix in ["", "-wal", "-shm"] {
        let file = dir.join(format!("{LEDGER_FILE}{suffix}"));
        match std::fs::remove_file(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_error(&file, &e)),
        }
    }
    Ok(())
}

/// The file in a tenant's directory that names the epoch of the tenure that wrote it.
pub const TENURE_FILE: &str = "tenure";

/// Records in the tenant's directory that its files belong to tenure `epoch`.
pub fn write_tenure(dir: &Path, epoch: u64) -> Result<(), PathError> {
    let file = dir.join(TENURE_FILE);
    private::write_file(&file, epoch.to_string().as_bytes()).map_err(|e| io_error(&file, &e))
}

/// The epoch recorded in the tenant's directory, if there is a directory with a readable marker.
pub fn read_tenure(
    state_root: &Path,
    org: &OrgId,
    tenant: &TenantId,
) -> Result<Option<u64>, PathError> {
    let Some(dir) = checked_tenant_dir(state_root, org, tenant)? else {
        return Ok(None);
    };
    match std::fs::read_to_string(dir.join(TENURE_FILE)) {
        Ok(text) => Ok(text.trim().parse().ok()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error(&dir, &e)),
    }
}

/// Deletes the scratch files an interrupted image upload left in a tenant's directory
/// (`*.tmp`). Returns how many went.
pub fn remove_scratch_files(dir: &Path) -> Result<usize, PathError> {
    let entries = std::fs::read_dir(dir).map_err(|e| io_error(dir, &e))?;
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(|e| io_error(dir, &e))?;
        let path = entry.path();
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_file && path.extension().is_some_and(|x| x == "tmp") {
            std::fs::remove_file(&path).map_err(|e| io_error(&path, &e))?;
            removed += 1;
        }
    }
    Ok(removed)
}

/// Every `(org, tenant)` with a directory under `<state_root>/orgs/*/tenants/*`. Names that are
/// not valid ids, and symlinks, are skipped: they are nobody's tenants.
pub fn tenant_dirs(state_root: &Path) -> Result<Vec<(OrgId, TenantId)>, PathError> {
    let orgs = state_root.join("orgs");
    let mut found = Vec::new();
    for org in real_subdirs(&orgs)? {
        let Ok(org_id) = OrgId::new(org.clone()) else {
            continue;
        };
        let tenants = orgs.join(&org).join("tenants");
        for tenant in real_subdirs(&tenants)? {
            if let Ok(tenant_id) = TenantId::new(tenant) {
                found.push((org_id.clone(), tenant_id));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// The names of the real (not symlinked) directories in `dir`; none if `dir` does not exist.
fn real_subdirs(dir: &Path) -> Result<Vec<String>, PathError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(dir, &e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(dir, &e))?;
        if entry.file_type().is_ok_and(|t| t.is_dir())
            && let Ok(name) = entry.file_name().into_string()
        {
            names.push(name);
        }
    }
    Ok(names)
}

/// The lock file in a state root: whoever holds an exclusive `flock` on it owns the root.
pub const LOCK_FILE: &str = ".leasehold.lock";

/// An exclusive lock on a state root: held while this value lives, released when it is dropped
/// (or the process ends, however it ends: the kernel drops a `flock` with its descriptor).
#[derive(Debug)]
pub struct RootLock {
    /// The open lock file; its descriptor carries the lock.
    _file: std::fs::File,
    /// Where it is.
    path: PathBuf,
}

impl RootLock {
    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Takes the exclusive lock of `state_root` (created 0700 if missing) for `holder`, without
/// waiting. Refused with [`PathError::Locked`], naming the holder, if anyone holds it already:
/// in this process or another. The lock file is never a symlink, and is 0600.
///
/// An existing state root that lets the group or others in is refused with
/// [`PathError::NotPrivate`] unless `accept_shared_permissions` (docs/operations.md, "File
/// permissions"): every tenant's data lives below it.
pub fn lock_state_root(
    state_root: &Path,
    holder: &str,
    accept_shared_permissions: bool,
) -> Result<RootLock, PathError> {
    use std::io::{Seek, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let root = root_or_create(state_root)?;
    match private::check_private(&root, accept_shared_permissions) {
        Ok(Ok(())) => {}
        Ok(Err(mode)) => {
            return Err(PathError::NotPrivate {
                path: state_root.display().to_string(),
                mode,
            });
        }
        Err(e) => return Err(io_error(&root, &e)),
    }
    let path = root.join(LOCK_FILE);
    let nofollow = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    let mut file = private::file_options(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
    )
    .custom_flags(nofollow)
    .open(&path)
    .map_err(|e| io_error(&path, &e))?;
    private::make_private(&file).map_err(|e| io_error(&path, &e))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
            let holder = std::fs::read_to_string(&path)
                .ok()
                .map(|text| text.trim().to_string())
                .filter(|text| !text.is_empty())
                .unwrap_or_else(|| "unknown".to_string());
            return Err(PathError::Locked {
                path: path.display().to_string(),
                holder,
            });
        }
        Err(e) => return Err(io_error(&path, &io::Error::from(e))),
    }
    let text = format!("{holder} (pid {})", std::process::id());
    file.set_len(0)
        .and_then(|()| file.rewind())
        .and_then(|()| file.write_all(text.as_bytes()))
        .map_err(|e| io_error(&path, &e))?;
    Ok(RootLock { _file: file, path })
}

/// The process's soft limit of open file descriptors (`RLIMIT_NOFILE`), if it has one.
pub fn open_files_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}
