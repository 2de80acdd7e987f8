//! What the change-log tests share: a SQLite file whose states are captured as segments by
//! diffing the file page by page (the WAL capture is the runtime's; these tests pin the format,
//! the restore and the point-in-time restore), a durable store that records every read, and
//! helpers to publish images and ship segments.
//!
//! Used by `tests/log_restore.rs` and `tests/log_pitr.rs`; each uses part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use leasehold::durable::{DurableStore, ListPage, Put, StoreError};
use leasehold::ids::{LeaseKey, OrgId, TenantId};
use leasehold::image::{ImageFile, sha256_hex, upload_image};
use leasehold::layout::{ImageRef, LogPos, segment_key};
use leasehold::log::{Changes, PageSums, Segment};
use leasehold::testkit::MemStore;

/// The tenant every test uses.
pub fn key() -> LeaseKey {
    LeaseKey::new(&OrgId::new("acme").unwrap(), &TenantId::new("t1").unwrap())
}

/// The pages of `after` that differ from `before` (or lie past its end), with both sums.
pub fn changes_between(before: &[u8], after: &[u8]) -> Changes {
    let size = leasehold::log::sums::header_page_size(after).unwrap() as usize;
    let mut pages = BTreeMap::new();
    for (i, page) in after.chunks(size).enumerate() {
        if before.get(i * size..(i + 1) * size) != Some(page) {
            pages.insert(u32::try_from(i + 1).unwrap(), page.to_vec());
        }
    }
    Changes {
        page_size: size as u32,
        db_pages: u32::try_from(after.len() / size).unwrap(),
        pages,
        sum_before: PageSums::of_bytes(before).unwrap().total(),
        sum_after: PageSums::of_bytes(after).unwrap().total(),
    }
}

/// A SQLite database file in rollback-journal mode (so the file alone is the state after
/// every statement), with 512-byte pages.
pub struct Db {
    /// Where it is.
    pub path: PathBuf,
    conn: rusqlite::Connection,
}

impl Db {
    /// A new database at `dir/name`.
    pub fn create(dir: &Path, name: &str) -> Db {
        let path = dir.join(name);
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA page_size=512; PRAGMA journal_mode=DELETE;")
            .unwrap();
        Db { path, conn }
    }

    /// Runs `sql` (one or more statements).
    pub fn run(&self, sql: &str) {
        self.conn.execute_batch(sql).unwrap();
    }

    /// The file's bytes now.
    pub fn bytes(&self) -> Vec<u8> {
        std::fs::read(&self.path).unwrap()
    }
}

/// `PRAGMA integrity_check` of the file at `path`, opened read-only.
pub fn integrity(path: &Path) -> String {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

/// The rows of `sql` as text, one string per row.
pub fn rows(path: &Path, sql: &str) -> Vec<String> {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    stmt.query_map([], |r| {
        let v: rusqlite::types::Value = r.get(0)?;
        Ok(format!("{v:?}"))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// A log being written by hand: each shipped state becomes the next segment.
pub struct Log {
    /// The bytes of the last shipped state (empty before the first).
    pub last: Vec<u8>,
    /// The tip: the last shipped position.
    pub tip: Option<LogPos>,
}

impl Log {
    /// A log with nothing shipped, starting from an empty database.
    pub fn new() -> Log {
        Log {
            last: Vec::new(),
            tip: None,
        }
    }

    /// The segment that takes the last shipped state to `after`, at the next position in
    /// `epoch`, not yet shipped.
    pub fn cut(&self, epoch: u64, after: &[u8], created_at_ms: u64) -> Segment {
        let pos = LogPos {
            epoch,
            seq: self.tip.map_or(1, |t| t.seq + 1),
        };
        Segment::from_changes(
            &key(),
            pos,
            self.tip,
            changes_between(&self.last, after),
            created_at_ms,
        )
    }

    /// Cuts and ships the segment to `after`; the tip moves to it.
    pub async fn ship(
        &mut self,
        store: &dyn DurableStore,
        epoch: u64,
        after: &[u8],
        created_at_ms: u64,
    ) -> LogPos {
        let seg = self.cut(epoch, after, created_at_ms);
        let pos = seg.header.pos;
        put(store, &segment_key(&key(), pos), seg.encode().unwrap()).await;
        self.last = after.to_vec();
        self.tip = Some(pos);
        pos
    }
}

/// Puts `bytes` at `key`, which must be free.
pub async fn put(store: &dyn DurableStore, key: &str, bytes: Vec<u8>) {
    assert_eq!(store.put_if_absent(key, bytes).await.unwrap(), Put::Created);
}

/// Replaces the object at `key`.
pub async fn replace(store: &dyn DurableStore, key: &str, bytes: Vec<u8>) {
    store.delete(key).await.unwrap();
    put(store, key, bytes).await;
}

/// Publishes `bytes` (a database file's exact bytes, as a page-copy image holds them) as image
/// `(epoch, seq)` holding log position `log`.
pub async fn publish(
    store: &dyn DurableStore,
    dir: &Path,
    (epoch, seq): (u64, u64),
    bytes: &[u8],
    base: Option<ImageRef>,
    log: Option<LogPos>,
) -> ImageRef {
    let path = dir.join(format!("image-{epoch}-{seq}.db"));
    std::fs::write(&path, bytes).unwrap();
    let file = ImageFile {
        path,
        size: bytes.len() as u64,
        sha256: sha256_hex(bytes),
    };
    upload_image(store, &key(), epoch, seq, &file, base, log, false, 1)
        .await
        .unwrap()
        .image_ref()
}

/// A [`MemStore`] that records the key of every read.
#[derive(Debug, Default)]
pub struct Watched {
    /// The objects.
    pub inner: MemStore,
    /// Every key `get` or `get_sized` was asked for, in order.
    pub reads: Mutex<Vec<String>>,
    /// Sizes `size` answers instead of the objects' own (a lying size, or an object of that
    /// size without allocating it), by key.
    pub claimed_sizes: Mutex<Vec<(String, u64)>>,
}

impl Watched {
    /// Whether `key` was ever read.
    pub fn was_read(&self, key: &str) -> bool {
        self.reads.lock().unwrap().iter().any(|k| k == key)
    }
}

#[async_trait]
impl DurableStore for Watched {
    async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<Put, StoreError> {
        self.inner.put_if_absent(key, bytes).await
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.reads.lock().unwrap().push(key.to_string());
        self.inner.get(key).await
    }
    /// Not recorded: a size reads no content. A claimed size is answered as it is.
    async fn size(&self, key: &str) -> Result<Option<u64>, StoreError> {
        let claimed = {
            let claimed = self.claimed_sizes.lock().unwrap();
            claimed
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, size)| *size)
        };
        match claimed {
            Some(size) => Ok(Some(size)),
            None => self.inner.size(key).await,
        }
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.inner.list(prefix).await
    }
    async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max_keys: usize,
    ) -> Result<ListPage, StoreError> {
        self.inner.list_page(prefix, start_after, max_keys).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.inner.delete(key).await
    }
    async fn delete_prefix(&self, prefix: &str) -> Result<usize, StoreError> {
        self.inner.delete_prefix(prefix).await
    }
}
