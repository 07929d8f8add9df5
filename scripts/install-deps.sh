#!/usr/bin/env bash
# scripts/install-deps.sh — install what building and testing rkv needs (Debian/Ubuntu, apt-get).
#
#   scripts/install-deps.sh                  build + unit tests + fuzzers
#   scripts/install-deps.sh --with-vm        + the Soft-RoCE VM's packages (scripts/rxe-vm, tests/verbs)
#   scripts/install-deps.sh --with-compare   + Redis for perf/compare.sh (memcached is in the base)
#
# Run as root. Idempotent: packages already installed are left alone, and
# when everything is present it prints nothing and exits 0. It needs only the
# distribution's package archive: `apt-get update` runs once, and only when
# a package to install has no candidate in the current package lists.
#
# It installs with --no-install-recommends, so whatever a stage needs that a
# package only recommends is listed here too: clang's libFuzzer and sanitizer
# runtime (libclang-rt-dev on Debian 12, see fuzz_runtime_pkg).
set -euo pipefail

base=(build-essential meson ninja-build pkg-config
      libibverbs-dev librdmacm-dev libxxhash-dev libinih-dev libcmocka-dev
      libmd-dev     # librkv: MD5 for ketama placement (client/placement_ketama.c)
      clang clang-format   # clang-format: the C style (.clang-format; scripts/format.sh, tests/check_format.sh)
      rdma-core ibverbs-utils ibverbs-providers
      chromium      # headless: tests/bench_html_test.sh renders rkv-bench's HTML report
      python3-pymemcache    # tests/test_memcache.c, test_twemproxy.c: a third-party memcached client
      python3-pylibmc libmemcached-tools   # tests/test_libmemcached.c: libmemcached, its ketama and tools;
                                           # tests/memccapable_test.sh: memccapable -a
      memcached     # tests/mc_diff.c: the reference the tcp door is compared with, reply for reply
      nutcracker    # tests/test_twemproxy.c: twemproxy in front of three rkv servers
      php-cli php-memcached   # tests/client.php: PHP's Memcached extension against the door
      golang-go golang-github-bradfitz-gomemcache-dev   # tests/client_gomemcache.go: Go's gomemcache
      python3-dev python3-pytest    # python/: the rkv package's build (-Dpython) and its tests
      python3-numpy)   # python/tests: get_into fills a numpy array
vm=(qemu-system-x86 busybox-static kmod cpio iproute2 perftest rdmacm-utils)
compare=(redis-server redis-tools)   # memcached and libmemcached-tools (memaslap) are in base

usage() {
  sed -n '2,11s/^# \{0,1\}//p' "$0"
}

want=("${base[@]}")
for arg in "$@"; do
  case "$arg" in
    --with-vm) want+=("${vm[@]}") ;;
    --with-compare) want+=("${compare[@]}") ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install-deps.sh: unknown option \"$arg\"; use --with-vm, --with-compare or --help" >&2
       exit 2 ;;
  esac
done

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-query >/dev/null 2>&1; then
  echo "install-deps.sh: apt-get/dpkg not found; on a non-Debian system install the equivalents of: ${want[*]}" >&2
  exit 1
fi

# The libFuzzer runtime, as clang looks it up (also what scripts/test.sh checks).
fuzz_runtime_present() {
  command -v clang >/dev/null 2>&1 || return 1
  local f
  f=$(clang -print-file-name="libclang_rt.fuzzer-$(clang -dumpmachine | cut -d- -f1).a" 2>/dev/null)
  [[ $f == /* ]] && [ -f "$f" ]
}

# The package that carries it: libclang-rt-dev (the default clang's runtime;
# Debian 12: it depends on libclang-rt-14-dev), else libclang-rt-N-dev for the
# clang-N that clang depends on; empty when the archive has neither (older
# releases ship the runtime in libclang-common-N-dev, which clang depends on).
fuzz_runtime_pkg() {
  local v
  if has_candidate libclang-rt-dev; then echo libclang-rt-dev; return; fi
  v=$(apt-cache depends clang 2>/dev/null | sed -n 's/^ *Depends: clang-\([0-9][0-9]*\)$/\1/p' | head -n 1)
  if [ -n "$v" ] && has_candidate "libclang-rt-$v-dev"; then echo "libclang-rt-$v-dev"; fi
}

installed() { # pkg → true when dpkg has it fully installed
  [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

has_candidate() { # pkg → true when the package lists offer a version of it
  local c
  c=$(apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: *//p')
  [ -n "$c" ] && [ "$c" != "(none)" ]
}

missing=()
for p in "${want[@]}"; do
  installed "$p" || missing+=("$p")
done
need_runtime=0
fuzz_runtime_present || installed libclang-rt-dev || need_runtime=1
[ ${#missing[@]} -eq 0 ] && [ $need_runtime = 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  [ $need_runtime = 1 ] && missing+=("libclang-rt-dev (clang's libFuzzer runtime)")
  echo "install-deps.sh: missing packages: ${missing[*]}" >&2
  echo "install-deps.sh: run as root (sudo $0 $*) to install them" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
refresh_lists() { # why
  echo "install-deps.sh: $1; running apt-get update" >&2
  apt-get update -q >&2 || { echo "install-deps.sh: apt-get update failed; is the package archive reachable?" >&2; exit 1; }
}
refreshed=0
for p in "${missing[@]}"; do
  if ! has_candidate "$p"; then
    refresh_lists "$p is not in the package lists"
    refreshed=1
    break
  fi
done
if [ $need_runtime = 1 ]; then
  rt=$(fuzz_runtime_pkg)
  if [ -z "$rt" ] && [ $refreshed = 0 ]; then
    refresh_lists "no libclang-rt package in the package lists"
    rt=$(fuzz_runtime_pkg)
  fi
  if [ -n "$rt" ]; then
    installed "$rt" || missing+=("$rt")
  else
    echo "install-deps.sh: the archive has no libclang-rt-dev; assuming clang's own packages carry the libFuzzer runtime (scripts/test.sh checks)" >&2
  fi
fi
[ ${#missing[@]} -eq 0 ] && exit 0

unknown=()
for p in "${missing[@]}"; do
  has_candidate "$p" || unknown+=("$p")
done
if [ ${#unknown[@]} -gt 0 ]; then
  echo "install-deps.sh: the package archive has no ${unknown[*]}; enable the distribution's main archive (Debian 12: bookworm main) and retry" >&2
  exit 1
fi

echo "install-deps.sh: installing ${missing[*]}" >&2
if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; then
  # stale package lists name files the archive no longer has: refresh once, retry
  echo "install-deps.sh: apt-get install failed; refreshing the package lists and retrying" >&2
  if ! { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; }; then
    echo "install-deps.sh: apt-get install failed (see above)" >&2
    exit 1
  fi
fi

still=()
for p in "${missing[@]}"; do
  installed "$p" || still+=("$p")
done
if [ ${#still[@]} -gt 0 ]; then
  echo "install-deps.sh: still not installed after apt-get: ${still[*]}" >&2
  exit 1
fi
