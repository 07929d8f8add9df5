#!/usr/bin/env bash
# tests/torture_ready.sh — the torture's phase starts when every writer and
# reader is connected, and RKV_TORTURE_READY says so.
#
# The verbs suite's two-guest step makes the link lossy only once the
# torture's ready file exists. Connecting over rdma_cm on a loaded TCG host
# can take longer than a whole phase; the file used to be created from
# inside the phase's loop, which then ended before the last connection was
# up, so the file never came ("the torture never connected": the fresh
# machine's verbs link step failed so). Here every writer and reader waits
# RKV_TORTURE_CONNECT_DELAY_MS = 3 s, longer than the 1 s phase, before it
# connects: the file must still appear and the torture pass. Over shm.
#
# Usage: torture_ready.sh PATH/TO/torture PATH/TO/rkv-server
set -euo pipefail
torture=${1:?usage: torture_ready.sh TORTURE RKV_SERVER}
server=${2:?usage: torture_ready.sh TORTURE RKV_SERVER}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
RKV_TORTURE_PHASES=noevict RKV_TORTURE_READY="$tmp/ready" RKV_TORTURE_CONNECT_DELAY_MS=3000 \
  "$torture" "$server" 1 > "$tmp/out" 2>&1 || rc=$?
tail -n 3 "$tmp/out"
if [ ! -e "$tmp/ready" ]; then
  echo "FAIL: RKV_TORTURE_READY's file was never created (writers and readers connected after the phase ended)"
  exit 1
fi
if [ $rc != 0 ]; then
  echo "FAIL: torture exited $rc"
  exit 1
fi
echo "ok: the ready file came once every connection was up, and the phase passed"
