#!/usr/bin/env bash
# tests/verbs/guest.sh — the verbs test steps, run INSIDE the Soft-RoCE guest.
#
# tests/verbs/run.sh starts this through scripts/rxe-vm/run.sh, which has set
# RXE_DEV, RXE_IP and RXE_GID_INDEX. Every step is bounded by `timeout`; the
# build folder is read-only here and tests write only under /tmp (guest tmpfs).
#
# Usage: guest.sh BUILD_DIR [STEP...]   (steps: rdma_util transport integration hostile lanes
#                                          torture restart errors bench python conns deaf perftest)
#        guest.sh --one STEP BUILD_DIR     (one step, unbounded: what `step` runs under timeout)
set -u

ONE=""
if [ "${1:-}" = --one ]; then ONE=${2:?}; shift 2; fi
BUILD=${1:?usage: guest.sh BUILD_DIR [STEP...]}
shift
STEPS=${*:-rdma_util transport integration hostile lanes torture restart errors bench python conns deaf perftest}
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

# a shared handle's READ lanes: test_rdma_lanes (threads' values, lanes and
# the thread-domain fallback by the counters, the server's QPs, a lane that
# sends closed), then test_shared_handle over rdma, where its threads' GETs
# take the lanes
run_lanes() {
  need "$BUILD/tests/test_rdma_lanes" && need "$BUILD/tests/test_shared_handle" &&
    need "$BUILD/server/rkv-server" &&
    RKV_TEST_LISTEN="rdma://$RXE_IP:$((PORT_BASE + 900))" \
      "$BUILD/tests/test_rdma_lanes" "$BUILD/server/rkv-server" &&
    RKV_TEST_LISTEN="rdma://$RXE_IP:$((PORT_BASE + 1000))" \
      "$BUILD/tests/test_shared_handle" "$BUILD/server/rkv-server"
}

# the torture test over rdma: small tables (round trips are slow under qemu),
# 4 s per phase; it prints GETs checked and anomalies (must be 0)
run_torture() {
  need "$BUILD/tests/torture" && need "$BUILD/server/rkv-server" &&
    RKV_TEST_LISTEN="rdma://$RXE_IP:$((PORT_BASE + 300))" RKV_TORTURE_MEMORY=8M \
      "$BUILD/tests/torture" "$BUILD/server/rkv-server" 4
}

