/* rdma_client.c — the rdma client transport (libibverbs + librdmacm, RC QP).
 *
 * One connection to one server, used by one thread. What it does on the wire:
 *
 *   read()   n RDMA READs of the server's region as ONE chained work-request
 *            list (one ibv_post_send, one doorbell); only the last is
 *            signaled (RC completes in order, and an error always produces a
 *            completion), and the call busy-polls until it arrives.
 *   send()   a batch of requests as one chained SEND list: inline when the
 *            message fits the QP's max_inline_data, one WR in signal_interval
 *            signaled; the receive slots freed by recv_done() are re-posted
 *            (one chained ibv_post_recv) just before, so every request in
 *            flight has a receive waiting for its reply.
 *   recv()   busy-polls the receive CQ for the next reply; after SPIN_NS
 *            without one it arms the CQ's completion channel, polls once
 *            more (a reply that landed before the arming raises no event)
 *            and sleeps on the channel and on rdma_cm (a disconnect) until
 *            a reply or the deadline: adaptive, like the server's workers.
 *   staging  a REMOTE_READ buffer a large value is copied into for the
 *            server to pull with its own RDMA READ (rendezvous).
 *
 * Device context: the cm id only sets the connection up. The PD, CQs, QP
 * and memory registrations live on a verbs context this connection opens
 * itself, and the QP is moved through INIT/RTR/RTS here with the attributes
 * rdma_cm computes (rdma_init_qp_attr). librdmacm shares one context per
 * device across the process, and a child forked after the parent used rdma
 * inherits it, but the kernel refuses to serve an inherited context to the
 * child; with its own context each connection works in any process.
 * (iWARP would need the QP handed to rdma_cm instead; rkv targets IB and RoCE.)
 *
 * Before HELLO the client does not know the server's credits and message
 * size, so connect() registers one bootstrap send and receive buffer of
 * RKV_RDMA_BOOT_MSG bytes for HELLO and its reply; set_region() then
 * registers credits × max_msg receive slots and the send ring. The QP is sized
 * at connect for up to MAX_CREDITS credits.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "rdma_util.h"
#include "read_cost.h"
#include "read_lane.h"
#include "transport.h"
#include "util.h"

#define MAX_CREDITS  256u /* largest credit count a server may grant us */
#define MAX_READS    64u  /* READs per doorbell; larger read() calls are split */
#define BOOT_WR_ID   UINT64_MAX
#define NO_SLOT      UINT32_MAX
#define SPIN_NS      200000ull /* busy-poll this long before sleeping on the channel */
#define SLEEP_MAX_MS 100       /* longest sleep between looks at the connection */
#define PROBE_ROUNDS 9u        /* read_cost(): timed doorbells of 1 and of 2 READs */
#define LANE_DEPTH   128u      /* READs in flight on one lane */

/* A READ lane (design.md, "Over rdma"): an RC QP of its own to the server
 * that carries only the READs of a shared handle's threads, in a thread
 * domain of its own where the device offers one. Its post and CQ poll run
 * under its spinlock; completions go to their readers by wr_id. */
struct read_lane {
    pthread_spinlock_t lock;
    struct rdma_event_channel *channel;
    struct rdma_cm_id *id;
    struct ibv_td *td; /* NULL: the device has none (Soft-RoCE): the plain PD */
    struct ibv_pd *pd; /* the parent domain over td, or the connection's PD */
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    uint32_t outstanding; /* READs posted, not completed (under lock) */
    int dead;             /* atomic: a READ failed; every read on the lane fails */
    char why[300];        /* set once, before dead */
};

/* A thread's reads on this connection: where they land (registered; copied
 * to the caller's buffer) and how its current read is doing. */
struct lane_reader {
    struct rkv_rdma_buf land;
    uint32_t seq;  /* atomic: the read under way (its WRs' low wr_id half) */
    uint32_t left; /* atomic: its READs not completed yet */
    int failed;    /* atomic: the first failed completion's status, or 0 */
};

struct rdma_ctrans {
    struct rkv_ctrans ctrans;           /* first: what the ops take (transport.h) */
    struct rdma_event_channel *channel; /* cm events: connect, then disconnect */
    struct rdma_cm_id *id;
    struct ibv_context *verbs; /* our own context on the device rdma_cm picked */
    struct ibv_qp *qp;         /* RC, connected by hand (see the top of the file) */
    struct ibv_pd *pd;
    struct ibv_cq *send_cq;        /* sends and reads */
    struct ibv_cq *recv_cq;        /* replies */
    struct ibv_comp_channel *comp; /* recv_cq's completion events: a waiting recv() sleeps on it */
    struct rkv_rdma_sq sq;
    struct rkv_trans_counters *ctr;    /* the caller's counters */
    struct rkv_trans_counters own_ctr; /* used when the caller passes none */
    unsigned timeout_ms;               /* connect and wait limit */
    uint32_t max_inline;               /* what the QP granted */
    uint32_t interval;                 /* signal one send in N */
    uint32_t recv_depth;               /* receive queue slots */
    bool have_region;                  /* set_region() done */
    bool dead;                         /* the connection failed; every call fails */
    uint32_t rkey;                     /* the region's, from HELLO */
    uint64_t region_addr;              /* remote address of region byte 0 */
    uint64_t region_size;
    uint32_t credits;            /* requests in flight at most (1 before HELLO) */
    uint32_t inflight;           /* requests sent whose reply has not arrived */
    uint32_t max_msg;            /* bytes per message */
    struct rkv_rdma_buf local;   /* reads land here (LOCAL_WRITE) */
    struct rkv_rdma_buf staging; /* rendezvous values (REMOTE_READ) */
    struct rkv_rdma_ring boot;   /* 1 send slot + the bootstrap receive behind it */
    struct rkv_rdma_ring sends;  /* credits + 2*interval slots of max_msg */
    struct rkv_rdma_buf recvs;   /* credits slots of max_msg */
    uint32_t *repost;            /* receive slots released, to post with the next send */
    unsigned repost_count;
    uint32_t cur_slot;     /* slot recv() handed out, NO_SLOT if none */
    bool cur_boot;         /* ... or the bootstrap receive */
    bool boot_posted;      /* the bootstrap receive is posted */
    struct ibv_wc wcs[16]; /* receive completions polled, not yet returned */
    unsigned wc_next, wc_count;
    struct ibv_send_wr *swr; /* scratch: MAX_CREDITS WRs (also reads) */
    struct ibv_sge *ssge;
    struct ibv_recv_wr *rwr; /* scratch: MAX_CREDITS receive WRs */
    struct ibv_sge *rsge;
    uint64_t next_cm_check; /* rkv_now_ns() of the next look at cm events in a wait */
    /* READ lanes (read_shared): made by readers under lanes_lock, read without */
    pthread_mutex_t lanes_lock;
    struct read_lane *lanes[RKV_LANES_MAX]; /* atomic pointers; NULL until a reader needs it */
    struct lane_reader **readers;           /* RKV_SHARED_READERS_MAX atomic pointers, or NULL */
    uint32_t lanes_max;                     /* rkv_lanes_max(); 0: no lanes */
    int lanes_off;                          /* atomic: opening a lane failed; read_shared is busy */
    uint32_t lane_key;                      /* from HELLO */
    struct sockaddr_storage dst;            /* the server, for the lanes' connects */
    unsigned retry_count, ack_timeout;
    char why[400]; /* what killed the connection (the first failure) */
    char peer[80]; /* "192.0.2.1:7471" */
};

static inline struct rdma_ctrans *rdma_ctrans_of(struct rkv_ctrans *ctrans)
{
    return RKV_CONTAINER_OF(ctrans, struct rdma_ctrans, ctrans);
}

static void check_cm(struct rdma_ctrans *t);
static void lanes_close(struct rdma_ctrans *t);

/* While a wait finds nothing: notice a disconnect within a millisecond
 * instead of waiting for the transport's retries to give up. */
