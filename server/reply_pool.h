/* reply_pool.h — one worker's registered reply buffers (rdma server).
 *
 * A reply over rdma is a SEND from registered memory (or inline, copied into
 * the work request). Each connection used to register a ring of (credits +
 * 2 x signal_interval) x max_msg for them, 384 KiB at the defaults, idle or
 * not. Now each worker keeps this pool: buffers of max_msg, registered
 * RKV_REPLY_POOL_CHUNK at a time (fewer when the bound is smaller) on
 * demand (the first when the first reply needs one) up to `bound`, and
 * never given back while the listener lives.
 * A connection takes one per request it hands to the worker (poll) and gives
 * it back when the reply's send has completed, or at once when the reply
 * went inline; rdma_server.c bounds what one connection holds (its credits)
 * and says how a connection waits when none is free.
 *
 * The chunks are opaque here: `make` registers one (memory and lkey),
 * `unmake` frees it, so the pool is tested without a device. Only the
 * owning worker's thread uses a pool: no locks.
 */
#ifndef RKV_REPLY_POOL_H
#define RKV_REPLY_POOL_H

#include <stdbool.h>
#include <stdint.h>

#include "rkv.h"

#define RKV_REPLY_POOL_CHUNK 64u /* buffers registered at a time, at most */

/* One registered chunk: `chunk` buffers of `size` bytes at mem. */
struct rkv_reply_chunk {
    uint8_t *mem;
    uint32_t lkey;
    void *handle; /* make()'s, for unmake() */
};

struct rkv_reply_pool {
    /* fill *chunk with `bytes` of registered memory; false when it cannot */
    bool (*make)(void *ctx, uint64_t bytes, struct rkv_reply_chunk *chunk);
    void (*unmake)(void *ctx, struct rkv_reply_chunk *chunk);
    void *ctx;
    uint32_t size;    /* bytes per buffer */
    uint32_t chunk;   /* buffers per chunk: RKV_REPLY_POOL_CHUNK, or the bound if less */
    uint32_t bound;   /* buffers at most: whole chunks */
    uint32_t nchunks; /* registered so far */
    uint32_t nfree;
    uint32_t *free;                 /* bound entries: a stack of free buffer indices */
    struct rkv_reply_chunk *chunks; /* bound / chunk entries */
    uint64_t grow_failures;         /* chunks make() refused (logged once by the caller) */
    uint32_t grown_past;            /* chunks added past the bound asked for */
};

/* A pool of buffers of `size` bytes, at most `bound` (at least 1, rounded up
 * to whole chunks), none registered yet. RKV_OK or RKV_NO_MEMORY. */
rkv_status rkv_reply_pool_init(struct rkv_reply_pool *p, uint32_t size, uint32_t bound,
                               bool (*make)(void *ctx, uint64_t bytes, struct rkv_reply_chunk *chunk),
                               void (*unmake)(void *ctx, struct rkv_reply_chunk *chunk), void *ctx);
/* Free every chunk; no buffer may be out. */
void rkv_reply_pool_destroy(struct rkv_reply_pool *p);

/* A free buffer's index in *idx, registering one more chunk when none is
 * free and the bound allows. false: none free and no chunk to add. */
bool rkv_reply_pool_take(struct rkv_reply_pool *p, uint32_t *idx);
/* One more chunk past the bound (the bound grows with it), for when every
 * buffer out is in a reply only the caller's own thread can post: waiting
 * would never see one come back. false when it cannot be registered. */
bool rkv_reply_pool_grow_past(struct rkv_reply_pool *p);
/* Give buffer idx back. */
static inline void rkv_reply_pool_give(struct rkv_reply_pool *p, uint32_t idx)
{
    p->free[p->nfree++] = idx;
}

static inline uint8_t *rkv_reply_pool_buf(const struct rkv_reply_pool *p, uint32_t idx)
{
    return p->chunks[idx / p->chunk].mem + (uint64_t)(idx % p->chunk) * p->size;
}
static inline uint32_t rkv_reply_pool_lkey(const struct rkv_reply_pool *p, uint32_t idx)
{
    return p->chunks[idx / p->chunk].lkey;
}

/* Buffers registered, and of those out (taken, not given back). */
static inline uint32_t rkv_reply_pool_count(const struct rkv_reply_pool *p)
{
    return p->nchunks * p->chunk;
}
static inline uint32_t rkv_reply_pool_out(const struct rkv_reply_pool *p)
{
    return rkv_reply_pool_count(p) - p->nfree;
}

#endif
