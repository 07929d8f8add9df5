"""test_resources.py — what the binding holds on to: no reference kept by
any call or error path, RSS and Python's allocated blocks flat over a long
loop of every call, get_into allocating nothing, threads sharing a Client.

RKV_PY_LOOP_OPS sets the loop's length (200,000 in the suite; raise it by
hand for a longer soak)."""
import gc
import itertools
import os
import sys
import threading
import tracemalloc

import pytest

import rkv

LOOP_OPS = int(os.environ.get("RKV_PY_LOOP_OPS", "200000"))


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def every_call(c, key, i, buf):
    """One round of every call, its error paths included (about 20 ops)."""
    k = f"{key}{i % 500}"  # fresh objects each round: a leak of one would show
    v = b"%d" % i * 20
    c.put(k, v, ttl=100, flags=i & 0xFF)
    assert c.get(k) == v
    assert c.get_item(k).value == v
    assert c.get_into(k.encode(), buf) == len(v)
    assert c.get(k + "absent") is None
    c.delete(k + "x")
    c.add(k + "x", v)
    try:
        c.add(k, v)
    except rkv.Exists:
        pass
    try:
        c.get("k" * 251)
    except rkv.KeyTooLong:
        pass
    try:
        c.put(k, "str")
    except TypeError:
        pass
    try:
        c.get_into(k, bytearray(1))
    except rkv.BufferTooSmall:
        pass
    try:
        c.incr(k + "absent")
    except rkv.NotFound:
        pass
    c.put(k + "n", b"1")
    c.incr(k + "n", 2)
    c.mput({k + "m1": v, k + "m2": v})
    assert len(c.mget([k + "m1", k + "m2", k + "absent"])) == 2
    with c.pipeline(window=4) as p:
        p.get(k)
        p.put(k + "p", v)
        p.delete(k + "absent")
    c.delete(k)


ROUND_OPS = 20


