//! Metrics: what the runtime records through the `metrics` crate (counters, a gauge,
//! histograms), for whichever recorder the host installs. With none installed each record is
//! one atomic load; the runtime never exports anything itself. [`prometheus`] (feature
//! `prometheus`) installs a recorder and renders its values in Prometheus' text format.
//!
//! Every metric is in [`CATALOG`], with its kind, unit and meaning; docs/operations.md has the
//! same table and what to alert on. Names are `leasehold_*`, with the unit in the name
//! (`_seconds`, `_bytes`, `_total`); no label carries a tenant (the series of a replica stay
//! few, whatever its tenants). A histogram's `_count` counts its events: `leasehold_batch_runs`
//! counts commits, `leasehold_segment_bytes` segments shipped, `leasehold_image_bytes` images
//! published.
//!
//! ```text
//!   the counters of events      Event ──> EventSink::emit ──> on_event (one match, here)
//!   timings, sizes, the gauge   recorded where they are measured: the open, the renewal
//!                               chain, the group commit, a segment's ship, an image's publish,
//!                               a handoff's caller
//! ```

use std::time::Duration;

use metrics::{Unit, counter, gauge, histogram};

use crate::events::Event;

#[cfg(feature = "prometheus")]
pub mod prometheus;

/// What kind of metric an entry of [`CATALOG`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution of recorded values.
    Histogram,
}

/// One metric the runtime records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricInfo {
    /// Its name, `leasehold_…`.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// The unit of its values.
    pub unit: Unit,
    /// What it counts or measures.
    pub help: &'static str,
}

/// Tenants with an actor on this replica (serving, draining, flushing, …).
pub const OPEN_TENANTS: &str = "leasehold_open_tenants";
/// Seconds an open took: acquire, restore of the head and log, ledger, actor.
pub const OPEN_SECONDS: &str = "leasehold_open_seconds";
/// Seconds one renewal round trip (`renew_many` of every lease) took.
pub const RENEW_SECONDS: &str = "leasehold_renew_seconds";
/// Renewal round trips that failed (no lease was extended).
pub const RENEW_FAILURES: &str = "leasehold_renew_failures_total";
/// Leases found lost (at renewal, after a commit, by a refused publish or ship).
pub const LEASES_LOST: &str = "leasehold_leases_lost_total";
/// Runs per committed batch (the group commit); its `_count` is the commits.
pub const BATCH_RUNS: &str = "leasehold_batch_runs";
/// Seconds one group commit took on the tenant's thread: SQLite's commit and, on a tenant with
/// a change log, the capture of its pages.
pub const COMMIT_SECONDS: &str = "leasehold_commit_seconds";
/// Runs refused or rolled back as `Fenced` because the lease no longer held.
pub const FENCED_RUNS: &str = "leasehold_fenced_runs_total";
/// Runs refused with nothing committed: too large for a segment, or an `Async` log too far
/// behind.
pub const RUNS_REFUSED: &str = "leasehold_runs_refused_total";
/// Bytes of each segment shipped; its `_count` is the segments.
pub const SEGMENT_BYTES: &str = "leasehold_segment_bytes";
/// Seconds from a segment's cut to its tip move confirmed (put and compare-and-set).
pub const SEGMENT_SHIP_SECONDS: &str = "leasehold_segment_ship_seconds";
/// Seconds one segment's cut took on the tenant's thread: its batches' pages built into a
/// segment, encoded, summed and compressed.
pub const SEGMENT_CUT_SECONDS: &str = "leasehold_segment_cut_seconds";
/// Seconds from a segment's outcome to the cut of the next: the answered callers coming back,
/// `ship_linger`, their commits; on a tenant with nothing more to write, its idle time too.
pub const SEGMENT_GAP_SECONDS: &str = "leasehold_segment_gap_seconds";
/// Segments not shipped, or whose tip did not move: the tenure ends.
pub const SHIP_FAILURES: &str = "leasehold_ship_failures_total";
/// Bytes of each image published; its `_count` is the images.
pub const IMAGE_BYTES: &str = "leasehold_image_bytes";
/// Seconds from taking an image to its head move confirmed.
pub const IMAGE_PUBLISH_SECONDS: &str = "leasehold_image_publish_seconds";
/// Images not published (the head did not move).
pub const IMAGE_FAILURES: &str = "leasehold_image_failures_total";
/// Handoffs by outcome (`outcome` = `flushed` or `failed`), as their callers heard them.
pub const HANDOFFS: &str = "leasehold_handoffs_total";
/// Seconds from a handoff's call to its answer.
pub const HANDOFF_SECONDS: &str = "leasehold_handoff_seconds";
/// Handoffs that gave up waiting for admitted work (the tenant serves again).
pub const DRAIN_TIMEOUTS: &str = "leasehold_drain_timeouts_total";
/// Tenants erased (`forget`).
pub const FORGETS: &str = "leasehold_forgets_total";
/// Sweeps of dead epochs and of retention that finished.
pub const SWEEPS: &str = "leasehold_sweeps_total";
/// Objects those sweeps deleted.
pub const SWEPT_OBJECTS: &str = "leasehold_swept_objects_total";
/// Sweeps that failed (the next open or image tries again).
pub const SWEEP_FAILURES: &str = "leasehold_sweep_failures_total";
/// Objects the reconciliation took back: puts of unknown outcome nothing names, orphans.
pub const TAKEN_BACK_OBJECTS: &str = "leasehold_taken_back_objects_total";
/// Tenants passivated, by reason (`reason` = `idle` or `evicted`).
pub const PASSIVATIONS: &str = "leasehold_passivations_total";

