//! The verbs, one file each under `cmd/`, and what they share: the [`Outcome`] every verb
//! returns (its `--json` document, its text, its exit status), the tenant's listing and its lease
//! entry, and a private scratch directory.

use std::path::{Path, PathBuf};

use leasehold::durable::DurableStore;
use leasehold::lease::{LeaseEntry, LeaseStore};
use leasehold::{LeaseKey, sweep::SWEEP_PAGE_KEYS};
use serde::Serialize;

use crate::exit::{Exit, Failure};

#[path = "cmd/forget.rs"]
pub mod forget;
#[path = "cmd/inspect.rs"]
pub mod inspect;
#[path = "cmd/leases.rs"]
pub mod leases;
#[path = "cmd/restore.rs"]
pub mod restore;
#[path = "cmd/sweep.rs"]
pub mod sweep;
#[path = "cmd/verify.rs"]
pub mod verify;

/// What a verb came to.
#[derive(Debug)]
pub struct Outcome {
    /// The `--json` document.
    pub json: serde_json::Value,
    /// The text printed without `--json` (what was already printed while it ran is not here).
    pub human: String,
    /// How the process exits (a verb may report and still fail: `verify` with a failed check).
    pub exit: Exit,
}

impl Outcome {
    /// An outcome whose document is `report`.
    pub fn new(report: &impl Serialize, human: String, exit: Exit) -> Result<Self, Failure> {
        let json = serde_json::to_value(report)
            .map_err(|e| Failure::usage(format!("cannot write the report as JSON: {e}")))?;
        Ok(Self { json, human, exit })
    }
}

/// Every key the durable store holds under `prefix`, page by page.
pub async fn list_all(store: &dyn DurableStore, prefix: &str) -> Result<Vec<String>, Failure> {
    let (mut keys, mut after) = (Vec::new(), None::<String>);
    loop {
        let page = store
            .list_page(prefix, after.as_deref(), SWEEP_PAGE_KEYS)
            .await?;
        keys.extend(page.keys);
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(keys),
        }
    }
}

/// The lease entry of `key` (the store's view of its time left and pending erasure), if the
/// store has a record of it.
pub async fn entry_of(
    leases: &dyn LeaseStore,
    key: &LeaseKey,
) -> Result<Option<LeaseEntry>, Failure> {
    let page = leases.list(Some(key), 1).await?;
    Ok(page
        .entries
        .into_iter()
        .next()
        .filter(|e| e.record.key == key.as_str()))
}

/// The tenant of a lease record.
pub fn key_of(record: &leasehold::lease::LeaseRecord) -> Result<LeaseKey, Failure> {
    LeaseKey::parse(&record.key).map_err(|e| {
        Failure::from(leasehold::Error::Corrupt(format!(
            "the lease store holds a key that is no tenant, {:?}: {e}",
            record.key
        )))
    })
}

/// Whether the durable store holds anything of `key`.
pub async fn has_objects(store: &dyn DurableStore, key: &LeaseKey) -> Result<bool, Failure> {
    Ok(!store
        .list_page(&key.prefix(), None, 1)
        .await?
        .keys
        .is_empty())
}

/// The `NotFound` failure of a tenant the stores know nothing of.
pub fn unknown_tenant(key: &LeaseKey) -> Failure {
    Failure::not_found(format!(
        "{key}: the lease store has no record of it and the durable store no object"
    ))
}

/// A private (0700) directory of this process under the system's temporary directory, removed
/// with everything in it when dropped.
#[derive(Debug)]
pub struct Scratch {
    /// The directory.
    path: PathBuf,
}

impl Scratch {
    /// Creates it.
    pub fn new(what: &str) -> Result<Self, Failure> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = format!("leasehold-{what}-{}-{nanos}", std::process::id());
        let path = std::env::temp_dir().join(name);
        leasehold::private::create_dir(&path)
            .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
        Ok(Self { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// `PRAGMA integrity_check` of the SQLite file at `path`, opened read-only and immutable (no
/// `-wal` or `-shm` is made beside it): `ok`, or what it found.
pub fn integrity_check(path: &Path) -> Result<String, String> {
    use rusqlite::{Connection, OpenFlags};
    let text = path.to_str().ok_or("not a UTF-8 path")?;
    let escaped = text
        .replace('%', "%25")
        .replace('?', "%3f")
        .replace('#', "%23");
    let uri = format!("file:{escaped}?immutable=1");
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_URI
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(uri, flags).map_err(|e| e.to_string())?;
    let mut stmt = conn
        .prepare("PRAGMA integrity_check")
        .map_err(|e| e.to_string())?;
    let lines = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .map_err(|e| e.to_string())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    Ok(lines.join("; "))
}