def test_rss_and_blocks_flat_over_a_long_loop(client, key):
    buf = bytearray(4096)
    rounds = LOOP_OPS // ROUND_OPS
    for i in range(rounds // 10):  # warm up: caches, free lists, the scratch
        every_call(client, key, i, buf)
    gc.collect()
    rss0, blocks0 = rss_bytes(), sys.getallocatedblocks()
    for i in range(rounds):
        every_call(client, key, i, buf)
    gc.collect()
    rss_growth, blocks_growth = rss_bytes() - rss0, sys.getallocatedblocks() - blocks0
    # One leaked object per round (>= 50 bytes) would grow both far past
    # these bounds; the bounds leave room for the allocator's own noise.
    assert blocks_growth < rounds // 10, f"{blocks_growth} blocks more after {rounds} rounds"
    if not os.environ.get("RKV_PY_SANITIZED"):  # ASan's quarantine keeps what is freed
        assert rss_growth < 16 << 20, f"RSS grew {rss_growth} bytes over {rounds} rounds"


def test_calls_keep_no_reference(client, key):
    k, v, buf = (key + "rc").encode(), b"value" * 10, bytearray(64)
    sk = key + "rc-str"
    before = [sys.getrefcount(o) for o in (k, v, buf, sk)]
    for _ in range(100):
        client.put(k, v)
        client.put(sk, v)
        client.get(k)
        client.get_into(k, buf)
        client.mget([k, sk])
        client.mput({k: v})
        with client.pipeline() as p:
            p.get(k)
            p.put(k, v)
        try:
            client.get_into(k, bytearray(1))
        except rkv.BufferTooSmall:
            pass
        try:
            client.add(k, v)
        except rkv.Exists:
            pass
    del p
    assert [sys.getrefcount(o) for o in (k, v, buf, sk)] == before


def _traced_peak(get_into, k, buf, n):
    """Bytes allocated at the peak of n get_into(k, buf) calls, above the
    level when they started (the loop itself allocates nothing)."""
    calls = itertools.repeat(None, n)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        for _ in calls:
            get_into(k, buf)
        cur, peak = tracemalloc.get_traced_memory()
        return peak - cur
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("keytype", [bytes, str])
def test_get_into_allocates_nothing(client, key, keytype):
    k = key + "zero" if keytype is str else (key + "zero").encode()
    client.put(k, b"z" * 200)  # a length Python keeps as a shared small int
    buf = bytearray(256)
    client.get_into(k, buf)  # a str key caches its UTF-8 on first use
    assert _traced_peak(client.get_into, k, buf, 20000) == 0
    assert buf[:200] == b"z" * 200


def test_get_into_numpy_allocates_nothing(client, key):
    np = pytest.importorskip("numpy")  # a test dependency; absent: skipped
    k = (key + "zero").encode()
    client.put(k, b"z" * 200)
    a = np.zeros(256, dtype=np.uint8)
    view = memoryview(a)  # exported once: get_into(k, view) asks numpy nothing
    client.get_into(k, view)
    assert _traced_peak(client.get_into, k, view, 20000) == 0
    assert a[:200].tobytes() == b"z" * 200
    # the array itself: numpy's buffer export makes (and frees) its own small
    # record on each call, which the binding cannot avoid; nothing stays
    client.get_into(k, a)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for _ in itertools.repeat(None, 20000):
            client.get_into(k, a)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after == before


def test_get_into_long_value_allocates_only_the_returned_int(client, key):
    k = (key + "long").encode()
    client.put(k, b"z" * 4000)
    # the length 4000 is a new int each call, freed at once: one at a time
    assert _traced_peak(client.get_into, k, memoryview(bytearray(4096)), 20000) <= 32


def test_threads_share_a_client(client, key):
    n_threads, rounds = 8, 300
    errors = []

    def work(t):
        try:
            for i in range(rounds):
                k = f"{key}{t}/{i % 20}"
                v = b"%d-%d" % (t, i)
                client.put(k, v)
                assert client.get(k) == v
                buf = bytearray(32)
                assert client.get_into(k, buf) == len(v) and bytes(buf[:len(v)]) == v
                assert client.incr(f"{key}counter") > 0
                if i % 50 == 0:
                    assert client.mget([k])[k] == v
        except Exception as e:  # reported in the main thread
            errors.append(e)

    client.put(f"{key}counter", b"0")
    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert client.get(f"{key}counter") == b"%d" % (n_threads * rounds)


def test_threads_with_a_client_each(server, key):
    errors = []

    def work(t):
        try:
            with rkv.Client(server.uri) as c:
                for i in range(300):
                    c.put(f"{key}{t}", b"%d" % i)
                    assert c.get(f"{key}{t}") == b"%d" % i
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_a_thread_closing_the_client_under_others(server, key):
    c = rkv.Client(server.uri)
    c.put(key, b"v")
    stop = threading.Event()
    seen = []

    def reader():
        while not stop.is_set():
            try:
                assert c.get(key) in (b"v", None)
            except rkv.ClientClosed:
                seen.append("closed")
                return

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    c.close()
    for t in threads:
        t.join()
    stop.set()
    assert seen == ["closed"] * 3


def test_threads_share_a_pipeline_and_one_closes_it(client, key):
    with client.pipeline(window=8) as p:
        def put(t):
            for i in range(500):
                p.put(f"{key}{t}/{i % 10}", b"v")
        threads = [threading.Thread(target=put, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(p.results) == 2000 and all(isinstance(v, int) for v in p.results)

    p = client.pipeline(window=4)
    closed = []

    def submit():
        try:
            for _ in range(100000):
                p.get(key + "0/0")
        except rkv.ClientClosed:
            closed.append(True)

    t = threading.Thread(target=submit)
    t.start()
    p.close()  # under the submitting thread: it sees the pipeline closed
    t.join()
    assert p.pending == 0
    with client.pipeline() as p2:  # the client is free again
        p2.get(key + "0/0")
    assert p2.results == [b"v"]
