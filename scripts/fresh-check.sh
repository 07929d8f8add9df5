#!/usr/bin/env bash
# scripts/fresh-check.sh — check the README's promise on a pristine Debian 12.
#
# Debootstraps a minimal Debian 12 (debootstrap --variant=minbase bookworm,
# cached as a tarball), clones this repository's committed HEAD into it, and
# runs the README's two commands ("## Two commands": the first line of each
# fenced sh block, verbatim) as root in a chroot, one after the other. Prints
# PASS/FAIL (exit N, seconds) per command. Uncommitted changes are not seen.
#
# Usage: scripts/fresh-check.sh [options]
#   --only N       run only command N (1: quickstart, 2: the test suite)
#   --env VAR=VAL  set VAR in the commands' environment (repeatable), e.g.
#                  --env RKV_SKIP_VM=1 --env RKV_FUZZ_SECONDS=5 for a cheap run
#   --timeout SEC  time limit per command (default 3600); exit 124 when it runs out
#   --keep         keep the run's root folder (nothing stays mounted in it)
#   --rebuild      debootstrap the base system again instead of using the cache
#   --print        print the two commands it would run, and exit
#   -h, --help     this text
#
# Cache: RKV_FRESH_CHECK_DIR (default /var/tmp/rkv-fresh-check) holds the base
# tarball (base-bookworm.tar), logs and run folders. When it has no base yet,
# an equivalent minbase tarball at /var/tmp/fresh-machine/base-bookworm.tar
# is reused if present, else debootstrap builds one from the host's Debian
# mirror (debootstrap is installed with apt-get if missing).
#
# The chroot gets proc, sysfs, a bind of /dev and /dev/pts, and tmpfs on /tmp,
# /run and /dev/shm, all private; the host's apt sources and resolv.conf; and
# the /etc/hosts an installed system has (debootstrap writes none). On exit
# (also on errors, Ctrl-C, TERM) it ends every process whose root is the
# chroot, unmounts everything under it (deepest first, then lazily), and
# deletes the run folder unless --keep.
#
# Exit status: 0 every command passed, 1 one failed, 2 usage or setup error.
# Needs root; it is a chroot, not a VM: same kernel, network and PIDs.
set -uo pipefail
{ # read to the end before running: editing this file meanwhile cannot change a run

SUITE=bookworm
STATE=${RKV_FRESH_CHECK_DIR:-/var/tmp/rkv-fresh-check}
BASE=$STATE/base-$SUITE.tar
SHARED_BASE=/var/tmp/fresh-machine/base-$SUITE.tar
SRC=$(cd "$(dirname "$0")/.." && pwd -P)
ONLY=0
TIMEOUT=3600
KEEP=0
REBUILD=0
PRINT=0
ENVS=()

ROOT=""        # the run's chroot; set once it exists (the trap cleans it)
BUILD=""       # debootstrap's folder while the base is built
CHILD=""       # the command being waited for

say() { echo "fresh-check: $*" >&2; }
die() { say "$*"; exit 2; }
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --only)    ONLY=${2:-}; shift 2 || die "--only needs 1 or 2";;
    --env)     [[ ${2:-} == [A-Za-z_]*=* ]] || die "--env needs VAR=VALUE"; ENVS+=("$2"); shift 2;;
    --timeout) TIMEOUT=${2:-}; shift 2 || die "--timeout needs seconds";;
    --keep)    KEEP=1; shift;;
    --rebuild) REBUILD=1; shift;;
    --print)   PRINT=1; shift;;
    -h|--help) usage; exit 0;;
    *)         die "unknown option \"$1\" (see --help)";;
  esac
done
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive whole number of seconds"
[[ $ONLY =~ ^[012]$ ]] || die "--only must be 1 or 2"