# restarts with rdma clients attached: torture's readers and writers run
# through a clean restart on --state-file, a SIGKILL that keeps nothing, and
# a SIGKILL recovered from the fd store (torture plays systemd's); they
# reconnect by themselves and read the kept values (every item back after
# the clean stop and the fd store, false misses checked); the fd store's
# phase with 16 MiB, where 8 MiB left no room for a hot write after the fill
run_restart() {
  need "$BUILD/tests/torture" && need "$BUILD/server/rkv-server" &&
    RKV_TEST_LISTEN="rdma://$RXE_IP:$((PORT_BASE + 700))" RKV_TORTURE_MEMORY=8M \
      RKV_TORTURE_PHASES=restarts "$BUILD/tests/torture" "$BUILD/server/rkv-server" 4 &&
    RKV_TEST_LISTEN="rdma://$RXE_IP:$((PORT_BASE + 800))" RKV_TORTURE_MEMORY=16M \
      RKV_TORTURE_PHASES=fdstore "$BUILD/tests/torture" "$BUILD/server/rkv-server" 4
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

# The Python binding's core calls over rdma: its pytest files for the single
# calls, the batches and pipeline, fork() and the other clients, each server
# listening on rdma://$RXE_IP (python/tests/conftest.py, RKV_PY_RDMA): about
# 30 s of tests under TCG, and Python's start over the guest's 9p root. What
# is not about the wire stays with the shm run (meson's `python`): the leak
# loop, the server errors, the argument checks, flush (a server of its own:
# 10 s more here) and numpy (its import alone takes seconds here).
run_python() {
  local ext
  ext=$(ls "$BUILD"/python/rkv/_rkv*.so 2> /dev/null | head -n 1)
  need "$BUILD/server/rkv-server" && need "$BUILD/tools/rkv-cli" || return 1
  [ -n "$ext" ] || { echo "missing $BUILD/python/rkv/_rkv*.so: build with python3-dev installed"; return 1; }
  local src
  src=$(cd "$(dirname "$0")/../../python/tests" && pwd)
  RKV_PY_RDMA=$RXE_IP PYTHONPATH="$BUILD/python" PYTHONDONTWRITEBYTECODE=1 \
    PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 RKV_SERVER="$BUILD/server/rkv-server" RKV_CLI="$BUILD/tools/rkv-cli" \
    /usr/bin/python3 -m pytest -p no:cacheprovider -q "$src/test_basic.py" "$src/test_batch.py" \
    "$src/test_fork.py" "$src/test_interop.py" \
    -k 'not numpy and not test_flush and not bad_key_types and not bad_ttl_and_flags'
}

# The server's fds, pinned (registered) memory, RSS, and the device's QPs,
# CQs, MRs and SRQs (`rdma resource`: the tool's and the server's):
# "rss_kib pin_kib fds qp cq mr srq".
conns_snapshot() {
  local pid=$1 rss pin fds res
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
  pin=$(awk '/^VmPin:/ {print $2}' "/proc/$pid/status")
  fds=$(ls "/proc/$pid/fd" | wc -l)
  res=$(rdma resource show | awk -v d="$RXE_DEV" '$2 == d":" {
          for (i = 3; i < NF; i += 2) v[$i] = $(i + 1)
          printf "%d %d %d %d", v["qp"], v["cq"], v["mr"], v["srq"] }')
  echo "$rss $pin $fds $res"
}

# Wait (bounded) until the device has `want` QPs (its own, as before the
# server started): the server has torn down every connection closed.
conns_settle() {
  local want=$1 i
  for i in $(seq 1 300); do
    [ "$(rdma resource show | awk -v d="$RXE_DEV" '$2 == d":" {
           for (i = 3; i < NF; i += 2) if ($i == "qp") print $(i + 1) }')" = "$want" ] && return 0
    sleep 0.1
  done
  echo "FAIL the device still has QPs beyond $want: $(rdma resource show | head -n 3)"
  return 1
}

# 1,000 rdma connections (RKV_CONNS) opened through HELLO and closed, two
# rounds, by one perf/rdma-conns process against one server: after the
# second round the server's fds, pinned memory and the device's QPs/CQs/MRs/
# SRQs are exactly what they were after the first (RSS within 2 MiB: heap
# slack; the first round warms the SRQ, the heap and the staging pool up);
# prints the connect rate and the server's memory per held connection.
run_conns() {
  local srv=$BUILD/server/rkv-server tool=${RKV_CONNS_TOOL:-$BUILD/perf/rdma-conns}
  local n=${RKV_CONNS:-1000} p=$((PORT_BASE + 500)) pid rc=0 line fresh held after1 afterN
  need "$srv" && need "$tool" || return 1
  ulimit -n 8192
  # the device's own QPs (QP1), before any process has one
  local idle_qps
  idle_qps=$(rdma resource show | awk -v d="$RXE_DEV" '$2 == d":" {
               for (i = 3; i < NF; i += 2) if ($i == "qp") print $(i + 1) }')
  "$srv" --listen "rdma://$RXE_IP:$p" --memory 16M --max-conns $((n + 8)) --log-level error \
    ${RKV_CONNS_SERVER_ARGS:-} & pid=$!
  for _ in $(seq 1 50); do "$BUILD/tools/rkv-cli" -s "rdma://$RXE_IP:$p" --timeout 2000 ping > /dev/null 2>&1 && break; sleep 0.2; done
  conns_settle "$idle_qps" || rc=1
  fresh=$(conns_snapshot "$pid")
  coproc CHURN { "$tool" "$RXE_IP:$p" "$n" 2 --hold; }
  local r churn_pid=$CHURN_PID
  for r in 1 2; do
    if ! read -r -t 120 -u "${CHURN[0]}" line || [ "$line" != "held $n" ]; then
      echo "FAIL round $r: rdma-conns did not hold $n connections (${line:-no output})"; rc=1; break
    fi
    [ $r = 1 ] && held=$(conns_snapshot "$pid")
    echo >&"${CHURN[1]}"
    read -r -t 120 -u "${CHURN[0]}" line && echo "  $line"
    conns_settle "$idle_qps" || { rc=1; break; }
    [ $r = 1 ] && after1=$(conns_snapshot "$pid")
    [ $r = 2 ] && afterN=$(conns_snapshot "$pid")
    echo >&"${CHURN[1]}" # go on: the next round, or exit
  done
  wait "$churn_pid" 2>/dev/null || rc=1
  echo "  rss_kib pin_kib fds qp cq mr srq"
  echo "  fresh    $fresh"
  echo "  held $n $held"
  echo "  after 1  $after1"
  echo "  after 2  $afterN"
  read -r f_rss f_pin _ <<< "$fresh"
  read -r h_rss h_pin _ <<< "$held"
  echo "  per held connection: $(( (h_rss - f_rss) / n )) KiB RSS, $(( (h_pin - f_pin) / n )) KiB pinned"
  echo "  after 2 minus fresh: $(( ${afterN%% *} - f_rss )) KiB RSS"
  read -r a_rss a_rest <<< "${after1:-0}"
  read -r z_rss z_rest <<< "${afterN:-x}"
  if [ "$a_rest" != "$z_rest" ]; then
    echo "FAIL leak: pinned/fds/qp/cq/mr/srq after round 1: $a_rest, after round 2: $z_rest"; rc=1
  elif [ $(( z_rss - a_rss )) -gt 2048 ]; then
    echo "FAIL leak: RSS grew $(( z_rss - a_rss )) KiB from round 1 to round 2"; rc=1
  else
    echo "ok   no leak: after round 2 as after round 1 (RSS $(( z_rss - a_rss )) KiB apart)"
  fi
  kill "$pid"
  wait "$pid" || rc=1
  return "$rc"
}

# Peers that stop receiving hold reply buffers only for a while: 4 deaf
# connections (perf/rdma-conns --deaf: each sends 8 STATS and posts no
# receive, so the server's replies, sent from its worker's reply pool, are
# never taken) hold all 32 buffers of a server whose pool is 2 x credits
# (credits 16, srq_depth 32). A client beside them waits for a buffer and
# is served once their sends fail — here Soft-RoCE's RC retries run out in
# a few seconds; a NIC that answers RNR for ever meets the server's 10 s
# limit instead — which gives their buffers back; the 4 are closed, and
# the server serves on.
run_deaf() {
  local srv=$BUILD/server/rkv-server tool=$BUILD/perf/rdma-conns cli=$BUILD/tools/rkv-cli
  local p=$((PORT_BASE + 600)) pid rc=0 line log=/tmp/deaf-server.log t0 n=0
  need "$srv" && need "$tool" && need "$cli" || return 1
  "$srv" --listen "rdma://$RXE_IP:$p" --memory 16M --credits 16 --srq-depth 32 --log-level warn \
    > "$log" 2>&1 & pid=$!
  for _ in $(seq 1 50); do "$cli" -s "rdma://$RXE_IP:$p" --timeout 2000 ping > /dev/null 2>&1 && break; sleep 0.2; done
  coproc DEAF { "$tool" "$RXE_IP:$p" 4 --deaf 8; }
  local deaf_pid=$DEAF_PID
  if ! read -r -t 60 -u "${DEAF[0]}" line || [ "$line" != "deaf 4" ]; then
    echo "FAIL rdma-conns --deaf did not set up (${line:-no output})"; rc=1
  fi
  t0=$SECONDS
  if "$cli" -s "rdma://$RXE_IP:$p" --timeout 30000 ping > /dev/null; then
    echo "  a client beside 4 deaf peers served after $((SECONDS - t0)) s"
  else
    echo "FAIL a client beside 4 deaf peers was not served"; rc=1
  fi
  for _ in $(seq 1 60); do
    n=$(grep -c "closing the connection" "$log")
    [ "$n" -ge 4 ] && break
    sleep 0.5
  done
  if [ "$n" -ge 4 ]; then
    echo "ok   the 4 deaf peers were closed: $(grep -m1 "closing the connection" "$log" | cut -c 1-160)"
  else
    echo "FAIL $n of 4 deaf peers closed; the server said:"; cat "$log"; rc=1
  fi
  "$cli" -s "rdma://$RXE_IP:$p" --timeout 5000 ping > /dev/null || { echo "FAIL the server stopped serving"; rc=1; }
  echo >&"${DEAF[1]}"
  wait "$deaf_pid" 2>/dev/null
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
    lanes) run_lanes;;
    torture) run_torture;;
    restart) run_restart;;
    errors) run_errors;;
    bench) run_bench;;
    python) run_python;;
    perftest) run_perftest;;
    conns) run_conns;;
    deaf) run_deaf;;
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
    lanes)       step lanes 420;;
    torture)     step torture 300;;
    restart)     step restart 600;;
    errors)      step errors 240;;
    bench)       step bench 180;;
    python)      step python 120;;
    perftest)    step perftest 150;;
    conns)       step conns 240;;
    deaf)        step deaf 180;;
    *) echo "unknown step $s"; FAILED=1;;
  esac
done
echo "=== verbs summary"
printf '  %s\n' "${SUMMARY[@]}"
exit $FAILED
