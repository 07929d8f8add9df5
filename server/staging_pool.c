/* staging_pool.c — a bounded FIFO pool of large buffers: see staging_pool.h. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "staging_pool.h"
#include "util.h"

/* One taker waiting, on its own stack: `buf` is set by the giver. */
struct rkv_staging_waiter {
    pthread_cond_t cond;
    void *buf;
    struct rkv_staging_waiter *next;
};

rkv_status rkv_staging_pool_init(struct rkv_staging_pool *p, uint32_t max, void *(*make)(void *ctx),
                                 void (*unmake)(void *ctx, void *buf), void *ctx)
{
    *p = (struct rkv_staging_pool){ .make = make, .unmake = unmake, .ctx = ctx };
    p->max = RKV_MAX(max, 1u);
    p->free = calloc(p->max, sizeof *p->free);
    if (p->free == NULL)
        return RKV_NO_MEMORY;
    pthread_mutex_init(&p->lock, NULL);
    return RKV_OK;
}

void rkv_staging_pool_destroy(struct rkv_staging_pool *p)
{
    if (p->free == NULL)
        return;
    while (p->nfree > 0)
        p->unmake(p->ctx, p->free[--p->nfree]);
    free(p->free);
    p->free = NULL;
    pthread_mutex_destroy(&p->lock);
}

/* Unlink w from the FIFO (it timed out). Under the lock. */
static void waiter_unlink(struct rkv_staging_pool *p, struct rkv_staging_waiter *w)
{
    struct rkv_staging_waiter *prev = NULL;
    for (struct rkv_staging_waiter *it = p->head; it != NULL; prev = it, it = it->next) {
        if (it != w)
            continue;
        if (prev != NULL)
            prev->next = w->next;
        else
            p->head = w->next;
        if (p->tail == w)
            p->tail = prev;
        return;
    }
}

/* Wait in the FIFO until a giver hands us a buffer or the deadline passes.
 * Under the lock; returns with it held. */
static void *wait_turn(struct rkv_staging_pool *p, uint64_t timeout_ns)
{
    struct rkv_staging_waiter w = { .buf = NULL, .next = NULL };
    pthread_condattr_t attr;
    struct timespec until;
    int rc = 0;

    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&w.cond, &attr);
    pthread_condattr_destroy(&attr);
    clock_gettime(CLOCK_MONOTONIC, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + timeout_ns % 1000000000ull;
    until.tv_sec += (time_t)(timeout_ns / 1000000000ull + ns / 1000000000ull);
    until.tv_nsec = (long)(ns % 1000000000ull);
    if (p->tail != NULL)
        p->tail->next = &w;
    else
        p->head = &w;
    p->tail = &w;
    p->waits++;
    while (w.buf == NULL && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&w.cond, &p->lock, &until);
    if (w.buf == NULL)
        waiter_unlink(p, &w);
    pthread_cond_destroy(&w.cond);
    return w.buf;
}

rkv_status rkv_staging_take(struct rkv_staging_pool *p, uint64_t timeout_ns, void **out)
{
    rkv_status st = RKV_OK;

    pthread_mutex_lock(&p->lock);
    if (p->nfree > 0 && p->head == NULL) {
        *out = p->free[--p->nfree];
    } else if (p->made < p->max) {
        p->made++;
        pthread_mutex_unlock(&p->lock); /* making one registers memory: slow */
        *out = p->make(p->ctx);
        pthread_mutex_lock(&p->lock);
        if (*out == NULL) {
            p->made--;
            st = RKV_NO_MEMORY;
        }
    } else {
        *out = wait_turn(p, timeout_ns);
        if (*out == NULL)
            st = RKV_TIMEOUT;
    }
    pthread_mutex_unlock(&p->lock);
    return st;
}

void rkv_staging_give(struct rkv_staging_pool *p, void *buf)
{
    pthread_mutex_lock(&p->lock);
    struct rkv_staging_waiter *w = p->head;
    if (w != NULL) {
        p->head = w->next;
        if (p->tail == w)
            p->tail = NULL;
        w->buf = buf;
        pthread_cond_signal(&w->cond);
    } else {
        p->free[p->nfree++] = buf;
    }
    pthread_mutex_unlock(&p->lock);
}
