"""test_fork.py — a Client across os.fork(): in the child an inherited
Client is closed (rkv.ClientForked, whatever state its lock was in at the
fork) and a Client of the child's own works; the parent's Client, pipeline
and all, goes on as if nothing happened.

Each child runs its checks and leaves with os._exit(status): 0 when every
check held, else the number of the first that failed. An alarm is the
safety net that turns a child stuck on a lock into a failure (SIGALRM)
rather than a hung test; nothing waits on time otherwise."""
import gc
import os
import signal

import pytest

import rkv

CHILD_ALARM_S = 60  # a safety net against a deadlock, not a latency claim


def run_child(checks):
    """Run checks() in a forked child; return its wait status. checks
    returns 0 (all held) or the number of the check that failed."""
    pid = os.fork()
    if pid == 0:
        status = 99
        try:
            signal.alarm(CHILD_ALARM_S)
            status = checks()
        except BaseException as e:  # anything unexpected: a failed child
            os.write(2, f"child: {e!r}\n".encode())
        finally:
            os._exit(status)
    _, wstatus = os.waitpid(pid, 0)
    return wstatus


def assert_child_ok(wstatus):
    assert os.WIFEXITED(wstatus), f"child killed by signal {os.WTERMSIG(wstatus)}"
    assert os.WEXITSTATUS(wstatus) == 0, f"child check {os.WEXITSTATUS(wstatus)} failed"


def inherited_client_checks(c, uri, key):
    """What a child finds: the inherited Client closed, its own working."""
    def checks():
        if not c.closed:
            return 1
        try:
            c.get(key + "shared")
            return 2
        except rkv.ClientForked as e:
            if not isinstance(e, rkv.ClientClosed) or "fork" not in str(e):
                return 3
        try:
            c.put(key + "shared", b"from the child")
            return 4
        except rkv.ClientForked:
            pass
        if "closed" not in repr(c):
            return 5
        c.close()  # leaves the parent's connection alone, raises nothing
        with rkv.Client(uri) as own:
            if own.get(key + "shared") != b"from the parent":
                return 6
            own.put(key + "child", b"from the child")
        return 0
    return checks


def test_child_sees_the_inherited_client_closed(server, client, key):
    client.put(key + "shared", b"from the parent")
    assert_child_ok(run_child(inherited_client_checks(client, server.uri, key)))
    assert not client.closed
    assert client.get(key + "child") == b"from the child"
    assert client.get(key + "shared") == b"from the parent"
    client.ping()


def test_child_dropping_the_client_leaves_the_parents(server, key):
    held = [rkv.Client(server.uri)]  # the child's copy of the list is its only reference
    held[0].put(key + "k", b"v")

    def checks():
        with pytest.raises(rkv.ClientForked):
            held[0].get(key + "k")
        held.clear()  # the child's Client object ends here
        gc.collect()
        return 0
    assert_child_ok(run_child(checks))
    c = held[0]
    for i in range(100):
        c.put(key + "k", b"%d" % i)
        assert c.get(key + "k") == b"%d" % i
    c.close()


def test_pipeline_across_fork(server, client, key):
    with client.pipeline(window=8) as p:
        for i in range(8):
            p.put(key + "%d" % i, b"v%d" % i)

        def checks():
            try:
                p.get(key + "0")
                return 1
            except rkv.ClientForked:
                pass
            try:
                p.execute()
                return 2
            except rkv.ClientForked:
                pass
            p.close()  # the parent's ops are not the child's to wait for
            with rkv.Client(server.uri) as own:
                with own.pipeline(window=4) as q:
                    q.get(key + "child")
                if q.results != [None]:
                    return 3
            return 0
        assert_child_ok(run_child(checks))
        for i in range(8):
            p.get(key + "%d" % i)
    assert p.results[8:] == [b"v%d" % i for i in range(8)]


class ForkInRepr(str):
    """A key whose repr forks: mput formats a failed op's key with repr()
    while it holds the Client's lock, so the child starts with that lock
    taken by a thread it does not have."""

    def __new__(cls, text, on_repr):
        s = super().__new__(cls, text)
        s.on_repr = on_repr
        return s

    def __repr__(self):
        self.on_repr()
        return str.__repr__(self)


def test_lock_held_at_fork_does_not_block_the_child(server, client, key):
    statuses = []

    def checks():
        if not client.closed:
            return 1
        try:
            client.get(key + "x")  # must not wait for the lock
            return 2
        except rkv.ClientForked:
            pass
        client.close()
        with rkv.Client(server.uri) as own:
            own.put(key + "child", b"1")
        return 0

    big = b"x" * (client.max_value_size + 1)
    k = ForkInRepr(key + "big", lambda: statuses.append(run_child(checks)))
    with pytest.raises(rkv.ValueTooLarge):
        client.mput({k: big})
    assert len(statuses) == 1
    assert_child_ok(statuses[0])
    assert client.get(key + "child") == b"1"


def test_client_opened_in_the_child_is_the_childs(server, key):
    def checks():
        with rkv.Client(server.uri) as own:
            own.put(key + "mine", b"1")
            if own.closed or own.get(key + "mine") != b"1":
                return 1
        return 0
    assert_child_ok(run_child(checks))
