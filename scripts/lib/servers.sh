# shellcheck shell=bash
# Throwaway test servers for leasehold: a PostgreSQL cluster and a moto S3 server, both on free
# loopback ports, both under one temp dir. Source this file, then:
#
#   lh_require_tools                 # says exactly what to install when something is missing
#   lh_servers_start                 # starts both, exports LEASEHOLD_TEST_* and dummy AWS_* vars
#   trap lh_servers_stop EXIT        # stops what was started, removes the temp dir
#
# Or one at a time: lh_pg_start / lh_pg_stop, lh_moto_start / lh_moto_stop (each needs
# lh_tmp_init first). Nothing listens on anything but 127.0.0.1. Only processes started here
# are stopped, by their own pid or data directory.

LH_ROOT="${LH_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
LH_PG_BIN="${LH_PG_BIN:-/usr/lib/postgresql/15/bin}"
LH_MOTO_VERSION="${LH_MOTO_VERSION:-5.2.5}"
LH_MOTO_VENV="${LH_MOTO_VENV:-$LH_ROOT/.venv/moto}"
LH_S3_BUCKET="${LH_S3_BUCKET:-leasehold-test}"

lh_log() { printf '[servers %6.2fs] %s\n' "$(lh_elapsed)" "$*" >&2; }

lh_now() { date +%s.%N; }
LH_T0="${LH_T0:-$(lh_now)}"
lh_elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$LH_T0" "$(lh_now)"; }

# Checks every binary the servers need; prints what to install and fails when one is missing.
lh_require_tools() {
    local missing=0
    for bin in initdb pg_ctl postgres; do
        if [[ ! -x "$LH_PG_BIN/$bin" ]]; then
            echo "missing $LH_PG_BIN/$bin: install PostgreSQL 15 (apt-get install postgresql-15)," \
                "or point LH_PG_BIN at its bin directory" >&2
            missing=1
        fi
    done
    if ! command -v python3 >/dev/null; then
        echo "missing python3: apt-get install python3 python3-venv" >&2
        missing=1
    elif ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
        echo "python3 cannot create a venv: apt-get install python3-venv" >&2
        missing=1
    fi
    if ! command -v curl >/dev/null; then
        echo "missing curl: apt-get install curl" >&2
        missing=1
    fi
    if ! command -v openssl >/dev/null; then
        echo "missing openssl (the test cluster's TLS certificate): apt-get install openssl" >&2
        missing=1
    fi
    if [[ $(id -u) == 0 ]] && ! id postgres >/dev/null 2>&1; then
        echo "running as root but there is no 'postgres' user to run the server as:" \
            "apt-get install postgresql-15 creates it" >&2
        missing=1
    fi
    return "$missing"
}

# A free TCP port on 127.0.0.1 (the kernel's pick; there is a small window before it is used).
lh_free_port() {
    python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1]); s.close()"
}

# Creates the temp dir every server lives under (LH_TMP), traversable by the postgres user.
lh_tmp_init() {
    if [[ -z "${LH_TMP:-}" ]]; then
        LH_TMP="$(mktemp -d "${TMPDIR:-/tmp}/leasehold-servers.XXXXXX")"
        chmod 711 "$LH_TMP"
        export LH_TMP
    fi
}

