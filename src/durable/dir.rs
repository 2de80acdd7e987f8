//! [`DirStore`], the embedded durable store: every object is a file under one root directory.
//!
//! ```text
//! <root>/acme/t1/e00000003/snap-000001.db   the object `acme/t1/e00000003/snap-000001.db`
//! <root>/#staging/<pid>-<n>-<nanos>~<key>.tmp  a put in flight, or what a crash left of one
//! ```
//!
//! A put writes its bytes to a fresh file in the staging directory, fsyncs it, hard-links it
//! under its key, fsyncs the key's directory and drops the staging name. The link is atomic and
//! fails when the key exists, so an object is never overwritten, two racing puts have exactly one
//! winner, and a reader sees the whole object or none, also after a crash. `#` is no key
//! character, so the staging directory can never collide with a key and `list` never shows it.
//! Staging files older than [`STALE_STAGING`] (a crash's leftovers) go when a store opens. A
//! staging name carries its key (`/` written `+`, cut at [`STAGED_KEY_BYTES`]), so
//! `delete_prefix` also removes the staging files of keys under its prefix, in flight or left
//! by a crash: a forgotten tenant's bytes do not outlive its erasure in the staging directory
//! (docs/guarantees.md, promise 5). A put whose staging file went that way fails.
//!
//! Symlinks inside the root are never followed: a call whose key or prefix leads through one is
//! refused with [`StoreError::Io`]; `list` skips them and `delete_prefix` removes the link only.
//!
//! Where a directory differs from S3: an object `a` and an object `a/b` cannot both exist; the
//! second put fails with [`StoreError::Io`]. The layout never asks for both.

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::{DurableStore, ListPage, Put, StoreError, check_key, check_list_prefix, check_prefix};

/// The staging directory's name under the root. `#` is not a key character.
pub const STAGING_DIR: &str = "#staging";

/// How old a staging file must be before [`DirStore::open`] removes it as a crash's leftover.
/// Younger ones may belong to a put in flight in another process sharing the root.
pub const STALE_STAGING: Duration = Duration::from_secs(60 * 60);

/// How much of the key a staging name carries, so that it stays below the file-name limit
/// (255 bytes). A prefix longer than this finds no staging file by name.
pub const STAGED_KEY_BYTES: usize = 200;

/// How often a put makes its directories and links again after a concurrent delete pruned them.
const LINK_ATTEMPTS: usize = 8;

mod listing;
mod open;

use listing::{list_blocking, list_page_blocking};
pub use open::DirOptions;

/// Numbers the staging files of this process.
static STAGED_COUNT: AtomicU64 = AtomicU64::new(0);

/// A durable store in a directory: atomic, durable, never-overwriting puts.
#[derive(Debug, Clone)]
pub struct DirStore {
    /// The root directory, resolved when the store was opened.
    root: PathBuf,
}

impl DirStore {
    /// The root directory, resolved.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

#[async_trait]
impl DurableStore for DirStore {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        check_key(key)?;
        let (root, key) = (self.root.clone(), key.to_owned());
        blocking("put_if_absent", move || put_blocking(&root, &key, &bytes)).await
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        check_key(key)?;
        let (root, key) = (self.root.clone(), key.to_owned());
        blocking("get", move || get_blocking(&root, &key)).await
    }

    async fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        check_key(key)?;
        let (root, key) = (self.root.clone(), key.to_owned());
        blocking("size", move || size_blocking(&root, &key)).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        check_list_prefix(prefix)?;
        let (root, prefix) = (self.root.clone(), prefix.to_owned());
        blocking("list", move || list_blocking(&root, &prefix)).await
    }

    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, StoreError> {
        check_list_prefix(prefix)?;
        let (root, prefix) = (self.root.clone(), prefix.to_owned());
        let after = start_after.map(str::to_owned);
        blocking("list_page", move || {
            list_page_blocking(&root, &prefix, after.as_deref(), max_keys.max(1))
        })
        .await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        check_key(key)?;
        let (root, key) = (self.root.clone(), key.to_owned());
        blocking("delete", move || delete_blocking(&root, &key)).await
    }

    async fn delete_keys(&self, keys: &[String]) -> Result<(), StoreError> {
        keys.iter().try_for_each(|k| check_key(k))?;
        let (root, keys) = (self.root.clone(), keys.to_vec());
        blocking("delete_keys", move || {
            delete_keys_blocking("delete_keys", &root, &keys)
        })
        .await
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        check_prefix(prefix)?;
        let (root, prefix) = (self.root.clone(), prefix.to_owned());
        blocking("delete_prefix", move || {
            delete_prefix_blocking(&root, &prefix)
        })
        .await
    }
}

