# perf/ab/servers.sh — sourced by the A/B scripts here: one rkv-server per
# build, shm only, in a temp dir the caller's EXIT trap removes.
#
#   ab_start NAME BUILD LOG_LEVEL    start BUILD's server on shm://$ab_tmp/NAME.sock
#   ab_wait NAME...                  until every named socket exists (10 s at most)
#   ab_stop                          kill every server started, wait, remove $ab_tmp
#   ab_bench BUILD                   BUILD's rkv-bench (bench/; tools/ in builds of a
#                                    tree from before bench/ was split out of tools/)
ab_tmp=$(mktemp -d)
ab_pids=()

ab_start() {
  "$2/server/rkv-server" --listen "shm://$ab_tmp/$1.sock" --memory 256M --log-level "$3" \
    > "$ab_tmp/$1.log" 2>&1 &
  ab_pids+=($!)
}

ab_wait() {
  local name
  for _ in $(seq 100); do
    for name in "$@"; do [ -S "$ab_tmp/$name.sock" ] || { sleep 0.1; continue 2; }; done
    return 0
  done
}

ab_bench() {
  if [ -x "$1/bench/rkv-bench" ]; then echo "$1/bench/rkv-bench"; else echo "$1/tools/rkv-bench"; fi
}

ab_stop() {
  kill "${ab_pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$ab_tmp"
}
