#!/usr/bin/env bash
# readme_build.sh — the README's "Building by hand" block, run as written.
#
# Takes the first ```sh block under "## Building by hand" in README.md, drops
# the comments, and runs each line verbatim with bash in a throwaway copy of
# the source tree (a temporary folder), so a documented command that no
# longer works fails the suite. Every line must start with meson or ninja,
# except the one that runs install-deps.sh (it installs packages as root: not
# here); a line of any other kind fails this test, so the block cannot grow a
# command this test silently leaves out. `meson install` runs with DESTDIR set
# to a folder in the copy.
#
# The lines run unchanged; two wrappers ahead on PATH add to what they run:
#   meson setup  gets --werror when this script is given --werror (the suite's
#                build has werror on, as in CI: the documented builds then
#                warn as errors too);
#   meson test   gets the arguments after "--" (e.g. --suite unit: the suite
#                checks the command, the outer run already ran every test);
#   ninja        gets -jN when RKV_BUILD_JOBS=N is set (a shared machine).
# The nested `meson test` would run this test again: RKV_README_BUILD=1 is
# set for the lines, and with it set this script skips (77).
#
# Usage: readme_build.sh SOURCE_ROOT [--werror] [-- MESON_TEST_ARGS...]
set -euo pipefail
if [ "${RKV_README_BUILD:-}" = 1 ]; then
  echo "readme_build: inside a README build already; skipped"
  exit 77
fi
src=$(realpath "${1:?usage: readme_build.sh SOURCE_ROOT [--werror] [-- MESON_TEST_ARGS...]}")
shift
setup_extra=()
test_extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --werror) setup_extra+=(--werror); shift;;
    --) shift; test_extra=("$@"); break;;
    *) echo "readme_build: unknown argument \"$1\"" >&2; exit 2;;
  esac
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rkv-readme-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The block's commands: comments dropped (a "#" after a blank), empty lines skipped.
mapfile -t lines < <(awk '/^## /{ in_sec = ($0 == "## Building by hand"); next }
     in_sec && !done && /^```sh/ { in_blk = 1; next }
     in_sec && in_blk && /^```/ { in_blk = 0; done = 1; next }
     in_sec && in_blk { print }' "$src/README.md" |
  sed -e 's/^[[:space:]]*#.*$//' -e 's/[[:space:]]\{1,\}#.*$//' -e 's/[[:space:]]*$//' | grep -v '^$' || true)
[ ${#lines[@]} -gt 0 ] || { echo "readme_build: no sh block under \"## Building by hand\" in README.md"; exit 1; }

# The source tree as it is now (uncommitted changes included), without build
# folders: git's tracked and unignored files, or everything but /build*/ and .git.
mkdir "$tmp/src"
if git -C "$src" rev-parse --show-toplevel >/dev/null 2>&1 &&
   [ "$(git -C "$src" rev-parse --show-toplevel)" = "$src" ]; then
  git -C "$src" ls-files -z --cached --others --exclude-standard |
    (cd "$src" && xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) |
    tar -C "$src" --null -T - -cf - | tar -C "$tmp/src" -xf -
else
  tar -C "$src" --exclude='./build*' --exclude=./.git --exclude=./.rxe-vm -cf - . | tar -C "$tmp/src" -xf -
fi

# The wrappers (see the top).
quote() { local a out=""; for a in "$@"; do out+=" $(printf %q "$a")"; done; printf %s "$out"; }
mkdir "$tmp/bin"
real_meson=$(command -v meson)
real_ninja=$(command -v ninja)
cat > "$tmp/bin/meson" <<EOF
#!/usr/bin/env bash
case "\${1:-}" in
  setup) exec $(printf %q "$real_meson") "\$@"$(quote "${setup_extra[@]}");;
  test)  exec $(printf %q "$real_meson") "\$@"$(quote "${test_extra[@]}");;
esac
exec $(printf %q "$real_meson") "\$@"
EOF
cat > "$tmp/bin/ninja" <<EOF
#!/usr/bin/env bash
exec $(printf %q "$real_ninja") \${RKV_BUILD_JOBS:+-j"\$RKV_BUILD_JOBS"} "\$@"
EOF
chmod +x "$tmp/bin/meson" "$tmp/bin/ninja"

export PATH="$tmp/bin:$PATH" NINJA="$tmp/bin/ninja" RKV_README_BUILD=1 DESTDIR="$tmp/destdir"
n=0
for line in "${lines[@]}"; do
  n=$((n + 1))
  case "$line" in
    *install-deps.sh*) echo "skip: $line   (installs packages)"; continue;;
    meson\ *|ninja\ *) ;;
    *) echo "readme_build: README line \"$line\" is neither meson nor ninja: run it here or skip it on purpose"; exit 1;;
  esac
  log="$tmp/cmd$n.log"
  start=$SECONDS
  if (cd "$tmp/src" && bash -euo pipefail -c "$line") > "$log" 2>&1; then
    echo "ok ($((SECONDS - start)) s): $line"
  else
    rc=$?
    tail -n 60 "$log"
    echo "readme_build: README command failed (exit $rc): $line"
    exit 1
  fi
done
[ -d "$tmp/destdir" ] || echo "note: nothing was installed (no meson install line)"
