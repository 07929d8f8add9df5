/* reply_pool.c — one worker's registered reply buffers: see reply_pool.h. */
#include <stdlib.h>
#include <string.h>

#include "reply_pool.h"
#include "util.h"

rkv_status rkv_reply_pool_init(struct rkv_reply_pool *p, uint32_t size, uint32_t bound,
                               bool (*make)(void *ctx, uint64_t bytes, struct rkv_reply_chunk *chunk),
                               void (*unmake)(void *ctx, struct rkv_reply_chunk *chunk), void *ctx)
{
    memset(p, 0, sizeof *p);
    p->make = make;
    p->unmake = unmake;
    p->ctx = ctx;
    p->size = size;
    p->chunk = RKV_MIN(RKV_MAX(bound, 1u), RKV_REPLY_POOL_CHUNK);
    p->bound = RKV_ALIGN_UP(RKV_MAX(bound, 1u), p->chunk);
    p->free = calloc(p->bound, sizeof *p->free);
    p->chunks = calloc(p->bound / p->chunk, sizeof *p->chunks);
    if (p->free == NULL || p->chunks == NULL) {
        rkv_reply_pool_destroy(p);
        return RKV_NO_MEMORY;
    }
    return RKV_OK;
}

void rkv_reply_pool_destroy(struct rkv_reply_pool *p)
{
    for (uint32_t k = 0; p->chunks != NULL && k < p->nchunks; k++)
        p->unmake(p->ctx, &p->chunks[k]);
    free(p->chunks);
    free(p->free);
    p->chunks = NULL;
    p->free = NULL;
    p->nchunks = 0;
    p->nfree = 0;
}

/* Register one more chunk and put its buffers on the free stack. */
static bool grow(struct rkv_reply_pool *p)
{
    uint32_t k = p->nchunks;

    if ((k + 1) * p->chunk > p->bound)
        return false;
    if (!p->make(p->ctx, (uint64_t)p->chunk * p->size, &p->chunks[k])) {
        p->grow_failures++;
        return false;
    }
    p->nchunks = k + 1;
    /* pushed highest first: buffers are taken in address order */
    for (uint32_t i = p->chunk; i-- > 0;)
        p->free[p->nfree++] = k * p->chunk + i;
    return true;
}

bool rkv_reply_pool_grow_past(struct rkv_reply_pool *p)
{
    uint32_t bound = p->bound + p->chunk;
    uint32_t *free_stack = realloc(p->free, (size_t)bound * sizeof *p->free);
    struct rkv_reply_chunk *chunks;

    if (free_stack == NULL)
        return false;
    p->free = free_stack;
    chunks = realloc(p->chunks, (size_t)(bound / p->chunk) * sizeof *p->chunks);
    if (chunks == NULL)
        return false;
    p->chunks = chunks;
    p->bound = bound;
    if (!grow(p)) {
        p->bound -= p->chunk;
        return false;
    }
    p->grown_past++;
    return true;
}

bool rkv_reply_pool_take(struct rkv_reply_pool *p, uint32_t *idx)
{
    if (RKV_UNLIKELY(p->nfree == 0) && !grow(p))
        return false;
    *idx = p->free[--p->nfree];
    return true;
}
