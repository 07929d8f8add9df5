#!/bin/sh
# check_no_issue_refs.sh — no comment or document cites an issue number.
#
# "issue 11" means something only to whoever has the tracker open, and only
# while it stays where it is; a comment says what the code is and why, and
# history belongs in commit messages. This fails, naming file:line, when
# "issue N" (also "issue-N", "issue #N"; any case) appears in the source
# under include/ common/ server/ client/, in docs/ or in README.md.
# Usage: check_no_issue_refs.sh SOURCE_ROOT
set -eu
cd "${1:-.}"
paths="include common server client docs README.md"
for p in $paths; do
  if [ ! -e "$p" ]; then
    echo "check_no_issue_refs: $p not found in $(pwd); is this the source root?" >&2
    exit 1
  fi
done

hits=$(grep -rnIiE '(^|[^[:alnum:]_])issue[ -]?#?[0-9]' $paths || true)
if [ -n "$hits" ]; then
  echo "check_no_issue_refs: say what the thing is and why, not which issue asked for it:" >&2
  echo "$hits" >&2
  exit 1
fi
echo "check_no_issue_refs: no issue numbers in $paths"
