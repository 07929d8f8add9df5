#!/usr/bin/env bash
# tools_e2e.sh — rkv-cli and rkv-bench against a real rkv-server over shm:
# outputs, exit statuses, binary-safe stdin mode, the --json report, and that
# --verify passes on a correct server and fails on a value it did not write;
# rkv-bench --protocol memcache against the same server's tcp:// door.
# Usage: tools_e2e.sh RKV_SERVER RKV_BENCH RKV_CLI
set -u
SERVER=$1 BENCH=$2 CLI=$3
# shellcheck source=e2e.sh
. "$(dirname "$0")/e2e.sh"
e2e_init tools-e2e

# expect RC DESCRIPTION CMD...: runs CMD (stdout/stderr to $TMP/out, $TMP/err), checks its status.
expect() {
    local want=$1 what=$2 rc
    shift 2
    "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
    [[ $rc == "$want" ]] || fail "$what: exit $rc, expected $want (stderr: $(head -c 300 "$TMP/err"))"
}
out_is() { [[ $(cat "$TMP/out") == "$1" ]] || fail "$2: stdout '$(head -c 200 "$TMP/out")', expected '$1'"; }
err_is() { [[ $(cat "$TMP/err") == "$1" ]] || fail "$2: stderr '$(head -c 300 "$TMP/err")', expected '$1'"; }
err_has() { grep -q -- "$1" "$TMP/err" || fail "$2: stderr lacks '$1': $(head -c 300 "$TMP/err")"; }
out_has() { grep -q -- "$1" "$TMP/out" || fail "$2: stdout lacks '$1'"; }

# a tcp door on a port drawn from the pid; a port someone holds makes the
# server exit, and the next is tried
for attempt in $(seq 0 19); do
    PORT=$(( 20000 + ($$ * 131 + 4049 + attempt * 7919) % 40000 ))
    e2e_server "$SERVER" --listen "tcp://127.0.0.1:$PORT" --memory 64M --log-level warn && break
done
e2e_started
C=("$CLI" -s "shm://$SOCK")

# ---- rkv-cli ----
expect 0 "ping" "${C[@]}" ping;                       out_is "PONG" "ping"
expect 0 "put" "${C[@]}" put greeting "hello world";  out_is "" "put prints nothing when not a tty"
expect 0 "get" "${C[@]}" get greeting;                out_is "hello world" "get"
[[ $(wc -c <"$TMP/out") == 12 ]] || fail "get: value + exactly one newline"
expect 1 "get miss" "${C[@]}" get nosuchkey;          out_is "" "get miss stdout"
err_has "rkv-cli: get nosuchkey: not found" "get miss message"
expect 1 "put --add existing" "${C[@]}" put greeting x --add
expect 1 "put --replace absent" "${C[@]}" put absent x --replace
expect 0 "get --meta" "${C[@]}" get greeting --meta
version=$(sed -n 's/^version \([0-9]*\) .*/\1/p' "$TMP/err")
[[ -n $version ]] || fail "get --meta: no version on stderr"
expect 1 "put --cas stale" "${C[@]}" put greeting new --cas $((version + 1000))
expect 0 "put --cas current" "${C[@]}" put greeting new --cas "$version" --flags 9
expect 0 "get after cas" "${C[@]}" get greeting --meta; out_is "new" "cas value"
err_has "flags 9" "flags stored"
expect 0 "put swr" "${C[@]}" put swr v --ttl 100
expect 0 "get --recache fresh" "${C[@]}" get swr --recache 10; err_is "recache" "fresh: no marks"
expect 0 "get --recache due" "${C[@]}" get swr --recache 1000; err_is "recache won" "due: won"
expect 0 "get --recache again" "${C[@]}" get swr --recache 1000; err_is "recache taken" "taken"
out_is "v" "get --recache value"
expect 0 "put counter" "${C[@]}" put counter 10
expect 0 "incr" "${C[@]}" incr counter 5;             out_is "15" "incr"
expect 0 "decr" "${C[@]}" decr counter 100;           out_is "0" "decr saturates"
expect 1 "incr absent" "${C[@]}" incr nocounter
expect 2 "incr not a number" "${C[@]}" incr greeting
expect 0 "del" "${C[@]}" del greeting
expect 1 "del again" "${C[@]}" del greeting
expect 0 "stats" "${C[@]}" stats
grep -qE '^[a-z_]+ [0-9]' "$TMP/out" || fail "stats: no 'name value' lines"
grep -qE '^max_value_len [0-9]+$' "$TMP/out" || fail "stats: no max_value_len line"
expect 0 "put --ttl never" "${C[@]}" put forever v --ttl never
expect 2 "usage: unknown command" "${C[@]}" fetch x;  err_has "unknown command 'fetch'" "usage message"
expect 2 "usage: no server" "$CLI" get x
expect 2 "connection refused" "$CLI" -s "shm://$TMP/none.sock" get x
err_is "rkv-cli: get: shm://$TMP/none.sock: cannot connect: No such file or directory; is rkv-server running with this shm listen path?" "connection message (the URI once)"

