#!/usr/bin/env bash
# readme_commands.sh — the README's two commands are what scripts/fresh-check.sh
# runs on a fresh Debian 12: it finds exactly two (the first line of each
# fenced sh block under "## Two commands"), and each starts with an
# executable script of this repository, run as root without sudo.
set -euo pipefail
src=${1:?usage: readme_commands.sh SOURCE_ROOT}
mapfile -t cmds < <("$src/scripts/fresh-check.sh" --print)
[ ${#cmds[@]} -eq 2 ] || { echo "expected 2 commands, got ${#cmds[@]}"; exit 1; }
for c in "${cmds[@]}"; do
  prog=${c%% *}
  [ -x "$src/$prog" ] || { echo "README command \"$c\": $prog is not an executable script here"; exit 1; }
  echo "ok: $c"
done
