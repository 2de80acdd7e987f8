//! What the process holds, read from `/proc/self` (Linux): open descriptors, resident memory
//! and its peak; and its descriptor limit (`RLIMIT_NOFILE`), raised when a part needs more.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Open descriptors of this process.
pub fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// A field of `/proc/self/status` in KiB (`VmRSS`, `VmHWM`).
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Resident memory now, in bytes.
pub fn rss() -> u64 {
    status_kib("VmRSS") * 1024
}

/// The peak of resident memory since the last [`reset_peak_rss`] (or the start), in bytes.
pub fn peak_rss() -> u64 {
    status_kib("VmHWM") * 1024
}

/// Starts the peak of resident memory over from now (`/proc/self/clear_refs`, 5).
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The descriptor limit: (soft, hard); `None` is unlimited.
pub fn fd_limits() -> (Option<u64>, Option<u64>) {
    let l = getrlimit(Resource::Nofile);
    (l.current, l.maximum)
}

/// Raises the soft descriptor limit to at least `want` when it is lower: to the hard limit,
/// and past it when the process may (root). Returns the soft limit in force afterwards.
pub fn raise_fd_limit(want: u64) -> u64 {
    let (soft, hard) = fd_limits();
    let soft = soft.unwrap_or(u64::MAX);
    if soft >= want {
        return soft;
    }
    let hard_now = hard.unwrap_or(u64::MAX);
    if hard_now < want {
        // Needs CAP_SYS_RESOURCE; refused otherwise, and the hard limit stays.
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(want),
                maximum: Some(want),
            },
        );
    }
    let (_, hard) = fd_limits();
    let target = want.min(hard.unwrap_or(u64::MAX));
    let _ = setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(target),
            maximum: hard,
        },
    );
    fd_limits().0.unwrap_or(u64::MAX)
}

/// Samples the descriptor count every 50 ms on a thread of its own, keeping the highest.
pub struct FdPeak {
    /// The highest count seen.
    peak: Arc<AtomicUsize>,
    /// Tells the thread to stop.
    stop: Arc<AtomicBool>,
}

impl FdPeak {
    /// Starts sampling.
    pub fn start() -> Self {
        let peak = Arc::new(AtomicUsize::new(fds()));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(fds(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Self { peak, stop }
    }

    /// The highest count seen so far.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed).max(fds())
    }
}

impl Drop for FdPeak {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Bytes as MiB, for printing.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The signed difference `after − before`, per `n`.
pub fn per(after: u64, before: u64, n: usize) -> f64 {
    (after as f64 - before as f64) / n.max(1) as f64
}
