#!/usr/bin/env bash
# rdma-lanes.sh — threads GETting through one shared rdma handle: under the
# handle's lock (READ lanes off) against READ lanes, and against a private
# handle per thread; printed side by side, ratios per round.
#
# Runs next to an RDMA device: inside the Soft-RoCE guest,
#   scripts/rxe-vm/run.sh --quiet -- 'bash perf/rdma-lanes.sh build'
# (RXE_IP from the guest; elsewhere set RKV_LANES_IP to an RDMA netdev's
# address). One rkv-server (event mode: a busy worker beside busy clients
# starves the guest's rxe work), preloaded with 2,000 keys of 16-200 B
# values; then, per thread count and GET share, ROUNDS rounds of three
# rkv-bench runs of DURATION each, in turn:
#   lock     --shared-handle with RKV_RDMA_LANES=0 (every GET under the lock)
#   lanes    --shared-handle (GETs on READ lanes)
#   private  a handle per thread (a QP per thread)
# Prints each run's TOTAL ops/s, and per row the medians and the median of
# the per-round ratios lanes/lock and lanes/private.
#
# Usage: perf/rdma-lanes.sh BUILD_DIR [ROUNDS (5)] [DURATION (2s)] [THREADS ("2 4")]
set -euo pipefail

BUILD=${1:?usage: rdma-lanes.sh BUILD_DIR [ROUNDS] [DURATION] [THREADS]}
ROUNDS=${2:-5}
DURATION=${3:-2s}
THREADS=${4:-2 4}
IP=${RKV_LANES_IP:-${RXE_IP:?not in the Soft-RoCE guest: set RKV_LANES_IP}}
URI="rdma://$IP:${RKV_LANES_PORT:-7991}"
SRV=$BUILD/server/rkv-server
BENCH=$BUILD/bench/rkv-bench

"$SRV" --listen "$URI" --memory 64M --log-level warn --event-mode &
pid=$!
trap 'kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null || true' EXIT
for _ in $(seq 1 50); do "$BUILD/tools/rkv-cli" -s "$URI" --timeout 2000 ping > /dev/null 2>&1 && break; sleep 0.2; done
timeout 120 "$BENCH" -s "$URI" -t 1 -k 2000 -n 4000 -r 0 --value-size 16-200 > /dev/null

# run MODE T R: one bench run's TOTAL ops/s
run() {
  local mode=$1 t=$2 r=$3 env=() flags=()
  case $mode in
    lock) env=(RKV_RDMA_LANES=0); flags=(--shared-handle);;
    lanes) flags=(--shared-handle);;
    private) ;;
  esac
  env "${env[@]}" timeout 60 "$BENCH" -s "$URI" -t "$t" -k 2000 -d "$DURATION" -r "$r" \
    --value-size 16-200 --no-preload "${flags[@]}" | awk '$1 == "TOTAL" { print int($2) }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf '%-8s %-6s %12s %12s %12s %12s %14s\n' threads gets lock lanes private lanes/lock lanes/private
for t in $THREADS; do
  for r in 1.0 0.9; do
    a=() b=() c=() ab=() bc=()
    for _ in $(seq 1 "$ROUNDS"); do
      x=$(run lock "$t" "$r"); y=$(run lanes "$t" "$r"); z=$(run private "$t" "$r")
      echo "# t=$t r=$r lock $x lanes $y private $z" >&2
      a+=("$x"); b+=("$y"); c+=("$z")
      ab+=("$(awk -v y="$y" -v x="$x" 'BEGIN { printf "%.3f", y / x }')")
      bc+=("$(awk -v y="$y" -v z="$z" 'BEGIN { printf "%.3f", y / z }')")
    done
    printf '%-8s %-6s %12s %12s %12s %12s %14s\n' "$t" "$r" \
      "$(printf '%s\n' "${a[@]}" | median)" "$(printf '%s\n' "${b[@]}" | median)" \
      "$(printf '%s\n' "${c[@]}" | median)" "$(printf '%s\n' "${ab[@]}" | median)" \
      "$(printf '%s\n' "${bc[@]}" | median)"
  done
done
