/* rkv_module.c — rkv._rkv, the CPython extension over librkv (include/rkv.h).
 *
 * The Python package `rkv` (python/rkv/__init__.py) re-exports what this
 * module defines: rkv.Client, the Pipeline a client opens, and one exception
 * class per rkv_status worth telling apart (rkv.Error at the root).
 *
 * The thread rule: an rkv_client handle is used by one thread at a time
 * (rkv.h, "Threading"). Each Client holds a lock that every call takes
 * before it touches the handle, and every call that talks to a server drops
 * the GIL while librkv works (Py_BEGIN_ALLOW_THREADS): threads sharing one
 * Client serialise on it, threads with their own Clients run in parallel.
 * A thread that finds the lock taken waits for it without the GIL. Python
 * objects are made only with both held, and the handle's last error message
 * is copied into the exception before the lock is let go.
 *
 * Memory: get() reads into the client's scratch buffer (grown on
 * RKV_BUFFER_TOO_SMALL, kept) and copies the value into the bytes it
 * returns; get_into() reads straight into the caller's buffer through the
 * buffer protocol and allocates nothing. Keys are str (as UTF-8, which
 * CPython caches in the str) or bytes-like; values bytes-like; nothing is
 * copied on the way in.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>

#include "rkv.h"

#define KEY_MAX          250u        /* rkv.h: keys are 1..250 bytes */
#define SCRATCH_START    (64u << 10) /* get()'s buffer to begin with */
#define MGET_CHUNK       64u         /* keys per rkv_mget call */
#define MGET_SLOT        4096u       /* mget/pipeline: bytes per GET before a second read */
#define PIPELINE_DEFAULT 16u

PyMODINIT_FUNC PyInit__rkv(void);

/* ------------------------------------------------------------ exceptions */

/* One class per status worth catching on its own; statuses not listed
 * raise rkv.Error itself. Built by module init from this table, in order, so
 * a row's base is an earlier row. */
struct error_class {
    const char *name; /* rkv.NAME */
    int base;         /* index of its rkv base in error_classes, -1 = rkv.Error */
    const char *builtin;
    const char *doc;
};

enum {
    E_ERROR,
    E_CONNECTION,
    E_TIMEOUT,
    E_NOT_FOUND,
    E_CONDITION,
    E_EXISTS,
    E_NOT_STORED,
    E_CAS_MISMATCH,
    E_INVALID,
    E_KEY_TOO_LONG,
    E_VALUE_TOO_LARGE,
    E_BUFFER_TOO_SMALL,
    E_NOT_NUMBER,
    E_OUT_OF_MEMORY,
    E_SERVER_BUSY,
    E_RETRY_EXHAUSTED,
    E_PROTOCOL,
    E_VERSION_MISMATCH,
    E_AUTH,
    E_NO_MEMORY,
    E_INTERNAL,
    E_CLOSED,
    E_COUNT
};

static const struct error_class error_classes[E_COUNT] = {
    [E_ERROR] = { "Error", -1, NULL,
                  "Root of librkv's errors; .status is the rkv_status number, "
                  ".status_name its snake_case name." },
    [E_CONNECTION] = { "ConnectionError", E_ERROR, "ConnectionError",
                       "Cannot connect, the connection broke, or a reconnect is backing off; "
                       "the next call reconnects." },
    [E_TIMEOUT] = { "Timeout", E_CONNECTION, "TimeoutError",
                    "No reply within the client's timeout_ms; the connection is reset." },
    [E_NOT_FOUND] = { "NotFound", E_ERROR, "KeyError",
                      "No such key (incr/decr; get returns None and delete False instead)." },
    [E_CONDITION] = { "ConditionFailed", E_ERROR, NULL,
                      "A conditional write's condition failed; the old item is unchanged." },
    [E_EXISTS] = { "Exists", E_CONDITION, NULL, "add: the key is already present." },
    [E_NOT_STORED] = { "NotStored", E_CONDITION, NULL, "replace/cas: the key is absent." },
    [E_CAS_MISMATCH] = { "CasMismatch", E_CONDITION, NULL,
                         "cas: the item's version is not the one given." },
    [E_INVALID] = { "InvalidArgument", E_ERROR, "ValueError",
                    "A bad argument (empty key, bad URI or option...)." },
    [E_KEY_TOO_LONG] = { "KeyTooLong", E_INVALID, NULL, "A key longer than 250 bytes." },
    [E_VALUE_TOO_LARGE] = { "ValueTooLarge", E_ERROR, "ValueError",
                            "A value longer than the server accepts (Client.max_value_size); "
                            "a refused set leaves the key with no item." },
    [E_BUFFER_TOO_SMALL] = { "BufferTooSmall", E_ERROR, "ValueError",
                             "get_into: the buffer is shorter than the value; .needed is the "
                             "value's length." },
    [E_NOT_NUMBER] = { "NotNumber", E_ERROR, "ValueError",
                       "incr/decr on a value that is not a decimal u64." },
    [E_OUT_OF_MEMORY] = { "OutOfMemory", E_ERROR, NULL,
                          "The server's memory is full and eviction is off." },
    [E_SERVER_BUSY] = { "ServerBusy", E_ERROR, NULL, "The server refused the request for now." },
    [E_RETRY_EXHAUSTED] = { "RetryExhausted", E_ERROR, NULL,
                            "get: the item kept changing under the read; retry." },
    [E_PROTOCOL] = { "ProtocolError", E_ERROR, NULL, "The peer sent something malformed." },
    [E_VERSION_MISMATCH] = { "VersionMismatch", E_ERROR, NULL,
                             "Client and server speak different protocol versions." },
    [E_AUTH] = { "AuthError", E_ERROR, NULL, "The server refused the shared secret." },
    [E_NO_MEMORY] = { "NoMemory", E_ERROR, "MemoryError", "A local allocation failed." },
    [E_INTERNAL] = { "InternalError", E_ERROR, NULL, "A bug in librkv: please report it." },
    [E_CLOSED] = { "ClientClosed", E_ERROR, "ValueError", "The Client was closed." },
};

static PyObject *error_objs[E_COUNT];

static int status_class(rkv_status st)
{
    switch (st) {
    case RKV_NOT_FOUND: return E_NOT_FOUND;
    case RKV_EXISTS: return E_EXISTS;
    case RKV_NOT_STORED: return E_NOT_STORED;
    case RKV_CAS_MISMATCH: return E_CAS_MISMATCH;
    case RKV_OUT_OF_MEMORY: return E_OUT_OF_MEMORY;
    case RKV_TOO_LARGE: return E_VALUE_TOO_LARGE;
    case RKV_BUFFER_TOO_SMALL: return E_BUFFER_TOO_SMALL;
    case RKV_INVALID: return E_INVALID;
    case RKV_NOT_NUMBER: return E_NOT_NUMBER;
    case RKV_PROTOCOL: return E_PROTOCOL;
    case RKV_VERSION_MISMATCH: return E_VERSION_MISMATCH;
    case RKV_AUTH: return E_AUTH;
    case RKV_CONNECTION: return E_CONNECTION;
    case RKV_TIMEOUT: return E_TIMEOUT;
    case RKV_RETRY_EXHAUSTED: return E_RETRY_EXHAUSTED;
    case RKV_SERVER_BUSY: return E_SERVER_BUSY;
    case RKV_NO_MEMORY: return E_NO_MEMORY;
    case RKV_INTERNAL: return E_INTERNAL;
    default: return E_ERROR;
    }
}

/* An exception instance of class `cls` (not raised) with message `msg`
 * (a reference stolen) and .status, .status_name set from `st`. */
static PyObject *error_make(int cls, rkv_status st, PyObject *msg)
{
    if (msg == NULL)
        return NULL;
    PyObject *exc = PyObject_CallOneArg(error_objs[cls], msg);
    Py_DECREF(msg);
    if (exc == NULL)
        return NULL;
    PyObject *code = PyLong_FromLong((long)st);
    PyObject *name = PyUnicode_FromString(rkv_status_name(st));
    if (code == NULL || name == NULL || PyObject_SetAttrString(exc, "status", code) < 0 ||
        PyObject_SetAttrString(exc, "status_name", name) < 0)
        Py_CLEAR(exc);
    Py_XDECREF(code);
    Py_XDECREF(name);
    return exc;
}

/* The exception instance for `st` (not raised): "what: words (detail)".
 * `detail` (librkv's message) may be NULL or empty. */
static PyObject *error_new(rkv_status st, const char *what, const char *detail)
{
    const char *words = rkv_strerror(st);
    PyObject *msg;
    if (detail != NULL && detail[0] != '\0' && strcmp(detail, words) != 0)
        msg = PyUnicode_FromFormat("%s: %s (%s)", what, words, detail);
    else
        msg = PyUnicode_FromFormat("%s: %s", what, words);
    return error_make(status_class(st), st, msg);
}

