#!/usr/bin/env bash
# soak.sh — the torture workload for a long time, by hand (not in CI).
#
# Runs BUILD/tests/torture over shm: a real rkv-server with eviction on
# (--memory 12M, lru) and the key space larger than memory, two writers
# updating, deleting and re-inserting a hot key set, a cold population
# forcing evictions and page moves, and four readers (rkv_get and rkv_mget,
# with and without the location cache) checking every value for garbage,
# stale, future and regress (monotonic reads) anomalies; see the banner of
# tests/torture.c. It stops after --seconds, or once --gets GETs are
# checked, whichever comes first, and prints one line:
#
#   soak: N GETs checked, M anomalies, T s (R GETs/s)
#
# Exit status: torture's (0 when no anomaly, no client error and every reader
# type checked something), 2 on a bad option.
#
#   --seconds N      run for at most N seconds (default 60; with --gets alone,
#                    at most 7 days)
#   --gets N         stop once N GETs are checked
#   --phases P       evict (default), noevict (index nearly full, no eviction:
#                    false misses checked too) or both (each runs for --seconds)
#   --build DIR      the build directory (default: build)
#
# Bounded: the server's memory is 12 MiB (32 MiB with noevict) whatever the
# run's length; the readers' history is a few KiB each.
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//' >&2
    exit 2
}
die() { echo "soak: $*" >&2; exit 2; }
is_count() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }

seconds="" gets="" phases=evict build=build
while [ $# -gt 0 ]; do
    case $1 in
    --seconds) [ $# -ge 2 ] || die "--seconds needs a value"
               is_count "$2" || die "--seconds '$2': give a positive whole number of seconds"
               seconds=$2; shift 2 ;;
    --gets)    [ $# -ge 2 ] || die "--gets needs a value"
               is_count "$2" || die "--gets '$2': give a positive whole number of GETs"
               gets=$2; shift 2 ;;
    --phases)  [ $# -ge 2 ] || die "--phases needs a value"
               case $2 in evict|noevict|both) phases=$2 ;;
               *) die "--phases '$2': use evict, noevict or both" ;; esac
               shift 2 ;;
    --build)   [ $# -ge 2 ] || die "--build needs a value"
               build=$2; shift 2 ;;
    -h|--help) usage ;;
    *)         die "unknown option '$1' (see --help)" ;;
    esac
done
if [ -z "$seconds" ]; then
    if [ -n "$gets" ]; then seconds=604800; else seconds=60; fi
fi

torture=$build/tests/torture server=$build/server/rkv-server
[ -x "$torture" ] && [ -x "$server" ] ||
    die "no $torture or $server: build first (meson setup $build && ninja -C $build)"

log=$(mktemp "${TMPDIR:-/tmp}/rkv-soak.XXXXXX")
trap 'rm -f "$log"' EXIT

start=$(date +%s.%N)
rc=0
RKV_TORTURE_PHASES=$phases RKV_TORTURE_GETS=${gets:-0} \
    "$torture" "$server" "$seconds" | tee "$log" || rc=$?
end=$(date +%s.%N)

last=$(grep '^torture: ' "$log" | tail -n 1 || true)
if [[ $last =~ ^torture:\ ([0-9]+)\ GETs\ checked,\ ([0-9]+)\ anomalies ]]; then
    n=${BASH_REMATCH[1]} m=${BASH_REMATCH[2]}
    awk -v n="$n" -v m="$m" -v s="$start" -v e="$end" 'BEGIN {
        t = e - s; printf "soak: %d GETs checked, %d anomalies, %.1f s (%.0f GETs/s)\n",
                          n, m, t, (t > 0 ? n / t : 0) }'
else
    echo "soak: torture ended without its summary line (exit $rc)" >&2
    [ "$rc" -ne 0 ] || rc=1
fi
exit "$rc"