const fn metric(
    name: &'static str,
    kind: MetricKind,
    unit: Unit,
    help: &'static str,
) -> MetricInfo {
    MetricInfo {
        name,
        kind,
        unit,
        help,
    }
}

use MetricKind::{Counter, Gauge, Histogram};

/// Every metric the runtime records.
pub const CATALOG: &[MetricInfo] = &[
    metric(
        OPEN_TENANTS,
        Gauge,
        Unit::Count,
        "tenants with an actor on this replica",
    ),
    metric(
        OPEN_SECONDS,
        Histogram,
        Unit::Seconds,
        "an open: acquire, restore, ledger, actor",
    ),
    metric(
        RENEW_SECONDS,
        Histogram,
        Unit::Seconds,
        "one renewal round trip of every lease",
    ),
    metric(
        RENEW_FAILURES,
        Counter,
        Unit::Count,
        "renewal round trips that failed",
    ),
    metric(LEASES_LOST, Counter, Unit::Count, "leases found lost"),
    metric(
        BATCH_RUNS,
        Histogram,
        Unit::Count,
        "runs per committed batch (_count: commits)",
    ),
    metric(
        COMMIT_SECONDS,
        Histogram,
        Unit::Seconds,
        "a group commit, its pages captured",
    ),
    metric(
        FENCED_RUNS,
        Counter,
        Unit::Count,
        "runs refused or rolled back as Fenced",
    ),
    metric(
        RUNS_REFUSED,
        Counter,
        Unit::Count,
        "runs refused: too large, or the log behind",
    ),
    metric(
        SEGMENT_BYTES,
        Histogram,
        Unit::Bytes,
        "bytes of each segment shipped",
    ),
    metric(
        SEGMENT_SHIP_SECONDS,
        Histogram,
        Unit::Seconds,
        "a segment's put and tip move",
    ),
    metric(
        SEGMENT_CUT_SECONDS,
        Histogram,
        Unit::Seconds,
        "a segment's cut: built, encoded, compressed",
    ),
    metric(
        SEGMENT_GAP_SECONDS,
        Histogram,
        Unit::Seconds,
        "a segment's outcome to the next cut",
    ),
    metric(
        SHIP_FAILURES,
        Counter,
        Unit::Count,
        "segments not shipped; the tenure ends",
    ),
    metric(
        IMAGE_BYTES,
        Histogram,
        Unit::Bytes,
        "bytes of each image published",
    ),
    metric(
        IMAGE_PUBLISH_SECONDS,
        Histogram,
        Unit::Seconds,
        "an image's copy, upload, head move",
    ),
    metric(IMAGE_FAILURES, Counter, Unit::Count, "images not published"),
    metric(
        HANDOFFS,
        Counter,
        Unit::Count,
        "handoffs by outcome (flushed, failed)",
    ),
    metric(
        HANDOFF_SECONDS,
        Histogram,
        Unit::Seconds,
        "a handoff, call to answer",
    ),
    metric(
        DRAIN_TIMEOUTS,
        Counter,
        Unit::Count,
        "handoffs that timed out draining",
    ),
    metric(FORGETS, Counter, Unit::Count, "tenants erased"),
    metric(
        SWEEPS,
        Counter,
        Unit::Count,
        "sweeps of dead epochs and retention",
    ),
    metric(
        SWEPT_OBJECTS,
        Counter,
        Unit::Count,
        "objects the sweeps deleted",
    ),
    metric(SWEEP_FAILURES, Counter, Unit::Count, "sweeps that failed"),
    metric(
        TAKEN_BACK_OBJECTS,
        Counter,
        Unit::Count,
        "objects the reconciliation took back",
    ),
    metric(
        PASSIVATIONS,
        Counter,
        Unit::Count,
        "tenants passivated, by reason (idle, evicted)",
    ),
];

/// Gives the installed recorder every metric's unit and meaning (a recorder installed later
/// needs this called again). [`prometheus::PrometheusMetrics::install`] calls it.
pub fn describe() {
    for m in CATALOG {
        match m.kind {
            Counter => metrics::describe_counter!(m.name, m.unit, m.help),
            Gauge => metrics::describe_gauge!(m.name, m.unit, m.help),
            Histogram => metrics::describe_histogram!(m.name, m.unit, m.help),
        }
    }
}

