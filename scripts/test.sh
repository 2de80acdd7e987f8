#!/usr/bin/env bash
# The project's full test command (CI's .ci/run calls it).
#
# 1. checks for PostgreSQL 15, python3 with venv, and curl, and says what to install if missing;
# 2. starts a throwaway PostgreSQL cluster on a free loopback port (as the postgres user when
#    run as root);
# 3. creates or reuses the venv .venv/moto with moto[server], starts moto_server on a free
#    loopback port and creates the test bucket;
# 4. exports LEASEHOLD_TEST_PG_URL, LEASEHOLD_TEST_S3_ENDPOINT, LEASEHOLD_TEST_S3_BUCKET and
#    dummy AWS_* credentials;
# 5. runs every test target with the testkit, postgres, s3 and cli features (cli builds the
#    operator command, which tests/operator_cli.rs runs), then the runtime's
#    tests again with LEASEHOLD_TEST_BACKEND=postgres-s3 (the backend matrix), then the doc tests;
#    arguments are appended to both cargo commands (scripts/test.sh -- --nocapture);
# 6. stops both servers and removes their temp dir on exit, and exits with the tests' status.
#
# Honors CARGO_TARGET_DIR and CARGO. To run only some targets against the servers, use
# scripts/with-servers.sh with your own cargo command.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=lib/servers.sh
source scripts/lib/servers.sh
lh_require_tools
trap lh_servers_stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

lh_servers_start
lh_log "servers ready"

cargo="${CARGO:-cargo}"
status=0
step=0
lh_log "cargo test --workspace --all-targets --features \"testkit postgres s3 cli\" $*"
lh_run "$cargo" test --workspace --all-targets --features "testkit postgres s3 cli" "$@" || step=$?
lh_log "all targets: $([[ $step == 0 ]] && echo passed || echo "FAILED (exit $step)")"
status=$step
# The runtime's tests once more on PostgreSQL + S3: the same tests, another backend (a matrix).
step=0
matrix=(--test handoff --test forget --test drain --test sweep --test local_files
    --test fencing --test guarded_ledger --test observers --test close --test hardening
    --test change_log --test change_log_pitr --test tip_burst --test reconcile --test messages)
lh_log "runtime tests with LEASEHOLD_TEST_BACKEND=postgres-s3"
lh_run env LEASEHOLD_TEST_BACKEND=postgres-s3 "$cargo" test --features "testkit postgres s3 cli" \
    "${matrix[@]}" "$@" || step=$?
lh_log "runtime tests on postgres-s3: $([[ $step == 0 ]] && echo passed || echo "FAILED (exit $step)")"
[[ $status != 0 ]] || status=$step
step=0
lh_log "cargo test --workspace --doc --features \"testkit postgres s3 cli\" $*"
lh_run "$cargo" test --workspace --doc --features "testkit postgres s3 cli" "$@" || step=$?
lh_log "doc tests: $([[ $step == 0 ]] && echo passed || echo "FAILED (exit $step)")"
[[ $status != 0 ]] || status=$step
exit "$status"
