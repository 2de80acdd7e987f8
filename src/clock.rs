//! Time as the runtime reads it: monotonic milliseconds behind the [`Clock`] trait (leases,
//! deadlines), and wall-clock milliseconds behind the [`WallClock`] trait (the times stamped on
//! segments and images, which point-in-time restore and retention compare).
//!
//! Nothing in this crate reads the time by itself. Decisions take `now` as an argument; the
//! actors read a `Clock` and a `WallClock`, which tests replace with a [`ManualClock`] they
//! advance by hand.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A source of monotonic time in milliseconds. Values only grow; the origin is arbitrary but the
/// same for every reader of one clock.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Milliseconds since the clock's origin.
    fn now_ms(&self) -> u64;
}

/// Shared handle to a clock.
pub type SharedClock = Arc<dyn Clock>;

/// The host's `CLOCK_MONOTONIC`, in milliseconds since boot.
///
/// It is system-wide: every process on one host reads the same value, which is what lets the
/// SQLite lease store and its holders agree on time without a server.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
        // Both fields are non-negative for CLOCK_MONOTONIC.
        (ts.tv_sec as u64) * 1_000 + (ts.tv_nsec as u64) / 1_000_000
    }
}

/// A clock that moves only when a test says so. Clones share one time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    /// The current time in milliseconds, shared by every clone.
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A manual clock reading `start_ms`.
    pub fn new(start_ms: u64) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(start_ms)),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.now.fetch_add(duration_ms(by), Ordering::SeqCst);
    }

    /// Sets the clock to `ms`, which must not be before the current reading.
    pub fn set(&self, ms: u64) {
        self.now.fetch_max(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// A source of wall-clock time: milliseconds since the Unix epoch. Unlike a [`Clock`] it may
/// jump, and two hosts' wall clocks may disagree; what is stamped with it is forced to rise
/// along the change log (docs/guarantees.md, point-in-time restore by time).
pub trait WallClock: Send + Sync + fmt::Debug + 'static {
    /// Milliseconds since the Unix epoch.
    fn unix_ms(&self) -> u64;
}

/// Shared handle to a wall clock.
pub type SharedWallClock = Arc<dyn WallClock>;

/// The host's wall clock (`SystemTime::now()`), in milliseconds since the Unix epoch; 0 for a
/// clock set before 1970.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemWallClock;

impl WallClock for SystemWallClock {
    fn unix_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, duration_ms)
    }
}

/// A manual clock read as a wall clock: the milliseconds it reads are taken as Unix time.
impl WallClock for ManualClock {
    fn unix_ms(&self) -> u64 {
        self.now_ms()
    }
}

/// A duration in whole milliseconds, saturating at `u64::MAX`.
pub fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_is_monotonic() {
        let a = SystemClock.now_ms();
        let b = SystemClock.now_ms();
        assert!(b >= a);
        assert!(a > 0, "CLOCK_MONOTONIC counts from boot");
    }

    #[test]
    fn the_system_wall_clock_reads_unix_time() {
        let ms = SystemWallClock.unix_ms();
        assert!(ms > 1_600_000_000_000, "after 2020: {ms}");
        assert_eq!(WallClock::unix_ms(&ManualClock::new(42)), 42);
    }

    #[test]
    fn manual_clock_moves_only_forward_and_clones_share_time() {
        let c = ManualClock::new(5_000);
        let d = c.clone();
        c.advance(Duration::from_millis(250));
        assert_eq!(d.now_ms(), 5_250);
        d.set(1_000);
        assert_eq!(c.now_ms(), 5_250, "set never moves time backwards");
    }
}
