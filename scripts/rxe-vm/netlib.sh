# scripts/rxe-vm/netlib.sh — shell helpers for the commands of a run.sh --pair run.
#
# Sourced inside a guest (". "$RXE_LIB""). The link between the two guests is
# each guest's eth0 ($RXE_NETDEV); what one guest sets on its own eth0 shapes
# what it sends, and the blackhole drops both ways from one side:
#
#   rxe_netem ARGS...    tc netem on what this guest sends, e.g.
#                        rxe_netem loss 1% delay 2ms 2ms   (jitter reorders too)
#                        rxe_netem delay 5ms reorder 25% 50%
#   rxe_netem_clear      back to a clean link
#   rxe_blackhole_on     drop every packet in both directions (netem loss 100%
#                        on egress, a matchall drop on ingress); the link and
#                        rxe0 stay up, as on a fabric that silently drops
#   rxe_blackhole_off    clear both
#   rxe_blackhole SEC    on, SEC seconds (fractions allowed), off
#   rxe_signal NAME      create $RXE_SHARED/NAME (both guests see it)
#   rxe_wait NAME [SEC]  wait until $RXE_SHARED/NAME exists (default 60 s);
#                        false on timeout
#
# Traffic a guest sends to its own address never reaches eth0's qdisc (rxe
# loops it back inside the guest), so a client next to the server keeps a
# healthy path through any of these.

rxe_netem() {
  tc qdisc replace dev "$RXE_NETDEV" root netem "$@"
}

rxe_netem_clear() {
  tc qdisc del dev "$RXE_NETDEV" root 2>/dev/null || true
}

rxe_blackhole_on() {
  tc qdisc replace dev "$RXE_NETDEV" root netem loss 100% &&
  { tc qdisc add dev "$RXE_NETDEV" ingress 2>/dev/null || true; } &&
  tc filter replace dev "$RXE_NETDEV" ingress pref 1 matchall action drop
}

rxe_blackhole_off() {
  tc qdisc del dev "$RXE_NETDEV" ingress 2>/dev/null || true
  rxe_netem_clear
}

rxe_blackhole() {
  rxe_blackhole_on || return 1
  sleep "${1:?rxe_blackhole needs seconds}"
  rxe_blackhole_off
}

rxe_signal() {
  : > "$RXE_SHARED/${1:?rxe_signal needs a name}" && sync
}

rxe_wait() {
  local name=${1:?rxe_wait needs a name} limit=${2:-60} start=$SECONDS
  while [ ! -e "$RXE_SHARED/$name" ]; do
    [ $((SECONDS - start)) -lt "$limit" ] || return 1
    sleep 0.1
  done
}