static bool wait_idle(void *ctx)
{
    struct rdma_ctrans *t = ctx;
    uint64_t now = rkv_now_ns();

    if (now >= t->next_cm_check) {
        check_cm(t);
        t->next_cm_check = now + 1000000ull;
    }
    return t->dead;
}

/* ------------------------------------------------------------ helpers */

static void rdma_client_fail(struct rdma_ctrans *t, const char *msg)
{
    if (!t->dead) {
        RKV_WARN("rdma %s: %s", t->peer, msg);
        snprintf(t->why, sizeof t->why, "%s", msg);
    }
    t->dead = true;
}

/* A failed completion: say why, with the device's own reason when a flush
 * hides it. */
static rkv_status wc_fail(struct rdma_ctrans *t, enum ibv_wc_status st, const char *what)
{
    char msg[400], reason[200];

    enum ibv_wc_status cause = IBV_WC_WR_FLUSH_ERR;

    if (st == IBV_WC_WR_FLUSH_ERR && rkv_rdma_async_reason(t->verbs, reason, sizeof reason))
        snprintf(msg, sizeof msg, "%s failed: the connection broke: %s", what, reason);
    else if (st == IBV_WC_WR_FLUSH_ERR && rkv_rdma_sq_poll(&t->sq, t->send_cq, &cause) != 0 &&
             cause != IBV_WC_WR_FLUSH_ERR) /* a request's send failed first: that is why */
        rkv_rdma_wc_error(cause, "sending a request", msg, sizeof msg);
    else
        rkv_rdma_wc_error(st, what, msg, sizeof msg);
    rdma_client_fail(t, msg);
    return RKV_CONNECTION;
}

static rkv_status sq_wait(struct rdma_ctrans *t, uint32_t limit, const char *what)
{
    enum ibv_wc_status bad = IBV_WC_SUCCESS;
    char msg[400];
    int rc = rkv_rdma_sq_wait(&t->sq, t->send_cq, limit, t->timeout_ms * 1000000ull, wait_idle, t,
                              &bad);

    if (RKV_LIKELY(rc == 0))
        return RKV_OK;
    if (rc == -ETIMEDOUT) {
        snprintf(msg, sizeof msg, "%s: no completion within %u ms", what, t->timeout_ms);
        rdma_client_fail(t, msg);
        return RKV_TIMEOUT;
    }
    if (rc == -ECANCELED)
        return RKV_CONNECTION; /* the disconnect was reported */
    if (rc == -EIO)
        return wc_fail(t, bad, what);
    snprintf(msg, sizeof msg, "%s: send queue accounting error (a bug: please report it)", what);
    rdma_client_fail(t, msg);
    return RKV_CONNECTION;
}

/* Wait for the next cm event; RKV_OK if it is `want`, else err explains. */
static rkv_status wait_cm(struct rdma_ctrans *t, struct rdma_event_channel *channel,
                          enum rdma_cm_event_type want, uint64_t deadline, char *err, size_t err_len)
{
    struct rdma_cm_event *ev;
    struct pollfd pfd = { .fd = channel->fd, .events = POLLIN };

    for (;;) {
        if (rdma_get_cm_event(channel, &ev) == 0)
            break;
        if (errno != EAGAIN && errno != EINTR) {
            rkv_rdma_errno_error(errno, "rdma_get_cm_event", err, err_len);
            return RKV_CONNECTION;
        }
        uint64_t now = rkv_now_ns();
        if (now >= deadline) {
            snprintf(err, err_len,
                     "timed out after %u ms waiting for %s: is the server up and reachable?",
                     t->timeout_ms, rdma_event_str(want));
            return RKV_TIMEOUT;
        }
        poll(&pfd, 1, (int)((deadline - now) / 1000000u) + 1);
    }
    if (ev->event == want) {
        rdma_ack_cm_event(ev);
        return RKV_OK;
    }
    rkv_status st = RKV_CONNECTION;
    struct rkv_rdma_reject rej;
    if (ev->event == RDMA_CM_EVENT_REJECTED && ev->param.conn.private_data != NULL &&
        ev->param.conn.private_data_len >= sizeof rej) {
        memcpy(&rej, ev->param.conn.private_data, sizeof rej);
        if (rej.magic == RKV_RDMA_REJECT_MAGIC &&
            (rej.reason == RKV_REJECT_TOO_MANY || rej.reason == RKV_REJECT_RESOURCES))
            st = RKV_SERVER_BUSY; /* worth retrying later */
    }
    rkv_rdma_cm_error(ev->event, ev->status, ev->param.conn.private_data,
                      ev->param.conn.private_data_len, t->peer, err, err_len);
    rdma_ack_cm_event(ev);
    return st;
}

/* Non-blocking look at cm events after connect: a disconnect kills the connection. */
static void check_cm(struct rdma_ctrans *t)
{
    struct rdma_cm_event *ev;
    char msg[300];

    while (rdma_get_cm_event(t->channel, &ev) == 0) {
        if (ev->event == RDMA_CM_EVENT_DISCONNECTED || ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
            rkv_rdma_cm_error(ev->event, ev->status, NULL, 0, t->peer, msg, sizeof msg);
            rdma_client_fail(t, msg);
        }
        rdma_ack_cm_event(ev);
    }
}

/* Returns 0 or the errno of ibv_post_recv. */
static int post_boot_recv(struct rdma_ctrans *t)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)(t->boot.buf.mem + RKV_RDMA_BOOT_MSG),
        .length = RKV_RDMA_BOOT_MSG,
        .lkey = t->boot.buf.mr->lkey,
    };
    struct ibv_recv_wr wr = { .wr_id = BOOT_WR_ID, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;

    int rc = ibv_post_recv(t->qp, &wr, &bad);
    if (rc == 0)
        t->boot_posted = true;
    return rc;
}

static void cli_close(struct rkv_ctrans *ctrans)
{
    if (ctrans == NULL)
        return;
    struct rdma_ctrans *t = rdma_ctrans_of(ctrans);
    lanes_close(t);
    if (t->qp != NULL) {
        struct ibv_qp_attr err_state = { .qp_state = IBV_QPS_ERR };
        ibv_modify_qp(t->qp, &err_state, IBV_QP_STATE);
        rdma_disconnect(t->id);
        ibv_destroy_qp(t->qp);
    }
    rkv_rdma_buf_free(&t->local);
    rkv_rdma_buf_free(&t->staging);
    rkv_rdma_buf_free(&t->boot.buf);
    rkv_rdma_buf_free(&t->sends.buf);
    rkv_rdma_buf_free(&t->recvs);
    if (t->send_cq != NULL)
        ibv_destroy_cq(t->send_cq);
    if (t->recv_cq != NULL)
        ibv_destroy_cq(t->recv_cq);
    if (t->comp != NULL)
        ibv_destroy_comp_channel(t->comp);
    if (t->pd != NULL)
        ibv_dealloc_pd(t->pd);
    if (t->verbs != NULL)
        ibv_close_device(t->verbs);
    if (t->id != NULL)
        rdma_destroy_id(t->id);
    if (t->channel != NULL)
        rdma_destroy_event_channel(t->channel);
    free(t->repost);
    free(t->swr);
    free(t->ssge);
    free(t->rwr);
    free(t->rsge);
    pthread_mutex_destroy(&t->lanes_lock);
    free(t);
}

/* ------------------------------------------------------------ connect */

/* Resolve address and route, checking the device and port on the way. */
/* Resolve address and route of id (the connection's, or a READ lane's on
 * its own channel), checking the device and port on the way: the
 * connection opens its context on that device; a lane must reach the
 * server through the device the connection's context is on. */
