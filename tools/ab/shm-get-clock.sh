#!/usr/bin/env bash
# tools/ab/shm-get-clock.sh — shm-get.sh's measurement in three arms, to
# tell the library's gain from rkv-bench's clock (docs/bench.md):
#
#   tools/ab/shm-get-clock.sh BASE_BUILD NEW_BUILD [ROUNDS]    (default 9)
#
# Per round: BASE's rkv-bench against BASE's server, then NEW's rkv-bench
# with --clock monotonic (timed as the base times) and with --clock auto
# (the TSC where the kernel uses it) against NEW's server; 1 thread, window
# 1, uniform 100k keys, 64 B values, 100 % GET, 3 s each, pinned to CPU 0.
# Prints each round and the medians with their ratios. Needs a quiet host.
set -euo pipefail
base=${1:?usage: shm-get-clock.sh BASE_BUILD NEW_BUILD [ROUNDS]}
new=${2:?usage: shm-get-clock.sh BASE_BUILD NEW_BUILD [ROUNDS]}
rounds=${3:-9}
# shellcheck source=servers.sh
. "$(dirname "$0")/servers.sh"
tmp=$ab_tmp
trap ab_stop EXIT

ab_start b "$base" warn
ab_start n "$new" warn
ab_wait b n
run() {  # run BUILD NAME [ARGS...]: ops/s of one 3 s run
  local build=$1 name=$2
  shift 2
  taskset -c 0 "$build/tools/rkv-bench" -s "shm://$tmp/$name.sock" -t 1 -w 1 -k 100000 \
    --value-size 64 -r 1 -d 3s --no-preload --json "$tmp/run.json" -q "$@" > /dev/null 2>&1
  /usr/bin/python3 -c "import json,sys;print(int(json.load(open(sys.argv[1]))['ops_per_sec']))" \
    "$tmp/run.json"
}
"$base/tools/rkv-bench" -s "shm://$tmp/b.sock" -t 1 -w 1 -k 100000 --value-size 64 -r 1 -d 2s -q \
  > /dev/null 2>&1
"$new/tools/rkv-bench" -s "shm://$tmp/n.sock" -t 1 -w 1 -k 100000 --value-size 64 -r 1 -d 2s -q \
  > /dev/null 2>&1
for r in $(seq "$rounds"); do
  a=$(run "$base" b)
  m=$(run "$new" n --clock monotonic)
  t=$(run "$new" n --clock auto)
  echo "round $r base $a new-monotonic $m new-auto $t load $(cut -d' ' -f1 /proc/loadavg)"
done | tee "$tmp/out"
/usr/bin/python3 - "$tmp/out" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
b, m, t = ([int(r[i]) for r in rows] for i in (3, 5, 7))
print("medians: base %.2f M; new --clock monotonic %.2f M (%.2fx); new --clock auto %.2f M (%.2fx); "
      "median per-round ratios %.2fx and %.2fx" % (
          st.median(b) / 1e6, st.median(m) / 1e6, st.median(m) / st.median(b), st.median(t) / 1e6,
          st.median(t) / st.median(b), st.median([y / x for x, y in zip(b, m)]),
          st.median([y / x for x, y in zip(b, t)])))
PY
