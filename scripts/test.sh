#!/usr/bin/env bash
# scripts/test.sh — install, build and run rkv's whole test suite.
#
# This is the README's test command and what CI (.ci/run) runs, as root, on a
# fresh Debian 12 machine with only the package archive reachable:
#   1. scripts/install-deps.sh: build, test and VM packages (apt-get);
#   2. plain build (build/, like every build here with --werror): unit +
#      integration tests (meson test);
#   3. AddressSanitizer + UBSan build (build-asan/): the same tests;
#      ThreadSanitizer build (build-tsan/): the server and the test of many
#      threads on one handle (shared_handle), the server's races included;
#   4. libFuzzer targets (build-fuzz/, clang): each for RKV_FUZZ_SECONDS (default 20);
#   5. the verbs suite in a Soft-RoCE VM (tests/verbs/run.sh): the integration
#      and transport tests over real RDMA verbs (skip with RKV_SKIP_VM=1).
# It ends with one line "N passed, N failed" over every stage and test.
set -uo pipefail
cd "$(dirname "$0")/.."

passed=0
failed=0
failures=()
stage() { echo; echo "==== $*"; }
ok()    { passed=$((passed + $1)); }
bad()   { failed=$((failed + $1)); failures+=("$2"); }

# meson test, counting its "Ok:" and "Fail:"/"Timeout:" lines
run_meson_tests() {
  local dir=$1 log
  log=$(mktemp)
  meson test -C "$dir" --print-errorlogs --num-processes 1 "${@:2}" 2>&1 | tee "$log"
  local o f t
  o=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$log" | tail -1)
  f=$(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$log" | tail -1)
  t=$(sed -n 's/^Timeout: *\([0-9]*\).*/\1/p' "$log" | tail -1)
  ok "${o:-0}"
  if [ "${f:-0}" != 0 ] || [ "${t:-0}" != 0 ] || [ -z "$o" ]; then
    bad "$(( ${f:-0} + ${t:-0} ))" "meson test in $dir"
    [ -z "$o" ] && bad 1 "meson test in $dir did not run"
  fi
  rm -f "$log"
}

# The fuzz stage's toolchain: clang and its libFuzzer + ASan runtime (a
# package clang only recommends). True when present; else one line naming
# the package to install.
fuzz_toolchain() {
  command -v clang >/dev/null 2>&1 || {
    echo "fuzz stage: clang missing; install clang (scripts/install-deps.sh does)"; return 1; }
  local arch lib f
  arch=$(clang -dumpmachine | cut -d- -f1)
  for lib in fuzzer asan; do
    f=$(clang -print-file-name="libclang_rt.$lib-$arch.a")
    if [[ $f != /* ]] || [ ! -f "$f" ]; then
      echo "fuzz stage: libFuzzer runtime missing (libclang_rt.$lib-$arch.a); install libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev (scripts/install-deps.sh does)"
      return 1
    fi
  done
}

# Every build here warns as an error (--werror): meson.build leaves werror off
# for users, so a newer compiler's warning cannot fail their plain build, and
# CI is where a warning must fail.
build() { # dir, meson options...
  local dir=$1; shift
  if [ -d "$dir" ] && [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure --werror "$dir" "$@" >/dev/null || return 1
  else
    meson setup --werror "$dir" "$@" >/dev/null || return 1
  fi
  ninja -C "$dir"
}

stage "install dependencies"
if [ "${RKV_SKIP_VM:-0}" = 1 ]; then scripts/install-deps.sh; else scripts/install-deps.sh --with-vm; fi || {
  echo "scripts/install-deps.sh failed"; exit 1; }

stage "plain build + tests"
if build build; then ok 1; run_meson_tests build; else bad 1 "plain build"; fi

stage "AddressSanitizer + UBSan build + tests"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
if build build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug; then
  ok 1; run_meson_tests build-asan --timeout-multiplier 3
else bad 1 "sanitizer build"; fi

stage "ThreadSanitizer: threads sharing a handle"
# Only the targets the test needs: the region's one-sided readers race with
# its writers by design (versions, not locks, order them), so the in-process
# table tests are not TSan material; the server and its clients are.
tsan_targets=(server/rkv-server tests/test_shared_handle)
if { [ -f build-tsan/build.ninja ] || meson setup --werror build-tsan -Db_sanitize=thread \
       -Dbuildtype=debug >/dev/null; } && ninja -C build-tsan "${tsan_targets[@]}"; then
  ok 1; TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0} run_meson_tests build-tsan --no-rebuild shared_handle
else bad 1 "thread sanitizer build"; fi

stage "fuzzing (libFuzzer, ${RKV_FUZZ_SECONDS:-20} s per target)"
if ! fuzz_toolchain; then bad 1 "fuzz toolchain"
elif CC=clang build build-fuzz -Dfuzz=true -Dbuildtype=debugoptimized; then
  ok 1
  for t in build-fuzz/tests/fuzz/fuzz_*; do
    [ -f "$t" ] && [ -x "$t" ] || continue
    name=$(basename "$t")
    corpus=tests/fuzz/corpus/${name#fuzz_}
    work=$(mktemp -d)
    [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
    if "$t" -max_total_time="${RKV_FUZZ_SECONDS:-20}" -print_final_stats=1 "$work" > "build-fuzz/$name.log" 2>&1; then
      echo "$name: $(grep -o 'stat::number_of_executed_units: *[0-9]*' "build-fuzz/$name.log" | grep -o '[0-9]*$') executions, no crash"
      ok 1
    else
      tail -40 "build-fuzz/$name.log"; bad 1 "fuzz target $name"
    fi
    rm -rf "$work"
  done
else bad 1 "fuzz build"; fi

if [ "${RKV_SKIP_VM:-0}" != 1 ]; then
  stage "verbs suite in a Soft-RoCE VM"
  if tests/verbs/run.sh -C build --quiet; then ok 1; else bad 1 "verbs suite (Soft-RoCE VM)"; fi
fi

echo
if [ "$failed" != 0 ]; then printf 'FAILED: %s\n' "${failures[@]}"; fi
echo "rkv: $passed passed, $failed failed"
[ "$failed" = 0 ]
