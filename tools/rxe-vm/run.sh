#!/usr/bin/env bash
# tools/rxe-vm/run.sh — run a command next to a real Soft-RoCE (rdma_rxe) device.
#
# Why: rkv's product transport is RDMA verbs, but CI machines and laptops
# rarely have an RDMA NIC, and container kernels often lack rdma_rxe. This
# script boots Debian's stock kernel (which has rdma_rxe) in a throw-away qemu
# guest, shares the host's root filesystem read-only into it, creates an rxe
# device on a guest-only dummy interface, and runs your command there. Your
# build output, rdma-core and perftest from the host run unchanged, against a
# real verbs + rdma_cm stack. Nothing leaves the guest: it has no NIC.
#
# Usage:
#   tools/rxe-vm/run.sh [options] [--] 'shell command'
#   tools/rxe-vm/run.sh --prepare          install packages, fetch the kernel, build the initramfs
#
# Options:
#   --timeout SEC  kill the guest after SEC seconds (default 600); exit status 124
#   --rw DIR       share host DIR read-write at the same path (repeatable). The guest
#                  mounts its own tmpfs on /tmp, /run and /dev/shm, so host folders
#                  under those are only visible when shared this way.
#   --cwd DIR      working directory in the guest (default: the current one)
#   --quiet        do not stream the guest console; print only the command's output
#   --keep         keep the run folder (console log, outputs) even on success
#   --mem MB       guest memory (default 2048)     --smp N   guest CPUs (default 2)
#   --accel A      auto|kvm|tcg (default auto: KVM when /dev/kvm is usable with
#                  kvm_intel/kvm_amd, else TCG; a KVM guest that does not start
#                  within 60 s is retried under TCG and the verdict cached)
#   --prepare      only prepare (idempotent); no guest is started
#
# In the guest the command runs as root under bash, in the host's root fs
# (read-only), with these variables set:
#   RXE_DEV        the rxe device (rxe0)
#   RXE_NETDEV     the interface it is bound to (rxedummy0)
#   RXE_IP         the interface's IPv4 address (192.0.2.1; RXE_VM_CIDR changes it)
#   RXE_GID_INDEX  the GID index of the RoCEv2 IPv4 GID
#   RXE_OUT        a writable folder that is kept on the host after the run
#
# Exit status: the command's. 124: timeout; 125: the guest stopped without
# reporting one (see the console log in the run folder); 126: rxe setup failed.
#
# Environment: RKV_RXE_VM_CACHE (default /var/tmp/rkv-rxe-vm) holds the kernel
# .deb, the extracted kernel, the initramfs and the run folders; once it holds
# them, runs need no network. RXE_VM_KVER picks a kernel version
# (default: what linux-image-amd64 depends on). Run as root: apt-get, and qemu
# sharing / over 9p with the host's ownership, need it.
set -euo pipefail

CACHE=${RKV_RXE_VM_CACHE:-/var/tmp/rkv-rxe-vm}
CIDR=${RXE_VM_CIDR:-192.0.2.1/24}   # RFC 5737 documentation range, guest-local
TIMEOUT=600
MEM=2048
SMP=2
ACCEL=auto
CWD=$PWD
RW_DIRS=()
QUIET=0
KEEP=0
PREPARE_ONLY=0
CMD=""

# Kernel modules the guest loads (dependencies are added automatically):
# crc32_generic: rdma_rxe needs the "crc32" hash; the guest has no modprobe
#   helper to load it on demand ("rdma link add" fails with ENOENT without it).
# virtio_pci, 9pnet_virtio, 9p: the host filesystem shares.
# ib_uverbs, rdma_rxe, rdma_ucm (+ ib_cm, iw_cm, rdma_cm): verbs and rdma_cm
#   from user space. dummy: the interface rxe binds to (rdma_cm cannot route over lo).
GUEST_MODULES="crc32_generic crc32_pclmul virtio_pci 9pnet_virtio 9p udp_tunnel ip6_udp_tunnel
ib_core ib_uverbs rdma_rxe ib_cm iw_cm rdma_cm rdma_ucm dummy"

say() { echo "rxe-vm: $*" >&2; }
die() { say "$*"; exit 1; }

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