/// Runs `f` on tokio's blocking pool.
async fn blocking<T, F>(op: &'static str, f: F) -> Result<T, StoreError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Backend {
            op,
            message: format!("the blocking task did not finish: {e}"),
        })?
}

pub(super) fn io_at(op: &'static str, path: &Path, e: &io::Error) -> StoreError {
    StoreError::Io {
        op,
        message: format!("{}: {e}", path.display()),
    }
}

fn refused_at(op: &'static str, path: &Path, what: &str) -> StoreError {
    StoreError::Io {
        op,
        message: format!("{}: {what}", path.display()),
    }
}

/// The segments of a (validated) key or prefix; a prefix's trailing `/` gives no segment.
fn segments(key: &str) -> impl Iterator<Item = &str> {
    key.split('/').filter(|s| !s.is_empty())
}

/// Where `key` (or a prefix's directory) lives under `root`.
pub(super) fn path_of(root: &Path, key: &str) -> PathBuf {
    let mut path = root.to_path_buf();
    path.extend(segments(key));
    path
}

/// What a key or prefix names on disk.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Found {
    /// Nothing: an object key of this name does not exist.
    Missing,
    /// A regular file: an object.
    File,
    /// A directory: a prefix of other objects, never an object itself.
    Dir,
    /// Anything else (a socket, a fifo): not an object.
    Other,
}

/// What lies at `key` under `root`, looking at every segment without following a symlink.
pub(super) fn inspect(op: &'static str, root: &Path, key: &str) -> Result<Found, StoreError> {
    let mut path = root.to_path_buf();
    let mut found = Found::Dir;
    for segment in segments(key) {
        if found != Found::Dir {
            return Ok(Found::Missing);
        }
        path.push(segment);
        found = match fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(refused_at(
                    op,
                    &path,
                    "a symlink inside the store root; not followed",
                ));
            }
            Ok(m) if m.is_dir() => Found::Dir,
            Ok(m) if m.is_file() => Found::File,
            Ok(_) => Found::Other,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Found::Missing),
            Err(e) => return Err(io_at(op, &path, &e)),
        };
    }
    Ok(found)
}

/// Fsyncs a directory that a concurrent delete may have pruned; false if it was gone.
fn sync_dir_if_present(op: &'static str, dir: &Path) -> Result<bool, StoreError> {
    match File::open(dir).and_then(|d| d.sync_all()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_at(op, dir, &e)),
    }
}

/// Makes `dir` exist as a real directory (not a symlink; created 0700), fsyncing its parent if
/// it was created. False if its parent vanished meanwhile (a concurrent delete pruned it).
fn ensure_dir(op: &'static str, dir: &Path) -> Result<bool, StoreError> {
    match crate::private::create_dir(dir) {
        Ok(true) => match dir.parent() {
            Some(parent) => sync_dir_if_present(op, parent),
            None => Ok(true),
        },
        Ok(false) => check_real_dir(op, dir),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => check_real_dir(op, dir),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_at(op, dir, &e)),
    }
}

/// Whether the existing `dir` is a real directory: refused if it is a symlink or an object,
/// false if it vanished meanwhile.
fn check_real_dir(op: &'static str, dir: &Path) -> Result<bool, StoreError> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => Ok(true),
        Ok(m) if m.file_type().is_symlink() => Err(refused_at(
            op,
            dir,
            "a symlink inside the store root; not followed",
        )),
        Ok(_) => Err(refused_at(
            op,
            dir,
            "an object holds this name, so no key can lie under it",
        )),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_at(op, dir, &e)),
    }
}

