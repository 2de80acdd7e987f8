//! [`Tuning`]: the settings of a run that every replica process shares (the driver takes them on
//! its command line and passes them on to each replica it starts, the final checker included):
//! retention, compaction, and the slow backends of [`crate::throttle`].
//!
//! ```text
//!  drill --retain-ms 3000 --compact-segments 32 --store-mib-per-sec 8 --lease-delay-ms 150
//!    └─ drill replica … --retain-ms 3000 --compact-segments 32 --store-mib-per-sec 8 …
//! ```

use std::time::Duration;

use crate::protocol::{COMPACT_SEGMENTS, PUT_LIFETIME, RECONCILE_EVERY, STORE_DEADLINE};

/// Settings every replica of a run shares.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Tuning {
    /// The replicas' `retain` in ms: how long images and segments stay restorable after a newer
    /// image made them unneeded (default: the runtime's, 24 h, so retention deletes nothing in
    /// a run). A short one makes retention delete at every compaction; the end audit then
    /// judges the storage bound and point-in-time restores across the window.
    #[arg(long)]
    pub retain_ms: Option<u64>,
    /// Segments since the newest image that call for a new one (compaction; default
    /// `COMPACT_SEGMENTS`, 64).
    #[arg(long)]
    pub compact_segments: Option<u64>,
    /// Every replica's durable store behind a link of this many MiB/s, shared by its transfers
    /// (`crate::throttle::Link`; default: no limit).
    #[arg(long)]
    pub store_mib_per_sec: Option<f64>,
    /// Every lease-store call of every replica waits this long first (a slow database;
    /// default 0).
    #[arg(long, default_value_t = 0)]
    pub lease_delay_ms: u64,
    /// Every replica's store deletes a bulk delete's keys one call at a time, as a backend
    /// without a bulk delete does (the trait's default; on S3 the drill otherwise uses its
    /// `DeleteObjects`).
    #[arg(long)]
    pub delete_one_by_one: bool,
    /// The replicas' `put_lifetime` in ms (default `PUT_LIFETIME`, or the run's longest put
    /// when that is longer: the driver sets it).
    #[arg(long)]
    pub put_lifetime_ms: Option<u64>,
    /// Every replica's `segments_in_flight` (default: a mixed fleet, see
    /// [`Tuning::segments_in_flight`]).
    #[arg(long)]
    pub segments_in_flight: Option<usize>,
}

impl Tuning {
    /// The `segments_in_flight` of the replica named `name`: the run's, else 4 for a name
    /// ending in an odd digit and the runtime's default (1) otherwise — so every run has
    /// pipelined replicas and one-at-a-time ones, and tenants handed between them.
    pub fn segments_in_flight(&self, name: &str) -> usize {
        let odd = name
            .bytes()
            .last()
            .is_some_and(|b| b.is_ascii_digit() && b % 2 == 1);
        self.segments_in_flight.unwrap_or(if odd { 4 } else { 1 })
    }

    /// The options as a replica's command line takes them.
    pub fn to_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(ms) = self.retain_ms {
            args.extend(["--retain-ms".to_string(), ms.to_string()]);
        }
        if let Some(n) = self.compact_segments {
            args.extend(["--compact-segments".to_string(), n.to_string()]);
        }
        if let Some(rate) = self.store_mib_per_sec {
            args.extend(["--store-mib-per-sec".to_string(), rate.to_string()]);
        }
        if self.delete_one_by_one {
            args.push("--delete-one-by-one".to_string());
        }
        if let Some(n) = self.segments_in_flight {
            args.extend(["--segments-in-flight".to_string(), n.to_string()]);
        }
        if let Some(ms) = self.put_lifetime_ms {
            args.extend(["--put-lifetime-ms".to_string(), ms.to_string()]);
        }
        if self.lease_delay_ms > 0 {
            args.extend([
                "--lease-delay-ms".to_string(),
                self.lease_delay_ms.to_string(),
            ]);
        }
        args
    }

    /// The compaction count of the run.
    pub fn compact_segments(&self) -> u64 {
        self.compact_segments.unwrap_or(COMPACT_SEGMENTS).max(1)
    }

    /// The replicas' `put_lifetime`: the longest a put may land after it was sent.
    pub fn put_lifetime(&self) -> Duration {
        self.put_lifetime_ms
            .map_or(PUT_LIFETIME, Duration::from_millis)
            .max(STORE_DEADLINE)
    }

    /// The runtime's erasure bound T for this run's replicas (docs/guarantees.md, "the erasure
    /// bound"): `put_lifetime` + `reconcile_every` + one sweep of what is left (a listing, a
    /// bulk delete and a `delete_prefix`, a store deadline each, 10 ms a key for a few dozen
    /// keys), and a second of slack for the process hops.
    pub fn erasure_bound(&self) -> Duration {
        self.put_lifetime() + RECONCILE_EVERY + 3 * STORE_DEADLINE + Duration::from_secs(1)
    }

    /// The replicas' `retain`, when the run sets one.
    pub fn retain(&self) -> Option<Duration> {
        self.retain_ms.map(|ms| Duration::from_millis(ms.max(1)))
    }

    /// The longest a put of `bytes` may live past its caller in this run: its deadline
    /// (`store_deadline` grown with its size, `leasehold::deadline::put_deadline`), and as long
    /// again when the link is slower than the runtime's assumed rate.
    pub fn put_allowance(&self, bytes: usize) -> Duration {
        let deadline = leasehold::deadline::put_deadline(STORE_DEADLINE, bytes);
        match self.store_mib_per_sec {
            Some(rate) if rate > 0.0 => {
                let on_link = Duration::from_secs_f64(bytes as f64 / (rate * 1024.0 * 1024.0));
                deadline.max(on_link) + STORE_DEADLINE
            }
            _ => deadline,
        }
    }
}
