#!/usr/bin/env bash
# compare.sh — rkv against memcached and Redis on this host, same workload.
#
# Starts each server bound to this host only (rkv over shm, memcached and
# Redis on 127.0.0.1), drives it with its own standard load generator on the
# same key count, key size (16 B), value size, GET/SET mix, client threads
# and operations in flight per thread, for a bounded time, and prints one
# table: ops/s, p50 and p99 latency, and rkv's ratio to each. Everything it
# starts is stopped on exit (trap), whatever the exit path.
#
#   rkv        build*/tools/rkv-bench  --threads T --window W (batches of W)
#   memcached  memaslap (memcaslap)    -T T -c T*W connections, one request each
#   Redis      redis-benchmark         --threads T -c T -P W (pipeline of W)
#
# How the numbers compare:
#  * memaslap reports latency only as a log2 histogram; its p50/p99 are
#    interpolated inside a power-of-two bucket (marked ~).
#  * redis-benchmark runs GET and SET as separate tests; the mix's ops/s is
#    the harmonic blend (R/get + (1-R)/set)^-1, and its p50/p99 come from the
#    blended latency distribution of the two tests (R x GET + (1-R) x SET).
#  * Redis and memcached latencies include their loopback TCP stack; rkv's
#    GET is a read of shared memory. That is the point of the comparison.
#
# The page: each system's result is also written as a report in rkv-bench's
# --json shape (rkv's is rkv-bench's own; memcached's and Redis's are
# rebuilt from what their tools print, with a "note" saying how, and what is
# interpolated), and `rkv-bench --compare` draws them on one HTML page
# (--html FILE; default compare.html in the rkv build directory):
#  * memcached: memaslap's final Get and Set log2 histograms become the
#    "get" and "put" distributions, each count placed at its power-of-two
#    bucket's upper bound (so its curve is a staircase, biased high).
#  * Redis: redis-benchmark's "Latency by percentile distribution" tables of
#    the GET and SET tests become "get" and "put": the operations between two
#    rows are placed at the later row's latency.
#  They have no per-second series and no transport counters ("-").
#
# The memcached door (--only door): memcached and rkv's tcp:// door driven by
# ONE load generator, rkv-bench --protocol memcache (same generator, same
# report, --connections TCP connections, each thread's batch of --window
# pipelined over its share of them), at the same server threads, with the
# --get-ratio mix; then GETs alone (--get-ratio 1) twice: memcached's over
# the same connections, and librkv's one-sided GETs (rkv-bench over shm,
# same threads and window) on the same rkv server's table, already loaded
# through the door. librkv's writes are RPCs answered by the server's
# worker: in a mix, a thread's window waits on them, so the mix's GET rate
# measures that path, not the one-sided read. Its table gives each row's
# ops/s (all operations, and GETs alone) over memcached's row of the same
# mix. memcached missing: its rows are skipped with a message, the rkv rows
# run.
#
# Missing tools are installed from Debian (apt-get) when running as root,
# unless --no-install.
set -euo pipefail

DURATION=10
THREADS=1
WINDOW=1
KEYS=100000
VALUE_SIZE=32
GET_RATIO=0.9
SERVER_THREADS=1
MEMORY_MB=1024
KEY_SIZE=16            # redis-benchmark's keys are "key:" + 12 digits
BUILD=""
INSTALL=1
ONLY="rkv,memcached,redis"
KEEP=""
HTML=""
CONNECTIONS=""         # --only door: memcache connections; default threads x window

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
    cat <<EOF
Usage: tools/compare.sh [options]
Benchmarks rkv (shm), memcached and Redis on this host with the same workload.

  --duration S        seconds per system (default $DURATION; 1..3600)
  --threads N         client threads (default $THREADS; 1..64)
  --window N          operations in flight per thread (default $WINDOW; 1..1024)
  --keys N            key space (default $KEYS; 1..100000000)
  --value-size N      value bytes (default $VALUE_SIZE; 1..1048576)
  --get-ratio R       share of GETs, rest SETs (default $GET_RATIO; 0..1)
  --server-threads N  rkv workers / memcached threads (default $SERVER_THREADS; Redis: 1)
  --memory MB         memory per server (default $MEMORY_MB)
  --build DIR         rkv build directory (default: newest build*/ with rkv-server)
  --only LIST         systems to run, from rkv,memcached,redis,door (default
                      rkv,memcached,redis; door: memcached and rkv's tcp:// door
                      under rkv-bench --protocol memcache, plus librkv's
                      one-sided GETs on the same table)
  --connections N     door: TCP connections (default threads x window)
  --no-install        do not apt-get install missing tools; skip those systems
  --keep DIR          keep every tool's raw output in DIR
  --html FILE         the HTML page (default: compare.html in the rkv build dir)
  -h, --help          this text
Exit status: 0 when every selected system ran, 1 otherwise, 2 bad arguments.
EOF
}