/// Creates the directories `key`'s object goes into. False if one vanished on the way.
fn ensure_parents(op: &'static str, root: &Path, key: &str) -> Result<bool, StoreError> {
    let mut dir = root.to_path_buf();
    let mut parents = segments(key).collect::<Vec<_>>();
    parents.pop();
    for segment in parents {
        dir.push(segment);
        if !ensure_dir(op, &dir)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A fsynced file in the staging directory; its name goes when this is dropped.
struct Staged {
    /// Where it was written.
    path: PathBuf,
}

impl Staged {
    /// Writes `bytes` for `key` to a fresh staging file and fsyncs it.
    fn write(
        op: &'static str,
        staging: &Path,
        key: &str,
        bytes: &[u8],
    ) -> Result<Self, StoreError> {
        let path = staging.join(staging_name(key));
        // Private (0600): the object is this inode once linked under its key.
        let mut file = crate::private::create_new_file(&path).map_err(|e| io_at(op, &path, &e))?;
        let staged = Staged { path };
        file.write_all(bytes)
            .and_then(|()| file.sync_all())
            .map_err(|e| io_at(op, &staged.path, &e))?;
        Ok(staged)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        // Best effort: a name left behind is a stale staging file, removed at a later open.
        let _ = fs::remove_file(&self.path);
    }
}

/// A staging file name for a put of `key`, unique across processes and calls:
/// `<pid>-<n>-<nanos>~<key, '/' as '+', cut at STAGED_KEY_BYTES>.tmp`.
fn staging_name(key: &str) -> String {
    let n = STAGED_COUNT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{n}-{nanos}~{}.tmp", std::process::id(), staged_key(key))
}

/// A key (or prefix) as a staging name carries it: `/` as `+` (no key character), cut at
/// [`STAGED_KEY_BYTES`] (keys are ASCII, so any cut is a character boundary).
fn staged_key(key: &str) -> String {
    let mut staged = key.replace('/', "+");
    staged.truncate(STAGED_KEY_BYTES);
    staged
}

/// Removes the staging files whose name carries a key under `prefix`; how many went. A prefix
/// longer than a staging name carries finds none.
fn remove_staged_under(op: &'static str, root: &Path, prefix: &str) -> Result<usize, StoreError> {
    let wanted = prefix.replace('/', "+");
    if wanted.len() > STAGED_KEY_BYTES {
        return Ok(0);
    }
    let staging = root.join(STAGING_DIR);
    let entries = match fs::read_dir(&staging) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_at(op, &staging, &e)),
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let carried = name
            .to_str()
            .and_then(|n| n.split_once('~'))
            .and_then(|(_, rest)| rest.strip_suffix(".tmp"));
        if carried.is_some_and(|k| k.starts_with(&wanted)) && remove_entry(op, &entry.path())? {
            removed += 1;
        }
    }
    Ok(removed)
}

/// Removes the staging files last modified more than `older_than` ago.
fn remove_stale_staging(staging: &Path, older_than: Duration) -> Result<(), StoreError> {
    let entries = fs::read_dir(staging).map_err(|e| io_at("open", staging, &e))?;
    for entry in entries.flatten() {
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > older_than);
        if stale {
            let _ = fs::remove_file(entry.path());
        }
    }
    Ok(())
}

fn put_blocking(root: &Path, key: &str, bytes: &[u8]) -> Result<Put, StoreError> {
    const OP: &str = "put_if_absent";
    let staged = Staged::write(OP, &root.join(STAGING_DIR), key, bytes)?;
    let target = path_of(root, key);
    for _ in 0..LINK_ATTEMPTS {
        if !ensure_parents(OP, root, key)? {
            continue;
        }
        match fs::hard_link(&staged.path, &target) {
            Ok(()) => {
                // Gone only if a concurrent delete took the new object already.
                sync_dir_if_present(OP, target.parent().unwrap_or(root))?;
                return Ok(Put::Created);
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                let found = existing(OP, &target)?;
                // The put that linked it may not have synced its directory yet (a retry of a
                // put still in its fsync): whoever reads `AlreadyExists` as "my bytes are
                // there" must find them there after a power loss too.
                sync_dir_if_present(OP, target.parent().unwrap_or(root))?;
                return Ok(found);
            }
            Err(_) if !staged.path.exists() => {
                return Err(refused_at(
                    OP,
                    &target,
                    "a delete_prefix of its prefix removed the staged bytes; nothing was put",
                ));
            }
            // A concurrent delete pruned the directory just made: make it again.
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(io_at(OP, &target, &e)),
        }
    }
    Err(refused_at(
        OP,
        &target,
        "its directory kept vanishing under concurrent deletes",
    ))
}

/// The answer to a put whose key exists: `AlreadyExists` if an object holds it.
fn existing(op: &'static str, target: &Path) -> Result<Put, StoreError> {
    match fs::symlink_metadata(target) {
        Ok(m) if m.is_file() => Ok(Put::AlreadyExists),
        Ok(_) => Err(refused_at(
            op,
            target,
            "other objects lie under this key, so it cannot be an object too",
        )),
        Err(e) => Err(io_at(op, target, &e)),
    }
}