static rkv_status rdma_client_resolve(struct rdma_ctrans *t, struct rdma_cm_id *id,
                                      struct rdma_event_channel *channel,
                                      const struct sockaddr *dst, const char *device,
                                      uint64_t deadline, char *err, size_t err_len)
{
    unsigned step_ms = RKV_MIN(t->timeout_ms, RKV_RDMA_CM_TIMEOUT_MS);
    rkv_status st;

    if (rdma_resolve_addr(id, NULL, (struct sockaddr *)(uintptr_t)dst, (int)step_ms) != 0) {
        rkv_rdma_errno_error(errno, "rdma_resolve_addr", err, err_len);
        return RKV_CONNECTION;
    }
    st = wait_cm(t, channel, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, err, err_len);
    if (st != RKV_OK)
        return st;
    if (device != NULL && strcmp(device, rkv_rdma_device_name(id->verbs)) != 0) {
        snprintf(err, err_len, "the server is reached through RDMA device %s, not %s (rdma_device)",
                 rkv_rdma_device_name(id->verbs), device);
        return RKV_INVALID;
    }
    if (t->verbs == NULL) {
        st = rkv_rdma_open_device(rkv_rdma_device_name(id->verbs), &t->verbs, err, err_len);
        if (st != RKV_OK)
            return st;
        st = rkv_rdma_check_port(t->verbs, id->port_num, err, err_len);
        if (st != RKV_OK)
            return st;
    }
    if (rdma_resolve_route(id, (int)step_ms) != 0) {
        rkv_rdma_errno_error(errno, "rdma_resolve_route", err, err_len);
        return RKV_CONNECTION;
    }
    return wait_cm(t, channel, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, err, err_len);
}

