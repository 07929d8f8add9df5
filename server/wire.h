/* wire.h — what a connection speaks: the wire protocol its worker serves.
 *
 * A transport carries messages or bytes (common/transport.h); a wire
 * protocol gives them meaning: how a connection is admitted and how a pass
 * answers what it sent. Each listen URI's scheme selects one
 * (rkv_wire_by_scheme, server/wires.c); every connection accepted there
 * keeps it in rkv_wconn.wire, chosen once, and main.c and worker.c call it
 * through this table without asking which it is:
 *
 *   rkv       server/wire_rkv.c: rkv's messages (common/protocol.h) over a
 *             message transport (shm, rdma): HELLO within a deadline
 *             (admission.c), each request answered by rkv_handle_request
 *             (request.c), replies posted in batches (reply_batch.h)
 *   memcache  server/wire_memcache.c: the memcached text protocol over the
 *             tcp byte stream, answered by rkv_memcache_serve
 *             (memcache_exec.c)
 *
 * A new protocol is one more such table in its own file and its scheme's
 * line in server/wires.c.
 */
#ifndef RKV_WIRE_H
#define RKV_WIRE_H

#include <stdbool.h>

struct rkv_server;
struct rkv_server_config;
struct rkv_worker;
struct rkv_wconn;

/* A wire protocol. Every op is required (never NULL) unless it says
 * "optional"; call optional ops only through their rkv_wire_*() wrapper
 * below. */
struct rkv_wire {
    const char *name; /* what it is, for logs: "rkv protocol" */

    /* Optional. Main thread, at start-up, before the listener for `uri`
     * opens (`addr`: the URI after "scheme://"): 0 when the configuration
     * lets this protocol listen there, else -1 after logging why and what
     * to change. */
    int (*check_listener)(const struct rkv_server_config *cfg, const char *uri, const char *addr);

    /* Optional. Main thread, for each accepted connection, before a worker
     * gets it: start its admission. Returns true when that crowded out an
     * older connection, whose worker must see it: main then wakes them all. */
    bool (*accept)(struct rkv_server *srv, struct rkv_wconn *wc);

    /* Required. The worker that owns wc, for one pass over it (a polled
     * connection: every sweep; an event-driven one: when its epoll reports
     * it): take what arrived, answer it, send the answers. Answers that wait
     * for the next pass stay counted in wc->replies, only when may_hold.
     * Sets wc->closing when the connection must go (the worker closes it
     * after the pass). Returns the requests taken, 0 when nothing arrived.
     * Allocates nothing itself (a byte stream's buffers may grow to their
     * bounds: tcp_server.h). */
    unsigned (*serve)(struct rkv_worker *w, struct rkv_wconn *wc, bool may_hold);
};

extern const struct rkv_wire rkv_wire_rkv;      /* server/wire_rkv.c */
extern const struct rkv_wire rkv_wire_memcache; /* server/wire_memcache.c */

/* The wire protocol a listen URI's scheme selects ("shm", "rdma": rkv;
 * "tcp": memcache), or NULL (server/wires.c). */
const struct rkv_wire *rkv_wire_by_scheme(const char *scheme);

/* The optional check_listener op: 0 where the wire has no objection. */
static inline int rkv_wire_check_listener(const struct rkv_wire *wire,
                                          const struct rkv_server_config *cfg, const char *uri,
                                          const char *addr)
{
    return wire->check_listener != NULL ? wire->check_listener(cfg, uri, addr) : 0;
}

/* The optional accept op: false (wake no one) where the wire has none. */
static inline bool rkv_wire_accept(const struct rkv_wire *wire, struct rkv_server *srv,
                                   struct rkv_wconn *wc)
{
    return wire->accept != NULL && wire->accept(srv, wc);
}

#endif
