/* transport.c — the transport parameters' defaults, written once.
 *
 * Both client transports (client/shm_client.c, client/rdma_client.c)
 * resolve their parameters here, and librkv's rkv_options defaults
 * (client/client.c) come from rkv_ctrans_params_init(). Both listeners
 * (server/shm_server.c, server/rdma_server.c) resolve theirs here, from the
 * constants rkv-server's settings table (server/config.c) spells into its
 * rows. So a default is changed in one place. See common/transport.h for
 * what each field means.
 */
#include <stdio.h>
#include <string.h>

#include "rdma_util.h"
#include "transport.h"
#include "util.h"

/* ------------------------------------------------------------ client side */

/* Read-landing memory: two buckets and the largest item (a 1 MiB slab page
 * by rkv-server's default) with room to spare. */
#define DEFAULT_LOCAL_BUF (4u << 20)

void rkv_ctrans_params_init(struct rkv_ctrans_params *p)
{
    *p = (struct rkv_ctrans_params){
        .local_buf_size = DEFAULT_LOCAL_BUF,
        .timeout_ms = RKV_DEFAULT_TIMEOUT_MS,
        .signal_interval = RKV_RDMA_DEFAULT_SIGNAL,
        .device = NULL,
        .ack_timeout = RKV_RDMA_ACK_TIMEOUT,
        .retry_count = RKV_RDMA_RETRY_COUNT,
    };
}

rkv_status rkv_ctrans_params_resolve(const struct rkv_ctrans_params *p,
                                     struct rkv_ctrans_params *out, char *err, size_t err_len)
{
    struct rkv_ctrans_params d;
    char limit[32];
    rkv_ctrans_params_init(&d);
    if (p == NULL) {
        *out = d;
        return RKV_OK;
    }
    *out = *p;
    out->local_buf_size = p->local_buf_size ? p->local_buf_size : d.local_buf_size;
    out->timeout_ms = p->timeout_ms ? p->timeout_ms : d.timeout_ms;
    out->signal_interval = p->signal_interval ? RKV_MIN(p->signal_interval, RKV_RDMA_MAX_SIGNAL)
                                              : d.signal_interval;
    out->ack_timeout = p->ack_timeout ? p->ack_timeout : d.ack_timeout;
    out->retry_count = p->retry_count ? p->retry_count : d.retry_count;
    if (out->local_buf_size > RKV_CTRANS_MAX_LOCAL_BUF) {
        snprintf(err, err_len,
                 "local buffer of %zu bytes is over the %s limit; lower "
                 "local_buf_size",
                 out->local_buf_size, rkv_format_size(RKV_CTRANS_MAX_LOCAL_BUF, limit, sizeof limit));
        return RKV_INVALID;
    }
    if (!rkv_rdma_rc_check(out->ack_timeout, out->retry_count, "ack_timeout", "retry_count", err,
                           err_len))
        return RKV_INVALID;
    return RKV_OK;
}

/* ------------------------------------------------------------ server side */

void rkv_strans_params_init(struct rkv_strans_params *p)
{
    *p = (struct rkv_strans_params){
        .credits = RKV_STRANS_DEFAULT_CREDITS,
        .max_msg = RKV_STRANS_DEFAULT_MAX_MSG,
        .max_conns = RKV_STRANS_DEFAULT_MAX_CONNS,
        .max_inline = RKV_RDMA_SERVER_INLINE,
        .signal_interval = RKV_RDMA_DEFAULT_SIGNAL,
        .gid_index = -1,
        .ack_timeout = RKV_RDMA_ACK_TIMEOUT,
        .retry_count = RKV_RDMA_RETRY_COUNT,
        .workers = 1,
        .srq_depth = RKV_RDMA_DEFAULT_SRQ_DEPTH,
    };
}

void rkv_strans_params_resolve(const struct rkv_strans_params *p, struct rkv_strans_params *out)
{
    struct rkv_strans_params d;
    rkv_strans_params_init(&d);
    if (p == NULL) {
        *out = d;
        return;
    }
    *out = *p;
    out->credits = p->credits ? p->credits : d.credits;
    out->max_msg = p->max_msg ? p->max_msg : d.max_msg;
    out->max_conns = p->max_conns ? p->max_conns : d.max_conns;
    out->max_inline = p->max_inline ? p->max_inline : d.max_inline;
    out->signal_interval = p->signal_interval ? p->signal_interval : d.signal_interval;
    out->ack_timeout = p->ack_timeout ? p->ack_timeout : d.ack_timeout;
    out->retry_count = p->retry_count ? p->retry_count : d.retry_count;
    out->workers = p->workers ? p->workers : d.workers;
    out->srq_depth = p->srq_depth ? p->srq_depth : d.srq_depth;
}
