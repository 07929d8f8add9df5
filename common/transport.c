/* transport.c — the listener parameters' defaults, written once.
 *
 * Both listeners (server/shm_server.c, server/rdma_server.c) resolve their
 * parameters here, and rkv-server's configuration defaults
 * (server/config.c) start from rkv_strans_params_init(), so a default is
 * changed in one place. See common/transport.h for what each field means.
 */
#include <string.h>

#include "rdma_util.h"
#include "transport.h"

#define DEFAULT_CREDITS   64u
#define DEFAULT_MAX_MSG   4096u
#define DEFAULT_MAX_CONNS 1024u

void rkv_strans_params_init(struct rkv_strans_params *p)
{
    *p = (struct rkv_strans_params){
        .credits = DEFAULT_CREDITS,
        .max_msg = DEFAULT_MAX_MSG,
        .max_conns = DEFAULT_MAX_CONNS,
        .max_inline = RKV_RDMA_DEFAULT_INLINE,
        .signal_interval = RKV_RDMA_DEFAULT_SIGNAL,
        .gid_index = -1,
        .ack_timeout = RKV_RDMA_ACK_TIMEOUT,
        .retry_count = RKV_RDMA_RETRY_COUNT,
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
}
