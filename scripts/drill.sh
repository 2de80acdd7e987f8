#!/usr/bin/env bash
# The process drill (examples/drill), longer than CI runs it: real replica processes, seeded faults, a
# history checker, an end audit (storage, erasure, point-in-time restores). The replicas run on
# the runtime's default durability, Shipped (RPO 0: the checker fails any acknowledged write
# lost, lost-acknowledged), except in run 3. Runs:
#
#   1. a fixed seed for about 60 s (DRILL_FIXED_SEED, default 20260438; DRILL_FIXED_SECONDS,
#      0 skips it), reproducible;
#   2. a random seed for about 20 s (DRILL_RANDOM_SEED to pin it), to find what the fixed one
#      does not;
#   3. the random seed for about 10 s on --durability async (--async-every-ms 500): losses
#      within every + one store deadline + slack, reported as lost_within_tail/tail_max_ms;
#   4. the random seed for about 15 s with retention deleting (--retain-ms 6000, an image every
#      100 segments): the storage bound after the last retention and restores across the window;
#   5. the random seed for about 6 s with one fault kind only, for each of DRILL_SINGLE_KINDS
#      (default: forget-paused drop-segment): a kind drawn too rarely in the mixed runs gets a
#      run of its own (tests/drill.rs runs damage-segment and drop-segment, and large batches);
#   6. only when LEASEHOLD_TEST_PG_URL is set (scripts/with-servers.sh scripts/drill.sh): the
#      fixed seed for about 20 s on PostgreSQL and S3 (--backend postgres-s3; DRILL_FLEET_SECONDS,
#      0 skips it). Without the servers this run is skipped.
#
# CI (.ci/run) does not run this script: tests/drill.rs, inside scripts/test.sh, runs the pinned
# seeds, one random seed with retention and the fleet backends; this script is the longer look.
#
#   scripts/drill.sh --kind KIND [SECONDS] [ARGS...]   one run of one fault kind only (random
#                                                      seed, default 20 s), nothing else
#
# Every hole of the change-log review is fixed and no gap is tolerated; DRILL_TOLERATE=GAP,...
# (examples/drill/gaps.rs) reports a known gap's violations as TOLERATED instead of failing.
#
# Each run prints its seed first ("drill: seed=…") and a summary line last; a run that finds a
# violation exits non-zero, keeps its run directory and writes the full history there. Rerun a
# failure with: cargo run --example drill -- --seed <seed> --seconds <seconds> [--durability …]
#
# The checker judges from the stores (docs/testing.md, process drill); the summary reports the
# longest crash tail against the mode's bound (tail_max_ms, tail_bound_ms: 0 on Shipped).
# Every run fails on a leak: a replica process that closed and dropped its supervisor must hold
# no more threads, descriptors or tenant actors than before it started (--fail-on-leak).
#
# Honors CARGO and CARGO_TARGET_DIR; extra arguments go to every run (scripts/drill.sh --replicas 4).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo="${CARGO:-cargo}"
fixed_seed="${DRILL_FIXED_SEED:-20260438}"
fixed_seconds="${DRILL_FIXED_SECONDS:-60}"
fleet_seconds="${DRILL_FLEET_SECONDS:-20}"
random_seed="${DRILL_RANDOM_SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000000 ))}"
tolerate="${DRILL_TOLERATE-}"
single_kinds="${DRILL_SINGLE_KINDS-forget-paused drop-segment}"

# One build: with the fleet backends' features when their servers are up (CI builds the
# workspace with them already, so this is a no-op there).
features="testkit"
[[ -z "${LEASEHOLD_TEST_PG_URL:-}" ]] || features="testkit postgres s3"
echo "drill.sh: building the drill ($features)"
"$cargo" build --quiet --example drill --features "$features"
target_dir="${CARGO_TARGET_DIR:-target}"
drill="$target_dir/debug/examples/drill"
gaps=()
[[ -z "$tolerate" ]] || gaps=(--tolerate "$tolerate")

if [[ "${1:-}" == "--kind" ]]; then
    kind="${2:?usage: scripts/drill.sh --kind KIND [SECONDS] [ARGS...]}"
    seconds=20
    if [[ "${3:-}" =~ ^[0-9]+$ ]]; then seconds="$3"; shift; fi
    shift 2
    echo "drill.sh: $kind only, random seed $random_seed for $seconds s"
    exec "$drill" --fail-on-leak --seed "$random_seed" --seconds "$seconds" --faults "$kind" \
        "${gaps[@]}" "$@"
fi

status=0
failed=()
# run NAME ARGS...: one drill; a failure is remembered, the next run goes on.
run() {
    local name="$1"
    shift
    echo "drill.sh: $name"
    local started=$SECONDS s=0
    "$drill" --fail-on-leak "${gaps[@]}" "$@" || s=$?
    if [[ $s != 0 ]]; then
        failed+=("$name")
        [[ $status != 0 ]] || status=$s
    fi
    echo "drill.sh: $name took $(( SECONDS - started )) s"
}

if [[ $fixed_seconds != 0 ]]; then
    run "fixed seed $fixed_seed for $fixed_seconds s" --seed "$fixed_seed" \
        --seconds "$fixed_seconds" "$@"
fi
run "random seed $random_seed for 20 s" --seed "$random_seed" --seconds 20 "$@"
run "random seed $random_seed for 10 s on async" --seed "$random_seed" --seconds 10 \
    --durability async --async-every-ms 500 "$@"
run "random seed $random_seed for 15 s with retention (retain 6 s)" --seed "$random_seed" \
    --seconds 15 --retain-ms 6000 --compact-segments 100 "$@"
for kind in $single_kinds; do
    run "random seed $random_seed for 6 s, $kind only" --seed "$random_seed" --seconds 6 \
        --faults "$kind" "$@"
done
on_servers=""
if [[ -n "${LEASEHOLD_TEST_PG_URL:-}" && $fleet_seconds != 0 ]]; then
    run "fixed seed $fixed_seed for $fleet_seconds s on postgres-s3" --backend postgres-s3 \
        --seed "$fixed_seed" --seconds "$fleet_seconds" "$@"
    on_servers=", $fixed_seed on postgres-s3"
else
    echo "drill.sh: no postgres-s3 run: LEASEHOLD_TEST_PG_URL is not set or" \
        "DRILL_FLEET_SECONDS=0 (scripts/with-servers.sh scripts/drill.sh runs one)"
fi
echo "drill.sh: seeds $fixed_seed (fixed) and $random_seed (random: async, retention," \
    "single kinds)$on_servers: $([[ $status == 0 ]] && echo passed \
    || echo "FAILED (exit $status: ${failed[*]})")"
exit "$status"
