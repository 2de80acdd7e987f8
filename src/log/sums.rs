//! The rolling checksum of a database, as LiteFS's LTX files keep one: every page hashes to 64
//! bits (its number and its bytes), and the database's sum is the XOR of its pages' hashes. A
//! batch that changes `k` pages changes the sum in `O(k)`: XOR the old hashes out and the new
//! ones in. A segment carries the sum before and after it, so a restore checks that each
//! segment applies to exactly the state it was cut from (docs/guarantees.md, the change log).

use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

/// The hash of page `pgno` holding `data`: the first 8 bytes of SHA-256(pgno as 4 bytes
/// big-endian ‖ data), as a big-endian `u64`.
pub fn page_hash(pgno: u32, data: &[u8]) -> u64 {
    let mut h = Sha256::new();
    h.update(pgno.to_be_bytes());
    h.update(data);
    let digest = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The page size a database file's header names (bytes 16–17; `1` means 65,536), or `None`
/// when `header` is shorter than a header or names no valid size.
pub fn header_page_size(header: &[u8]) -> Option<u32> {
    let raw = u32::from(u16::from_be_bytes([*header.get(16)?, *header.get(17)?]));
    let size = if raw == 1 { 65_536 } else { raw };
    (size >= 512 && size.is_power_of_two()).then_some(size)
}

/// Every page's hash and their XOR.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageSums {
    /// The page size; 0 while the database is empty (it has no pages yet).
    page_size: u32,
    /// `hashes[i]` is the hash of page `i + 1`.
    hashes: Vec<u64>,
    /// XOR of `hashes`.
    total: u64,
}

impl PageSums {
    /// The sums of an empty database (no pages).
    pub fn empty() -> Self {
        Self::default()
    }

    /// The sums of the database in `bytes` (a whole file, no WAL beside it).
    pub fn of_bytes(bytes: &[u8]) -> Result<Self, String> {
        let mut sums = Self::empty();
        if bytes.is_empty() {
            return Ok(sums);
        }
        let size = header_page_size(bytes).ok_or("no valid page size in the database header")?;
        if !bytes.len().is_multiple_of(size as usize) {
            return Err(format!(
                "{} bytes is not a whole number of {size}-byte pages",
                bytes.len()
            ));
        }
        sums.page_size = size;
        for (i, page) in bytes.chunks(size as usize).enumerate() {
            let pgno = u32::try_from(i + 1).map_err(|_| "more than 2^32 pages".to_string())?;
            sums.set(pgno, page);
        }
        Ok(sums)
    }