# stdin mode: binary key and value, comments, a miss and a bad line (worst status 2)
printf '# a comment\nput "bin\\x00key" "a\\x00b\\xff"\nget "bin\\x00key"\nget nokey\nbogus\nping\n' >"$TMP/in"
"${C[@]}" <"$TMP/in" >"$TMP/out" 2>"$TMP/err"
rc=$?
[[ $rc == 2 ]] || fail "stdin mode: exit $rc, expected 2 (worst line)"
printf 'a\0b\377\nPONG\n' | cmp -s - "$TMP/out" || fail "stdin mode: binary value or order wrong: $(od -c "$TMP/out" | head -3)"
err_has "line 5: unknown command 'bogus'" "stdin line number"

# ---- rkv-bench ----
B=("$BENCH" -s "shm://$SOCK" -q)
expect 0 "bench verify json" "${B[@]}" --verify --threads 2 --window 4 --duration 1 --keys 2000 \
    --value-size 16-300 --delete-ratio 0.05 --json "$TMP/b.json"
for f in '"ops_per_sec": [0-9]' '"p50_us": [0-9]' '"p99_us": [0-9]' '"reads_per_get": [0-9]' \
         '"round_trips_per_get": [0-9]' '"doorbells_per_request": [0-9]' '"errors": 0,' \
         '"verify_failures": 0,' '"inline_share": [0-9]' '"servers": \['; do
    grep -qE "$f" "$TMP/b.json" || fail "bench json: no match for $f"
done
out_has "GET" "bench text report"
ops=$(sed -n 's/^  "ops": \([0-9]*\),/\1/p' "$TMP/b.json")
[[ ${ops:-0} -gt 0 ]] || fail "bench: no ops in its 1 s run (\"ops\": ${ops:-none})"   # how many is up to the scheduler

# --hist-file and --timeseries: HdrHistogram text per kind, a CSV per second
expect 0 "bench hist + timeseries" "${B[@]}" --rate 3000 --duration 1.5 --keys 500 \
    --hist-file "$TMP/h" --timeseries "$TMP/ts.csv"
for k in get put total; do
    head -1 "$TMP/h-$k.hgrm" | grep -qE '^ +Value +Percentile TotalCount 1/\(1-Percentile\)$' ||
        fail "hist-file: $TMP/h-$k.hgrm has no HdrHistogram header"
    grep -q '^#\[Buckets =           30, SubBuckets     =          256\]$' "$TMP/h-$k.hgrm" ||
        fail "hist-file: $k footer"
done
[[ ! -e $TMP/h-delete.hgrm ]] || fail "hist-file: a file for a kind that did not run"
head -1 "$TMP/ts.csv" | grep -q '^time_s,interval_s,get_ops_per_s,get_p50_us,get_p99_us,get_errors,' ||
    fail "timeseries: header"
[[ $(wc -l <"$TMP/ts.csv") -ge 2 ]] || fail "timeseries: no rows"
out_has "Open loop: target 3000 ops/s" "open-loop line in the report"
expect 2 "bench timeseries unwritable" "${B[@]}" --requests 10 --timeseries "$TMP/no/such/dir.csv"
err_has "--timeseries: cannot write" "timeseries path message"
expect 1 "bench hist-file unwritable" "${B[@]}" --requests 10 --keys 10 --hist-file "$TMP/no/such/dir/h"
err_has "--hist-file: cannot write" "hist-file path message"
expect 1 "compare a missing report" "$BENCH" --compare "$TMP/none.json" --html "$TMP/x.html"
err_has "--compare: cannot read" "compare message"

