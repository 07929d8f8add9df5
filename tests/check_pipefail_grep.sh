#!/usr/bin/env bash
# tests/check_pipefail_grep.sh — no `CMD | grep -q` in a script that runs
# under `set -o pipefail`.
#
# grep -q exits at its first match; if CMD is still writing it dies of
# SIGPIPE, and under pipefail the whole pipeline then reports failure for a
# match that was found. Whether that happens depends on scheduling (it failed
# the verbs suite's initramfs check on a fresh machine once:
# `busybox --list | grep -qx insmod`). Write `| grep PATTERN >/dev/null`
# (grep reads all of its input) or test a captured string instead.
#
# Usage: check_pipefail_grep.sh SOURCE_ROOT
set -u
root=${1:?usage: check_pipefail_grep.sh SOURCE_ROOT}
bad=0
while IFS= read -r f; do
  grep -q 'pipefail' "$f" || continue
  # a pipe into grep -q (or -qx, -qE, ...) on a line that is not a comment
  hits=$(grep -nE '\|[[:space:]]*grep[[:space:]]+-[a-zA-Z]*q' "$f" | grep -vE '^[0-9]+:[[:space:]]*#')
  if [ -n "$hits" ]; then
    echo "$f runs under pipefail and pipes into grep -q (a match can read as failure):"
    echo "$hits" | sed 's/^/  /'
    bad=1
  fi
done < <(cd "$root" && find scripts perf tools tests .ci -type f \( -name '*.sh' -o -name run \) 2>/dev/null | sort | sed "s|^|$root/|")
[ $bad = 0 ] && echo "check_pipefail_grep: no pipe into grep -q under pipefail"
exit $bad
