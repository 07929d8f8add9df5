#!/usr/bin/env bash
# tools/rxe-vm/get-latency.sh — GET latency over Soft-RoCE next to perftest,
# in one guest run: the issue-11 measurement (warm GET through the location
# cache; cold GET without it, with both buckets in one doorbell and with the
# connection's own choice, --bucket-reads auto; and ib_read_lat's typical
# READ, on the same vCPUs). Given two build folders it alternates their
# rkv-bench on one server (A/B of client changes); the server is the first
# build's.
#
# Run from the host:
#   tools/rxe-vm/run.sh --quiet --timeout 300 -- \
#     "bash $PWD/tools/rxe-vm/get-latency.sh $PWD/build [$PWD/../other/build]"
# (the guest sees the host's files read-only at the same paths).
set -u
A=${1:?usage: get-latency.sh BUILD_DIR [BUILD_DIR_B]}
B=${2:-}
KEYS=${RKV_LAT_KEYS:-2000}
SECS=${RKV_LAT_SECONDS:-3}
uri="rdma://$RXE_IP:7990"
out=${RXE_OUT:-/tmp}

taskset -c 1 "$A/server/rkv-server" --listen "$uri" --memory 64M --workers 1 --max-conns 16 \
  > "$out/get-latency-server.log" 2>&1 &
pid=$!
for _ in $(seq 100); do "$A/tools/rkv-cli" -s "$uri" ping > /dev/null 2>&1 && break; sleep 0.1; done

bench() {  # bench BUILD ARGS...: one rkv-bench run on vCPU 0, its GET and transport lines
  local build=$1; shift
  taskset -c 0 "$build/tools/rkv-bench" -s "$uri" -t 1 -w 1 -k "$KEYS" -r 1 -d "${SECS}s" -q "$@" 2>&1 |
    grep -E "^GET |READs/GET"
}

bench "$A" > /dev/null   # preload every key
for round in 1 2; do
  for b in "$A" $B; do
    for reads in together auto; do
      echo "== round $round, $b: cold GET (--location-cache off --bucket-reads $reads)"
      bench "$b" --location-cache off --no-preload --bucket-reads $reads
    done
    echo "== round $round, $b: warm GET (location cache, 1 s warm-up)"
    bench "$b" --warmup 1s --no-preload
  done
done
kill "$pid"; wait "$pid"

echo "== ib_read_lat, same vCPUs"
taskset -c 1 ib_read_lat -d "$RXE_DEV" -x "$RXE_GID_INDEX" -n 2000 > /dev/null 2>&1 &
sleep 1
taskset -c 0 ib_read_lat -d "$RXE_DEV" -x "$RXE_GID_INDEX" -n 2000 "$RXE_IP" 2>&1 | grep -E "^ *#bytes|^ *2 "
wait
