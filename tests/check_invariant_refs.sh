#!/bin/sh
# check_invariant_refs.sh — every invariant a comment cites exists.
#
# Comments cite docs/design.md's invariants one way: "design.md invariant N"
# (or "design.md invariants N, M and K"). This checks that each cited number
# has its row ("| N. ...") in design.md's invariants table, and that no
# comment cites an invariant any other way ("invariant 5", "design-notes
# invariant 3"), which this check could not see.
# Usage: check_invariant_refs.sh SOURCE_ROOT
set -eu
cd "${1:-.}"
dirs="include common server client tools bench perf scripts tests"
self=check_invariant_refs.sh
fail=0

refs=$(grep -rhoE --exclude="$self" 'design\.md invariants? [0-9]+((, | and )[0-9]+)*' $dirs |
       grep -oE '[0-9]+' | sort -un)
if [ -z "$refs" ]; then
  echo "check_invariant_refs: no \"design.md invariant N\" found in $dirs; is this the source root?" >&2
  exit 1
fi
for n in $refs; do
  if ! grep -qE "^\| $n\. " docs/design.md; then
    echo "check_invariant_refs: design.md invariant $n is cited but docs/design.md has no row \"| $n. ...\"" >&2
    grep -rnE --exclude="$self" "design\.md invariants? ([0-9]+(, | and ))*$n\b" $dirs >&2 || true
    fail=1
  fi
done
other=$(grep -rnE --exclude="$self" 'invariants? [0-9]' $dirs | grep -vE 'design\.md invariants? [0-9]' || true)
if [ -n "$other" ]; then
  echo "check_invariant_refs: cite invariants as \"design.md invariant N\":" >&2
  echo "$other" >&2
  fail=1
fi
[ $fail -eq 0 ] && echo "check_invariant_refs: $(echo $refs | wc -w) invariants cited, all in docs/design.md"
exit $fail