static PyObject *raise_exc(PyObject *exc)
{
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* Raise the exception for `st`; returns NULL for the caller to return. */
static PyObject *raise_status(rkv_status st, const char *what, const char *detail)
{
    return raise_exc(error_new(st, what, detail));
}

/* ------------------------------------------------------------ arguments */

/* A key or value held for the length of a call (or of a pipelined op):
 * bytes and str point into the object, anything else through a buffer
 * export, which keeps a bytearray from being resized meanwhile. */
struct held {
    const char *p;
    Py_ssize_t n;
    PyObject *obj; /* a reference while held, else NULL */
    Py_buffer view;
    bool has_view;
};

static void held_release(struct held *h)
{
    if (h->has_view)
        PyBuffer_Release(&h->view);
    h->has_view = false;
    Py_CLEAR(h->obj);
}

/* A value: any C-contiguous bytes-like object. */
static int hold_value(PyObject *o, struct held *h)
{
    h->has_view = false;
    h->obj = NULL;
    if (PyBytes_CheckExact(o)) {
        h->p = PyBytes_AS_STRING(o);
        h->n = PyBytes_GET_SIZE(o);
    } else if (PyUnicode_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "a value must be bytes-like, not str (encode it)");
        return -1;
    } else {
        if (PyObject_GetBuffer(o, &h->view, PyBUF_SIMPLE) < 0) {
            PyErr_Format(PyExc_TypeError,
                         "a value must be a contiguous bytes-like object, not %.100s",
                         Py_TYPE(o)->tp_name);
            return -1;
        }
        h->has_view = true;
        h->p = h->view.buf;
        h->n = h->view.len;
    }
    Py_INCREF(o);
    h->obj = o;
    return 0;
}

/* A key: str (UTF-8) or bytes-like, 1..250 bytes. */
static int hold_key(PyObject *o, struct held *h)
{
    h->has_view = false;
    h->obj = NULL;
    if (PyUnicode_Check(o)) {
        h->p = PyUnicode_AsUTF8AndSize(o, &h->n);
        if (h->p == NULL)
            return -1;
        Py_INCREF(o);
        h->obj = o;
    } else if (PyBytes_Check(o) || PyObject_CheckBuffer(o)) {
        if (hold_value(o, h) < 0) {
            PyErr_Format(PyExc_TypeError, "a key must be str or bytes-like, not %.100s",
                         Py_TYPE(o)->tp_name);
            return -1;
        }
    } else {
        PyErr_Format(PyExc_TypeError, "a key must be str or bytes-like, not %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if (h->n == 0 || (size_t)h->n > KEY_MAX) {
        if (h->n == 0)
            raise_exc(error_make(E_INVALID, RKV_INVALID,
                                 PyUnicode_FromString("key: empty; a key is 1..250 bytes")));
        else
            raise_exc(error_make(E_KEY_TOO_LONG, RKV_TOO_LARGE,
                                 PyUnicode_FromFormat("key: %zd bytes; a key is 1..250 bytes", h->n)));
        held_release(h);
        return -1;
    }
    return 0;
}

/* An unsigned integer argument within [0, max]; `name` for the message. */
static int arg_u64(PyObject *o, uint64_t max, const char *name, uint64_t *out)
{
    if (o == NULL || o == Py_None) {
        *out = 0;
        return 0;
    }
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", name, Py_TYPE(o)->tp_name);
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if ((v == (unsigned long long)-1 && PyErr_Occurred()) || v > max) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s must be in 0..%llu", name, (unsigned long long)max);
        return -1;
    }
    *out = v;
    return 0;
}

/* ------------------------------------------------------------ the Client */

struct pipeline;

typedef struct {
    PyObject ob_base;        /* PyObject_HEAD */
    rkv_client *c;           /* NULL once closed (or before connect) */
    PyThread_type_lock lock; /* held by the thread using c */
    char *scratch;           /* get()'s buffer */
    size_t scratch_len;
    char *slots;             /* MGET_CHUNK x MGET_SLOT bytes for mget, made on first use */
    struct pipeline *active; /* the open Pipeline, if any (it holds a reference to us) */
    PyObject *uri;
} Client;

static PyTypeObject client_type;

/* Take the client's lock (waiting without the GIL) and check it is open.
 * Returns 0 with the lock held, or -1 with an exception set. */
static int client_lock(Client *self)
{
    if (self->lock == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rkv.Client: not initialised");
        return -1;
    }
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS;
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS;
    }
    if (self->c == NULL) {
        PyThread_release_lock(self->lock);
        raise_exc(error_make(E_CLOSED, RKV_INVALID,
                             PyUnicode_FromString("rkv.Client: the client is closed")));
        return -1;
    }
    return 0;
}

static void client_unlock(Client *self)
{
    PyThread_release_lock(self->lock);
}

/* Make get()'s buffer at least `need` bytes (lock held). */
static int scratch_grow(Client *self, size_t need)
{
    size_t len = self->scratch_len ? self->scratch_len : SCRATCH_START;
    while (len < need)
        len *= 2;
    char *p = PyMem_RawRealloc(self->scratch, len);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->scratch = p;
    self->scratch_len = len;
    return 0;
}

/* One GET into the scratch buffer, growing it as the value needs (lock
 * held, GIL dropped around each read). On RKV_OK *n is the value's length. */
static rkv_status scratch_get(Client *self, const struct held *k, size_t *n,
                              struct rkv_item_info *info)
{
    rkv_status st;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS;
        st = rkv_get(self->c, k->p, (size_t)k->n, self->scratch, self->scratch_len, n, info);
        Py_END_ALLOW_THREADS;
        if (st != RKV_BUFFER_TOO_SMALL)
            return st;
        if (scratch_grow(self, *n) < 0)
            return RKV_NO_MEMORY;
    }
}

static PyObject *client_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    Client *self = (Client *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->lock = PyThread_allocate_lock();
    if (self->lock == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

/* One of a str option's names, as its enum value. */
static int arg_choice(PyObject *o, const char *name, const char *const *names, int *out)
{
    *out = 0;
    if (o == NULL || o == Py_None)
        return 0;
    if (PyUnicode_Check(o)) {
        const char *s = PyUnicode_AsUTF8(o);
        if (s == NULL)
            return -1;
        for (int i = 0; names[i] != NULL; i++) {
            if (strcmp(s, names[i]) == 0) {
                *out = i;
                return 0;
            }
        }
    }
    PyErr_Format(PyExc_ValueError, "%s must be one of '%s', '%s', '%s'", name, names[0], names[1],
                 names[2]);
    return -1;
}

static int client_init(Client *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = { "uri",
                              "auth_secret",
                              "timeout_ms",
                              "location_cache",
                              "max_get_retries",
                              "reconnect_ms",
                              "rdma_device",
                              "bucket_reads",
                              "placement",
                              "rdma_ack_timeout",
                              "rdma_retry_count",
                              NULL };
    static const char *const bucket_names[] = { "auto", "together", "first", NULL };
    static const char *const placement_names[] = { "default", "jump", "ketama", NULL };
    const char *uri;
    const char *secret = NULL, *device = NULL;
    PyObject *timeout = NULL, *cache = NULL, *retries = NULL, *reconnect = NULL;
    PyObject *bucket = NULL, *placement = NULL, *ack = NULL, *retry_count = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s|$zOOOOzOOOO", kwlist, &uri, &secret, &timeout,
                                     &cache, &retries, &reconnect, &device, &bucket, &placement,
                                     &ack, &retry_count))
        return -1;
    if (self->c != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rkv.Client: already connected");
        return -1;
    }
    uint64_t v[6];
    int br, pl;
    if (arg_u64(timeout, UINT32_MAX, "timeout_ms", &v[0]) < 0 ||
        arg_u64(cache, UINT32_MAX, "location_cache", &v[1]) < 0 ||
        arg_u64(retries, UINT32_MAX, "max_get_retries", &v[2]) < 0 ||
        arg_u64(reconnect, UINT32_MAX, "reconnect_ms", &v[3]) < 0 ||
        arg_u64(ack, UINT32_MAX, "rdma_ack_timeout", &v[4]) < 0 ||
        arg_u64(retry_count, UINT32_MAX, "rdma_retry_count", &v[5]) < 0 ||
        arg_choice(bucket, "bucket_reads", bucket_names, &br) < 0 ||
        arg_choice(placement, "placement", placement_names, &pl) < 0)
        return -1;
    struct rkv_options o = {
        .auth_secret = secret,
        .timeout_ms = (unsigned)v[0],
        .location_cache = (unsigned)v[1],
        .max_get_retries = (unsigned)v[2],
        .reconnect_ms = (unsigned)v[3],
        .rdma_device = device,
        .bucket_reads = (rkv_bucket_reads)br,
        .placement = (rkv_placement)pl,
        .rdma_ack_timeout = (unsigned)v[4],
        .rdma_retry_count = (unsigned)v[5],
    };
    rkv_client *c = NULL;
    rkv_status st;
    Py_BEGIN_ALLOW_THREADS;
    st = rkv_connect(uri, &o, &c);
    Py_END_ALLOW_THREADS;
    if (st != RKV_OK) {
        raise_status(st, "connect", rkv_last_error(NULL));
        return -1;
    }
    if (scratch_grow(self, SCRATCH_START) < 0) {
        rkv_close(c);
        return -1;
    }
    self->c = c;
    Py_XSETREF(self->uri, PyUnicode_FromString(uri));
    return 0;
}

