/* pipeline.c — rkv.Pipeline, what Client.pipeline() opens.
 *
 * Client.pipeline(window) over rkv_submit/rkv_poll/rkv_wait: each op is
 * submitted at once (it leaves at the next poll, with the others queued
 * by then: one doorbell per burst) into one of `window` slots; a slot holds
 * the op's key and value (and a GET's buffer) until its completion is
 * taken. When every slot is out, completions are taken first: by rkv_poll
 * with the GIL (it never blocks; over shm it runs the GETs), else rkv_wait
 * without it. Each completion's result goes to its op's place in the
 * results, so they come out in submission order whatever order the ops
 * completed in. A Client has at most one Pipeline open.
 */
#include "rkv_py.h"

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

/* A completed op's result (a new reference, or NULL with an exception set
 * only when even that could not be made). Lock held. */
static PyObject *pipe_result(Pipeline *p, const struct rkv_completion *d, struct pipe_slot *s)
{
    static const char *const what[] = {
        [RKV_KIND_GET] = "pipeline get",
        [RKV_KIND_PUT] = "pipeline put",
        [RKV_KIND_DELETE] = "pipeline delete",
        [RKV_KIND_INCR] = "pipeline incr",
    };
    Client *c = p->client;
    rkv_status st = d->status;
    const char *src = p->bufs + d->token * p->buf_size;
    size_t len = d->value_len;
    if (d->kind == RKV_KIND_GET && st == RKV_BUFFER_TOO_SMALL) { /* longer than a slot: alone */
        st = scratch_get(c, &s->key, &len, NULL);
        src = c->scratch;
        if (st == RKV_NO_MEMORY && PyErr_Occurred())
            return NULL;
    }
    bool failed;
    return op_result(d->kind, st, src, len, d->value, what[d->kind], NULL, &failed);
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

void pipeline_drain(struct pipeline *p)
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
    struct held k, v = { 0 };
    struct rkv_op op = { .kind = RKV_KIND_INCR };
    if (step_args(args, nargs, sign, &k, &op.delta) < 0)
        return NULL;
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
    struct rkv_put_options o;
    struct held k, v;
    if (write_args(args, kwds, mode, &o, &k, &v) < 0)
        return NULL;
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
    /* settled slots hold nothing; ops still out are a forked child's copy of
     * its parent's, which this process never completes */
    for (unsigned i = 0; p->slots != NULL && i < p->window; i++) {
        held_release(&p->slots[i].key);
        held_release(&p->slots[i].value);
    }
    PyMem_RawFree(p->slots);
    PyMem_RawFree(p->bufs);
    PyMem_RawFree(p->free);
    PyMem_RawFree(p->done);
    Py_XDECREF(p->results);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

PyObject *client_pipeline(Client *self, PyObject *args, PyObject *kwds)
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

PyTypeObject pipeline_type = {
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