# ------------------------------------------------------------------ options
while [ $# -gt 0 ]; do
  case "$1" in
    --timeout) TIMEOUT=${2:?--timeout needs seconds}; shift 2;;
    --rw)      [ -d "${2:-}" ] || die "--rw ${2:-}: not a directory"; RW_DIRS+=("$(realpath "$2")"); shift 2;;
    --cwd)     CWD=${2:?--cwd needs a directory}; shift 2;;
    --mem)     MEM=${2:?}; shift 2;;
    --smp)     SMP=${2:?}; shift 2;;
    --accel)   ACCEL=${2:?}; shift 2;;
    --quiet)   QUIET=1; shift;;
    --keep)    KEEP=1; shift;;
    --prepare) PREPARE_ONLY=1; shift;;
    -h|--help) usage; exit 0;;
    --)        shift; CMD="$*"; break;;
    -*)        die "unknown option $1 (see --help)";;
    *)         CMD="$*"; break;;
  esac
done
case "$TIMEOUT$MEM$SMP" in *[!0-9]*) die "--timeout, --mem and --smp take whole numbers";; esac
case "$ACCEL" in auto|kvm|tcg) ;; *) die "--accel must be auto, kvm or tcg";; esac
[ "$(id -u)" = 0 ] || die "run as root (apt-get, and qemu sharing / over 9p, need it)"
[ $PREPARE_ONLY = 1 ] || [ -n "$CMD" ] || die "no command given (see --help)"

