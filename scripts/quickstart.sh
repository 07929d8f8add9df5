#!/usr/bin/env bash
# scripts/quickstart.sh — the README's first command: see rkv work in one go.
#
# On a fresh Debian machine (as root, or with sudo for the package step) it
# installs what is missing, builds, starts rkv-server on the best transport
# available (rdma when an RDMA device is present, else shm), preloads keys,
# runs a short rkv-bench with live progress, prints the report, and stops the
# server cleanly. Options: --seconds N (default 5), --threads N (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=5
threads=1
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2;;
    --threads) threads=$2; shift 2;;
    -h|--help) sed -n '2,9p' "$0"; exit 0;;
    *) echo "quickstart: unknown option $1 (try --help)" >&2; exit 2;;
  esac
done

if [ "$(id -u)" = 0 ]; then scripts/install-deps.sh; else sudo scripts/install-deps.sh; fi
if [ ! -f build/build.ninja ]; then meson setup build -Dbuildtype=release >/dev/null; fi
ninja -C build >/dev/null
echo "quickstart: built $(ls build/server/rkv-server build/bench/rkv-bench build/tools/rkv-cli | tr '\n' ' ')"

run=$(mktemp -d /tmp/rkv-quickstart.XXXXXX)
uri="shm://$run/rkv.sock"
# rdma when a device is up: an ACTIVE port with an IPv4 address on its netdev
if command -v ibv_devinfo >/dev/null && ibv_devinfo 2>/dev/null | grep PORT_ACTIVE >/dev/null; then
  ip=$(ip -4 -o addr show scope global 2>/dev/null | awk '{print $4}' | cut -d/ -f1 | head -1)
  [ -n "$ip" ] && uri="rdma://$ip:7471"
fi
echo "quickstart: starting rkv-server on $uri"
build/server/rkv-server --listen "$uri" --memory 512M --log-level warn &
server=$!
cleanup() { kill "$server" 2>/dev/null && wait "$server" 2>/dev/null; rm -rf "$run"; }
trap cleanup EXIT

for _ in $(seq 1 100); do build/tools/rkv-cli -s "$uri" ping >/dev/null 2>&1 && break; sleep 0.1; done
build/tools/rkv-cli -s "$uri" put hello world
echo "quickstart: rkv-cli get hello -> $(build/tools/rkv-cli -s "$uri" get hello)"
echo "quickstart: rkv-bench, ${seconds}s, ${threads} thread(s), 90% GET / 10% PUT, zipf 0.99, 100k keys"
build/bench/rkv-bench -s "$uri" --threads "$threads" --duration "$seconds" --keys 100000 \
  --key-size 16 --value-size 64 --get-ratio 0.9 --dist zipf:0.99 --window 1 --verify
kill -TERM "$server"; wait "$server"; rc=$?
trap - EXIT; rm -rf "$run"
echo "quickstart: server stopped (exit status $rc)"
exit "$rc"
