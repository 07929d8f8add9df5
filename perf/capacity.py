#!/usr/bin/python3
"""capacity.py — how many items rkv and memcached hold in the same memory.

For each value size of a geometric sweep (1 B to 512 KiB), start a fresh
memcached (-m MiB) and a fresh rkv-server (--memory MiB, a tcp door), fill
each through the memcached text protocol with 16-byte keys until it has
evicted and then by half as much again, then keep setting new keys at a
trickle (4 % of the items per second, --settle seconds), and print what each
holds: items, the process's memory (its RSS, with rkv's region counted whole
whether or not its pages have been touched yet: memory_bytes), memory per
item, and rkv's items per byte of memory over memcached's (the ratio at
equal memory), after the trickle and (column "burst")
right at the end of the fill. Both servers take the same stream of sets.
rkv reuses freed memory only after a grace period and keeps some free for
the writes to come (the evict-ahead reserve, which shrinks when writes slow
down), so right after a burst of writes it holds fewer items than it does
once writes go on at an ordinary rate; memcached reuses at once.

A measuring tool for developers, not a test. Run it inside a memory cgroup
with a limit (it starts servers that fill what they are given):

    perf/capacity.py --rkv build/server/rkv-server [--memory 64] [--points 30]
                     [--sizes 32,100 | --mix 1-16384] [--sets N] [--evict lru]
                     [--settle 5] [--rkv-args "..."]

With --sets N the fill is exactly N sets instead (100 at a time, each
hundred synced), and each row is followed by the seconds each server took
for them, the CPU seconds the server used meanwhile, and how many of rkv's
PUTs slept for freed memory to pass its grace period (rkv_alloc_waits, and
rkv_alloc_wait_ms): a fill of mixed sizes may evict from its start, and a
server that makes a set wait shows there.

Exit status: 0, or 2 on a bad argument or a server that would not start.
"""
import argparse
import math
import os
import shlex
import socket
import subprocess
import sys
import time

KEY_FMT = "k%014d"          # 16-byte keys


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rkv", required=True, help="path to rkv-server")
    p.add_argument("--memcached", default="memcached", help="memcached binary (default: on PATH)")
    p.add_argument("--memory", type=int, default=64, help="MiB for each server (default 64)")
    p.add_argument("--points", type=int, default=30, help="value sizes in the sweep (default 30)")
    p.add_argument("--sizes", help="comma-separated value sizes instead of the sweep")
    p.add_argument("--mix", help="comma-separated LO-HI ranges instead: each a row whose values "
                   "are log-uniform in [LO, HI] bytes, the same for both servers")
    p.add_argument("--sets", type=int, help="fill with exactly this many sets (and time them)")
    p.add_argument("--evict", default="lru", choices=["lru", "random"], help="rkv's policy")
    p.add_argument("--port", type=int, default=22400, help="first tcp port to use")
    p.add_argument("--rkv-args", default="", help="more rkv-server options, e.g. \"--item-size-hint 100K\"")
    p.add_argument("--settle", type=float, default=5, help="seconds of trickle after the fill (default 5)")
    a = p.parse_args()
    try:  # each row's value sizes as a range: one size is (n, n)
        if a.mix:
            a.rows = [tuple(int(x) for x in r.split("-", 1)) for r in a.mix.split(",")]
        elif a.sizes:
            a.rows = [(int(x), int(x)) for x in a.sizes.split(",")]
        else:
            a.rows = [(x, x) for x in sweep(a.points)]
        if not all(len(r) == 2 and 1 <= r[0] <= r[1] <= 1 << 20 for r in a.rows):
            raise ValueError(a.rows)
    except ValueError:
        p.error("--sizes takes numbers, --mix ranges LO-HI with 1 <= LO <= HI <= 1048576")
    if a.memory < 8 or a.points < 2 or (a.sets is not None and a.sets < 100):
        p.error("--memory is at least 8 (MiB), --points at least 2 and --sets at least 100")
    return a


def sweep(points):
    lo, hi = 0.0, math.log(512 * 1024)
    sizes = sorted({max(1, int(round(math.exp(lo + (hi - lo) * i / (points - 1))))) for i in range(points)})
    return sizes


def memory_bytes(pid):
    """The memory the process holds: its RSS, with each shared memory file it
    has open (rkv's region memfd) counted at the bytes the file holds rather
    than at the pages the process has touched. rkv takes its whole region
    when it starts, so a page no item or bucket has touched yet is memory
    the server holds though RSS does not show it."""
    rss = shmem = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("RssShmem:"):
                shmem = int(line.split()[1]) * 1024
    files = {}
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
            if target.startswith("/memfd:") or target.startswith("/dev/shm/"):
                st = os.stat(os.path.join(fd_dir, fd))
                files[(st.st_dev, st.st_ino)] = st.st_blocks * 512
        except OSError:
            pass
    return rss - shmem + sum(files.values()) if files else rss


class Door:
    """A memcached text protocol connection."""

    def __init__(self, port):
        deadline = time.time() + 10
        while True:
            try:
                self.s = socket.create_connection(("127.0.0.1", port), timeout=60)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            d = self.s.recv(1 << 16)
            if not d:
                raise OSError("server closed the connection")
            self.buf += d
        l, self.buf = self.buf.split(b"\r\n", 1)
        return l

    def sync(self):
        """Wait until everything sent before has been served (mn -> MN)."""
        self.s.sendall(b"mn\r\n")
        while True:
            l = self.line()
            if l == b"MN":
                return
            if not l.startswith(b"SERVER_ERROR"):   # noreply sets answer only errors
                raise OSError("unexpected reply %r" % l)

    def stats(self):
        self.s.sendall(b"stats\r\n")
        out = {}
        while True:
            l = self.line().decode()
            if l == "END":
                return out
            parts = l.split(" ", 2)
            if len(parts) == 3 and parts[0] == "STAT":
                out[parts[1]] = parts[2]


