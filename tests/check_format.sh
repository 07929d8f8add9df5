#!/usr/bin/env bash
# check_format.sh — every C file of the project is laid out as .clang-format
# says.
#
# Runs clang-format --dry-run --Werror on each .c and .h under include/
# common/ server/ client/ tools/ bench/ perf/ tests/ python/ (build folders
# left out; the same files scripts/format.sh formats) and fails naming the files
# it would change, with the start of the first one's diff. The style is
# clang-format 14's reading of .clang-format (Debian 12's clang-format):
# another major version lays some constructs out differently, so with
# another version, or none, this skips (77) and says why. CLANG_FORMAT names
# the program to use (default clang-format-14, else clang-format).
#
# Usage: check_format.sh SOURCE_ROOT
set -euo pipefail
root=${1:?usage: check_format.sh SOURCE_ROOT}
cd "$root"
want=14
dirs=(include common server client tools bench perf tests python)

cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
  for p in clang-format-$want clang-format; do
    if command -v "$p" >/dev/null 2>&1; then cf=$p; break; fi
  done
fi
if [ -z "$cf" ] || ! command -v "$cf" >/dev/null 2>&1; then
  echo "check_format: clang-format is not installed (apt-get install clang-format); skipped" >&2
  exit 77
fi
version=$("$cf" --version 2>/dev/null || true)
major=$(printf '%s\n' "$version" | sed -n 's/.*clang-format version \([0-9][0-9]*\).*/\1/p' | head -n 1)
if [ "$major" != "$want" ]; then
  echo "check_format: $cf is \"$version\"; the style is pinned to clang-format $want (Debian 12's); skipped" >&2
  exit 77
fi
for d in "${dirs[@]}" .clang-format; do
  if [ ! -e "$d" ]; then
    echo "check_format: $d not found in $(pwd); is this the source root?" >&2
    exit 1
  fi
done
# A broken .clang-format would fail every file: say so instead.
if ! "$cf" --style=file --dump-config include/rkv.h >/dev/null; then
  echo "check_format: $cf cannot read .clang-format (above)" >&2
  exit 1
fi

# Build folders (anything meson set up) are not the project's files.
mapfile -t files < <(find "${dirs[@]}" -type d \( -name 'build*' -o -name 'meson-*' \) -prune \
                       -o -type f \( -name '*.c' -o -name '*.h' \) -print | LC_ALL=C sort)
bad=()
for f in "${files[@]}"; do
  if ! "$cf" --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then
    bad+=("$f")
  fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format: ${#bad[@]} of ${#files[@]} C files are not formatted as .clang-format says; scripts/format.sh formats them:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "check_format: what $cf would change in ${bad[0]} (first 40 lines):" >&2
  "$cf" --style=file "${bad[0]}" | diff -u "${bad[0]}" - | head -n 40 >&2 || true
  exit 1
fi
echo "check_format: ${#files[@]} C files, all formatted as .clang-format says"
