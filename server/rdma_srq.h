/* rdma_srq.h — one worker's shared receive queue (rdma server transport).
 *
 * Every QP a worker owns takes its request buffers from one SRQ instead of
 * a ring of credits x max_msg of its own: what receive memory costs then
 * follows the requests in flight, not the connections. The buffers (max_msg
 * each) are registered in chunks of RKV_SRQ_CHUNK on demand, up to
 * min(depth, the credits of the connections on it): a chunk at start, one
 * more whenever the device reports the queue below its low watermark
 * (IBV_EVENT_SRQ_LIMIT_REACHED, read by the listener: rdma_util.h) while
 * the connections' credits ask for more. They are never given back while
 * the listener lives. A receive's wr_id is its buffer's index.
 *
 * Completions: every QP on the queue completes its receives on one CQ its
 * worker owns, `depth` entries (rdma_server.c make_worker_cq; make_srqs
 * keeps depth within the device's max_cqe): at most depth receives are
 * ever outstanding, so that CQ cannot overrun however far a peer sends
 * past its credits, and no completion, with the buffer it names, is lost.
 * The worker hands each to its connection by wc.qp_num (qp_table.h).
 *
 * Threads: the connections' owner re-posts and grows (and whoever tears a
 * connection down re-posts what it held: the listener, for one not handed
 * over yet); the listener thread only counts credits in and out (atomics)
 * and sets the limit flag. Growth
 * takes `grow_lock`, so a second worker on the same queue (none today) stays
 * correct; re-posting takes no lock of ours (the provider serialises
 * ibv_post_srq_recv) and reads the chunk table only below `nchunks`, which
 * is published after the chunk it counts.
 */
#ifndef RKV_RDMA_SRQ_H
#define RKV_RDMA_SRQ_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "rdma_util.h"

#define RKV_SRQ_CHUNK      64u   /* buffers registered at a time */
#define RKV_SRQ_MAX_CHUNKS 1024u /* depth at most 65,536 buffers */

struct rkv_srq {
    atomic_bool limit_reached; /* first: the SRQ's srq_context (rdma_util.h) */
    struct ibv_srq *srq;
    struct ibv_pd *pd;
    uint32_t max_msg; /* bytes per buffer */
    uint32_t depth;   /* most buffers: the setting, within the device's max_srq_wr */
    atomic_uint want; /* credits of the connections on it */
    atomic_uint conns;
    atomic_uint nchunks; /* chunks registered and posted */
    atomic_bool armed;   /* a low watermark is set on the device (written under grow_lock) */
    bool no_watermark;   /* under grow_lock: the device refused one: grow without */
    pthread_mutex_t grow_lock;
    struct rkv_rdma_buf chunks[RKV_SRQ_MAX_CHUNKS];
};

/* Create the SRQ on `pd` (device `verbs`) for up to `depth` buffers of
 * max_msg bytes and post its first chunk. RKV_OK; or an error with `err`
 * saying why; EOPNOTSUPP / ENOSYS from the device (no SRQs) come back as
 * RKV_INVALID, so the caller can fall back to receive buffers per QP. */
rkv_status rkv_srq_init(struct rkv_srq *q, struct ibv_pd *pd, uint32_t depth, uint32_t max_msg,
                        char *err, size_t err_len);
/* Destroy it (no QP may use it any more) and free its buffers. */
void rkv_srq_destroy(struct rkv_srq *q);

/* Buffer `idx` (a receive's wr_id). */
static inline uint8_t *rkv_srq_buf(const struct rkv_srq *q, uint32_t idx)
{
    return q->chunks[idx / RKV_SRQ_CHUNK].mem + (size_t)(idx % RKV_SRQ_CHUNK) * q->max_msg;
}
/* Whether idx names a posted buffer (a completion's wr_id is checked). */
static inline bool rkv_srq_valid(const struct rkv_srq *q, uint64_t idx)
{
    return idx < (uint64_t)atomic_load_explicit(&q->nchunks, memory_order_acquire) * RKV_SRQ_CHUNK;
}
/* Give buffers back to the queue (one chained ibv_post_srq_recv); the
 * scratch arrays hold n. Returns 0 or an errno. */
int rkv_srq_post(struct rkv_srq *q, const uint32_t *idx, unsigned n, struct ibv_recv_wr *wrs,
                 struct ibv_sge *sges);

/* A connection with `credits` joins or leaves (listener thread, or the
 * owner at close). */
void rkv_srq_join(struct rkv_srq *q, uint32_t credits);
void rkv_srq_leave(struct rkv_srq *q, uint32_t credits);

/* The owner, between requests: after a limit event, register and post one
 * more chunk if the connections' credits ask for it, and set the watermark
 * again. Cheap when there is nothing to do (one atomic load). Returns false
 * only when a chunk could not be registered (logged; the queue keeps what
 * it has: requests then wait for re-posted buffers). */
bool rkv_srq_tend(struct rkv_srq *q);

/* Registered bytes right now (for stats and the measurements). */
uint64_t rkv_srq_bytes(const struct rkv_srq *q);

#endif
