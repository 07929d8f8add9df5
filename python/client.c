/* client.c — rkv.Client: one librkv handle and the calls on it.
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
 *
 * Processes: a Client is used by the process that connected it. In a child
 * of fork() it is closed (fork.c): its calls raise rkv.ClientForked without
 * touching the client's lock or librkv's handle, which is the parent's.
 */
#include <string.h>

#include "rkv_py.h"

/* A Client that another process connected (this one is a child of its
 * fork): its handle, and its lock, which a thread of the parent may have held
 * at the fork, are not to be touched here, not even to close it. */
static bool client_inherited(const Client *self)
{
    return self->c != NULL && self->pid != fork_pid();
}

static void raise_forked(const Client *self)
{
    raise_exc(error_make(E_FORKED, RKV_INVALID,
                         PyUnicode_FromFormat("rkv.Client: opened by process %ld, used in process "
                                              "%ld (a child of fork()): its connection is the "
                                              "parent's; open a new Client in this process",
                                              (long)self->pid, (long)fork_pid())));
}

/* Take the client's lock (waiting without the GIL) and check it is open.
 * Returns 0 with the lock held, or -1 with an exception set. */
int client_lock(Client *self)
{
    if (self->lock == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "rkv.Client: not initialised");
        return -1;
    }
    if (client_inherited(self)) {
        raise_forked(self);
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

void client_unlock(Client *self)
{
    PyThread_release_lock(self->lock);
}

/* Make get()'s buffer at least `need` bytes (lock held). */
int scratch_grow(Client *self, size_t need)
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
rkv_status scratch_get(Client *self, const struct held *k, size_t *n, struct rkv_item_info *info)
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

/* rkv_close, kept apart from fork() (fork.c). */
static void handle_close(rkv_client *c)
{
    handle_guard_enter();
    rkv_close(c);
    handle_guard_leave();
}

/* A synchronous call's op_result (lock held): the result, or NULL with its
 * exception raised. */
static PyObject *sync_result(Client *self, rkv_kind kind, rkv_status st, const char *value,
                             size_t len, uint64_t num, const char *what)
{
    if (PyErr_Occurred()) /* scratch_get could not grow the buffer */
        return NULL;
    bool failed;
    PyObject *r = op_result(kind, st, value, len, num, what, rkv_last_error(self->c), &failed);
    return failed ? raise_exc(r) : r;
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
    handle_guard_enter();
    st = rkv_connect(uri, &o, &c);
    handle_guard_leave();
    Py_END_ALLOW_THREADS;
    if (st != RKV_OK) {
        raise_status(st, "connect", rkv_last_error(NULL));
        return -1;
    }
    if (scratch_grow(self, SCRATCH_START) < 0) {
        handle_close(c);
        return -1;
    }
    self->c = c;
    self->pid = fork_pid();
    Py_XSETREF(self->uri, PyUnicode_FromString(uri));
    return 0;
}

/* Close the handle (lock held by nobody else once we have it). */
static void client_shut(Client *self)
{
    if (self->active != NULL)
        pipeline_drain(self->active);
    if (self->c != NULL) {
        rkv_client *c = self->c;
        self->c = NULL;
        Py_BEGIN_ALLOW_THREADS;
        handle_close(c);
        Py_END_ALLOW_THREADS;
    }
}

static PyObject *client_close(Client *self, PyObject *unused)
{
    (void)unused;
    if (self->lock == NULL || client_inherited(self))
        Py_RETURN_NONE; /* inherited: the parent's to close */
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
    if (self->c != NULL && !client_inherited(self))
        handle_close(self->c); /* inherited: left as it is, the parent's */
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
        r = sync_result(self, RKV_KIND_GET, st, self->scratch, n, 0, "get");
        client_unlock(self);
    }
    held_release(&k);
    return r;
}

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
    struct rkv_put_options o;
    struct held k, v;
    if (write_args(args, kwds, mode, &o, &k, &v) < 0)
        return NULL;
    PyObject *r = NULL;
    if (client_lock(self) == 0) {
        uint64_t newv = 0;
        rkv_status st;
        Py_BEGIN_ALLOW_THREADS;
        st = rkv_put(self->c, k.p, (size_t)k.n, v.p, (size_t)v.n, &o, &newv);
        Py_END_ALLOW_THREADS;
        r = sync_result(self, RKV_KIND_PUT, st, NULL, 0, newv, name);
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
        r = sync_result(self, RKV_KIND_DELETE, st, NULL, 0, 0, "delete");
        client_unlock(self);
    }
    held_release(&k);
    return r;
}

