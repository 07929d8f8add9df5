/* fake_sconn_ops.h — server transport ops that do nothing, for the worker
 * tests' fake transports (test_worker_inbox, test_worker_wake): a reply that
 * is dropped, no reply buffers, no pulls, a peer that is always alive. A
 * test writes only the ops its case is about (poll, arm, close ...). */
#ifndef RKV_TESTS_FAKE_SCONN_OPS_H
#define RKV_TESTS_FAKE_SCONN_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "server.h"

static inline void *fake_reply_buf(struct rkv_sconn *c, unsigned i)
{
    (void)c;
    (void)i;
    return NULL;
}

static inline rkv_status fake_reply(struct rkv_sconn *c, const uint32_t *lens, unsigned n)
{
    (void)c;
    (void)lens;
    (void)n;
    return RKV_OK;
}

static inline rkv_status fake_pull(struct rkv_sconn *c, const struct rkv_remote_buf *rb, void *dst)
{
    (void)c;
    (void)rb;
    (void)dst;
    return RKV_PROTOCOL;
}

static inline bool fake_alive(struct rkv_sconn *c)
{
    (void)c;
    return true;
}

static inline const char *fake_peer(struct rkv_sconn *c)
{
    (void)c;
    return "fake peer";
}

#endif
