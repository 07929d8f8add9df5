#!/usr/bin/env bash
# perf/mc-diff.sh — the differential tester (tests/mc_diff.c) run long:
# rkv-server's tcp door against memcached 1.6.18, reply for reply.
#
#   perf/mc-diff.sh [BUILD_DIR] [SEEDS] [COMMANDS_PER_SEED]
#
# Defaults: build, 50 seeds of 20,000 commands (10^6 commands; about five
# minutes on two cores), the first seed from MC_DIFF_SEED or at random
# (printed, so a run can be repeated). Each seed runs on fresh server pairs,
# 10% of its commands with small memory. Differences are shrunk and printed
# (at most MC_DIFF_MAX_DIFFS kinds, default 20); the last lines are the
# tally: commands, steps, seeds, time, differences, and how often each
# allow-list rule applied. Exit status: the tester's (0 no difference, 1
# differences, 2 error, 77 memcached not installed).
set -euo pipefail

build=${1:-build}
seeds=${2:-50}
per_seed=${3:-20000}
first=${MC_DIFF_SEED:-$(( (RANDOM << 15 | RANDOM) % 1000000 + 1 ))}

tester=$build/tests/mc_diff
server=$build/server/rkv-server
for f in "$tester" "$server"; do
  if [ ! -x "$f" ]; then
    echo "mc-diff.sh: $f not found; build first (meson setup $build && ninja -C $build)" >&2
    exit 2
  fi
done

echo "mc-diff.sh: $seeds seeds from $first, $per_seed commands each (MC_DIFF_SEED=$first repeats it)"
exec "$tester" --rkv "$server" --seed "$first" --seeds "$seeds" --commands "$per_seed" \
  --max-diffs "${MC_DIFF_MAX_DIFFS:-20}"
