#!/usr/bin/env bash
# Runs one command with throwaway PostgreSQL and moto S3 servers up (loopback only), the
# LEASEHOLD_TEST_* variables and dummy AWS_* credentials exported, then stops both servers and
# removes their temp dir. Exits with the command's status.
#
#   scripts/with-servers.sh cargo test --features "testkit postgres s3" --test s3_store
#   scripts/with-servers.sh env | grep LEASEHOLD_TEST_
set -euo pipefail
if [[ $# -eq 0 ]]; then
    echo "usage: $0 COMMAND [ARGS...]" >&2
    exit 2
fi
# shellcheck source=lib/servers.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/servers.sh"
lh_require_tools
trap lh_servers_stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
lh_servers_start
status=0
lh_run "$@" || status=$?
exit "$status"
