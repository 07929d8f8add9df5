"""conftest.py — a real rkv-server for the binding's tests.

One server per test session, started as tests/server_proc.c starts them:
`rkv-server --listen shm://SOCK --listen tcp://127.0.0.1:PORT`, small
memory, two workers; it dies with the test process (PR_SET_PDEATHSIG) and
is stopped with SIGTERM at the end. RKV_SERVER names the binary (meson sets
it); without it, or without the extension, the tests skip.

RKV_PY_RDMA=ADDR (an address of an RDMA device's interface) has every server
listen on rdma://ADDR:PORT instead of shm, and the Clients connect there:
the verbs suite runs the core calls' tests so (tests/verbs/guest.sh).
"""
import ctypes
import os
import signal
import socket
import subprocess
import tempfile
import time

import pytest

rkv = pytest.importorskip("rkv")

PR_SET_PDEATHSIG = 1


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A running rkv-server: .uri (shm), .tcp_port, .proc."""

    def __init__(self, binary, workdir, extra=()):
        self.binary = binary
        self.sock = os.path.join(workdir, "rkv.sock")
        rdma = os.environ.get("RKV_PY_RDMA")
        self.uri = "shm://" + self.sock
        self.proc = None
        for _attempt in range(20):  # another process may take the port first
            self.proc = None
            self.tcp_port = _free_port()
            if rdma:  # rdma_cm's port space is its own: a guess, retried when taken
                self.uri = f"rdma://{rdma}:{_free_port()}"
            self.proc = subprocess.Popen(
                [binary, "--listen", self.uri,
                 "--listen", f"tcp://127.0.0.1:{self.tcp_port}",
                 "--memory", "64M", "--workers", "2", "--log-level", "warn", *extra],
                preexec_fn=_die_with_parent)
            state = self._wait_ready()
            if state == "ready":
                return
            if state == "silent":  # it ran but never answered: no retry
                break
        raise RuntimeError("rkv-server did not start")

    def _wait_ready(self):
        """"ready" once it answers; "exited" when it exited at start (the
        port taken: another try), "silent" when it answered nothing within
        the safety net (stopped)."""
        deadline = time.monotonic() + 30  # a safety net, not a latency claim
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return "exited"
            try:
                rkv.Client(self.uri).close()
            except rkv.AuthError:
                pass  # up: a server with a secret refuses ours
            except rkv.Error:
                time.sleep(0.02)
                continue
            try:  # the tcp door too
                socket.create_connection(("127.0.0.1", self.tcp_port), timeout=5).close()
                return "ready"
            except OSError:
                time.sleep(0.02)
        self.stop()
        return "silent"

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def server_binary():
    binary = os.environ.get("RKV_SERVER")
    if not binary or not os.access(binary, os.X_OK):
        pytest.skip("RKV_SERVER does not name the rkv-server binary")
    return binary


@pytest.fixture(scope="session")
def server(server_binary):
    with tempfile.TemporaryDirectory(prefix="rkv-py-") as d:
        s = Server(server_binary, d)
        yield s
        s.stop()


@pytest.fixture
def client(server):
    with rkv.Client(server.uri) as c:
        yield c


@pytest.fixture
def key(request):
    """A key prefix of this test's own."""
    return "t/" + request.node.name + "/"
