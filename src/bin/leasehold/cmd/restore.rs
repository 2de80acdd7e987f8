//! `leasehold restore`: a tenant's state written to a new plain SQLite file — its latest state
//! (`leasehold::log::restore_latest`: the head image and the log up to the tip, as an open
//! restores it) or its state at a time or log position within the retention window
//! (`leasehold::log::restore_to`) — then checked with `PRAGMA integrity_check`. The file is
//! private (0600), never written over an existing one, and only linked into place once complete.

use std::path::Path;

use leasehold::LeaseKey;
use leasehold::durable::DurableStore;
use leasehold::layout::{ImageRef, LogPos};
use leasehold::lease::LeaseStore;
use leasehold::log::{LogError, Target, restore_latest, restore_to};
use serde::Serialize;

use super::{Outcome, integrity_check};
use crate::exit::{Exit, Failure};
use crate::report::{image_name, pos_name};
use crate::time::{bytes, format_rfc3339};

/// The `--json` document of `restore`.
#[derive(Debug, Serialize)]
pub struct RestoreReport {
    /// The tenant.
    pub key: String,
    /// The file written.
    pub to: String,
    /// The target asked for: `latest`, a position `e3:41`, or a time (RFC 3339).
    pub target: String,
    /// The log position the file holds (`null`: a tenant without a log).
    pub position: Option<LogPos>,
    /// The image it started from (`null`: an empty database).
    pub image: Option<ImageRef>,
    /// Segments applied on top of the image.
    pub segments: usize,
    /// The file's size in bytes.
    pub size: u64,
    /// Its SHA-256.
    pub sha256: String,
    /// What `PRAGMA integrity_check` said (`ok`).
    pub integrity_check: String,
}

/// Restores `key` into `to`; the destination was checked before the stores were opened.
pub async fn run(
    leases: &dyn LeaseStore,
    durable: &dyn DurableStore,
    key: &LeaseKey,
    to: &Path,
    at: Option<Target>,
) -> Result<Outcome, Failure> {
    let (target, position, image, segments, size, sha256) = match at {
        Some(target) => {
            let r = restore_to(durable, leases, key, target, to)
                .await
                .map_err(|e| log_failure(key, e))?;
            (
                target_name(target),
                Some(r.position),
                r.image,
                r.segments,
                r.size,
                r.sha256,
            )
        }
        None => {
            let r = restore_latest(durable, leases, key, to)
                .await
                .map_err(|e| log_failure(key, e))?;
            (
                "latest".to_owned(),
                r.position,
                r.image,
                r.segments,
                r.size,
                r.sha256,
            )
        }
    };
    let checked = tokio::task::spawn_blocking({
        let to = to.to_path_buf();
        move || integrity_check(&to)
    })
    .await
    .map_err(|e| Failure::verify_failed(format!("the integrity check's task failed: {e}")))?;
    let integrity = checked.unwrap_or_else(|e| format!("cannot be checked: {e}"));
    let report = RestoreReport {
        key: key.to_string(),
        to: to.display().to_string(),
        target,
        position,
        image,
        segments,
        size,
        sha256,
        integrity_check: integrity,
    };
    let exit = if report.integrity_check == "ok" {
        Exit::Ok
    } else {
        Exit::VerifyFailed
    };
    let human = human(&report);
    Outcome::new(&report, human, exit)
}

fn target_name(target: Target) -> String {
    match target {
        Target::Position(p) => pos_name(p),
        Target::Time { unix_ms } => format_rfc3339(unix_ms),
    }
}

/// A restore's failure: a target the log does not hold is not found, a bad destination a usage
/// error, a broken chain or segment a failed check.
fn log_failure(key: &LeaseKey, e: LogError) -> Failure {
    match e {
        LogError::OutsideRetention { .. } => {
            let mut f = Failure::not_found(format!("{key}: {e}"));
            f.code = "LEASEHOLD_CLI_OUTSIDE_RETENTION".into();
            f
        }
        LogError::Destination { .. } => Failure::usage(e.to_string()),
        LogError::Corrupt { .. } | LogError::OutOfChain { .. } => {
            Failure::verify_failed(format!("{key}: {e}"))
        }
        other => Failure::from(leasehold::Error::from(other)),
    }
}

/// The text of a restore's report.
fn human(r: &RestoreReport) -> String {
    let from = match (&r.image, r.segments) {
        (Some(image), 0) => format!("image {}", image_name(image)),
        (Some(image), n) => format!("image {} + {n} segments", image_name(image)),
        (None, n) => format!("an empty database + {n} segments"),
    };
    let at = r
        .position
        .map_or("no log".into(), |p| format!("position {}", pos_name(p)));
    format!(
        "restored {} ({}) to {}: {at}, from {from}; {}, sha256 {}; integrity_check: {}\n",
        r.key,
        r.target,
        r.to,
        bytes(r.size),
        r.sha256,
        r.integrity_check
    )
}
