//! Opening a [`DirStore`]: create its root (0700) or refuse a missing one, refuse a root that
//! lets the group or others in unless that is accepted (docs/operations.md, "File
//! permissions"), and tidy the staging directory.

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use super::{
    DirStore, STAGING_DIR, STALE_STAGING, ensure_dir, io_at, refused_at, remove_stale_staging,
};
use crate::durable::StoreError;
use crate::private;

/// How [`DirStore::open_with`] treats its root directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirOptions {
    /// Create the root (0700, with its missing parents) and its staging directory when missing,
    /// and remove stale staging files. Default true. False (what an operator command uses: it
    /// opens existing stores only): a missing root is [`StoreError::Missing`], and the store is
    /// opened without creating or removing anything.
    pub create: bool,
    /// Accept an existing root that lets the group or others in. Default false: such a root is
    /// refused with [`StoreError::NotPrivate`] (every tenant's images and segments are below it).
    pub accept_shared_permissions: bool,
}

impl Default for DirOptions {
    fn default() -> Self {
        Self {
            create: true,
            accept_shared_permissions: false,
        }
    }
}

impl DirStore {
    /// Opens the store at `root` with the default [`DirOptions`]: the directory and its staging
    /// directory are created (0700) if missing, an existing root that lets the group or others
    /// in is refused, and staging files older than [`STALE_STAGING`] are removed.
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        Self::open_with(root, DirOptions::default())
    }

    /// Opens the store at `root` as `options` say.
    pub fn open_with(root: &Path, options: DirOptions) -> Result<Self, StoreError> {
        const OP: &str = "open";
        match fs::metadata(root) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(refused_at(OP, root, "is not a directory")),
            Err(e) if e.kind() == ErrorKind::NotFound && options.create => {
                private::create_dir_all(root).map_err(|e| io_at(OP, root, &e))?;
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(StoreError::Missing {
                    store: "durable directory",
                    location: root.display().to_string(),
                });
            }
            Err(e) => return Err(io_at(OP, root, &e)),
        }
        match private::check_private(root, options.accept_shared_permissions) {
            Ok(Ok(())) => {}
            Ok(Err(mode)) => {
                return Err(StoreError::NotPrivate {
                    path: root.display().to_string(),
                    mode,
                });
            }
            Err(e) => return Err(io_at(OP, root, &e)),
        }
        let root = fs::canonicalize(root).map_err(|e| io_at(OP, root, &e))?;
        if options.create {
            let staging = root.join(STAGING_DIR);
            if !ensure_dir(OP, &staging)? {
                return Err(refused_at(OP, &staging, "vanished while it was made"));
            }
            remove_stale_staging(&staging, STALE_STAGING)?;
        }
        Ok(Self { root })
    }
}