static void pipeline_drain(struct pipeline *p);

/* Close the handle (lock held by nobody else once we have it). */
static void client_shut(Client *self)
{
    if (self->active != NULL)
        pipeline_drain(self->active);
    if (self->c != NULL) {
        rkv_client *c = self->c;
        self->c = NULL;
        Py_BEGIN_ALLOW_THREADS;
        rkv_close(c);
        Py_END_ALLOW_THREADS;
    }
}

static PyObject *client_close(Client *self, PyObject *unused)
{
    (void)unused;
    if (self->lock == NULL)
        Py_RETURN_NONE;
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS;
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS;
    }
    client_shut(self);
    client_unlock(self);
    Py_RETURN_NONE;
}

static void client_dealloc(Client *self)
{
    if (self->c != NULL)
        rkv_close(self->c);
    if (self->lock != NULL)
        PyThread_free_lock(self->lock);
    PyMem_RawFree(self->scratch);
    PyMem_RawFree(self->slots);
    Py_XDECREF(self->uri);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *client_enter(Client *self, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(self);
}

static PyObject *client_exit(Client *self, PyObject *args)
{
    (void)args;
    return client_close(self, NULL);
}

static PyObject *client_get(Client *self, PyObject *key)
{
    struct held k;
    if (hold_key(key, &k) < 0)
        return NULL;
    PyObject *r = NULL;
    if (client_lock(self) == 0) {
        size_t n = 0;
        rkv_status st = scratch_get(self, &k, &n, NULL);
        if (st == RKV_OK)
            r = PyBytes_FromStringAndSize(self->scratch, (Py_ssize_t)n);
        else if (st == RKV_NOT_FOUND)
            r = Py_NewRef(Py_None);
        else if (!PyErr_Occurred())
            raise_status(st, "get", rkv_last_error(self->c));
        client_unlock(self);
    }
    held_release(&k);
    return r;
}

static PyTypeObject *item_type;

static PyObject *client_get_item(Client *self, PyObject *key)
{
    struct held k;
    if (hold_key(key, &k) < 0)
        return NULL;
    PyObject *r = NULL;
    if (client_lock(self) == 0) {
        size_t n = 0;
        struct rkv_item_info info;
        rkv_status st = scratch_get(self, &k, &n, &info);
        if (st == RKV_OK) {
            r = PyStructSequence_New(item_type);
            if (r != NULL) {
                PyObject *f[4] = {
                    PyBytes_FromStringAndSize(self->scratch, (Py_ssize_t)n),
                    PyLong_FromUnsignedLong(info.user_flags),
                    PyLong_FromUnsignedLongLong(info.version),
                    PyLong_FromUnsignedLong(info.ttl_left),
                };
                for (int i = 0; i < 4; i++)
                    PyStructSequence_SET_ITEM(r, i, f[i]);
                if (f[0] == NULL || f[1] == NULL || f[2] == NULL || f[3] == NULL)
                    Py_CLEAR(r);
            }
        } else if (st == RKV_NOT_FOUND) {
            r = Py_NewRef(Py_None);
        } else if (!PyErr_Occurred()) {
            raise_status(st, "get_item", rkv_last_error(self->c));
        }
        client_unlock(self);
    }
    held_release(&k);
    return r;
}

static PyObject *client_get_into(Client *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "get_into(key, buffer) takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    struct held k;
    if (hold_key(args[0], &k) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_WRITABLE) < 0) {
        held_release(&k);
        PyErr_Format(PyExc_TypeError,
                     "get_into: the buffer must be a writable contiguous buffer "
                     "(bytearray, memoryview, array), not %.100s",
                     Py_TYPE(args[1])->tp_name);
        return NULL;
    }
    PyObject *r = NULL;
    if (client_lock(self) == 0) {
        size_t n = 0;
        rkv_status st;
        Py_BEGIN_ALLOW_THREADS;
        st = rkv_get(self->c, k.p, (size_t)k.n, view.buf, (size_t)view.len, &n, NULL);
        Py_END_ALLOW_THREADS;
        if (st == RKV_OK) {
            r = PyLong_FromSize_t(n);
        } else if (st == RKV_NOT_FOUND) {
            r = Py_NewRef(Py_None);
        } else if (st == RKV_BUFFER_TOO_SMALL) {
            PyObject *exc =
                error_make(E_BUFFER_TOO_SMALL, st,
                           PyUnicode_FromFormat("get_into: the value is %zu bytes, the buffer %zd",
                                                n, view.len));
            PyObject *need = PyLong_FromSize_t(n);
            if (exc != NULL && need != NULL)
                PyObject_SetAttrString(exc, "needed", need);
            Py_XDECREF(need);
            raise_exc(exc);
        } else {
            raise_status(st, "get_into", rkv_last_error(self->c));
        }
        client_unlock(self);
    }
    PyBuffer_Release(&view);
    held_release(&k);
    return r;
}

/* put/set/add/replace/cas: one body, the mode and the name apart. */
static PyObject *client_write(Client *self, PyObject *args, PyObject *kwds, rkv_put_mode mode,
                              const char *name)
{
    static char *kw_put[] = { "key", "value", "ttl", "flags", NULL };
    static char *kw_cas[] = { "key", "value", "version", "ttl", "flags", NULL };
    PyObject *key, *value, *version = NULL, *ttl = NULL, *flags = NULL;
    int ok = mode == RKV_CAS ? PyArg_ParseTupleAndKeywords(args, kwds, "OOO|$OO", kw_cas, &key,
                                                           &value, &version, &ttl, &flags)
                             : PyArg_ParseTupleAndKeywords(args, kwds, "OO|$OO", kw_put, &key,
                                                           &value, &ttl, &flags);
    if (!ok)
        return NULL;
    uint64_t t, f, cas = 0;
    if (arg_u64(ttl, UINT32_MAX, "ttl", &t) < 0 || arg_u64(flags, UINT32_MAX, "flags", &f) < 0)
        return NULL;
    if (mode == RKV_CAS && (version == Py_None || arg_u64(version, UINT64_MAX, "version", &cas) < 0)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "cas: version must be an int (get_item(key).version)");
        return NULL;
    }
    struct rkv_put_options o = {
        .mode = mode, .ttl = (uint32_t)t, .cas = cas, .user_flags = (uint32_t)f
    };
    struct held k, v;
    if (hold_key(key, &k) < 0)
        return NULL;
    if (hold_value(value, &v) < 0) {
        held_release(&k);
        return NULL;
    }
    PyObject *r = NULL;
    if (client_lock(self) == 0) {
        uint64_t newv = 0;
        rkv_status st;
        Py_BEGIN_ALLOW_THREADS;
        st = rkv_put(self->c, k.p, (size_t)k.n, v.p, (size_t)v.n, &o, &newv);
        Py_END_ALLOW_THREADS;
        if (st == RKV_OK)
            r = PyLong_FromUnsignedLongLong(newv);
        else
            raise_status(st, name, rkv_last_error(self->c));
        client_unlock(self);
    }
    held_release(&v);
    held_release(&k);
    return r;
}

static PyObject *client_put(Client *self, PyObject *args, PyObject *kwds)
{
    return client_write(self, args, kwds, RKV_SET, "put");
}

static PyObject *client_add(Client *self, PyObject *args, PyObject *kwds)
{
    return client_write(self, args, kwds, RKV_ADD, "add");
}

static PyObject *client_replace(Client *self, PyObject *args, PyObject *kwds)
{
    return client_write(self, args, kwds, RKV_REPLACE, "replace");
}

static PyObject *client_cas(Client *self, PyObject *args, PyObject *kwds)
{
    return client_write(self, args, kwds, RKV_CAS, "cas");
}

static PyObject *client_delete(Client *self, PyObject *key)
{
    struct held k;
    if (hold_key(key, &k) < 0)
        return NULL;
    PyObject *r = NULL;
    if (client_lock(self) == 0) {
        rkv_status st;
        Py_BEGIN_ALLOW_THREADS;
        st = rkv_delete(self->c, k.p, (size_t)k.n);
        Py_END_ALLOW_THREADS;
        if (st == RKV_OK || st == RKV_NOT_FOUND)
            r = PyBool_FromLong(st == RKV_OK);
        else
            raise_status(st, "delete", rkv_last_error(self->c));
        client_unlock(self);
    }
    held_release(&k);
    return r;
}

