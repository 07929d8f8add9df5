/* errors.c — rkv.Error and its subclasses, an rkv_status as one of them,
 * and what an op's status comes to (see rkv_py.h). Each exception carries .status (the rkv_status number)
 * and .status_name, and its message says what was done, librkv's words
 * and, when there is one, librkv's detailed message (rkv_last_error). */
#include <string.h>

#include "rkv_py.h"

/* One class per status worth catching on its own; statuses not listed
 * raise rkv.Error itself. Built by module init from this table, in order, so
 * a row's base is an earlier row. */
struct error_class {
    const char *name; /* rkv.NAME */
    int base;         /* index of its rkv base in error_classes, -1 = rkv.Error */
    const char *builtin;
    const char *doc;
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
    [E_FORKED] = { "ClientForked", E_CLOSED, NULL,
                   "The Client was opened by another process, the parent of a fork(): its "
                   "connections are the parent's, so in this process it is closed. Open a new "
                   "Client here." },
};

PyObject *error_objs[E_COUNT];

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
PyObject *error_make(int cls, rkv_status st, PyObject *msg)
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
PyObject *error_new(rkv_status st, const char *what, const char *detail)
{
    const char *words = rkv_strerror(st);
    PyObject *msg;
    if (detail != NULL && detail[0] != '\0' && strcmp(detail, words) != 0)
        msg = PyUnicode_FromFormat("%s: %s (%s)", what, words, detail);
    else
        msg = PyUnicode_FromFormat("%s: %s", what, words);
    return error_make(status_class(st), st, msg);
}

/* What an op's status comes to, for a synchronous call and a pipelined op
 * alike (see rkv_py.h). */
PyObject *op_result(rkv_kind kind, rkv_status st, const char *value, size_t len, uint64_t num,
                    const char *what, const char *detail, bool *failed)
{
    *failed = false;
    if (st == RKV_OK && kind == RKV_KIND_GET)
        return PyBytes_FromStringAndSize(value, (Py_ssize_t)len);
    if (st == RKV_OK && kind == RKV_KIND_DELETE)
        Py_RETURN_TRUE;
    if (st == RKV_OK)
        return PyLong_FromUnsignedLongLong(num);
    if (st == RKV_NOT_FOUND && kind == RKV_KIND_GET)
        Py_RETURN_NONE;
    if (st == RKV_NOT_FOUND && kind == RKV_KIND_DELETE)
        Py_RETURN_FALSE;
    *failed = true;
    return error_new(st, what, detail);
}

PyObject *raise_exc(PyObject *exc)
{
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return NULL;
}

/* Raise the exception for `st`; returns NULL for the caller to return. */
PyObject *raise_status(rkv_status st, const char *what, const char *detail)
{
    return raise_exc(error_new(st, what, detail));
}

/* rkv.Error and its subclasses, from error_classes. */
int add_errors(PyObject *m)
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
