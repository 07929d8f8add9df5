# tests/e2e.sh — sourced by the shell end-to-end tests (tools_e2e.sh,
# read_lat_e2e.sh, bench_html_test.sh): a temp dir, a failure count, and a
# real rkv-server over shm that is stopped when the script exits.
#
#   e2e_init NAME               TMP=/tmp/rkv-NAME.XXXXXX and SOCK=$TMP/rkv.sock;
#                               at exit the server is stopped and TMP removed
#   fail MSG...                 say a failure and count it in FAILS
#   e2e_server BIN ARGS...      start `BIN --listen shm://$SOCK ARGS...` (its log
#                               in $TMP/server.log), SPID its pid; 0 once its socket
#                               exists, 1 if it exited first (or 30 s passed)
#   e2e_started                 exit 1 with the server's log unless $SOCK exists
#   e2e_server_stop             stop it now

e2e_init() {
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/rkv-$1.XXXXXX")
    SOCK=$TMP/rkv.sock
    FAILS=0
    SPID=""
    trap e2e_cleanup EXIT
}

e2e_server_stop() {
    if [[ -n $SPID ]]; then kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; fi
    SPID=""
}

e2e_cleanup() {
    e2e_server_stop
    rm -rf "$TMP"
}

fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }

e2e_server() {
    local bin=$1
    shift
    "$bin" --listen "shm://$SOCK" "$@" >"$TMP/server.log" 2>&1 &
    SPID=$!
    for _ in $(seq 300); do   # safety net: 30 s
        [[ -S $SOCK ]] && return 0
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.1
    done
    [[ -S $SOCK ]] && return 0
    wait "$SPID" 2>/dev/null
    SPID=""
    return 1
}

e2e_started() {
    [[ -S $SOCK ]] || { cat "$TMP/server.log" >&2; echo "FAIL: rkv-server did not start" >&2; exit 1; }
}
