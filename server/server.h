/* server.h — the running server: its region, table, listeners and workers.
 *
 * The main thread owns the listeners (accepting connections), the 1-second
 * tick (clock, expiry, grace periods) and signals. Each worker thread owns a
 * set of connections and serves their requests; a new connection is handed
 * to a worker through that worker's inbox. GETs never reach any of this.
 */
#ifndef RKV_SERVER_H
#define RKV_SERVER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "reply_batch.h"
#include "table.h"
#include "transport.h"
#include "wire.h"

#define RKV_MAX_LISTENERS 8
#define RKV_MAX_WORKERS   64

struct rkv_server;

struct rkv_listen_ep {
    const struct rkv_server_transport *ops;
    const struct rkv_wire *wire; /* what its connections speak (wire.h) */
    struct rkv_listener *l;
    char uri[256];
};

/* Per-worker counters, read by anyone with relaxed loads. All but `conns`
 * are written by their worker only, with rkv_stat_bump(); `conns` is also
 * changed by the main thread at accept, so it takes atomic add/sub. */
struct rkv_worker_stats {
    _Atomic uint64_t requests[RKV_OP_MAX];     /* by opcode (index = enum rkv_opcode) */
    _Atomic uint64_t errors[RKV_STATUS_COUNT]; /* replies by non-OK status */
    _Atomic uint64_t marked_requests;          /* valid requests marked RKV_REQ_MORE (more of their
                                                  client's doorbell batch follows) */
    _Atomic uint64_t replies; /* rkv replies posted (the tcp/memcached door is not counted) */
    _Atomic uint64_t reply_doorbells;    /* reply batches posted: one doorbell each */
    _Atomic uint64_t reply_holds;        /* ... of them held for a request marked RKV_REQ_MORE
                                            to be followed (reply_batch.h) */
    _Atomic uint64_t reply_hold_expired; /* ... of those posted because no request followed
                                            within RKV_REPLY_HOLD_PASSES passes */
    _Atomic uint64_t sleeps;             /* times the worker slept waiting for requests */
    _Atomic uint64_t hints;              /* access hints applied */
    _Atomic uint64_t conns;              /* connections currently owned */
    _Atomic uint64_t parked;             /* ... of them parked: out of the sweep (worker.c) */
    _Atomic uint64_t closed_bad;         /* connections closed for protocol violations */
};

/* Add to a counter only its owning worker writes: a relaxed load and store,
 * not a locked read-modify-write, on the request path. */
static inline void rkv_stat_bump(_Atomic uint64_t *v, uint64_t n)
{
    atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + n, memory_order_relaxed);
}

struct rkv_worker {
    struct rkv_server *srv;
    unsigned id;
    pthread_t thread;
    int cpu; /* pinned CPU, or -1 */
    pthread_mutex_t inbox_lock;
    struct rkv_wconn *inbox_head; /* connections handed over by main, oldest first */
    struct rkv_wconn *inbox_tail; /*   (linked by inbox_next; unbounded: the listeners bound them) */
    unsigned inbox_count;         /* written under inbox_lock, peeked at without it (atomically) */
    int wake_fd;                  /* eventfd: main → worker */
    struct rkv_worker_stats stats;
};

struct rkv_server {
    struct rkv_server_config cfg;
    struct rkv_region region;
    uint64_t room_untaken; /* the region's index room is untaken from here (0: all taken) */
    struct rkv_table *table;
    struct rkv_listen_ep listeners[RKV_MAX_LISTENERS];
    unsigned nlisteners;
    struct rkv_worker workers[RKV_MAX_WORKERS];
    unsigned nworkers;
    atomic_bool stop;
    _Atomic uint64_t conns_total;    /* connections accepted since start */
    _Atomic uint64_t conns_rejected; /* refused with "busy": over a limit, out of fds */
    _Atomic uint64_t unauth_dropped; /* closed before HELLO: hello_timeout_ms or crowded out */
    _Atomic uint64_t conns_authed;   /* connections past HELLO now (<= max_conns) */
    /* max_unauth_conns slots: ticket of a connection not past HELLO, 0 = free (admission.c) */
    _Atomic uint64_t *unauth;
    uint64_t next_ticket; /* last ticket handed out (main thread only) */
    uint64_t start_ns;
};

struct rkv_worker_wake; /* worker.c */

/* One connection as its worker sees it. */
struct rkv_wconn {
    const struct rkv_server_transport *ops;
    const struct rkv_wire *wire; /* what it speaks: its listener's, chosen at accept */
    struct rkv_sconn *conn;
    struct rkv_listen_ep *ep;
    bool authed;                  /* HELLO with the right secret seen */
    bool closing;                 /* close after this batch: wrong secret, other protocol
                                     version, max_conns reached (request.c), a request
                                     before HELLO, a malformed message (PROTOCOL, or not
                                     even a header), a failed reply post (worker.c) */
    uint64_t ticket;              /* admission order (admission.c) */
    unsigned unauth_slot;         /* srv->unauth slot while !authed */
    uint64_t hello_deadline_ns;   /* closed if !authed at this time */
    struct rkv_wconn *inbox_next; /* the next one in its worker's inbox */
    unsigned slot;                /* its index in the worker's connection list */
    uint32_t events; /* event-driven: what the worker's epoll watches its event_fd for */
    bool parked;     /* polled, but armed and left out of the sweep until epoll reports it */
    struct rkv_worker_wake *wake;   /* the wake-up it shares with others (wake_fd), or NULL */
    bool worked;                    /* took a request since the worker's last housekeeping look */
    uint64_t idle_since_ns;         /* when that look last saw it idle after work (parking) */
    struct rkv_reply_batch replies; /* answered, not yet posted (worker.c) */
};

/* admission.c: bounds on connections that have not passed HELLO. */
int rkv_admission_init(struct rkv_server *srv);
void rkv_admission_free(struct rkv_server *srv);
/* Main thread, at accept (the rkv protocol's, wire_rkv.c): take an
 * unauthenticated slot for wc, crowding out the oldest holder when all are
 * taken (returns true then: wake workers). */
bool rkv_admission_admit(struct rkv_server *srv, struct rkv_wconn *wc);
/* Worker: why wc must be closed now (crowded out, HELLO deadline), or NULL. */
const char *rkv_admission_check(struct rkv_server *srv, struct rkv_wconn *wc, uint64_t now_ns);
/* HELLO accepted: false (and counted as rejected) when max_conns
 * connections are already authenticated. */
bool rkv_admission_authenticate(struct rkv_server *srv, struct rkv_wconn *wc);
/* wc is closing: give back what it holds. */
void rkv_admission_leave(struct rkv_server *srv, struct rkv_wconn *wc);

/* worker.c */
int rkv_worker_start(struct rkv_server *srv, struct rkv_worker *w, unsigned id);
/* Hand a connection to a worker (it always takes it: the inbox has no
 * bound of its own, the listeners' max_conns and max_unauth_conns bound it). */
void rkv_worker_give(struct rkv_worker *w, struct rkv_wconn *wc);
void rkv_worker_wake(struct rkv_worker *w);

/* request.c: answer one request message into reply buffer `out` (max_msg
 * bytes). Returns the reply length. */
uint32_t rkv_handle_request(struct rkv_server *srv, struct rkv_worker *w, struct rkv_wconn *wc,
                            const struct rkv_msg *m, void *out);

/* stats.c: "name value\n" lines of everything the server counts; returns the
 * length written (truncated at cap, always NUL-terminated when cap > 0). */
size_t rkv_server_stats_text(struct rkv_server *srv, char *buf, size_t cap);

#endif