# ------------------------------------------------------------------ prepare
install_packages() {
  local missing=() need
  # command -> Debian package
  for need in qemu-system-x86_64:qemu-system-x86 cpio:cpio modprobe:kmod depmod:kmod \
              rdma:iproute2 ibv_devinfo:ibverbs-utils ib_read_lat:perftest rping:rdmacm-utils; do
    command -v "${need%%:*}" >/dev/null || missing+=("${need#*:}")
  done
  ls /usr/lib/*/libibverbs/librxe-rdmav*.so >/dev/null 2>&1 || missing+=(ibverbs-providers)
  # the initramfs needs a static busybox (the dynamic one may be installed instead)
  dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]}"
  apt-get update -qq >&2 || true
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# Sets KVER, KDIR, VMLINUZ. Downloads and unpacks the kernel package if needed.
fetch_kernel() {
  KVER=${RXE_VM_KVER:-}
  if [ -z "$KVER" ]; then   # a kernel already unpacked here wins: no network needed
    KVER=$(find "$CACHE" -mindepth 4 -maxdepth 4 -path "$CACHE/kernel-*/lib/modules/*" -printf '%f\n' 2>/dev/null |
           sort -V | tail -n 1 || true)
  fi
  if [ -z "$KVER" ]; then
    resolve() { apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: linux-image-//p' | head -n 1; }
    KVER=$(resolve)
    [ -n "$KVER" ] || { apt-get update -qq >&2 || true; KVER=$(resolve); }
    [ -n "$KVER" ] || die "cannot tell which kernel linux-image-amd64 means (apt-cache depends linux-image-amd64)"
  fi
  KDIR=$CACHE/kernel-$KVER
  VMLINUZ=$KDIR/boot/vmlinuz-$KVER
  [ -e "$VMLINUZ" ] && [ -e "$KDIR/lib/modules/$KVER/modules.dep" ] && return 0

  mkdir -p "$CACHE/debs"
  local deb
  deb=$(find "$CACHE/debs" -name "linux-image-${KVER}_*.deb" | head -n 1)
  if [ -z "$deb" ]; then
    say "downloading linux-image-$KVER"
    dl() { (cd "$CACHE/debs" && apt-get -q -o APT::Sandbox::User=root download "linux-image-$KVER" >&2); }
    dl || { apt-get update -qq >&2 || true; dl; } || die "apt-get download linux-image-$KVER failed"
    deb=$(find "$CACHE/debs" -name "linux-image-${KVER}_*.deb" | head -n 1)
    [ -n "$deb" ] || die "apt-get download left no linux-image-$KVER .deb in $CACHE/debs"
  fi
  say "unpacking $(basename "$deb")"
  rm -rf "$KDIR"
  mkdir -p "$KDIR"
  dpkg-deb -x "$deb" "$KDIR"
  depmod -b "$KDIR" "$KVER"
}

# The guest's /init: load modules, mount the host's / over 9p, chroot in and
# run the per-run guest script; report the exit status on the console.
write_init() {
  cat > "$1" <<'EOF'
#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "RXE_VM_INIT_STARTED"
for m in $(cat /modules.list); do
  case $m in dummy.ko) insmod /lib/modules/$m numdummies=0;; *) insmod /lib/modules/$m;; esac \
    || echo "rxe-vm: insmod $m failed"
done
RUN=""
for w in $(cat /proc/cmdline); do case $w in rxevm.run=*) RUN=${w#rxevm.run=};; esac; done
O="trans=virtio,version=9p2000.L,msize=512000"
rc=125
if mount -t 9p -o "$O,ro,cache=loose" hostroot /newroot; then
  R=/newroot
  mount -t proc proc $R/proc
  mount -t sysfs sysfs $R/sys
  mount -t devtmpfs devtmpfs $R/dev
  mkdir -p $R/dev/pts $R/dev/shm
  mount -t devpts devpts $R/dev/pts
  for d in /dev/shm /tmp /run; do mount -t tmpfs tmpfs $R$d; done
  mount -t 9p -o "$O" rxerun $R$RUN || echo "rxe-vm: cannot mount the run folder"
  while read -r tag path; do
    # under the guest's tmpfs (/tmp ...) the mount point must be made first
    [ -n "$tag" ] && { mkdir -p "$R$path"; mount -t 9p -o "$O" "$tag" "$R$path" || echo "rxe-vm: cannot mount $path"; }
  done < $R$RUN/mounts
  chroot $R /bin/bash $RUN/guest.sh
  rc=$?
else
  echo "rxe-vm: cannot mount the host root over 9p"
fi
echo "RXE_VM_EXIT_CODE=$rc"
sync
poweroff -f
EOF
  chmod +x "$1"
}

# Sets INITRD. Rebuilt when this script or the module list changes.
build_initramfs() {
  INITRD=$CACHE/initramfs-$KVER.cpio.gz
  local stamp root m line path base deps
  stamp=$( (cat "$0"; echo "$GUEST_MODULES") | sha1sum | cut -c1-16)
  [ -e "$INITRD" ] && [ "$(cat "$INITRD.stamp" 2>/dev/null)" = "$stamp" ] && return 0
  say "building $INITRD"
  root=$(mktemp -d "$CACHE/initramfs.XXXXXX")
  mkdir -p "$root"/{bin,dev,proc,sys,newroot,lib/modules}
  cp /bin/busybox "$root/bin/busybox"
  "$root/bin/busybox" --list | grep -qx insmod || die "/bin/busybox has no insmod: install busybox-static"
  for m in sh mount insmod cat echo poweroff sync chroot mkdir; do ln -s busybox "$root/bin/$m"; done
  : > "$root/modules.list"
  for m in $GUEST_MODULES; do
    # "insmod /path/mod.ko" lines, dependencies first
    deps=$(modprobe -d "$KDIR" -S "$KVER" --show-depends "$m") || die "kernel $KVER has no module $m"
    while read -r line; do
      case "$line" in insmod\ *) ;; *) continue;; esac
      path=${line#insmod }; path=${path%% *}
      base=$(basename "$path")
      case "$base" in   # busybox insmod wants plain .ko
        *.ko.xz) base=${base%.xz}; grep -qx "$base" "$root/modules.list" || xz -dc "$path" > "$root/lib/modules/$base";;
        *.ko.zst) base=${base%.zst}; grep -qx "$base" "$root/modules.list" || zstd -qdc "$path" > "$root/lib/modules/$base";;
        *) grep -qx "$base" "$root/modules.list" || cp "$path" "$root/lib/modules/$base";;
      esac
      grep -qx "$base" "$root/modules.list" || echo "$base" >> "$root/modules.list"
    done <<< "$deps"
  done
  write_init "$root/init"
  (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$INITRD.tmp"
  mv "$INITRD.tmp" "$INITRD"
  echo "$stamp" > "$INITRD.stamp"
  rm -rf "$root"
}

# ------------------------------------------------------------------ the run
# What runs in the guest after the chroot: create rxe0, wait until it is
# usable, export the RXE_* variables, run the command.
write_guest_script() {
  cat > "$1/guest.sh" <<'EOF'
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp TERM=dumb LANG=C.UTF-8
RUN=$(dirname "$(readlink -f "$0")")
. "$RUN/env"
export RXE_OUT=$RUN/out
mkdir -p "$RXE_OUT"
say() { echo "rxe-vm[guest]: $*"; }
ip link set lo up
setup() {
  ip link add rxedummy0 type dummy &&
  ip addr add "$RXE_VM_CIDR" dev rxedummy0 &&
  ip link set rxedummy0 up &&
  rdma link add rxe0 type rxe netdev rxedummy0
}
if ! setup; then say "creating rxe0 failed"; dmesg | tail -n 20; exit 126; fi
# the port turns ACTIVE and the GID table fills from the IPv4 address shortly after
RXE_GID_INDEX=""
for i in $(seq 1 100); do
  if ibv_devinfo -d rxe0 2>/dev/null | grep -q PORT_ACTIVE; then
    for g in /sys/class/infiniband/rxe0/ports/1/gids/*; do
      idx=${g##*/}
      case "$(cat "$g" 2>/dev/null)" in
        0000:0000:0000:0000:0000:ffff:*)
          [ "$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$idx 2>/dev/null)" = "RoCE v2" ] &&
            { RXE_GID_INDEX=$idx; break; };;
      esac
    done
    [ -n "$RXE_GID_INDEX" ] && break
  fi
  sleep 0.1
