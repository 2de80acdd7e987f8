//! The runtime's metrics in Prometheus' text format (feature `prometheus`), for a service's
//! `/metrics` route: [`PrometheusMetrics::install`] once at start, [`PrometheusMetrics::render`]
//! at every scrape. Serving the text is the service's (leasehold opens no port).
//!
//! Histograms render as Prometheus histograms (buckets that add up across replicas), not as
//! summaries: `_seconds` from 1 ms to 2 min, `_bytes` from 256 B to 4 GiB by fours,
//! `leasehold_batch_runs` from 1 to 1,024 by twos.

use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use leasehold::Error;

/// The buckets of every `_seconds` histogram.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// The buckets of every `_bytes` histogram (256 B to 4 GiB, by fours).
pub const BYTES_BUCKETS: &[f64] = &[
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
    268_435_456.0,
    1_073_741_824.0,
    4_294_967_296.0,
];

/// The buckets of `leasehold_batch_runs`.
pub const RUNS_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// A Prometheus recorder's handle: renders the current values of every metric.
#[derive(Debug, Clone)]
pub struct PrometheusMetrics {
    /// The installed (or handed out) recorder's view.
    handle: PrometheusHandle,
}

fn refused(e: impl std::fmt::Display) -> Error {
    Error::InvalidOption {
        name: "metrics recorder",
        reason: e.to_string(),
    }
}

/// A builder with the runtime's buckets.
fn builder() -> Result<PrometheusBuilder, Error> {
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_bytes".into()), BYTES_BUCKETS))
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(super::BATCH_RUNS.into()), RUNS_BUCKETS)
        });
    builder.map_err(refused)
}

impl PrometheusMetrics {
    /// Installs a Prometheus recorder as the process's metrics recorder and describes every
    /// metric of the [catalog](super::CATALOG). Once per process: a second install (or one after
    /// another recorder) is refused with [`Error::InvalidOption`] (`metrics recorder`).
    pub fn install() -> Result<Self, Error> {
        let handle = builder()?.install_recorder().map_err(refused)?;
        super::describe();
        Ok(Self { handle })
    }

    /// A recorder the caller installs itself (beside others, behind a switch), and its handle.
    /// Call [`super::describe`] once it is installed.
    pub fn recorder() -> Result<(PrometheusRecorder, Self), Error> {
        let recorder = builder()?.build_recorder();
        let handle = recorder.handle();
        Ok((recorder, Self { handle }))
    }

    /// The current value of every metric recorded so far, in Prometheus' text format
    /// (`text/plain; version=0.0.4`). Runs the recorder's upkeep first, so histograms are
    /// current.
    pub fn render(&self) -> String {
        self.handle.run_upkeep();
        self.handle.render()
    }

    /// The recorder's handle itself (protobuf rendering, upkeep on a timer of the host's).
    pub fn handle(&self) -> &PrometheusHandle {
        &self.handle
    }
}