/* incr and decr: rkv_incr with delta or -delta. */
static PyObject *client_step(Client *self, PyObject *const *args, Py_ssize_t nargs, int sign,
                             const char *name)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "%s(key, delta=1) takes 1 or 2 arguments (%zd given)", name,
                     nargs);
        return NULL;
    }
    uint64_t d = 1;
    if (nargs == 2 && arg_u64(args[1], INT64_MAX, "delta", &d) < 0)
        return NULL;
    struct held k;
    if (hold_key(args[0], &k) < 0)
        return NULL;
    PyObject *r = NULL;
    if (client_lock(self) == 0) {
        uint64_t result = 0;
        rkv_status st;
        Py_BEGIN_ALLOW_THREADS;
        st = rkv_incr(self->c, k.p, (size_t)k.n, sign * (int64_t)d, &result);
        Py_END_ALLOW_THREADS;
        if (st == RKV_OK)
            r = PyLong_FromUnsignedLongLong(result);
        else
            raise_status(st, name, rkv_last_error(self->c));
        client_unlock(self);
    }
    held_release(&k);
    return r;
}

static PyObject *client_incr(Client *self, PyObject *const *args, Py_ssize_t nargs)
{
    return client_step(self, args, nargs, 1, "incr");
}

static PyObject *client_decr(Client *self, PyObject *const *args, Py_ssize_t nargs)
{
    return client_step(self, args, nargs, -1, "decr");
}

/* mget's slot buffers: MGET_CHUNK x MGET_SLOT bytes, made once (lock held). */
static int slots_ready(Client *self)
{
    if (self->slots == NULL) {
        self->slots = PyMem_RawMalloc((size_t)MGET_CHUNK * MGET_SLOT);
        if (self->slots == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    return 0;
}

/* One chunk of mget: keys[0..n-1] held in k; values[i] gets a new
 * reference (bytes), or NULL for a miss. Lock held. Returns 0, or -1 with
 * an exception set. */
static int mget_chunk(Client *self, struct held *k, Py_ssize_t n, PyObject **values)
{
    struct rkv_get_op ops[MGET_CHUNK];
    if (slots_ready(self) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < n; i++)
        ops[i] = (struct rkv_get_op){ .key = k[i].p,
                                      .key_len = (size_t)k[i].n,
                                      .buf = self->slots + (size_t)i * MGET_SLOT,
                                      .buf_len = MGET_SLOT };
    rkv_status st;
    Py_BEGIN_ALLOW_THREADS;
    st = rkv_mget(self->c, ops, (size_t)n);
    Py_END_ALLOW_THREADS;
    (void)st; /* each op carries its own status, connection errors included */
    for (Py_ssize_t i = 0; i < n; i++) {
        rkv_status s = ops[i].status;
        size_t len = ops[i].value_len;
        const char *src = (const char *)ops[i].buf;
        if (s == RKV_BUFFER_TOO_SMALL) { /* longer than a slot: read it alone */
            s = scratch_get(self, &k[i], &len, NULL);
            src = self->scratch;
        }
        if (s == RKV_OK) {
            values[i] = PyBytes_FromStringAndSize(src, (Py_ssize_t)len);
            if (values[i] == NULL)
                return -1;
        } else if (s != RKV_NOT_FOUND) {
            if (!PyErr_Occurred())
                raise_status(s, "mget", rkv_last_error(self->c));
            return -1;
        }
    }
    return 0;
}

static PyObject *client_mget(Client *self, PyObject *keys)
{
    PyObject *seq = PySequence_Fast(keys, "mget: keys must be an iterable of keys");
    if (seq == NULL)
        return NULL;
    PyObject *out = PyDict_New();
    Py_ssize_t total = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t base = 0; out != NULL && base < total; base += MGET_CHUNK) {
        Py_ssize_t n = total - base < MGET_CHUNK ? total - base : MGET_CHUNK;
        struct held k[MGET_CHUNK];
        PyObject *values[MGET_CHUNK] = { NULL };
        Py_ssize_t held = 0;
        int rc = -1;
        while (held < n && hold_key(PySequence_Fast_GET_ITEM(seq, base + held), &k[held]) == 0)
            held++;
        if (held == n && client_lock(self) == 0) {
            rc = mget_chunk(self, k, n, values);
            client_unlock(self);
        }
        /* the dict is filled with the lock let go: a key's __hash__ may be Python code */
        for (Py_ssize_t i = 0; i < n; i++) {
            if (rc == 0 && values[i] != NULL &&
                PyDict_SetItem(out, PySequence_Fast_GET_ITEM(seq, base + i), values[i]) < 0)
                rc = -1;
            Py_XDECREF(values[i]);
        }
        for (Py_ssize_t i = 0; i < held; i++)
            held_release(&k[i]);
        if (rc < 0)
            Py_CLEAR(out);
    }
    Py_DECREF(seq);
    return out;
}

/* One chunk of mput (lock held); the first failure, if none yet, goes to
 * *first as an exception instance naming its key. */
static void mput_chunk(Client *self, PyObject *pairs, Py_ssize_t base, struct held *k, struct held *v,
                       Py_ssize_t n, const struct rkv_put_options *o, PyObject **first)
{
    struct rkv_put_op ops[MGET_CHUNK];
    for (Py_ssize_t i = 0; i < n; i++)
        ops[i] = (struct rkv_put_op){ .key = k[i].p,
                                      .key_len = (size_t)k[i].n,
                                      .value = v[i].p,
                                      .value_len = (size_t)v[i].n,
                                      .opts = o };
    rkv_status st;
    Py_BEGIN_ALLOW_THREADS;
    st = rkv_mput(self->c, ops, (size_t)n);
    Py_END_ALLOW_THREADS;
    (void)st;
    for (Py_ssize_t i = 0; i < n && *first == NULL; i++) {
        if (ops[i].status == RKV_OK)
            continue;
        PyObject *key = PyTuple_GET_ITEM(PySequence_Fast_GET_ITEM(pairs, base + i), 0);
        PyObject *what = PyUnicode_FromFormat("mput %R", key);
        const char *w = what ? PyUnicode_AsUTF8(what) : NULL;
        *first = error_new(ops[i].status, w ? w : "mput", NULL);
        Py_XDECREF(what);
        if (*first == NULL)
            PyErr_Clear();
    }
}

/* mput's argument as a sequence of (key, value) tuples. */
static PyObject *mput_pairs(PyObject *items)
{
    PyObject *list = PyMapping_Check(items) && PyObject_HasAttrString(items, "items")
                         ? PyMapping_Items(items)
                         : PySequence_List(items);
    if (list == NULL)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PyList_GET_ITEM(list, i);
        if (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) != 2) {
            PyObject *t = PySequence_Tuple(p);
            if (t == NULL || PyTuple_GET_SIZE(t) != 2) {
                Py_XDECREF(t);
                Py_DECREF(list);
                PyErr_SetString(PyExc_TypeError,
                                "mput: items must be a mapping or an iterable of (key, value) pairs");
                return NULL;
            }
            PyList_SET_ITEM(list, i, t);
            Py_DECREF(p);
        }
    }
    return list;
}

static PyObject *client_mput(Client *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = { "items", "ttl", "flags", NULL };
    PyObject *items, *ttl = NULL, *flags = NULL;
    uint64_t t, f;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|$OO", kwlist, &items, &ttl, &flags) ||
        arg_u64(ttl, UINT32_MAX, "ttl", &t) < 0 || arg_u64(flags, UINT32_MAX, "flags", &f) < 0)
        return NULL;
    struct rkv_put_options o = { .mode = RKV_SET, .ttl = (uint32_t)t, .user_flags = (uint32_t)f };
    PyObject *pairs = mput_pairs(items);
    if (pairs == NULL)
        return NULL;
    PyObject *first = NULL;
    int rc = 0;
    Py_ssize_t total = PyList_GET_SIZE(pairs);
    for (Py_ssize_t base = 0; rc == 0 && base < total; base += MGET_CHUNK) {
        Py_ssize_t n = total - base < MGET_CHUNK ? total - base : MGET_CHUNK;
        struct held k[MGET_CHUNK], v[MGET_CHUNK];
        Py_ssize_t held = 0;
        rc = -1;
        while (held < n) {
            PyObject *p = PyList_GET_ITEM(pairs, base + held);
            if (hold_key(PyTuple_GET_ITEM(p, 0), &k[held]) < 0)
                break;
            if (hold_value(PyTuple_GET_ITEM(p, 1), &v[held]) < 0) {
                held_release(&k[held]);
                break;
            }
            held++;
        }
        if (held == n && client_lock(self) == 0) {
            mput_chunk(self, pairs, base, k, v, n, &o, &first);
            client_unlock(self);
            rc = 0;
        }
        for (Py_ssize_t i = 0; i < held; i++) {
            held_release(&k[i]);
            held_release(&v[i]);
        }
    }
    Py_DECREF(pairs);
    if (rc < 0) {
        Py_XDECREF(first);
        return NULL;
    }
    if (first != NULL)
        return raise_exc(first);
    Py_RETURN_NONE;
}

