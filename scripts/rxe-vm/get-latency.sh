#!/usr/bin/env bash
# scripts/rxe-vm/get-latency.sh — GET latency over Soft-RoCE next to perftest,
# in one guest run: a GET's p50 over a READ's (warm GET through the location
# cache; cold GET without it, with both buckets in one doorbell and with the
# connection's own choice, --bucket-reads auto; and ib_read_lat's typical
# READ, on the same vCPUs, in every round: of 2 bytes, the reference, and of
# 128 bytes, the size a warm GET of a 32-byte value reads — its 88-byte item's
# size class; Soft-RoCE's per-byte work (ICRC, copies) is part of a GET's
# time). Given two build folders it alternates their rkv-bench on one server
# (A/B of client changes); the server is the first build's, stopped (SIGSTOP)
# while ib_read_lat runs. Every round ends with one rdma-read-lat process per
# build (perf/rdma-read-lat.c) that interleaves, GET by GET and READ by
# READ, a 2 B and a 128 B READ on QPs set up as ib_read_lat sets them up,
# a 128 B READ through rkv's transport, warm and cold GETs: separate runs on
# this host swing by 1.5x from one to the next, so the GET-to-READ ratios
# are best read inside that one process.
#
# Run from the host:
#   scripts/rxe-vm/run.sh --quiet --timeout 300 -- \
#     "bash $PWD/scripts/rxe-vm/get-latency.sh $PWD/build [$PWD/../other/build]"
# (the guest sees the host's files read-only at the same paths).
set -u
A=${1:?usage: get-latency.sh BUILD_DIR [BUILD_DIR_B]}
B=${2:-}
KEYS=${RKV_LAT_KEYS:-2000}
ROUNDS=${RKV_LAT_ROUNDS:-2}
SECS=${RKV_LAT_SECONDS:-3}
uri="rdma://$RXE_IP:7990"
out=${RXE_OUT:-/tmp}
: > "$out/get-latency-interleaved.log"
# which crc32 rdma_rxe's ICRC runs on (run.sh's RXE_VM_CRC32): it prices bytes
echo "== guest ICRC: $(awk '/^name/ { n = $3 } /^driver/ && n == "crc32" { print $3; exit }' /proc/crypto)"

taskset -c 1 "$A/server/rkv-server" --listen "$uri" --memory 64M --workers 1 --max-conns 16 \
  > "$out/get-latency-server.log" 2>&1 &
pid=$!
for _ in $(seq 100); do "$A/tools/rkv-cli" -s "$uri" ping > /dev/null 2>&1 && break; sleep 0.1; done

# BUILD's program: bench/rkv-bench, perf/rdma-read-lat; tools/ in a build of
# a tree from before they left tools/ (the second build may be one)
prog() { if [ -x "$1/$2" ]; then echo "$1/$2"; else echo "$1/tools/${2#*/}"; fi; }

bench() {  # bench BUILD ARGS...: one rkv-bench run on vCPU 0, its GET and transport lines
  local build=$1; shift
  taskset -c 0 "$(prog "$build" bench/rkv-bench)" -s "$uri" -t 1 -w 1 -k "$KEYS" -r 1 -d "${SECS}s" -q "$@" 2>&1 |
    grep -E "^GET |READs/GET"
}

read_lat() {  # read_lat BYTES: ib_read_lat's line, server on vCPU 1, client on vCPU 0
  taskset -c 1 ib_read_lat -d "$RXE_DEV" -x "$RXE_GID_INDEX" -n 2000 -s "$1" > /dev/null 2>&1 &
  local lat=$!
  sleep 1
  taskset -c 0 ib_read_lat -d "$RXE_DEV" -x "$RXE_GID_INDEX" -n 2000 -s "$1" "$RXE_IP" 2>&1 |
    grep -E "^ *$1 +2000 "
  wait "$lat"
}

interleaved() {  # interleaved BUILD: GETs and READs in one rdma-read-lat process, round-robin
  local tool n=${RKV_LAT_INTERLEAVED:-2000}
  tool=$(prog "$1" perf/rdma-read-lat)
  [ -x "$tool" ] || return 0
  echo "== $1: interleaved, one process on vCPU 0 (READ = own QPs set up as ib_read_lat's)"
  taskset -c 0 "$tool" -d "$RXE_DEV" -x "$RXE_GID_INDEX" -n "$n" \
    --case "READ 2 B: -s 2" --case "READ 128 B: -s 128" \
    --case "rkv transport READ 128 B: --rkv $uri -s 128" \
    --case "warm GET: --get $uri --keys $KEYS" --case "cold GET: --get $uri --keys $KEYS --cold" 2>&1 |
    grep -v granted
}

bench "$A" > /dev/null   # preload every key
for round in $(seq "$ROUNDS"); do
  for b in "$A" $B; do
    for reads in together auto; do
      echo "== round $round, $b: cold GET (--location-cache off --bucket-reads $reads)"
      bench "$b" --location-cache off --no-preload --bucket-reads $reads
    done
    echo "== round $round, $b: warm GET (location cache, 1 s warm-up)"
    bench "$b" --warmup 1s --no-preload
  done
  kill -STOP "$pid"
  echo "== round $round: ib_read_lat, same vCPUs (#bytes #iterations t_min t_max t_typical ...)"
  read_lat 2
  read_lat 128
  kill -CONT "$pid"
  for b in "$A" $B; do interleaved "$b" | tee -a "$out/get-latency-interleaved.log"; done
done
kill "$pid"; wait "$pid"

# The verdict: per interleaved run, each GET's p50 over the same run's
# 2-byte READ p50, and per build their median over the runs (separate
# runs swing by 1.5x; a ratio inside one run does not).
echo "== ratios of p50s within each interleaved run (GET / READ 2 B), and their median"
awk '
  function p50(line,  i, n, f) { n = split(line, f, " "); for (i = 1; i < n; i++) if (f[i] == "p50") return f[i + 1]; return 0 }
  function median(a, n,  i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  /^== .*interleaved/ { b = $2; sub(/:$/, "", b); if (!(b in n)) order[++nb] = b; r = 0 }
  /^READ 2 B /  { r = p50($0) }
  /^warm GET /  { if (r > 0) { k = ++n[b]; wr[b, k] = p50($0) / r } }
  /^cold GET /  { if (r > 0 && n[b]) { cr[b, n[b]] = p50($0) / r; printf "%s run %d: warm %.3f  cold %.3f\n", b, n[b], wr[b, n[b]], cr[b, n[b]] } }
  END {
    for (i = 1; i <= nb; i++) {
      b = order[i]; split("", w); split("", c)
      for (k = 1; k <= n[b]; k++) { w[k] = wr[b, k]; c[k] = cr[b, k] }
      printf "%s: median of %d runs: warm GET %.3f x, cold GET %.3f x a 2-byte READ\n", b, n[b], median(w, n[b]), median(c, n[b])
    }
  }
' "$out/get-latency-interleaved.log"
