/* rdma_srq.c — one worker's shared receive queue: see rdma_srq.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "rdma_srq.h"
#include "util.h"

/* Register chunk `k` and post all its buffers. Under grow_lock (or alone). */
static rkv_status add_chunk(struct rkv_srq *q, uint32_t k, char *err, size_t err_len)
{
    struct ibv_recv_wr wrs[RKV_SRQ_CHUNK];
    struct ibv_sge sges[RKV_SRQ_CHUNK];
    uint32_t idx[RKV_SRQ_CHUNK];
    int rc;

    if (rkv_rdma_buf_alloc(q->pd, (size_t)RKV_SRQ_CHUNK * q->max_msg, IBV_ACCESS_LOCAL_WRITE,
                           "shared receive buffers", &q->chunks[k], err, err_len) != RKV_OK)
        return RKV_NO_MEMORY;
    atomic_store_explicit(&q->nchunks, k + 1, memory_order_release);
    for (uint32_t i = 0; i < RKV_SRQ_CHUNK; i++)
        idx[i] = k * RKV_SRQ_CHUNK + i;
    rc = rkv_srq_post(q, idx, RKV_SRQ_CHUNK, wrs, sges);
    if (rc != 0) {
        rkv_rdma_errno_error(rc, "ibv_post_srq_recv", err, err_len);
        return RKV_CONNECTION;
    }
    return RKV_OK;
}

rkv_status rkv_srq_init(struct rkv_srq *q, struct ibv_pd *pd, uint32_t depth, uint32_t max_msg,
                        char *err, size_t err_len)
{
    memset(q, 0, sizeof *q);
    q->pd = pd;
    q->max_msg = max_msg;
    q->depth = RKV_MIN(RKV_ALIGN_UP(RKV_MAX(depth, 1u), RKV_SRQ_CHUNK),
                       RKV_SRQ_CHUNK * RKV_SRQ_MAX_CHUNKS);
    atomic_init(&q->limit_reached, false);
    atomic_init(&q->want, 0);
    atomic_init(&q->conns, 0);
    atomic_init(&q->nchunks, 0);
    atomic_init(&q->armed, false);
    pthread_mutex_init(&q->grow_lock, NULL);

    struct ibv_srq_init_attr a = {
        .srq_context = &q->limit_reached,
        .attr = { .max_wr = q->depth, .max_sge = 1 },
    };
    q->srq = ibv_create_srq(pd, &a);
    if (q->srq == NULL) {
        int e = errno;
        rkv_rdma_errno_error(e, "ibv_create_srq", err, err_len);
        pthread_mutex_destroy(&q->grow_lock);
        return e == EOPNOTSUPP || e == ENOSYS ? RKV_INVALID : RKV_NO_MEMORY;
    }
    if (add_chunk(q, 0, err, err_len) != RKV_OK) {
        rkv_srq_destroy(q);
        return RKV_NO_MEMORY;
    }
    return RKV_OK;
}

void rkv_srq_destroy(struct rkv_srq *q)
{
    if (q->srq != NULL)
        ibv_destroy_srq(q->srq);
    for (uint32_t k = 0; k < RKV_SRQ_MAX_CHUNKS && q->chunks[k].mem != NULL; k++)
        rkv_rdma_buf_free(&q->chunks[k]);
    if (q->srq != NULL)
        pthread_mutex_destroy(&q->grow_lock);
    q->srq = NULL;
}

int rkv_srq_post(struct rkv_srq *q, const uint32_t *idx, unsigned n, struct ibv_recv_wr *wrs,
                 struct ibv_sge *sges)
{
    struct ibv_recv_wr *bad = NULL;

    if (n == 0)
        return 0;
    for (unsigned i = 0; i < n; i++) {
        const struct rkv_rdma_buf *chunk = &q->chunks[idx[i] / RKV_SRQ_CHUNK];
        sges[i] = (struct ibv_sge){
            .addr = (uintptr_t)rkv_srq_buf(q, idx[i]),
            .length = q->max_msg,
            .lkey = chunk->mr->lkey,
        };
        wrs[i] = (struct ibv_recv_wr){
            .wr_id = idx[i],
            .next = i + 1 < n ? &wrs[i + 1] : NULL,
            .sg_list = &sges[i],
            .num_sge = 1,
        };
    }
    return ibv_post_srq_recv(q->srq, wrs, &bad);
}

void rkv_srq_join(struct rkv_srq *q, uint32_t credits)
{
    atomic_fetch_add(&q->want, credits);
    atomic_fetch_add(&q->conns, 1);
}

void rkv_srq_leave(struct rkv_srq *q, uint32_t credits)
{
    atomic_fetch_sub(&q->want, credits);
    atomic_fetch_sub(&q->conns, 1);
}

/* Buffers the connections' credits ask for, in whole chunks, within depth. */
static uint32_t srq_cap(const struct rkv_srq *q)
{
    uint32_t want = atomic_load_explicit(&q->want, memory_order_relaxed);
    return RKV_MIN(RKV_ALIGN_UP(want, RKV_SRQ_CHUNK), q->depth);
}

bool rkv_srq_tend(struct rkv_srq *q)
{
    uint32_t have = atomic_load_explicit(&q->nchunks, memory_order_relaxed) * RKV_SRQ_CHUNK;
    char err[300];
    bool ok = true;

    if (RKV_LIKELY(!atomic_load_explicit(&q->limit_reached, memory_order_relaxed) &&
                   (atomic_load_explicit(&q->armed, memory_order_relaxed) || have >= srq_cap(q))))
        return true;
    pthread_mutex_lock(&q->grow_lock);
    if (atomic_exchange(&q->limit_reached, false) || q->no_watermark) {
        atomic_store(&q->armed, false); /* the device disarms the watermark when it fires */
        uint32_t k = atomic_load(&q->nchunks);
        if (k * RKV_SRQ_CHUNK < srq_cap(q)) {
            if (add_chunk(q, k, err, sizeof err) != RKV_OK) {
                RKV_WARN("rdma: cannot grow a shared receive queue past %u buffers: %s",
                         k * RKV_SRQ_CHUNK, err);
                ok = false;
            } else {
                RKV_INFO("rdma: a shared receive queue ran half empty: %u buffers now",
                         (k + 1) * RKV_SRQ_CHUNK);
            }
        }
    }
    have = atomic_load(&q->nchunks) * RKV_SRQ_CHUNK;
    if (!atomic_load(&q->armed) && !q->no_watermark && have < srq_cap(q)) {
        /* fire when half the buffers hold requests: room to grow before any
         * sender meets an empty queue */
        struct ibv_srq_attr attr = { .srq_limit = have / 2 };
        if (ibv_modify_srq(q->srq, &attr, IBV_SRQ_LIMIT) == 0)
            atomic_store(&q->armed, true);
        else /* no watermark events: back every credit as connections come */
            q->no_watermark = true;
    }
    pthread_mutex_unlock(&q->grow_lock);
    return ok;
}

uint64_t rkv_srq_bytes(const struct rkv_srq *q)
{
    return (uint64_t)atomic_load(&q->nchunks) * RKV_SRQ_CHUNK * q->max_msg;
}