die_usage() { echo "compare.sh: $*" >&2; echo "(tools/compare.sh --help lists the options)" >&2; exit 2; }
note() { echo "compare.sh: $*" >&2; }

# A whole number in [min, max].
check_int() {
    local flag=$1 v=$2 min=$3 max=$4
    [[ $v =~ ^[0-9]+$ ]] && (( 10#$v >= min && 10#$v <= max )) ||
        die_usage "$flag: '$v' is not a whole number in $min..$max"
}

while (( $# > 0 )); do
    opt=$1
    case $opt in
        -h|--help) usage; exit 0 ;;
        --no-install) INSTALL=0; shift; continue ;;
    esac
    (( $# >= 2 )) || die_usage "$opt needs a value (or is unknown)"
    val=$2
    shift 2
    case $opt in
        --duration) check_int "$opt" "$val" 1 3600; DURATION=$val ;;
        --threads) check_int "$opt" "$val" 1 64; THREADS=$val ;;
        --window) check_int "$opt" "$val" 1 1024; WINDOW=$val ;;
        --keys) check_int "$opt" "$val" 1 100000000; KEYS=$val ;;
        --value-size) check_int "$opt" "$val" 1 1048576; VALUE_SIZE=$val ;;
        --server-threads) check_int "$opt" "$val" 1 256; SERVER_THREADS=$val ;;
        --connections) check_int "$opt" "$val" 1 65536; CONNECTIONS=$val ;;
        --memory) check_int "$opt" "$val" 64 1048576; MEMORY_MB=$val ;;
        --get-ratio)
            [[ $val =~ ^(0(\.[0-9]+)?|1(\.0+)?|\.[0-9]+)$ ]] ||
                die_usage "--get-ratio: '$val' is not a number from 0 to 1"
            GET_RATIO=$val ;;
        --build) [[ -d $val ]] || die_usage "--build: '$val' is not a directory"; BUILD=$(cd "$val" && pwd) ;;
        --only)
            [[ $val =~ ^(rkv|memcached|redis|door)(,(rkv|memcached|redis|door))*$ ]] ||
                die_usage "--only: '$val' is not a comma-separated list of rkv, memcached, redis, door"
            ONLY=$val ;;
        --keep) mkdir -p "$val" || die_usage "--keep: cannot create '$val'"; KEEP=$(cd "$val" && pwd) ;;
        --html) [[ -d $(dirname "$val") ]] || die_usage "--html: no directory for '$val'"; HTML=$val ;;
        *) die_usage "unknown option '$opt'" ;;
    esac
