"""test_server_errors.py — the errors a server gives, each raised as its
class: ServerBusy (max_conns), AuthError (a wrong secret), OutOfMemory
(full, eviction off), ConnectionError (the server gone) and the reconnect
after it is back. Each test has a server of its own."""
import time

import pytest

import rkv
from conftest import Server


@pytest.fixture
def own_server(server_binary, tmp_path):
    started = []

    def start(*extra):
        s = Server(server_binary, str(tmp_path), extra)
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop()


def test_server_busy_at_max_conns(own_server):
    s = own_server("--max-conns", "1")
    deadline = time.monotonic() + 60  # a safety net, not a latency claim
    while True:  # the fixture's readiness probe gives its place back in its own time
        try:
            first = rkv.Client(s.uri)
            break
        except rkv.ServerBusy:
            assert time.monotonic() < deadline, "the probe's connection was never let go"
            time.sleep(0.01)
    with first:
        first.put("k", b"v")
        with pytest.raises(rkv.ServerBusy) as e:
            rkv.Client(s.uri)
        assert e.value.status_name == "server_busy" and s.uri in str(e.value)
        assert first.get("k") == b"v"


def test_auth(own_server):
    s = own_server("--auth-secret", "sesame")
    with pytest.raises(rkv.AuthError):
        rkv.Client(s.uri, auth_secret="wrong")
    with rkv.Client(s.uri, auth_secret="sesame") as c:
        c.put("k", b"v")
        assert c.get("k") == b"v"


def test_out_of_memory_with_eviction_off(own_server):
    s = own_server("--evict", "none", "--memory", "16M")
    with rkv.Client(s.uri) as c:
        value = b"x" * 100000
        with pytest.raises(rkv.OutOfMemory) as e:
            for i in range(1000):  # 100 MB into 16 MiB
                c.put(f"fill{i}", value)
        assert e.value.status_name == "out_of_memory"
        assert c.get("fill0") == value  # what was stored stays


def test_server_gone_then_back(own_server):
    s = own_server()
    c = rkv.Client(s.uri, timeout_ms=2000, reconnect_ms=50)
    c.put("k", b"v")
    s.stop()
    for call in (lambda: c.put("k", b"w"), c.ping, lambda: c.delete("k")):
        with pytest.raises(rkv.ConnectionError):
            call()
    s2 = own_server()  # the same socket path, a new (empty) table
    assert s2.uri == s.uri
    deadline = time.monotonic() + 60  # a safety net, not a latency claim
    while True:  # the client reconnects by itself, with backoff
        try:
            c.put("k", b"again")
            break
        except rkv.ConnectionError:
            assert time.monotonic() < deadline, "no reconnect within 60 s"
            time.sleep(0.01)
    assert c.get("k") == b"again"
    c.close()