/* One "name value" line of rkv_stats into d: an int when the value is one. */
static int stats_line(PyObject *d, const char *line, size_t len)
{
    const char *sp = memchr(line, ' ', len);
    if (sp == NULL || sp == line)
        return 0;
    PyObject *name = PyUnicode_DecodeUTF8(line, sp - line, "replace");
    PyObject *text = PyUnicode_DecodeUTF8(sp + 1, (Py_ssize_t)(len - (size_t)(sp + 1 - line)),
                                          "replace");
    PyObject *value = NULL;
    if (text != NULL) {
        value = PyLong_FromUnicodeObject(text, 10);
        if (value == NULL) {
            PyErr_Clear();
            value = Py_NewRef(text);
        }
    }
    int rc = name && value ? PyDict_SetItem(d, name, value) : -1;
    Py_XDECREF(name);
    Py_XDECREF(text);
    Py_XDECREF(value);
    return rc;
}

static PyObject *client_stats(Client *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t shard = 0;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "stats(shard=0) takes at most 1 argument");
        return NULL;
    }
    if (nargs == 1 && arg_u64(args[0], UINT32_MAX, "shard", &shard) < 0)
        return NULL;
    if (client_lock(self) < 0)
        return NULL;
    size_t len = 0;
    rkv_status st;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS;
        st = rkv_stats(self->c, (unsigned)shard, self->scratch, self->scratch_len, &len);
        Py_END_ALLOW_THREADS;
        if (st != RKV_BUFFER_TOO_SMALL || scratch_grow(self, len + 1) < 0)
            break;
    }
    PyObject *d = NULL;
    if (st == RKV_OK && (d = PyDict_New()) != NULL) {
        const char *p = self->scratch, *end = self->scratch + len;
        while (p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
            if (n > 0 && p[n - 1] == '\r')
                n--;
            if (stats_line(d, p, n) < 0) {
                Py_CLEAR(d);
                break;
            }
            p = nl ? nl + 1 : end;
        }
    } else if (st != RKV_OK && !PyErr_Occurred()) {
        raise_status(st, "stats", rkv_last_error(self->c));
    }
    client_unlock(self);
    return d;
}

static PyObject *client_counters(Client *self, PyObject *unused)
{
    (void)unused;
    if (client_lock(self) < 0)
        return NULL;
    struct rkv_counters k;
    rkv_get_counters(self->c, &k);
    client_unlock(self);
    return Py_BuildValue("{sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsK}", "gets", (unsigned long long)k.gets,
                         "get_hits", (unsigned long long)k.get_hits, "get_misses",
                         (unsigned long long)k.get_misses, "puts", (unsigned long long)k.puts,
                         "deletes", (unsigned long long)k.deletes, "other_rpcs",
                         (unsigned long long)k.other_rpcs, "reads", (unsigned long long)k.reads,
                         "read_round_trips", (unsigned long long)k.read_round_trips, "doorbells",
                         (unsigned long long)k.doorbells, "sends", (unsigned long long)k.sends,
                         "inline_sends", (unsigned long long)k.inline_sends, "verify_retries",
                         (unsigned long long)k.verify_retries, "cache_hits",
                         (unsigned long long)k.cache_hits, "reconnects",
                         (unsigned long long)k.reconnects, "forwards", (unsigned long long)k.forwards,
                         "cache_stale", (unsigned long long)k.cache_stale);
}

static PyObject *client_reset_counters(Client *self, PyObject *unused)
{
    (void)unused;
    if (client_lock(self) < 0)
        return NULL;
    rkv_reset_counters(self->c);
    client_unlock(self);
    Py_RETURN_NONE;
}

static PyObject *client_ping(Client *self, PyObject *unused)
{
    (void)unused;
    if (client_lock(self) < 0)
        return NULL;
    rkv_status st;
    Py_BEGIN_ALLOW_THREADS;
    st = rkv_ping(self->c);
    Py_END_ALLOW_THREADS;
    if (st != RKV_OK)
        raise_status(st, "ping", rkv_last_error(self->c));
    client_unlock(self);
    if (st != RKV_OK)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *client_flush(Client *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t delay = 0;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "flush(delay=0) takes at most 1 argument");
        return NULL;
    }
    if (nargs == 1 && arg_u64(args[0], UINT32_MAX, "delay", &delay) < 0)
        return NULL;
    if (client_lock(self) < 0)
        return NULL;
    rkv_status st;
    Py_BEGIN_ALLOW_THREADS;
    st = rkv_flush(self->c, (uint32_t)delay);
    Py_END_ALLOW_THREADS;
    if (st != RKV_OK)
        raise_status(st, "flush", rkv_last_error(self->c));
    client_unlock(self);
    if (st != RKV_OK)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *client_shard_of(Client *self, PyObject *key)
{
    struct held k;
    if (hold_key(key, &k) < 0)
        return NULL;
    PyObject *r = NULL;
    if (client_lock(self) == 0) {
        r = PyLong_FromUnsignedLong(rkv_shard_of(self->c, k.p, (size_t)k.n));
        client_unlock(self);
    }
    held_release(&k);
    return r;
}

static PyObject *client_get_shard_count(Client *self, void *unused)
{
    (void)unused;
    if (client_lock(self) < 0)
        return NULL;
    unsigned n = rkv_shard_count(self->c);
    client_unlock(self);
    return PyLong_FromUnsignedLong(n);
}

/* ------------------------------------------------------------ the Pipeline
 *
 * Client.pipeline(window) over rkv_submit/rkv_poll/rkv_wait: each op is
 * submitted at once (it leaves at the next poll, with the others queued
 * by then: one doorbell per burst) into one of `window` slots; a slot holds
 * the op's key and value (and a GET's buffer) until its completion is
 * taken. When every slot is out, completions are taken first: by rkv_poll
 * with the GIL (it never blocks; over shm it runs the GETs), else rkv_wait
 * without it. Each completion's result goes to its op's place in the
 * results, so they come out in submission order whatever order the ops
 * completed in. A Client has at most one Pipeline open. */

struct pipe_slot {
    struct held key, value;
    struct rkv_put_options opts; /* copied by rkv_submit, kept for clarity */
    Py_ssize_t index;            /* the op's place in results */
};

struct pipeline {
    PyObject ob_base; /* PyObject_HEAD */
    Client *client;   /* a reference; NULL once closed */
    unsigned window;
    size_t buf_size;         /* bytes per GET slot buffer */
    struct pipe_slot *slots; /* window of them */
    char *bufs;              /* window x buf_size */
    unsigned *free;          /* free slot numbers: a stack */
    unsigned nfree;
    struct rkv_completion *done; /* window of them */
    PyObject *results;           /* list: None until an op completes */
};
typedef struct pipeline Pipeline;

static PyTypeObject pipeline_type;

/* A completed op's result (a new reference, or NULL with an exception set
 * only when even that could not be made). Lock held. */
static PyObject *pipe_result(Pipeline *p, const struct rkv_completion *d, struct pipe_slot *s)
{
    Client *c = p->client;
    rkv_status st = d->status;
    switch (d->kind) {
    case RKV_KIND_GET: {
        const char *src = p->bufs + d->token * p->buf_size;
        size_t len = d->value_len;
        if (st == RKV_BUFFER_TOO_SMALL) { /* longer than a slot: read it alone */
            st = scratch_get(c, &s->key, &len, NULL);
            src = c->scratch;
            if (st == RKV_NO_MEMORY && PyErr_Occurred())
                return NULL;
        }
        if (st == RKV_OK)
            return PyBytes_FromStringAndSize(src, (Py_ssize_t)len);
        if (st == RKV_NOT_FOUND)
            return Py_NewRef(Py_None);
        return error_new(st, "pipeline get", NULL);
    }
    case RKV_KIND_PUT:
        if (st == RKV_OK)
            return PyLong_FromUnsignedLongLong(d->value);
        return error_new(st, "pipeline put", NULL);
    case RKV_KIND_DELETE:
        if (st == RKV_OK || st == RKV_NOT_FOUND)
            return PyBool_FromLong(st == RKV_OK);
        return error_new(st, "pipeline delete", NULL);
    default:
        if (st == RKV_OK)
            return PyLong_FromUnsignedLongLong(d->value);
        return error_new(st, "pipeline incr", NULL);
    }
}

/* Put a result in its place and give the slot back. */
static int pipe_settle(Pipeline *p, unsigned slot, PyObject *result)
{
    struct pipe_slot *s = &p->slots[slot];
    held_release(&s->key);
    held_release(&s->value);
    p->free[p->nfree++] = slot;
    if (result == NULL)
        return -1;
    PyList_SetItem(p->results, s->index, result); /* steals; drops the None */
    return 0;
}

/* Take completions: without blocking when `block` is false, else wait
 * (without the GIL) until at least one came. Lock held. Returns the count
 * taken, or -1 with an exception set (every slot taken is settled). */
static int pipe_take(Pipeline *p, bool block)
{
    rkv_client *h = p->client->c;
    unsigned n = 0;
    rkv_poll(h, p->done, p->window, &n);
    while (n == 0 && block && rkv_outstanding(h) > 0) {
        Py_BEGIN_ALLOW_THREADS;
        rkv_wait(h, p->done, p->window, &n, 1000);
        Py_END_ALLOW_THREADS;
    }
    int rc = (int)n;
    for (unsigned i = 0; i < n; i++) {
        unsigned slot = (unsigned)p->done[i].token;
        if (pipe_settle(p, slot, pipe_result(p, &p->done[i], &p->slots[slot])) < 0)
            rc = -1;
    }
    return rc;
}