expect 0 "bench workload F" "${B[@]}" --workload F --verify --requests 2000 --keys 500
expect 0 "bench workload D" "${B[@]}" --workload D --verify --requests 2000 --keys 500
expect 0 "bench json to stdout" "${B[@]}" --requests 100 --keys 100 --json -
head -c 1 "$TMP/out" | grep -q '{' || fail "bench --json -: stdout is not the JSON"
err_has "Type" "bench --json -: text report on stderr"

# a value rkv-bench did not write must fail --verify (keys k0..k9)
expect 0 "plant a foreign value" "${C[@]}" put k5 "this value was not written by rkv-bench"
expect 1 "bench verify catches it" "${B[@]}" --verify --no-preload --get-ratio 1 --keys 10 \
    --key-size 2 --requests 300 --seed 3
err_has "key k5 (index 5)" "verify failure description"
err_has "the run FAILED" "verify verdict"

expect 2 "bench bad flag" "$BENCH" -s "shm://$SOCK" --threads 0
err_has "--threads: '0' is not a whole number in 1..1024" "bench usage message"
expect 1 "bench no server" "$BENCH" -s "shm://$TMP/none.sock" -d 1 -q
# every child fails to connect: the parent says so and exits 1 (it once died of
# SIGPIPE telling the dead children to stop)
expect 1 "bench processes no server" "$BENCH" -s "shm://$TMP/none.sock" -P 2 -d 1 -q
err_has "cannot connect" "processes: the children's message"

# ---- rkv-bench --protocol memcache: the same generator over the tcp door ----
M=("$BENCH" --protocol memcache -s "tcp://127.0.0.1:$PORT" -q)
expect 0 "bench memcache verify json" "${M[@]}" --verify --threads 2 --window 8 --connections 4 \
    --duration 1 --keys 2000 --value-size 16-3000 --delete-ratio 0.05 --json "$TMP/m.json"
for f in '"errors": 0,' '"verify_failures": 0,' '"protocol": "memcache",' '"connections": 4,' "\"tcp://127.0.0.1:$PORT\""; do
    grep -qE "$f" "$TMP/m.json" || fail "bench memcache json: no match for $f"
done
ops=$(sed -n 's/^  "ops": \([0-9]*\),/\1/p' "$TMP/m.json")
[[ ${ops:-0} -gt 0 ]] || fail "bench memcache: no ops in its 1 s run"
expect 0 "bench memcache workload F (gets + cas)" "${M[@]}" --workload F --verify --requests 2000 --keys 500
expect 0 "bench memcache one op in flight" "${M[@]}" --verify --requests 500 --keys 100
# what librkv wrote, read through the tcp door: a foreign value fails --verify
expect 0 "plant a foreign value for memcache" "${C[@]}" put k7 "not rkv-bench's either"
expect 1 "bench memcache verify catches it" "${M[@]}" --verify --no-preload --get-ratio 1 --keys 10 \
    --key-size 2 --requests 300 --seed 3
err_has "key k7 (index 7)" "memcache verify failure description"
expect 2 "bench memcache with an shm server" "$BENCH" --protocol memcache -s "shm://$SOCK"
err_has "give one -s tcp://HOST:PORT" "memcache needs tcp"
expect 2 "bench tcp without memcache" "$BENCH" -s "tcp://127.0.0.1:$PORT"
err_has "add --protocol memcache" "tcp needs memcache"
expect 2 "bench connections uneven" "${M[@]}" --threads 3 --window 4 --connections 4
err_has "give each of the 3 client threads the same number" "connections message"
expect 2 "bench connections without memcache" "${B[@]}" --connections 4
expect 2 "bench protocol unknown" "${B[@]}" --protocol redis
err_has "--protocol: 'redis' is not rkv or memcache" "protocol message"
expect 1 "bench memcache refused" "$BENCH" --protocol memcache -s "tcp://127.0.0.1:1" -d 1 -q
err_has "connection 1 of 1: Connection refused" "memcache connect message"

e2e_server_stop
if (( FAILS > 0 )); then echo "$FAILS check(s) failed" >&2; exit 1; fi
echo "all tools checks passed"
