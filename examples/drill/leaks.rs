//! What a replica process holds, read from `/proc/self`: its threads (`/proc/self/task`) and its
//! open file descriptors (`/proc/self/fd`). A replica counts both before its supervisor starts
//! and again after its close and the drop of the supervisor; the checker's `leak` rule compares
//! them (docs/testing.md, the process drill).
//!
//! Not counted: tokio's blocking-pool threads (`tokio-runtime-w…`, `tokio-rt-worker`), which idle
//! for ten seconds before they exit, whoever started them. Live tenant actors are reported by the runtime only
//! once it counts them: [`live_tenant_actors`] is the hook.

use std::time::Duration;

use crate::protocol::now_ms;

/// Thread names of tokio's blocking pool (`comm` keeps 15 bytes; the name changed across tokio
/// versions).
const BLOCKING_POOL: [&str; 2] = ["tokio-runtime-w", "tokio-rt-worker"];

/// How long a closed replica waits for its threads and descriptors to go back.
pub const SETTLE: Duration = Duration::from_secs(3);

/// The names of this process's threads, blocking-pool threads left out.
pub fn threads() -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .filter_map(|t| t.ok())
        .map(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .map(|name| name.trim_end().to_string())
                .unwrap_or_default()
        })
        .filter(|name| !BLOCKING_POOL.iter().any(|pool| name.starts_with(pool)))
        .collect()
}

/// How many file descriptors this process has open.
pub fn fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// How many tenures of this process are alive (`leasehold_actors::live_tenants`): after a close
/// and the drop of the supervisor, none may be (the checker's `leak` rule).
pub fn live_tenant_actors() -> Option<u64> {
    u64::try_from(leasehold_actors::live_tenants()).ok()
}

/// The counts before a supervisor starts.
#[derive(Debug, Clone)]
pub struct Baseline {
    /// Thread names.
    threads: Vec<String>,
    /// Open descriptors.
    fds: u64,
}

impl Baseline {
    /// Counts now.
    pub fn now() -> Self {
        Self {
            threads: threads(),
            fds: fds(),
        }
    }

    /// Waits (at most [`SETTLE`], polling) until threads, descriptors and live tenant actors are
    /// back to the baseline, and reports what is left either way.
    pub async fn report_after_drop(&self, live_actors: impl Fn() -> Option<u64>) -> Resources {
        let give_up = now_ms() + leasehold::clock::duration_ms(SETTLE);
        loop {
            let (names, open, actors) = (threads(), fds(), live_actors());
            let back = names.len() <= self.threads.len()
                && open <= self.fds
                && actors.is_none_or(|n| n == 0);
            if back || now_ms() >= give_up {
                let mut before = self.threads.clone();
                let new_threads = names
                    .iter()
                    .filter(|n| match before.iter().position(|b| b == *n) {
                        Some(i) => {
                            before.swap_remove(i);
                            false
                        }
                        None => true,
                    })
                    .cloned()
                    .collect();
                return Resources {
                    threads_before: self.threads.len() as u64,
                    threads_after: names.len() as u64,
                    new_threads,
                    fds_before: self.fds,
                    fds_after: open,
                    live_tenant_actors: actors,
                };
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What a replica process reported about its resources after its close and drop.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Resources {
    /// Threads before its supervisor started.
    pub threads_before: u64,
    /// Threads after the close and drop (tokio's idle blocking-pool threads not counted).
    pub threads_after: u64,
    /// Names of the threads counted after that were not there before.
    pub new_threads: Vec<String>,
    /// Open file descriptors before its supervisor started.
    pub fds_before: u64,
    /// Open file descriptors after the close and drop.
    pub fds_after: u64,
    /// Tenant actors still alive, when the runtime can tell (it cannot yet: `None`).
    pub live_tenant_actors: Option<u64>,
}

impl Resources {
    /// Whether anything is left over.
    pub fn leaked(&self) -> bool {
        self.threads_after > self.threads_before
            || self.fds_after > self.fds_before
            || self.live_tenant_actors.is_some_and(|n| n > 0)
    }
}
