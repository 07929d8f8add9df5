#!/usr/bin/python3
"""restart-hit-rate.py — the hit rate of a cache-aside load across a restart.

Starts rkv-server (an shm listener, --memory SIZE), runs rkv-bench against
it with --fill-on-miss (a GET that misses is followed by a SET) over a zipf
key space, and restarts the server --restart-at seconds into the run, one
way per --mode:

  cold        SIGTERM, then a start with nothing kept (the baseline);
  state-file  SIGTERM with --state-file (written at stop, read back);
  fd-store    SIGTERM; this script plays systemd's file-descriptor store
              (NOTIFY_SOCKET, FDSTORE=1) and hands the region and its record
              to the next start (LISTEN_FDS, from fd 3);
  fd-kill     the same, but SIGKILL: crash recovery from the store.

librkv reconnects by itself; rkv-bench counts the calls that met no server
as errors and the hit rate over the GETs answered (hits / (hits + misses)),
per second (--timeseries). The script maps rkv-bench's seconds onto the
wall clock by its progress lines, and the server's "ready" log line (the
listener reopening) onto them, then prints the seconds around the restart
and the hit rate of the second that holds the reopening (GETs answered
within at most 1 s of it) and of the next, beside the last full second
before the stop.

A measuring tool for developers, not a test. Run it inside a memory cgroup
(--cgroup DIR: the server and rkv-bench run in it):

    perf/restart-hit-rate.py --rkv build/server/rkv-server \\
        --bench build/bench/rkv-bench --mode fd-store [--memory 512M] \\
        [--keys 1000000] [--duration 30] [--restart-at 12] [--cgroup DIR]

Exit status: 0, or 1 when a step failed.
"""
import argparse
import array
import calendar
import csv
import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rkv", required=True, help="path to rkv-server")
    p.add_argument("--bench", required=True, help="path to rkv-bench")
    p.add_argument("--mode", required=True, choices=["cold", "state-file", "fd-store", "fd-kill"])
    p.add_argument("--memory", default="512M", help="the server's --memory")
    p.add_argument("--keys", type=int, default=1000000, help="zipf key space")
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--threads", type=int, default=1, help="rkv-bench threads")
    p.add_argument("--duration", type=int, default=30, help="rkv-bench seconds")
    p.add_argument("--restart-at", type=float, default=12.0, help="bench second of the stop")
    p.add_argument("--cgroup", help="a memory cgroup directory both run in")
    return p.parse_args()


def in_cgroup(cgroup, fds=()):
    def enter():
        if cgroup:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in fds]
        for i, fd in enumerate(high):  # the store's descriptors at 3, 4, as systemd passes them
            os.dup2(fd, 3 + i)
    return enter


class Store:
    """The service manager's end: NOTIFY_SOCKET and what it stores."""

    def __init__(self):
        self.name = "@rkv-restart-hit-rate-%d" % os.getpid()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + self.name[1:])
        self.fds = {}

    def until(self, what, timeout=300):
        self.sock.settimeout(timeout)
        while True:
            msg, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(4 * 4))
            fds = array.array("i")
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(data[: len(data) - len(data) % 4])
            text = msg.decode()
            fields = dict(l.split("=", 1) for l in text.split("\n") if "=" in l)
            name = fields.get("FDNAME")
            if fields.get("FDSTORE") == "1" and fds:
                if name in self.fds:
                    os.close(self.fds[name])
                self.fds[name] = fds[0]
            elif fields.get("FDSTOREREMOVE") == "1" and name in self.fds:
                os.close(self.fds.pop(name))
            if what in text:
                return


