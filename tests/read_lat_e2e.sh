#!/usr/bin/env bash
# read_lat_e2e.sh — tools/rdma-read-lat's --get cases against a real
# rkv-server over shm (the READ cases need an RDMA device: the Soft-RoCE VM,
# tools/rxe-vm/read-lat-factors.sh). Interleaved cases must not disturb one
# another: a warm case next to other --get cases reads each item once
# through its location cache (1 READ per GET, no forward to follow), which
# fails when the cases store the same keys (the later PUTs supersede the
# items the first case cached). Bad options exit 1 with a message.
# Usage: read_lat_e2e.sh RKV_SERVER RDMA_READ_LAT
set -u
SERVER=$1 TOOL=$2
TMP=$(mktemp -d "${TMPDIR:-/tmp}/rkv-read-lat.XXXXXX")
SOCK=$TMP/rkv.sock
FAILS=0
SPID=""

cleanup() {
    if [[ -n $SPID ]]; then kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; fi
    rm -rf "$TMP"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }

"$SERVER" --listen "shm://$SOCK" --memory 64M --log-level warn >"$TMP/server.log" 2>&1 &
SPID=$!
for _ in $(seq 300); do   # safety net: 30 s
    [[ -S $SOCK ]] && break
    kill -0 "$SPID" 2>/dev/null || break
    sleep 0.1
done
[[ -S $SOCK ]] || { cat "$TMP/server.log" >&2; echo "FAIL: rkv-server did not start" >&2; exit 1; }
U="shm://$SOCK"

# warm first: the cold case is set up after it (its PUTs come later)
"$TOOL" -n 300 -w 20 --case "warm: --get $U --keys 500" --case "cold: --get $U --keys 500 --cold" \
    >"$TMP/out" 2>"$TMP/err" || fail "two --get cases: exit $? ($(head -c 300 "$TMP/err"))"
cat "$TMP/out"
line=$(grep "^warm  " "$TMP/out")
[[ $line == *"per GET: READs 1.000 round trips 1.000 cache hits 1.000 forwards 0.000"* ]] ||
    fail "warm: expected 1 READ per GET through the cache and no forwards: $line"
line=$(grep "^cold  " "$TMP/out")
[[ $line == *"cache hits 0.000 forwards 0.000"* ]] || fail "cold: expected no cache hits: $line"
[[ $(grep -c " 32 B x   300: min " "$TMP/out") == 2 ]] || fail "expected two lines of 300 GETs"

"$TOOL" --like nosuch >"$TMP/out" 2>"$TMP/err"
rc=$?
[[ $rc == 1 ]] && grep -q -- '--like takes perftest or rkv, not "nosuch"' "$TMP/err" ||
    fail "--like nosuch: exit $rc, stderr $(head -c 200 "$TMP/err")"
"$TOOL" --case "a: -s 2" --case "b: -n 5" >"$TMP/out" 2>"$TMP/err"
rc=$?
[[ $rc == 1 ]] && grep -q -- "-n and -w belong outside --case" "$TMP/err" ||
    fail "-n inside --case: exit $rc, stderr $(head -c 200 "$TMP/err")"
"$TOOL" --get "shm://$TMP/nosuch.sock" -n 5 >"$TMP/out" 2>"$TMP/err"
rc=$?
[[ $rc == 1 ]] && grep -q -- "--get: " "$TMP/err" ||
    fail "--get to no server: exit $rc, stderr $(head -c 200 "$TMP/err")"

[[ $FAILS == 0 ]] || { echo "$FAILS failure(s)" >&2; exit 1; }
echo "ok"
