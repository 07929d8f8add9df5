#!/usr/bin/env bash
# tests/verbs/run.sh — rkv's tests over a real RDMA verbs stack (Soft-RoCE).
#
# Boots the Soft-RoCE VM once (scripts/rxe-vm/run.sh) and runs inside it, one
# bounded step after the other (tests/verbs/guest.sh):
#   rdma_util    tests/test_rdma_util against the real rxe0 (device, port, GID checks)
#   transport    tests/test_transport rdma://$RXE_IP:7471 — the transport contract,
#                over RC QPs on shared receive queues and again on receive buffers per
#                QP: batching, credits, READs, rendezvous pulls, disconnects
#   integration  tests/test_integration with RKV_TEST_LISTEN=rdma://$RXE_IP:7571 —
#                a real rkv-server process and clients over rdma
#   hostile      tests/test_hostile over rdma: malformed requests from a raw client
#   lanes        tests/test_rdma_lanes and tests/test_shared_handle over rdma: a shared
#                handle's READ lanes (values, lane and QP counts, close, a lane that sends)
#   torture      tests/torture over rdma: writers and readers race, every value checked
#   restart      torture through a clean restart (--state-file), a SIGKILL, and a SIGKILL
#                recovered from the fd store: rdma clients reconnect and read the kept values
#   errors       the classic failures end to end (memlock, GID index, unknown device,
#                non-RDMA address, no listener, /dev/infiniband permissions, port DOWN)
#                must print the message that says what to do; a 0.0.0.0 listener serves
#   bench        rkv-bench --verify against an rdma rkv-server: the per-GET counters
#   python       the Python binding's tests of its calls, fork() and the other clients
#                against rdma rkv-servers (python/tests, RKV_PY_RDMA)
#   conns        1,000 rdma connections opened and closed, twice (perf/rdma-conns):
#                the server's fds, pinned memory, QPs/CQs/MRs back to where they were;
#                prints the connect rate and the server's memory per connection
#   deaf         4 connections that stop receiving hold a small server's whole reply
#                pool: a client beside them is served once their sends fail
#   perftest     ib_send_lat / ib_read_lat, the latency reference on this machine
# and then, in a second boot, two guests joined by a real link
# (scripts/rxe-vm/run.sh --pair, tests/verbs/pair.sh):
#   link         torture over 1% loss and 2 ms +- 2 ms jitter; a blackhole shorter
#                than the RC retry budget (calls stall, then complete) and one
#                longer (calls fail in bounded time naming the cause, the server
#                frees the dead connections, a client beside it keeps being
#                served, the handles reconnect); about 75 s
#
# Usage: tests/verbs/run.sh [-C BUILD_DIR] [--timeout SEC] [--quiet] [STEP...]
#   BUILD_DIR defaults to ./build (configure it with `meson setup build && ninja -C build`).
#   Under qemu TCG an RDMA READ takes 30-100 us; the whole suite takes a few minutes.
# Exit status: 0 when every step passed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$ROOT/build
TIMEOUT=2400
VM_OPTS=()
STEPS=()

while [ $# -gt 0 ]; do
  case "$1" in
    -C) BUILD=$(realpath "${2:?-C needs a build folder}"); shift 2;;
    --timeout) TIMEOUT=${2:?}; shift 2;;
    --quiet) VM_OPTS+=(--quiet); shift;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0;;
    -*) echo "verbs: unknown option $1" >&2; exit 2;;
    *) STEPS+=("$1"); shift;;
  esac
done
[ -d "$BUILD" ] || { echo "verbs: no build folder $BUILD: run \`meson setup $BUILD && ninja -C $BUILD\` first" >&2; exit 2; }
# The guest covers /tmp, /run and /dev/shm with its own tmpfs: a checkout or
# build folder there must be shared explicitly (the checkout covers its build).
under_tmpfs() { case "$1" in /tmp/*|/run/*|/dev/shm/*) return 0;; esac; return 1; }
if under_tmpfs "$ROOT"; then VM_OPTS+=(--rw "$ROOT"); fi
case "$BUILD/" in "$ROOT"/*) ;; *) if under_tmpfs "$BUILD"; then VM_OPTS+=(--rw "$BUILD"); fi;; esac

# the one-guest steps, then (if asked for, or by default) the two-guest one
SINGLE=()
LINK=0
if [ ${#STEPS[@]} -eq 0 ]; then LINK=1; fi
for s in "${STEPS[@]}"; do
  if [ "$s" = link ]; then LINK=1; else SINGLE+=("$s"); fi
done
rc=0
if [ ${#STEPS[@]} -eq 0 ] || [ ${#SINGLE[@]} -gt 0 ]; then
  "$ROOT/scripts/rxe-vm/run.sh" --timeout "$TIMEOUT" --cwd "$ROOT" "${VM_OPTS[@]}" -- \
    "bash $(printf '%q' "$ROOT/tests/verbs/guest.sh") $(printf '%q' "$BUILD") ${SINGLE[*]:-}" || rc=1
fi
if [ $LINK = 1 ]; then
  echo "=== verbs: link (two guests, limit 600s)"
  pair="bash $(printf '%q' "$ROOT/tests/verbs/pair.sh") $(printf '%q' "$BUILD")"
  start=$SECONDS
  if "$ROOT/scripts/rxe-vm/run.sh" --pair --timeout 600 --cwd "$ROOT" "${VM_OPTS[@]}" -- "$pair" "$pair"; then
    echo "  link         PASS                         $((SECONDS - start))s"
  else
    echo "  link         FAIL                         $((SECONDS - start))s"; rc=1
  fi
fi
exit $rc
