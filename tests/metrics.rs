//! Metrics (docs/operations.md, "Metrics and what to alert on"): a workload that goes through
//! every path the catalog names — opens, runs, a run too large, segments, images, renewals, a
//! drain timeout, handoffs, an outage of each store, a put of unknown outcome taken back, a
//! lapsed lease, a forget, sweeps — moves every metric of `leasehold_actors::metrics::CATALOG`,
//! read back as Prometheus text through `PrometheusMetrics` (feature `prometheus`).
//!
//! One test in its own binary: a metrics recorder is installed once per process.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use leasehold::testkit::{LatePuts, LeaseOp};
use leasehold_actors::metrics::prometheus::PrometheusMetrics;
use leasehold_actors::metrics::{CATALOG, MetricKind, OPEN_TENANTS};
use leasehold_actors::{Event, MIN_SEGMENT_LIMIT};

/// Longer than every deadline of a put and of the move that names it (see tests/reconcile.rs).
const PAST_DEADLINES: Duration = Duration::from_secs(120);

/// The value of each series in `text`, by name with its labels (`name{a="b"}`).
fn series(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// The sum of every series of metric `name` (all its labels), if any.
fn total(text: &str, name: &str) -> Option<f64> {
    let found: Vec<f64> = series(text)
        .into_iter()
        .filter(|(s, _)| s == name || s.starts_with(&format!("{name}{{")))
        .map(|(_, v)| v)
        .collect();
    (!found.is_empty()).then(|| found.iter().sum())
}

/// How far metric `m` moved: a counter's or gauge's value, a histogram's count.
fn moved(text: &str, name: &str, kind: MetricKind) -> f64 {
    let name = match kind {
        MetricKind::Histogram => format!("{name}_count"),
        _ => name.to_string(),
    };
    total(text, &name).unwrap_or(0.0)
}

#[actix_rt::test]
async fn every_metric_of_the_catalog_moves_under_a_workload() {
    let metrics = PrometheusMetrics::install().unwrap();
    let mut seen: BTreeMap<&str, f64> = BTreeMap::new();
    let mut look = |what: &str| {
        let text = metrics.render();
        for m in CATALOG {
            let v = moved(&text, m.name, m.kind);
            let best = seen.entry(m.name).or_insert(0.0);
            *best = best.max(v);
        }
        let _ = what;
        text
    };
    let fleet = Fleet::with_store_clock().await;
    let wall = leasehold::ManualClock::new(1_700_000_000_000);
    let a = fleet.replica_with("a", "a", |c| {
        c.segment_limit = MIN_SEGMENT_LIMIT;
        c.drain_timeout = Duration::from_millis(300);
        // Retention deletes what the newest image made unneeded a second after (the wall
        // clock the test moves).
        c.retain = Duration::from_secs(1);
        c.wall_clock = std::sync::Arc::new(wall.clone());
    });

    // Opens, runs, segments, an image (and the retention sweep after it), a renewal.
    let t = a.open().await;
    let text = look("open");
    assert_eq!(total(&text, OPEN_TENANTS), Some(1.0), "{text}");
    insert(&t, "k1").await.unwrap();
    insert(&t, "k2").await.unwrap();
    t.snapshot().await.unwrap();
    a.sup.renew_now().await.unwrap();
    wall.advance(Duration::from_secs(2));
    insert(&t, "k2b").await.unwrap();
    t.snapshot().await.unwrap();
    eventually(
        3_000,
        "a retention sweep deleting the first image",
        || async {
            a.log
                .any(|e| matches!(e, Event::Swept { objects, .. } if *objects > 0))
        },
    )
    .await;

    // A run too large for one segment is refused, nothing of it committed.
    let too_large = t
        .run(|l| {
            l.execute("CREATE TABLE IF NOT EXISTS blobs (b BLOB)", [])?;
            l.execute("INSERT INTO blobs VALUES (zeroblob(200000))", [])?;
            Ok(())
        })
        .await;
    assert!(
        matches!(too_large, Err(leasehold::Error::BatchTooLarge { .. })),
        "{too_large:?}"
    );

    // A retention sweep that fails: its read of the lease record meets an outage.
    let leases = fleet.leases.clone();
    fleet.leases.before_next(LeaseOp::Read, move || async move {
        leases.set_down(true);
    });
    insert(&t, "k3").await.unwrap();
    t.snapshot().await.unwrap();
    eventually(3_000, "the failed retention sweep", || async {
        a.log.any(|e| matches!(e, Event::SweepFailed { .. }))
    })
    .await;
    fleet.leases.set_down(false);

    // A handoff that times out draining (a ticket is held), then one that flushes.
    let ticket = t.admit().await.unwrap();
    assert!(t.handoff().await.is_err(), "the drain timed out");
    drop(ticket);
    t.handoff().await.unwrap();
    look("handoffs");

    // A tenant idle for `passivate_after` (its default, 60 s: renewed on the way) is passivated.
    let idle = a.open().await;
    for _ in 0..16 {
        fleet.advance(Duration::from_secs(4));
        a.sup.renew_now().await.unwrap();
    }
    assert_eq!(a.sup.passivate_idle_now().await.unwrap(), 1);
    until_status(&idle, leasehold_actors::TenantStatus::Passivated).await;

    // An image whose put timed out and landed later: the image fails, the reconciliation takes
    // it back. Then the lease has lapsed: a run is fenced, the renewal finds the lease lost.
    let t = a.open().await;
    insert(&t, "k4").await.unwrap();
    fleet.durable.late_puts(LatePuts::every(is_image));
    assert!(t.snapshot().await.is_err(), "the image put timed out");
    fleet.durable.clear_late_puts();
    fleet.durable.land_late_puts().await.unwrap();
    eventually(3_000, "the late image put to land", || async {
        fleet.durable.late_puts_held() == 0
    })
    .await;
    fleet.advance(PAST_DEADLINES);
    let report = a.sup.reconcile_now().await.unwrap();
    assert!(
        a.log.any(|e| matches!(e, Event::TakenBack { .. })),
        "the lone image is taken back: {report:?}"
    );
    assert!(insert(&t, "k5").await.unwrap_err().is_fenced());
    a.sup.renew_now().await.unwrap();

    // A renewal that meets an outage; a forget; a segment that cannot be shipped.
    let t2 = a.sup.open(&org(), &tenant2()).await.unwrap();
    fleet.leases.set_down(true);
    assert!(a.sup.renew_now().await.is_err());
    fleet.leases.set_down(false);
    insert(&t2, "j1").await.unwrap();
    t2.forget().await.unwrap();
    let t2 = a.sup.open(&org(), &tenant2()).await.unwrap();
    fleet.durable.set_down(true);
    assert!(
        insert(&t2, "j2").await.is_err(),
        "the segment was not shipped"
    );
    fleet.durable.set_down(false);
    a.sup.close().await.unwrap();

    let text = look("end");
    let still: Vec<_> = CATALOG
        .iter()
        .filter(|m| seen.get(m.name).copied().unwrap_or(0.0) <= 0.0)
        .map(|m| m.name)
        .collect();
    assert!(
        still.is_empty(),
        "metrics the workload did not move: {still:?}\n{text}"
    );
    for m in CATALOG {
        assert!(
            text.contains(&format!("# HELP {} ", m.name)),
            "{} is not described\n{text}",
            m.name
        );
    }
    // Every tenant actor is gone after close: the gauge is back to zero.
    eventually(
        3_000,
        "the open tenants gauge to fall back to 0",
        || async { total(&metrics.render(), OPEN_TENANTS) == Some(0.0) },
    )
    .await;
}
