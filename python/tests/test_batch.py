"""test_batch.py — incr/decr, mget/mput, the pipeline, stats, counters,
ping, flush and the shard calls against a real server."""
import pytest

import rkv
from conftest import Server


def test_incr_decr(client, key):
    with pytest.raises(rkv.NotFound) as e:
        client.incr(key)
    assert isinstance(e.value, KeyError)
    client.put(key, b"10")
    assert client.incr(key) == 11
    assert client.incr(key, 5) == 16
    assert client.decr(key, 20) == 0  # saturates, as memcached
    client.put(key, b"18446744073709551615")
    assert client.incr(key) == 0  # wraps, as memcached
    assert client.get(key) == b"0"
    client.put(key, b"abc")
    with pytest.raises(rkv.NotNumber):
        client.incr(key)
    for bad in (-1, 2**63, "1", 1.0):
        with pytest.raises((ValueError, TypeError)):
            client.incr(key, bad)
    with pytest.raises(TypeError):
        client.incr()
    with pytest.raises(TypeError):
        client.decr(key, 1, 2)


def test_mget_mput(client, key):
    items = {f"{key}{i}": b"v%d" % i for i in range(150)}  # three batches
    assert client.mput(items, ttl=100, flags=4) is None
    keys = list(items) + [key + "absent"]
    got = client.mget(keys)
    assert got == items
    assert client.get_item(key + "7").flags == 4
    # pairs, bytes keys (kept as given), duplicates, and a long value
    client.mput([(key.encode() + b"b", b"bytes"), (key + "long", b"L" * 10000)])
    got = client.mget([key.encode() + b"b", key.encode() + b"b", key + "long"])
    assert got == {key.encode() + b"b": b"bytes", key + "long": b"L" * 10000}
    assert client.mget([]) == {}
    client.mput({})


def test_mput_tries_every_item_then_raises_the_first_failure(client, key):
    big = b"x" * (client.max_value_size + 1)
    with pytest.raises(rkv.ValueTooLarge) as e:
        client.mput([(key + "1", b"a"), (key + "2", big), (key + "3", b"c")])
    assert (key + "2") in str(e.value)
    assert client.mget([key + "1", key + "2", key + "3"]) == {key + "1": b"a", key + "3": b"c"}


def test_mget_mput_bad_input(client, key):
    for bad in (5, None, [5], [b"k" * 251], [""]):
        with pytest.raises((TypeError, ValueError)):
            client.mget(bad)
    for bad in (5, [b"k"], [(b"k",)], [(b"k", b"v", b"w")], {b"k": "str"}, {5: b"v"},
                {b"k" * 251: b"v"}):
        with pytest.raises((TypeError, ValueError)):
            client.mput(bad)
    with pytest.raises(TypeError):
        client.mput({key: b"v"}, nope=1)


def test_pipeline_results_in_order(client, key):
    with client.pipeline(window=4) as p:
        for i in range(40):
            p.put(f"{key}{i}", b"v%d" % i, flags=i)
    versions = p.results
    assert len(versions) == 40 and all(isinstance(v, int) for v in versions)
    with client.pipeline(window=16) as p:
        for i in range(41):
            p.get(f"{key}{i}")
        p.delete(key + "0")
        p.delete(key + "0")
        p.put(key + "n", b"5")
    r = p.results
    assert r[:40] == [b"v%d" % i for i in range(40)] and r[40] is None
    assert r[41:43] == [True, False] and isinstance(r[43], int)
    with client.pipeline() as p:
        p.incr(key + "n", 3)
        p.decr(key + "n")
    assert p.results == [8, 7]


def test_pipeline_execute_and_errors(client, key):
    p = client.pipeline(window=2)
    p.put(key + "a", b"1")
    p.add(key + "a", b"2")  # same key, same handle: in order, so it fails
    p.replace(key + "absent", b"x")
    p.put(key + "big", b"x" * (client.max_value_size + 1))
    p.incr(key + "absent")
    r = p.execute(raise_on_error=False)
    assert isinstance(r[0], int)
    assert isinstance(r[1], rkv.Exists)
    assert isinstance(r[2], rkv.NotStored)
    assert isinstance(r[3], rkv.ValueTooLarge)
    assert isinstance(r[4], rkv.NotFound)
    p.cas(key + "a", b"3", r[0])
    (v,) = p.execute()
    assert isinstance(v, int)
    assert client.get(key + "a") == b"3"
    p.add(key + "a", b"4")
    with pytest.raises(rkv.Exists):
        p.execute()
    p.close()
    p.close()
    with pytest.raises(rkv.ClientClosed):
        p.get(key)


