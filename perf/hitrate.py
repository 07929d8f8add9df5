#!/usr/bin/python3
"""hitrate.py — a cache-aside trace through a real memcached client.

pylibmc (libmemcached, the C client most languages' clients wrap) against
one server's memcached door: zipf popularity (default 0.99) over KEYS keys
(default 500,000) of 200-byte values, OPS operations (default 1.5 M), the
first third a warm-up; a GET miss sets the key (fill on miss). With --scan F,
a share F of the operations instead reads the next key of a one-pass
sequence of cold keys (and fills it on the miss), the pattern that
pollutes an LRU. Prints the hit rate after the warm-up. Run it against
memcached and rkv-server side by side with the same memory
(memcached -m 32, rkv-server --memory 32M):

    perf/hitrate.py --port PORT [--scan 0.1] [--keys N] [--ops N] [--zipf S] [--seed N]

With --trace-out PREFIX it sends nothing and writes the same key sequence
as two cache traces (Twitter's CSV: GETs of 200-byte values), PREFIX.warm.csv
(the warm-up) and PREFIX.measure.csv, for rkv-bench to replay through any
door, librkv's one-sided GETs included:

    rkv-bench -s URI --fill-on-miss --trace PREFIX.warm.csv
    rkv-bench -s URI --fill-on-miss --trace PREFIX.measure.csv   # its hit rate

A measuring tool for developers, not a test. Exit status 0, 2 on bad usage.
"""
import argparse
import bisect
import itertools
import random

import pylibmc


def trace_keys(a, rnd, cum, perm):
    """The trace's keys, one per operation."""
    scanned = 0
    for _ in range(a.ops):
        if a.scan and rnd.random() < a.scan:
            yield "scan:%d" % scanned
            scanned += 1
        else:
            yield "key:%d" % perm[bisect.bisect_left(cum, rnd.random() * cum[-1])]


def write_traces(a, keys, warm):
    """PREFIX.warm.csv and PREFIX.measure.csv: a GET per line, in order."""
    with open(a.trace_out + ".warm.csv", "w") as w, open(a.trace_out + ".measure.csv", "w") as m:
        for i, key in enumerate(keys):
            (w if i < warm else m).write("%d,%s,%d,%d,1,get,0\n" % (i, key, len(key), a.value))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--keys", type=int, default=500000)
    p.add_argument("--ops", type=int, default=1500000)
    p.add_argument("--zipf", type=float, default=0.99)
    p.add_argument("--scan", type=float, default=0.0, help="share of one-pass cold reads (0..0.9)")
    p.add_argument("--value", type=int, default=200, help="value bytes (1..100000)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--trace-out", metavar="PREFIX", help="write the trace as CSV, send nothing")
    a = p.parse_args()
    if not a.trace_out and not 1 <= a.port <= 65535:
        p.error("--port PORT is needed (1..65535), or --trace-out")
    if not (0 <= a.port <= 65535 and a.keys >= 1 and a.ops >= 3 and 0 <= a.scan <= 0.9
            and 0 < a.zipf <= 5 and 1 <= a.value <= 100000):
        p.error("out of range: port 1..65535, keys >= 1, ops >= 3, scan 0..0.9, zipf (0, 5], "
                "value 1..100000")
    rnd = random.Random(a.seed)
    cum = list(itertools.accumulate(1.0 / (i + 1) ** a.zipf for i in range(a.keys)))
    perm = list(range(a.keys))
    rnd.shuffle(perm)
    warm = a.ops // 3
    keys = trace_keys(a, rnd, cum, perm)
    if a.trace_out:
        write_traces(a, keys, warm)
        return
    c = pylibmc.Client(["%s:%d" % (a.host, a.port)], binary=False)
    val = b"x" * a.value
    hits = misses = 0
    for i, key in enumerate(keys):
        hit = c.get(key) is not None
        if not hit:
            c.set(key, val)
        if i >= warm:
            hits += hit
            misses += not hit
    print("%s:%d: hit rate %.2f %% (%d ops after a %d-op warm-up, zipf %.2f over %d keys, scan %.2f)"
          % (a.host, a.port, 100.0 * hits / (hits + misses), hits + misses, warm, a.zipf, a.keys,
             a.scan))


if __name__ == "__main__":
    main()
