//! What the commands print: the `--json` documents (their field names and types are the
//! contract documented in docs/operations.md, "`--json`") and their human form. Pure: a report
//! is built from what the stores returned and `now`, and rendered to text.

use std::time::Duration;

use leasehold::layout::{ImageRef, LogPos};
use leasehold::lease::LeaseEntry;
use serde::Serialize;

use crate::time::{format_rfc3339, words};

/// One lease, as `leases` and `inspect` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeaseView {
    /// `ORG/TENANT`.
    pub key: String,
    /// The replica that holds or last held it.
    pub owner: String,
    /// The epoch of the last acquisition.
    pub epoch: u64,
    /// `held`, `released` or `expired`, by the lease store's clock.
    pub state: &'static str,
    /// How long it still runs by the store's clock (`null` unless held).
    pub expires_in_ms: Option<u64>,
    /// When it ends, RFC 3339 UTC: this host's clock plus `expires_in_ms` (`null` unless held).
    pub expires_at: Option<String>,
    /// The highest forgotten epoch.
    pub floor: u64,
    /// The newest published image.
    pub head: Option<ImageRef>,
    /// The newest segment of the change log.
    pub tip: Option<LogPos>,
    /// A forget's erasure that no sweep has marked done yet.
    pub erasure: Option<ErasureView>,
}

/// A pending erasure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErasureView {
    /// The floor it sweeps.
    pub floor: u64,
    /// How long ago the forget was, by the store's clock (`null`: an earlier boot's, SQLite).
    pub age_ms: Option<u64>,
}

impl LeaseView {
    /// The view of `entry`, with `now_unix_ms` from this host's wall clock.
    pub fn of(entry: &LeaseEntry, now_unix_ms: u64) -> Self {
        let r = &entry.record;
        let left = entry.remaining.map(ms);
        let state = match (left, r.released) {
            (Some(_), _) => "held",
            (None, true) => "released",
            (None, false) => "expired",
        };
        Self {
            key: r.key.clone(),
            owner: r.owner.clone(),
            epoch: r.epoch,
            state,
            expires_in_ms: left,
            expires_at: left.map(|left| format_rfc3339(now_unix_ms.saturating_add(left))),
            floor: r.floor,
            head: r.head.clone(),
            tip: r.tip,
            erasure: entry.erasure.map(|e| ErasureView {
                floor: e.floor,
                age_ms: e.age.map(ms),
            }),
        }
    }

    /// The row of a lease table: key, owner, epoch, state and expiry, floor, head, tip, erasure.
    pub fn row(&self) -> Vec<String> {
        let expiry = match (&self.expires_in_ms, &self.expires_at) {
            (Some(left), Some(at)) => format!("held, ends in {} ({at})", words(millis(*left))),
            _ => self.state.to_owned(),
        };
        vec![
            self.key.clone(),
            self.owner.clone(),
            self.epoch.to_string(),
            expiry,
            self.floor.to_string(),
            self.head.as_ref().map_or("-".into(), image_name),
            self.tip.map_or("-".into(), pos_name),
            self.erasure.as_ref().map_or("-".into(), erasure_words),
        ]
    }
}

/// The columns of [`LeaseView::row`].
pub const LEASE_COLUMNS: [&str; 8] = [
    "TENANT", "OWNER", "EPOCH", "LEASE", "FLOOR", "HEAD", "TIP", "ERASURE",
];

/// A pending erasure in words: `pending at floor 2, forgotten 4m ago`.
pub fn erasure_words(e: &ErasureView) -> String {
    match e.age_ms {
        Some(age) => format!(
            "pending at floor {}, forgotten {} ago",
            e.floor,
            words(millis(age))
        ),
        None => format!(
            "pending at floor {} (forgotten in an earlier boot)",
            e.floor
        ),
    }
}

/// An image as `e3/2` (epoch, number).
pub fn image_name(image: &ImageRef) -> String {
    format!("e{}/{}", image.epoch, image.seq)
}

/// A log position as `e3:41`, the form `--at` takes.
pub fn pos_name(pos: LogPos) -> String {
    format!("e{}:{}", pos.epoch, pos.seq)
}

/// Milliseconds of a duration, saturating.
pub fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// Rows under a header, each column as wide as its widest cell, two spaces apart.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_owned() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold::lease::{ErasureEntry, LeaseRecord};

    fn entry(remaining: Option<u64>, released: bool) -> LeaseEntry {
        LeaseEntry {
            record: LeaseRecord {
                key: "acme/t1".into(),
                owner: "replica-a".into(),
                epoch: 3,
                expires_at_ms: 99,
                released,
                floor: 2,
                head: Some(ImageRef {
                    epoch: 3,
                    seq: 2,
                    sha256: "ab".repeat(32),
                }),
                tip: Some(LogPos { epoch: 3, seq: 41 }),
            },
            remaining: remaining.map(Duration::from_millis),
            erasure: Some(ErasureEntry {
                floor: 2,
                age: Some(Duration::from_secs(250)),
            }),
        }
    }

    #[test]
    fn a_held_lease_ends_at_this_hosts_time_plus_what_the_store_says_is_left() {
        let v = LeaseView::of(&entry(Some(23_000), false), 1_700_000_000_000);
        assert_eq!(v.state, "held");
        assert_eq!(v.expires_in_ms, Some(23_000));
        assert_eq!(v.expires_at.as_deref(), Some("2023-11-14T22:13:43.000Z"));
        assert_eq!(
            v.row(),
            [
                "acme/t1",
                "replica-a",
                "3",
                "held, ends in 23s (2023-11-14T22:13:43.000Z)",
                "2",
                "e3/2",
                "e3:41",
                "pending at floor 2, forgotten 4m 10s ago"
            ]
        );
    }

    #[test]
    fn a_lease_not_held_is_released_or_expired_with_no_end() {
        let released = LeaseView::of(&entry(None, true), 0);
        assert_eq!(
            (released.state, released.expires_at.clone()),
            ("released", None)
        );
        assert_eq!(released.row()[3], "released");
        assert_eq!(LeaseView::of(&entry(None, false), 0).state, "expired");
    }

    #[test]
    fn the_json_names_every_field() {
        let v = LeaseView::of(&entry(Some(1), false), 0);
        let json = serde_json::to_value(&v).unwrap();
        let mut keys: Vec<_> = json.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "epoch",
                "erasure",
                "expires_at",
                "expires_in_ms",
                "floor",
                "head",
                "key",
                "owner",
                "state",
                "tip"
            ]
        );
        assert_eq!(json["tip"], serde_json::json!({"epoch": 3, "seq": 41}));
        assert_eq!(
            json["erasure"],
            serde_json::json!({"floor": 2, "age_ms": 250_000})
        );
    }

    #[test]
    fn a_table_aligns_its_columns() {
        let rows = vec![
            vec!["a".to_owned(), "long cell".to_owned()],
            vec!["bbb".into(), "c".into()],
        ];
        assert_eq!(
            table(&["K", "V"], &rows),
            "K    V\na    long cell\nbbb  c\n"
        );
    }
}
