//! Time-boxed measurements: a figure is as many acknowledged operations as fit in a fixed
//! span of real time (so a slow configuration costs no more time than a fast one), with the
//! latency of each when there is one caller.

use std::time::{Duration, Instant};

/// What one measurement saw.
#[derive(Clone)]
pub struct Figure {
    /// Operations acknowledged.
    pub ops: usize,
    /// Real time from the first call to the last answer.
    pub took: Duration,
    /// Latencies of the single caller's calls, sorted (empty for many callers).
    pub latencies: Vec<Duration>,
}

impl Figure {
    /// Operations per second.
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.took.as_secs_f64().max(1e-9)
    }

    /// The `p` quantile of the latencies (`None` without any).
    pub fn quantile(&self, p: f64) -> Option<Duration> {
        (!self.latencies.is_empty()).then(|| quantile(&self.latencies, p))
    }
}

/// The `p` quantile of sorted, non-empty `sorted`.
pub fn quantile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Calls `op(i)` for `i = 0, 1, …` until `span` has passed, timing each call.
pub fn sequential(span: Duration, mut op: impl FnMut(usize)) -> Figure {
    let started = Instant::now();
    let mut latencies = Vec::new();
    while started.elapsed() < span {
        let call = Instant::now();
        op(latencies.len());
        latencies.push(call.elapsed());
    }
    finish(started, latencies)
}

/// The async form of [`sequential`].
pub async fn sequential_async<F, Fut>(span: Duration, mut op: F) -> Figure
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let started = Instant::now();
    let mut latencies = Vec::new();
    while started.elapsed() < span {
        let call = Instant::now();
        op(latencies.len()).await;
        latencies.push(call.elapsed());
    }
    finish(started, latencies)
}

fn finish(started: Instant, mut latencies: Vec<Duration>) -> Figure {
    let took = started.elapsed();
    latencies.sort();
    Figure {
        ops: latencies.len(),
        took,
        latencies,
    }
}

/// Milliseconds of `d`, for printing.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `"1.23 ms"`, or `"-"` for `None`.
pub fn ms_or_dash(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".into(), |d| format!("{:.2} ms", ms(d)))
}

/// `callers` tasks, each calling `op(caller, i)` for `i = 0, 1, …` until `span` has passed.
pub async fn concurrent_async<F, Fut>(callers: usize, span: Duration, op: F) -> Figure
where
    F: Fn(usize, usize) -> Fut,
    Fut: std::future::Future<Output = ()> + 'static,
{
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let done = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let op = &op;
    let tasks = (0..callers).map(|c| {
        let done = done.clone();
        async move {
            let mut i = 0;
            while started.elapsed() < span {
                op(c, i).await;
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
        }
    });
    futures::future::join_all(tasks).await;
    Figure {
        ops: done.load(Ordering::Relaxed),
        took: started.elapsed(),
        latencies: Vec::new(),
    }
}
