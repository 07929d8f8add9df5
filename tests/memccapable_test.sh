#!/usr/bin/env bash
# memccapable_test.sh — libmemcached's memcached conformance tool against
# rkv-server's tcp door: `memccapable -a` (the text protocol's 27 tests:
# version, quit, verbosity, every storage command with and without noreply,
# get, gets, multiget, flush, delete, incr, decr, stat) must pass all 27, as
# it does against memcached 1.6.18. Skipped (77) without memccapable
# (libmemcached-tools; scripts/install-deps.sh installs it).
# Usage: memccapable_test.sh RKV_SERVER
set -u
SERVER=$1
TOOL=$(command -v memccapable || true)
if [[ -z $TOOL ]]; then
    echo "SKIP: memccapable not on PATH (install libmemcached-tools)"
    exit 77
fi
# shellcheck source=e2e.sh
. "$(dirname "$0")/e2e.sh"
e2e_init memccapable

# a free port: the server exits at once when another process has it
port=""
for attempt in $(seq 20); do
    p=$(( 20000 + ($$ * 131 + attempt * 7919) % 40000 ))
    if e2e_server "$SERVER" --listen "tcp://127.0.0.1:$p" --memory 64M --workers 1 --log-level warn; then
        port=$p
        break
    fi
done
[[ -n $port ]] || { cat "$TMP/server.log" >&2; echo "FAIL: rkv-server did not start" >&2; exit 1; }

timeout 120 "$TOOL" -a -h 127.0.0.1 -p "$port" >"$TMP/out" 2>&1
rc=$?
cat "$TMP/out"
passed=$(grep -c '\[pass\]' "$TMP/out")
failed=$(grep -c '\[FAIL\]' "$TMP/out")
[[ $rc == 0 ]] || fail "memccapable exited $rc"
[[ $passed == 27 && $failed == 0 ]] || fail "memccapable -a: $passed of 27 passed, $failed failed"
kill -0 "$SPID" 2>/dev/null || fail "rkv-server died during the run"

[[ $FAILS == 0 ]] || { echo "$FAILS failure(s)" >&2; exit 1; }
echo "ok: memccapable -a passed 27 of 27"