/* PD, CQs, QP and the buffers needed before HELLO. */
static rkv_status setup_qp(struct rdma_ctrans *t, size_t local_size, char *err, size_t err_len)
{
    struct rkv_rdma_caps caps;
    uint32_t send_depth, recv_depth;
    rkv_status st;

    st = rkv_rdma_query_caps(t->verbs, &caps, err, err_len);
    if (st != RKV_OK)
        return st;
    send_depth = RKV_MIN(MAX_CREDITS + MAX_READS + 2 * t->interval, caps.max_qp_wr);
    recv_depth = RKV_MIN(MAX_CREDITS + 1, caps.max_qp_wr);
    t->recv_depth = recv_depth;
    if (send_depth < MAX_READS + 2 * t->interval + 1) {
        snprintf(err, err_len, "RDMA device %s allows only %u work requests per queue",
                 rkv_rdma_device_name(t->verbs), caps.max_qp_wr);
        return RKV_CONNECTION;
    }
    st = rkv_rdma_check_memlock(local_size + RKV_RDMA_STAGING_SIZE + 2 * RKV_RDMA_BOOT_MSG,
                                "client's read and staging buffers", err, err_len);
    if (st != RKV_OK)
        return st;
    t->pd = ibv_alloc_pd(t->verbs);
    if (t->pd == NULL) {
        rkv_rdma_errno_error(errno, "ibv_alloc_pd", err, err_len);
        return RKV_CONNECTION;
    }
    t->comp = ibv_create_comp_channel(t->verbs);
    int flags = t->comp != NULL ? fcntl(t->comp->fd, F_GETFL) : -1;
    if (flags < 0 || fcntl(t->comp->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        rkv_rdma_errno_error(errno, "ibv_create_comp_channel", err, err_len);
        return RKV_CONNECTION;
    }
    t->send_cq = ibv_create_cq(t->verbs, (int)RKV_MIN(2 * send_depth, caps.max_cqe), NULL, NULL, 0);
    t->recv_cq = ibv_create_cq(t->verbs, (int)RKV_MIN(2 * recv_depth, caps.max_cqe), NULL, t->comp,
                               0);
    if (t->send_cq == NULL || t->recv_cq == NULL) {
        rkv_rdma_errno_error(errno, "ibv_create_cq", err, err_len);
        return RKV_CONNECTION;
    }
    t->max_inline = RKV_RDMA_DEFAULT_INLINE;
    st = rkv_rdma_create_qp(NULL, t->pd, t->send_cq, t->recv_cq, NULL, send_depth, recv_depth,
                            &t->max_inline, &t->qp, err, err_len);
    if (st != RKV_OK)
        return st;
    int rc = rkv_rdma_modify_qp(t->id, t->qp, IBV_QPS_INIT, IBV_ACCESS_REMOTE_READ);
    if (rc != 0) {
        rkv_rdma_errno_error(rc, "ibv_modify_qp(INIT)", err, err_len);
        return RKV_CONNECTION;
    }
    /* Before HELLO: one request at a time, always signaled (keep 0), so the
     * single bootstrap send slot is free again when send() returns. */
    rkv_rdma_sq_init(&t->sq, send_depth, 0, t->interval);
    if (rkv_rdma_buf_alloc(t->pd, local_size, IBV_ACCESS_LOCAL_WRITE, "read buffer", &t->local, err,
                           err_len) != RKV_OK ||
        rkv_rdma_buf_alloc(t->pd, RKV_RDMA_STAGING_SIZE,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, "staging buffer",
                           &t->staging, err, err_len) != RKV_OK ||
        rkv_rdma_buf_alloc(t->pd, 2 * RKV_RDMA_BOOT_MSG, IBV_ACCESS_LOCAL_WRITE,
                           "bootstrap buffers", &t->boot.buf, err, err_len) != RKV_OK)
        return RKV_NO_MEMORY;
    t->local.size = local_size; /* what the caller asked for, within the page-rounded allocation */
    t->boot.stride = RKV_RDMA_BOOT_MSG;
    t->boot.count = 1;
    rc = post_boot_recv(t);
    if (rc != 0) {
        rkv_rdma_errno_error(rc, "ibv_post_recv", err, err_len);
        return RKV_CONNECTION;
    }
    return RKV_OK;
}

static rkv_status cli_connect_to(const char *addr, const struct rkv_ctrans_params *p,
                                 struct rkv_trans_counters *counters, struct rkv_ctrans **out,
                                 char *err, size_t err_len)
{
    struct rkv_ctrans_params params;
    struct sockaddr_storage dst;
    struct rdma_ctrans *t;
    struct rkv_rdma_caps caps;
    struct rdma_conn_param cp = { 0 };
    uint64_t deadline;
    rkv_status st;

    *out = NULL;
    st = rkv_ctrans_params_resolve(p, &params, err, err_len);
    if (st != RKV_OK)
        return st;
    st = rkv_rdma_parse_addr(addr, false, &dst, err, err_len);
    if (st != RKV_OK)
        return st;
    if (rkv_rdma_addr_is_wildcard((struct sockaddr *)&dst)) {
        snprintf(err, err_len, "cannot connect to a wildcard address: name the server's IP");
        return RKV_INVALID;
    }
    t = calloc(1, sizeof *t);
    if (t == NULL) {
        snprintf(err, err_len, "out of memory");
        return RKV_NO_MEMORY;
    }
    t->ctr = counters ? counters : &t->own_ctr;
    pthread_mutex_init(&t->lanes_lock, NULL);
    memcpy(&t->dst, &dst, sizeof dst);
    t->retry_count = params.retry_count;
    t->ack_timeout = params.ack_timeout;
    t->timeout_ms = params.timeout_ms;
    t->interval = params.signal_interval;
    t->credits = 1;
    t->max_msg = RKV_RDMA_BOOT_MSG;
    t->cur_slot = NO_SLOT;
    rkv_rdma_format_addr((struct sockaddr *)&dst, t->peer, sizeof t->peer);
    deadline = rkv_now_ns() + t->timeout_ms * 1000000ull;

    t->repost = calloc(MAX_CREDITS, sizeof *t->repost);
    t->swr = calloc(RKV_MAX(MAX_CREDITS, MAX_READS), sizeof *t->swr);
    t->ssge = calloc(RKV_MAX(MAX_CREDITS, MAX_READS), sizeof *t->ssge);
    t->rwr = calloc(MAX_CREDITS, sizeof *t->rwr);
    t->rsge = calloc(MAX_CREDITS, sizeof *t->rsge);
    if (!t->repost || !t->swr || !t->ssge || !t->rwr || !t->rsge) {
        snprintf(err, err_len, "out of memory");
        st = RKV_NO_MEMORY;
        goto fail;
    }
    st = rkv_rdma_open_id(t, &t->channel, &t->id, err, err_len);
    if (st != RKV_OK)
        goto fail;
    st = rdma_client_resolve(t, t->id, t->channel, (struct sockaddr *)&dst, params.device, deadline,
                             err, err_len);
    if (st != RKV_OK)
        goto fail;
    st = setup_qp(t, params.local_buf_size, err, err_len);
    if (st != RKV_OK)
        goto fail;
    st = rkv_rdma_query_caps(t->verbs, &caps, err, err_len);
    if (st != RKV_OK)
        goto fail;
    /* As many READs in flight as the device allows, both ways: ours to the
     * region, the server's pulls from our staging buffer. */
    cp.initiator_depth = caps.max_init_rd_atom;
    cp.responder_resources = caps.max_rd_atom;
    cp.retry_count = (uint8_t)params.retry_count;
    cp.rnr_retry_count = 7; /* retry forever: a request waits for a re-posted receive */
    cp.qp_num = t->qp->qp_num;
    /* what the server's keepalive probe may read: the staging buffer's start */
    struct rkv_rdma_connect_info info = { .magic = RKV_RDMA_CONNECT_MAGIC,
                                          .rkey = t->staging.mr->rkey,
                                          .addr = (uint64_t)(uintptr_t)t->staging.mem,
                                          .flags = params.lane_key ? RKV_RDMA_CONNECT_LANE : 0,
                                          .lane_key = params.lane_key };
    cp.private_data = &info;
    cp.private_data_len = sizeof info;
    rkv_rdma_set_ack_timeout(t->id, params.ack_timeout);
    if (rdma_connect(t->id, &cp) != 0) {
        rkv_rdma_errno_error(errno, "rdma_connect", err, err_len);
        st = RKV_CONNECTION;
        goto fail;
    }
    /* Our QP is not rdma_cm's: on the server's answer, move it to RTR and
     * RTS ourselves, then tell the server (RTU) with rdma_establish(). INIT
     * again first, as librdmacm does: only now are the READ resources known.
     * Remote access: the server may READ our staging buffer, nothing else. */
    st = wait_cm(t, t->channel, RDMA_CM_EVENT_CONNECT_RESPONSE, deadline, err, err_len);
    if (st != RKV_OK)
        goto fail;
    int rc = rkv_rdma_modify_qp(t->id, t->qp, IBV_QPS_INIT, IBV_ACCESS_REMOTE_READ);
    if (rc == 0)
        rc = rkv_rdma_modify_qp(t->id, t->qp, IBV_QPS_RTR, IBV_ACCESS_REMOTE_READ);
    if (rc == 0)
        rc = rkv_rdma_modify_qp(t->id, t->qp, IBV_QPS_RTS, IBV_ACCESS_REMOTE_READ);
    if (rc == 0 && rdma_establish(t->id) != 0)
        rc = errno;
    if (rc != 0) {
        rkv_rdma_errno_error(rc, "connecting the queue pair (ibv_modify_qp RTR/RTS, rdma_establish)",
                             err, err_len);
        rdma_reject(t->id, NULL, 0);
        st = RKV_CONNECTION;
        goto fail;
    }
    RKV_DEBUG("rdma: connected to %s via %s (inline %u)", t->peer, rkv_rdma_device_name(t->verbs),
              t->max_inline);
    *out = &t->ctrans;
    return RKV_OK;

fail:
    cli_close(&t->ctrans);
    return st;
}

static rkv_status cli_set_region(struct rkv_ctrans *ctrans, const struct rkv_hello *h, char *err,
                                 size_t err_len)
{
    struct rdma_ctrans *t = rdma_ctrans_of(ctrans);
    const uint32_t ring = h->credits + 2 * t->interval;
    rkv_status st;

    if (t->have_region) {
        snprintf(err, err_len, "set_region called twice");
        return RKV_INVALID;
    }
    if (h->credits == 0 || h->credits > MAX_CREDITS || h->max_msg < RKV_MIN_MSG ||
        h->max_msg > RKV_MAX_MSG) {
        snprintf(err, err_len,
                 "server %s offers %u credits of %u-byte messages; this client supports "
                 "1..%u credits of %u..%u bytes",
                 t->peer, h->credits, h->max_msg, MAX_CREDITS, RKV_MIN_MSG, RKV_MAX_MSG);
        return RKV_PROTOCOL;
    }
    if (h->credits + 2 * t->interval > t->sq.depth || h->credits + 1 > t->recv_depth) {
        snprintf(err, err_len,
                 "server %s offers %u credits but RDMA device %s allows only %u/%u "
                 "work requests per queue: lower the server's credits",
                 t->peer, h->credits, rkv_rdma_device_name(t->verbs), t->sq.depth, t->recv_depth);
        return RKV_PROTOCOL;
    }
    if (h->region_size == 0 || h->region_addr + h->region_size < h->region_addr) {
        snprintf(err, err_len, "the server reports a bad region (address 0x%llx, %llu bytes)",
                 (unsigned long long)h->region_addr, (unsigned long long)h->region_size);
        return RKV_PROTOCOL;
    }
    st = rkv_rdma_check_memlock(t->local.size + RKV_RDMA_STAGING_SIZE +
                                    (uint64_t)(h->credits + ring) * h->max_msg,
                                "client's buffers", err, err_len);
    if (st != RKV_OK)
        return st;
    if (rkv_rdma_buf_alloc(t->pd, (size_t)h->credits * h->max_msg, IBV_ACCESS_LOCAL_WRITE,
                           "receive buffers", &t->recvs, err, err_len) != RKV_OK ||
        rkv_rdma_buf_alloc(t->pd, (size_t)ring * h->max_msg, IBV_ACCESS_LOCAL_WRITE, "send buffers",
                           &t->sends.buf, err, err_len) != RKV_OK) {
        rkv_rdma_buf_free(&t->recvs);
        rkv_rdma_buf_free(&t->sends.buf);
        return RKV_NO_MEMORY;
    }
    t->sends.stride = h->max_msg;
    t->sends.count = ring;
    t->sends.head = 0;
    for (uint32_t i = 0; i < h->credits; i++)
        t->repost[i] = i;
    int rc = rkv_rdma_post_recvs(t->qp, &t->recvs, h->max_msg, t->repost, h->credits, t->rwr,
                                 t->rsge);
    if (rc != 0) {
        rkv_rdma_errno_error(rc, "ibv_post_recv", err, err_len);
        return RKV_CONNECTION;
    }
    t->repost_count = 0;
    t->rkey = h->rkey;
    t->region_addr = h->region_addr;
    t->region_size = h->region_size;
    t->credits = h->credits;
    t->max_msg = h->max_msg;
    t->sq.keep = 2 * t->interval;
    if ((h->features & RKV_FEATURE_LANES) && h->lane_key != 0) {
        const char *cap = getenv("RKV_RDMA_LANES");
        t->lanes_max = rkv_lanes_max(sysconf(_SC_NPROCESSORS_ONLN),
                                     cap && *cap ? (uint32_t)strtoul(cap, NULL, 10) : UINT32_MAX);
        t->lane_key = h->lane_key;
    }
    t->have_region = true;
    return RKV_OK;
}

/* ------------------------------------------------------------ data path */

static void *cli_local_buf(struct rkv_ctrans *ctrans, size_t *len)
{
    struct rdma_ctrans *t = rdma_ctrans_of(ctrans);
    *len = t->local.size;
    return t->local.mem;
}

/* One READ work request for op, chained to `next`. Only the fields a READ
 * uses are written: the scratch WRs are calloc'd and every writer of them
 * sets what its opcode needs, so a GET pays no 128-byte zeroing per READ. */
static void read_wr(struct rdma_ctrans *t, unsigned i, const struct rkv_read_op *op,
                    struct ibv_send_wr *next, bool last)
{
    struct ibv_sge *sge = &t->ssge[i];
    struct ibv_send_wr *wr = &t->swr[i];
    bool signaled;

    sge->addr = (uintptr_t)op->dst;
    sge->length = op->len;
    sge->lkey = t->local.mr->lkey;
    wr->next = next;
    wr->sg_list = sge;
    wr->num_sge = 1;
    wr->opcode = IBV_WR_RDMA_READ;
    wr->wr.rdma.remote_addr = t->region_addr + op->offset;
    wr->wr.rdma.rkey = t->rkey;
    wr->wr_id = rkv_rdma_sq_take(&t->sq, last, last, &signaled);
    wr->send_flags = signaled ? IBV_SEND_SIGNALED : 0;
}

/* Post ops[0..n-1] (n <= MAX_READS) as one chain and wait for the last. */
static rkv_status read_chunk(struct rdma_ctrans *t, const struct rkv_read_op *ops, unsigned n)
{
    struct ibv_send_wr *bad = NULL;
    const uint8_t *lo = t->local.mem, *hi = t->local.mem + t->local.size;

    for (unsigned i = 0; i < n; i++) {
        const struct rkv_read_op *op = &ops[i];
        const uint8_t *d = op->dst;
        if (RKV_UNLIKELY(op->len == 0 || op->offset > t->region_size ||
                         op->len > t->region_size - op->offset || d < lo || d > hi ||
                         op->len > (size_t)(hi - d)))
            return RKV_INVALID;
        read_wr(t, i, op, i + 1 < n ? &t->swr[i + 1] : NULL, i + 1 == n);
    }
    if (RKV_UNLIKELY(ibv_post_send(t->qp, t->swr, &bad) != 0)) {
        rdma_client_fail(t, "ibv_post_send (RDMA READ) failed");
        return RKV_CONNECTION;
    }
    t->ctr->doorbells++;
    t->ctr->reads += n;
    t->ctr->read_round_trips++;
    return sq_wait(t, 0, "RDMA READ of the server's region");
}

static rkv_status cli_read(struct rkv_ctrans *ctrans, const struct rkv_read_op *ops, unsigned n)
{
    struct rdma_ctrans *t = rdma_ctrans_of(ctrans);
    if (RKV_UNLIKELY(t->dead))
        return RKV_CONNECTION;
    if (RKV_UNLIKELY(!t->have_region))
        return RKV_INVALID;
    while (n > 0) {
        unsigned m = RKV_MIN(n, MAX_READS);
        rkv_status st = RKV_OK;
        if (RKV_UNLIKELY(t->sq.outstanding > t->sq.depth - m)) /* a GET finds room */
            st = sq_wait(t, t->sq.depth - m, "waiting for send queue room");
        if (st == RKV_OK)
            st = read_chunk(t, ops, m);
        if (st != RKV_OK)
            return st;
        ops += m;
        n -= m;
    }
    return RKV_OK;
}

/* One doorbell of `n` READs, timed: its ns, or UINT64_MAX if it failed. */
static uint64_t probe_ns(struct rdma_ctrans *t, const struct rkv_read_op *ops, unsigned n)
{
    uint64_t start = rkv_now_ns();
    return read_chunk(t, ops, n) == RKV_OK ? rkv_now_ns() - start : UINT64_MAX;
}

/* Does a second READ in the same doorbell cost nearly nothing (a NIC serves
 * them in parallel) or about a round trip (Soft-RoCE serves them one by
 * one)? Timed once per connection on two lines of the region, doorbells of
 * 1 and of 2 READs taken in turn, so that a change of the machine's speed
 * during the probe (a VM's vCPU descheduled, a frequency step) falls on
 * both alike; the medians decide (rkv_reads_serial; read_cost.h: the
 * client keeps checking a "together" verdict against its own doorbells).
 * The probe's reads are not counted. */
static enum rkv_read_cost cli_read_cost(struct rkv_ctrans *ctrans)
{
    struct rdma_ctrans *t = rdma_ctrans_of(ctrans);
    struct rkv_trans_counters *ctr = t->ctr, scratch = { 0 };
    struct rkv_read_op ops[2] = {
        { .offset = 0, .len = RKV_CACHELINE, .dst = t->local.mem },
        { .offset = RKV_MIN(t->region_size, 8192) - RKV_CACHELINE,
          .len = RKV_CACHELINE,
          .dst = (uint8_t *)t->local.mem + RKV_CACHELINE },
    };
    uint64_t one[PROBE_ROUNDS], two[PROBE_ROUNDS];
    unsigned n = 0;

    if (!t->have_region || t->dead || t->region_size < 2 * RKV_CACHELINE)
        return RKV_COST_ROUND_TRIPS;
    t->ctr = &scratch;
    for (; n < PROBE_ROUNDS; n++) {
        one[n] = probe_ns(t, ops, 1);
        two[n] = probe_ns(t, ops, 2);
        if (one[n] == UINT64_MAX || two[n] == UINT64_MAX)
            break;
    }
    t->ctr = ctr;
    if (n < PROBE_ROUNDS) /* a READ failed: the connection is going down */
        return RKV_COST_ROUND_TRIPS;
    enum rkv_read_cost cost = rkv_reads_serial(one, two, n) ? RKV_COST_PER_READ
                                                            : RKV_COST_ROUND_TRIPS;
    RKV_DEBUG("rdma %s: 1 READ %llu ns, 2 READs in one doorbell %llu ns (medians of %u): %s",
              t->peer, (unsigned long long)one[n / 2], (unsigned long long)two[n / 2], n,
              cost == RKV_COST_PER_READ ? "the second bucket only when needed"
                                        : "both buckets in one doorbell");
    return cost;
}

/* ------------------------------------------------------------ READ lanes */

static void lane_free(struct rdma_ctrans *t, struct read_lane *ln)
{
    (void)t;
    if (ln->qp != NULL) {
        struct ibv_qp_attr err_state = { .qp_state = IBV_QPS_ERR };
        ibv_modify_qp(ln->qp, &err_state, IBV_QP_STATE);
        rdma_disconnect(ln->id);
        ibv_destroy_qp(ln->qp);
    }
    if (ln->cq != NULL)
        ibv_destroy_cq(ln->cq);
    if (ln->td != NULL) { /* ln->pd is the parent domain over it */
        if (ln->pd != NULL)
            ibv_dealloc_pd(ln->pd);
        ibv_dealloc_td(ln->td);
    }
    if (ln->id != NULL)
        rdma_destroy_id(ln->id);
    if (ln->channel != NULL)
        rdma_destroy_event_channel(ln->channel);
    pthread_spin_destroy(&ln->lock);
    free(ln);
}

/* Every lane and reader: the caller (close) has no reader left (the client
 * retires its view, waiting its readers out, before it closes). */
static void lanes_close(struct rdma_ctrans *t)
{
    for (unsigned i = 0; i < RKV_LANES_MAX; i++)
        if (t->lanes[i] != NULL)
            lane_free(t, t->lanes[i]);
    for (unsigned i = 0; t->readers != NULL && i < RKV_SHARED_READERS_MAX; i++) {
        if (t->readers[i] != NULL) {
            rkv_rdma_buf_free(&t->readers[i]->land);
            free(t->readers[i]);
        }
    }
    free(t->readers);
}

/* The lane's protection domain: a parent domain with a thread domain of its
 * own where the device offers one (the provider then drops its QP lock and,
 * on mlx5, gives the lane a doorbell of its own), else the connection's PD
 * (Soft-RoCE: ibv_alloc_td fails with EOPNOTSUPP). Both counted. */
static rkv_status lane_domain(struct rdma_ctrans *t, struct read_lane *ln, char *err, size_t err_len)
{
    struct ibv_td_init_attr td_attr = { 0 };

    ln->td = ibv_alloc_td(t->verbs, &td_attr);
    if (ln->td != NULL) {
        struct ibv_parent_domain_init_attr pa = { .pd = t->pd, .td = ln->td };
        ln->pd = ibv_alloc_parent_domain(t->verbs, &pa);
        if (ln->pd == NULL) {
            rkv_rdma_errno_error(errno, "ibv_alloc_parent_domain", err, err_len);
            return RKV_CONNECTION;
        }
        __atomic_add_fetch(&t->ctr->lanes_td, 1, __ATOMIC_RELAXED);
        return RKV_OK;
    }
    RKV_DEBUG("rdma %s: no thread domain for a READ lane (%s): the lane shares the PD", t->peer,
              strerror(errno ? errno : EOPNOTSUPP));
    ln->pd = t->pd;
    return RKV_OK;
}

/* The lane's QP in its domain, connected to the server as a READ lane. */
static rkv_status lane_connect(struct rdma_ctrans *t, struct read_lane *ln, char *err, size_t err_len)
{
    uint64_t deadline = rkv_now_ns() + t->timeout_ms * 1000000ull;
    struct rkv_rdma_caps caps;
    struct rdma_conn_param cp = { 0 };
    uint32_t no_inline = 0;
    rkv_status st;

    st = rkv_rdma_open_id(ln, &ln->channel, &ln->id, err, err_len);
    if (st == RKV_OK)
        st = rdma_client_resolve(t, ln->id, ln->channel, (struct sockaddr *)&t->dst,
                                 rkv_rdma_device_name(t->verbs), deadline, err, err_len);
    if (st == RKV_OK)
        st = rkv_rdma_query_caps(t->verbs, &caps, err, err_len);
    if (st == RKV_OK)
        st = lane_domain(t, ln, err, err_len);
    if (st != RKV_OK)
        return st;
    ln->cq = ibv_create_cq(t->verbs, (int)RKV_MIN(2 * LANE_DEPTH, caps.max_cqe), NULL, NULL, 0);
    if (ln->cq == NULL) {
        rkv_rdma_errno_error(errno, "ibv_create_cq (READ lane)", err, err_len);
        return RKV_CONNECTION;
    }
    st = rkv_rdma_create_qp(NULL, ln->pd, ln->cq, ln->cq, NULL, RKV_MIN(LANE_DEPTH, caps.max_qp_wr),
                            1, &no_inline, &ln->qp, err, err_len);
    if (st != RKV_OK)
        return st;
    int rc = rkv_rdma_modify_qp(ln->id, ln->qp, IBV_QPS_INIT, 0);
    if (rc != 0) {
        rkv_rdma_errno_error(rc, "ibv_modify_qp(INIT) (READ lane)", err, err_len);
        return RKV_CONNECTION;
    }
    struct rkv_rdma_connect_info info = { .magic = RKV_RDMA_CONNECT_MAGIC,
                                          .flags = RKV_RDMA_CONNECT_LANE,
                                          .lane_key = t->lane_key };
    /* both depths, as the connection asks: the server answers a lane's
     * READ depth from them the way it answers the connection's */
    cp.initiator_depth = caps.max_init_rd_atom;
    cp.responder_resources = caps.max_rd_atom;
    cp.retry_count = (uint8_t)t->retry_count;
    cp.qp_num = ln->qp->qp_num;
    cp.private_data = &info;
    cp.private_data_len = sizeof info;
    rkv_rdma_set_ack_timeout(ln->id, t->ack_timeout);
    if (rdma_connect(ln->id, &cp) != 0) {
        rkv_rdma_errno_error(errno, "rdma_connect (READ lane)", err, err_len);
        return RKV_CONNECTION;
    }
    st = wait_cm(t, ln->channel, RDMA_CM_EVENT_CONNECT_RESPONSE, deadline, err, err_len);
    if (st != RKV_OK)
        return st;
    rc = rkv_rdma_modify_qp(ln->id, ln->qp, IBV_QPS_INIT, 0);
    if (rc == 0)
        rc = rkv_rdma_modify_qp(ln->id, ln->qp, IBV_QPS_RTR, 0);
    if (rc == 0)
        rc = rkv_rdma_modify_qp(ln->id, ln->qp, IBV_QPS_RTS, 0);
    if (rc == 0 && rdma_establish(ln->id) != 0)
        rc = errno;
    if (rc != 0) {
        rkv_rdma_errno_error(rc, "connecting a READ lane", err, err_len);
        rdma_reject(ln->id, NULL, 0);
        return RKV_CONNECTION;
    }
    return RKV_OK;
}

/* Lane i, opened on first use. NULL when it cannot be had: lanes are then
 * off for this connection (its threads read under the handle's lock). */
static struct read_lane *lane_get(struct rdma_ctrans *t, uint32_t i)
{
    struct read_lane *ln = __atomic_load_n(&t->lanes[i], __ATOMIC_ACQUIRE);
    char err[400];

    if (RKV_LIKELY(ln != NULL))
        return ln;
    pthread_mutex_lock(&t->lanes_lock);
    ln = t->lanes[i];
    if (ln == NULL && !__atomic_load_n(&t->lanes_off, __ATOMIC_RELAXED) &&
        (ln = calloc(1, sizeof *ln)) != NULL) {
        pthread_spin_init(&ln->lock, PTHREAD_PROCESS_PRIVATE);
        if (lane_connect(t, ln, err, sizeof err) != RKV_OK) {
            RKV_WARN("rdma %s: cannot open a READ lane: %s; threads read under the handle's lock",
                     t->peer, err);
            lane_free(t, ln);
            ln = NULL;
            __atomic_store_n(&t->lanes_off, 1, __ATOMIC_RELAXED);
        } else {
            __atomic_add_fetch(&t->ctr->lanes, 1, __ATOMIC_RELAXED);
            RKV_DEBUG("rdma %s: READ lane %u open (%s)", t->peer, i,
                      ln->td ? "thread domain" : "shared PD");
            __atomic_store_n(&t->lanes[i], ln, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&t->lanes_lock);
    return ln;
}

/* Reader r's state, its landing buffer at least `len` bytes (registered
 * anew when it grows: only its own thread uses it, none of its READs are
 * out between reads). NULL when out of memory. */
static struct lane_reader *reader_get(struct rdma_ctrans *t, uint32_t r, size_t len)
{
    struct lane_reader **all = __atomic_load_n(&t->readers, __ATOMIC_ACQUIRE);
    struct lane_reader *rd = all != NULL ? __atomic_load_n(&all[r], __ATOMIC_ACQUIRE) : NULL;
    char err[300];

    if (RKV_UNLIKELY(rd == NULL)) {
        pthread_mutex_lock(&t->lanes_lock);
        if (t->readers == NULL)
            __atomic_store_n(&t->readers, calloc(RKV_SHARED_READERS_MAX, sizeof *t->readers),
                             __ATOMIC_RELEASE);
        if (t->readers != NULL && (rd = t->readers[r]) == NULL && (rd = calloc(1, sizeof *rd)) != NULL)
            __atomic_store_n(&t->readers[r], rd, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&t->lanes_lock);
        if (rd == NULL)
            return NULL;
    }
    if (RKV_UNLIKELY(rd->land.size < len)) {
        struct rkv_rdma_buf b = { 0 };
        if (rkv_rdma_buf_alloc(t->pd, len, IBV_ACCESS_LOCAL_WRITE, "READ lane landing buffer", &b,
                               err, sizeof err) != RKV_OK) {
            RKV_WARN("rdma %s: %s", t->peer, err);
            return NULL;
        }
        rkv_rdma_buf_free(&rd->land);
        rd->land = b;
    }
    return rd;
}

static void lane_fail(struct read_lane *ln, const char *why)
{
    if (!__atomic_load_n(&ln->dead, __ATOMIC_ACQUIRE)) {
        snprintf(ln->why, sizeof ln->why, "%s", why);
        __atomic_store_n(&ln->dead, 1, __ATOMIC_RELEASE);
    }
}

/* Under the lane's lock: take its completions, each to the reader whose
 * read it belongs to (a late one of an abandoned read is dropped). */
static void lane_poll(struct rdma_ctrans *t, struct read_lane *ln)
{
    struct ibv_wc wcs[16];
    int n = ibv_poll_cq(ln->cq, (int)RKV_ARRAY_SIZE(wcs), wcs);

    if (RKV_UNLIKELY(n < 0)) {
        lane_fail(ln, "ibv_poll_cq failed on a READ lane");
        return;
    }
    for (int i = 0; i < n; i++) {
        uint32_t r = rkv_lane_wr_reader(wcs[i].wr_id);
        struct lane_reader **all = __atomic_load_n(&t->readers, __ATOMIC_ACQUIRE);
        struct lane_reader *rd = r < RKV_SHARED_READERS_MAX && all != NULL
                                     ? __atomic_load_n(&all[r], __ATOMIC_ACQUIRE)
                                     : NULL;
        ln->outstanding--;
        if (RKV_UNLIKELY(wcs[i].status != IBV_WC_SUCCESS)) {
            char msg[300];
            rkv_rdma_wc_error(wcs[i].status, "RDMA READ on a READ lane", msg, sizeof msg);
            lane_fail(ln, msg);
        }
        if (rd == NULL ||
            __atomic_load_n(&rd->seq, __ATOMIC_RELAXED) != rkv_lane_wr_seq(wcs[i].wr_id))
            continue;
        if (wcs[i].status != IBV_WC_SUCCESS)
            __atomic_store_n(&rd->failed, (int)wcs[i].status, __ATOMIC_RELAXED);
        __atomic_sub_fetch(&rd->left, 1, __ATOMIC_RELEASE);
    }
}

/* Post rd's n READs (wrs chained) on the lane, once it has room. */
static rkv_status lane_post(struct rdma_ctrans *t, struct read_lane *ln, struct ibv_send_wr *wrs,
                            unsigned n)
{
    struct ibv_send_wr *bad = NULL;
    rkv_status st = RKV_OK;

    pthread_spin_lock(&ln->lock);
    while (ln->outstanding + n > LANE_DEPTH && !__atomic_load_n(&ln->dead, __ATOMIC_ACQUIRE))
        lane_poll(t, ln);
    if (__atomic_load_n(&ln->dead, __ATOMIC_ACQUIRE))
        st = RKV_CONNECTION;
    else if (RKV_UNLIKELY(ibv_post_send(ln->qp, wrs, &bad) != 0)) {
        lane_fail(ln, "ibv_post_send (RDMA READ on a READ lane) failed");
        st = RKV_CONNECTION;
    } else {
        ln->outstanding += n;
    }
    pthread_spin_unlock(&ln->lock);
    return st;
}

/* Wait until rd's READs have completed, polling the lane whenever no other
 * waiter is; bounded by the connection's timeout. */
static rkv_status lane_wait(struct rdma_ctrans *t, struct read_lane *ln, struct lane_reader *rd)
{
    uint64_t deadline = 0;
    unsigned spins = 0;

    while (__atomic_load_n(&rd->left, __ATOMIC_ACQUIRE) != 0) {
        if (pthread_spin_trylock(&ln->lock) == 0) {
            lane_poll(t, ln);
            pthread_spin_unlock(&ln->lock);
        }
        if (RKV_UNLIKELY((++spins & 1023u) == 0)) {
            uint64_t now = rkv_now_ns();
            if (deadline == 0)
                deadline = now + t->timeout_ms * 1000000ull;
            if (now >= deadline) {
                lane_fail(ln, "a READ lane's READ did not complete in time");
                return RKV_TIMEOUT;
            }
            if (__atomic_load_n(&ln->dead, __ATOMIC_ACQUIRE) &&
                __atomic_load_n(&rd->left, __ATOMIC_ACQUIRE) != 0)
                return RKV_CONNECTION; /* the lane failed: its flushes may not come */
        }
    }
    return __atomic_load_n(&rd->failed, __ATOMIC_RELAXED) != 0 ? RKV_CONNECTION : RKV_OK;
}

/* read() for any thread: reader's READs on its lane, landing in the
 * reader's registered buffer and copied to `local` (a GET round's few
 * lines, beside a round trip). */
static rkv_status cli_read_shared(struct rkv_ctrans *ctrans, unsigned reader,
                                  const struct rkv_read_op *ops, unsigned n, const void *local,
                                  size_t local_len)
{
    struct rdma_ctrans *t = rdma_ctrans_of(ctrans);
    struct ibv_send_wr wrs[MAX_READS];
    struct ibv_sge sges[MAX_READS];
    const uint8_t *lo = local;

    if (RKV_UNLIKELY(t->lanes_max == 0 || reader >= RKV_SHARED_READERS_MAX ||
                     __atomic_load_n(&t->lanes_off, __ATOMIC_RELAXED)))
        return RKV_SERVER_BUSY;
    if (RKV_UNLIKELY(n > MAX_READS))
        return RKV_INVALID;
    struct read_lane *ln = lane_get(t, rkv_lane_pick(reader, t->lanes_max));
    struct lane_reader *rd = ln != NULL ? reader_get(t, reader, local_len) : NULL;
    if (RKV_UNLIKELY(rd == NULL))
        return RKV_SERVER_BUSY;
    if (RKV_UNLIKELY(__atomic_load_n(&ln->dead, __ATOMIC_ACQUIRE)))
        return RKV_CONNECTION; /* cli_why() says why */
    uint32_t seq = __atomic_load_n(&rd->seq, __ATOMIC_RELAXED) + 1;
    for (unsigned i = 0; i < n; i++) {
        const struct rkv_read_op *op = &ops[i];
        const uint8_t *d = op->dst;
        if (RKV_UNLIKELY(op->len == 0 || op->offset > t->region_size ||
                         op->len > t->region_size - op->offset || d < lo || d > lo + local_len ||
                         op->len > (size_t)(lo + local_len - d)))
            return RKV_INVALID;
        sges[i] = (struct ibv_sge){ .addr = (uintptr_t)(rd->land.mem + (d - lo)),
                                    .length = op->len,
                                    .lkey = rd->land.mr->lkey };
        wrs[i] = (struct ibv_send_wr){ .wr_id = rkv_lane_wr_id(reader, seq),
                                       .next = i + 1 < n ? &wrs[i + 1] : NULL,
                                       .sg_list = &sges[i],
                                       .num_sge = 1,
                                       .opcode = IBV_WR_RDMA_READ,
                                       .send_flags = IBV_SEND_SIGNALED,
                                       .wr.rdma = { .remote_addr = t->region_addr + op->offset,
                                                    .rkey = t->rkey } };
    }
    __atomic_store_n(&rd->seq, seq, __ATOMIC_RELAXED);
    __atomic_store_n(&rd->failed, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&rd->left, n, __ATOMIC_RELAXED);
    rkv_status st = lane_post(t, ln, wrs, n);
    if (st == RKV_OK)
        st = lane_wait(t, ln, rd);
    if (RKV_UNLIKELY(st != RKV_OK)) {
        __atomic_store_n(&rd->seq, seq + 1, __ATOMIC_RELAXED); /* late completions: not ours */
        return st;
    }
    for (unsigned i = 0; i < n; i++)
        memcpy(ops[i].dst, rd->land.mem + ((const uint8_t *)ops[i].dst - lo), ops[i].len);
    return RKV_OK;
}

static void *cli_send_buf(struct rkv_ctrans *ctrans, unsigned i)
{
    struct rdma_ctrans *t = rdma_ctrans_of(ctrans);
    if (!t->have_region)
        return i == 0 ? rkv_rdma_ring_slot(&t->boot, 0) : NULL;
    return i < t->credits ? rkv_rdma_ring_slot(&t->sends, i) : NULL;
}

static rkv_status cli_send(struct rkv_ctrans *ctrans, const uint32_t *lens, unsigned n)
{
    struct rdma_ctrans *t = rdma_ctrans_of(ctrans);
    struct rkv_rdma_ring *ring = t->have_region ? &t->sends : &t->boot;
    unsigned inlined;
    rkv_status st;

    if (RKV_UNLIKELY(t->dead))
        return RKV_CONNECTION;
    if (RKV_UNLIKELY(n > t->credits - t->inflight))
        return RKV_INVALID; /* over the window: refused, not queued */
    for (unsigned i = 0; i < n; i++)
        if (RKV_UNLIKELY(lens[i] > ring->stride))
            return RKV_INVALID;
    if (!t->have_region && !t->boot_posted && post_boot_recv(t) != 0) {
        rdma_client_fail(t, "ibv_post_recv failed");
        return RKV_CONNECTION;
    }
    if (t->repost_count > 0) {
        if (RKV_UNLIKELY(rkv_rdma_post_recvs(t->qp, &t->recvs, t->max_msg, t->repost,
                                             t->repost_count, t->rwr, t->rsge) != 0)) {
            rdma_client_fail(t, "ibv_post_recv failed");
            return RKV_CONNECTION;
        }
        t->repost_count = 0;
    }
    st = sq_wait(t, t->sq.depth - n, "waiting for send queue room");
    if (RKV_UNLIKELY(st != RKV_OK))
        return st;
    int rc = rkv_rdma_post_sends(t->qp, &t->sq, ring, lens, n, t->max_inline, t->swr, t->ssge,
                                 &inlined);
    if (RKV_UNLIKELY(rc != 0)) {
        char msg[200];
        rkv_rdma_errno_error(rc, "ibv_post_send", msg, sizeof msg);
        rdma_client_fail(t, msg);
        return RKV_CONNECTION;
    }
    t->inflight += n;
    t->ctr->doorbells++;
    t->ctr->sends += n;
    t->ctr->inline_sends += inlined;
    /* The ring's next slots must be free before the caller writes them. */
    return sq_wait(t, t->sq.keep, "sending requests");
}

/* Release the message recv() handed out (also done implicitly by the next recv()). */
static void cli_recv_done(struct rkv_ctrans *ctrans)
{
    struct rdma_ctrans *t = rdma_ctrans_of(ctrans);
    if (t->cur_boot) {
        t->cur_boot = false; /* send() re-posts it if another bootstrap message comes */
    } else if (t->cur_slot != NO_SLOT) {
        t->repost[t->repost_count++] = t->cur_slot;
        t->cur_slot = NO_SLOT;
    }
}

/* Take (and acknowledge) the completion events queued on the channel. */
static void drain_comp_events(struct rdma_ctrans *t)
{
    struct ibv_cq *cq;
    void *ctx;
    unsigned n = 0;
    while (ibv_get_cq_event(t->comp, &cq, &ctx) == 0)
        n++;
    if (n > 0)
        ibv_ack_cq_events(t->recv_cq, n);
}

/* recv() found nothing for SPIN_NS: ask for an event on the next reply,
 * look once more, and sleep on the completion channel and the rdma_cm
 * channel (a disconnect) for at most left_ns. Returns with completions
 * possibly in t->wcs. */
static void sleep_for_reply(struct rdma_ctrans *t, uint64_t left_ns)
{
    drain_comp_events(t);
    if (ibv_req_notify_cq(t->recv_cq, 0) != 0) {
        rdma_client_fail(t, "ibv_req_notify_cq failed");
        return;
    }
    int n = ibv_poll_cq(t->recv_cq, (int)RKV_ARRAY_SIZE(t->wcs), t->wcs);
    if (n != 0) { /* a reply came in before the arming */
        if (n > 0) {
            t->wc_next = 0;
            t->wc_count = (unsigned)n;
        }
        return; /* n < 0: the caller's next poll reports it */
    }
    struct pollfd pfd[2] = { { .fd = t->comp->fd, .events = POLLIN },
                             { .fd = t->channel->fd, .events = POLLIN } };
    int ms = (int)RKV_MIN((left_ns + 999999) / 1000000, (uint64_t)SLEEP_MAX_MS);
    if (poll(pfd, 2, ms) > 0 && (pfd[1].revents & POLLIN))
        check_cm(t);
    drain_comp_events(t);
}

static rkv_status cli_recv(struct rkv_ctrans *ctrans, const void **msg, size_t *len,
                           unsigned timeout_ms)
{
    struct rdma_ctrans *t = rdma_ctrans_of(ctrans);
    uint64_t start = 0, deadline = 0, next_cm = 0;
    unsigned idle = 0;

    cli_recv_done(ctrans);
    for (;;) {
        /* Replies that arrived before the server went away still count:
         * the CQ is drained before a disconnect is reported. */
        if (t->wc_count > 0) {
            const struct ibv_wc *wc = &t->wcs[t->wc_next];
            t->wc_next++;
            t->wc_count--;
            if (RKV_UNLIKELY(wc->status != IBV_WC_SUCCESS))
                return wc_fail(t, wc->status, "receiving a reply");
            if (wc->wr_id == BOOT_WR_ID) {
                t->boot_posted = false;
                t->cur_boot = true;
                *msg = t->boot.buf.mem + RKV_RDMA_BOOT_MSG;
            } else if (RKV_LIKELY(wc->wr_id < t->credits && t->have_region)) {
                t->cur_slot = (uint32_t)wc->wr_id;
                *msg = t->recvs.mem + (size_t)t->cur_slot * t->max_msg;
            } else {
                rdma_client_fail(t, "unexpected receive completion");
                return RKV_CONNECTION;
            }
            *len = wc->byte_len;
            if (t->inflight > 0)
                t->inflight--;
            return RKV_OK;
        }
        int n = ibv_poll_cq(t->recv_cq, (int)RKV_ARRAY_SIZE(t->wcs), t->wcs);
        if (RKV_UNLIKELY(n < 0)) {
            rdma_client_fail(t, "ibv_poll_cq failed");
            return RKV_CONNECTION;
        }
        if (n > 0) {
            t->wc_next = 0;
            t->wc_count = (unsigned)n;
            continue;
        }
        if (RKV_UNLIKELY(t->dead))
            return RKV_CONNECTION;
        if ((++idle & 127u) != 0)
            continue;
        uint64_t now = rkv_now_ns();
        if (start == 0) {
            start = now;
            deadline = now + timeout_ms * 1000000ull;
        }
        if (now >= deadline)
            return RKV_TIMEOUT;
        if (now >= next_cm) { /* a closed connection should not look like a timeout */
            check_cm(t);
            next_cm = now + 1000000ull;
        }
        if (now - start > SPIN_NS)
            sleep_for_reply(t, deadline - now);
    }
}

static void *cli_staging(struct rkv_ctrans *ctrans, size_t *cap, struct rkv_remote_buf *desc)
{
    struct rdma_ctrans *t = rdma_ctrans_of(ctrans);
    *cap = RKV_RDMA_STAGING_SIZE;
    desc->addr = (uint64_t)(uintptr_t)t->staging.mem;
    desc->rkey = t->staging.mr->rkey;
    desc->len = 0;
    return t->staging.mem;
}

static const char *cli_why(struct rkv_ctrans *ctrans)
{
    struct rdma_ctrans *t = rdma_ctrans_of(ctrans);
    for (unsigned i = 0; t->why[0] == '\0' && i < RKV_LANES_MAX; i++) {
        const struct read_lane *ln = __atomic_load_n(&t->lanes[i], __ATOMIC_ACQUIRE);
        if (ln != NULL && __atomic_load_n(&ln->dead, __ATOMIC_ACQUIRE))
            return ln->why; /* written once, before dead */
    }
    return t->why;
}

const struct rkv_client_transport rkv_rdma_client_transport = {
    .scheme = "rdma",
    .read_cost = cli_read_cost,
    .connect = cli_connect_to,
    .set_region = cli_set_region,
    .local_buf = cli_local_buf,
    .read = cli_read,
    .read_shared = cli_read_shared,
    .send_buf = cli_send_buf,
    .send = cli_send,
    .recv = cli_recv,
    .recv_done = cli_recv_done,
    .staging = cli_staging,
    .close = cli_close,
    .why = cli_why,
};
