#!/usr/bin/python3
"""hitrate_sim.py — eviction policies simulated on a cache-aside trace.

Replays the traces perf/hitrate.py --trace-out writes (PREFIX.warm.csv, then
PREFIX.measure.csv: a GET per line, a miss fills the key) against caches of
ITEMS items under several policies, and prints each one's hit rate over the
measured part, the way hitrate.py counts it:

    perf/hitrate.py --trace-out /tmp/zipf [--scan 0.1]
    perf/hitrate_sim.py /tmp/zipf --items 108700 [--policy opt,lru,...]

Policies: opt (Belady's, with fill-on-miss bypass: the bound no online policy
passes), lru (exact), sieve, s3fifo (the paper's queues: --small share,
--ghost entries as a share of the main queue, frequencies to 3), rkv
(server/evict.c's s3fifo as a model: 16 sampled items, the fewest uses then
the oldest, uses to 3 decaying one per --decay turnovers of stores, a
direct-mapped ghost of --rkv-ghost entries, 0 for none), lfu (rkv's sampling
ranked by every access the key ever had: perfect history), lfu-admit (exact
LFU over perfect history, admitting a missed key only when it has been
wanted more often than the victim: TinyLFU without a sketch's errors, the
frequency policies' bound). Item counts, not
bytes: run it with the items a server holds (its curr_items). A measuring
tool for developers, not a test; the sampling is seeded (--seed).
"""
import argparse
import collections
import heapq
import random


def read_trace(prefix):
    """The keys of PREFIX.warm.csv and PREFIX.measure.csv, and where the second starts."""
    keys = []
    for part in ("warm", "measure"):
        if part == "measure":
            warm = len(keys)
        with open("%s.%s.csv" % (prefix, part)) as f:
            keys.extend(line.split(",", 2)[1] for line in f)
    ids = {}
    return [ids.setdefault(k, len(ids)) for k in keys], warm


class Counter:
    """Hits and misses from operation `warm` on."""

    def __init__(self, warm):
        self.warm, self.hits, self.misses = warm, 0, 0

    def add(self, i, hit):
        if i >= self.warm:
            self.hits += hit
            self.misses += not hit

    def rate(self):
        return 100.0 * self.hits / max(1, self.hits + self.misses)


def sim_opt(trace, n, c):
    nxt, last = [0] * len(trace), {}
    for i in range(len(trace) - 1, -1, -1):
        nxt[i] = last.get(trace[i], len(trace))
        last[trace[i]] = i
    held, heap = {}, []  # key -> its next use; max-heap of (-next use, key), stale entries skipped
    for i, k in enumerate(trace):
        hit = k in held
        c.add(i, hit)
        if not hit and len(held) >= n:
            while -heap[0][0] != held.get(heap[0][1]):
                heapq.heappop(heap)
            if -heap[0][0] <= nxt[i]:
                continue  # the new item is the one used last: bypass it
            del held[heapq.heappop(heap)[1]]
        held[k] = nxt[i]
        heapq.heappush(heap, (-nxt[i], k))


def sim_lru(trace, n, c):
    held = collections.OrderedDict()
    for i, k in enumerate(trace):
        hit = k in held
        c.add(i, hit)
        if hit:
            held.move_to_end(k)
        else:
            if len(held) >= n:
                held.popitem(last=False)
            held[k] = True


def sim_sieve(trace, n, c):
    # the queue as a list with tombstones; the hand moves from old to new
    queue, pos, visited, hand = [], {}, {}, 0
    for i, k in enumerate(trace):
        hit = k in pos
        c.add(i, hit)
        if hit:
            visited[k] = True
            continue
        if len(pos) >= n:
            while True:
                if hand >= len(queue):
                    queue = [q for q in queue if q is not None]
                    for j, q in enumerate(queue):
                        pos[q] = j
                    hand = 0
                v = queue[hand]
                if v is not None and visited[v]:
                    visited[v] = False
                    hand += 1
                elif v is not None:
                    queue[hand] = None
                    del pos[v], visited[v]
                    hand += 1
                    break
                else:
                    hand += 1
        # a new item goes behind the hand's start, as SIEVE inserts at the head
        pos[k] = len(queue)
        queue.append(k)
        visited[k] = False


def sim_s3fifo(trace, n, c, small_share, ghost_share):
    small_max = max(1, int(n * small_share))
    ghost_max = int((n - small_max) * ghost_share)
    small, main, ghost = collections.deque(), collections.deque(), collections.OrderedDict()
    freq, where = {}, {}
    for i, k in enumerate(trace):
        hit = k in where
        c.add(i, hit)
        if hit:
            freq[k] = min(freq[k] + 1, 3)
            continue
        while len(where) >= n:
            if len(small) >= small_max or not main:
                v = small.popleft()
                if freq[v] >= 1:
                    freq[v], where[v] = 0, "main"
                    main.append(v)
                else:
                    del where[v], freq[v]
                    if ghost_max:
                        ghost[v] = True
                        if len(ghost) > ghost_max:
                            ghost.popitem(last=False)
            else:
                v = main.popleft()
                if freq[v] > 0:
                    freq[v] -= 1
                    main.append(v)
                else:
                    del where[v], freq[v]
        freq[k] = 0
        if ghost.pop(k, None):
            where[k] = "main"
            main.append(k)
        else:
            where[k] = "small"
            small.append(k)


