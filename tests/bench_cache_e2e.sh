#!/usr/bin/env bash
# bench_cache_e2e.sh — rkv-bench's cache workload against a real rkv-server:
# --fill-on-miss over shm (single and pipelined window) reports a sane hit
# rate whose misses were all filled; a tiny trace written here is replayed
# over shm and, with --protocol memcache, through the same server's tcp://
# door, and each operation's counts come out as its lines say; a bad trace
# exits 2 naming its line.
# Usage: bench_cache_e2e.sh RKV_SERVER RKV_BENCH
set -u
SERVER=$1 BENCH=$2
# shellcheck source=e2e.sh
. "$(dirname "$0")/e2e.sh"
e2e_init bench-cache

# a tcp door on a port drawn from the pid; a port someone holds makes the
# server exit, and the next is tried
for attempt in $(seq 0 19); do
    PORT=$(( 20000 + ($$ * 173 + 911 + attempt * 7919) % 40000 ))
    e2e_server "$SERVER" --listen "tcp://127.0.0.1:$PORT" --memory 64M --log-level warn && break
done
e2e_started

# jcheck FILE WHAT PYTHON-EXPR: the expression over the report r must hold.
jcheck() {
    python3 - "$1" "$3" <<'PY' || fail "$2: $3 (report $1)"
import json, sys
r = json.load(open(sys.argv[1]))
c = r["cache"]
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}

# ---- --fill-on-miss: 2000 keys, none there at first; each misses once ----
# (the two runs draw from key spaces of their own: keys of 1$w bytes)
for w in 1 8; do
    "$BENCH" -s "shm://$SOCK" -q --fill-on-miss --no-preload --get-ratio 1 --keys 2000 \
        --key-size "1$w" --seed "$w" --requests 20000 --window "$w" --json "$TMP/fill$w.json" \
        >"$TMP/fill$w.txt" 2>&1 || { cat "$TMP/fill$w.txt" >&2; fail "fill-on-miss window $w"; }
    grep -q '^Cache: hit rate [0-9.]*% ([0-9]* hits / [0-9]* GETs); [0-9]* misses filled with a SET' \
        "$TMP/fill$w.txt" || fail "fill-on-miss window $w: no Cache line in the text report"
    J=$TMP/fill$w.json
    jcheck "$J" "window $w: fills = misses" 'c["fill_on_miss"] and c["fills"] == r["get"]["misses"] > 0'
    jcheck "$J" "window $w: hit rate = hits / GETs" \
        'abs(c["hit_rate"] - r["get"]["hits"] / r["get"]["ops"]) < 1e-9 and r["get"]["hit_rate"] == c["hit_rate"]'
    jcheck "$J" "window $w: sane hit rate" '0.5 < c["hit_rate"] < 1 and r["errors"] == 0'
    jcheck "$J" "window $w: fills are PUTs" 'r["put"]["ops"] == c["fills"]'
    jcheck "$J" "window $w: hit rate per interval" \
        'all(0 <= t["hit_rate"] <= 1 for t in r["timeseries"]) and len(r["timeseries"]) > 0'
done
# the first run's key space again: it filled every key it drew (20000 draws
# over 2000 keys leave ~0.1 undrawn), so this run hardly misses
"$BENCH" -s "shm://$SOCK" -q --fill-on-miss --no-preload --get-ratio 1 --keys 2000 --key-size 11 \
    --seed 3 --requests 20000 --window 8 --json "$TMP/again.json" >"$TMP/again.txt" 2>&1 ||
    { cat "$TMP/again.txt" >&2; fail "fill-on-miss again"; }
jcheck "$TMP/again.json" "again: keys filled by the first run" 'c["fills"] < 20 and c["hit_rate"] > 0.99'