fn get_blocking(root: &Path, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
    const OP: &str = "get";
    if inspect(OP, root, key)? != Found::File {
        return Ok(None);
    }
    let path = path_of(root, key);
    let nofollow = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    let mut file = match OpenOptions::new()
        .read(true)
        .custom_flags(nofollow)
        .open(&path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_at(OP, &path, &e)),
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| io_at(OP, &path, &e))?;
    Ok(Some(bytes))
}

/// The length of the file of `key`, without following a symlink.
fn size_blocking(root: &Path, key: &str) -> Result<Option<u64>, StoreError> {
    const OP: &str = "size";
    if inspect(OP, root, key)? != Found::File {
        return Ok(None);
    }
    let path = path_of(root, key);
    match fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() => Ok(Some(m.len())),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_at(OP, &path, &e)),
    }
}

fn delete_blocking(root: &Path, key: &str) -> Result<(), StoreError> {
    delete_keys_blocking("delete", root, std::slice::from_ref(&key.to_owned()))
}

/// Unlinks each key's file, then fsyncs each directory it touched once and prunes the empty ones.
fn delete_keys_blocking(op: &'static str, root: &Path, keys: &[String]) -> Result<(), StoreError> {
    let mut touched = std::collections::BTreeSet::new();
    for key in keys {
        if inspect(op, root, key)? != Found::File {
            continue;
        }
        let path = path_of(root, key);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(io_at(op, &path, &e)),
        }
        touched.insert(path.parent().unwrap_or(root).to_path_buf());
    }
    for parent in &touched {
        // Gone only if a concurrent delete of a sibling pruned it already.
        sync_dir_if_present(op, parent)?;
    }
    for parent in touched.iter().rev() {
        prune_empty_dirs(root, parent);
    }
    Ok(())
}

fn delete_prefix_blocking(root: &Path, prefix: &str) -> Result<usize, StoreError> {
    const OP: &str = "delete_prefix";
    // Staging files are no objects: they are removed, not counted.
    remove_staged_under(OP, root, prefix)?;
    if inspect(OP, root, prefix)? != Found::Dir {
        return Ok(0);
    }
    let dir = path_of(root, prefix);
    let removed = remove_tree(OP, &dir)?;
    let parent = dir.parent().unwrap_or(root);
    sync_dir_if_present(OP, parent)?;
    prune_empty_dirs(root, parent);
    Ok(removed)
}

/// Removes `dir` and everything under it without following symlinks; returns how many regular
/// files (objects) went. A directory a concurrent put has just filled again is left standing.
fn remove_tree(op: &'static str, dir: &Path) -> Result<usize, StoreError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_at(op, dir, &e)),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(|e| io_at(op, dir, &e))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| io_at(op, &path, &e))?;
        if kind.is_dir() {
            removed += remove_tree(op, &path)?;
        } else if remove_entry(op, &path)? && kind.is_file() {
            removed += 1;
        }
    }
    match fs::remove_dir(dir) {
        Ok(()) => Ok(removed),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::DirectoryNotEmpty) => {
            Ok(removed)
        }
        Err(e) => Err(io_at(op, dir, &e)),
    }
}

/// Unlinks one entry (a symlink itself, never its target); false if it was already gone.
fn remove_entry(op: &'static str, path: &Path) -> Result<bool, StoreError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(io_at(op, path, &e)),
    }
}

/// Removes `from` and its ancestors while they are empty, stopping below `root`. Best effort:
/// a directory that is not empty (or a concurrent put's) simply stays.
fn prune_empty_dirs(root: &Path, from: &Path) {
    let mut dir = from;
    while dir != root && dir.starts_with(root) {
        if fs::remove_dir(dir).is_err() {
            return;
        }
        match dir.parent() {
            Some(parent) => dir = parent,
            None => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_the_key_segments() {
        let root = Path::new("/r");
        assert_eq!(path_of(root, "a/b/c.db"), PathBuf::from("/r/a/b/c.db"));
        assert_eq!(path_of(root, "a/b/"), PathBuf::from("/r/a/b"));
        assert_eq!(path_of(root, ""), PathBuf::from("/r"));
    }

    #[test]
    fn the_staging_directory_can_never_be_a_key() {
        assert!(check_key(STAGING_DIR).is_err());
        let key = "acme/t1/e00000001/snap-000001.db";
        assert_ne!(staging_name(key), staging_name(key));
        assert!(staging_name(key).ends_with("~acme+t1+e00000001+snap-000001.db.tmp"));
        assert_eq!(staged_key(&"a".repeat(300)).len(), STAGED_KEY_BYTES);
    }
}
