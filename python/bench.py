#!/usr/bin/env python3
"""bench.py — GETs from one Python thread: rkv's binding over shm beside
pylibmc against memcached and against rkv's own tcp door, in one run.

A tool that prints numbers, not a test. It starts an rkv-server (shm and
tcp listeners) and a memcached, stores the same KEYS keys of SIZE bytes in
both, then times each way of reading them for SECONDS, the ways in turn, --repeat
rounds (a slow spell of the shared machine falls on all alike):

  rkv shm   get            Client.get: one synchronous GET, the value as bytes
  rkv shm   get_into       Client.get_into: into one preallocated buffer
  rkv shm   pipeline w=16  Client.pipeline(window=16): p.get per key, results every 1024
  rkv shm   mget 16        Client.mget of 16 keys
  pylibmc   memcached get  pylibmc.Client.get against /usr/bin/memcached (tcp, loopback)
  pylibmc   memcached get_multi 16
  pylibmc   rkv door  get  the same client against rkv-server's tcp:// listener
  pylibmc   rkv door  get_multi 16

and prints each row's median and best ops/s, with librkv's counters per GET
(one-sided READs, their round trips, doorbells) for the rkv rows.

Usage (from a build tree, the package importable):
  PYTHONPATH=build/python python3 python/bench.py --server build/server/rkv-server \
      [--seconds 2] [--repeat 5] [--keys 10000] [--size 100] [--port 23140] [--memcached /usr/bin/memcached]
"""
import argparse
import itertools
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

# python/ holds the package's sources, not the built extension: import rkv
# from PYTHONPATH (the build tree) or the installed package instead
_here = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _here]
import rkv  # noqa: E402

try:
    import pylibmc
except ImportError:  # the rkv rows still run
    pylibmc = None


def wait_port(port, proc, what):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"bench: {what} exited at start (status {proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"bench: {what} did not listen on port {port}")


def start_rkv(binary, sock, port):
    proc = subprocess.Popen([binary, "--listen", "shm://" + sock,
                             "--listen", f"tcp://127.0.0.1:{port}",
                             "--memory", "256M", "--workers", "1", "--log-level", "error"])
    wait_port(port, proc, "rkv-server")
    deadline = time.monotonic() + 30
    while True:
        try:
            rkv.Client("shm://" + sock).close()
            return proc
        except rkv.Error:
            if time.monotonic() > deadline:
                sys.exit("bench: rkv-server's shm listener did not answer")
            time.sleep(0.05)


def start_memcached(binary, port):
    user = ["-u", "root"] if os.geteuid() == 0 else []  # memcached refuses root without it
    proc = subprocess.Popen([binary, *user, "-l", "127.0.0.1", "-p", str(port), "-U", "0",
                             "-m", "256", "-t", "1"])
    wait_port(port, proc, "memcached")
    return proc


def rate(seconds, run_batch):
    """ops/s of run_batch() (which returns the ops it did) called until
    `seconds` have passed."""
    ops, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        ops += run_batch()
        now = time.perf_counter()
        if now >= deadline:
            return ops / (now - start)


def chunks(keys, n):
    return [keys[i:i + n] for i in range(0, len(keys) - n + 1, n)]


def rkv_rows(c, keys, args):
    """(name, run_batch) for each way the binding reads."""
    buf = bytearray(args.size + 64)
    batch = keys[:1024]
    by16 = chunks(keys, 16)

    def sync_get():
        get = c.get
        for k in batch:
            get(k)
        return len(batch)

    def sync_get_into():
        get_into = c.get_into
        for k in batch:
            get_into(k, buf)
        return len(batch)

    def pipelined():
        with c.pipeline(window=16) as p:
            get = p.get
            for k in batch:
                get(k)
        return len(batch)

    mget_iter = itertools.cycle(by16)

    def mget16():
        mget = c.mget
        for _ in range(64):
            mget(next(mget_iter))
        return 64 * 16

    return [("rkv shm get", sync_get), ("rkv shm get_into", sync_get_into),
            ("rkv shm pipeline window 16", pipelined), ("rkv shm mget 16", mget16)]


