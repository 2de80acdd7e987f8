//! The runtime's own per-stage timings, read in the benchmark: a `metrics` recorder that sums
//! every histogram the runtime records (count and total), installed once for the process. The
//! `shipped` part reads the commit, cut, gap and ship histograms around each run
//! (`leasehold_actors::metrics`: `leasehold_commit_seconds`, `leasehold_segment_cut_seconds`,
//! `leasehold_segment_gap_seconds`, `leasehold_segment_ship_seconds`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// Count and total of one histogram's records.
#[derive(Debug, Default, Clone, Copy)]
pub struct Sum {
    /// Records.
    pub count: u64,
    /// Their total (seconds for timings).
    pub total: f64,
}

impl Sum {
    /// What was recorded between `before` and `self`.
    pub fn since(self, before: Sum) -> Sum {
        Sum {
            count: self.count.saturating_sub(before.count),
            total: self.total - before.total,
        }
    }
}

#[derive(Default)]
struct Cell(Mutex<Sum>);

impl HistogramFn for Cell {
    fn record(&self, value: f64) {
        let mut sum = self.0.lock().unwrap_or_else(|e| e.into_inner());
        sum.count += 1;
        sum.total += value;
    }
}

/// The recorder: one cell per histogram name; counters and gauges are not kept.
#[derive(Default)]
struct Sums(Mutex<HashMap<String, Arc<Cell>>>);

impl Recorder for Sums {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut cells = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // `histogram!` registers at every record: a lookup, no allocation once the name is in.
        if let Some(cell) = cells.get(key.name()) {
            return Histogram::from_arc(cell.clone());
        }
        let cell = cells.entry(key.name().to_string()).or_default();
        Histogram::from_arc(cell.clone())
    }
}

static SUMS: OnceLock<Arc<Sums>> = OnceLock::new();

/// Installs the recorder (once; later calls do nothing). Returns false when another recorder
/// was installed first, and then [`read`] stays at zero.
pub fn install() -> bool {
    let mut installed = false;
    SUMS.get_or_init(|| {
        let sums = Arc::new(Sums::default());
        installed = metrics::set_global_recorder(ArcRecorder(sums.clone())).is_ok();
        sums
    });
    installed
}

/// What has been recorded so far of the histogram `name`.
pub fn read(name: &str) -> Sum {
    let Some(sums) = SUMS.get() else {
        return Sum::default();
    };
    let cells = sums.0.lock().unwrap_or_else(|e| e.into_inner());
    cells
        .get(name)
        .map(|c| *c.0.lock().unwrap_or_else(|e| e.into_inner()))
        .unwrap_or_default()
}

/// `set_global_recorder` takes the recorder by value; this shares it with [`read`].
struct ArcRecorder(Arc<Sums>);

impl Recorder for ArcRecorder {
    fn describe_counter(&self, k: KeyName, u: Option<Unit>, d: SharedString) {
        self.0.describe_counter(k, u, d)
    }
    fn describe_gauge(&self, k: KeyName, u: Option<Unit>, d: SharedString) {
        self.0.describe_gauge(k, u, d)
    }
    fn describe_histogram(&self, k: KeyName, u: Option<Unit>, d: SharedString) {
        self.0.describe_histogram(k, u, d)
    }
    fn register_counter(&self, k: &Key, m: &Metadata<'_>) -> Counter {
        self.0.register_counter(k, m)
    }
    fn register_gauge(&self, k: &Key, m: &Metadata<'_>) -> Gauge {
        self.0.register_gauge(k, m)
    }
    fn register_histogram(&self, k: &Key, m: &Metadata<'_>) -> Histogram {
        self.0.register_histogram(k, m)
    }
}
