"""test_basic.py — rkv.Client's single calls against a real server: get,
get_item, get_into, put and its modes, delete, and every error they raise
for bad input, a closed client or a refused write."""
import array
import gc
import os

import pytest

import rkv


def test_put_get_delete(client, key):
    k = key + "a"
    assert client.get(k) is None
    v1 = client.put(k, b"hello")
    assert isinstance(v1, int) and v1 > 0
    assert client.get(k) == b"hello"
    assert client.delete(k) is True
    assert client.get(k) is None
    assert client.delete(k) is False


def test_keys_str_and_bytes_are_the_same_utf8(client, key):
    k = key + "é"
    client.put(k, b"1")
    assert client.get(k.encode()) == b"1"
    assert client.get(bytearray(k.encode())) == b"1"
    assert client.get(memoryview(k.encode())) == b"1"


def test_binary_key_and_value(client):
    k = bytes(range(1, 251))
    v = bytes(range(256)) * 40
    client.put(k, v)
    assert client.get(k) == v


def test_values_any_bytes_like(client, key):
    client.put(key + "ba", bytearray(b"xyz"))
    client.put(key + "mv", memoryview(b"0123456789")[2:5])
    client.put(key + "ar", array.array("i", [1, 2]))
    client.put(key + "empty", b"")
    assert client.get(key + "ba") == b"xyz"
    assert client.get(key + "mv") == b"234"
    assert client.get(key + "ar") == array.array("i", [1, 2]).tobytes()
    assert client.get(key + "empty") == b""


def test_large_value_grows_the_scratch_buffer(client, key):
    v = b"L" * (client.max_value_size)
    client.put(key, v)
    assert client.get(key) == v
    assert client.get_item(key).value == v


def test_get_item_flags_ttl_version(client, key):
    ver = client.put(key, b"v", flags=0xFFFFFFFF, ttl=1000)
    item = client.get_item(key)
    assert item.value == b"v" and item.flags == 0xFFFFFFFF and item.version == ver
    assert 0 < item.ttl_left <= 1000
    client.put(key, b"v", ttl=rkv.TTL_NEVER)
    assert client.get_item(key).ttl_left == 0
    assert client.get_item(key + "absent") is None


def test_get_into(client, key):
    client.put(key, b"hello")
    buf = bytearray(16)
    assert client.get_into(key, buf) == 5
    assert buf[:5] == b"hello"
    mv = memoryview(bytearray(8))
    assert client.get_into(key, mv[2:]) == 5 and bytes(mv[2:7]) == b"hello"
    arr = array.array("B", bytes(5))
    assert client.get_into(key, arr) == 5 and arr.tobytes() == b"hello"
    assert client.get_into(key + "absent", buf) is None


def test_get_into_too_small_leaves_the_buffer(client, key):
    client.put(key, b"hello")
    buf = bytearray(b"abc")
    with pytest.raises(rkv.BufferTooSmall) as e:
        client.get_into(key, buf)
    assert e.value.needed == 5 and buf == b"abc"
    assert isinstance(e.value, ValueError)


def test_get_into_numpy(client, key):
    # python3-numpy is a test dependency (scripts/install-deps.sh); a
    # machine without it skips this one
    np = pytest.importorskip("numpy")
    client.put(key, b"\x01\x02\x03\x04")
    a = np.zeros(8, dtype=np.uint8)
    assert client.get_into(key, a) == 4 and list(a[:4]) == [1, 2, 3, 4]
    # wider items and more dimensions: the bytes land in the array's memory
    f = np.arange(12, dtype=np.float32).reshape(3, 4)
    client.put(key + "f", f)  # a numpy array is a value too
    g = np.zeros((3, 4), dtype=np.float32)
    assert client.get_into(key + "f", g) == f.nbytes and (g == f).all()
    # a view into a larger array: only its bytes are written
    big = np.full(64, 0xEE, dtype=np.uint8)
    assert client.get_into(key, big[8:16]) == 4
    assert list(big[8:12]) == [1, 2, 3, 4] and (big[:8] == 0xEE).all() and (big[12:] == 0xEE).all()
    with pytest.raises(rkv.BufferTooSmall) as e:
        client.get_into(key + "f", np.zeros(4, dtype=np.uint8))
    assert e.value.needed == f.nbytes
    ro = np.zeros(8, dtype=np.uint8)
    ro.flags.writeable = False
    for bad in (ro, np.zeros(16, dtype=np.uint8)[::2], np.zeros((4, 4), dtype=np.uint8).T):
        with pytest.raises(TypeError):
            client.get_into(key, bad)


def test_get_into_refuses_read_only_and_bad_buffers(client, key):
    client.put(key, b"x")
    for bad in (b"readonly", memoryview(b"ro"), "str", 5, None,
                memoryview(bytearray(8))[::2]):
        with pytest.raises(TypeError):
            client.get_into(key, bad)
    with pytest.raises(TypeError):
        client.get_into(key)


def test_add_replace_cas(client, key):
    with pytest.raises(rkv.NotStored):
        client.replace(key, b"r")
    v1 = client.add(key, b"a")
    with pytest.raises(rkv.Exists) as e:
        client.add(key, b"b")
    assert isinstance(e.value, rkv.ConditionFailed) and e.value.status_name == "exists"
    assert client.get(key) == b"a"
    v2 = client.replace(key, b"r", flags=3)
    assert v2 != v1 and client.get_item(key).flags == 3
    with pytest.raises(rkv.CasMismatch):
        client.cas(key, b"c", v1)
    assert client.get(key) == b"r"
    v3 = client.cas(key, b"c", v2, ttl=100)
    assert client.get_item(key).version == v3 and client.get(key) == b"c"
    with pytest.raises(rkv.NotStored):
        client.cas(key + "absent", b"c", v3)
    assert client.set(key, b"s") > 0 and client.get(key) == b"s"


