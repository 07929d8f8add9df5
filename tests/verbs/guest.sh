#!/usr/bin/env bash
# tests/verbs/guest.sh — the verbs test steps, run INSIDE the Soft-RoCE guest.
#
# tests/verbs/run.sh starts this through tools/rxe-vm/run.sh, which has set
# RXE_DEV, RXE_IP and RXE_GID_INDEX. Every step is bounded by `timeout`; the
# build folder is read-only here and tests write only under /tmp (guest tmpfs).
#
# Usage: guest.sh BUILD_DIR [STEP...]   (steps: rdma_util transport integration perftest)
#        guest.sh --one STEP BUILD_DIR     (one step, unbounded: what `step` runs under timeout)
set -u

ONE=""
if [ "${1:-}" = --one ]; then ONE=${2:?}; shift 2; fi
BUILD=${1:?usage: guest.sh BUILD_DIR [STEP...]}
shift
STEPS=${*:-rdma_util transport integration perftest}
PORT_BASE=${RKV_VERBS_PORT:-7471}
SUMMARY=()
FAILED=0

# step NAME SECONDS: run one step (this script again, --one) bounded by
# timeout; record PASS/FAIL and its time
step() {
  local name=$1 limit=$2 start=$SECONDS rc
  echo "=== verbs: $name (limit ${limit}s)"
  timeout -k 5 "$limit" bash "$0" --one "$name" "$BUILD"
  rc=$?
  local verdict=PASS
  [ $rc = 0 ] || { verdict="FAIL (exit $rc$([ $rc = 124 ] && echo ', timed out'))"; FAILED=1; }
  SUMMARY+=("$(printf '%-12s %-28s %4ss' "$name" "$verdict" $((SECONDS - start)))")
}

need() {  # need FILE: a missing binary is a failed step, with the reason
  [ -x "$1" ] && return 0
  echo "missing $1: build it first (meson setup $BUILD && ninja -C $BUILD)"
  return 1
}

run_rdma_util() { need "$BUILD/tests/test_rdma_util" && "$BUILD/tests/test_rdma_util"; }

run_transport() {
  need "$BUILD/tests/test_transport" && "$BUILD/tests/test_transport" "rdma://$RXE_IP:$PORT_BASE"
}

run_integration() {
  need "$BUILD/tests/test_integration" && need "$BUILD/server/rkv-server" &&
    RKV_TEST_LISTEN="rdma://$RXE_IP:$((PORT_BASE + 100))" RKV_TEST_URI="rdma://$RXE_IP:$((PORT_BASE + 100))" \
      "$BUILD/tests/test_integration" "$BUILD/server/rkv-server"
}

# perftest as the latency reference for what one READ / one SEND costs here.
run_perftest() {
  local t rc=0 out
  for t in ib_send_lat ib_read_lat; do
    timeout 60 "$t" -d "$RXE_DEV" -x "$RXE_GID_INDEX" -n 1000 > "/tmp/$t.server.log" 2>&1 &
    local sp=$!
    sleep 1
    out=$(timeout 60 "$t" -d "$RXE_DEV" -x "$RXE_GID_INDEX" -n 1000 "$RXE_IP" 2>&1) || rc=1
    wait "$sp" || rc=1
    # the result row: #bytes #iterations t_min t_max t_typical t_avg ...
    echo "$out" | awk -v t="$t" '$1 ~ /^[0-9]+$/ && NF >= 7 {
        printf "%s: %s bytes, typical %s us, avg %s us, 99%% %s us\n", t, $1, $5, $6, $8 }'
  done
  return "$rc"
}

if [ -n "$ONE" ]; then
  case $ONE in
    rdma_util) run_rdma_util;;
    transport) run_transport;;
    integration) run_integration;;
    perftest) run_perftest;;
    *) echo "unknown step $ONE"; exit 2;;
  esac
  exit $?
fi

echo "verbs suite on $RXE_DEV ($RXE_IP, gid $RXE_GID_INDEX), build $BUILD: $STEPS"
for s in $STEPS; do
  case $s in
    rdma_util)   step rdma_util 60;;
    transport)   step transport 420;;
    integration) step integration 600;;
    perftest)    step perftest 150;;
    *) echo "unknown step $s"; FAILED=1;;
  esac
done
echo "=== verbs summary"
printf '  %s\n' "${SUMMARY[@]}"
exit $FAILED
