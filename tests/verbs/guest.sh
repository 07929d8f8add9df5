#!/usr/bin/env bash
# tests/verbs/guest.sh — the verbs test steps, run INSIDE the Soft-RoCE guest.
#
# tests/verbs/run.sh starts this through scripts/rxe-vm/run.sh, which has set
# RXE_DEV, RXE_IP and RXE_GID_INDEX. Every step is bounded by `timeout`; the
# build folder is read-only here and tests write only under /tmp (guest tmpfs).
#
# Usage: guest.sh BUILD_DIR [STEP...]   (steps: rdma_util transport integration hostile torture
#                                          errors bench perftest)
#        guest.sh --one STEP BUILD_DIR     (one step, unbounded: what `step` runs under timeout)
set -u

ONE=""
if [ "${1:-}" = --one ]; then ONE=${2:?}; shift 2; fi
BUILD=${1:?usage: guest.sh BUILD_DIR [STEP...]}
shift
STEPS=${*:-rdma_util transport integration hostile torture errors bench perftest}
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

# twice: on the workers' shared receive queues (the default), and with
# receive buffers per QP (what a device without SRQs gets)
run_transport() {
  need "$BUILD/tests/test_transport" && "$BUILD/tests/test_transport" "rdma://$RXE_IP:$PORT_BASE" &&
    RKV_TEST_NO_SRQ=1 "$BUILD/tests/test_transport" "rdma://$RXE_IP:$PORT_BASE"
}

run_integration() {
  need "$BUILD/tests/test_integration" && need "$BUILD/server/rkv-server" &&
    RKV_TEST_LISTEN="rdma://$RXE_IP:$((PORT_BASE + 100))" RKV_TEST_URI="rdma://$RXE_IP:$((PORT_BASE + 100))" \
      "$BUILD/tests/test_integration" "$BUILD/server/rkv-server"
}

run_hostile() {
  need "$BUILD/tests/test_hostile" && need "$BUILD/server/rkv-server" &&
    RKV_TEST_LISTEN="rdma://$RXE_IP:$((PORT_BASE + 200))" \
      "$BUILD/tests/test_hostile" "$BUILD/server/rkv-server"
}

# the torture test over rdma: small tables (round trips are slow under qemu),
# 4 s per phase; it prints GETs checked and anomalies (must be 0)
run_torture() {
  need "$BUILD/tests/torture" && need "$BUILD/server/rkv-server" &&
    RKV_TEST_LISTEN="rdma://$RXE_IP:$((PORT_BASE + 300))" RKV_TORTURE_MEMORY=8M \
      "$BUILD/tests/torture" "$BUILD/server/rkv-server" 4
}

# expect NAME PATTERN CMD...: CMD (bounded) must fail and print PATTERN
expect() {
  local name=$1 pattern=$2 out
  shift 2
  if out=$(timeout 30 "$@" 2>&1); then
    echo "FAIL $name: succeeded, expected an error containing: $pattern"; return 1
  fi
  if ! grep -qF -- "$pattern" <<< "$out"; then
    echo "FAIL $name: expected \"$pattern\" in:"; echo "$out" | tail -n 5; return 1
  fi
  echo "ok   $name: $(grep -F -- "$pattern" <<< "$out" | head -n 1 | cut -c1-300)"
}

