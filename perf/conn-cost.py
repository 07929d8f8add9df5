#!/usr/bin/env python3
"""conn-cost.py — what one shm connection costs rkv-server, in memory and fds.

Starts a fresh rkv-server (--memory 64M, shm listener) per case, reads its
/proc/PID/status, has perf/conn-hold open N librkv connections, reads it
again, and prints the growth per connection: VmRSS, its anonymous part
(the server's heap: per-connection structures, private request copies) and
its shared part (connection memfd pages the server has mapped, besides the
region), what its own memory cgroup is charged (with --cgroup: pages it
touched first plus accounted kernel memory; a memfd page the client writes
first is charged to the client) and fds (/proc/PID/fd).

Cases: N idle connections (connected, never used), and N that each did one
PUT of --value bytes (past max_msg, so through the staging area) and then
went idle, read at once and again after --idle seconds (the server gives an
idle connection's ring and staging pages back: docs/design.md, "Connection
memory").

A measuring tool for developers, not a test. Run it as root inside a memory
cgroup (--cgroup NAME makes /sys/fs/cgroup/memory/NAME with a 4G limit and
joins it); it raises the open-files limit and max_conns for the run:

    perf/conn-cost.py --server build/server/rkv-server --hold build/perf/conn-hold \
                      [--counts 0,100,1000,10000] [--value 262144] [--cgroup conns-cost]

Exit status: 0, or 2 on a bad argument or a server that would not start.
"""
import argparse
import os
import resource
import subprocess
import sys
import time

FIELDS = ("VmRSS", "RssAnon", "RssShmem")
CGROUP = [None]  # the server's cgroup, once joined


def status(pid):
    """The FIELDS of /proc/PID/status in KiB, and the open descriptors."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in FIELDS:
                out[key] = int(rest.split()[0])
    out["fds"] = len(os.listdir("/proc/%d/fd" % pid))
    out["cg"] = charged(CGROUP[0])
    return out


CG_ROOT = "/sys/fs/cgroup/memory/"


def join_cgroup(name, limit):
    """Join cgroup NAME (made with `limit`); returns NAME/server, the child
    the server runs in so that what it is charged for reads apart."""
    path = CG_ROOT + name
    os.makedirs(path + "/server", exist_ok=True)
    with open(path + "/memory.limit_in_bytes", "w") as f:
        f.write(limit)
    with open(path + "/cgroup.procs", "w") as f:
        f.write(str(os.getpid()))
    return name + "/server"


def charged(cgroup):
    """KiB charged to the server's cgroup (pages it touched first, its kernel
    objects where kmem is accounted), or 0 without one."""
    if not cgroup:
        return 0
    with open(CG_ROOT + cgroup + "/memory.usage_in_bytes") as f:
        return int(f.read()) // 1024


def raise_nofile(want):
    """Up to `want`, as far as the hard limit goes without privilege."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
        except (ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def wait_socket(path, proc):
    for _ in range(500):
        if os.path.exists(path):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def settle(pid, n_expected, base_fds):
    """Wait until the server holds every connection's socket (the worker
    takes new connections from its inbox after the handshake)."""
    for _ in range(500):
        s = status(pid)
        if s["fds"] - base_fds >= n_expected:
            return s
        time.sleep(0.02)
    return status(pid)


def run_case(a, n, value, sock):
    """One server, n connections: rows of (label, status) to print."""
    cmd = [a.server, "--memory", "64M", "--listen", "shm://" + sock, "--max-conns", str(max(n, 1)),
           "--log-level", "error"] + a.server_arg
    def enter():
        if CGROUP[0]:
            with open(CG_ROOT + CGROUP[0] + "/cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
    srv = subprocess.Popen(cmd, preexec_fn=enter)
    rows = []
    try:
        if not wait_socket(sock, srv):
            sys.exit("conn-cost: %s did not start" % a.server)
        time.sleep(0.3)
        base = status(srv.pid)
        hold = subprocess.Popen([a.hold, "shm://" + sock, str(n)] + ([str(value)] if value else []),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = hold.stdout.readline()
        if not line.startswith("ready"):
            hold.kill()
            sys.exit("conn-cost: conn-hold failed with %d connections" % n)
        now = settle(srv.pid, n, base["fds"])
        rows.append(("used, at once" if value else "idle", now))
        if value:
            time.sleep(a.idle)
            rows.append(("used, idle %gs" % a.idle, status(srv.pid)))
        hold.stdin.write("\n")
        hold.stdin.close()
        hold.wait()
    finally:
        srv.terminate()
        srv.wait()
    return base, rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server", required=True, help="path to rkv-server")
    p.add_argument("--hold", required=True, help="path to perf/conn-hold")
    p.add_argument("--counts", default="0,100,1000", help="connection counts (default 0,100,1000)")
    p.add_argument("--value", type=int, default=256 << 10,
                   help="bytes of the one PUT in the used case (default 262144; 0: skip it)")
    p.add_argument("--idle", type=float, default=1.0, help="seconds idle before the second look")
    p.add_argument("--cgroup", help="memory cgroup v1 to create (4G limit) and join")
    p.add_argument("--server-arg", action="append", default=[],
                   help="one more rkv-server argument (repeatable), e.g. --memory-check=off")
    a = p.parse_args()
    try:
        counts = [int(x) for x in a.counts.split(",")]
    except ValueError:
        p.error("--counts: comma-separated integers")
    if any(c < 0 or c > 60000 for c in counts) or a.value < 0:
        p.error("--counts are 0..60000 and --value at least 0")
    if a.cgroup:
        CGROUP[0] = join_cgroup(a.cgroup, "4G")
    raise_nofile(max(counts) + 1024)
    sock = "/tmp/conns-cost-%d.sock" % os.getpid()

    print("conn-cost: rkv-server --memory 64M, shm; per-connection growth of the server's "
          "/proc/PID/status (KiB) and fds")
    print("%-16s %6s %9s %9s %9s %10s %9s %8s" % ("case", "N", "VmRSS", "RSS/conn", "anon/conn",
                                                  "shmem/conn", "cg/conn", "fds/conn"))
    for n in counts:
        for value in ([0, a.value] if a.value else [0]):
            if n == 0 and value:
                continue
            base, rows = run_case(a, n, value, sock)
            for label, s in rows:
                per = lambda k: (s[k] - base[k]) / n if n else 0.0
                print("%-16s %6d %9d %9.1f %9.1f %10.1f %9.1f %8.2f" % (
                    label, n, s["VmRSS"], per("VmRSS"), per("RssAnon"), per("RssShmem"), per("cg"),
                    (s["fds"] - base["fds"]) / n if n else 0.0))
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
