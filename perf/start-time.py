#!/usr/bin/python3
"""start-time.py — rkv-server's start-to-first-ping time beside fallocate's.

For each pair, alternately: `fallocate -l SIZE` a file on the shared-memory
mount (--mount, default /dev/shm; then removed), and an rkv-server start
with --memory SIZE and a tcp door, timed from the exec to the first answered
memcached `version` (the door listens only once the table is ready). A
third baseline, `dd` writing SIZE of zeros to that mount, is the cost of
touching every page once. Each line is one pair, with the ratios server /
fallocate and server / dd; the last line the medians.

With --fill N, each timed start is a warm restart instead: before it, a
server with --state-file is given N items of --value-size bytes and stopped
cleanly (SIGTERM), so the timed start reads the file and verifies them.

A measuring tool for developers, not a test. Run it inside a memory cgroup
(--cgroup puts each server and baseline in one, e.g.
/sys/fs/cgroup/memory/NAME, made beforehand with a limit):

    perf/start-time.py --rkv build/server/rkv-server [--size 2G] [--pairs 5]
                       [--cgroup DIR] [--port 23400] [--fill 0]

Exit status: 0, or 2 on a bad argument or a server that would not start.
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rkv", required=True, help="path to rkv-server")
    p.add_argument("--size", default="2G", help="region / file size (K, M, G suffix; default 2G)")
    p.add_argument("--pairs", type=int, default=5, help="measurements of each (default 5)")
    p.add_argument("--mount", default="/dev/shm", help="where fallocate and dd write")
    p.add_argument("--cgroup", help="a memory cgroup directory every process runs in")
    p.add_argument("--port", type=int, default=23400, help="tcp port for the door")
    p.add_argument("--fill", type=int, default=0, help="items kept across a warm restart")
    p.add_argument("--value-size", type=int, default=1000, help="bytes per value with --fill")
    a = p.parse_args()
    if a.pairs < 1 or a.fill < 0:
        p.error("--pairs is at least 1 and --fill at least 0")
    return a


def size_bytes(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * mult[text[-1].upper()] if text[-1].upper() in mult else int(text)


def in_cgroup(cgroup):
    def enter():
        if cgroup:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
    return enter


def timed(cmd, cgroup):
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, preexec_fn=in_cgroup(cgroup),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - t0


def first_ping(proc, port):
    """Seconds until `version` is answered; None if the server exited."""
    while proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(b"version\r\n")
                if s.recv(64).startswith(b"VERSION"):
                    return True
        except OSError:
            time.sleep(0.002)
    return None


def start_server(a, args, log):
    cmd = [a.rkv, "--memory", a.size, "--listen", "tcp://127.0.0.1:%d" % a.port] + args
    return subprocess.Popen(cmd, preexec_fn=in_cgroup(a.cgroup),
                            stdout=subprocess.DEVNULL, stderr=log)


def stop(proc):
    proc.terminate()
    if proc.wait() != 0:
        sys.exit("rkv-server did not stop cleanly (exit %d)" % proc.returncode)


def fill(a, state, log):
    """A server with `state` given a.fill items, then stopped cleanly."""
    proc = start_server(a, ["--state-file", state], log)
    if first_ping(proc, a.port) is None:
        sys.exit("rkv-server would not start; its log is in %s" % log.name)
    value = b"v" * a.value_size
    with socket.create_connection(("127.0.0.1", a.port)) as s:
        batch = 256
        for first in range(0, a.fill, batch):
            n = min(batch, a.fill - first)
            s.sendall(b"".join(b"set k%014d 0 0 %d noreply\r\n%s\r\n" % (first + i, len(value), value)
                               for i in range(n)))
        s.sendall(b"version\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            reply += s.recv(64)
    stop(proc)


def log_times(log):
    """The last start's populate, state read and verify seconds from its log (None: absent)."""
    with open(log.name) as f:
        text = f.read()
    text = text[text.rfind("memory: needs"):]
    pop = re.search(r"(?:populated|taken \(cleared at first touch\)) in ([0-9.]+) s", text)
    kept = re.search(r"kept ([0-9]+) items.*read \S+ \S+ in ([0-9.]+) s.*verified in ([0-9.]+) s", text)
    return (float(pop.group(1)) if pop else None,
            float(kept.group(2)) if kept else None, float(kept.group(3)) if kept else None,
            int(kept.group(1)) if kept else None)


def server_start(a, state, log):
    args = ["--state-file", state] if state else []
    t0 = time.monotonic()
    proc = start_server(a, args, log)
    if first_ping(proc, a.port) is None:
        sys.exit("rkv-server would not start; its log is in %s" % log.name)
    t = time.monotonic() - t0
    stop(proc)
    log.flush()
    if state:
        os.unlink(state)  # written again by the clean stop
    return t


def main():
    a = parse_args()
    try:
        size = size_bytes(a.size)
    except (ValueError, IndexError):
        sys.exit("--size %s: give a number with K, M or G" % a.size)
    tmp = tempfile.mkdtemp(prefix="start-time.")
    path = os.path.join(a.mount, "start-time.%d" % os.getpid())
    state = os.path.join(tmp, "state") if a.fill else None
    log = open(os.path.join(tmp, "server.log"), "w")
    print("size %s, %s, mount %s%s" % (a.size, "warm restart of %d items of %d B" % (a.fill, a.value_size)
                                        if a.fill else "empty start", a.mount,
                                        ", cgroup " + a.cgroup if a.cgroup else ""))
    print("%4s %10s %8s %8s %10s %8s  %s" % ("pair", "fallocate", "dd", "rkv", "rkv/falloc", "rkv/dd",
                                            "(rkv's log: populate, read, verify)"))
    rows = []
    for i in range(a.pairs):
        if state:
            fill(a, state, log)
        f = timed(["fallocate", "-l", str(size), path], a.cgroup)
        os.unlink(path)
        d = timed(["dd", "if=/dev/zero", "of=" + path, "bs=1M", "count=%d" % (size >> 20)], a.cgroup)
        os.unlink(path)
        r = server_start(a, state, log)
        rows.append((f, d, r))
        pop, read, verify, kept = log_times(log)
        parts = ["populate %.3fs" % pop] if pop is not None else []
        if read is not None:
            parts.append("read %.3fs, verify %.3fs (%d items)" % (read, verify, kept))
        print("%4d %9.3fs %7.3fs %7.3fs %10.2f %8.2f  %s" % (i + 1, f, d, r, r / f, r / d,
                                                           ", ".join(parts)), flush=True)
    med = [statistics.median(c) for c in zip(*rows)]
    print("%4s %9.3fs %7.3fs %7.3fs %10.2f %8.2f" % ("med", med[0], med[1], med[2],
                                                     statistics.median(r / f for f, _, r in rows),
                                                     statistics.median(r / d for _, d, r in rows)))
    log.close()
    os.unlink(log.name)
    os.rmdir(tmp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