done
(( KEYS <= 10**12 )) || die_usage "--keys too large for 12-digit keys"
wants() { [[ ",$ONLY," == *",$1,"* ]]; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/rkv-compare.XXXXXX")
PIDS=()

# stop PID: ends one server started here (TERM, then KILL after 5 s).
stop() {
    local pid=$1 keep=() p
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    for p in "${PIDS[@]}"; do [[ $p == "$pid" ]] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

# Stops what this script started (by pid), then removes the scratch dir.
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do stop "$pid"; done
    if [[ -n $KEEP ]]; then cp -r "$TMP"/. "$KEEP"/ 2>/dev/null || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# need CMD PACKAGE: is CMD available (installing PACKAGE if allowed)?
need() {
    command -v "$1" >/dev/null 2>&1 && return 0
    if (( INSTALL )) && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        note "installing $2 (for $1) with apt-get"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >"$TMP/apt-$2.log" 2>&1 ||
            { note "apt-get install $2 failed; see below"; tail -5 "$TMP/apt-$2.log" >&2; }
        # Debian's init scripts may have started a system-wide instance: leave it, we use our own port.
    fi
    command -v "$1" >/dev/null 2>&1
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
    local p
    for p in $(seq "$1" $(( $1 + 100 ))); do port_free "$p" && { echo "$p"; return 0; }; done
    return 1
}

# wait_until PID SECONDS CMD...: true once CMD succeeds, false if PID died or time ran out.
wait_until() {
    local pid=$1 secs=$2
    shift 2
    for _ in $(seq $(( secs * 10 ))); do
        "$@" >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}

# start_server NAME LOG READY-CMD... -- SERVER-CMD...: starts the server in
# the background (SERVER_PID), waits until READY-CMD succeeds. On failure it
# shows the log, stops the server and records NAME as skipped.
start_server() {
    local name=$1 log=$2 ready=()
    shift 2
    while [[ $1 != -- ]]; do ready+=("$1"); shift; done
    shift
    "$@" >"$log" 2>&1 &
    SERVER_PID=$!
    PIDS+=("$SERVER_PID")
    wait_until "$SERVER_PID" 30 "${ready[@]}" && return 0
    tail -5 "$log" >&2
    stop "$SERVER_PID"
    skip "$name" "the server did not start (log above)"
    return 1
}

# run_load NAME OUT SECONDS CMD...: runs a load generator with a time bound.
# On failure it shows the output's end, stops SERVER_PID and skips NAME.
run_load() {
    local name=$1 out=$2 secs=$3
    shift 3
    timeout "$secs" "$@" >"$out" 2>&1 && return 0
    tail -5 "$out" >&2
    stop "$SERVER_PID"
    skip "$name" "$(basename "$1") failed or ran past ${secs}s (output above)"
    return 1
}

# Results, one row per system.
NAMES=() OPS=() P50=() P99=() NOTES=()
FAILED=0
record() { NAMES+=("$1"); OPS+=("$2"); P50+=("$3"); P99+=("$4"); NOTES+=("$5"); }
skip() { record "$1" "-" "-" "-" "skipped: $2"; FAILED=1; note "$1: $2"; }

# json_get FILE PATH: a scalar from rkv-bench's pretty-printed JSON ("total.p50_us").
json_get() {
    awk -v want="$2" '
        function joined(   i, s) { s = ""; for (i = 1; i <= depth; i++) s = s stack[i] "."; return s }
        /^[[:space:]]*[}\]]/ { depth--; next }
        NR > 1 && /^[[:space:]]*[{[][[:space:]]*$/ { stack[++depth] = "#"; next }   # an array element that opens
        match($0, /^[[:space:]]*"[^"]+": /) {
            key = substr($0, RSTART, RLENGTH); sub(/^[[:space:]]*"/, "", key); sub(/": $/, "", key)
            rest = substr($0, RSTART + RLENGTH)
            if (rest ~ /^[{[]/) { if (rest !~ /^(\{\}|\[\])/) stack[++depth] = key; next }
            sub(/,$/, "", rest)
            if (joined() key == want) { print rest; exit }
        }' "$1"
}

# ---- reports in rkv-bench's JSON shape, for the page ------------------------

REPORTS=()

# dist_json FILE: "[ns, count], ..." from lines "VALUE_NS COUNT" (counts > 0).
dist_json() {
    awk '$2 > 0 { printf "%s[%d, %d]", n++ ? ", " : "", $1, $2 }' "$1"
}

# kind_json NAME FILE OPS_PER_SEC: one operation kind with its distribution;
# ops, p50, p99 and max (us) are computed here from the distribution.
kind_json() {
    local stats
    stats=$(sort -n "$2" | awk '$2 > 0 { v[++n] = $1; c[n] = $2; t += $2 }
        END { if (t == 0) { print "0 null null null"; exit }
              for (i = 1; i <= n; i++) { s += c[i]; if (!a && s >= 0.5 * t) a = v[i]; if (!b && s >= 0.99 * t) b = v[i] }
              printf "%d %.3f %.3f %.3f\n", t, a / 1000, b / 1000, v[n] / 1000 }')
    read -r ops p50 p99 max <<<"$stats"
    printf '"%s": {"ops": %s, "ops_per_sec": %s, "p50_us": %s, "p99_us": %s, "max_us": %s, "errors": 0, "distribution": [%s]}' \
        "$1" "$ops" "${3:-null}" "$p50" "$p99" "$max" "$(dist_json "$2")"
}

# other_report OUT TOOL LABEL NOTE OPS_PER_SEC GETFILE GETRATE PUTFILE PUTRATE
other_report() {
    {
        printf '{"tool": "%s", "label": "%s", "note": "%s", "loop": "closed", "threads": %s, "window": %s,\n' \
            "$2" "$3" "$4" "$THREADS" "$WINDOW"
        printf ' "keys": %s, "key_size": %s, "value_size": %s, "value_size_max": %s, "duration_s": %s, "ops_per_sec": %s,\n' \
            "$KEYS" "$KEY_SIZE" "$VALUE_SIZE" "$VALUE_SIZE" "$DURATION" "$5"
        printf ' %s,\n %s,\n "timeseries": []}\n' "$(kind_json get "$6" "$7")" "$(kind_json put "$8" "$9")"
    } >"$1"
    REPORTS+=("$1")
}

# ---- rkv ----------------------------------------------------------------

find_rkv() {
    local rel=$1 cand
    if [[ -n $BUILD ]]; then
        [[ -x $BUILD/$rel ]] && echo "$BUILD/$rel"
        return 0
    fi
    cand=$(ls -t "$ROOT"/build*/"$rel" 2>/dev/null | head -n 1 || true)
    [[ -n $cand && -x $cand ]] && echo "$cand"
    return 0
}

run_rkv() {
    local server bench sock
    server=$(find_rkv server/rkv-server)
    bench=$(find_rkv tools/rkv-bench)
    [[ -n $server && -n $bench ]] ||
        { skip rkv "rkv-server or rkv-bench not built; run: meson setup build && ninja -C build"; return; }
    [[ $(dirname "$(dirname "$server")") == "$(dirname "$(dirname "$bench")")" ]] ||
        note "rkv: server and bench come from different build dirs ($server, $bench); pass --build DIR"
    sock=$TMP/rkv.sock
    start_server rkv "$TMP/rkv-server.log" test -S "$sock" -- "$server" --listen "shm://$sock" \
        --memory "${MEMORY_MB}M" --workers "$SERVER_THREADS" --log-level warn || return 0
    note "rkv: $bench, ${DURATION}s"
    run_load rkv "$TMP/rkv-bench.txt" $(( DURATION * 3 + 120 )) "$bench" -s "shm://$sock" \
        --threads "$THREADS" --window "$WINDOW" --duration "$DURATION" --keys "$KEYS" \
        --key-size "$KEY_SIZE" --value-size "$VALUE_SIZE" --get-ratio "$GET_RATIO" \
        --json "$TMP/rkv.json" --timeseries "$TMP/rkv-timeseries.csv" --hist-file "$TMP/rkv" -q || return 0
    stop "$SERVER_PID"
    REPORTS+=("$TMP/rkv.json")
    record rkv "$(json_get "$TMP/rkv.json" ops_per_sec)" "$(json_get "$TMP/rkv.json" total.p50_us)" \
        "$(json_get "$TMP/rkv.json" total.p99_us)" \
        "$(awk -v r="$(json_get "$TMP/rkv.json" reads_per_get)" -v t="$(json_get "$TMP/rkv.json" round_trips_per_get)" \
            'BEGIN { printf "shm; %.2f READs/GET, %.2f round trips/GET", r, t }')"
}

# ---- memcached (memaslap) -------------------------------------------------

# p50 and p99 (us) from memaslap's final "Total Statistics (N events)" log2
# histogram: bucket b holds latencies in (2^(b-1), 2^b] us; interpolated.
memaslap_percentiles() {
    awk '
        /^Total Statistics \(/ { n = 0; total = 0; inblk = 1; delete cnt; next }
        inblk && /^[[:space:]]*$/ { inblk = 0 }
        inblk && /^[[:space:]]+[0-9]+:/ {
            b = $1; sub(":", "", b)
            for (i = 2; i <= NF; i++) { cnt[b + i - 2] += $i; total += $i; if (b + i - 2 > maxb) maxb = b + i - 2 }
        }
        function pct(q,   want, cum, k, lo, hi) {
            want = q * total; cum = 0
            for (k = 0; k <= maxb; k++) {
                if (cnt[k] > 0 && cum + cnt[k] >= want) {
                    lo = k == 0 ? 0 : 2 ^ (k - 1); hi = 2 ^ k
                    return lo + (hi - lo) * (want - cum) / cnt[k]
                }
                cum += cnt[k]
            }
            return 2 ^ maxb
        }
        END { if (total == 0) exit 1; printf "%.1f %.1f\n", pct(0.50), pct(0.99) }' "$1"
}

# memaslap_dist Get|Set FILE: "VALUE_NS COUNT" lines from the last "<Name>
# Statistics (" block's log2 histogram, bucket b at its upper bound 2^b us.
memaslap_dist() {
    awk -v name="$1" '
        $0 ~ "^" name " Statistics \\(" { inblk = 1; delete cnt; next }
        inblk && /^[[:space:]]*$/ { inblk = 0 }
        inblk && /^[A-Z][a-z]+ Statistics/ { inblk = 0 }
        inblk && /^[[:space:]]+[0-9]+:/ {
            b = $1; sub(":", "", b)
            for (i = 2; i <= NF; i++) cnt[b + i - 2] += $i
        }
        END { for (k in cnt) if (cnt[k] > 0) printf "%d %d\n", 2 ^ k * 1000, cnt[k] }' "$2"
}

run_memcached() {
    local slap port conc win out pcts set_ratio
    need memcached memcached || { skip memcached "memcached not installed (apt-get install memcached)"; return; }
    slap=$(command -v memcaslap || command -v memaslap || true)
    if [[ -z $slap ]]; then
        need memcaslap libmemcached-tools || true
        slap=$(command -v memcaslap || command -v memaslap || true)
    fi
    [[ -n $slap ]] || { skip memcached "memaslap not installed (apt-get install libmemcached-tools)"; return; }
    port=$(free_port 21211) || { skip memcached "no free port near 21211"; return; }
    start_server memcached "$TMP/memcached.log" bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" -- \
        memcached -l 127.0.0.1 -p "$port" -U 0 -m "$MEMORY_MB" -t "$SERVER_THREADS" -c 4096 \
        -u "$(id -un)" || return 0
    conc=$(( THREADS * WINDOW ))
    # memaslap takes its per-connection key window only in units of 1024 ("3k").
    win=$(( (KEYS / conc + 512) / 1024 )); (( win >= 1 )) || win=1
    set_ratio=$(awk -v r="$GET_RATIO" 'BEGIN { printf "%.4f", 1 - r }')
    printf 'key\n%d %d 1\nvalue\n%d %d 1\ncmd\n0 %s\n1 %s\n' "$KEY_SIZE" "$KEY_SIZE" \
        "$VALUE_SIZE" "$VALUE_SIZE" "$set_ratio" "$GET_RATIO" >"$TMP/memaslap.cfg"
    out=$TMP/memaslap.txt
    note "memcached: $slap, ${DURATION}s"
    run_load memcached "$out" $(( DURATION + 60 )) "$slap" -s "127.0.0.1:$port" -T "$THREADS" \
        -c "$conc" -t "${DURATION}s" -S "${DURATION}s" -F "$TMP/memaslap.cfg" \
        --win_size="${win}k" || return 0
    stop "$SERVER_PID"
    local tps
    tps=$(awk '/^Run time:/ { for (i = 1; i <= NF; i++) if ($i == "TPS:") print $(i + 1) }' "$out")
    pcts=$(memaslap_percentiles "$out") || pcts="- -"
    [[ -n $tps ]] || { skip memcached "could not find TPS in memaslap's output ($out)"; return; }
    memaslap_dist Get "$out" >"$TMP/memcached-get.dist"
    memaslap_dist Set "$out" >"$TMP/memcached-set.dist"
    other_report "$TMP/memcached.json" memaslap memcached \
        "memaslap prints only log2 latency histograms: each count is placed at its power-of-two bucket's upper bound (interpolated, biased high); TCP loopback, $conc connection(s)" \
        "$tps" "$TMP/memcached-get.dist" null "$TMP/memcached-set.dist" null
    record memcached "$tps" "~${pcts% *}" "~${pcts#* }" \
        "TCP loopback; memaslap, $conc connection(s), $(( win * 1024 * conc )) keys"
}

# ---- Redis (redis-benchmark) -----------------------------------------------

# Every key redis-benchmark's -r draws ("key:" + 12 digits), with a value, as RESP.
redis_preload() {
    awk -v n="$KEYS" -v vs="$VALUE_SIZE" 'BEGIN {
        v = ""; for (i = 0; i < vs; i++) v = v "x"
        for (i = 0; i < n; i++) {
            k = sprintf("key:%012d", i)
            printf "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", length(k), k, vs, v
        }
    }' | redis-cli -p "$1" --pipe >"$TMP/redis-preload.txt" 2>&1
}

# redis_args TEST N [extra...]: sets RB to the redis-benchmark command line.
redis_args() {
    local test=$1 n=$2
    shift 2
    RB=(redis-benchmark -p "$RPORT" -t "$test" -n "$n" -r "$KEYS" -d "$VALUE_SIZE" -P "$WINDOW"
        -c "$THREADS")
    (( THREADS > 1 )) && RB+=(--threads "$THREADS")
    RB+=("$@")
}

# The throughput line of a full (non-csv) redis-benchmark report.
redis_rps() { awk '/throughput summary:/ { print $3 }' "$1" | tail -n 1; }

# Blend two reports' percentile distributions: prints "p50 p99" in us.
redis_blend() {
    awk -v r="$GET_RATIO" '
        FNR == 1 { file++ }
        /^Latency by percentile distribution/ { on = 1; next }
        on && /^[[:space:]]*$/ { on = 0 }
        on && /<=/ {
            pct = $1; sub("%", "", pct); ms = $3
            n[file]++; x[file, n[file]] = ms * 1000; f[file, n[file]] = pct / 100
            xs[ms * 1000] = 1
        }
        function cdf(k, v,   i, best) {   # fraction of file k at or below v
            best = 0
            for (i = 1; i <= n[k]; i++) if (x[k, i] <= v && f[k, i] > best) best = f[k, i]
            return best
        }
        END {
            m = 0; for (v in xs) vals[++m] = v + 0
            asort_n(vals, m)
            p50 = p99 = "-"
            for (i = 1; i <= m; i++) {
                F = r * cdf(1, vals[i]) + (1 - r) * cdf(2, vals[i])
                if (p50 == "-" && F >= 0.5) p50 = vals[i]
                if (p99 == "-" && F >= 0.99) { p99 = vals[i]; break }
            }
            if (p99 == "-") p99 = vals[m]
            printf "%s %s\n", p50, p99
        }
        function asort_n(a, k,   i, j, t) {   # insertion sort, numeric
            for (i = 2; i <= k; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
        }' "$1" "$2"
}

# redis_dist FILE: "VALUE_NS COUNT" lines from redis-benchmark's percentile
# table: each row's new operations at that row's latency.
redis_dist() {
    awk '/^Latency by percentile distribution/ { on = 1; prev = 0; next }
        on && /^[[:space:]]*$/ { on = 0 }
        on && /<=/ && /cumulative count/ {
            ms = $3; c = $NF; sub(/\)$/, "", c); c += 0
            if (c > prev) printf "%d %d\n", ms * 1e6, c - prev
            prev = c
        }' "$1"
}

run_redis() {
    local get_cal set_cal n_get n_set get_rps set_rps mix blend
    need redis-server redis-server || { skip redis "redis-server not installed (apt-get install redis-server)"; return; }
    need redis-benchmark redis-tools || { skip redis "redis-benchmark not installed (apt-get install redis-tools)"; return; }
    RPORT=$(free_port 26379) || { skip redis "no free port near 26379"; return; }
    start_server redis "$TMP/redis-server.log" redis-cli -p "$RPORT" ping -- \
        redis-server --bind 127.0.0.1 --port "$RPORT" --save '' --appendonly no --dir "$TMP" \
        --maxmemory "${MEMORY_MB}mb" --protected-mode yes --daemonize no || return 0
    note "redis: preloading $KEYS keys, then redis-benchmark GET and SET, ~${DURATION}s"
    redis_preload "$RPORT" || note "redis: preload reported a problem (see $TMP/redis-preload.txt)"
    # Calibrate so the two tests together last about --duration.
    redis_args get 20000 --csv
    timeout 60 "${RB[@]}" >"$TMP/redis-cal-get.txt" 2>&1 || true
    redis_args set 20000 --csv
    timeout 60 "${RB[@]}" >"$TMP/redis-cal-set.txt" 2>&1 || true
    get_cal=$(awk -F'","' '/^"GET/ { print $2 }' "$TMP/redis-cal-get.txt")
    set_cal=$(awk -F'","' '/^"SET/ { print $2 }' "$TMP/redis-cal-set.txt")
    [[ -n $get_cal && -n $set_cal ]] || { stop "$SERVER_PID"; skip redis "redis-benchmark calibration failed ($TMP)"; return; }
    n_get=$(awk -v c="$get_cal" -v d="$DURATION" -v r="$GET_RATIO" 'BEGIN { n = int(c * d * r); print (n < 1000 ? 1000 : n) }')
    n_set=$(awk -v c="$set_cal" -v d="$DURATION" -v r="$GET_RATIO" 'BEGIN { n = int(c * d * (1 - r)); print (n < 1000 ? 1000 : n) }')
    redis_args get "$n_get"
    run_load redis "$TMP/redis-get.txt" $(( DURATION * 3 + 60 )) "${RB[@]}" || return 0
    redis_args set "$n_set"
    run_load redis "$TMP/redis-set.txt" $(( DURATION * 3 + 60 )) "${RB[@]}" || return 0
    stop "$SERVER_PID"
    get_rps=$(redis_rps "$TMP/redis-get.txt")
    set_rps=$(redis_rps "$TMP/redis-set.txt")
    [[ -n $get_rps && -n $set_rps ]] || { skip redis "no throughput in redis-benchmark's output"; return; }
    mix=$(awk -v g="$get_rps" -v s="$set_rps" -v r="$GET_RATIO" 'BEGIN { printf "%.1f", 1 / (r / g + (1 - r) / s) }')
    blend=$(redis_blend "$TMP/redis-get.txt" "$TMP/redis-set.txt")
    redis_dist "$TMP/redis-get.txt" >"$TMP/redis-get.dist"
    redis_dist "$TMP/redis-set.txt" >"$TMP/redis-set.dist"
    other_report "$TMP/redis.json" redis-benchmark redis \
        "redis-benchmark runs GET and SET as two tests; their percentile tables become the get and put distributions, the operations between two rows placed at the later row's latency (interpolated); ops/s is the mix's harmonic blend; TCP loopback, pipeline $WINDOW" \
        "$mix" "$TMP/redis-get.dist" "$get_rps" "$TMP/redis-set.dist" "$set_rps"
    record redis "$mix" "${blend% *}" "${blend#* }" "TCP loopback; GET $get_rps/s, SET $set_rps/s, pipeline $WINDOW"
}

# ---- the memcached door: one load generator for memcached and rkv -------------

# door_record NAME JSON NOTE [MIX]: one row; MIX is its GET ratio (default --get-ratio).
DOOR_NAMES=() DOOR_OPS=() DOOR_GETS=() DOOR_P50=() DOOR_P99=() DOOR_NOTES=() DOOR_MIX=()
door_record() {
    DOOR_NAMES+=("$1") DOOR_MIX+=("${4:-$GET_RATIO}")
    if [[ -n $2 ]]; then
        DOOR_OPS+=("$(json_get "$2" ops_per_sec)") DOOR_GETS+=("$(json_get "$2" get.ops_per_sec)")
        DOOR_P50+=("$(json_get "$2" total.p50_us)") DOOR_P99+=("$(json_get "$2" total.p99_us)")
        REPORTS+=("$2")
    else
        DOOR_OPS+=(-) DOOR_GETS+=(-) DOOR_P50+=(-) DOOR_P99+=(-)
        FAILED=1
    fi
    DOOR_NOTES+=("$3")
}

# door_load NAME JSON URI RATIO [rkv-bench flags...]: the common load with
# GET ratio RATIO, one run.
door_load() {
    local name=$1 json=$2 uri=$3 ratio=$4
    shift 4
    run_load "$name" "${json%.json}.txt" $(( DURATION * 3 + 120 )) "$DOOR_BENCH" -s "$uri" "$@" \
        --threads "$THREADS" --window "$WINDOW" --duration "$DURATION" --keys "$KEYS" \
        --key-size "$KEY_SIZE" --value-size "$VALUE_SIZE" --get-ratio "$ratio" \
        --json "$json" -q
}

run_door() {
    local server port sock conns=${CONNECTIONS:-$(( THREADS * WINDOW ))}
    local mc=(--protocol memcache --connections "$conns")
    server=$(find_rkv server/rkv-server)
    DOOR_BENCH=$(find_rkv tools/rkv-bench)
    if [[ -z $server || -z $DOOR_BENCH ]]; then
        door_record "rkv door" "" "skipped: rkv-server or rkv-bench not built"
        return
    fi
    if need memcached memcached && port=$(free_port 21211); then
        note "door: memcached, rkv-bench --protocol memcache, $conns connections, ${DURATION}s"
        if start_server memcached "$TMP/door-memcached.log" bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" -- \
               memcached -l 127.0.0.1 -p "$port" -U 0 -m "$MEMORY_MB" -t "$SERVER_THREADS" -c 4096 \
               -u "$(id -un)" &&
           door_load memcached "$TMP/door-memcached.json" "tcp://127.0.0.1:$port" "$GET_RATIO" "${mc[@]}"; then
            door_record memcached "$TMP/door-memcached.json" "-t $SERVER_THREADS; TCP loopback, $conns connections"
            if door_load "memcached GETs" "$TMP/door-memcached-get.json" "tcp://127.0.0.1:$port" 1 \
                   "${mc[@]}" --no-preload; then
                door_record "memcached GETs" "$TMP/door-memcached-get.json" "GETs alone, the same connections and table" 1
            else
                door_record "memcached GETs" "" "skipped: did not run (output above)" 1
            fi
            stop "$SERVER_PID"
        else
            door_record memcached "" "skipped: did not run (output above)"
        fi
    else
        note "door: memcached is not installed (apt-get install memcached, or tools/install-deps.sh): its rows are skipped"
        door_record memcached "" "skipped: not installed"
    fi
    port=$(free_port 21311) || { door_record "rkv tcp door" "" "skipped: no free port near 21311"; return; }
    sock=$TMP/door.sock
    note "door: rkv's tcp:// door, then librkv over shm on the same table, ${DURATION}s each"
    start_server "rkv tcp door" "$TMP/door-rkv.log" test -S "$sock" -- "$server" --listen "shm://$sock" \
        --listen "tcp://127.0.0.1:$port" --memory "${MEMORY_MB}M" --workers "$SERVER_THREADS" \
        --log-level warn || { door_record "rkv tcp door" "" "skipped: the server did not start"; return; }
    if door_load "rkv tcp door" "$TMP/door-rkv-tcp.json" "tcp://127.0.0.1:$port" "$GET_RATIO" "${mc[@]}"; then
        door_record "rkv tcp door" "$TMP/door-rkv-tcp.json" "--workers $SERVER_THREADS; TCP loopback, $conns connections"
    else
        door_record "rkv tcp door" "" "skipped: did not run (output above)"
        return
    fi
    if door_load "rkv librkv" "$TMP/door-rkv-shm.json" "shm://$sock" 1 --no-preload; then
        door_record "rkv librkv" "$TMP/door-rkv-shm.json" "one-sided GETs alone over shm, the table the door loaded" 1
    else
        door_record "rkv librkv" "" "skipped: did not run (output above)" 1
    fi
    stop "$SERVER_PID"
}

# The door's table: every row over memcached's row of the same mix (all
# ops, and GETs alone): the door over memcached's --get-ratio run, librkv's
# GETs over memcached's GETs.
door_table() {
    local base="" base_get="" i j ratio gratio
    printf '\nThe memcached door: %s threads x window %s, %s server threads, %s keys of %s B, %s B values, GET ratio %s\n' \
        "$THREADS" "$WINDOW" "$SERVER_THREADS" "$KEYS" "$KEY_SIZE" "$VALUE_SIZE" "$GET_RATIO"
    printf '%-14s %5s %12s %12s %9s %9s %11s %11s  %s\n' system mix "ops/s" "GET ops/s" "p50(us)" "p99(us)" \
        "x memcached" "GET x mc" notes
    for i in "${!DOOR_NAMES[@]}"; do
        ratio=- gratio=- base="" base_get=""
        for j in "${!DOOR_NAMES[@]}"; do
            [[ ${DOOR_NAMES[$j]} == memcached* && ${DOOR_MIX[$j]} == "${DOOR_MIX[$i]}" && ${DOOR_OPS[$j]} != - ]] &&
                base=${DOOR_OPS[$j]} base_get=${DOOR_GETS[$j]}
        done
        if [[ -n $base && ${DOOR_OPS[$i]} != - ]]; then
            ratio=$(awk -v a="${DOOR_OPS[$i]}" -v b="$base" 'BEGIN { printf "%.2fx", a / b }')
            gratio=$(awk -v a="${DOOR_GETS[$i]}" -v b="$base_get" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')
        fi
        printf '%-14s %5s %12s %12s %9s %9s %11s %11s  %s\n' "${DOOR_NAMES[$i]}" "${DOOR_MIX[$i]}" \
            "$(awk -v v="${DOOR_OPS[$i]}" 'BEGIN { if (v == "-") print "-"; else printf "%.0f", v }')" \
            "$(awk -v v="${DOOR_GETS[$i]}" 'BEGIN { if (v == "-") print "-"; else printf "%.0f", v }')" \
            "$(fmt_us "${DOOR_P50[$i]}")" "$(fmt_us "${DOOR_P99[$i]}")" "$ratio" "$gratio" "${DOOR_NOTES[$i]}"
    done
}

# ---- run and report -------------------------------------------------------

echo "compare.sh: $DURATION s each; $THREADS client thread(s), $WINDOW in flight per thread;" \
     "$KEYS keys of $KEY_SIZE B, values $VALUE_SIZE B, GET ratio $GET_RATIO;" \
     "server threads $SERVER_THREADS, ${MEMORY_MB} MiB; $(nproc) CPUs" >&2
wants rkv && run_rkv
wants memcached && run_memcached
wants redis && run_redis
wants door && run_door

rkv_ops="" rkv_p50="" rkv_p99=""
for i in "${!NAMES[@]}"; do
    if [[ ${NAMES[$i]} == rkv && ${OPS[$i]} != - ]]; then
        rkv_ops=${OPS[$i]} rkv_p50=${P50[$i]} rkv_p99=${P99[$i]}
    fi
done

# Latency for the table: 2 decimals below 10 us, 1 above; keeps a leading "~".
fmt_us() {
    local v=$1 mark=""
    [[ $v == - ]] && { echo -; return; }
    [[ $v == \~* ]] && { mark="~"; v=${v#\~}; }
    awk -v v="$v" -v m="$mark" 'BEGIN { printf "%s%.*f", m, (v < 10 ? 2 : 1), v }'
}

(( ${#NAMES[@]} > 0 )) && printf '\n%-10s %12s %10s %10s %13s %13s %13s  %s\n' system "ops/s" "p50(us)" "p99(us)" \
    "rkv x ops/s" "their/rkv p50" "their/rkv p99" notes
for i in "${!NAMES[@]}"; do
    ratio="-" r50="-" r99="-"
    if [[ -n $rkv_ops && ${OPS[$i]} != - ]]; then
        ratio=$(awk -v a="$rkv_ops" -v b="${OPS[$i]}" 'BEGIN { printf "%.2fx", a / b }')
        r50=$(awk -v a="$rkv_p50" -v b="${P50[$i]#\~}" 'BEGIN { if (a > 0 && b != "-") printf "%.1fx", b / a; else print "-" }')
        r99=$(awk -v a="$rkv_p99" -v b="${P99[$i]#\~}" 'BEGIN { if (a > 0 && b != "-") printf "%.1fx", b / a; else print "-" }')
    fi
    ops=${OPS[$i]}
    [[ $ops == - ]] || ops=$(awk -v v="$ops" 'BEGIN { printf "%.0f", v }')
    printf '%-10s %12s %10s %10s %13s %13s %13s  %s\n' "${NAMES[$i]}" "$ops" "$(fmt_us "${P50[$i]}")" \
        "$(fmt_us "${P99[$i]}")" \
        "$ratio" "$r50" "$r99" "${NOTES[$i]}"
done
(( ${#NAMES[@]} > 0 )) && echo "(~: interpolated from memaslap's log2 histogram. Ratios: rkv's ops/s over theirs; their latency over rkv's.)"
(( ${#DOOR_NAMES[@]} > 0 )) && door_table

# The page: every report that exists, drawn by rkv-bench.
bench=$(find_rkv tools/rkv-bench)
if (( ${#REPORTS[@]} > 0 )) && [[ -n $bench ]]; then
    [[ -n $HTML ]] || HTML=$(dirname "$(dirname "$bench")")/compare.html
    if "$bench" --compare "${REPORTS[@]}" --html "$HTML"; then
        echo "compare.sh: the page: $HTML" >&2
    else
        note "rkv-bench --compare failed; the reports are in ${KEEP:-$TMP (use --keep DIR to keep them)}"
        FAILED=1
    fi
fi
exit $FAILED
