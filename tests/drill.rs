//! The process drill (issue #5, `examples/drill`): real replica processes, seeded faults, a
//! history checker. These tests run the built example: once on a fixed seed expecting every
//! promise kept, and once per deliberate bug (`leasehold_actors::Breakage`) expecting the
//! checker to name the broken promise and the drill to exit non-zero. One more runs on the
//! fleet backends (`--backend postgres-s3`, issue #4): it needs the `postgres` and `s3` features
//! and the servers `scripts/test.sh` starts, and fails without them; the others run on the
//! default backend (a lease file and a durable directory). The replicas run on the runtime's
//! default durability, `Shipped` (no acknowledged write may be lost), unless a test passes
//! `--durability async|images` (docs/testing.md, the process drill's loss rules).
//!
//! The example is built with the cargo running these tests (`cargo build --example drill` with
//! this package's features, a no-op when `cargo test` built it already), then run from
//! `target/<profile>/examples/drill`. The runs take turns: each starts four processes, and the
//! machine running the suite may have two cores.

#[path = "drill/addresses.rs"]
mod addresses;
#[path = "drill/holes.rs"]
mod holes;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One drill at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The longest one drill may take, setup and final check included.
const LIMIT: Duration = Duration::from_secs(120);

/// Builds the example (if needed) and returns its path.
fn drill_binary() -> PathBuf {
    let test_exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/drill-<hash> → target/<profile>
    let profile_dir = test_exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps")
        .to_path_buf();
    let mut features = vec!["testkit"];
    if cfg!(feature = "postgres") {
        features.push("postgres");
    }
    if cfg!(feature = "s3") {
        features.push("s3");
    }
    if cfg!(feature = "cli") {
        features.push("cli");
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "build",
            "--quiet",
            "--workspace",
            "--example",
            "drill",
            "--features",
        ])
        .arg(features.join(" "));
    if !cfg!(debug_assertions) {
        build.arg("--release");
    }
    let status = build.status().expect("cargo runs");
    assert!(status.success(), "cargo build --example drill failed");
    let exe = profile_dir.join("examples").join("drill");
    assert!(exe.exists(), "no drill binary at {}", exe.display());
    exe
}