def sim_sampled(trace, n, c, rnd, decay_turns, ghost_size, by_history):
    """rkv's s3fifo (or, by_history, every access counted): 16 samples."""
    held, slots = {}, []  # key -> [uses, stamp]; slots: the held keys, for sampling
    index, seen, ghost = {}, collections.Counter(), [None] * max(1, ghost_size)
    stores, decay = 0, max(1, n * decay_turns)

    def uses(k):
        u, stamp = held[k]
        return max(0, u - (stores - stamp) // decay)

    for i, k in enumerate(trace):
        seen[k] += 1
        hit = k in held
        c.add(i, hit)
        if hit:
            held[k] = [min(uses(k) + 1, 3), stores]
            continue
        if len(held) >= n:
            best, cold = None, None
            for _ in range(16):
                s = slots[rnd.randrange(len(slots))]
                rank = seen[s] if by_history else uses(s)
                if cold is None or (rank, held[s][1]) < cold:
                    best, cold = s, (rank, held[s][1])
            if ghost_size and uses(best) == 0:
                ghost[hash(best) % ghost_size] = best
            j, moved = index.pop(best), slots.pop()
            if moved != best:
                slots[j], index[moved] = moved, j
            del held[best]
        again = ghost_size and ghost[hash(k) % ghost_size] == k
        if again:
            ghost[hash(k) % ghost_size] = None
        held[k] = [1 if again else 0, stores]
        index[k] = len(slots)
        slots.append(k)
        stores += 1


def sim_lfu_admit(trace, n, c):
    """Exact LFU over every access a key ever had (perfect history: the
    bound of a frequency sketch), the least-counted held key evicted, the
    least recently counted first on a tie; a missed key is admitted only
    when its count passes the victim's (TinyLFU's admission, without the
    sketch's errors)."""
    seen, held, heap = collections.Counter(), {}, []  # held: key -> its count when pushed
    for i, k in enumerate(trace):
        seen[k] += 1
        hit = k in held
        c.add(i, hit)
        if not hit and len(held) >= n:
            while heap[0][0] != held.get(heap[0][2]):
                heapq.heappop(heap)
            if seen[k] <= heap[0][0]:
                continue  # not admitted: the victim has been wanted as often
            del held[heapq.heappop(heap)[2]]
        held[k] = seen[k]
        heapq.heappush(heap, (seen[k], i, k))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("prefix", help="the traces' prefix (hitrate.py --trace-out)")
    p.add_argument("--items", type=int, required=True, help="the cache's size in items")
    p.add_argument("--policy", default="opt,lru,sieve,s3fifo,rkv,lfu,lfu-admit")
    p.add_argument("--small", type=float, default=0.1, help="s3fifo: small queue's share")
    p.add_argument("--ghost", type=float, default=1.0, help="s3fifo: ghost entries / main's")
    p.add_argument("--decay", type=int, default=4, help="rkv: turnovers per use lost")
    p.add_argument("--rkv-ghost", type=int, default=131072, help="rkv: ghost entries (0: none)")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    if a.items < 1 or not 0 < a.small < 1 or a.ghost < 0 or a.decay < 1 or a.rkv_ghost < 0:
        p.error("out of range: items >= 1, small in (0, 1), ghost >= 0, decay >= 1, rkv-ghost >= 0")
    trace, warm = read_trace(a.prefix)
    runs = {
        "opt": lambda c: sim_opt(trace, a.items, c),
        "lru": lambda c: sim_lru(trace, a.items, c),
        "sieve": lambda c: sim_sieve(trace, a.items, c),
        "s3fifo": lambda c: sim_s3fifo(trace, a.items, c, a.small, a.ghost),
        "rkv": lambda c: sim_sampled(trace, a.items, c, random.Random(a.seed), a.decay,
                                     a.rkv_ghost, False),
        "lfu": lambda c: sim_sampled(trace, a.items, c, random.Random(a.seed), a.decay, 0, True),
        "lfu-admit": lambda c: sim_lfu_admit(trace, a.items, c),
    }
    for name in a.policy.split(","):
        if name not in runs:
            p.error("unknown policy %r (opt, lru, sieve, s3fifo, rkv, lfu, lfu-admit)" % name)
        c = Counter(warm)
        runs[name](c)
        print("%-7s %d items: hit rate %.2f %% (%d ops after a %d-op warm-up)"
              % (name, a.items, c.rate(), c.hits + c.misses, warm))


if __name__ == "__main__":
    main()