def log_ready_times(path):
    """Epoch seconds of every "ready" line in the server's log."""
    out = []
    if not os.path.exists(path):  # not yet opened by the server
        return out
    with open(path) as f:
        for line in f:
            m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\.(\d{3})Z .* ready:", line)
            if m:
                t = calendar.timegm(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S"))
                out.append(t + int(m.group(2)) / 1000)
    return out


def main():
    a = parse_args()
    work = tempfile.mkdtemp(prefix="rkv-restart-hr-")
    uri = "shm://%s/s.sock" % work
    log = os.path.join(work, "server.log")
    ts = os.path.join(work, "ts.csv")
    store = Store() if a.mode.startswith("fd") else None
    env = dict(os.environ)
    if store:
        env["NOTIFY_SOCKET"] = store.name
    args = [a.rkv, "--listen", uri, "--memory", a.memory, "--log-level", "info",
            "--log-file", log, "--fd-store", "on" if store else "off"]
    if a.mode == "state-file":
        args += ["--state-file", os.path.join(work, "state")]

    def start(fds=()):
        n = len(fds)
        cmd = args
        if n:  # LISTEN_PID is the server's own pid: the shell's, kept by exec
            names = ":".join(k for k in ("rkv-region", "rkv-state"))
            cmd = ["sh", "-c", 'LISTEN_PID=$$ LISTEN_FDS=%d LISTEN_FDNAMES=%s exec "$@"' % (n, names),
                   "sh"] + args
        p = subprocess.Popen(cmd, env=env, preexec_fn=in_cgroup(a.cgroup, fds), close_fds=False)
        if store:
            store.until("READY=1")
        else:
            while len(log_ready_times(log)) < start.count + 1:
                if p.poll() is not None:
                    sys.exit("rkv-server exited: %d" % p.returncode)
                time.sleep(0.01)
        start.count += 1
        return p

    start.count = 0
    server = start()
    bench_cmd = [a.bench, "-s", uri, "--fill-on-miss", "--no-preload", "--get-ratio", "1",
                 "--dist", "zipf", "--keys", str(a.keys), "--value-size", str(a.value_size),
                 "--threads", str(a.threads), "--duration", str(a.duration), "--timeseries", ts]
    bench = subprocess.Popen(bench_cmd, stderr=subprocess.PIPE, text=True,
                             preexec_fn=in_cgroup(a.cgroup))
    offsets = []  # wall clock minus bench seconds, per progress line

    def read_progress():
        for line in bench.stderr:
            m = re.match(r"\s*\[\s*([\d.]+)s\]", line)
            if m:
                offsets.append(time.time() - float(m.group(1)))
    reader = threading.Thread(target=read_progress)
    reader.start()
    while not offsets or time.time() - min(offsets) < a.restart_at:
        time.sleep(0.005)
    stop_t = time.time()
    server.send_signal(signal.SIGKILL if a.mode == "fd-kill" else signal.SIGTERM)
    rc = server.wait()
    if a.mode != "fd-kill" and rc != 0:
        sys.exit("the first server exited %d" % rc)
    fds = (store.fds["rkv-region"], store.fds["rkv-state"]) if store else ()
    server = start(fds)
    bench.wait()
    reader.join()
    server.send_signal(signal.SIGTERM)
    server.wait()
    base = min(offsets)
    ready = log_ready_times(log)[-1] - base
    stop = stop_t - base
    rows = list(csv.DictReader(open(ts)))
    print("mode %s, --memory %s, %d zipf keys x %d B, %d thread(s)" %
          (a.mode, a.memory, a.keys, a.value_size, a.threads))
    print("stop at %.3f s, listener reopened at %.3f s (down %.3f s)" % (stop, ready, ready - stop))
    print("%8s %12s %8s %9s" % ("second", "GETs/s", "errors", "hit rate"))
    before = after = nxt = None
    for r in rows:
        end = float(r["time_s"])
        start_s = end - float(r["interval_s"])
        hr = r["get_hit_rate"]
        if end <= stop:
            before = hr
        if start_s <= ready < end:
            after = hr
        elif after is not None and nxt is None and start_s >= ready:
            nxt = hr
        if stop - 3 <= end <= ready + 4:
            print("%8.1f %12.0f %8s %9s" % (end, float(r["get_ops_per_s"]), r["get_errors"],
                                             "%.2f%%" % (100 * float(hr)) if hr else "-"))
    fmt = lambda x: "%.2f%%" % (100 * float(x)) if x else "-"
    ratio = lambda x: "%.1f%%" % (100 * float(x) / float(before)) if x and before else "-"
    print("hit rate: before %s; the second of the reopening %s (%s of before); the next %s (%s)"
          % (fmt(before), fmt(after), ratio(after), fmt(nxt), ratio(nxt)))
    for line in open(log):
        if "kept" in line and "items" in line:
            print("server:", line.strip()[:400])
    return 0


if __name__ == "__main__":
    sys.exit(main())
