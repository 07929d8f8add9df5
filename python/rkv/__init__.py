"""rkv — the Python binding of librkv, rkv's client library.

    import rkv
    with rkv.Client("shm:///run/rkv/rkv.sock") as c:
        c.put("greeting", b"hello", ttl=60)
        c.get("greeting")            # b'hello'; None when absent
        with c.pipeline(window=16) as p:
            for k in ("a", "b", "c"):
                p.get(k)
        p.results                    # [value or None, ...] in order

Keys are str (as UTF-8) or bytes-like, 1..250 bytes; values any bytes-like
object. Failures raise rkv.Error's subclasses (rkv.ConnectionError,
rkv.ValueTooLarge, rkv.KeyTooLong, ...), with librkv's message.

Threads: a Client may be shared by threads; its calls then run one at a time
(librkv's handle is used by one thread at a time). Every call that talks to
a server drops the GIL, so threads with a Client each run in parallel.

Processes: a Client belongs to the process that opened it. In a child of
os.fork() (multiprocessing's "fork" start method too) an inherited Client is
closed: its calls raise rkv.ClientForked, a ClientClosed, and close() leaves
the parent's connections alone. Open a new Client in the child.
"""
from ._rkv import *  # noqa: F401,F403  (the names are listed in __all__)
from ._rkv import __doc__ as _ext_doc  # noqa: F401

__all__ = [
    "Client", "Pipeline", "Item", "TTL_NEVER", "KEY_MAX", "LIBRKV_VERSION",
    "Error", "ConnectionError", "Timeout", "NotFound", "ConditionFailed",
    "Exists", "NotStored", "CasMismatch", "InvalidArgument", "KeyTooLong",
    "ValueTooLarge", "BufferTooSmall", "NotNumber", "OutOfMemory", "ServerBusy",
    "RetryExhausted", "ProtocolError", "VersionMismatch", "AuthError", "NoMemory",
    "InternalError", "ClientClosed", "ClientForked",
]
