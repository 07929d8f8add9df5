#!/usr/bin/env bash
# scripts/rxe-vm/run.sh — run a command next to a real Soft-RoCE (rdma_rxe) device.
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
#   scripts/rxe-vm/run.sh [options] [--] 'shell command'
#   scripts/rxe-vm/run.sh [options] --pair [--] 'server command' 'client command'
#   scripts/rxe-vm/run.sh --prepare          install packages, fetch the kernel, build the initramfs
#
# --pair boots two guests (one vCPU each unless --smp says otherwise), a
# server and a client, whose virtio-net NICs are joined by a qemu socket
# netdev on 127.0.0.1: rxe0 sits on each guest's eth0 (198.51.100.1 server,
# .2 client), so RoCE traffic crosses a real link that tc netem can make bad.
# Each guest runs its own command; the exit status is the first non-zero of
# client, server. In both guests $RXE_LIB (scripts/rxe-vm/netlib.sh) gives
# rxe_netem, rxe_blackhole_on/off, rxe_signal and rxe_wait (see README.md).
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
#   --pair         two guests joined by a network link (above)
#
# In the guest the command runs as root under bash, in the host's root fs
# (read-only), with these variables set:
#   RXE_DEV        the rxe device (rxe0)
#   RXE_NETDEV     the interface it is bound to (rxedummy0)
#   RXE_IP         the interface's IPv4 address (192.0.2.1; RXE_VM_CIDR changes it)
#   RXE_GID_INDEX  the GID index of the RoCEv2 IPv4 GID
#   RXE_OUT        a writable folder that is kept on the host after the run
# and with --pair (RXE_NETDEV is eth0 there, RXE_IP the guest's own address):
#   RXE_ROLE       server or client
#   RXE_PEER_IP    the other guest's address
#   RXE_SERVER_IP  198.51.100.1        RXE_CLIENT_IP  198.51.100.2
#   RXE_SHARED     a folder both guests read and write (a host folder in the
#                  run folder), for files and rxe_signal / rxe_wait
#   RXE_LIB        the helper functions to source (". \"$RXE_LIB\"")
#
# Exit status: the command's. 124: timeout; 125: the guest stopped without
# reporting one (see the console log in the run folder); 126: rxe setup failed;
# 127 (--pair): the other guest did not come up within 120 s.
#
# Environment: RKV_RXE_VM_CACHE (default /var/tmp/rkv-rxe-vm) holds the kernel
# .deb, the extracted kernel, the initramfs and the run folders; once it holds
# them, runs need no network. RXE_VM_KVER picks a kernel version
# (default: what linux-image-amd64 depends on). RXE_VM_CRC32=pclmul also loads
# crc32_pclmul for rdma_rxe's ICRC (default generic: see GUEST_MODULES). Run as
# root: apt-get, and qemu sharing / over 9p with the host's ownership, need it.
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
PAIR=0
SMP_SET=0
CMD=""
CLIENT_CMD=""
PAIR_NET=198.51.100   # RFC 5737 TEST-NET-2: server .1, client .2

# Kernel modules the guest loads (dependencies are added automatically):
# crc32_generic: rdma_rxe needs the "crc32" hash; the guest has no modprobe
#   helper to load it on demand ("rdma link add" fails with ENOENT without it).
#   Only the generic one (RXE_VM_CRC32=pclmul adds crc32_pclmul): with it, the
#   ICRC of every packet whose payload is 77 bytes or more runs in a kernel FPU
#   section, an XSAVE/XRSTOR of `-cpu max`'s state plus emulated PCLMULQDQ,
#   +4-7 us a READ under TCG between a 76- and an 80-byte payload (7-10 % of a
#   READ), a step no NIC has: it computes the ICRC in hardware. crc32_generic
#   costs per byte, with no step
#   (docs/results/2026-12-01-soft-roce-icrc-probe-ratios.md).
# virtio_pci, 9pnet_virtio, 9p: the host filesystem shares.
# virtio_net: --pair's link. sch_netem: loss, delay, jitter, reordering on it;
#   sch_ingress, cls_matchall, act_gact: the blackhole's drop of what arrives.
# ib_uverbs, rdma_rxe, rdma_ucm (+ ib_cm, iw_cm, rdma_cm): verbs and rdma_cm
#   from user space. dummy: the interface rxe binds to (rdma_cm cannot route over lo).
case "${RXE_VM_CRC32:-generic}" in
  generic) CRC32_MODULES=crc32_generic;;
  pclmul) CRC32_MODULES="crc32_generic crc32_pclmul";;
  *) echo "rxe-vm: RXE_VM_CRC32 must be generic or pclmul, not '$RXE_VM_CRC32'" >&2; exit 2;;