/* incr and decr: rkv_incr with delta or -delta. */
static PyObject *client_step(Client *self, PyObject *const *args, Py_ssize_t nargs, int sign,
                             const char *name)
{
    struct held k;
    int64_t delta;
    if (step_args(args, nargs, sign, &k, &delta) < 0)
        return NULL;
    PyObject *r = NULL;
    if (client_lock(self) == 0) {
        uint64_t result = 0;
        rkv_status st;
        Py_BEGIN_ALLOW_THREADS;
        st = rkv_incr(self->c, k.p, (size_t)k.n, delta, &result);
        Py_END_ALLOW_THREADS;
        r = sync_result(self, RKV_KIND_INCR, st, NULL, 0, result, name);
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
    uint64_t shard;
    if (arg_optional_u64(args, nargs, "stats(shard=0)", "shard", UINT32_MAX, &shard) < 0 ||
        client_lock(self) < 0)
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
    return Py_BuildValue("{sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsK}", "gets", (unsigned long long)k.gets,
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
                         "cache_stale", (unsigned long long)k.cache_stale, "read_lanes",
                         (unsigned long long)k.read_lanes, "read_lanes_td",
                         (unsigned long long)k.read_lanes_td);
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

/* A call that gives only its status (lock held, let go here): None, or
 * NULL with the exception raised. */
static PyObject *status_result(Client *self, rkv_status st, const char *what)
{
    if (st != RKV_OK)
        raise_status(st, what, rkv_last_error(self->c));
    client_unlock(self);
    if (st != RKV_OK)
        return NULL;
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
    return status_result(self, st, "ping");
}

static PyObject *client_flush(Client *self, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t delay;
    if (arg_optional_u64(args, nargs, "flush(delay=0)", "delay", UINT32_MAX, &delay) < 0 ||
        client_lock(self) < 0)
        return NULL;
    rkv_status st;
    Py_BEGIN_ALLOW_THREADS;
    st = rkv_flush(self->c, (uint32_t)delay);
    Py_END_ALLOW_THREADS;
    return status_result(self, st, "flush");
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

static PyObject *client_get_closed(Client *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(self->c == NULL || client_inherited(self));
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
    if (client_inherited(self))
        return PyUnicode_FromFormat("<rkv.Client %R closed: opened by process %ld>",
                                    self->uri ? self->uri : Py_None, (long)self->pid);
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
      "when absent. Allocates nothing (numpy's own buffer export makes a small record per "
      "call: pass memoryview(array), made once, for none). BufferTooSmall (.needed) when it "
      "does not fit: the buffer is then left alone." },
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
      "close()\n\nClose the connections; later calls raise ClientClosed. Idempotent. In a "
      "child of fork() it leaves the parent's connections alone." },
    { "__enter__", (PyCFunction)client_enter, METH_NOARGS, NULL },
    { "__exit__", (PyCFunction)client_exit, METH_VARARGS, NULL },
    { NULL, NULL, 0, NULL },
};

static PyGetSetDef client_getset[] = {
    { "closed", (getter)client_get_closed, NULL,
      "True once close() ran, and in a child of fork() (the Client is its parent's).", NULL },
    { "uri", (getter)client_get_uri, NULL, "The URI(s) connected to.", NULL },
    { "shard_count", (getter)client_get_shard_count, NULL, "The number of servers.", NULL },
    { "max_value_size", (getter)client_get_max_value_size, NULL,
      "The longest value put accepts (the servers' smallest max_value_len).", NULL },
    { NULL, NULL, NULL, NULL, NULL },
};

PyTypeObject client_type = {
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
              "own Client for parallel calls.\n\n"
              "Processes: a Client belongs to the process that opened it. In a child of "
              "fork() it is closed: its calls raise ClientForked (a ClientClosed), and "
              "close() and its end leave the parent's connections alone. Open a new Client "
              "in the child.",
    .tp_new = client_new,
    .tp_init = (initproc)client_init,
    .tp_dealloc = (destructor)client_dealloc,
    .tp_repr = (reprfunc)client_repr,
    .tp_methods = client_methods,
    .tp_getset = client_getset,
};
