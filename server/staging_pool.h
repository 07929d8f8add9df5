/* staging_pool.h — a bounded pool of large buffers, handed out first come,
 * first served.
 *
 * The rdma server pulls a staged value (rendezvous) into memory outside the
 * table region through a registered buffer. Those buffers (1.06 MiB each)
 * came one per connection, registered for its lifetime; now the listener
 * keeps this pool: buffers are made on demand up to `max`, and a pull that
 * finds none free waits, in FIFO order, until one is given back or its
 * deadline passes.
 *
 * Why it cannot deadlock or starve: a holder keeps its buffer for one
 * transfer (one RDMA READ, bounded by its own timeout, and a memcpy) and
 * takes nothing else meanwhile, so every buffer comes back within that
 * bound. A buffer given back goes straight to the oldest waiter (no later
 * taker can barge in front of it), so a waiter is served after at most the
 * waiters ahead of it: at most (waiters ahead / max + 1) transfer times.
 * With max at the number of workers, a worker (which pulls one value at a
 * time) never waits at all.
 *
 * The buffers are opaque here: `make` and `unmake` build and free one (the
 * rdma server registers it), so the pool is tested without a device.
 * Thread-safe: one mutex, and one condition variable per waiter.
 */
#ifndef RKV_STAGING_POOL_H
#define RKV_STAGING_POOL_H

#include <pthread.h>
#include <stdint.h>

#include "rkv.h"

struct rkv_staging_waiter;

struct rkv_staging_pool {
    pthread_mutex_t lock;
    void *(*make)(void *ctx); /* one new buffer, or NULL */
    void (*unmake)(void *ctx, void *buf);
    void *ctx;
    uint32_t max;  /* buffers at most */
    uint32_t made; /* made (or being made) so far */
    uint32_t nfree;
    void **free;                            /* max entries: a stack of free buffers */
    struct rkv_staging_waiter *head, *tail; /* FIFO of takers waiting */
    uint64_t waits;                         /* takes that had to wait (stats, tests) */
};

/* A pool of at most max (>= 1) buffers, none made yet. RKV_OK or RKV_NO_MEMORY. */
rkv_status rkv_staging_pool_init(struct rkv_staging_pool *p, uint32_t max, void *(*make)(void *ctx),
                                 void (*unmake)(void *ctx, void *buf), void *ctx);
/* Free every buffer; none may be out and nobody waiting. */
void rkv_staging_pool_destroy(struct rkv_staging_pool *p);

/* A buffer: a free one, a new one while fewer than max are made, or the
 * next one given back, waiting up to timeout_ns behind earlier waiters.
 * RKV_OK with *out; RKV_TIMEOUT when none came in time; RKV_NO_MEMORY when
 * make failed. */
rkv_status rkv_staging_take(struct rkv_staging_pool *p, uint64_t timeout_ns, void **out);
/* Give a buffer back: to the oldest waiter, or to the free stack. */
void rkv_staging_give(struct rkv_staging_pool *p, void *buf);

#endif
