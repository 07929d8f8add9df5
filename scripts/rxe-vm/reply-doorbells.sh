#!/usr/bin/env bash
# scripts/rxe-vm/reply-doorbells.sh — reply doorbells per reply over Soft-RoCE,
# in one guest run: how well a worker batches its replies to a client's
# window of writes. For each poll mode (busy, adaptive, event) and each
# build folder given, a fresh rkv-server on
# rdma://$RXE_IP, a window-16 write run (rkv-bench -w 16 -r 0), and the
# deltas of the server's `replies`, `reply_doorbells` (and `reply_holds`,
# `reply_hold_expired` where the build counts them) around the run, next to
# the client's own doorbells per request (rkv-bench's transport line: the
# fewest reply doorbells the server can answer its batches with). Given two build folders it
# alternates them (A/B of a server or client change: each build runs its
# own server and client).
#
# Run from the host:
#   scripts/rxe-vm/run.sh --quiet --timeout 400 -- \
#     "bash $PWD/scripts/rxe-vm/reply-doorbells.sh $PWD/build [$PWD/../other/build]"
# (the guest sees the host's files read-only at the same paths).
set -u
A=${1:?usage: reply-doorbells.sh BUILD_DIR [BUILD_DIR_B]}
B=${2:-}
KEYS=${RKV_RD_KEYS:-10000}
SECS=${RKV_RD_SECONDS:-2}
MODES=${RKV_RD_MODES:-busy adaptive event}
out=${RXE_OUT:-/tmp}
port=7991

counter() {  # counter NAME STATS_TEXT: the value, or - when the build does not count it
  awk -v n="$1" '$1 == n { print $2; found = 1 } END { if (!found) print "-" }' <<< "$2"
}

delta() {  # delta BEFORE AFTER
  if [ "$1" = - ] || [ "$2" = - ]; then echo -; else echo $(($2 - $1)); fi
}

# BUILD's rkv-bench: bench/, or tools/ in a build of a tree from before
# bench/ was split out of tools/ (the second build may be one)
bench_of() { if [ -x "$1/bench/rkv-bench" ]; then echo "$1/bench/rkv-bench"; else echo "$1/tools/rkv-bench"; fi; }

run_one() {  # run_one BUILD MODE
  local build=$1 mode=$2 uri="rdma://$RXE_IP:$port" pid before after r d h x cli
  port=$((port + 1))
  taskset -c 1 "$build/server/rkv-server" --listen "$uri" --memory 64M --workers 1 \
    --max-conns 16 --poll-mode "$mode" > "$out/reply-doorbells-server-$mode.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do "$build/tools/rkv-cli" -s "$uri" ping > /dev/null 2>&1 && break; sleep 0.1; done
  before=$("$build/tools/rkv-cli" -s "$uri" stats)
  taskset -c 0 "$(bench_of "$build")" -s "$uri" -t 1 -w 16 -k "$KEYS" -r 0 -d "${SECS}s" \
    --no-preload -q > "$out/reply-doorbells-bench-$mode.log" 2>&1
  after=$("$build/tools/rkv-cli" -s "$uri" stats)
  kill "$pid"; wait "$pid"
  r=$(delta "$(counter replies "$before")" "$(counter replies "$after")")
  d=$(delta "$(counter reply_doorbells "$before")" "$(counter reply_doorbells "$after")")
  h=$(delta "$(counter reply_holds "$before")" "$(counter reply_holds "$after")")
  x=$(delta "$(counter reply_hold_expired "$before")" "$(counter reply_hold_expired "$after")")
  cli=$(sed -n 's/.* \([0-9.]*\) doorbells\/request.*/\1/p' "$out/reply-doorbells-bench-$mode.log")
  printf '%-9s %-40s replies %7s  reply_doorbells %6s  holds %6s  expired %4s  per reply %s  (client %s/request)\n' \
    "$mode" "$build" "$r" "$d" "$h" "$x" \
    "$(awk -v r="$r" -v d="$d" 'BEGIN { if (r > 0) printf "%.4f", d / r; else print "-" }')" "${cli:--}"
}

for mode in $MODES; do
  for b in "$A" $B; do
    run_one "$b" "$mode"
  done
done