/// The counters an event moves: every event goes through here once, as it is emitted.
pub(crate) fn on_event(event: &Event) {
    match event {
        Event::Lost { .. } => counter!(LEASES_LOST).increment(1),
        Event::RenewFailed { .. } => counter!(RENEW_FAILURES).increment(1),
        Event::SnapshotFailed { .. } => counter!(IMAGE_FAILURES).increment(1),
        Event::ShipFailed { .. } => counter!(SHIP_FAILURES).increment(1),
        Event::BatchRefused { .. } => counter!(RUNS_REFUSED).increment(1),
        Event::DrainTimeout { .. } => counter!(DRAIN_TIMEOUTS).increment(1),
        Event::Forgotten { .. } => counter!(FORGETS).increment(1),
        Event::Swept { objects, .. } => {
            counter!(SWEEPS).increment(1);
            counter!(SWEPT_OBJECTS).increment(*objects as u64);
        }
        Event::SweepFailed { .. } => counter!(SWEEP_FAILURES).increment(1),
        Event::TakenBack { objects, .. } => counter!(TAKEN_BACK_OBJECTS).increment(*objects as u64),
        Event::Passivated { reason, .. } => {
            counter!(PASSIVATIONS, "reason" => reason.as_str()).increment(1)
        }
        _ => {}
    }
}

/// One tenant with an actor on this replica, for [`OPEN_TENANTS`]: counted while it lives, so
/// the gauge cannot drift whichever way the actor goes (a final state, a stopped arbiter).
#[derive(Debug)]
pub(crate) struct OpenTenant(());

impl OpenTenant {
    /// Counts one more open tenant until dropped.
    pub(crate) fn new() -> Self {
        gauge!(OPEN_TENANTS).increment(1.0);
        Self(())
    }
}

impl Drop for OpenTenant {
    fn drop(&mut self) {
        gauge!(OPEN_TENANTS).decrement(1.0);
    }
}

/// An open that succeeded, after `took`.
pub(crate) fn opened(took: Duration) {
    histogram!(OPEN_SECONDS).record(took);
}

/// A renewal round trip that came back (renewed or lost, any lease) after `took`.
pub(crate) fn renewed(took: Duration) {
    histogram!(RENEW_SECONDS).record(took);
}

/// A batch of `runs` runs committed locally.
pub(crate) fn committed(runs: usize) {
    histogram!(BATCH_RUNS).record(runs as f64);
}

/// `runs` runs refused or rolled back as `Fenced` by the runtime's lease check.
pub(crate) fn fenced(runs: usize) {
    counter!(FENCED_RUNS).increment(runs as u64);
}

/// A segment of `bytes` bytes shipped (its tip moved) `took` after its cut.
pub(crate) fn segment_shipped(bytes: u64, took: Duration) {
    histogram!(SEGMENT_BYTES).record(bytes as f64);
    histogram!(SEGMENT_SHIP_SECONDS).record(took);
}

/// A group commit (and the capture of its pages) took `took`.
pub(crate) fn commit_took(took: Duration) {
    histogram!(COMMIT_SECONDS).record(took);
}

/// A segment was cut in `took`, `gap` after the previous segment's outcome (none for a
/// tenure's first).
pub(crate) fn segment_cut(took: Duration, gap: Option<Duration>) {
    histogram!(SEGMENT_CUT_SECONDS).record(took);
    if let Some(gap) = gap {
        histogram!(SEGMENT_GAP_SECONDS).record(gap);
    }
}

/// An image of `bytes` bytes published (its head moved) `took` after it was begun.
pub(crate) fn image_published(bytes: u64, took: Duration) {
    histogram!(IMAGE_BYTES).record(bytes as f64);
    histogram!(IMAGE_PUBLISH_SECONDS).record(took);
}

/// A handoff whose caller heard `flushed` (or a failure) after `took`.
pub(crate) fn handed_off(flushed: bool, took: Duration) {
    let outcome = if flushed { "flushed" } else { "failed" };
    counter!(HANDOFFS, "outcome" => outcome).increment(1);
    histogram!(HANDOFF_SECONDS).record(took);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/operations.md's table names every metric of the catalog: the docs cannot forget one.
    #[test]
    fn the_operations_guide_lists_every_metric() {
        let guide = include_str!("../../docs/operations.md");
        for m in CATALOG {
            assert!(
                guide.contains(&format!("| `{}` |", m.name)),
                "docs/operations.md has no row for {}",
                m.name
            );
        }
    }

    #[test]
    fn names_carry_their_unit_and_are_distinct() {
        let mut names: Vec<_> = CATALOG.iter().map(|m| m.name).collect();
        for m in CATALOG {
            assert!(m.name.starts_with("leasehold_"), "{}", m.name);
            match (m.kind, m.unit) {
                (MetricKind::Counter, _) => assert!(m.name.ends_with("_total"), "{}", m.name),
                (_, Unit::Seconds) => assert!(m.name.ends_with("_seconds"), "{}", m.name),
                (_, Unit::Bytes) => assert!(m.name.ends_with("_bytes"), "{}", m.name),
                _ => {}
            }
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CATALOG.len());
    }
}
