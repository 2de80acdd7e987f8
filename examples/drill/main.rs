//! # The process drill (issue #5, part 1)
//!
//! Jepsen-style: real replica processes sharing one lease store and one durable store (a SQLite
//! lease file and a durable directory; or, with `--backend postgres-s3`, a PostgreSQL table and
//! an S3 bucket prefix), clients writing events with unique ids through whichever replica owns
//! each tenant (and, with `--large-batch-mib`, batches of MiBs), faults mixed by a seeded
//! schedule (handoffs, SIGKILL under load and mid-upload, SIGSTOP past the lease, forget while
//! the owner is stopped, failing and stalling stores, restarts, damaged and missing segments,
//! snapshot bursts), and a checker that judges the recorded history against what the stores
//! hold, what point-in-time restores return and what a fresh replica reads at the end. The
//! replicas run on the runtime's default durability, `Shipped` (RPO 0: the checker allows no
//! acknowledged write lost), or on `--durability async|images`, whose crash tails the checker
//! bounds; optionally with a short `retain`, a slow durable store or a slow lease store
//! (`tuning`).
//!
//! ```text
//! cargo run --example drill -- --seconds 60                       # random seed, printed
//! cargo run --example drill -- --seed 7 --seconds 20 --replicas 3
//! cargo run --example drill -- --durability async --async-every-ms 500 --seconds 10
//! cargo run --example drill -- --faults drop-segment --seconds 10  # one fault kind only
//! cargo run --example drill -- --retain-ms 6000 --faults handoff,snapshot-burst --seconds 25
//! cargo run --example drill -- --large-batch-mib 12 --store-mib-per-sec 10 --faults handoff
//! cargo run --example drill -- --seed 7 --break ack-before-tip --faults kill-upload  # must fail
//! cargo run --example drill -- --seed 7 --break skip-final-image --durability images  # must fail
//! scripts/with-servers.sh cargo run --example drill --features "testkit postgres s3" -- \
//!     --backend postgres-s3 --replicas 2 --faults handoff --seconds 10
//! ```
//!
//! One binary, two roles: `drill [options]` is the driver; it starts `drill replica …` (this
//! same executable) once per replica and talks to each over a line protocol on stdin/stdout.
//!
//! ## Layout
//! - `protocol` — requests, replies and reported events; the shared lease timings; the
//!   durability modes.
//! - `backend` — the stores of a run (`sqlite-dir`, `postgres-s3`) and what their clocks mean.
//! - `tuning` — retention, compaction and slow backends every replica of a run shares;
//!   `throttle` — the slow link of the durable store and the slow lease store.
//! - `acquire_times` — a lease store wrapper noting when each acquire returned (monotonic).
//! - `replica` — the replica role: a `Supervisor` behind the line protocol.
//! - `cluster` — the driver's handles to replica processes, the routing table.
//! - `history` — what happened: writes (invoke, ok/fail/unknown), tenures, the timeline, and
//!   the driver's own acts (asks, damage, the tips the watcher read).
//! - `clients` — the load: writes with unique ids through the owner of each tenant, and the
//!   large-batch client.
//! - `faults` — the seeded fault schedule; `opt_in` — a crash late in a long drain, a put that
//!   lands after a forget, an open during close; `damage` — damaged and missing segments;
//!   `snapshots` — snapshot bursts; `handoff_late` — an image landing after a handoff (opt-in);
//!   `late_puts` — puts that land late.
//! - `finale` — the end: stop faults, close, read every tenant through a fresh replica, list;
//!   `audit` — the end audit (settle, erasure, images and retention, storage, restores).
//! - `watcher` — reads the heads and the images behind them, and the log at each tip, from the
//!   stores during the run; `compaction` — whether images come when due.
//! - `pitr` — point-in-time restores during the run and at the end, and what they must hold.
//! - `leaks` — threads and descriptors of a replica process before its start and after its close.
//! - `checker` — the rules and the verdict; `store_rules` — the loss rules of each durability
//!   mode and their tail bound, graceful means flushed, the driver's flags, leaks; `explained`
//!   — every ended tenure explained, images overdue; `storage` — the storage rules; `gaps` —
//!   the known gaps a run may tolerate.
//! - `driver` — the driver role: setup, run, summary, exit code.
//! - `rng` — SplitMix64.

use std::process::ExitCode;

mod acquire_times;
mod audit;
mod backend;
mod checker;
mod clients;
mod cluster;
mod compaction;
mod damage;
mod driver;
mod explained;
mod faults;
mod finale;
mod gaps;
mod handoff_late;
mod history;
mod late_puts;
mod leaks;
mod opt_in;
mod pitr;
mod protocol;
mod replica;
mod rng;
mod snapshots;
mod storage;
mod store_rules;
mod throttle;
mod tuning;
mod watcher;

/// A deliberate bug of the runtime (`leasehold_actors::Breakage`) the drill must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BreakSwitch {
    /// Commit and acknowledge without checking the lease (breaks promise 1).
    SkipCommitCheck,
    /// Finish a handoff without its final image (breaks promise 2).
    SkipFinalImage,
    /// With `Shipped`, acknowledge a batch before its segment is shipped and the tip moved
    /// (breaks the RPO 0 of the change log).
    AckBeforeTip,
}

impl BreakSwitch {
    /// The switch as written on the command line.
    pub fn as_arg(self) -> &'static str {
        match self {
            BreakSwitch::SkipCommitCheck => "skip-commit-check",
            BreakSwitch::SkipFinalImage => "skip-final-image",
            BreakSwitch::AckBeforeTip => "ack-before-tip",
        }
    }
}

#[derive(Debug, clap::Parser)]
#[command(
    name = "drill",
    about = "Process drill: real replicas, seeded faults, a history checker"
)]
struct Cli {
    #[command(subcommand)]
    role: Option<Role>,
    #[command(flatten)]
    drive: driver::DriveArgs,
}

#[derive(Debug, clap::Subcommand)]
enum Role {
    /// One replica process (started by the driver; speaks the line protocol on stdin/stdout).
    Replica(replica::ReplicaArgs),
}

fn main() -> ExitCode {
    let cli = <Cli as clap::Parser>::parse();
    match cli.role {
        Some(Role::Replica(args)) => match replica::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("drill replica: {e}");
                ExitCode::from(2)
            }
        },
        None => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let ran = runtime
                .map_err(Into::into)
                .and_then(|rt| rt.block_on(driver::run(cli.drive)));
            match ran {
                Ok(code) => code,
                Err(e) => {
                    println!("drill: the drill itself failed: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