def pylibmc_rows(where, port, keys):
    m = pylibmc.Client([f"127.0.0.1:{port}"], binary=False,
                       behaviors={"tcp_nodelay": True})
    batch = keys[:1024]
    by16 = itertools.cycle(chunks(keys, 16))
    missing = sum(1 for k in batch[:100] if m.get(k) is None)
    if missing:
        sys.exit(f"bench: {missing} of 100 keys missing through pylibmc at {where}")

    def sync_get():
        get = m.get
        for k in batch:
            get(k)
        return len(batch)

    def multi16():
        gm = m.get_multi
        for _ in range(64):
            gm(next(by16))
        return 64 * 16

    return [(f"pylibmc {where} get", sync_get), (f"pylibmc {where} get_multi 16", multi16)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default="build/server/rkv-server", help="rkv-server binary")
    ap.add_argument("--memcached", default="/usr/bin/memcached")
    ap.add_argument("--seconds", type=float, default=2.0, help="per run (default 2)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds over the rows (default 5)")
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--size", type=int, default=100, help="value bytes (default 100)")
    ap.add_argument("--port", type=int, default=23140,
                    help="rkv's tcp door; memcached takes PORT+1 (default 23140)")
    args = ap.parse_args()

    keys = [f"bench:{i:08d}" for i in range(args.keys)]
    value = os.urandom(args.size // 2 + 1).hex()[:args.size].encode()
    procs = []
    try:
        with tempfile.TemporaryDirectory(prefix="rkv-pybench-") as d:
            sock = os.path.join(d, "rkv.sock")
            procs.append(start_rkv(args.server, sock, args.port))
            c = rkv.Client("shm://" + sock)
            c.mput({k: value for k in keys})
            rows = rkv_rows(c, keys, args)
            if pylibmc is not None and os.access(args.memcached, os.X_OK):
                procs.append(start_memcached(args.memcached, args.port + 1))
                mc = pylibmc.Client([f"127.0.0.1:{args.port + 1}"])
                mc.set_multi({k: value for k in keys})
                rows += pylibmc_rows("memcached", args.port + 1, keys)
                rows += pylibmc_rows("rkv door", args.port, keys)
            else:
                print("bench: pylibmc or memcached missing: rkv rows only", file=sys.stderr)
            # the rows in turn, --repeat rounds: a slow spell of the machine
            # falls on every row alike
            rates = {name: [] for name, _ in rows}
            per_get = {}
            for _ in range(args.repeat):
                for name, fn in rows:
                    if name.startswith("rkv"):
                        c.reset_counters()
                    rates[name].append(rate(args.seconds, fn))
                    if name.startswith("rkv"):
                        k = c.counters()
                        per_get[name] = [k[f] / max(k["gets"], 1)
                                         for f in ("reads", "read_round_trips", "doorbells")]
            c.close()
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait()

    print(f"# one Python thread, {args.keys} keys x {args.size} B, {args.repeat} rounds x "
          f"{args.seconds:g} s per row; Python {sys.version.split()[0]}, librkv {rkv.LIBRKV_VERSION}")
    print(f"{'what':30} {'median ops/s':>13} {'max ops/s':>11}   per GET: reads round-trips doorbells")
    med = {}
    for name, _ in rows:
        med[name] = statistics.median(rates[name])
        extra = "   %5.2f %5.2f %5.3f" % tuple(per_get[name]) if name in per_get else ""
        print(f"{name:30} {med[name]:13,.0f} {max(rates[name]):11,.0f}{extra}")
    if "pylibmc memcached get" in med:
        print("# medians: rkv shm get / pylibmc memcached get = %.1fx; rkv shm pipeline window 16 "
              "/ pylibmc memcached get_multi 16 = %.1fx" % (
                  med["rkv shm get"] / med["pylibmc memcached get"],
                  med["rkv shm pipeline window 16"] / med["pylibmc memcached get_multi 16"]))


if __name__ == "__main__":
    main()