/* Settle every op out (lock held). */
static int pipe_finish(Pipeline *p)
{
    int rc = 0;
    while (p->nfree < p->window) {
        int n = pipe_take(p, true);
        if (n < 0) {
            rc = -1;
        } else if (n == 0 && rkv_outstanding(p->client->c) == 0) {
            /* librkv owes us nothing more: a bug, not a hang */
            raise_status(RKV_INTERNAL, "pipeline", "ops unaccounted for");
            return -1;
        }
    }
    return rc;
}

static void pipeline_drain(struct pipeline *p)
{
    if (pipe_finish(p) < 0)
        PyErr_Clear();
}

/* Detach from the client (lock held): nothing outstanding by then. */
static void pipe_detach(Pipeline *p)
{
    if (p->client != NULL && p->client->active == p)
        p->client->active = NULL;
}

/* Queue one op: its key and value already held in k and v (taken over). */
static PyObject *pipe_submit(Pipeline *p, struct rkv_op *op, struct held *k, struct held *v,
                             const struct rkv_put_options *o)
{
    Client *c = p->client;
    if (c == NULL) {
        held_release(k);
        held_release(v);
        return raise_exc(error_make(E_CLOSED, RKV_INVALID,
                                    PyUnicode_FromString("rkv.Pipeline: the pipeline is closed")));
    }
    Py_INCREF(c); /* another thread may close the pipeline while we wait for the lock */
    if (client_lock(c) < 0) {
        held_release(k);
        held_release(v);
        Py_DECREF(c);
        return NULL;
    }
    PyObject *r = NULL;
    if (p->client != c)
        raise_exc(error_make(E_CLOSED, RKV_INVALID,
                             PyUnicode_FromString("rkv.Pipeline: the pipeline is closed")));
    else if (p->nfree == 0 && pipe_take(p, false) == 0)
        pipe_take(p, true);
    if (!PyErr_Occurred() && p->nfree > 0) {
        unsigned slot = p->free[--p->nfree];
        struct pipe_slot *s = &p->slots[slot];
        s->key = *k;
        s->value = *v;
        s->index = PyList_GET_SIZE(p->results);
        if (o != NULL)
            s->opts = *o;
        op->token = slot;
        op->key = s->key.p;
        op->key_len = (size_t)s->key.n;
        op->buf = p->bufs + (size_t)slot * p->buf_size;
        op->buf_len = op->kind == RKV_KIND_GET ? p->buf_size : 0;
        op->value = s->value.p;
        op->value_len = (size_t)s->value.n;
        op->opts = o != NULL ? &s->opts : NULL;
        if (PyList_Append(p->results, Py_None) == 0) {
            rkv_status st = rkv_submit(c->c, op);
            if (st == RKV_OK) {
                r = Py_NewRef(Py_None);
            } else { /* refused: its result is the refusal */
                PyObject *e = error_new(st, "pipeline", rkv_last_error(c->c));
                r = pipe_settle(p, slot, e) == 0 ? Py_NewRef(Py_None) : NULL;
            }
        } else {
            pipe_settle(p, slot, NULL);
        }
    } else {
        if (!PyErr_Occurred()) /* every slot out, yet librkv owes us nothing */
            raise_status(RKV_INTERNAL, "pipeline", "ops unaccounted for");
        held_release(k);
        held_release(v);
    }
    client_unlock(c);
    Py_DECREF(c);
    return r;
}

static PyObject *pipe_get(Pipeline *p, PyObject *key)
{
    struct held k, v = { 0 };
    if (hold_key(key, &k) < 0)
        return NULL;
    struct rkv_op op = { .kind = RKV_KIND_GET };
    return pipe_submit(p, &op, &k, &v, NULL);
}

static PyObject *pipe_delete(Pipeline *p, PyObject *key)
{
    struct held k, v = { 0 };
    if (hold_key(key, &k) < 0)
        return NULL;
    struct rkv_op op = { .kind = RKV_KIND_DELETE };
    return pipe_submit(p, &op, &k, &v, NULL);
}

static PyObject *pipe_step(Pipeline *p, PyObject *const *args, Py_ssize_t nargs, int sign)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "%s(key, delta=1) takes 1 or 2 arguments (%zd given)",
                     sign > 0 ? "incr" : "decr", nargs);
        return NULL;
    }
    uint64_t d = 1;
    if (nargs == 2 && arg_u64(args[1], INT64_MAX, "delta", &d) < 0)
        return NULL;
    struct held k, v = { 0 };
    if (hold_key(args[0], &k) < 0)
        return NULL;
    struct rkv_op op = { .kind = RKV_KIND_INCR, .delta = sign * (int64_t)d };
    return pipe_submit(p, &op, &k, &v, NULL);
}

static PyObject *pipe_incr(Pipeline *p, PyObject *const *args, Py_ssize_t nargs)
{
    return pipe_step(p, args, nargs, 1);
}

static PyObject *pipe_decr(Pipeline *p, PyObject *const *args, Py_ssize_t nargs)
{
    return pipe_step(p, args, nargs, -1);
}

static PyObject *pipe_write(Pipeline *p, PyObject *args, PyObject *kwds, rkv_put_mode mode)
{
    static char *kw_put[] = { "key", "value", "ttl", "flags", NULL };
    static char *kw_cas[] = { "key", "value", "version", "ttl", "flags", NULL };
    PyObject *key, *value, *version = NULL, *ttl = NULL, *flags = NULL;
    int ok = mode == RKV_CAS ? PyArg_ParseTupleAndKeywords(args, kwds, "OOO|$OO", kw_cas, &key,
                                                           &value, &version, &ttl, &flags)
                             : PyArg_ParseTupleAndKeywords(args, kwds, "OO|$OO", kw_put, &key,
                                                           &value, &ttl, &flags);
    uint64_t t, f, cas = 0;
    if (!ok || arg_u64(ttl, UINT32_MAX, "ttl", &t) < 0 || arg_u64(flags, UINT32_MAX, "flags", &f) < 0)
        return NULL;
    if (mode == RKV_CAS && (version == Py_None || arg_u64(version, UINT64_MAX, "version", &cas) < 0)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "cas: version must be an int");
        return NULL;
    }
    struct rkv_put_options o = {
        .mode = mode, .ttl = (uint32_t)t, .cas = cas, .user_flags = (uint32_t)f
    };
    struct held k, v;
    if (hold_key(key, &k) < 0)
        return NULL;
    if (hold_value(value, &v) < 0) {
        held_release(&k);
        return NULL;
    }
    struct rkv_op op = { .kind = RKV_KIND_PUT };
    return pipe_submit(p, &op, &k, &v, &o);
}

static PyObject *pipe_put(Pipeline *p, PyObject *args, PyObject *kwds)
{
    return pipe_write(p, args, kwds, RKV_SET);
}

static PyObject *pipe_add(Pipeline *p, PyObject *args, PyObject *kwds)
{
    return pipe_write(p, args, kwds, RKV_ADD);
}

static PyObject *pipe_replace(Pipeline *p, PyObject *args, PyObject *kwds)
{
    return pipe_write(p, args, kwds, RKV_REPLACE);
}

static PyObject *pipe_cas(Pipeline *p, PyObject *args, PyObject *kwds)
{
    return pipe_write(p, args, kwds, RKV_CAS);
}

/* Wait for every op and hand the results over (a fresh list starts). */
static PyObject *pipe_collect(Pipeline *p)
{
    Client *c = p->client;
    if (c != NULL) {
        Py_INCREF(c);
        int rc = client_lock(c);
        if (rc == 0) {
            rc = p->client == c ? pipe_finish(p) : 0; /* closed meanwhile: settled */
            client_unlock(c);
        }
        Py_DECREF(c);
        if (rc < 0)
            return NULL;
    }
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL)
        return NULL;
    PyObject *out = p->results;
    p->results = fresh;
    return out;
}

/* The first exception among results, raised; 0 when none. */
static int pipe_raise_first(PyObject *results)
{
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(results); i++) {
        PyObject *r = PyList_GET_ITEM(results, i);
        if (PyExceptionInstance_Check(r)) {
            PyErr_SetObject((PyObject *)Py_TYPE(r), r);
            return -1;
        }
    }
    return 0;
}

static PyObject *pipe_execute(Pipeline *p, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = { "raise_on_error", NULL };
    int raise_on_error = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$p", kwlist, &raise_on_error))
        return NULL;
    PyObject *out = pipe_collect(p);
    if (out != NULL && raise_on_error && pipe_raise_first(out) < 0)
        Py_CLEAR(out);
    return out;
}