# The classic RDMA failures, end to end through rkv-server and rkv-cli: each
# must stop with the message that says what is wrong and what to do.
run_errors() {
  local srv=$BUILD/server/rkv-server cli=$BUILD/tools/rkv-cli rc=0 pid
  need "$srv" && need "$cli" || return 1
  local p=$((PORT_BASE + 300))
  # memlock: without CAP_IPC_LOCK a 64 KiB limit cannot pin the region
  expect memlock "memlock limit 64 KiB is below the 64 MiB region" \
    bash -c 'ulimit -l 64; exec setpriv --bounding-set -ipc_lock --inh-caps -ipc_lock "$@"' _ \
      "$srv" --listen "rdma://$RXE_IP:$p" --memory 64M || rc=1
  expect gid-index "GID index 77 on $RXE_DEV port 1 is empty" \
    "$srv" --listen "rdma://$RXE_IP:$p" --memory 16M --gid-index 77 || rc=1
  expect no-such-device "RDMA device \"mlx5_9\" not found" \
    "$srv" --listen "rdma://0.0.0.0:$p" --memory 16M --rdma-device mlx5_9 || rc=1
  expect not-rdma-address "is not an address of an RDMA-capable interface" \
    "$srv" --listen "rdma://198.51.100.7:$p" --memory 16M || rc=1

  # a wildcard listener registers on the host's only device and serves
  "$srv" --listen "rdma://0.0.0.0:$p" --memory 16M --log-level error & pid=$!
  local ok=0
  for _ in $(seq 1 50); do "$cli" -s "rdma://$RXE_IP:$p" --timeout 2000 ping > /dev/null 2>&1 && { ok=1; break; }; sleep 0.2; done
  if [ $ok = 1 ] && "$cli" -s "rdma://$RXE_IP:$p" put wild card && [ "$("$cli" -s "rdma://$RXE_IP:$p" get wild)" = card ]; then
    echo "ok   wildcard: rdma://0.0.0.0:$p served put/get on $RXE_DEV"
  else echo "FAIL wildcard: rdma://0.0.0.0:$p did not serve"; rc=1; fi
  kill "$pid"; wait "$pid" 2>/dev/null
  # no permission on /dev/infiniband (the guest's own devtmpfs: safe to change);
  # an unlimited memlock, so that the start-up memory check passes and the
  # device is what fails
  chmod 600 /dev/infiniband/*
  expect permission "permission denied on /dev/infiniband" \
    prlimit --memlock=unlimited:unlimited setpriv --reuid=65534 --regid=65534 --clear-groups \
    "$srv" --listen "rdma://$RXE_IP:$p" --memory 16M || rc=1
  chmod 666 /dev/infiniband/*

  # port DOWN: last, it takes the device away for a moment
  ip link set "$RXE_NETDEV" down
  for _ in $(seq 1 30); do ibv_devinfo -d "$RXE_DEV" | grep -q PORT_DOWN && break; sleep 0.1; done
  expect port-down "of $RXE_DEV is DOWN, not ACTIVE" \
    "$srv" --listen "rdma://0.0.0.0:$p" --memory 16M || rc=1
  ip link set "$RXE_NETDEV" up
  for _ in $(seq 1 50); do ibv_devinfo -d "$RXE_DEV" | grep -q PORT_ACTIVE && break; sleep 0.1; done
  return "$rc"
}

# A short verified load through a real server: the counters (READs and
# round trips per GET, doorbells per request, inline share) are what a real
# NIC would see too; the rates are TCG's.
run_bench() {
  local srv=$BUILD/server/rkv-server bench=$BUILD/bench/rkv-bench pid rc=0
  need "$srv" && need "$bench" || return 1
  local uri="rdma://$RXE_IP:$((PORT_BASE + 400))"
  # event mode: a busy-polling worker and a busy-polling client on the 2 emulated
  # CPUs starve the kernel's rxe work and give millisecond outliers
  "$srv" --listen "$uri" --memory 64M --log-level warn --event-mode & pid=$!
  for _ in $(seq 1 50); do "$BUILD/tools/rkv-cli" -s "$uri" --timeout 2000 ping > /dev/null 2>&1 && break; sleep 0.2; done
  timeout 90 "$bench" -s "$uri" -t 2 -w 8 -k 2000 -d 3s --value-size 16-2000 --verify || rc=1
  timeout 60 "$bench" -s "$uri" -t 1 -w 1 -k 2000 -d 2s --value-size 16-2000 --no-preload --verify || rc=1
  kill "$pid"
  wait "$pid" || rc=1
  return "$rc"
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
    hostile) run_hostile;;
    torture) run_torture;;
    errors) run_errors;;
    bench) run_bench;;
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
    hostile)     step hostile 240;;
    torture)     step torture 300;;
    errors)      step errors 240;;
    bench)       step bench 180;;
    perftest)    step perftest 150;;
    *) echo "unknown step $s"; FAILED=1;;
  esac
done
echo "=== verbs summary"
printf '  %s\n' "${SUMMARY[@]}"
exit $FAILED
