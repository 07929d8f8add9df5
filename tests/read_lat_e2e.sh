#!/usr/bin/env bash
# read_lat_e2e.sh — perf/rdma-read-lat's --get cases against a real
# rkv-server over shm (the READ cases need an RDMA device: the Soft-RoCE VM,
# scripts/rxe-vm/read-lat-factors.sh). Interleaved cases must not disturb one
# another: a warm case next to other --get cases reads each item once
# through its location cache (1 READ per GET, no forward to follow), which
# fails when the cases store the same keys (the later PUTs supersede the
# items the first case cached). Bad options exit 1 with a message.
# Usage: read_lat_e2e.sh RKV_SERVER RDMA_READ_LAT
set -u
SERVER=$1 TOOL=$2
# shellcheck source=e2e.sh
. "$(dirname "$0")/e2e.sh"
e2e_init read-lat
e2e_server "$SERVER" --memory 64M --log-level warn
e2e_started
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