/* Settle what is out, keep no results, let the client open another. */
static void pipe_close_quietly(Pipeline *p)
{
    Client *c = p->client;
    if (c == NULL)
        return;
    Py_INCREF(c);
    if (client_lock(c) == 0) {
        if (p->client == c) {
            pipeline_drain(p);
            pipe_detach(p);
        }
        client_unlock(c);
    } else {
        PyErr_Clear();
        pipe_detach(p); /* closed: client_shut drained it */
    }
    if (p->client == c) { /* not closed by another thread meanwhile */
        p->client = NULL;
        Py_DECREF(c);
    }
    Py_DECREF(c);
}

static PyObject *pipe_close(Pipeline *p, PyObject *unused)
{
    (void)unused;
    pipe_close_quietly(p);
    Py_RETURN_NONE;
}

static PyObject *pipe_enter(Pipeline *p, PyObject *unused)
{
    (void)unused;
    return Py_NewRef(p);
}

/* Leaving the block: without an exception, every op is waited for and
 * the results kept in .results (the first failed op's exception raised);
 * with one, the ops are settled and their results dropped. */
static PyObject *pipe_exit(Pipeline *p, PyObject *args)
{
    PyObject *type = PyTuple_Size(args) > 0 ? PyTuple_GET_ITEM(args, 0) : Py_None;
    PyObject *out = NULL;
    if (type == Py_None) {
        out = pipe_collect(p);
        if (out != NULL)
            Py_SETREF(p->results, out); /* .results stays the block's list */
    }
    pipe_close_quietly(p);
    if (type == Py_None && (out == NULL || pipe_raise_first(p->results) < 0))
        return NULL;
    Py_RETURN_FALSE;
}

static PyObject *pipe_get_results(Pipeline *p, void *unused)
{
    (void)unused;
    return PyList_GetSlice(p->results, 0, PyList_GET_SIZE(p->results));
}

static PyObject *pipe_get_pending(Pipeline *p, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLong(p->client == NULL ? 0 : p->window - p->nfree);
}

static void pipe_dealloc(Pipeline *p)
{
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    pipe_close_quietly(p);
    PyErr_Restore(et, ev, tb);
    PyMem_RawFree(p->slots);
    PyMem_RawFree(p->bufs);
    PyMem_RawFree(p->free);
    PyMem_RawFree(p->done);
    Py_XDECREF(p->results);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static PyObject *client_pipeline(Client *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = { "window", "buffer_size", NULL };
    PyObject *w = NULL, *b = NULL;
    uint64_t window, buf_size;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO", kwlist, &w, &b) ||
        arg_u64(w, RKV_MAX_WINDOW, "window", &window) < 0 ||
        arg_u64(b, 1u << 30, "buffer_size", &buf_size) < 0)
        return NULL;
    if (w == NULL || w == Py_None)
        window = PIPELINE_DEFAULT;
    if (b == NULL || b == Py_None)
        buf_size = MGET_SLOT;
    if (window == 0) {
        PyErr_Format(PyExc_ValueError, "window must be in 1..%u", RKV_MAX_WINDOW);
        return NULL;
    }
    Pipeline *p = PyObject_New(Pipeline, &pipeline_type);
    if (p == NULL)
        return NULL;
    p->client = NULL;
    p->window = (unsigned)window;
    p->buf_size = (size_t)buf_size;
    p->slots = PyMem_RawCalloc(window, sizeof *p->slots);
    p->bufs = PyMem_RawMalloc(window * buf_size + 1);
    p->free = PyMem_RawMalloc(window * sizeof *p->free);
    p->done = PyMem_RawMalloc(window * sizeof *p->done);
    p->results = PyList_New(0);
    p->nfree = p->window;
    if (p->slots == NULL || p->bufs == NULL || p->free == NULL || p->done == NULL) {
        Py_DECREF(p);
        return PyErr_NoMemory();
    }
    if (p->results == NULL) {
        Py_DECREF(p);
        return NULL;
    }
    for (unsigned i = 0; i < p->window; i++)
        p->free[i] = p->window - 1 - i;
    if (client_lock(self) < 0) {
        Py_DECREF(p);
        return NULL;
    }
    rkv_status st = RKV_OK;
    if (self->active == NULL)
        st = rkv_set_window(self->c, p->window);
    if (self->active != NULL) {
        PyErr_SetString(error_objs[E_ERROR], "pipeline: this Client has a Pipeline open; a "
                                             "Client runs one at a time (close it first)");
    } else if (st != RKV_OK) {
        raise_status(st, "pipeline", rkv_last_error(self->c));
    } else {
        self->active = p;
        p->client = (Client *)Py_NewRef(self);
    }
    client_unlock(self);
    if (p->client == NULL) {
        Py_DECREF(p);
        return NULL;
    }
    return (PyObject *)p;
}

