//! `leasehold leases`: every lease of the lease store, page by page, as the store's clock sees
//! it. The text is printed page by page while the listing goes on; `--json` is one document.

use leasehold::LeaseKey;
use leasehold::lease::LeaseStore;
use serde::Serialize;

use super::Outcome;
use crate::exit::{Exit, Failure};
use crate::report::{LEASE_COLUMNS, LeaseView, table};

/// How many leases one listing call asks for.
const PAGE: usize = 500;

/// The `--json` document of `leases`.
#[derive(Debug, Serialize)]
pub struct LeasesReport {
    /// The leases, in the store's order of keys.
    pub leases: Vec<LeaseView>,
    /// Where a listing cut by `--limit` goes on (`--from`); `null` at the end.
    pub next: Option<String>,
}

/// Lists from `from`, at most `limit`; `print` gets each page's text (nothing with `--json`).
pub async fn run(
    leases: &dyn LeaseStore,
    from: Option<LeaseKey>,
    limit: Option<u64>,
    now_unix_ms: u64,
    mut print: impl FnMut(&str),
) -> Result<Outcome, Failure> {
    let limit = limit.map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let mut report = LeasesReport {
        leases: Vec::new(),
        next: None,
    };
    let (mut at, mut shown, mut first) = (from, 0usize, true);
    loop {
        let asked = PAGE.min(limit - shown);
        let page = leases.list(at.as_ref(), asked).await?;
        let views: Vec<LeaseView> = page
            .entries
            .iter()
            .map(|e| LeaseView::of(e, now_unix_ms))
            .collect();
        shown += views.len();
        let rows: Vec<Vec<String>> = views.iter().map(LeaseView::row).collect();
        if !rows.is_empty() {
            let text = table(&LEASE_COLUMNS, &rows);
            // The header once, over the first page.
            let text = if first {
                text.as_str()
            } else {
                text.split_once('\n').map_or("", |(_, rest)| rest)
            };
            print(text);
            first = false;
        }
        report.leases.extend(views);
        match page.next {
            Some(next) if shown < limit => at = Some(next),
            Some(next) => {
                report.next = Some(next.to_string());
                break;
            }
            None => break,
        }
    }
    let human = match (&report.next, shown) {
        (_, 0) => "no leases\n".to_owned(),
        (Some(next), n) => format!("{n} leases shown; the next is {next} (--from {next})\n"),
        (None, n) => format!("{n} leases\n"),
    };
    Outcome::new(&report, human, Exit::Ok)
}
