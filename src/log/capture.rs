//! Reading what a commit changed from the WAL.

use std::collections::BTreeMap;

/// The pages one or more consecutive commits changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The database's page size.
    pub page_size: u32,
    /// How many pages the database has after the commits.
    pub db_pages: u32,
    /// Each changed page's bytes after the commits, by page number.
    pub pages: BTreeMap<u32, Vec<u8>>,
    /// The database's sum before the first commit.
    pub sum_before: u64,
    /// The database's sum after the last commit.
    pub sum_after: u64,
}

impl Changes {
    /// Folds `later` (the commits right after these) into these: its pages win, its size and
    /// sum after are the result's.
    pub fn merge(&mut self, later: Changes) {
        self.page_size = later.page_size;
        self.db_pages = later.db_pages;
        self.sum_after = later.sum_after;
        self.pages.extend(later.pages);
        let end = self.db_pages;
        self.pages.retain(|&pgno, _| pgno <= end);
    }
}

/// The WAL header is 32 bytes; each frame is a 24-byte header and one page.
const WAL_HEADER: usize = 32;
const FRAME_HEADER: usize = 24;
/// The two magic numbers a WAL header starts with (checksums in little- or big-endian words).
const WAL_MAGIC: [u32; 2] = [0x377f_0682, 0x377f_0683];

/// Where the capture of one ledger's WAL stands.
///
/// SQLite appends every commit's pages to the `-wal` file as frames; the connection's WAL hook
/// tells how many frames the log holds after each commit. Between two calls of
/// [`WalCursor::take`], the frames past the ones already read are the pages those commits
/// changed (a page written twice counts once, the later copy wins). Frames past the count the
/// hook gave are never read: they are what a rolled-back transaction left. When a checkpoint
/// let SQLite restart the log, its header's salts change and reading starts over at frame 1.
/// Checkpoints are the runtime's alone (the hook turns SQLite's automatic ones off), and come
/// only after the frames were read.
#[derive(Debug)]
pub struct WalCursor {
    /// `<ledger>-wal`.
    wal_path: std::path::PathBuf,
    /// The salts of the log generation read so far.
    salts: Option<[u8; 8]>,
    /// Frames of that generation already read.
    read: u32,
    /// The database's sums as of the frames read.
    sums: super::PageSums,
    /// Changes made before the capture began (the open's own), shipped with the first changes.
    carry: Option<Changes>,
    /// Page 1 as of the frames read: an image's first page is set to it, since a copy made by
    /// SQLite's backup rewrites fields of the header (`ReadSnapshot::write_exact_image`).
    page_one: Vec<u8>,
}

impl WalCursor {
    /// A cursor over the WAL of the database at `db_path`, whose state (checkpointed, the WAL
    /// empty) has the sums `sums`.
    pub fn new(db_path: &std::path::Path, sums: super::PageSums, page_one: Vec<u8>) -> Self {
        let mut wal = db_path.as_os_str().to_os_string();
        wal.push("-wal");
        Self {
            wal_path: wal.into(),
            salts: None,
            read: 0,
            sums,
            carry: None,
            page_one,
        }
    }

    /// Page 1 of the database as of the frames read (empty while the database has no pages).
    pub fn page_one(&self) -> &[u8] {
        &self.page_one
    }

    /// How many pages the next changes carry from before the capture began.
    pub fn carried_pages(&self) -> u64 {
        self.carry.as_ref().map_or(0, |c| c.pages.len() as u64)
    }

    /// Ships `changes` (made before the capture began) with the next changes taken.
    pub fn carry(&mut self, changes: Changes) {
        self.carry = Some(changes);
    }

    /// The sums of the database as of the frames read.
    pub fn sums(&self) -> &super::PageSums {
        &self.sums
    }

    /// Frames of the current log generation read so far.
    pub fn frames_read(&self) -> u32 {
        self.read
    }

    /// The log was checkpointed and truncated: the next commit starts a new generation.
    pub fn reset(&mut self) {
        self.salts = None;
        self.read = 0;
    }

    /// The pages of the commits since the last call, given that the log holds `frames` frames
    /// after the last of them (`None`: no commit wrote anything since; only a carried change
    /// is returned then).
    pub fn take(&mut self, frames: Option<u32>) -> Result<Option<Changes>, String> {
        let taken = match frames {
            Some(frames) => Some(self.read_frames(frames)?),
            None => None,
        };
        Ok(match (self.carry.take(), taken) {
            (Some(mut carried), Some(later)) => {
                carried.merge(later);
                Some(carried)
            }
            (carried, taken) => carried.or(taken),
        })
    }

    fn read_frames(&mut self, frames: u32) -> Result<Changes, String> {
        use std::io::{Read, Seek, SeekFrom};
        let what = self.wal_path.display().to_string();
        let mut file = std::fs::File::open(&self.wal_path).map_err(|e| format!("{what}: {e}"))?;
        let mut header = [0u8; WAL_HEADER];
        file.read_exact(&mut header)
            .map_err(|e| format!("{what}: reading its header: {e}"))?;
        let word = |at: usize| {
            u32::from_be_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
        };
        if !WAL_MAGIC.contains(&word(0)) {
            return Err(format!("{what}: not a WAL (magic {:#x})", word(0)));
        }
        let page_size = word(8);
        if !(512..=65_536).contains(&page_size) || !page_size.is_power_of_two() {
            return Err(format!("{what}: page size {page_size} in its header"));
        }
        let mut salts = [0u8; 8];
        salts.copy_from_slice(&header[16..24]);
        if self.salts != Some(salts) {
            // A new generation (after a checkpoint): its frames start at 1.
            self.salts = Some(salts);
            self.read = 0;
        }
        if frames <= self.read {
            return Err(format!(
                "{what}: the hook counts {frames} frames, {} were already read",
                self.read
            ));
        }
        let frame_len = FRAME_HEADER + page_size as usize;
        let start = WAL_HEADER + self.read as usize * frame_len;
        let count = (frames - self.read) as usize;
        let mut bytes = vec![0u8; count * frame_len];
        file.seek(SeekFrom::Start(start as u64))
            .and_then(|_| file.read_exact(&mut bytes))
            .map_err(|e| format!("{what}: reading frames {}..={frames}: {e}", self.read + 1))?;
        let mut pages = BTreeMap::new();
        let mut db_pages = 0;
        for frame in bytes.chunks(frame_len) {
            let pgno = u32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
            let commit = u32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
            if frame[8..16] != salts || pgno == 0 {
                return Err(format!("{what}: a frame of another log generation"));
            }
            if commit != 0 {
                db_pages = commit;
            }
            pages.insert(pgno, frame[FRAME_HEADER..].to_vec());
        }
        if db_pages == 0 {
            return Err(format!("{what}: frame {frames} is not the end of a commit"));
        }
        pages.retain(|&pgno, _| pgno <= db_pages);
        let sum_before = self.sums.total();
        self.sums.set_page_size(page_size)?;
        for (pgno, data) in &pages {
            self.sums.set(*pgno, data);
        }
        self.sums.resize(db_pages);
        if let Some(first) = pages.get(&1) {
            self.page_one = first.clone();
        }
        self.read = frames;
        Ok(Changes {
            page_size,
            db_pages,
            pages,
            sum_before,
            sum_after: self.sums.total(),
        })
    }
}
