#!/usr/bin/env bash
# tools/rxe-vm/read-lat-factors.sh — which of rkv's READ setup choices cost
# time over Soft-RoCE, in one guest run (issue 11). Every line is one
# rdma-read-lat (tools/rdma-read-lat.c) or ib_read_lat run on vCPU 0:
#
#   references  ib_read_lat; rdma-read-lat --like perftest (its own QPs set
#               up as ib_read_lat sets them) and --like rkv (as rkv's client
#               and server set theirs); rkv's own client transport against
#               a real rkv-server on vCPU 1 (--rkv), with the server running
#               and stopped (SIGSTOP: rxe serves a READ in the kernel).
#   +FACTOR     --like perftest with one of rkv's choices
#   -FACTOR     --like rkv with that choice back at perftest's
#
# All of it RKV_RLF_ROUNDS times (default 3), the order of the factors
# reversed every other round, so the host's load falls on every line alike.
#
# Run from the host:
#   tools/rxe-vm/run.sh --quiet --timeout 600 -- \
#     "bash $PWD/tools/rxe-vm/read-lat-factors.sh $PWD/build"
set -u
A=${1:?usage: read-lat-factors.sh BUILD_DIR}
N=${RKV_RLF_READS:-2000}
ROUNDS=${RKV_RLF_ROUNDS:-3}
out=${RXE_OUT:-/tmp}
tool="$A/tools/rdma-read-lat"
uri="rdma://$RXE_IP:7992"

# NAME|flags that give perftest's setup rkv's choice|flags that give rkv's setup perftest's
factors=(
  "sq|--sq 352|--sq 1"
  "rq|--rq 257|--rq 1"
  "inline|--inline 256|--inline 0"
  "cq|--cq 704|--cq 1"
  "ownrcq|--shared-cq 0|--shared-cq 1"
  "poll16|--poll 16|--poll 1"
  "timeout|--timeout 16 --retry 6|--timeout 14 --retry 7"
  "mtu|--mtu 1024|--mtu 0"
  "local2M|--local 2M|--local 8K"
  "region|--region 64M --region-kind memfd|--region 8K --region-kind anon"
)

self() {  # self LABEL ARGS...: one rdma-read-lat line
  local label=$1; shift
  taskset -c 0 "$tool" -d "$RXE_DEV" -x "$RXE_GID_INDEX" -n "$N" -l "$label" "$@" 2>> "$out/rlf.err" ||
    echo "$label: failed (see rlf.err)"
}

read_lat() {  # read_lat BYTES LABEL [ARGS]: ib_read_lat's typical, server on vCPU 1, client on vCPU 0
  local s=$1 l=$2; shift 2
  taskset -c 1 ib_read_lat -d "$RXE_DEV" -x "$RXE_GID_INDEX" -n "$N" -s "$s" "$@" > /dev/null 2>&1 &
  local lat=$!
  sleep 1
  taskset -c 0 ib_read_lat -d "$RXE_DEV" -x "$RXE_GID_INDEX" -n "$N" -s "$s" "$@" "$RXE_IP" 2>&1 |
    awk -v l="$l" -v s="$s" '$1 == s && $2 > 0 { printf "%-28s bytes %5u reads %6u: min %7.2f  t_typical %7.2f  p99 %8.2f  (t_avg %s) us\n", l, s, $2, $3, $5, $8, $6 }'
  wait "$lat"
}

taskset -c 1 "$A/server/rkv-server" --listen "$uri" --memory 64M --workers 1 --max-conns 16 \
  > "$out/rlf-server.log" 2>&1 &
pid=$!
for _ in $(seq 100); do "$A/tools/rkv-cli" -s "$uri" ping > /dev/null 2>&1 && break; sleep 0.1; done
grep -h "region" "$out/rlf-server.log" | head -2

for round in $(seq "$ROUNDS"); do
  echo "== round $round"
  for s in 2 128; do
    kill -STOP "$pid"
    read_lat "$s" "ib_read_lat (server stopped)"
    read_lat "$s" "ib_read_lat --use_old_post_send" --use_old_post_send
    self "perftest-like" -s "$s"
    self "rkv-like" -s "$s" --like rkv
    self "rkv-like, 1M spread" -s "$s" --like rkv --spread 1M
    kill -CONT "$pid"
    taskset -c 0 "$tool" --rkv "$uri" --stop "$pid" -n "$N" -s "$s" -l "rkv transport (srv stopped)" 2>> "$out/rlf.err"
    taskset -c 0 "$tool" --rkv "$uri" --stop "$pid" -n "$N" -s "$s" --spread 1M -l "rkv transport, 1M spread" 2>> "$out/rlf.err"
    taskset -c 0 "$tool" --rkv "$uri" -n "$N" -s "$s" -l "rkv transport (srv running)" 2>> "$out/rlf.err"
    read_lat "$s" "ib_read_lat (server running)"
    self "perftest-like (srv running)" -s "$s"
  done
  kill -STOP "$pid"
  list=("${factors[@]}")
  if [ $((round % 2)) = 0 ]; then
    list=(); for ((i = ${#factors[@]} - 1; i >= 0; i--)); do list+=("${factors[$i]}"); done
  fi
  for f in "${list[@]}"; do
    IFS='|' read -r name plus minus <<< "$f"
    # shellcheck disable=SC2086
    self "perftest +$name" -s 2 $plus
    # shellcheck disable=SC2086
    self "rkv -$name" -s 2 --like rkv $minus
  done
  kill -CONT "$pid"
done
kill "$pid"; wait "$pid"
sort -u "$out/rlf.err" | head -40
