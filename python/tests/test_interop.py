"""test_interop.py — one table, three writers: values stored by the C
library (rkv-cli), by a memcached client through the tcp door (pymemcache)
and by Python are each read by the other two."""
import os
import subprocess

import pytest

import rkv

pymemcache = pytest.importorskip("pymemcache.client.base")


@pytest.fixture
def cli(server):
    binary = os.environ.get("RKV_CLI")
    if not binary or not os.access(binary, os.X_OK):
        pytest.skip("RKV_CLI does not name the rkv-cli binary")

    def run(*args):
        return subprocess.run([binary, "-s", server.uri, *args], capture_output=True,
                              check=True, timeout=60).stdout
    return run


@pytest.fixture
def door(server):
    # default_noreply=False: a set returns once the door said STORED
    m = pymemcache.Client(("127.0.0.1", server.tcp_port), connect_timeout=10, timeout=10,
                          default_noreply=False)
    yield m
    m.close()


def test_c_library_writes_python_and_door_read(client, cli, door, key):
    cli("put", key, "from-c", "--flags", "9")
    assert client.get(key) == b"from-c"
    assert client.get_item(key).flags == 9
    assert door.get(key) == b"from-c"


def test_door_writes_python_and_c_library_read(client, cli, door, key):
    door.set(key, b"from-door", flags=5)
    assert client.get(key) == b"from-door"
    assert client.get_item(key).flags == 5
    assert cli("get", key) == b"from-door\n"


def test_python_writes_c_library_and_door_read(client, cli, door, key):
    client.put(key, b"from-python")
    client.put(key + "n", b"41")
    assert cli("get", key) == b"from-python\n"
    assert door.get(key) == b"from-python"
    assert door.incr(key + "n", 1) == 42
    assert client.get(key + "n") == b"42"
    assert client.incr(key + "n") == 43
    assert cli("get", key + "n") == b"43\n"


def test_python_mput_door_get_many(client, door, key):
    items = {f"{key}{i}": b"%d" % i for i in range(100)}
    client.mput(items)
    assert door.get_many(list(items)) == items


def test_python_deletes_what_the_door_wrote(client, door, key):
    door.set(key, b"x")
    assert client.delete(key) is True
    assert door.get(key) is None


def test_door_value_longer_than_max_value_size(client, door, key):
    # a short key leaves its room to the value: the door may store up to
    # max_value_size + 250 - len(key) bytes, which get() still returns whole
    v = b"d" * (client.max_value_size + 100)
    try:
        door.set(key, v)
    except Exception as e:  # the door's own limit is memcached's
        pytest.skip(f"the door refused it: {e}")
    assert client.get(key) == v
    with pytest.raises(rkv.BufferTooSmall) as e:
        client.get_into(key, bytearray(client.max_value_size))
    assert e.value.needed == len(v)
