/* args.c — keys, values and integer arguments: checked, and held for the
 * length of a call or of a pipelined op (see rkv_py.h); the argument lists
 * the Client and the Pipeline share. */
#include "rkv_py.h"

void held_release(struct held *h)
{
    if (h->has_view)
        PyBuffer_Release(&h->view);
    h->has_view = false;
    Py_CLEAR(h->obj);
}

/* A value: any C-contiguous bytes-like object. */
int hold_value(PyObject *o, struct held *h)
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
int hold_key(PyObject *o, struct held *h)
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
int arg_u64(PyObject *o, uint64_t max, const char *name, uint64_t *out)
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

/* One of a str option's names, as its enum value. */
int arg_choice(PyObject *o, const char *name, const char *const *names, int *out)
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

/* At most one optional unsigned argument of a METH_FASTCALL call, within
 * [0, max] (absent: 0); `usage` ("stats(shard=0)") for the message. */
int arg_optional_u64(PyObject *const *args, Py_ssize_t nargs, const char *usage, const char *name,
                     uint64_t max, uint64_t *out)
{
    *out = 0;
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "%s takes at most 1 argument (%zd given)", usage, nargs);
        return -1;
    }
    return nargs == 1 ? arg_u64(args[0], max, name, out) : 0;
}

/* incr/decr(key, delta=1): the key held and the signed delta. */
int step_args(PyObject *const *args, Py_ssize_t nargs, int sign, struct held *k, int64_t *delta)
{
    const char *name = sign > 0 ? "incr" : "decr";
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "%s(key, delta=1) takes 1 or 2 arguments (%zd given)", name,
                     nargs);
        return -1;
    }
    uint64_t d = 1;
    if ((nargs == 2 && arg_u64(args[1], INT64_MAX, "delta", &d) < 0) || hold_key(args[0], k) < 0)
        return -1;
    *delta = sign * (int64_t)d;
    return 0;
}

/* put/set/add/replace(key, value, *, ttl=0, flags=0) and cas(key, value,
 * version, *, ttl=0, flags=0): the options for `mode`, key and value held. */
int write_args(PyObject *args, PyObject *kwds, rkv_put_mode mode, struct rkv_put_options *o,
               struct held *k, struct held *v)
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
        return -1;
    if (mode == RKV_CAS && (version == Py_None || arg_u64(version, UINT64_MAX, "version", &cas) < 0)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "cas: version must be an int (get_item(key).version)");
        return -1;
    }
    *o = (struct rkv_put_options){
        .mode = mode, .ttl = (uint32_t)t, .cas = cas, .user_flags = (uint32_t)f
    };
    if (hold_key(key, k) < 0)
        return -1;
    if (hold_value(value, v) < 0) {
        held_release(k);
        return -1;
    }
    return 0;
}