/// Runs the drill with `args` in a run directory this test removes; returns its exit code and
/// everything it printed.
fn drill(args: &[&str]) -> (Option<i32>, String) {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let scratch = tempfile::tempdir().expect("a scratch directory");
    let mut child = Command::new(drill_binary())
        .args(args)
        .arg("--dir")
        .arg(scratch.path().join("run"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the drill starts");
    let mut stdout = child.stdout.take().expect("a stdout pipe");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the drill") {
            break Some(status);
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = reader.join().unwrap_or_default();
    println!("{output}");
    assert!(
        status.is_some(),
        "the drill did not finish within {LIMIT:?}"
    );
    (status.and_then(|s| s.code()), output)
}

fn summary(output: &str) -> &str {
    output
        .lines()
        .find(|l| l.starts_with("drill summary:"))
        .unwrap_or("(no summary line)")
}

/// The number `name=N` of a summary line (a fault count inside `faults[…]` too); `None` when the
/// field is absent, so a renamed field fails the test instead of passing it.
fn field(summary: &str, name: &str) -> Option<u64> {
    summary
        .split([' ', '[', ']'])
        .find_map(|f| f.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
}

/// `field`, or a panic naming the field and the summary.
fn count(summary: &str, name: &str) -> u64 {
    field(summary, name).unwrap_or_else(|| panic!("no {name}=N in the summary: {summary}"))
}

/// The fault kinds before the damage faults and the snapshot burst joined the defaults: runs
/// that pin a seed's first round name them, so the schedule stays what the test says.
const CLASSIC_KINDS: &str = "handoff,kill,pause,partition,kill-upload,forget-paused,store,restart,\
                             drain-kill,close-during-open,forget-late-put";

/// Every fault kind the drill injects.
const FAULT_KINDS: [&str; 8] = [
    "handoff",
    "kill",
    "pause",
    "partition",
    "kill-upload",
    "forget-paused",
    "store",
    "restart",
];

/// On the runtime's default, `Shipped` (RPO 0), a fixed seed keeps every promise and loses no
/// acknowledged write at all: the declared tail is 0 (`lost-acknowledged`, docs/testing.md),
/// through SIGKILL under load and mid-upload, SIGSTOP past the lease, a partition and a store
/// stall — the seed's first round is partition, kill, pause, kill-upload, store.
///
/// And after its close and the drop of its supervisor, a replica process holds no more threads
/// or file descriptors than before it started (the drill's `leak` rule, `--fail-on-leak`).
/// Before actors stopped after a close (hole 7), every replica kept its arbiter threads, the
/// observer thread and 8 descriptors, and a run with `restart` faults failed.
#[test]
fn drill_on_a_fixed_seed_keeps_every_promise() {
    let (code, output) = drill(&[
        "--seed",
        "20260438",
        "--seconds",
        "20",
        "--faults",
        CLASSIC_KINDS,
        "--fail-on-leak",
    ]);
    let summary = summary(&output);
    assert_eq!(code, Some(0), "the drill failed: {summary}");
    assert!(summary.contains("durability=shipped"), "{summary}");
    assert_eq!(count(summary, "violations"), 0, "{summary}");
    assert_eq!(count(summary, "lost_otherwise"), 0, "{summary}");
    assert_eq!(count(summary, "lost_within_tail"), 0, "{summary}");
    assert_eq!(count(summary, "tail_bound_ms"), 0, "{summary}");
    // The run did what it is for: writes acknowledged, faults injected, log tips read from the
    // stores, graceful leaves judged.
    // (Each write waits for its segment and the tip's move: fewer than on `Images`, and fewer
    // on a loaded host; 860 on a host running three other builds.)
    assert!(count(summary, "acked") > 300, "{summary}");
    let faults: u64 = FAULT_KINDS.iter().map(|k| count(summary, k)).sum();
    assert!(faults >= 5, "only {faults} faults injected: {summary}");
    // (`kill-upload` comes fourth in the first round, but finds no owner on some runs: it is
    // run again by `drill_leaving_under_late_puts_drains_and_kills_keeps_every_promise`.)
    for kind in ["kill", "partition", "pause", "store"] {
        assert!(count(summary, kind) > 0, "no {kind} fault: {summary}");
    }
    // With a change log the only images are compaction's (every 64 segments of a tenure in the
    // drill): the faults end most tenures before that, so `images_read` may be 0; the log is
    // what the store watcher must have read.
    assert!(count(summary, "tips_read") > 0, "{summary}");
    assert!(count(summary, "graceful") > 0, "{summary}");
    assert!(count(summary, "closed") >= 2, "{summary}");
    assert_eq!(
        count(summary, "leaks"),
        0,
        "a replica process leaked: {summary}"
    );
    // The end audit ran: every ended tenure judged, restores judged against the history, the
    // stores listed.
    assert!(count(summary, "ended") > 0, "{summary}");
    assert!(count(summary, "pitr_checked") > 0, "{summary}");
    assert!(count(summary, "durable_objects") > 0, "{summary}");
}

/// A random seed (from the clock, printed; `LEASEHOLD_DRILL_SEED` pins one) with every default
/// fault kind and retention deleting (`retain` 6 s, an image every 100 segments): what the
/// pinned seeds do not try. Every promise kept, no acknowledged write lost, no replica process
/// leaking after its close. A failure prints the seed; rerun it with `cargo run --example drill
/// -- --seed <seed> --seconds 20 --retain-ms 6000 --compact-segments 100` (scripts/drill.sh
/// runs more seeds and modes). Retention left this run for a while: the end audit counted the
/// window's base's own segment, which retention keeps, among those it must delete (seed
/// 405740540 under CI's load; docs/testing.md, "Open findings", closed).
#[test]
fn drill_on_a_random_seed_keeps_every_promise() {
    let seed = std::env::var("LEASEHOLD_DRILL_SEED").unwrap_or_else(|_| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        (now.map_or(1, |d| d.as_nanos()) % 1_000_000_000).to_string()
    });
    eprintln!("drill seed: {seed} (LEASEHOLD_DRILL_SEED={seed} replays this run)");
    let (code, output) = drill(&[
        "--seed",
        &seed,
        "--seconds",
        "20",
        "--retain-ms",
        "6000",
        "--compact-segments",
        "100",
        "--fail-on-leak",
    ]);
    let summary = summary(&output);
    assert_eq!(count(summary, "violations"), 0, "seed {seed}: {summary}");
    assert_eq!(
        count(summary, "lost_otherwise"),
        0,
        "seed {seed}: {summary}"
    );
    assert_eq!(count(summary, "leaks"), 0, "seed {seed}: {summary}");
    assert!(count(summary, "acked") > 0, "seed {seed}: {summary}");
    assert_eq!(code, Some(0), "seed {seed}: the drill failed: {summary}");
}

/// `Async` acknowledges at the local commit and ships every `every` (here 500 ms): a crash may
/// lose the writes of about one period, and no more. SIGKILL under load and mid-upload; the
/// checker fails a loss older than `every` + one store deadline + slack (`lost-beyond-tail`)
/// or one the log already held at a tip the store watcher read (`lost-after-publish`).
#[test]
fn drill_async_loses_no_more_than_its_period() {
    let (code, output) = drill(&[
        "--seed",
        "11",
        "--seconds",
        "10",
        "--faults",
        "kill,kill-upload",
        "--durability",
        "async",
        "--async-every-ms",
        "500",
    ]);
    let summary = summary(&output);
    assert!(summary.contains("durability=async/500ms"), "{summary}");
    assert!(
        count(summary, "kill") + count(summary, "kill-upload") > 0,
        "{summary}"
    );
    assert!(count(summary, "acked") > 0, "{summary}");
    assert!(count(summary, "tips_read") > 0, "{summary}");
    // 500 ms + the 1 s store deadline + 500 ms of slack.
    assert_eq!(count(summary, "tail_bound_ms"), 2_000, "{summary}");
    assert!(
        count(summary, "tail_max_ms") <= count(summary, "tail_bound_ms"),
        "{summary}"
    );
    assert_eq!(count(summary, "violations"), 0, "{summary}");
    assert_eq!(code, Some(0), "the drill failed: {summary}");
}

/// The faults around a tenant's leaving, one run, each kind at least once (the first round of
/// the schedule is a shuffle of every kind): every promise kept, nothing acknowledged lost.
///
/// - `drain-kill` (writes through a ticket while a handoff drains, SIGKILL 2.5–2.8 s into a 3 s
///   drain) loses no more than the declared crash tail, 0 on `Shipped` (promise 3). Before
///   snapshots ran while draining (hole 4), writes acknowledged ~3 s before the crash were lost
///   (`lost-beyond-tail`).
/// - `forget-late-put` (the owner's puts land 1.6 s late, past the 1 s store deadline; a snapshot
///   times out and a forget follows at once) leaves nothing at or below the floor, listed right
///   after the forget and once the erasure bound passed (promise 5). Before the forget waited
///   for late puts (hole 6), the late image landed after the forget returned `Ok` and stayed
///   (`forgotten-object-left`); before the reconciliation (the change-log review's hole 8) the
///   other tenants' late images stayed beside no manifest (`orphan-object`).
/// - `close-during-open` (a handoff, then one replica's open and close back to back): the open
///   is refused or handed off (promise 2). Before the fix (hole 1) the open completed after the
///   close took its table and the tenure served on a replica about to stop
///   (`graceful-not-flushed`).
/// - `kill-upload` (the owner's puts, segments too, slowed by 300–800 ms, SIGKILL mid-upload)
///   loses nothing on `Shipped` — the control of `drill_catches_a_build_that_acks_before_the_tip`.
/// - `handoff-late-put` (the old owner's image puts land 1.6 s late after a handoff; the
///   successor forgets): nothing left once the erasure bound passed (the change-log review's
///   hole 5, `forgotten-object-left` on three tenants of four before its fix).
#[test]
fn drill_leaving_under_late_puts_drains_and_kills_keeps_every_promise() {
    let kinds = [
        "drain-kill",
        "forget-late-put",
        "close-during-open",
        "kill-upload",
        "handoff-late-put",
    ];
    let (code, output) = drill(&[
        "--seed",
        "5",
        "--seconds",
        "28",
        "--faults",
        &kinds.join(","),
    ]);
    let summary = summary(&output);
    for kind in kinds {
        assert!(count(summary, kind) > 0, "no {kind} fault: {summary}");
    }
    assert!(count(summary, "acked") > 0, "{summary}");
    assert!(count(summary, "forgotten") > 0, "nothing erased: {summary}");
    assert_eq!(count(summary, "lost_otherwise"), 0, "{summary}");
    assert!(
        count(summary, "tail_max_ms") <= count(summary, "tail_bound_ms"),
        "{summary}"
    );
    assert_eq!(count(summary, "violations"), 0, "{summary}");
    assert_eq!(code, Some(0), "the drill failed: {summary}");
}

/// A zombie that commits without checking its lease (`skip-commit-check`) acknowledges writes
/// after its successor acquired (`ack-after-successor`, promise 1). Run on `Async`, which
/// acknowledges at the local commit as `Images` does: with `Shipped` the same zombie's writes
/// are refused anyway (`LEASEHOLD_FENCED`), because the tip's compare-and-set for the live
/// tenure is a second fence (docs/guarantees.md, the change log), so the switch breaks nothing
/// there.
#[test]
fn drill_catches_a_build_that_skips_the_commit_check() {
    let (code, output) = drill(&[
        "--seed",
        "7",
        "--seconds",
        "9",
        "--faults",
        "pause,partition",
        "--break",
        "skip-commit-check",
        "--durability",
        "async",
    ]);
    assert_eq!(code, Some(1), "{}", summary(&output));
    assert!(
        output.contains("VIOLATION ack-after-successor"),
        "the zombie's acknowledged writes are named: {}",
        summary(&output)
    );
}

/// A handoff reported flushed without its final image loses the tenure's last writes
/// (`lost-after-handoff`, promise 2). Only `Images` has a final image (with a change log a
/// handoff ships the log and publishes none), so the run is on `--durability images`.
#[test]
fn drill_catches_a_build_that_skips_the_final_image() {
    let (code, output) = drill(&[
        "--seed",
        "7",
        "--seconds",
        "6",
        "--faults",
        "handoff",
        "--break",
        "skip-final-image",
        "--durability",
        "images",
    ]);
    assert_eq!(code, Some(1), "{}", summary(&output));
    assert!(
        output.contains("VIOLATION lost-after-handoff"),
        "the writes a handoff lost are named: {}",
        summary(&output)
    );
}

/// With `Shipped`, a build that acknowledges a batch at its local commit, before its segment is
/// put and the tip moved (`ack-before-tip`), loses acknowledged writes to a SIGKILL while
/// segments are in flight: `kill-upload` slows the owner's puts (segments too) by 300–800 ms and
/// kills it mid-upload. The checker names them (`lost-acknowledged`, declared tail 0).
#[test]
fn drill_catches_a_build_that_acks_before_the_tip() {
    let (code, output) = drill(&[
        "--seed",
        "7",
        "--seconds",
        "8",
        "--faults",
        "kill-upload",
        "--break",
        "ack-before-tip",
    ]);
    let summary = summary(&output);
    assert!(count(summary, "kill-upload") > 0, "{summary}");
    assert_eq!(code, Some(1), "{summary}");
    assert!(
        output.contains("VIOLATION lost-acknowledged"),
        "the acknowledged writes a crash lost are named: {summary}"
    );
    assert!(count(summary, "lost_otherwise") > 0, "{summary}");
}

/// A tenant forgotten while its owner is stopped leaves no local copy on the zombie once it
/// resumes (`forgotten-local-file-left`), and its segments landing late are gone within the
/// erasure bound: hole 10 of the change-log review on `Shipped` (a paused replica's segment put
/// in flight when its lease was found lost, landing after the successor's forget; seen with the
/// full fault set, seed 12, 30 s: `twice the store deadline later, t1 (floor 2) keeps 1 objects
/// at or below the floor: [".../e00000001/log-000000000091.seg"]`). Hole 10 on `Async` is
/// pinned in `holes`.
///
/// Every run must keep every promise; a run in which no forget happened proves nothing, and
/// the next seed is tried (at most three): on the SQLite lease file a replica stopped while it
/// holds the file's write lock stalls every replica until it resumes, and the forget then finds
/// nobody to take the tenant over (CI's run of 2026-12-01, seed 4).
#[test]
fn drill_a_forgotten_tenant_leaves_no_local_copy_on_a_zombie() {
    for seed in ["4", "5", "6"] {
        let (code, output) = drill(&[
            "--seed",
            seed,
            "--seconds",
            "12",
            "--faults",
            "forget-paused",
        ]);
        let summary = summary(&output);
        assert_eq!(code, Some(0), "{summary}");
        assert!(
            !output.contains("TOLERATED forgotten-local-file-left"),
            "{summary}"
        );
        if count(summary, "forget-paused") > 0 && count(summary, "forgotten") > 0 {
            return;
        }
    }
    panic!("no run of three forgot a tenant while its owner was stopped");
}

/// A segment flipped or deleted in the store — one the restore needs, the tip's among them —
/// makes the next open fail with the typed `LEASEHOLD_CORRUPT` naming it, or, when an image
/// taken meanwhile holds its position, open whole; never a state the log does not vouch for
/// (`damage-served`, `damage-not-typed`). The drill puts the segment back after, so every
/// acknowledged write is judged as usual.
#[test]
fn drill_a_damaged_or_missing_segment_fails_the_next_open_typed() {
    let (code, output) = drill(&[
        "--seed",
        "5",
        "--seconds",
        "12",
        "--faults",
        "damage-segment,drop-segment",
    ]);
    let summary = summary(&output);
    assert!(
        count(summary, "damage-segment") + count(summary, "drop-segment") > 0,
        "{summary}"
    );
    assert!(count(summary, "damage_caught") > 0, "{summary}");
    assert_eq!(count(summary, "lost_otherwise"), 0, "{summary}");
    assert_eq!(count(summary, "violations"), 0, "{summary}");
    assert_eq!(code, Some(0), "the drill failed: {summary}");
}

/// Batches of 4 MiB (one segment each) on a healthy store, handed back and forth: every
/// acknowledged large batch is restored (its segment's put and get within their sized
/// deadlines), the storage rules and the restores hold.
#[test]
fn drill_large_batches_on_a_healthy_store_are_restored() {
    let (code, output) = drill(&[
        "--seed",
        "41",
        "--seconds",
        "10",
        "--faults",
        "handoff",
        "--large-batch-mib",
        "4",
    ]);
    let summary = summary(&output);
    assert!(count(summary, "handoff") > 0, "{summary}");
    assert!(count(summary, "image_bytes") > 4 << 20, "{summary}");
    assert_eq!(count(summary, "violations"), 0, "{summary}");
    assert_eq!(code, Some(0), "the drill failed: {summary}");
}

/// The replicas (`replica-N`, generation dropped) that handed tenant `t0` off successfully.
#[cfg(all(feature = "postgres", feature = "s3"))]
fn handed_off_by(output: &str) -> std::collections::BTreeSet<&str> {
    output
        .lines()
        .filter_map(|line| line.split_once(" hands t0 off: ok"))
        .filter_map(|(head, _)| head.rsplit(' ').next())
        .filter_map(|label| label.split('#').next())
        .collect()
}

#[cfg(all(feature = "postgres", feature = "s3"))]
#[test]
fn drill_on_postgres_and_s3_hands_a_tenant_back_and_forth() {
    for var in [
        "LEASEHOLD_TEST_PG_URL",
        "LEASEHOLD_TEST_S3_ENDPOINT",
        "LEASEHOLD_TEST_S3_BUCKET",
    ] {
        assert!(
            std::env::var_os(var).is_some(),
            "{var} is not set: this drill needs a PostgreSQL and an S3 server. Run it through \
             scripts/test.sh (or scripts/with-servers.sh cargo test --features \"testkit postgres \
             s3\" --test drill), which starts throwaway ones on loopback ports"
        );
    }
    let (code, output) = drill(&[
        "--backend",
        "postgres-s3",
        "--seed",
        "20260405",
        "--seconds",
        "10",
        "--replicas",
        "2",
        "--tenants",
        "1",
        "--faults",
        "handoff",
    ]);
    let summary = summary(&output);
    assert_eq!(code, Some(0), "the drill failed: {summary}");
    assert_eq!(count(summary, "lost_otherwise"), 0, "{summary}");
    assert_eq!(count(summary, "violations"), 0, "{summary}");
    assert!(count(summary, "acked") > 0, "{summary}");
    let handoffs = count(summary, "handoff");
    assert!(handoffs >= 3, "only {handoffs} handoffs: {summary}");
    let senders = handed_off_by(&output);
    assert_eq!(
        senders.into_iter().collect::<Vec<_>>(),
        ["replica-1", "replica-2"],
        "both replicas handed the tenant off: {summary}"
    );
}