def test_pipeline_long_values_and_bad_input(client, key):
    client.put(key, b"L" * 100000)
    with client.pipeline(window=2, buffer_size=16) as p:
        p.get(key)
        p.get(key + "absent")
        for bad in (5, None, "k" * 251, ""):
            with pytest.raises((TypeError, ValueError)):
                p.get(bad)
        with pytest.raises(TypeError):
            p.put(key, "str")
        with pytest.raises(ValueError):
            p.incr(key, -1)
    assert p.results == [b"L" * 100000, None]
    for bad in (0, 4097, -1, "16"):  # 1..RKV_MAX_WINDOW
        with pytest.raises((ValueError, TypeError)):
            client.pipeline(window=bad)


def test_one_pipeline_per_client_and_sync_calls_beside_it(client, key):
    with client.pipeline() as p:
        with pytest.raises(rkv.Error):
            client.pipeline()
        p.put(key, b"1")
        assert client.put(key + "sync", b"s") > 0
        assert client.get(key + "sync") == b"s"
    assert isinstance(p.results[0], int)
    with client.pipeline() as p2:  # the first one is closed: another may open
        p2.get(key)
    assert p2.results == [b"1"]


def test_pipeline_exception_in_block_drops_results(client, key):
    with pytest.raises(RuntimeError):
        with client.pipeline() as p:
            p.put(key, b"1")
            raise RuntimeError("boom")
    assert p.pending == 0
    assert client.get(key) == b"1"  # the op completed all the same
    with client.pipeline() as p:  # and the client is free for another
        p.get(key)
    assert p.results == [b"1"]


def test_closing_the_client_settles_the_pipeline(server, key):
    c = rkv.Client(server.uri)
    p = c.pipeline(window=8)
    for i in range(20):
        p.put(f"{key}{i}", b"v")
    c.close()
    assert p.pending == 0
    with pytest.raises(rkv.ClientClosed):
        p.get(key)
    p.close()
    del p


def test_abandoned_pipeline_is_settled(client, key):
    p = client.pipeline()
    p.put(key, b"1")
    del p  # dealloc waits for the op and frees the client for another
    with client.pipeline() as p:
        p.get(key)
    assert p.results == [b"1"]


def test_stats_counters_ping_flush_shards(client, key):
    s = client.stats()
    assert isinstance(s["uptime"], int) and "items" in s
    with pytest.raises(rkv.InvalidArgument):
        client.stats(5)
    with pytest.raises(ValueError):
        client.stats(-1)
    client.reset_counters()
    client.put(key, b"v")
    client.get(key)
    with client.pipeline() as p:
        for _ in range(8):
            p.get(key)
    k = client.counters()
    assert k["gets"] == 9 and k["get_hits"] == 9 and k["puts"] == 1
    assert k["reads"] >= 9 and k["doorbells"] >= 1 and "read_round_trips" in k
    assert k["read_lanes"] == 0 and k["read_lanes_td"] == 0  # not a shared rdma handle
    client.reset_counters()
    assert client.counters()["gets"] == 0
    client.ping()
    assert client.shard_count == 1 and client.shard_of(key) == 0
    with pytest.raises(TypeError):
        client.shard_of(5)


def test_flush(server_binary, tmp_path):
    # a server of its own: the shared one's items stay for the other tests
    s = Server(server_binary, str(tmp_path))
    with rkv.Client(s.uri) as c:
        c.put("flush/a", b"1")
        c.flush(100)  # scheduled, then cancelled by a flush now
        c.flush()
        assert c.get("flush/a") is None
        with pytest.raises(ValueError):
            c.flush(-1)
    s.stop()