# Runs a command as the postgres user when we are root (the server refuses to run as root).
lh_as_pg() {
    if [[ $(id -u) == 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

# The test cluster's TLS: a throwaway certificate authority ($1/ca.crt, the root a client
# trusts) and a server certificate it signed for 127.0.0.1 and localhost ($1/server.crt,
# $1/server.key of mode 600, the server's).
lh_pg_cert() {
    local dir="$1"
    {
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=leasehold test CA" \
            -keyout "$dir/ca.key" -out "$dir/ca.crt" &&
            openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
                -keyout "$dir/server.key" -out "$dir/server.csr" &&
            printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n' \
                >"$dir/server.ext" &&
            openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
                -CAcreateserial -days 2 -extfile "$dir/server.ext" -out "$dir/server.crt"
    } >"$LH_TMP/openssl.log" 2>&1 || { cat "$LH_TMP/openssl.log" >&2; return 1; }
    chmod 600 "$dir/server.key" "$dir/ca.key"
    chmod 644 "$dir/server.crt" "$dir/ca.crt"
    if [[ $(id -u) == 0 ]]; then
        chown postgres:postgres "$dir/server.key" "$dir/server.crt"
    fi
}

# Starts a throwaway cluster: trust auth on loopback, no fsync, TLS on (a server
# certificate signed by a throwaway CA; plain connections are still accepted). Exports
# LEASEHOLD_TEST_PG_URL and LEASEHOLD_TEST_PG_CA (the root a client trusts for verify-full).
lh_pg_start() {
    lh_tmp_init
    local dir="$LH_TMP/pg"
    if [[ $(id -u) == 0 ]]; then
        install -d -o postgres -g postgres -m 700 "$dir" "$dir/data" "$dir/sock"
    else
        install -d -m 700 "$dir" "$dir/data" "$dir/sock"
    fi
    lh_as_pg "$LH_PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync \
        >"$LH_TMP/initdb.log" 2>&1 || { cat "$LH_TMP/initdb.log" >&2; return 1; }
    lh_pg_cert "$dir"
    local tls="-c ssl=on -c ssl_cert_file=$dir/server.crt -c ssl_key_file=$dir/server.key"
    local attempt port
    for attempt in 1 2 3; do
        port="$(lh_free_port)"
        if lh_as_pg "$LH_PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
            -o "-c listen_addresses=127.0.0.1 -p $port -k $dir/sock -c fsync=off -c max_connections=200 $tls" \
            start >/dev/null; then
            LH_PG_DIR="$dir"
            LH_PG_PORT="$port"
            export LEASEHOLD_TEST_PG_URL="postgres://postgres@127.0.0.1:$port/postgres"
            export LEASEHOLD_TEST_PG_CA="$dir/ca.crt"
            lh_log "postgres up on 127.0.0.1:$port (TLS on, root certificate $dir/ca.crt)"
            return 0
        fi
        lh_log "postgres did not start on port $port (attempt $attempt); server log:"
        tail -n 5 "$dir/server.log" >&2 || true
    done
    return 1
}

# Stops the cluster started by lh_pg_start (by its data directory), if any.
lh_pg_stop() {
    if [[ -n "${LH_PG_DIR:-}" && -f "$LH_PG_DIR/data/postmaster.pid" ]]; then
        lh_as_pg "$LH_PG_BIN/pg_ctl" -D "$LH_PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
        lh_log "postgres stopped"
    fi
    LH_PG_DIR=""
}

# Creates (or reuses) the moto venv; installs moto only when the pinned version is not there.
lh_moto_venv() {
    local have
    have="$("$LH_MOTO_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("moto"))' 2>/dev/null || true)"
    if [[ "$have" == "$LH_MOTO_VERSION" && -x "$LH_MOTO_VENV/bin/moto_server" ]]; then
        return 0
    fi
    lh_log "installing moto[server]==$LH_MOTO_VERSION into $LH_MOTO_VENV"
    python3 -m venv --clear "$LH_MOTO_VENV"
    "$LH_MOTO_VENV/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$LH_MOTO_VERSION" \
        || { echo "pip could not install moto[server]==$LH_MOTO_VERSION (is PyPI reachable?)" >&2; return 1; }
}

# Starts moto on a free loopback port, waits for it and creates the test bucket. Exports
# LEASEHOLD_TEST_S3_ENDPOINT, LEASEHOLD_TEST_S3_BUCKET and dummy AWS_* credentials.
lh_moto_start() {
    lh_tmp_init
    lh_moto_venv
    local attempt port i
    for attempt in 1 2 3; do
        port="$(lh_free_port)"
        "$LH_MOTO_VENV/bin/moto_server" -H 127.0.0.1 -p "$port" >"$LH_TMP/moto.log" 2>&1 &
        LH_MOTO_PID=$!
        for i in $(seq 1 100); do
            if curl -fsS -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null; then
                break
            fi
            if ! kill -0 "$LH_MOTO_PID" 2>/dev/null; then
                break
            fi
            sleep 0.1
        done
        if kill -0 "$LH_MOTO_PID" 2>/dev/null \
            && curl -fsS -o /dev/null -X PUT "http://127.0.0.1:$port/$LH_S3_BUCKET"; then
            lh_moto_env "$port"
            lh_log "moto up on 127.0.0.1:$port, bucket $LH_S3_BUCKET"
            return 0
        fi
        lh_log "moto did not start on port $port (attempt $attempt); log:"
        tail -n 5 "$LH_TMP/moto.log" >&2 || true
        lh_moto_stop
    done
    return 1
}

# Exports the S3 variables for a moto on `port`; real credentials and profiles are masked so
# that no test can reach a real account.
lh_moto_env() {
    local endpoint="http://127.0.0.1:$1"
    export LEASEHOLD_TEST_S3_ENDPOINT="$endpoint"
    export LEASEHOLD_TEST_S3_BUCKET="$LH_S3_BUCKET"
    export AWS_ENDPOINT_URL="$endpoint"
    export AWS_ALLOW_HTTP=true
    export AWS_ACCESS_KEY_ID=testing
    export AWS_SECRET_ACCESS_KEY=testing
    export AWS_REGION=us-east-1
    export AWS_DEFAULT_REGION=us-east-1
    unset AWS_SESSION_TOKEN AWS_PROFILE AWS_ROLE_ARN AWS_WEB_IDENTITY_TOKEN_FILE
}

# Stops the moto started by lh_moto_start (by its pid), if any.
lh_moto_stop() {
    if [[ -n "${LH_MOTO_PID:-}" ]]; then
        kill "$LH_MOTO_PID" 2>/dev/null || true
        wait "$LH_MOTO_PID" 2>/dev/null || true
        lh_log "moto stopped"
    fi
    LH_MOTO_PID=""
}

# Starts both servers.
lh_servers_start() {
    lh_pg_start
    lh_moto_start
}

# Stops both servers and removes the temp dir. Safe to call twice.
lh_servers_stop() {
    lh_moto_stop
    lh_pg_stop
    if [[ -n "${LH_TMP:-}" && -d "$LH_TMP" ]]; then
        rm -rf -- "$LH_TMP"
    fi
    LH_TMP=""
}

# Runs a command as a child that a TERM or INT to this shell stops at once (bash would otherwise
# run its traps only after a foreground child ends, leaving the servers up under a CI timeout).
# Returns the command's status.
lh_run() {
    "$@" &
    LH_CHILD=$!
    trap 'lh_stop_child; exit 143' TERM
    trap 'lh_stop_child; exit 130' INT
    local rc=0
    wait "$LH_CHILD" || rc=$?
    LH_CHILD=""
    return "$rc"
}

# Stops the child started by lh_run, if it is still running.
lh_stop_child() {
    if [[ -n "${LH_CHILD:-}" ]]; then
        kill -TERM "$LH_CHILD" 2>/dev/null || true
        wait "$LH_CHILD" 2>/dev/null || true
        LH_CHILD=""
    fi
}
