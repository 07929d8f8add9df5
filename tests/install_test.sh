#!/usr/bin/env bash
# install_test.sh — `meson install` into a fresh prefix, then build the
# README's example program against it with pkg-config and run it against a
# real server: proves the installed header, libraries (shared with its
# SONAME, and static), rkv.pc, config and unit file are all usable, and the
# Python package (when built) imports from where /usr/bin/python3 looks.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(realpath "$1"); src=$(realpath "$2")
tmp=$(mktemp -d /tmp/rkv-install.XXXXXX)
server=""
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

DESTDIR="$tmp/root" meson install -C "$build" --no-rebuild --quiet
prefix=$(meson introspect "$build" --buildoptions | python3 -c \
  'import json,sys; print([o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"][0])')
root="$tmp/root$prefix"
for f in bin/rkv-server bin/rkv-cli bin/rkv-bench bin/rkv-doctor include/rkv.h; do
  [ -e "$root/$f" ] || { echo "install_test: $f not installed"; exit 1; }
done
find "$root" -name librkv.so.0 | grep . >/dev/null ||
  { echo "install_test: librkv.so.0 (SONAME) not installed"; find "$root" -name 'librkv*'; exit 1; }
find "$tmp/root" -name rkv.conf | grep . >/dev/null || { echo "install_test: rkv.conf not installed"; exit 1; }
find "$tmp/root" -name rkv-server.service | grep . >/dev/null || { echo "install_test: unit not installed"; exit 1; }
pc=$(dirname "$(find "$tmp/root" -name rkv.pc | head -1)")
[ -d "$pc" ] || { echo "install_test: rkv.pc not installed"; exit 1; }

# The README's C example, verbatim but for the socket path.
sock="$tmp/rkv.sock"
awk '/^```c$/{p=1;next} /^```$/{p=0} p' "$src/README.md" > "$tmp/example.body"
{ echo '#include <stdio.h>'; echo 'int main(void) {'; sed "s#/run/rkv/rkv.sock#$sock#" "$tmp/example.body" | grep -v '^#include <rkv.h>';
  echo 'printf("%.*s\n", (int)n, buf); return 0; }'; } > "$tmp/example.c"
sed -i '1i #include <rkv.h>' "$tmp/example.c"
export PKG_CONFIG_PATH="$pc" PKG_CONFIG_SYSROOT_DIR="$tmp/root"
# shellcheck disable=SC2046
cc -std=gnu11 -Wall -Werror "$tmp/example.c" -o "$tmp/example" $(pkg-config --cflags --libs rkv) \
  -Wl,-rpath,"$(dirname "$(find "$root" -name 'librkv.so.0' | head -1)")"
"$root/bin/rkv-server" --listen "shm://$sock" --memory 16M --log-level error &
server=$!
for _ in $(seq 600); do [ -S "$sock" ] && break; sleep 0.05; done   # safety net: 30 s
out=$("$tmp/example")
[ "$out" = '{"name":"ada"}' ] || { echo "install_test: example printed '$out'"; exit 1; }
# and the static library links too
cc -std=gnu11 "$tmp/example.c" -o "$tmp/example-static" $(pkg-config --cflags rkv) \
  "$(find "$root" -name librkv.a | head -1)" $(pkg-config --libs --static rkv | sed 's/-lrkv//')
[ "$("$tmp/example-static")" = '{"name":"ada"}' ]
# the Python package, when the build made it: installed in a directory
# /usr/bin/python3 searches (DESTDIR aside), and imported from there works
pkg=$(find "$tmp/root" -path '*/rkv/_rkv*.so' | head -1)
if [ -n "$pkg" ]; then
  site=$(dirname "$(dirname "$pkg")")
  /usr/bin/python3 -c 'import sys; sys.exit(sys.argv[1] not in sys.path)' "${site#"$tmp/root"}" ||
    { echo "install_test: the package went to ${site#"$tmp/root"}, which /usr/bin/python3 does not search"; exit 1; }
  out=$(cd "$tmp" && PYTHONPATH="$site" /usr/bin/python3 -c \
    'import rkv, sys; c = rkv.Client(sys.argv[1]); c.put("py", b"ok"); print(c.get("py").decode())' "shm://$sock")
  [ "$out" = ok ] || { echo "install_test: the installed Python package printed '$out'"; exit 1; }
  echo "install_test: the Python package, installed where /usr/bin/python3 looks: ok"
fi
echo "install_test: installed tree, pkg-config, shared and static example: ok"
