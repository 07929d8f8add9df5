#!/usr/bin/env bash
# perf/ab/window.sh — the 90/10 mix over shm at window 1 and window
# 16, two builds side by side (the same build twice is a noise check).
#
#   perf/ab/window.sh OLD_BUILD NEW_BUILD [ROUNDS]     (default 5 rounds)
#
# One rkv-server per build (256 MiB, shm only), each loaded by its own
# rkv-bench; then ROUNDS times, per build: 1 client thread, uniform 100k
# keys of 16 B, 32 B values, 90 % GET for 3 s at window 1, then at window
# 16. Prints ops/s, the mean in-flight depth rkv-bench reached and the load
# average per run, and per build the medians and the median window 16 ÷
# window 1 ratio. A measuring tool for developers (docs/bench.md).
set -euo pipefail
old=${1:?usage: window.sh OLD_BUILD NEW_BUILD [ROUNDS]}
new=${2:?usage: window.sh OLD_BUILD NEW_BUILD [ROUNDS]}
rounds=${3:-5}
# shellcheck source=servers.sh
. "$(dirname "$0")/servers.sh"
tmp=$ab_tmp
trap ab_stop EXIT

build_of() { if [ "$1" = old ]; then echo "$old"; else echo "$new"; fi; }

for x in old new; do ab_start $x "$(build_of $x)" error; done
ab_wait old new
for x in old new; do
  "$(ab_bench "$(build_of $x)")" -s "shm://$tmp/$x.sock" -t 1 -w 1 -k 100000 --key-size 16 \
    --value-size 32 -r 1 -d 1s -q > /dev/null 2>&1
done
for r in $(seq "$rounds"); do
  for x in old new; do
    for w in 1 16; do
      "$(ab_bench "$(build_of $x)")" -s "shm://$tmp/$x.sock" -t 1 -w $w -k 100000 --key-size 16 \
        --value-size 32 -r 0.9 -d 3s --no-preload --json "$tmp/j.json" -q > /dev/null 2>&1
      echo "round $r $x w$w $(/usr/bin/python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print(int(d['ops_per_sec']), round(d.get('mean_in_flight') or 0, 2))" "$tmp/j.json") load $(cut -d' ' -f1 /proc/loadavg)"
    done
  done
done | tee "$tmp/out"
/usr/bin/python3 - "$tmp/out" <<'PY'
import collections, statistics as st, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    f = line.split()
    runs[(f[2], f[1])][f[3]] = int(f[4])
for build in ("old", "new"):
    w1 = [v["w1"] for k, v in runs.items() if k[0] == build]
    w16 = [v["w16"] for k, v in runs.items() if k[0] == build]
    ratio = [v["w16"] / v["w1"] for k, v in runs.items() if k[0] == build]
    print(f"{build}: window 1 median {st.median(w1) / 1e6:.2f} M, window 16 median "
          f"{st.median(w16) / 1e6:.2f} M ops/s, median ratio {st.median(ratio):.2f}x")
PY
