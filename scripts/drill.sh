#!/usr/bin/env bash
# The process drill (examples/drill) as CI runs it: real replica processes, seeded faults, a
# history checker. The replicas run on the runtime's default durability, Shipped (RPO 0: the
# checker fails any acknowledged write lost, lost-acknowledged), except in run 3. Runs:
#
#   1. a fixed seed for about 60 s (DRILL_FIXED_SEED, default 20260438), reproducible;
#   2. a random seed for about 20 s (DRILL_RANDOM_SEED to pin it), to find what the fixed one
#      does not;
#   3. the random seed for about 10 s on --durability async (--async-every-ms 500): losses
#      within every + one store deadline + slack, reported as lost_within_tail/tail_max_ms;
#   4. only when LEASEHOLD_TEST_PG_URL is set (scripts/with-servers.sh scripts/drill.sh): the
#      fixed seed for about 20 s on PostgreSQL and S3 (--backend postgres-s3), the drill built
#      again with the postgres and s3 features. Without the servers this run is skipped.
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
# Honors CARGO and CARGO_TARGET_DIR; extra arguments go to both runs (scripts/drill.sh --replicas 4).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo="${CARGO:-cargo}"
fixed_seed="${DRILL_FIXED_SEED:-20260438}"
random_seed="${DRILL_RANDOM_SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000000 ))}"

echo "drill.sh: building the drill"
"$cargo" build --quiet --example drill --features testkit
target_dir="${CARGO_TARGET_DIR:-target}"
drill="$target_dir/debug/examples/drill"

status=0
on_servers=""
echo "drill.sh: fixed seed $fixed_seed for 60 s"
"$drill" --fail-on-leak --seed "$fixed_seed" --seconds 60 "$@" || status=$?
echo "drill.sh: random seed $random_seed for 20 s"
"$drill" --fail-on-leak --seed "$random_seed" --seconds 20 "$@" || { s=$?; [[ $status != 0 ]] || status=$s; }
echo "drill.sh: random seed $random_seed for 10 s on --durability async"
"$drill" --fail-on-leak --seed "$random_seed" --seconds 10 --durability async --async-every-ms 500 "$@" \
    || { s=$?; [[ $status != 0 ]] || status=$s; }
if [[ -n "${LEASEHOLD_TEST_PG_URL:-}" ]]; then
    echo "drill.sh: building the drill with the postgres and s3 features"
    "$cargo" build --quiet --example drill --features "testkit postgres s3"
    echo "drill.sh: fixed seed $fixed_seed for 20 s on postgres-s3"
    "$drill" --fail-on-leak --backend postgres-s3 --seed "$fixed_seed" --seconds 20 "$@" \
        || { s=$?; [[ $status != 0 ]] || status=$s; }
    on_servers=", $fixed_seed on postgres-s3"
else
    echo "drill.sh: no postgres-s3 run: LEASEHOLD_TEST_PG_URL is not set" \
        "(scripts/with-servers.sh scripts/drill.sh runs one)"
fi
echo "drill.sh: seeds $fixed_seed (fixed) and $random_seed (random, and on async)$on_servers: $([[ $status == 0 ]] && echo passed || echo "FAILED (exit $status)")"
exit "$status"