esac
GUEST_MODULES="$CRC32_MODULES virtio_pci 9pnet_virtio 9p udp_tunnel ip6_udp_tunnel
ib_core ib_uverbs rdma_rxe ib_cm iw_cm rdma_cm rdma_ucm dummy
virtio_net sch_netem sch_ingress cls_matchall act_gact"

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
    --smp)     SMP=${2:?}; SMP_SET=1; shift 2;;
    --pair)    PAIR=1; shift;;
    --accel)   ACCEL=${2:?}; shift 2;;
    --quiet)   QUIET=1; shift;;
    --keep)    KEEP=1; shift;;
    --prepare) PREPARE_ONLY=1; shift;;
    -h|--help) usage; exit 0;;
    --)        shift; break;;
    -*)        die "unknown option $1 (see --help)";;
    *)         break;;
  esac
done
if [ $PAIR = 1 ]; then
  [ $# -eq 2 ] || [ $PREPARE_ONLY = 1 ] || die "--pair takes two commands, the server guest's and the client guest's (got $#)"
  CMD=${1:-}; CLIENT_CMD=${2:-}
  [ $SMP_SET = 1 ] || SMP=1
  [ -n "$CMD" ] && [ -n "$CLIENT_CMD" ] || [ $PREPARE_ONLY = 1 ] || die "--pair: a command is empty"
else
  CMD="$*"
fi
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

# Sets INITRD. One per version of this script and module list, named by
# their hash, so that runs of different checkouts sharing the cache (and
# running at once) each boot their own and never rebuild another's.
build_initramfs() {
  local stamp root m line path base deps
  stamp=$( (cat "$0"; echo "$GUEST_MODULES") | sha1sum | cut -c1-16)
  INITRD=$CACHE/initramfs-$KVER-$stamp.cpio.gz
  [ -e "$INITRD" ] && return 0
  say "building $INITRD"
  root=$(mktemp -d "$CACHE/initramfs.XXXXXX")
  mkdir -p "$root"/{bin,dev,proc,sys,newroot,lib/modules}
  cp /bin/busybox "$root/bin/busybox"
  # (not `busybox --list | grep -q`: under pipefail grep's early exit can
  # kill busybox with SIGPIPE and fail the check on a busybox that has it)
  case " $("$root/bin/busybox" --list | tr '\n' ' ') " in
    *" insmod "*) ;;
    *) die "/bin/busybox has no insmod: install busybox-static";;
  esac
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
  (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$root.cpio.gz"
  mv "$root.cpio.gz" "$INITRD"
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
# single: rxe on a guest-only dummy interface. pair: rxe on eth0, the
# virtio-net link to the other guest.
setup() {
  if [ "$RXE_VM_MODE" = pair ]; then RXE_NETDEV=eth0; else
    RXE_NETDEV=rxedummy0
    ip link add rxedummy0 type dummy || return 1
  fi
  ip addr add "$RXE_VM_CIDR" dev "$RXE_NETDEV" &&
  ip link set "$RXE_NETDEV" up &&
  rdma link add rxe0 type rxe netdev "$RXE_NETDEV"
}
if ! setup; then say "creating rxe0 failed"; dmesg | tail -n 20; exit 126; fi
# the port turns ACTIVE and the GID table fills from the IPv4 address shortly after
RXE_GID_INDEX=""
for i in $(seq 1 100); do
  if ibv_devinfo -d rxe0 2>/dev/null | grep PORT_ACTIVE >/dev/null; then
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
export RXE_DEV=rxe0 RXE_NETDEV RXE_IP=${RXE_VM_CIDR%/*} RXE_GID_INDEX
say "rxe0 on $RXE_NETDEV, ip $RXE_IP, gid index $RXE_GID_INDEX, $(cut -d' ' -f1 /proc/uptime) s after boot"
if [ "$RXE_VM_MODE" = pair ]; then
  # both guests up (and so both ends of the link) before either command runs
  export RXE_ROLE RXE_PEER_IP RXE_SERVER_IP RXE_CLIENT_IP RXE_SHARED RXE_LIB
  . "$RXE_LIB"
  rxe_signal "$RXE_ROLE.up"
  peer=server; [ "$RXE_ROLE" = server ] && peer=client
  if ! rxe_wait "$peer.up" 120; then say "the $peer guest did not come up"; echo 127 > "$RUN/exit_code"; exit 127; fi
fi
cd "$RXE_CWD" 2>/dev/null || { say "no directory $RXE_CWD in the guest; running in /tmp"; cd /tmp; }
echo "RXE_VM_CMD_BEGIN"
bash "$RUN/cmd.sh"
rc=$?
echo "RXE_VM_CMD_END"
echo "$rc" > "$RUN/exit_code"
[ "$RXE_VM_MODE" = pair ] && rxe_signal "$RXE_ROLE.done"
sync
exit $rc
EOF
}

QPIDS=()
stop_qemus() {
  local pid
  for pid in "${QPIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${QPIDS[@]}"; do
    for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  QPIDS=()
}
trap stop_qemus EXIT
trap 'stop_qemus; exit 130' INT TERM

# start_guest DIR ACCEL [QEMU_ARGS...]: start one guest whose run folder is
# DIR (its command, env, mounts; its console.log and qemu.log land there).
start_guest() {
  local dir=$1 accel=$2 i=0 d
  shift 2
  # tsc=reliable clocksource=tsc: under TCG the guest kernel distrusts the
  # TSC and falls back to HPET, which the vDSO cannot read, so every
  # clock_gettime becomes a syscall and an emulated MMIO read (microseconds;
  # perftest reads the TSC directly). Real hosts run on the TSC.
  local args=(-machine q35 -m "$MEM" -smp "$SMP" -display none -monitor none -no-reboot
    -kernel "$VMLINUZ" -initrd "$INITRD"
    -append "console=ttyS0 quiet loglevel=3 panic=-1 no_timer_check tsc=reliable clocksource=tsc rxevm.run=$dir"
    -serial "file:$dir/console.log"
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
    -virtfs "local,path=$dir,mount_tag=rxerun,security_model=none,multidevs=remap" "$@")
  while read -r _ d; do
    args+=(-virtfs "local,path=$d,mount_tag=rw$i,security_model=none,multidevs=remap")
    i=$((i + 1))
  done < "$dir/mounts"
  if [ "$accel" = kvm ]; then args+=(-accel kvm -cpu host); else args+=(-accel "tcg,thread=multi" -cpu max); fi
  : > "$dir/console.log"
  qemu-system-x86_64 "${args[@]}" < /dev/null > "$dir/qemu.log" 2>&1 &
  QPIDS+=($!)
}

listening() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

# --pair: the server guest listens on a free 127.0.0.1 port, the client
# guest connects to it once it does. Returns 1 if no port could be had.
start_pair() {
  local accel=$1 port try net="socket,id=n0" dev="virtio-net-pci,netdev=n0"
  for try in 1 2 3 4 5; do
    port=$((20000 + RANDOM % 30000))
    listening "$port" && continue
    start_guest "$RUNDIR/server" "$accel" -netdev "$net,listen=127.0.0.1:$port" -device "$dev,mac=52:54:00:c6:33:01"
    for _ in $(seq 1 100); do listening "$port" && break; kill -0 "${QPIDS[0]}" 2>/dev/null || break; sleep 0.1; done
    if listening "$port"; then
      start_guest "$RUNDIR/client" "$accel" -netdev "$net,connect=127.0.0.1:$port" -device "$dev,mac=52:54:00:c6:33:02"
      return 0
    fi
    stop_qemus   # lost the port to someone else: another one
  done
  say "no free 127.0.0.1 port for the guests' link (qemu: $(tail -n 2 "$RUNDIR/server/qemu.log"))"
  return 1
}

# Boot the guest(s) with accelerator $1 and wait until all have stopped.
# Sets BOOT_RESULT: finished | timeout | no-start. $2 > 0: give up with
# no-start if a guest's /init has not started within that many seconds.
boot() {
  local accel=$1 start_limit=$2 d tail_pid="" start=$SECONDS pid alive
  if [ $PAIR = 1 ]; then
    start_pair "$accel" || { BOOT_RESULT=no-start; return 0; }
  else
    start_guest "$RUNDIR" "$accel" -nic none
  fi
  if [ $QUIET = 0 ]; then tail -n +1 -F --pid="${QPIDS[0]}" "${GUEST_DIRS[@]/%//console.log}" 2>/dev/null & tail_pid=$!; fi
  BOOT_RESULT=finished
  while :; do
    alive=0
    for pid in "${QPIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 1 ] || break
    if [ "$start_limit" -gt 0 ] && [ $((SECONDS - start)) -ge "$start_limit" ]; then
      for d in "${GUEST_DIRS[@]}"; do grep -q RXE_VM_INIT_STARTED "$d/console.log" || BOOT_RESULT=no-start; done
      [ "$BOOT_RESULT" = no-start ] && break
    fi
    if [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then BOOT_RESULT=timeout; break; fi
    sleep 0.5
  done
  stop_qemus
  if [ -n "$tail_pid" ]; then sleep 0.3; kill "$tail_pid" 2>/dev/null || true; wait "$tail_pid" 2>/dev/null || true; fi
  if [ "$BOOT_RESULT" != finished ]; then
    for d in "${GUEST_DIRS[@]}"; do [ -s "$d/qemu.log" ] && say "qemu: $(tail -n 3 "$d/qemu.log")"; done
  fi
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

# prepare_guest DIR CMD ROLE CIDR: the run folder of one guest.
prepare_guest() {
  local dir=$1 cmd=$2 role=$3 cidr=$4 i=0 d
  mkdir -p "$dir"
  { [ $PAIR = 1 ] && echo '. "$RXE_LIB"'; printf '%s\n' "$cmd"; } > "$dir/cmd.sh"
  write_guest_script "$dir"
  {
    printf 'RXE_CWD=%q\n' "$CWD"; printf 'RXE_VM_CIDR=%q\n' "$cidr"
    if [ $PAIR = 1 ]; then
      printf 'RXE_VM_MODE=pair\nRXE_ROLE=%q\n' "$role"
      printf 'RXE_SERVER_IP=%q\nRXE_CLIENT_IP=%q\n' "$PAIR_NET.1" "$PAIR_NET.2"
      if [ "$role" = server ]; then printf 'RXE_PEER_IP=%q\n' "$PAIR_NET.2"; else printf 'RXE_PEER_IP=%q\n' "$PAIR_NET.1"; fi
      printf 'RXE_SHARED=%q\nRXE_LIB=%q\n' "$RUNDIR/shared" "$(cd "$(dirname "$0")" && pwd)/netlib.sh"
    else
      printf 'RXE_VM_MODE=single\n'
    fi
  } > "$dir/env"
  : > "$dir/mounts"
  for d in "${RW_DIRS[@]}"; do echo "rw$i $d" >> "$dir/mounts"; i=$((i + 1)); done
  [ $PAIR = 1 ] && echo "rw$i $RUNDIR/shared" >> "$dir/mounts"
  return 0
}

# The exit status one guest reported (its folder's exit_code, else the
# console's last RXE_VM_EXIT_CODE), or 125.
guest_rc() {
  if [ -s "$1/exit_code" ]; then cat "$1/exit_code"
  elif grep -qa 'RXE_VM_EXIT_CODE=' "$1/console.log" 2>/dev/null; then
    grep -ao 'RXE_VM_EXIT_CODE=[0-9]*' "$1/console.log" | tail -n 1 | cut -d= -f2
  else echo 125; fi
}

# What the command printed (between the markers) in a guest's console.
guest_output() {
  tr -d '\r' < "$1/console.log" | awk '/^RXE_VM_CMD_END/{p=0} p{print} /^RXE_VM_CMD_BEGIN/{p=1}'
}

main() {
  mkdir -p "$CACHE"
  install_packages
  fetch_kernel
  build_initramfs
  if [ $PREPARE_ONLY = 1 ]; then say "ready: kernel $KVER in $CACHE"; exit 0; fi

  mkdir -p "$CACHE/runs"
  RUNDIR=$(mktemp -d "$CACHE/runs/run.XXXXXX")
  if [ $PAIR = 1 ]; then
    mkdir -p "$RUNDIR/shared"
    GUEST_DIRS=("$RUNDIR/server" "$RUNDIR/client")
    prepare_guest "$RUNDIR/server" "$CMD" server "$PAIR_NET.1/24"
    prepare_guest "$RUNDIR/client" "$CLIENT_CMD" client "$PAIR_NET.2/24"
  else
    GUEST_DIRS=("$RUNDIR")
    prepare_guest "$RUNDIR" "$CMD" single "$CIDR"
  fi

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

  local rc d r kept=0
  if [ "$BOOT_RESULT" = timeout ]; then say "timed out after ${TIMEOUT}s; guest stopped"; rc=124
  elif [ "$BOOT_RESULT" = no-start ]; then rc=125
  elif [ $PAIR = 1 ]; then
    rc=$(guest_rc "$RUNDIR/client"); r=$(guest_rc "$RUNDIR/server")
    say "server guest exit status $r, client guest exit status $rc"
    [ "$rc" != 0 ] || rc=$r
  else rc=$(guest_rc "$RUNDIR"); fi
  [ "$rc" = 125 ] && say "a guest stopped without reporting a status"
  if [ $QUIET = 1 ]; then
    for d in "${GUEST_DIRS[@]}"; do
      [ $PAIR = 1 ] && echo "--- $(basename "$d") guest"
      guest_output "$d"
      [ "$(guest_rc "$d")" = 0 ] || { say "last console lines of $d:"; tail -n 15 "$d/console.log" | tr -d '\r' >&2; }
    done
  fi
  say "exit status $rc after ${SECONDS}s (run folder $RUNDIR)"
  for d in "${GUEST_DIRS[@]}"; do [ -z "$(ls -A "$d/out" 2>/dev/null)" ] || kept=1; done
  if [ "$rc" = 0 ] && [ $KEEP = 0 ] && [ $kept = 0 ]; then rm -rf "$RUNDIR"; fi
  exit "$rc"
}

main
