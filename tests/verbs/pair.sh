#!/usr/bin/env bash
# tests/verbs/pair.sh — the verbs suite's bad-network steps, run INSIDE both
# guests of `scripts/rxe-vm/run.sh --pair` (tests/verbs/run.sh starts it as
# the `link` step). $RXE_ROLE says which half this is; the halves meet
# through files in $RXE_SHARED (rxe_signal / rxe_wait, scripts/rxe-vm/netlib.sh).
#
#   lossy_torture   rkv-server in the server guest, the torture test
#                   (tests/torture.c, eviction phase) in the client guest; once
#                   its processes are connected, netem loss 1% delay 2ms 2ms
#                   (jitter, so also reordering) on each guest's sends: 0
#                   anomalies, 0 errors, and every reader type keeps checking
#   blackholes      tests/netfault.c: a blackhole shorter than the RC retry
#                   budget (calls stall, then complete, 0 anomalies) and one
#                   longer than it (every call fails within the handle's timeout
#                   plus the documented margin with the cause in
#                   rkv_last_error, the server frees the dead connections, a
#                   client next to the server keeps being served, the handles
#                   reconnect); the server's log must show its keepalive
#                   finding the dead peers
#
# Usage: pair.sh BUILD_DIR (with RXE_ROLE, RXE_IP, RXE_PEER_IP, RXE_SHARED, RXE_LIB set)
# Prints one "pair <role>: <step> PASS|FAIL" line per step; exit 0 if all passed.
set -u
. "$RXE_LIB"

BUILD=${1:?usage: pair.sh BUILD_DIR}
SRV=$BUILD/server/rkv-server
CLI=$BUILD/tools/rkv-cli
PORT_TORTURE=7600
PORT_FAULT=7700
NETEM="loss 1% delay 2ms 2ms"
FAILED=0

verdict() {  # verdict STEP RC
  if [ "$2" = 0 ]; then echo "pair $RXE_ROLE: $1 PASS"; else echo "pair $RXE_ROLE: $1 FAIL (exit $2)"; FAILED=1; fi
}

for f in "$SRV" "$CLI" "$BUILD/tests/torture" "$BUILD/tests/netfault"; do
  [ -x "$f" ] || { echo "missing $f: build it first (ninja -C $BUILD)"; exit 1; }
done

# start_server LOG FLAGS...: rkv-server in the background (SERVER_PID),
# answering a local ping before this returns
start_server() {
  local log=$1
  shift
  "$SRV" "$@" > "$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 100); do
    "$CLI" -s "rdma://$RXE_IP:$PORT" --timeout 2000 ping > /dev/null 2>&1 && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.2
  done
  echo "rkv-server did not come up:"; tail -n 5 "$log"
  return 1
}

stop_server() {  # SIGTERM; its exit status must be 0
  kill "$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID"
}

server_half() {
  local rc
  # --- lossy_torture: the eviction phase's flags (tests/torture.c), a small region
  PORT=$PORT_TORTURE
  rc=0
  start_server /tmp/torture-server.log --listen "rdma://$RXE_IP:$PORT" --memory 8M --evict lru \
    --event-mode --grace-ms 20 --workers 3 --log-level warn || rc=1
  rxe_signal torture.ready
  # the link turns bad once every torture process is connected (rdma_cm's
  # connect handshake retries a lost packet only after seconds)
  if rxe_wait torture.connected 120; then rxe_netem $NETEM && rxe_signal torture.lossy.server
  else echo "the torture never connected"; rc=1; fi
  rxe_wait torture.done 400 || { echo "the client half never finished the torture"; rc=1; }
  stop_server || { echo "rkv-server exited $?:"; tail -n 5 /tmp/torture-server.log; rc=1; }
  rxe_netem_clear
  verdict lossy_torture $rc

  # --- blackholes: the link is cut from the client guest; this guest's own
  # client goes over rxe loopback and never touches eth0
  PORT=$PORT_FAULT
  rc=0
  # a 1.07 s ACK timeout (x 7 tries: 7.5 s) so that a loaded TCG host's slow
  # tc calls never stretch the short blackhole past the server's retry budget
  start_server /tmp/fault-server.log --listen "rdma://$RXE_IP:$PORT" --memory 16M --event-mode \
    --rdma-ack-timeout 18 --log-level info || rc=1
  "$BUILD/tests/netfault" healthy "rdma://$RXE_IP:$PORT" & local hpid=$!
  rxe_signal bh.ready
  rxe_wait bh.done 300 || { echo "the client half never finished the blackholes"; rc=1; }
  wait "$hpid" || rc=1
  stop_server || { echo "rkv-server exited $?"; rc=1; }
  # the dead connections were found by the server's own probes (RC sends
  # nothing on an idle connection otherwise)
  local found
  found=$(grep -c "failed: IBV_WC_RETRY_EXC_ERR" /tmp/fault-server.log)
  if [ "$found" -ge 2 ]; then
    echo "ok   server: RC retries ran out on $found dead connections: $(grep -m1 IBV_WC_RETRY_EXC_ERR /tmp/fault-server.log | cut -c1-240)"
  else
    echo "FAIL server: RC retries ran out on $found dead connections (expected 2); its log:"; tail -n 20 /tmp/fault-server.log
    rc=1
  fi
  verdict blackholes $rc
}

client_half() {
  local rc np
  rxe_wait torture.ready 120
  { rxe_wait torture.connected 120 && rxe_netem $NETEM && rxe_signal torture.lossy.client; } & np=$!
  RKV_TORTURE_URI="rdma://$RXE_PEER_IP:$PORT_TORTURE" RKV_TORTURE_PHASES=evict \
    RKV_TORTURE_READY="$RXE_SHARED/torture.connected" timeout 300 "$BUILD/tests/torture" "$SRV" 12
  rc=$?
  wait "$np"
  for side in client server; do
    [ -e "$RXE_SHARED/torture.lossy.$side" ] || { echo "the $side side never made the link lossy"; rc=1; }
  done
  [ $rc = 0 ] && echo "ok   the torture ran over $NETEM both ways"
  rxe_signal torture.done
  rxe_netem_clear
  verdict lossy_torture $rc

  rxe_wait bh.ready 120
  timeout 240 "$BUILD/tests/netfault" client "rdma://$RXE_PEER_IP:$PORT_FAULT"
  rc=$?
  rxe_signal bh.done
  verdict blackholes $rc
}

echo "pair $RXE_ROLE on $RXE_DEV ($RXE_IP, peer $RXE_PEER_IP), build $BUILD"
case "$RXE_ROLE" in
  server) server_half;;
  client) client_half;;
  *) echo "RXE_ROLE must be server or client (run under scripts/rxe-vm/run.sh --pair)"; exit 2;;
esac
exit $FAILED