    /// The sums of the database file at `path` (read whole once, page by page).
    pub fn of_file(path: &Path) -> Result<Self, String> {
        let mut file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut header = [0u8; 100];
        let mut read = 0;
        while read < header.len() {
            match file.read(&mut header[read..]) {
                Ok(0) => break,
                Ok(n) => read += n,
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
        if read == 0 {
            return Ok(Self::empty());
        }
        let size = header_page_size(&header[..read])
            .ok_or_else(|| format!("{}: no valid page size in its header", path.display()))?;
        let mut sums = Self {
            page_size: size,
            ..Self::default()
        };
        let mut page = vec![0u8; size as usize];
        page[..read].copy_from_slice(&header[..read]);
        let mut filled = read;
        let mut pgno = 1u32;
        loop {
            while filled < page.len() {
                match file.read(&mut page[filled..]) {
                    Ok(0) => break,
                    Ok(n) => filled += n,
                    Err(e) => return Err(format!("{}: {e}", path.display())),
                }
            }
            if filled == 0 {
                return Ok(sums);
            }
            if filled < page.len() {
                return Err(format!(
                    "{}: its last page is {filled} of {size} bytes",
                    path.display()
                ));
            }
            sums.set(pgno, &page);
            pgno = pgno
                .checked_add(1)
                .ok_or_else(|| format!("{}: more than 2^32 pages", path.display()))?;
            filled = 0;
        }
    }

    /// The database's sum: the XOR of its pages' hashes (0 for an empty database).
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The page size, 0 while the database has no pages.
    pub fn page_size(&self) -> u32 {
        self.page_size
    }

    /// How many pages the database has.
    pub fn db_pages(&self) -> u32 {
        u32::try_from(self.hashes.len()).unwrap_or(u32::MAX)
    }

    /// The hash page `pgno` has now (of a zero page if it lies past the end).
    pub fn hash_of(&self, pgno: u32) -> Option<u64> {
        self.hashes.get(pgno.checked_sub(1)? as usize).copied()
    }

    /// Sets the page size of a database that had no pages yet. A different size for a database
    /// that has pages is refused.
    pub fn set_page_size(&mut self, size: u32) -> Result<(), String> {
        if self.page_size == size {
            return Ok(());
        }
        if self.hashes.is_empty() {
            self.page_size = size;
            return Ok(());
        }
        Err(format!(
            "page size {size}, but the database has {}-byte pages",
            self.page_size
        ))
    }

    /// Page `pgno` (from 1) now holds `data`. Pages between the old end and `pgno` that were
    /// never written read as zeros, and are summed so.
    pub fn set(&mut self, pgno: u32, data: &[u8]) {
        let Some(index) = pgno.checked_sub(1).map(|i| i as usize) else {
            return;
        };
        while self.hashes.len() < index {
            let gap = u32::try_from(self.hashes.len() + 1).unwrap_or(u32::MAX);
            let zero = page_hash(gap, &vec![0u8; self.page_size as usize]);
            self.hashes.push(zero);
            self.total ^= zero;
        }
        let new = page_hash(pgno, data);
        if index == self.hashes.len() {
            self.hashes.push(new);
        } else {
            self.total ^= self.hashes[index];
            self.hashes[index] = new;
        }
        self.total ^= new;
    }

    /// The database now has `db_pages` pages: pages past it go; pages up to it that do not
    /// exist yet read as zeros.
    pub fn resize(&mut self, db_pages: u32) {
        let want = db_pages as usize;
        while self.hashes.len() > want {
            if let Some(gone) = self.hashes.pop() {
                self.total ^= gone;
            }
        }
        if want > self.hashes.len() {
            let zeros = vec![0u8; self.page_size as usize];
            self.set(db_pages, &zeros);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(pages: &[&[u8]], size: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        for p in pages {
            let mut page = p.to_vec();
            page.resize(size, 0);
            bytes.extend(page);
        }
        bytes[16..18].copy_from_slice(&u16::try_from(size).unwrap().to_be_bytes());
        bytes
    }

    #[test]
    fn the_sum_after_a_change_equals_the_sum_of_the_changed_database() {
        let before = db(&[b"SQLite format 3\0", b"two", b"three"], 512);
        let mut sums = PageSums::of_bytes(&before).unwrap();
        let mut after = before.clone();
        after[512..515].copy_from_slice(b"TWO");
        sums.set(2, &after[512..1024]);
        assert_eq!(sums, PageSums::of_bytes(&after).unwrap());
        assert_ne!(sums.total(), PageSums::of_bytes(&before).unwrap().total());
    }

    #[test]
    fn shrinking_and_growing_keep_the_sum_of_the_whole_file() {
        let full = db(&[b"SQLite format 3\0", b"two", b"three"], 512);
        let mut sums = PageSums::of_bytes(&full).unwrap();
        sums.resize(2);
        assert_eq!(sums, PageSums::of_bytes(&full[..1024]).unwrap());
        sums.resize(4);
        let mut grown = full[..1024].to_vec();
        grown.resize(4 * 512, 0);
        assert_eq!(sums, PageSums::of_bytes(&grown).unwrap());
    }

    #[test]
    fn a_file_is_summed_like_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let bytes = db(&[b"SQLite format 3\0", b"x"], 1024);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(
            PageSums::of_file(&path).unwrap(),
            PageSums::of_bytes(&bytes).unwrap()
        );
        std::fs::write(&path, b"").unwrap();
        assert_eq!(PageSums::of_file(&path).unwrap(), PageSums::empty());
        std::fs::write(&path, &bytes[..1500]).unwrap();
        assert!(PageSums::of_file(&path).is_err());
    }

    #[test]
    fn a_page_size_is_a_power_of_two_from_512() {
        let mut h = [0u8; 18];
        h[16..18].copy_from_slice(&4096u16.to_be_bytes());
        assert_eq!(header_page_size(&h), Some(4096));
        h[16..18].copy_from_slice(&1u16.to_be_bytes());
        assert_eq!(header_page_size(&h), Some(65_536));
        h[16..18].copy_from_slice(&1000u16.to_be_bytes());
        assert_eq!(header_page_size(&h), None);
        assert_eq!(header_page_size(&h[..10]), None);
    }
}