@pytest.mark.parametrize("bad", [None, 5, 1.5, ["k"], object()])
def test_bad_key_types(client, bad):
    for call in (client.get, client.get_item, client.delete,
                 lambda k: client.put(k, b"v"), lambda k: client.get_into(k, bytearray(4))):
        with pytest.raises(TypeError):
            call(bad)


def test_key_lengths(client):
    client.put("k" * 250, b"ok")
    assert client.get("k" * 250) == b"ok"
    for call in (client.get, client.delete, lambda k: client.put(k, b"v")):
        with pytest.raises(rkv.KeyTooLong) as e:
            call("k" * 251)
        assert isinstance(e.value, rkv.InvalidArgument) and isinstance(e.value, ValueError)
        assert "251 bytes" in str(e.value)
        with pytest.raises(rkv.InvalidArgument):
            call("")
        with pytest.raises(rkv.InvalidArgument):
            call(b"")
    # a multi-byte str counts its UTF-8 bytes
    with pytest.raises(rkv.KeyTooLong):
        client.get("é" * 126)


def test_bad_values(client, key):
    for bad in ("str", None, 5, [b"x"], memoryview(bytearray(8))[::2]):
        with pytest.raises(TypeError):
            client.put(key, bad)


def test_value_too_large_says_the_limit(client, key):
    client.put(key, b"old")
    with pytest.raises(rkv.ValueTooLarge) as e:
        client.put(key, b"x" * (client.max_value_size + 1))
    assert str(client.max_value_size) in str(e.value)
    assert e.value.status_name == "too_large"
    assert client.get(key) is None  # as memcached's set: the old value is gone
    client.put(key, b"old")
    with pytest.raises(rkv.ValueTooLarge):
        client.add(key, b"x" * (client.max_value_size + 1))
    assert client.get(key) == b"old"  # a refused add leaves the old item


@pytest.mark.parametrize("kw", [{"ttl": -1}, {"ttl": 2**32}, {"flags": -1}, {"flags": 2**32},
                                {"ttl": "1"}, {"flags": 1.0}])
def test_bad_ttl_and_flags(client, key, kw):
    with pytest.raises((ValueError, TypeError)):
        client.put(key, b"v", **kw)
    assert client.get(key) is None


def test_bad_cas_version(client, key):
    for bad in (None, -1, "1", 2**64):
        with pytest.raises((ValueError, TypeError)):
            client.cas(key, b"v", bad)
    with pytest.raises(TypeError):
        client.cas(key, b"v")


def test_closed_client(server):
    c = rkv.Client(server.uri)
    c.close()
    c.close()  # idempotent
    assert c.closed
    for call in (lambda: c.get("k"), lambda: c.put("k", b"v"), lambda: c.delete("k"),
                 lambda: c.get_into("k", bytearray(4)), lambda: c.max_value_size):
        with pytest.raises(rkv.ClientClosed) as e:
            call()
        assert isinstance(e.value, ValueError)


def test_context_manager_closes(server):
    with rkv.Client(server.uri) as c:
        assert not c.closed
    assert c.closed


def test_connect_errors(server, tmp_path):
    with pytest.raises(rkv.ConnectionError) as e:
        rkv.Client("shm://" + str(tmp_path / "none.sock"))
    assert "none.sock" in str(e.value)
    assert isinstance(e.value, ConnectionError)  # the builtin too
    with pytest.raises(rkv.InvalidArgument):
        rkv.Client("gopher://x")
    with pytest.raises(TypeError):
        rkv.Client(5)
    with pytest.raises(TypeError):
        rkv.Client(server.uri, no_such_option=1)
    with pytest.raises(ValueError):
        rkv.Client(server.uri, timeout_ms=-1)
    with pytest.raises(ValueError):
        rkv.Client(server.uri, placement="nearest")
    with rkv.Client(server.uri, timeout_ms=2000, bucket_reads="first", placement="jump",
                    location_cache=1024) as c:
        c.put("opt", b"1")


def test_uninitialised_client_raises():
    c = rkv.Client.__new__(rkv.Client)
    with pytest.raises(rkv.ClientClosed):
        c.get("k")
    c.close()
    del c
    gc.collect()


def test_exceptions_hierarchy():
    assert issubclass(rkv.Timeout, rkv.ConnectionError)
    assert issubclass(rkv.Timeout, TimeoutError)
    assert issubclass(rkv.NotFound, KeyError)
    for name in ("ServerBusy", "ValueTooLarge", "KeyTooLong", "InvalidArgument",
                 "OutOfMemory", "NotNumber", "AuthError", "ProtocolError"):
        assert issubclass(getattr(rkv, name), rkv.Error)


def test_the_readme_example_runs(server):
    readme = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
    with open(readme) as f:
        text = f.read()
    block = text.split("```python\n", 1)[1].split("```", 1)[0]
    block = block.replace("shm:///run/rkv/rkv.sock", server.uri)
    scope = {}
    exec(compile(block, "README.md", "exec"), scope)  # noqa: S102 (our own README)
    assert scope["p"].results == [b"1", b"2", None]
    assert scope["n"] == len(b'{"name":"ada"}')
