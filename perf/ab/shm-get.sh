#!/usr/bin/env bash
# perf/ab/shm-get.sh — the synchronous GET over shm, two builds side
# by side.
#
#   perf/ab/shm-get.sh [--clocks] BASE_BUILD NEW_BUILD [ROUNDS]   (default 7 rounds)
#
# Starts one rkv-server per build (256 MiB, shm only, in a temp dir), warms
# each with 2 s of its own rkv-bench, then alternates the two builds ROUNDS
# times: each build's own rkv-bench, pinned to CPU 0, 1 thread, window 1,
# uniform 100k keys, 64 B values, 100 % GET for 3 s against its own server.
# --clocks adds a third arm per round: NEW's rkv-bench with --clock
# monotonic, timed as a build from before rkv-bench's TSC clock times, which
# tells the library's gain from the clock's
# (docs/results/2026-12-01-bench-tsc-clock.md).
# Prints one line per run (ops/s and the 1-minute load average, which says
# whether the host was quiet) and the medians with their ratios to the
# base. A measuring tool for developers (docs/bench.md); a quiet host is the
# only one whose numbers mean anything.
set -euo pipefail
arms=(base new)
if [ "${1:-}" = --clocks ]; then arms=(base new-monotonic new); shift; fi
base=${1:?usage: shm-get.sh [--clocks] BASE_BUILD NEW_BUILD [ROUNDS]}
new=${2:?usage: shm-get.sh [--clocks] BASE_BUILD NEW_BUILD [ROUNDS]}
rounds=${3:-7}
# shellcheck source=servers.sh
. "$(dirname "$0")/servers.sh"
tmp=$ab_tmp
trap ab_stop EXIT

build_of() { if [ "$1" = b ]; then echo "$base"; else echo "$new"; fi; }

for x in b n; do ab_start $x "$(build_of $x)" warn; done
ab_wait b n
for x in b n; do
  "$(ab_bench "$(build_of $x)")" -s "shm://$tmp/$x.sock" -t 1 -w 1 -k 100000 --value-size 64 \
    -r 1 -d 2s -q > /dev/null 2>&1
done
for r in $(seq "$rounds"); do
  for arm in "${arms[@]}"; do
    x=n extra=()
    case $arm in base) x=b;; new-monotonic) extra=(--clock monotonic);; esac
    taskset -c 0 "$(ab_bench "$(build_of $x)")" -s "shm://$tmp/$x.sock" -t 1 -w 1 -k 100000 \
      --value-size 64 -r 1 -d 3s --no-preload --json "$tmp/$arm.$r.json" -q ${extra[@]+"${extra[@]}"} \
      > /dev/null 2>&1
    ops=$(/usr/bin/python3 -c "import json,sys;print(int(json.load(open(sys.argv[1]))['ops_per_sec']))" \
      "$tmp/$arm.$r.json")
    echo "round $r $arm ops/s $ops load $(cut -d' ' -f1 /proc/loadavg)"
  done
done | tee "$tmp/out"
/usr/bin/python3 - "$tmp/out" <<'PY'
import statistics as st, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.split()
    runs.setdefault(f[2], []).append(int(f[4]))
b = st.median(runs["base"])
print(f"median ops/s: base {b / 1e6:.2f} M", end="")
for arm, v in runs.items():
    if arm != "base":
        ratios = [y / x for x, y in zip(runs["base"], v)]
        print(f"; {arm} {st.median(v) / 1e6:.2f} M: {st.median(v) / b:.2f}x of the medians, "
              f"median ratio per round {st.median(ratios):.2f}x", end="")
print()
PY