# ---- --trace over shm and over the tcp door ----
# trace PREFIX: the same 17 lines with keys under PREFIX (a fresh key space).
trace() {
    local p=$1
    cat <<CSV
0,$p:a,20,100,1,get,0
0,$p:a,20,100,1,set,3600
1,$p:a,20,100,1,get,0
1,$p:a,20,100,1,gets,0
1,$p:b,20,500,2,add,0
1,$p:b,20,500,2,add,0
2,$p:c,20,10,2,replace,0
2,$p:b,20,50,2,cas,0
2,$p:n,8,5,2,set,0
3,$p:n,8,0,2,incr,0
3,$p:n,8,0,2,decr,0
3,$p:b,20,5,2,append,0
3,$p:b,20,5,2,prepend,0
4,$p:b,20,0,2,delete,0
4,$p:b,20,0,2,delete,0
4,$p:big,300,10,2,get,0
4,$p:huge,20,2000000,2,set,0
CSV
}
# what each operation came to, as {op: [count, ok, missed]}
WANT='{"get": [2, 1, 1], "gets": [1, 1, 0], "set": [2, 2, 0], "add": [2, 1, 1],
       "replace": [1, 0, 1], "cas": [1, 1, 0], "append": [1, 1, 0], "prepend": [1, 1, 0],
       "delete": [2, 1, 1], "incr": [1, 1, 0], "decr": [1, 1, 0]}'
run_trace() {
    local name=$1
    shift
    "$BENCH" "$@" -q --trace "$TMP/$name.csv" --json "$TMP/$name.json" >"$TMP/$name.txt" 2>&1 ||
        { cat "$TMP/$name.txt" >&2; fail "trace $name: exit $?"; return; }
    grep -q '^Trace: .*: 15 lines replayed; skipped: 2 (key or value too large)' "$TMP/$name.txt" ||
        fail "trace $name: no 'skipped: 2' line in the text report"
    jcheck "$TMP/$name.json" "trace $name: counts" \
        "{k: [v['count'], v['ok'], v['missed']] for k, v in c['trace']['ops'].items()} == $WANT"
    jcheck "$TMP/$name.json" "trace $name: totals" \
        'c["trace"]["replayed"] == 15 and c["trace"]["skipped"] == 2 and r["errors"] == 0'
    jcheck "$TMP/$name.json" "trace $name: hit rate" \
        'abs(c["hit_rate"] - 2 / 3) < 1e-9 and r["get"]["ops"] == 3'
}
trace shm >"$TMP/shm.csv"
run_trace shm -s "shm://$SOCK"
trace mc >"$TMP/mc.csv"
run_trace mc --protocol memcache -s "tcp://127.0.0.1:$PORT"

# --fill-on-miss with a trace: the first get of a key fills it
trace fill >"$TMP/fill.csv"
sed -i '2d' "$TMP/fill.csv"    # no explicit set of fill:a: the fill stores it
"$BENCH" -s "shm://$SOCK" -q --fill-on-miss --trace "$TMP/fill.csv" --json "$TMP/tfill.json" \
    >"$TMP/tfill.txt" 2>&1 || { cat "$TMP/tfill.txt" >&2; fail "trace with --fill-on-miss"; }
jcheck "$TMP/tfill.json" "trace fill: the miss filled, later gets hit" \
    'c["fills"] == 1 and r["get"]["hits"] == 2 and r["get"]["misses"] == 1'

# ---- a bad trace: exit 2 with the file and line, nothing run ----
printf '0,k,10,100,1,get,0\n1,k,10,100,1,get,0\n2,k,10,100,1,get\n' >"$TMP/bad.csv"
"$BENCH" -s "shm://$SOCK" --trace "$TMP/bad.csv" >"$TMP/out" 2>"$TMP/err"
rc=$?
[[ $rc == 2 ]] || fail "bad trace: exit $rc, expected 2"
grep -q "bad.csv:3: 6 fields, expected 7" "$TMP/err" || fail "bad trace: message: $(cat "$TMP/err")"
[[ ! -s $TMP/out ]] || fail "bad trace: a report was printed"
: >"$TMP/empty.csv"
"$BENCH" -s "shm://$SOCK" --trace "$TMP/empty.csv" >"$TMP/out" 2>"$TMP/err"
rc=$?
[[ $rc == 2 ]] || fail "empty trace: exit $rc, expected 2"
grep -q "empty.csv: an empty trace" "$TMP/err" || fail "empty trace: message: $(cat "$TMP/err")"

e2e_server_stop
(( FAILS == 0 )) || { echo "$FAILS failure(s)" >&2; exit 1; }
echo "bench_cache_e2e: all passed"