done
if [ -z "$RXE_GID_INDEX" ]; then say "rxe0 did not become ACTIVE with an IPv4 RoCEv2 GID"; ibv_devinfo -v -d rxe0; exit 126; fi
export RXE_DEV=rxe0 RXE_NETDEV=rxedummy0 RXE_IP=${RXE_VM_CIDR%/*} RXE_GID_INDEX
say "rxe0 on $RXE_NETDEV, ip $RXE_IP, gid index $RXE_GID_INDEX, $(cut -d' ' -f1 /proc/uptime) s after boot"
cd "$RXE_CWD" 2>/dev/null || { say "no directory $RXE_CWD in the guest; running in /tmp"; cd /tmp; }
echo "RXE_VM_CMD_BEGIN"
bash "$RUN/cmd.sh"
rc=$?
echo "RXE_VM_CMD_END"
echo "$rc" > "$RUN/exit_code"
sync
exit $rc
EOF
}

QPID=""
stop_qemu() {
  [ -n "$QPID" ] || return 0
  kill "$QPID" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 "$QPID" 2>/dev/null || break; sleep 0.25; done
  kill -9 "$QPID" 2>/dev/null || true
  wait "$QPID" 2>/dev/null || true
  QPID=""
}
trap stop_qemu EXIT
trap 'stop_qemu; exit 130' INT TERM

# Boot one guest with accelerator $1. Sets BOOT_RESULT: finished | timeout | no-start.
# $2 > 0: give up with no-start if /init has not started within that many seconds.
boot() {
  local accel=$1 start_limit=$2 i=0 d tail_pid="" start=$SECONDS
  # tsc=reliable clocksource=tsc: under TCG the guest kernel distrusts the
  # TSC and falls back to HPET, which the vDSO cannot read, so every
  # clock_gettime becomes a syscall and an emulated MMIO read (microseconds;
  # perftest reads the TSC directly). Real hosts run on the TSC.
  local args=(-machine q35 -m "$MEM" -smp "$SMP" -nic none -display none -monitor none -no-reboot
    -kernel "$VMLINUZ" -initrd "$INITRD"
    -append "console=ttyS0 quiet loglevel=3 panic=-1 tsc=reliable clocksource=tsc rxevm.run=$RUNDIR"
    -serial "file:$RUNDIR/console.log"
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
    -virtfs "local,path=$RUNDIR,mount_tag=rxerun,security_model=none,multidevs=remap")
  for d in "${RW_DIRS[@]}"; do
    args+=(-virtfs "local,path=$d,mount_tag=rw$i,security_model=none,multidevs=remap")
    i=$((i + 1))
  done
  if [ "$accel" = kvm ]; then args+=(-accel kvm -cpu host); else args+=(-accel "tcg,thread=multi" -cpu max); fi
  : > "$RUNDIR/console.log"
  qemu-system-x86_64 "${args[@]}" < /dev/null > "$RUNDIR/qemu.log" 2>&1 &
  QPID=$!
  if [ $QUIET = 0 ]; then tail -n +1 -F --pid="$QPID" "$RUNDIR/console.log" 2>/dev/null & tail_pid=$!; fi
  BOOT_RESULT=finished
  while kill -0 "$QPID" 2>/dev/null; do
    if [ "$start_limit" -gt 0 ] && [ $((SECONDS - start)) -ge "$start_limit" ] &&
       ! grep -q RXE_VM_INIT_STARTED "$RUNDIR/console.log"; then BOOT_RESULT=no-start; break; fi
    if [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then BOOT_RESULT=timeout; break; fi
    sleep 0.5
  done
  stop_qemu
  if [ -n "$tail_pid" ]; then sleep 0.3; kill "$tail_pid" 2>/dev/null || true; wait "$tail_pid" 2>/dev/null || true; fi
  [ -s "$RUNDIR/qemu.log" ] && [ "$BOOT_RESULT" != finished ] && say "qemu: $(tail -n 3 "$RUNDIR/qemu.log")"
  return 0
}

# KVM only where it is the real thing: /dev/kvm backed by kvm_pvm (no vmx/svm)
# hangs a stock kernel in its decompressor, so it counts as "no KVM".
pick_accel() {
  [ "$ACCEL" != auto ] && { echo "$ACCEL"; return; }
  local cached; cached=$(cat "$CACHE/accel" 2>/dev/null || true)
  [ -n "$cached" ] && { echo "$cached"; return; }
  if [ -w /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then echo kvm-probe
  else echo tcg; fi
}

main() {
  mkdir -p "$CACHE"
  install_packages
  fetch_kernel
  build_initramfs
  if [ $PREPARE_ONLY = 1 ]; then say "ready: kernel $KVER in $CACHE"; exit 0; fi

  mkdir -p "$CACHE/runs"
  RUNDIR=$(mktemp -d "$CACHE/runs/run.XXXXXX")
  printf '%s\n' "$CMD" > "$RUNDIR/cmd.sh"
  write_guest_script "$RUNDIR"
  { printf 'RXE_CWD=%q\n' "$CWD"; printf 'RXE_VM_CIDR=%q\n' "$CIDR"; } > "$RUNDIR/env"
  : > "$RUNDIR/mounts"
  local i=0 d
  for d in "${RW_DIRS[@]}"; do echo "rw$i $d" >> "$RUNDIR/mounts"; i=$((i + 1)); done

  local accel; accel=$(pick_accel)
  case "$accel" in
    kvm-probe)
      boot kvm 60
      if [ "$BOOT_RESULT" = no-start ]; then
        say "the KVM guest did not start; using TCG from now on ($CACHE/accel)"
        echo tcg > "$CACHE/accel"
        boot tcg 0
      else echo kvm > "$CACHE/accel"; fi;;
    *) boot "$accel" 0;;
  esac

  local rc
  if [ "$BOOT_RESULT" = timeout ]; then say "timed out after ${TIMEOUT}s; guest stopped"; rc=124
  elif [ -s "$RUNDIR/exit_code" ]; then rc=$(cat "$RUNDIR/exit_code")
  elif grep -qa 'RXE_VM_EXIT_CODE=' "$RUNDIR/console.log"; then
    rc=$(grep -ao 'RXE_VM_EXIT_CODE=[0-9]*' "$RUNDIR/console.log" | tail -n 1 | cut -d= -f2)
  else say "the guest stopped without reporting a status"; rc=125; fi
  if [ $QUIET = 1 ]; then
    tr -d '\r' < "$RUNDIR/console.log" | awk '/^RXE_VM_CMD_END/{p=0} p{print} /^RXE_VM_CMD_BEGIN/{p=1}'
    [ "$rc" = 0 ] || { say "last console lines:"; tail -n 15 "$RUNDIR/console.log" | tr -d '\r' >&2; }
  fi
  say "exit status $rc after ${SECONDS}s (run folder $RUNDIR)"
  if [ "$rc" = 0 ] && [ $KEEP = 0 ] && [ -z "$(ls -A "$RUNDIR/out" 2>/dev/null)" ]; then rm -rf "$RUNDIR"; fi
  exit "$rc"
}

main
