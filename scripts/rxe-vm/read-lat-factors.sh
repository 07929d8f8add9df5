#!/usr/bin/env bash
# scripts/rxe-vm/read-lat-factors.sh — which of rkv's READ setup choices cost
# time over Soft-RoCE, in one guest run. Each experiment is one
# rdma-read-lat process on vCPU 0 (perf/rdma-read-lat.c) whose cases READ
# round-robin, so the host's load falls on all of them alike; rkv-server
# runs on vCPU 1 as in get-latency.sh:
#
#   ref      rdma-read-lat --like perftest (its own QPs set up as ib_read_lat
#            sets them up), --like rkv (as rkv's client and server set theirs
#            up), and rkv's own client transport against the rkv-server
#            (--rkv); at fixed offsets and spread over 1 MiB; 2 and 128 B
#   switches ref at 2 B with the server stopped and context switches counted
#   factors  --like perftest with one of rkv's choices, and --like rkv with
#            that choice back at perftest's (2 B; `factors` below)
#   size     rkv's transport at 2, 64, 78, 79, 88 and 128 B: a warm GET of a
#            32-byte value reads its 88-byte item's 128-byte size class, and
#            with RXE_VM_CRC32=pclmul the kernel's ICRC takes crc32-pclmul
#            from 77 bytes on (run.sh)
#
# and ib_read_lat at 2 and 128 B (not interleaved; the server stopped), all
# RKV_RLF_ROUNDS times (default 3).
#
# Run from the host:
#   scripts/rxe-vm/run.sh --quiet --timeout 600 -- \
#     "bash $PWD/scripts/rxe-vm/read-lat-factors.sh $PWD/build"
set -u
A=${1:?usage: read-lat-factors.sh BUILD_DIR}
N=${RKV_RLF_READS:-2000}
ROUNDS=${RKV_RLF_ROUNDS:-3}
out=${RXE_OUT:-/tmp}
tool="$A/perf/rdma-read-lat"
uri="rdma://$RXE_IP:7992"

# perftest's setup with one of rkv's choices | its flags | rkv's setup with
# that choice as perftest makes it | its flags (the last two rows probe
# choices neither makes: READs landing 72 bytes into the buffer, and the
# region on 2 MiB hugepages, what rkv-server gets where they are reserved)
factors=(
  "perftest +sq 352|--sq 352|rkv, sq 1|--sq 1"
  "perftest +rq 257|--rq 257|rkv, rq 1|--rq 1"
  "perftest +inline 256|--inline 256|rkv, inline 0|--inline 0"
  "perftest +cq 704|--cq 704|rkv, cq 1|--cq 1"
  "perftest +own recv CQ|--shared-cq 0|rkv, shared CQ|--shared-cq 1"
  "perftest +poll 16|--poll 16|rkv, poll 1|--poll 1"
  "perftest +timeout 16/6|--timeout 16 --retry 6|rkv, timeout 14/7|--timeout 14 --retry 7"
  "perftest +mtu 1024 (same)|--mtu 1024|rkv, port mtu (same)|--mtu 0"
  "perftest +local 2M|--local 2M|rkv, local 8K|--local 8K"
  "perftest +region 64M memfd|--region 64M --region-kind memfd|rkv, region 8K|--region 8K --region-kind anon"
  "perftest +spread 1M|--region 64M --region-kind memfd --spread 1M|rkv, spread 1M|--spread 1M"
  "perftest +dst +72|--dst-off 72|rkv, dst +72|--dst-off 72"
  "perftest +region 64M huge|--region 64M --region-kind huge|rkv, region huge|--region-kind huge"
)

lat() {  # lat ARGS...: one rdma-read-lat process
  taskset -c 0 "$tool" -d "$RXE_DEV" -x "$RXE_GID_INDEX" -n "$N" "$@" 2>> "$out/rlf.err" ||
    echo "rdma-read-lat $*: failed (see rlf.err)"
}

read_lat() {  # read_lat BYTES: ib_read_lat's line, server on vCPU 1, client on vCPU 0
  taskset -c 1 ib_read_lat -d "$RXE_DEV" -x "$RXE_GID_INDEX" -n "$N" -s "$1" > /dev/null 2>&1 &
  local lat=$!
  sleep 1
  taskset -c 0 ib_read_lat -d "$RXE_DEV" -x "$RXE_GID_INDEX" -n "$N" -s "$1" "$RXE_IP" 2>&1 |
    awk -v s="$1" '$1 == s && $2 > 0 { printf "%-30s %5u B x %5u: min %6.2f  t_typical %6.2f  p99 %7.2f  t_avg %s us\n", "ib_read_lat", s, $2, $3, $5, $8, $6 }'
  wait "$lat"
}

ref_cases=(--case "perftest-like: --like perftest" --case "rkv-like: --like rkv"
           --case "rkv-like, 1M spread: --like rkv --spread 1M"
           --case "rkv transport: --rkv $uri" --case "rkv transport, 1M spread: --rkv $uri --spread 1M")

taskset -c 1 "$A/server/rkv-server" --listen "$uri" --memory 64M --workers 1 --max-conns 16 \
  > "$out/rlf-server.log" 2>&1 &
pid=$!
for _ in $(seq 100); do "$A/tools/rkv-cli" -s "$uri" ping > /dev/null 2>&1 && break; sleep 0.1; done
grep -h "region" "$out/rlf-server.log" | head -2

echo 96 > /proc/sys/vm/nr_hugepages   # after the server started: its region stays on 4 KiB pages
plus=(--case "perftest: --like perftest")
minus=(--case "rkv: --like rkv")
for f in "${factors[@]}"; do
  IFS='|' read -r pl p ml m <<< "$f"
  plus+=(--case "$pl: --like perftest $p")
  minus+=(--case "$ml: --like rkv $m")
done

for round in $(seq "$ROUNDS"); do
  echo "== round $round: ref (server running)"
  lat -s 2 "${ref_cases[@]}"
  lat -s 128 "${ref_cases[@]}"
  echo "== round $round: switches (2 B, server stopped)"
  lat -s 2 --stop "$pid" --switches "${ref_cases[@]}"
  echo "== round $round: one factor (2 B, server stopped)"
  lat -s 2 --stop "$pid" "${plus[@]}"
  lat -s 2 --stop "$pid" "${minus[@]}"
  echo "== round $round: size (rkv transport, server running)"
  lat --rkv "$uri" --case "2: -s 2" --case "64: -s 64" --case "78: -s 78" --case "79: -s 79" \
    --case "88: -s 88" --case "128: -s 128"
  echo "== round $round: ib_read_lat (server stopped)"
  kill -STOP "$pid"
  read_lat 2
  read_lat 128
  kill -CONT "$pid"
done
kill "$pid"; wait "$pid"
sort -u "$out/rlf.err" | grep -v granted | head -20
grep -h granted "$out/rlf.err" | sort -u | head -30
