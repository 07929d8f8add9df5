#!/usr/bin/env bash
# tools/ab/shm-get.sh — issue 11's synchronous GET over shm, two builds side
# by side.
#
#   tools/ab/shm-get.sh BASE_BUILD NEW_BUILD [ROUNDS]     (default 7 rounds)
#
# Starts one rkv-server per build (256 MiB, shm only, in a temp dir), warms
# each with 2 s of its own rkv-bench, then alternates the two builds ROUNDS
# times: each build's own rkv-bench, pinned to CPU 0, 1 thread, window 1,
# uniform 100k keys, 64 B values, 100 % GET for 3 s against its own server.
# Prints one line per run (ops/s and the 1-minute load average, which says
# whether the host was quiet) and the medians with their ratio. A measuring
# tool for developers (docs/bench.md); a quiet host is the only one whose
# numbers mean anything.
set -euo pipefail
base=${1:?usage: shm-get.sh BASE_BUILD NEW_BUILD [ROUNDS]}
new=${2:?usage: shm-get.sh BASE_BUILD NEW_BUILD [ROUNDS]}
rounds=${3:-7}
# shellcheck source=servers.sh
. "$(dirname "$0")/servers.sh"
tmp=$ab_tmp
trap ab_stop EXIT

build_of() { if [ "$1" = b ]; then echo "$base"; else echo "$new"; fi; }

for x in b n; do ab_start $x "$(build_of $x)" warn; done
ab_wait b n
for x in b n; do
  "$(build_of $x)/tools/rkv-bench" -s "shm://$tmp/$x.sock" -t 1 -w 1 -k 100000 --value-size 64 \
    -r 1 -d 2s -q > /dev/null 2>&1
done
for r in $(seq "$rounds"); do
  for x in b n; do
    taskset -c 0 "$(build_of $x)/tools/rkv-bench" -s "shm://$tmp/$x.sock" -t 1 -w 1 -k 100000 \
      --value-size 64 -r 1 -d 3s --no-preload --json "$tmp/$x.$r.json" -q > /dev/null 2>&1
    ops=$(/usr/bin/python3 -c "import json,sys;print(int(json.load(open(sys.argv[1]))['ops_per_sec']))" \
      "$tmp/$x.$r.json")
    echo "round $r $([ $x = b ] && echo base || echo new) ops/s $ops load $(cut -d' ' -f1 /proc/loadavg)"
  done
done | tee "$tmp/out"
/usr/bin/python3 - "$tmp/out" <<'PY'
import statistics as st, sys
runs = {"base": [], "new": []}
for line in open(sys.argv[1]):
    f = line.split()
    runs[f[2]].append(int(f[4]))
b, n = st.median(runs["base"]), st.median(runs["new"])
ratios = [y / x for x, y in zip(runs["base"], runs["new"])]
print(f"median ops/s: base {b / 1e6:.2f} M, new {n / 1e6:.2f} M: {n / b:.2f}x of the medians, "
      f"median ratio per round {st.median(ratios):.2f}x")
PY
