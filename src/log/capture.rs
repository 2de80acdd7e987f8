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
