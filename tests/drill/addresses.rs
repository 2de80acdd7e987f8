//! The process drill with clients that send through tenant addresses (`--clients addresses`,
//! docs/guarantees.md promise 11): three replica processes share one lease store and one
//! durable store, every replica runs a transport, and clients send the typed command
//! `drill.note` (with an idempotency key) and the query `drill.seen` for 20 tenants to random
//! replicas — each runs the message here, opens the tenant here, or forwards it to the holder —
//! while tenants are handed off, abandoned, forgotten and replicas are killed. The checker holds
//! the notes in each ledger against the tenures the lease stores granted (`acquired` lines:
//! the stores' answers, not the runtime's word): an acknowledged note is in its ledger exactly
//! once (`ran-twice`), no note ran on a replica the store had not granted that tenure
//! (`ran-off-holder`, `answered-off-holder`), a query sent after a forget answers nothing of the
//! forgotten epochs (`forgotten-answered`), beside every rule of the drill
//! (`examples/drill/address_rules.rs`). One run on the embedded stores, one on PostgreSQL + S3
//! (the servers `scripts/test.sh` starts), and one with a build that ignores idempotency keys,
//! which must be caught.

use super::{count, drill, summary};

/// The drill's line on the address clients: `(acknowledged, forwarded, queries answered)`.
fn address_counts(output: &str) -> (u64, u64, u64) {
    let line = output
        .lines()
        .find(|l| l.starts_with("drill addresses:"))
        .unwrap_or_else(|| panic!("no 'drill addresses:' line in the output"));
    let numbers: Vec<u64> = line
        .split([' ', '('])
        .filter_map(|w| w.parse().ok())
        .collect();
    match numbers[..] {
        [acked, forwarded, queries, ..] => (acked, forwarded, queries),
        _ => panic!("unexpected line: {line}"),
    }
}

/// The arguments of a run through addresses: 3 replicas, 20 tenants, the faults of the issue.
fn address_run<'a>(seed: &'a str, seconds: &'a str) -> Vec<&'a str> {
    address_run_of(seed, seconds, "20")
}

/// [`address_run`] with `tenants` tenants.
fn address_run_of<'a>(seed: &'a str, seconds: &'a str, tenants: &'a str) -> Vec<&'a str> {
    vec![
        "--clients",
        "addresses",
        "--seed",
        seed,
        "--seconds",
        seconds,
        "--replicas",
        "3",
        "--tenants",
        tenants,
        "--faults",
        "handoff,kill,forget,abandon",
        "--pitr-targets",
        "1",
    ]
}

/// Asserts a run that kept every promise and exercised what the issue names.
fn assert_kept(code: Option<i32>, output: &str) {
    let summary = summary(output);
    assert_eq!(code, Some(0), "the drill failed: {summary}");
    assert_eq!(count(summary, "violations"), 0, "{summary}");
    assert_eq!(count(summary, "lost_otherwise"), 0, "{summary}");
    for kind in ["handoff", "kill", "forget", "abandon"] {
        assert!(count(summary, kind) >= 1, "no {kind} fault ran: {summary}");
    }
    let (acked, forwarded, queries) = address_counts(output);
    assert!(acked > 100, "only {acked} notes acknowledged: {summary}");
    assert!(
        forwarded > 0,
        "no acknowledged note ran on another replica than the one it was sent to: {summary}"
    );
    assert!(queries > 0, "no query answered: {summary}");
}

#[test]
fn drill_addresses_three_replicas_keep_every_promise_through_moves_and_kills() {
    let args = address_run("3", "10");
    let (code, output) = drill(&args);
    assert_kept(code, &output);
}

/// The harness can fail: a build that runs a command without looking for its key's stored
/// reply (`--break ignore-idempotency-keys`) runs a retried note twice, and `ran-twice` says so.
/// A retry needs a lost answer, which the faults make likely but not certain in one short run
/// (CI's run of 2026-12-01 had none on seed 1): the control passes when one of three seeds
/// catches the build, and fails when none does.
#[test]
fn drill_addresses_catch_a_build_that_ignores_idempotency_keys() {
    let mut summaries = Vec::new();
    for seed in ["1", "2", "3"] {
        let mut args = address_run(seed, "8");
        args.extend(["--break", "ignore-idempotency-keys"]);
        let (code, output) = drill(&args);
        if code == Some(1) && output.contains("VIOLATION ran-twice") {
            return;
        }
        summaries.push(summary(&output).to_string());
    }
    panic!("no run caught the build that ignores idempotency keys: {summaries:#?}");
}

#[cfg(all(feature = "postgres", feature = "s3"))]
#[test]
fn drill_addresses_on_postgres_and_s3_keep_every_promise() {
    for var in [
        "LEASEHOLD_TEST_PG_URL",
        "LEASEHOLD_TEST_S3_ENDPOINT",
        "LEASEHOLD_TEST_S3_BUCKET",
    ] {
        assert!(
            std::env::var_os(var).is_some(),
            "{var} is not set: this drill needs a PostgreSQL and an S3 server. Run it through \
             scripts/test.sh (or scripts/with-servers.sh cargo test --features \"testkit postgres \
             s3\" --test drill drill_addresses), which starts throwaway ones on loopback ports"
        );
    }
    // 12 s: on the fleet backends each fault takes longer, and 8 s ran three kinds of four
    // beside CI's other targets. 8 tenants, not 20, and `slow-durable-store` tolerated: moto
    // (one Python process) answers some segment puts after the drill's 1 s store deadline even
    // alone on the machine, and each such put ends its tenure as the runtime promises (an
    // unknown outcome, nothing lost) though no fault the drill injected explains it. The run
    // prints them as TOLERATED; every other rule, and a lease-store timeout, still fails it.
    let mut args = address_run_of("3", "12", "8");
    args.extend([
        "--backend",
        "postgres-s3",
        "--tolerate",
        "slow-durable-store",
    ]);
    let (code, output) = drill(&args);
    assert_kept(code, &output);
}

/// `examples/addresses.rs` (README's example of addresses across two replicas) runs green: it
/// checks the balance it reads through both replicas after the handoff and exits non-zero when
/// it is wrong.
#[test]
fn example_addresses_runs_green() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut run = std::process::Command::new(cargo);
    // The drill's features, so that the two builds share the library's.
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
    run.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "--quiet", "--example", "addresses", "--features"])
        .arg(features.join(" "));
    if !cfg!(debug_assertions) {
        run.arg("--release");
    }
    let out = run.output().expect("cargo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the example failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("both replicas closed"), "{stdout}");
    assert!(
        stdout.contains("forwarded it to the new holder"),
        "{stdout}"
    );
}