# The README's two commands: under "## Two commands", the first non-empty line
# of each fenced sh block. Exactly two, or the README and this check drifted.
readme_commands() {
  awk '/^## /{ in_sec = ($0 == "## Two commands") ; next }
       in_sec && /^```sh/ { in_blk = 1; taken = 0; next }
       in_sec && /^```/   { in_blk = 0; next }
       in_sec && in_blk && !taken && NF { print; taken = 1 }' "$SRC/README.md"
}
mapfile -t CMDS < <(readme_commands)
[ ${#CMDS[@]} -eq 2 ] || die "README.md: expected two fenced sh blocks under \"## Two commands\", found ${#CMDS[@]}"
if [ $PRINT = 1 ]; then printf '%s\n' "${CMDS[@]}"; exit 0; fi

[ "$(id -u)" = 0 ] || die "run as root (debootstrap, mount and chroot need it)"
for t in git findmnt timeout tar chroot mount umount; do
  command -v "$t" >/dev/null || die "missing tool: $t"
done
HEAD=$(git -C "$SRC" -c safe.directory='*' rev-parse --verify -q 'HEAD^{commit}') || die "$SRC has no commit to check"
cd / || exit 2

# ------------------------------------------------------------ clean-up
mounts_under() { # DIR → mount points at or under it, deepest first
  findmnt -rn -o TARGET | awk -v d="$1" '$0 == d || index($0, d "/") == 1' | sort -r
}

end_procs_in() { # DIR: end, by PID, processes whose root is DIR
  local d=$1 sig p r n pids
  for sig in TERM KILL; do
    pids=()
    for p in /proc/[0-9]*; do
      r=$(readlink "$p/root" 2>/dev/null) || continue
      [ "$r" = "$d" ] && pids+=("${p#/proc/}")
    done
    [ ${#pids[@]} -eq 0 ] && return 0
    say "ending ${#pids[@]} process(es) left in the chroot (SIG$sig): ${pids[*]}"
    kill -s "$sig" "${pids[@]}" 2>/dev/null
    for n in $(seq 20); do
      r=0; for p in "${pids[@]}"; do [ -e "/proc/$p" ] && r=1; done
      [ $r = 0 ] && return 0
      sleep 0.25
    done
  done
}

teardown() { # DIR KEEP
  local d=$1 m pass
  [ -n "$d" ] && [ -d "$d" ] || return 0
  end_procs_in "$d/root"
  for pass in 1 2 3; do
    for m in $(mounts_under "$d"); do umount "$m" 2>/dev/null; done
    [ -z "$(mounts_under "$d")" ] && break
    sleep 1
  done
  for m in $(mounts_under "$d"); do umount -l "$m" 2>/dev/null; done   # busy: detach lazily
  if [ -n "$(mounts_under "$d")" ]; then
    say "still mounted under $d, not deleting it:"; mounts_under "$d" >&2
    return 1
  fi
  if [ "$2" = 1 ]; then say "kept $d/root"; return 0; fi
  rm -rf --one-file-system -- "$d"
}

cleanup() {
  local rc=$?
  trap '' INT TERM HUP
  [ -n "$CHILD" ] && { kill -TERM "$CHILD" 2>/dev/null; wait "$CHILD" 2>/dev/null; }
  teardown "$BUILD" 0 || rc=2
  teardown "$RUN" "$KEEP" || rc=2
  exit "$rc"
}
RUN=""
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM
trap 'exit 129' HUP

# run_bg CMD...: run in the background and wait, so a signal reaches the trap at once
run_bg() {
  "$@" </dev/null &
  CHILD=$!
  wait "$CHILD"; local rc=$?
  CHILD=""
  return $rc
}

# ------------------------------------------------------------ the base system
host_mirror() { # the host's Debian mirror (deb822 or one-line sources), else deb.debian.org
  local u
  u=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk 'tolower($1) == "uris:" { print $2; exit }')
  [ -z "$u" ] && u=$(awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; exit } }' \
                      /etc/apt/sources.list 2>/dev/null)
  echo "${u:-http://deb.debian.org/debian}"
}

build_base() {
  command -v debootstrap >/dev/null || {
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2; } ||
      die "cannot install debootstrap"
  }
  local mirror t0=$SECONDS
  mirror=$(host_mirror)
  BUILD=$(mktemp -d "$STATE/build.XXXXXX") || die "mktemp in $STATE failed"
  say "debootstrap --variant=minbase --include=git,ca-certificates $SUITE from $mirror (once; log: $STATE/debootstrap.log)"
  run_bg debootstrap --variant=minbase --include=git,ca-certificates "$SUITE" "$BUILD/root" "$mirror" \
    > "$STATE/debootstrap.log" 2>&1 || die "debootstrap failed; see $STATE/debootstrap.log"
  # pristine: no package lists or .debs baked in (a fresh machine runs apt-get update)
  rm -rf "$BUILD/root/var/lib/apt/lists/"* "$BUILD/root/etc/resolv.conf"
  find "$BUILD/root/var/cache/apt" -name '*.deb' -delete
  mkdir -p "$BUILD/root/var/lib/apt/lists/partial"
  tar --numeric-owner -C "$BUILD/root" -cf "$BASE.part" . && mv -f "$BASE.part" "$BASE" || die "cannot write $BASE"
  teardown "$BUILD" 0; BUILD=""
  say "base system built in $((SECONDS - t0)) s: $BASE"
}

mkdir -p "$STATE" || die "cannot create $STATE"
if [ $REBUILD = 1 ] || [ ! -f "$BASE" ]; then
  if [ $REBUILD = 0 ] && [ -f "$SHARED_BASE" ]; then
    say "reusing the base system $SHARED_BASE"; BASE=$SHARED_BASE
  else
    build_base
  fi
fi

# ------------------------------------------------------------ the run
mount_private() { # PATH-IN-ROOT mount-args...
  local t=$ROOT$1; shift
  mkdir -p "$t" && mount "$@" "$t" && mount --make-private "$t" || die "mount $* $t failed"
}

RUN=$(mktemp -d "$STATE/run.XXXXXX") || die "mktemp in $STATE failed"
ROOT=$RUN/root
mkdir -p "$ROOT"
tar --numeric-owner -C "$ROOT" -xpf "$BASE" || die "cannot unpack $BASE"
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true
# what every installed Debian has and debootstrap does not write
printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
  "$(hostname)" > "$ROOT/etc/hosts"
# the host's apt sources and keys: the same package archive, nothing more
rm -f "$ROOT/etc/apt/sources.list" "$ROOT"/etc/apt/sources.list.d/*
[ -f /etc/apt/sources.list ] && cp -L /etc/apt/sources.list "$ROOT/etc/apt/"
cp -L /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list "$ROOT/etc/apt/sources.list.d/" 2>/dev/null
for d in apt.conf.d trusted.gpg.d keyrings; do
  [ -d "/etc/apt/$d" ] && mkdir -p "$ROOT/etc/apt/$d" && cp -aL "/etc/apt/$d/." "$ROOT/etc/apt/$d/"
done
mount_private /proc -t proc proc
mount_private /sys -t sysfs sysfs
mount_private /dev --bind /dev
mount_private /dev/pts --bind /dev/pts
for d in /dev/shm /tmp /run; do mount_private "$d" -t tmpfs -o mode=1777,nosuid,nodev tmpfs; done
git -c safe.directory='*' clone -q --no-local "$SRC" "$ROOT/src/rkv" &&
  git -C "$ROOT/src/rkv" checkout -q --detach "$HEAD" || die "cannot clone $SRC at $HEAD"
say "Debian $(cat "$ROOT/etc/debian_version") in $ROOT, rkv at ${HEAD:0:12}"

results=()
failed=0
for i in 0 1; do
  [ "$ONLY" = 0 ] || [ "$ONLY" = $((i + 1)) ] || continue
  cmd=${CMDS[$i]}
  echo; echo "==== [$((i + 1))/2] $cmd"
  t0=$SECONDS
  run_bg timeout -k 10 "$TIMEOUT" chroot "$ROOT" /usr/bin/env -i -C /src/rkv \
    HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb "${ENVS[@]}" \
    /bin/bash -c "$cmd" > >(tee "$RUN/cmd-$((i + 1)).log") 2>&1
  rc=$?
  [ $rc = 0 ] && word=PASS || { word=FAIL; failed=1; }
  results+=("$word (exit $rc, $((SECONDS - t0)) s): $cmd")
done
echo; echo "==== fresh Debian 12, rkv ${HEAD:0:12}${ENVS[*]:+, with ${ENVS[*]}}"
printf '%s\n' "${results[@]}"
exit $failed
}
