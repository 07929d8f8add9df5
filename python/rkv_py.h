/* rkv_py.h — what the files of the rkv._rkv extension share: its limits,
 * the exception classes' numbers, a key or value held for a call, the
 * Client object, and the functions one file gives the others.
 *
 *   rkv_module.c  the module: its types and classes, put together at import
 *   errors.c      rkv.Error and its subclasses; a status as an exception
 *   args.c        keys, values and integer arguments, checked and held
 *   client.c      rkv.Client: librkv's handle, its lock, the calls
 *   pipeline.c    rkv.Pipeline: rkv_submit/rkv_poll behind Client.pipeline()
 *   fork.c        the process id a Client checks, and fork() kept out of
 *                 rkv_connect/rkv_close
 */
#ifndef RKV_PY_H
#define RKV_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "rkv.h"

#define KEY_MAX          250u        /* rkv.h: keys are 1..250 bytes */
#define SCRATCH_START    (64u << 10) /* get()'s buffer to begin with */
#define MGET_CHUNK       64u         /* keys per rkv_mget call */
#define MGET_SLOT        4096u       /* mget/pipeline: bytes per GET before a second read */
#define PIPELINE_DEFAULT 16u

/* ------------------------------------------------------------ errors.c */

/* The exception classes, as indexes of error_objs. */
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
    E_FORKED,
    E_COUNT
};
extern PyObject *error_objs[E_COUNT];

/* An exception instance of class `cls` (not raised) with message `msg`
 * (a reference stolen) and .status, .status_name set from `st`. */
PyObject *error_make(int cls, rkv_status st, PyObject *msg);
/* The exception instance for `st` (not raised): "what: words (detail)".
 * `detail` (librkv's message) may be NULL or empty. */
PyObject *error_new(rkv_status st, const char *what, const char *detail);
/* What an op of `kind` that ended with `st` comes to, in a synchronous call
 * and in a pipeline alike: a GET the bytes of value[0..len), or None when
 * absent; a PUT its new version `num`; a DELETE True, or False when absent;
 * an INCR the number `num`. Any other status: the exception instance (not
 * raised) for `what` with librkv's `detail` (may be NULL), and *failed set.
 * NULL when not even that could be made (an exception is set). */
PyObject *op_result(rkv_kind kind, rkv_status st, const char *value, size_t len, uint64_t num,
                    const char *what, const char *detail, bool *failed);
/* Raise `exc` (a reference stolen; NULL: an exception is already set).
 * Returns NULL for the caller to return. */
PyObject *raise_exc(PyObject *exc);
/* Raise the exception for `st`; returns NULL for the caller to return. */
PyObject *raise_status(rkv_status st, const char *what, const char *detail);
/* rkv.Error and its subclasses into module m. Returns 0, or -1. */
int add_errors(PyObject *m);

/* ------------------------------------------------------------ args.c */

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

/* Hold a value (any C-contiguous bytes-like object) or a key (str as UTF-8,
 * or bytes-like; 1..250 bytes). Return 0, or -1 with an exception set and
 * nothing held. */
int hold_value(PyObject *o, struct held *h);
int hold_key(PyObject *o, struct held *h);
void held_release(struct held *h);
/* An unsigned integer argument within [0, max] (None or absent: 0). */
int arg_u64(PyObject *o, uint64_t max, const char *name, uint64_t *out);
/* One of a str option's names (None or absent: 0), as its index. */
int arg_choice(PyObject *o, const char *name, const char *const *names, int *out);
/* At most one optional unsigned argument of a METH_FASTCALL call (absent:
 * 0); `usage` ("stats(shard=0)") names the call in the message. */
int arg_optional_u64(PyObject *const *args, Py_ssize_t nargs, const char *usage, const char *name,
                     uint64_t max, uint64_t *out);
/* The argument lists the Client and the Pipeline share, checked and held
 * (0), or -1 with an exception set and nothing held:
 *   step_args   incr/decr(key, delta=1), sign +1 or -1: *delta signed;
 *   write_args  put/set/add/replace(key, value, *, ttl=0, flags=0), and
 *               cas(key, value, version, *, ttl=0, flags=0): *o for mode. */
int step_args(PyObject *const *args, Py_ssize_t nargs, int sign, struct held *k, int64_t *delta);
int write_args(PyObject *args, PyObject *kwds, rkv_put_mode mode, struct rkv_put_options *o,
               struct held *k, struct held *v);

/* ------------------------------------------------------------ client.c */

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
    pid_t pid; /* the process that connected c: the only one that may use it */
} Client;

extern PyTypeObject client_type;
/* Take the client's lock (waiting without the GIL) and check it is open.
 * Returns 0 with the lock held, or -1 with an exception set. */
int client_lock(Client *self);
void client_unlock(Client *self);
/* Make get()'s buffer at least `need` bytes (lock held). */
int scratch_grow(Client *self, size_t need);
/* One GET into the scratch buffer, grown as the value needs (lock held,
 * GIL dropped around each read). On RKV_OK *n is the value's length. */
rkv_status scratch_get(Client *self, const struct held *k, size_t *n, struct rkv_item_info *info);

/* ------------------------------------------------------------ pipeline.c */

typedef struct pipeline Pipeline;
extern PyTypeObject pipeline_type;
/* Client.pipeline(window=16, buffer_size=4096). */
PyObject *client_pipeline(Client *self, PyObject *args, PyObject *kwds);
/* Settle every op the pipeline has out, keeping their results (lock held). */
void pipeline_drain(struct pipeline *p);

/* ------------------------------------------------------------ fork.c */

/* Record this process's pid and have every fork() child record its own.
 * Returns 0, or -1 with an exception set. */
int fork_watch(void);
/* This process's pid (no system call: the hot path checks it). */
extern volatile pid_t fork_this_pid;
static inline pid_t fork_pid(void)
{
    return fork_this_pid;
}
/* Around each rkv_connect and rkv_close: fork() waits for the calls inside
 * and keeps new ones out while it runs. */
void handle_guard_enter(void);
void handle_guard_leave(void);

/* ------------------------------------------------------------ rkv_module.c */

extern PyTypeObject *item_type; /* rkv.Item: what get_item() returns */

#endif
