#!/usr/bin/env bash
# scripts/format.sh — lay out rkv's C files as .clang-format says, in place.
#
#   scripts/format.sh            every .c and .h under include/ common/ server/
#                                client/ tools/ bench/ perf/ tests/ python/ (build
#                                folders left out: the files tests/check_format.sh checks)
#   scripts/format.sh FILE...    just these
#
# Needs clang-format 14, Debian 12's (scripts/install-deps.sh installs it):
# the style is that version's reading of .clang-format, and another major
# version lays some constructs out differently, so it refuses one. CLANG_FORMAT
# names the program to use (default clang-format-14, else clang-format).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
want=14
dirs=(include common server client tools bench perf tests python)

case "${1:-}" in
  -h|--help) sed -n '2,12s/^# \{0,1\}//p' "$0"; exit 0 ;;
esac

cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
  for p in clang-format-$want clang-format; do
    if command -v "$p" >/dev/null 2>&1; then cf=$p; break; fi
  done
fi
if [ -z "$cf" ] || ! command -v "$cf" >/dev/null 2>&1; then
  echo "format.sh: clang-format is not installed; run scripts/install-deps.sh (or apt-get install clang-format)" >&2
  exit 1
fi
version=$("$cf" --version 2>/dev/null || true)
major=$(printf '%s\n' "$version" | sed -n 's/.*clang-format version \([0-9][0-9]*\).*/\1/p' | head -n 1)
if [ "$major" != "$want" ]; then
  echo "format.sh: $cf is \"$version\"; the style is pinned to clang-format $want (Debian 12's): set CLANG_FORMAT to one" >&2
  exit 1
fi

if [ $# -gt 0 ]; then
  files=("$@")   # as the caller names them; each finds the root's .clang-format above it
else
  cd "$root"
  mapfile -t files < <(find "${dirs[@]}" -type d \( -name 'build*' -o -name 'meson-*' \) -prune \
                         -o -type f \( -name '*.c' -o -name '*.h' \) -print | LC_ALL=C sort)
fi
"$cf" --style=file -i "${files[@]}"
# the continuation lines of trailing comments, which clang-format leaves
"$root/scripts/format-comments.py" "${files[@]}" >/dev/null
echo "format.sh: ${#files[@]} files formatted"