def start(cmd, port):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return proc, Door(port)
    except OSError:
        proc.kill()
        sys.exit("capacity: %s did not start (port %d)" % (cmd[0], port))


class Values:
    """The value of each key: a size drawn log-uniformly from [lo, hi] by a
    hash of the key's number (so both servers get the same stream), or
    exactly lo when lo == hi."""

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi
        self.cache = {}

    def __str__(self):
        return "%d" % self.lo if self.lo == self.hi else "%d-%d" % (self.lo, self.hi)

    def typical(self):
        return int(math.sqrt(self.lo * self.hi))

    def of(self, n):
        size = self.lo
        if self.hi != self.lo:
            frac = ((n * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF) / 2.0**64
            size = int(round(math.exp(math.log(self.lo) + (math.log(self.hi) - math.log(self.lo)) * frac)))
        v = self.cache.get(size)
        if v is None:
            v = self.cache[size] = b"v" * size
        return v


def sets(first, count, values):
    out = []
    for i in range(count):
        val = values.of(first + i)
        out.append(b"set %s 0 0 %d noreply\r\n%s\r\n" % ((KEY_FMT % (first + i)).encode(), len(val), val))
    return b"".join(out)


def trickle(door, values, first, seconds):
    """Set new keys at 4 % of `first` per second for `seconds`."""
    step = max(1, first // 100)
    n = first
    end = time.time() + seconds
    while time.time() < end:
        door.s.sendall(sets(n, step, values))
        n += step
        door.sync()
        time.sleep(0.25)
    return n


def fill(door, values, count):
    """Set keys until the server has evicted, then half as many again; or,
    with `count`, exactly that many, 100 at a time."""
    batch = 100 if count else max(1, min(2000, (4 << 20) // (values.typical() + 64)))
    n = 0
    target = count
    while target is None or n < target:
        door.s.sendall(sets(n, batch, values))
        n += batch
        door.sync()
        if target is None:
            st = door.stats()
            if int(st.get("evictions", "0")) > 0:
                target = n + n // 2
    return n


def cpu_seconds(pid):
    """The CPU time process pid has used (user and system), in seconds."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(cmd, port, size, settle, count):
    """(items, memory) after the trickle, (items, memory) at the end of the
    fill, and the fill's seconds: (wall, server CPU, stats at its end)."""
    proc, door = start(cmd, port)
    try:
        began, cpu = time.time(), cpu_seconds(proc.pid)
        sent = fill(door, size, count)
        took = (time.time() - began, cpu_seconds(proc.pid) - cpu)
        st = door.stats()
        burst = (int(st["curr_items"]), memory_bytes(proc.pid))
        trickle(door, size, sent, settle)
        return (int(door.stats()["curr_items"]), memory_bytes(proc.pid)), burst, took + (st,)
    finally:
        proc.terminate()
        proc.wait()


def main():
    a = parse_args()
    sizes = [Values(lo, hi) for lo, hi in a.rows]
    mc_user = ["-u", "root"] if os.geteuid() == 0 else []
    print("capacity: %d MiB each; memcached -m %d, rkv-server --memory %dM --evict %s %s; 16-byte keys"
          % (a.memory, a.memory, a.memory, a.evict, a.rkv_args))
    print("%8s  %10s %9s %8s  %10s %9s %8s  %7s  %7s" % ("value", "mc items", "mc mem", "mc B/it",
                                                          "rkv items", "rkv mem", "rkv B/it", "ratio",
                                                          "burst"))
    worst = None
    for i, size in enumerate(sizes):
        port = a.port + 2 * (i % 100)
        mc, mc_burst, mc_took = measure([a.memcached, "-p", str(port), "-U", "0", "-t", "1", "-m", str(a.memory)]
                               + mc_user, port, size, a.settle, a.sets)
        rk, rk_burst, rk_took = measure([a.rkv, "--listen", "tcp://127.0.0.1:%d" % (port + 1),
                                "--listen", "shm:///tmp/rkv-capacity-%d.sock" % os.getpid(),
                                "--memory", "%dM" % a.memory, "--evict", a.evict, "--log-level", "error"]
                               + shlex.split(a.rkv_args),
                               port + 1, size, a.settle, a.sets)
        ratio, burst = equal_memory_ratio(rk, mc), equal_memory_ratio(rk_burst, mc_burst)
        worst = ratio if worst is None else min(worst, ratio)
        print("%8s  %10d %8.1fM %8.1f  %10d %8.1fM %8.1f  %6.2fx  %6.2fx" % (
            size, mc[0], mc[1] / 2**20, mc[1] / max(mc[0], 1),
            rk[0], rk[1] / 2**20, rk[1] / max(rk[0], 1), ratio, burst), flush=True)
        if a.sets:
            print("%8s  %d sets took memcached %.1f s (%.1f s of its CPU), rkv %.1f s (%.1f s; "
                  "%s PUTs slept for freed memory, %s ms)"
                  % ("", a.sets, mc_took[0], mc_took[1], rk_took[0], rk_took[1],
                     rk_took[2].get("rkv_alloc_waits", "?"), rk_took[2].get("rkv_alloc_wait_ms", "?")),
                  flush=True)
    print("ratio = rkv's items per byte of memory / memcached's after the trickle (burst: at the fill's end); "
          "lowest %.2fx" % worst)


def equal_memory_ratio(rk, mc):
    """rkv's items per byte of memory over memcached's."""
    return (rk[0] / rk[1]) / (mc[0] / mc[1]) if mc[0] and rk[1] else float("nan")


if __name__ == "__main__":
    main()