static PyMethodDef pipeline_methods[] = {
    { "get", (PyCFunction)pipe_get, METH_O, "get(key): queue a GET; its result is bytes | None." },
    { "put", (PyCFunction)(void (*)(void))pipe_put, METH_VARARGS | METH_KEYWORDS,
      "put(key, value, *, ttl=0, flags=0): queue a SET; its result is the new version." },
    { "set", (PyCFunction)(void (*)(void))pipe_put, METH_VARARGS | METH_KEYWORDS, "put()." },
    { "add", (PyCFunction)(void (*)(void))pipe_add, METH_VARARGS | METH_KEYWORDS,
      "add(key, value, *, ttl=0, flags=0): queue an ADD." },
    { "replace", (PyCFunction)(void (*)(void))pipe_replace, METH_VARARGS | METH_KEYWORDS,
      "replace(key, value, *, ttl=0, flags=0): queue a REPLACE." },
    { "cas", (PyCFunction)(void (*)(void))pipe_cas, METH_VARARGS | METH_KEYWORDS,
      "cas(key, value, version, *, ttl=0, flags=0): queue a CAS." },
    { "delete", (PyCFunction)pipe_delete, METH_O,
      "delete(key): queue a DELETE; its result is a bool." },
    { "incr", (PyCFunction)(void (*)(void))pipe_incr, METH_FASTCALL,
      "incr(key, delta=1): queue an INCR; its result is the new number." },
    { "decr", (PyCFunction)(void (*)(void))pipe_decr, METH_FASTCALL,
      "decr(key, delta=1): queue a DECR (saturating at 0)." },
    { "execute", (PyCFunction)(void (*)(void))pipe_execute, METH_VARARGS | METH_KEYWORDS,
      "execute(*, raise_on_error=True) -> list\n\nWait for every op queued since the last "
      "execute and return their results in submission order; a failed op's result is its "
      "exception instance, and with raise_on_error the first of them is raised." },
    { "close", (PyCFunction)pipe_close, METH_NOARGS,
      "close()\n\nWait for the ops out, drop their results, and let the Client open another "
      "pipeline." },
    { "__enter__", (PyCFunction)pipe_enter, METH_NOARGS, NULL },
    { "__exit__", (PyCFunction)pipe_exit, METH_VARARGS, NULL },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef pipeline_getset[] = {
    { "results", (getter)pipe_get_results, NULL,
      "The results so far (after the with block: all of them, in submission order).", NULL },
    { "pending", (getter)pipe_get_pending, NULL, "Ops submitted whose completion is not taken.",
      NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject pipeline_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rkv.Pipeline",
    .tp_basicsize = sizeof(Pipeline),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Client.pipeline(window=16, buffer_size=4096): ops submitted without waiting, "
              "at most `window` in flight, results in submission order.\n\n"
              "    with c.pipeline(window=16) as p:\n"
              "        for k in keys:\n"
              "            p.get(k)\n"
              "    values = p.results\n\n"
              "A GET whose value is longer than buffer_size is read a second time, alone. "
              "A Client has one Pipeline open at a time; its synchronous calls may be used "
              "beside it.",
    .tp_dealloc = (destructor)pipe_dealloc,
    .tp_methods = pipeline_methods,
    .tp_getset = pipeline_getset,
};

static PyObject *client_get_closed(Client *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(self->c == NULL);
}

static PyObject *client_get_uri(Client *self, void *unused)
{
    (void)unused;
    return Py_NewRef(self->uri ? self->uri : Py_None);
}

static PyObject *client_get_max_value_size(Client *self, void *unused)
{
    (void)unused;
    if (client_lock(self) < 0)
        return NULL;
    size_t n = rkv_max_value_size(self->c);
    client_unlock(self);
    return PyLong_FromSize_t(n);
}

static PyObject *client_repr(Client *self)
{
    return PyUnicode_FromFormat("<rkv.Client %R%s>", self->uri ? self->uri : Py_None,
                                self->c == NULL ? " closed" : "");
}

static PyMethodDef client_methods[] = {
    { "get", (PyCFunction)client_get, METH_O,
      "get(key) -> bytes | None\n\nThe key's value, or None when it is absent or expired." },
    { "get_item", (PyCFunction)client_get_item, METH_O,
      "get_item(key) -> Item | None\n\nThe value with its flags, version (for cas) and "
      "ttl_left (0 = never expires), or None." },
    { "get_into", (PyCFunction)(void (*)(void))client_get_into, METH_FASTCALL,
      "get_into(key, buffer) -> int | None\n\nRead the value straight into a writable "
      "contiguous buffer (bytearray, memoryview, numpy array) and return its length, or None "
      "when absent. Allocates nothing. BufferTooSmall (.needed) when it does not fit: the "
      "buffer is then left alone." },
    { "put", (PyCFunction)(void (*)(void))client_put, METH_VARARGS | METH_KEYWORDS,
      "put(key, value, *, ttl=0, flags=0) -> int\n\nStore unconditionally; return the new "
      "version. ttl: seconds, 0 = the server's default, TTL_NEVER = never expires." },
    { "set", (PyCFunction)(void (*)(void))client_put, METH_VARARGS | METH_KEYWORDS,
      "set(key, value, *, ttl=0, flags=0) -> int\n\nput()." },
    { "add", (PyCFunction)(void (*)(void))client_add, METH_VARARGS | METH_KEYWORDS,
      "add(key, value, *, ttl=0, flags=0) -> int\n\nStore only if absent, else raise Exists." },
    { "replace", (PyCFunction)(void (*)(void))client_replace, METH_VARARGS | METH_KEYWORDS,
      "replace(key, value, *, ttl=0, flags=0) -> int\n\nStore only if present, else raise "
      "NotStored." },
    { "cas", (PyCFunction)(void (*)(void))client_cas, METH_VARARGS | METH_KEYWORDS,
      "cas(key, value, version, *, ttl=0, flags=0) -> int\n\nStore only if the item's version "
      "is `version`, else raise CasMismatch (NotStored when absent)." },
    { "delete", (PyCFunction)client_delete, METH_O,
      "delete(key) -> bool\n\nRemove the key; False when it was absent." },
    { "incr", (PyCFunction)(void (*)(void))client_incr, METH_FASTCALL,
      "incr(key, delta=1) -> int\n\nAdd delta to a decimal u64 value and return the result "
      "(wrapping past 2**64-1 to 0, as memcached). NotFound when absent, NotNumber when the value "
      "is not a number." },
    { "decr", (PyCFunction)(void (*)(void))client_decr, METH_FASTCALL,
      "decr(key, delta=1) -> int\n\nSubtract delta, saturating at 0; as incr." },
    { "mget", (PyCFunction)client_mget, METH_O,
      "mget(keys) -> dict\n\nRead many keys in batches of 64 (one doorbell each): a dict of "
      "the keys found (as given) to their values; absent keys are left out." },
    { "mput", (PyCFunction)(void (*)(void))client_mput, METH_VARARGS | METH_KEYWORDS,
      "mput(items, *, ttl=0, flags=0)\n\nStore a mapping (or (key, value) pairs) in batches "
      "of 64. Every item is tried; the first failure is then raised, naming its key." },
    { "pipeline", (PyCFunction)(void (*)(void))client_pipeline, METH_VARARGS | METH_KEYWORDS,
      "pipeline(window=16, buffer_size=4096) -> Pipeline\n\nSubmit ops without waiting for "
      "each (rkv_submit), `window` in flight, results in submission order." },
    { "stats", (PyCFunction)(void (*)(void))client_stats, METH_FASTCALL,
      "stats(shard=0) -> dict\n\nThe server's statistics: name to int (or str)." },
    { "counters", (PyCFunction)client_counters, METH_NOARGS,
      "counters() -> dict\n\nWhat this client did on the wire (struct rkv_counters): gets, "
      "reads (one-sided READs), read_round_trips, doorbells, sends, ..." },
    { "reset_counters", (PyCFunction)client_reset_counters, METH_NOARGS,
      "reset_counters()\n\nZero counters()." },
    { "ping", (PyCFunction)client_ping, METH_NOARGS, "ping()\n\nA round trip to every server." },
    { "flush", (PyCFunction)(void (*)(void))client_flush, METH_FASTCALL,
      "flush(delay=0)\n\nRemove every item on every server, now or in `delay` seconds "
      "(memcached's flush_all)." },
    { "shard_of", (PyCFunction)client_shard_of, METH_O,
      "shard_of(key) -> int\n\nThe index of the server that owns the key." },
    { "close", (PyCFunction)client_close, METH_NOARGS,
      "close()\n\nClose the connections; later calls raise ClientClosed. Idempotent." },
    { "__enter__", (PyCFunction)client_enter, METH_NOARGS, NULL },
    { "__exit__", (PyCFunction)client_exit, METH_VARARGS, NULL },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef client_getset[] = {
    { "closed", (getter)client_get_closed, NULL, "True once close() ran.", NULL },
    { "uri", (getter)client_get_uri, NULL, "The URI(s) connected to.", NULL },
    { "shard_count", (getter)client_get_shard_count, NULL, "The number of servers.", NULL },
    { "max_value_size", (getter)client_get_max_value_size, NULL,
      "The longest value put accepts (the servers' smallest max_value_len).", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

static PyTypeObject client_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rkv.Client",
    .tp_basicsize = sizeof(Client),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Client(uri, *, auth_secret=None, timeout_ms=0, location_cache=0, "
              "max_get_retries=0, reconnect_ms=0, rdma_device=None, bucket_reads=None, "
              "placement=None, rdma_ack_timeout=0, rdma_retry_count=0)\n\n"
              "A connection to one rkv server, or several separated by commas (sharded): "
              "\"shm:///run/rkv/rkv.sock\", \"rdma://HOST:PORT\". Options as struct rkv_options "
              "(0 = librkv's default). A context manager: close() on exit.\n\n"
              "Threads: a Client may be shared; its calls then run one at a time (each takes "
              "the client's lock, and drops the GIL while librkv works). Give each thread its "
              "own Client for parallel calls.",
    .tp_new = client_new,
    .tp_init = (initproc)client_init,
    .tp_dealloc = (destructor)client_dealloc,
    .tp_repr = (reprfunc)client_repr,
    .tp_methods = client_methods,
    .tp_getset = client_getset,
};

/* ------------------------------------------------------------ the module */

static PyStructSequence_Field item_fields[] = {
    { "value", "the value (bytes)" },
    { "flags", "the flags the writer stored" },
    { "version", "the item's version, for cas()" },
    { "ttl_left", "seconds to expiry; 0 = never expires" },
    { NULL, NULL },
};

static PyStructSequence_Desc item_desc = {
    "rkv.Item",
    "What get_item() found: value, flags, version, ttl_left.",
    item_fields,
    4,
};

/* rkv.Error and its subclasses, from error_classes. */
static int add_errors(PyObject *m)
{
    for (int i = 0; i < E_COUNT; i++) {
        const struct error_class *e = &error_classes[i];
        PyObject *base = e->base < 0 ? PyExc_Exception : error_objs[e->base];
        PyObject *bases;
        if (e->builtin != NULL) {
            PyObject *builtins = PyEval_GetBuiltins();
            PyObject *b = builtins ? PyDict_GetItemString(builtins, e->builtin) : NULL;
            if (b == NULL)
                return -1;
            bases = PyTuple_Pack(2, base, b);
        } else {
            bases = PyTuple_Pack(1, base);
        }
        if (bases == NULL)
            return -1;
        char qual[64];
        snprintf(qual, sizeof qual, "rkv.%s", e->name);
        PyObject *dict = PyDict_New();
        int rc = -1;
        if (dict != NULL && PyDict_SetItemString(dict, "status", Py_None) == 0 &&
            PyDict_SetItemString(dict, "status_name", Py_None) == 0) {
            error_objs[i] = PyErr_NewExceptionWithDoc(qual, e->doc, bases, dict);
            if (error_objs[i] != NULL && PyModule_AddObjectRef(m, e->name, error_objs[i]) == 0)
                rc = 0;
        }
        Py_XDECREF(dict);
        Py_DECREF(bases);
        if (rc < 0)
            return -1;
    }
    return 0;
}

static struct PyModuleDef rkv_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "rkv._rkv",
    .m_doc = "librkv's CPython binding; import it as the package rkv.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__rkv(void)
{
    PyObject *m = PyModule_Create(&rkv_module);
    if (m == NULL)
        return NULL;
    if (PyType_Ready(&client_type) < 0 || PyType_Ready(&pipeline_type) < 0 || add_errors(m) < 0)
        goto fail;
    item_type = PyStructSequence_NewType(&item_desc);
    if (item_type == NULL || PyModule_AddObjectRef(m, "Item", (PyObject *)item_type) < 0 ||
        PyModule_AddObjectRef(m, "Client", (PyObject *)&client_type) < 0 ||
        PyModule_AddObjectRef(m, "Pipeline", (PyObject *)&pipeline_type) < 0 ||
        PyModule_AddIntConstant(m, "TTL_NEVER", (long)RKV_TTL_NEVER) < 0 ||
        PyModule_AddIntConstant(m, "KEY_MAX", KEY_MAX) < 0 ||
        PyModule_AddStringConstant(m, "LIBRKV_VERSION", RKV_VERSION_STRING) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
