/* rdma_server.c — the rdma server transport (libibverbs + librdmacm, RC QPs).
 *
 * One listener per address. At listen() the table region is registered ONCE
 * as a single memory region with LOCAL_WRITE | REMOTE_READ (never remote
 * write; relaxed ordering when the device takes it); clients read it with
 * one-sided RDMA READs using the rkey/address region_desc() reports, and the
 * server CPU never sees a GET. Everything else travels as SEND/RECV:
 *
 *   client ── SEND request ──► a buffer of its worker's shared receive queue
 *                              (rdma_srq.h; without one, credits slots per QP)
 *          ◄── SEND reply ───  a buffer of its worker's reply pool (reply_pool.h;
 *                              inline when small, one doorbell per batch, one WR
 *                              in signal_interval signaled)
 *   server ── RDMA READ ─────► client staging buffer (rendezvous pull)
 *
 * Device choice: a listener bound to a specific IP uses the device rdma_cm
 * binds that IP to. A wildcard listener (0.0.0.0 / ::) has no device until a
 * request arrives, but the region must be registered on exactly one device
 * (region_desc() reports one rkey), so it uses params->device, or the only
 * RDMA device of the host; with several devices and none named, listen()
 * fails and says so. Connect requests that arrive on another device are
 * rejected with a reason the client prints.
 *
 * Threads: the listener thread runs accept(), which handles every rdma_cm
 * event (connection setup and teardown). A connection handed to a worker is
 * then touched by the listener only while it holds an unacknowledged event
 * for it: it sets the atomic `dead` flag and, under `close_lock`, moves the
 * QP to the error state so an event-mode worker wakes up. The worker's
 * close() blocks in rdma_destroy_id() until that event is acknowledged, so
 * the listener never sees freed memory. PD, region MR and the event channel
 * are shared (refcounted) by the listener and its connections, so either
 * may be closed first.
 *
 * READ lanes (RKV_RDMA_CONNECT_LANE in the connect's private data, with the
 * listener's lane key from a HELLO reply): a QP a shared handle's threads
 * READ the region through (client/rdma_client.c). The listener keeps them
 * itself, never a worker's: no credits, receive or reply buffers, one
 * zero-length receive posted on one CQ all lanes share, so a lane that sends
 * anything raises a completion there and is closed. At most max_conns lanes
 * (a bound of their own); a lane goes with its client's disconnect.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "log.h"
#include "qp_table.h"
#include "rdma_srq.h"
#include "rdma_util.h"
#include "reply_batch.h"
#include "reply_pool.h"
#include "staging_pool.h"
#include "transport.h"
#include "util.h"

#define MAX_CREDITS      4096u
#define LISTEN_BACKLOG   128
#define PULL_TIMEOUT_MS  10000u
#define REPLY_TIMEOUT_MS 10000u
#define ARRIVALS_AT_ONCE 32u /* receive completions taken per ibv_poll_cq of a worker's CQ */

struct rdma_sconn;

/* Scratch arrays for posting and polling, credits entries each (wcs one
 * more): one set per thread that works on connections, not per connection
 * (they were 16 KiB of each one at the defaults). */
struct rdma_scratch {
    uint32_t *repost;        /* slots to give back */
    struct ibv_wc *wcs;      /* credits + 1 completions */
    struct ibv_send_wr *swr; /* send WRs */
    struct ibv_sge *ssge;
    struct ibv_recv_wr *rwr; /* recv WRs */
    struct ibv_sge *rsge;
};

/* What one worker's connections share besides its SRQ: the reply pool
 * (reply_pool.h) and the list of its connections with reply sends in
 * flight, which a connection that finds the pool empty reaps. The worker
 * alone touches them (its connections are only ever its own); the listener
 * only counts `conns`.
 *
 * On a shared receive queue, also the one receive CQ all its connections'
 * QPs complete their receives on (as deep as the queue: see "Receive
 * completions" in rdma_conn_create and design.md), its completion channel
 * (the transport's wake_fd) and which connection each QP number is
 * (qp_table.h). The listener adds a connection to the table when it sets
 * one up; the worker polls the CQ and hands each completion to its
 * connection; whoever closes a connection (the worker, or the listener
 * for one not handed over) takes it out (conn_leave_table): all of that
 * under table_lock. Everything else here is the worker's alone. */
struct rdma_worker {
    struct rkv_reply_pool pool;
    atomic_uint conns;
    struct rdma_sconn *holders; /* connections with sent_count > 0 */
    struct rdma_scratch scratch;
    bool grow_warned;                   /* the pool could not grow, logged once */
    struct rkv_srq *q;                  /* its shared receive queue, or NULL: none of the below */
    struct ibv_comp_channel *recv_comp; /* wake_fd: a receive completed while notified */
    struct ibv_cq *recv_cq;             /* every receive of its connections' QPs */
    pthread_mutex_t table_lock;         /* the table, the stash, polling recv_cq, c->armed */
    struct rkv_qp_table table;          /* QP number -> struct rdma_sconn */
    struct ibv_wc *stash;               /* taken from recv_cq by a closing connection (any thread),
                                           for the worker, in order: as many as the queue's buffers */
    uint32_t stash_head, stash_count;
    unsigned cq_events; /* completion events taken, not yet acked */
    atomic_uint armed;  /* its connections that asked for a wake-up (arm) */
    bool notified;      /* recv_cq is armed and its event not taken yet */
};

/* What the listener and all its connections share; freed with the last reference. */
struct srv_shared {
    atomic_uint refs;                   /* the listener + each live connection */
    atomic_uint conns;                  /* connections set up or handed out */
    struct rdma_event_channel *channel; /* all cm events of the listener and its connections */
    struct ibv_context *verbs;          /* rdma_cm's context of the device the region is on */
    struct ibv_pd *pd;
    struct ibv_mr *region_mr; /* the whole table region, REMOTE_READ */
    uint8_t *region_base;
    size_t region_size;
    struct rkv_rdma_caps caps;  /* device limits */
    uint32_t credits;           /* receive slots per connection */
    uint32_t max_msg;           /* bytes per receive / reply slot */
    uint32_t max_conns;         /* set up + handed out: max_conns + max_unauth_conns */
    _Atomic uint64_t *rejected; /* the server's "busy" refusal counter, or NULL */
    uint32_t max_inline;        /* requested inline size */
    uint32_t interval;          /* signal one send in N */
    uint32_t cq_size;           /* 0: 2x the queue it serves */
    unsigned ack_timeout;       /* RC retransmission (rdma_util.h) */
    unsigned retry_count;
    struct rkv_rdma_buf probe; /* where keepalive probes land (contents unused) */
    struct rkv_srq *srqs;      /* one per worker; NULL: receive buffers per QP */
    uint32_t nsrq;
    struct rdma_worker *workers;       /* one per worker: reply pools */
    struct rdma_scratch setup_scratch; /* the listener thread's (connections not handed out) */
    uint32_t nworkers;
    struct rkv_staging_pool staging; /* pull targets outside the region: one per worker at most */
};

struct rdma_listener {
    struct rkv_listener listener; /* first: what the ops take (transport.h) */
    struct srv_shared *sh;
    struct rdma_cm_id *id;    /* the listening id */
    int epfd;                 /* listener_fd: the cm channel and the device's async events */
    struct rdma_sconn *setup; /* accepted, not yet ESTABLISHED: owned by the listener */
    char addr[80];            /* for logs */
    /* READ lanes: the listener's alone (see the top of the file) */
    struct rdma_lane *lanes;
    unsigned nlanes;
    uint32_t lane_key;                  /* a random nonzero key a lane's connect must carry */
    uint64_t lane_serials;              /* the last lane's serial (its receive's wr_id) */
    struct ibv_comp_channel *lane_comp; /* in epfd: a lane's receive completed */
    struct ibv_cq *lane_cq;             /* every lane's send and receive queue */
};

/* A READ lane: an RC QP that carries one-sided READs of the region only. */
struct rdma_lane {
    struct rdma_cm_id *id;
    uint64_t serial; /* its receive's wr_id: a flushed one of a gone lane names no other */
    struct rdma_lane *next;
    char peer[80];
};

struct rdma_sconn {
    struct rkv_sconn sconn; /* first: what the ops take (transport.h) */
    struct srv_shared *sh;
    struct rdma_cm_id *id;
    struct ibv_comp_channel *comp; /* no shared queue: wakes an event-mode worker on requests */
    struct ibv_cq *send_cq;        /* replies and pulls */
    struct ibv_cq *recv_cq;        /* no shared queue: requests (else wk->recv_cq) */
    int wake_efd;                  /* shared queue: event_fd, made readable by the worker's
                                      wake() when requests came for an armed connection */
    uint32_t qp_num;               /* its QP's number: its key in wk->table */
    bool in_table;                 /* in wk->table */
    bool signaled;                 /* wake_efd was made readable: poll() reads it */
    struct rkv_rdma_sq sq;
    uint32_t max_inline;       /* what the QP granted */
    uint32_t worker;           /* its worker: sh->workers[worker], sh->srqs[worker] */
    struct rdma_worker *wk;    /* sh->workers[worker]: its reply pool */
    struct rkv_srq *q;         /* its worker's shared receive queue, or NULL: */
    struct rkv_rdma_buf recvs; /* without one, credits slots of max_msg; wr_id = slot */
    uint32_t *polled;          /* FIFO of slots received and not answered: the first `handed`
                                  poll() returned (the batch), the rest wait for the next poll() */
    uint32_t *reply_of;        /* the reply buffer (wk->pool) of each handed request, by its
                                  place in that FIFO */
    uint32_t *sent_buf;        /* FIFO of reply buffers in sends not known to have completed */
    uint64_t *sent_wr;         /* ... and the number (sq.taken) of each one's WR */
    unsigned sent_head;
    unsigned sent_count;          /* handed + sent_count <= credits: what it holds of the pool */
    uint64_t released;            /* reply buffers given back after their send, ever */
    uint64_t released_seen;       /* ... at the last look for stuck sends */
    uint64_t progress_at;         /* rkv_now_ns() of that look; 0: none yet */
    struct rdma_sconn *hold_next; /* wk->holders */
    struct rdma_sconn *hold_prev;
    bool holding;   /* on wk->holders */
    uint32_t *lens; /* their byte counts */
    unsigned polled_head;
    unsigned polled_count;
    unsigned handed;
    struct rdma_scratch *s; /* sh->setup_scratch until handed to its worker, then wk->scratch */
    unsigned cq_events;     /* completion events taken, not yet acked */
    uint64_t requests;      /* requests polled, ever */
    uint64_t requests_seen; /* ... at the last keepalive look */
    uint64_t probe_at;      /* rkv_now_ns() of the next keepalive probe; 0: not started */
    struct rkv_rdma_connect_info probe; /* the client's probe buffer; magic 0: none named */
    bool armed;                         /* worker: arm() asked for a completion event (on a
                                           shared queue: until a request comes) */
    bool established;                   /* listener: handed to a worker */
    bool reported;                      /* worker: the failure was logged */
    bool closing;                       /* under close_lock: the worker is tearing the QP down */
    atomic_bool dead;                   /* peer gone or broke the protocol */
    pthread_mutex_t close_lock;         /* listener's disconnect vs worker's close */
    struct rdma_sconn *next;            /* listener's setup list */
    char peer[80];                      /* "rdma 192.0.2.1:40000" */
};

static inline struct rdma_listener *rdma_listener_of(struct rkv_listener *listener)
{
    return RKV_CONTAINER_OF(listener, struct rdma_listener, listener);
}

static inline struct rdma_sconn *rdma_sconn_of(struct rkv_sconn *sconn)
{
    return RKV_CONTAINER_OF(sconn, struct rdma_sconn, sconn);
}

/* ------------------------------------------------------------ shared state */

static void scratch_free(struct rdma_scratch *s)
{
    free(s->repost);
    free(s->wcs);
    free(s->swr);
    free(s->ssge);
    free(s->rwr);
    free(s->rsge);
}

static bool scratch_alloc(struct rdma_scratch *s, uint32_t credits)
{
    s->repost = calloc(credits, sizeof *s->repost);
    s->wcs = calloc(credits + 1, sizeof *s->wcs);
    s->swr = calloc(credits, sizeof *s->swr);
    s->ssge = calloc(credits, sizeof *s->ssge);
    s->rwr = calloc(credits, sizeof *s->rwr);
    s->rsge = calloc(credits, sizeof *s->rsge);
    return s->repost && s->wcs && s->swr && s->ssge && s->rwr && s->rsge;
}

/* A worker's shared receive CQ, its channel and table (make_srqs); none
 * of its connections is left. */
static void worker_cq_destroy(struct rdma_worker *wk)
{
    if (wk->q == NULL)
        return;
    if (wk->cq_events > 0)
        ibv_ack_cq_events(wk->recv_cq, wk->cq_events);
    if (wk->recv_cq != NULL)
        ibv_destroy_cq(wk->recv_cq);
    if (wk->recv_comp != NULL)
        ibv_destroy_comp_channel(wk->recv_comp);
    rkv_qp_table_destroy(&wk->table);
    free(wk->stash);
    pthread_mutex_destroy(&wk->table_lock);
    wk->q = NULL;
}

static void shared_put(struct srv_shared *sh)
{
    if (atomic_fetch_sub(&sh->refs, 1) != 1)
        return;
    rkv_staging_pool_destroy(&sh->staging);
    for (uint32_t i = 0; sh->workers != NULL && i < sh->nworkers; i++) {
        worker_cq_destroy(&sh->workers[i]);
        rkv_reply_pool_destroy(&sh->workers[i].pool);
        scratch_free(&sh->workers[i].scratch);
    }
    scratch_free(&sh->setup_scratch);
    free(sh->workers);
    for (uint32_t i = 0; sh->srqs != NULL && i < sh->nsrq; i++)
        rkv_srq_destroy(&sh->srqs[i]);
    free(sh->srqs);
    if (sh->region_mr != NULL)
        ibv_dereg_mr(sh->region_mr);
    rkv_rdma_buf_free(&sh->probe);
    if (sh->pd != NULL)
        ibv_dealloc_pd(sh->pd);
    if (sh->channel != NULL)
        rdma_destroy_event_channel(sh->channel);
    free(sh);
}

/* ------------------------------------------------------------ connections */

static void conn_fail(struct rdma_sconn *c, const char *msg)
{
    atomic_store(&c->dead, true);
    if (!c->reported) {
        c->reported = true;
        RKV_WARN("%s: %s; closing the connection", c->peer, msg);
    }
}

static void conn_wc_fail(struct rdma_sconn *c, enum ibv_wc_status st, const char *what)
{
    char msg[400];
    enum ibv_wc_status cause = IBV_WC_WR_FLUSH_ERR;

    /* A flush hides the cause; a failed reply, pull or keepalive probe may
     * be waiting on the send queue with it (retries exceeded: the peer's
     * link or host is gone). */
    if (st == IBV_WC_WR_FLUSH_ERR && rkv_rdma_sq_poll(&c->sq, c->send_cq, &cause) != 0 &&
        cause != IBV_WC_WR_FLUSH_ERR) {
        st = cause;
        what = "a transfer to the peer (a reply, a value pull or a keepalive probe)";
    }
    if (st == IBV_WC_WR_FLUSH_ERR) { /* the peer left; nothing to explain */
        atomic_store(&c->dead, true);
        return;
    }
    rkv_rdma_wc_error(st, what, msg, sizeof msg);
    conn_fail(c, msg);
}

static void free_conn_arrays(struct rdma_sconn *c)
{
    free(c->polled);
    free(c->reply_of);
    free(c->sent_buf);
    free(c->sent_wr);
    free(c->lens);
}

/* ------------------------------------------------------------ reply buffers */

static void holder_link(struct rdma_sconn *c)
{
    struct rdma_worker *wk = c->wk;

    if (c->holding)
        return;
    c->holding = true;
    c->hold_prev = NULL;
    c->hold_next = wk->holders;
    if (wk->holders != NULL)
        wk->holders->hold_prev = c;
    wk->holders = c;
}

static void holder_unlink(struct rdma_sconn *c)
{
    if (!c->holding)
        return;
    c->holding = false;
    if (c->hold_prev != NULL)
        c->hold_prev->hold_next = c->hold_next;
    else
        c->wk->holders = c->hold_next;
    if (c->hold_next != NULL)
        c->hold_next->hold_prev = c->hold_prev;
    c->hold_next = c->hold_prev = NULL;
}

/* Give back the reply buffers whose sends have completed: RC completes in
 * order, so the first sq.taken - sq.outstanding WRs have. */
static void release_sent(struct rdma_sconn *c)
{
    const uint32_t credits = c->sh->credits;
    const uint64_t done = c->sq.taken - c->sq.outstanding;

    while (c->sent_count > 0 && c->sent_wr[c->sent_head] <= done) {
        rkv_reply_pool_give(&c->wk->pool, c->sent_buf[c->sent_head]);
        c->sent_head = (c->sent_head + 1) % credits;
        c->sent_count--;
        c->released++;
    }
    if (c->sent_count == 0)
        holder_unlink(c);
}

/* A send that failed or was flushed: the device is done with it all the
 * same. A flush means the QP went to the error state (the peer left, or
 * check_stuck below): nothing to explain. */
static void send_wc_fail(struct rdma_sconn *c, enum ibv_wc_status st)
{
    char msg[400];

    if (st == IBV_WC_WR_FLUSH_ERR) {
        atomic_store(&c->dead, true);
        return;
    }
    rkv_rdma_wc_error(st, "a transfer to the peer (a reply, a value pull or a keepalive probe)",
                      msg, sizeof msg);
    conn_fail(c, msg);
}

/* Account every completion on c's send CQ, failed and flushed ones too,
 * and give back the reply buffers they cover. */
static void reap_sends(struct rdma_sconn *c)
{
    struct ibv_wc wc[16];
    int n;

    do {
        n = ibv_poll_cq(c->send_cq, (int)RKV_ARRAY_SIZE(wc), wc);
        for (int i = 0; i < n; i++) {
            if (RKV_UNLIKELY(wc[i].status != IBV_WC_SUCCESS))
                send_wc_fail(c, wc[i].status);
            rkv_rdma_sq_done(&c->sq, wc[i].wr_id);
        }
    } while (n == (int)RKV_ARRAY_SIZE(wc));
    if (RKV_UNLIKELY(n < 0))
        conn_fail(c, "ibv_poll_cq failed on the send queue");
    release_sent(c);
}

/* A connection whose reply sends made no progress for REPLY_TIMEOUT_MS has
 * a peer that stopped taking them (its NIC answers RNR for ever; a dead one
 * is caught sooner, by the RC retries): it is failed, and its QP moved to
 * the error state, which flushes those sends so their buffers come back at
 * the next reap, not only when the worker closes it. */
static void check_stuck(struct rdma_sconn *c, uint64_t now)
{
    struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

    if (c->sent_count == 0 || c->released != c->released_seen || c->progress_at == 0) {
        c->released_seen = c->released;
        c->progress_at = now;
        return;
    }
    if (now - c->progress_at < REPLY_TIMEOUT_MS * 1000000ull)
        return;
    conn_fail(c, "the peer took no reply for 10 s (it stopped receiving)");
    pthread_mutex_lock(&c->close_lock);
    if (!c->closing && ibv_modify_qp(c->id->qp, &a, IBV_QP_STATE) != 0)
        RKV_DEBUG("%s: cannot move the QP to the error state: %s", c->peer, strerror(errno));
    pthread_mutex_unlock(&c->close_lock);
}

/* Wait (bounded) until c holds fewer reply buffers than its credits: its
 * own sends, the last of each batch signaled, complete within a round trip
 * of a live peer. false: the connection failed. */
static bool wait_own_sends(struct rdma_sconn *c)
{
    uint64_t deadline = 0, now;
    unsigned empty = 0;

    for (;;) {
        reap_sends(c);
        if (atomic_load_explicit(&c->dead, memory_order_relaxed))
            return false;
        if (c->handed + c->sent_count < c->sh->credits)
            return true;
        if ((++empty & 255u) != 0)
            continue;
        now = rkv_now_ns();
        if (deadline == 0) {
            deadline = now + REPLY_TIMEOUT_MS * 1000000ull;
        } else if (now > deadline) {
            conn_fail(c, "the peer did not complete a transfer in time");
            return false;
        }
    }
}

/* The pool is empty and can grow no more: its buffers are in replies of
 * this worker's connections, being answered (a batch not posted yet, held
 * for the rest of its client's batch: reply_batch.h) or in sends. With no
 * send in flight only this worker can free one, by posting those batches:
 * the pool grows past its bound instead (the bound then grows, logged).
 * Otherwise reap the connections with sends in flight until one comes back.
 * Each holds at most its credits, and one that stopped taking replies is
 * failed and flushed (check_stuck), so the wait ends within about
 * REPLY_TIMEOUT_MS of the oldest stuck send; twice that, and c gives up. */
static bool wait_pool(struct rdma_sconn *c, uint32_t *idx)
{
    struct rdma_worker *wk = c->wk;
    uint64_t deadline = 0, now;
    unsigned empty = 0;

    for (;;) {
        if (wk->holders == NULL && rkv_reply_pool_out(&wk->pool) > 0 &&
            rkv_reply_pool_grow_past(&wk->pool)) {
            RKV_INFO("rdma: a reply pool grew past its bound to %u buffers: all were in replies "
                     "being answered",
                     rkv_reply_pool_count(&wk->pool));
            if (rkv_reply_pool_take(&wk->pool, idx))
                return true;
        }
        for (struct rdma_sconn *h = wk->holders, *next; h != NULL; h = next) {
            next = h->hold_next;
            reap_sends(h);
        }
        if (rkv_reply_pool_take(&wk->pool, idx))
            return true;
        if (atomic_load_explicit(&c->dead, memory_order_relaxed))
            return false;
        if (rkv_reply_pool_out(&wk->pool) == 0) { /* none out and none registered */
            conn_fail(c, "cannot register reply buffers (memlock?)");
            return false;
        }
        if ((++empty & 255u) != 0)
            continue;
        now = rkv_now_ns();
        for (struct rdma_sconn *h = wk->holders; h != NULL; h = h->hold_next)
            check_stuck(h, now);
        if (deadline == 0) {
            deadline = now + 2 * REPLY_TIMEOUT_MS * 1000000ull;
        } else if (now > deadline) {
            conn_fail(c, "no reply buffer came free in time");
            return false;
        }
    }
}

/* A reply buffer for the next request poll() hands out: within c's share
 * (handed + sent_count < credits), from its worker's pool. */
static bool take_reply_buf(struct rdma_sconn *c, uint32_t *idx)
{
    struct rdma_worker *wk = c->wk;

    if (c->handed + c->sent_count >= c->sh->credits && !wait_own_sends(c))
        return false;
    if (RKV_LIKELY(rkv_reply_pool_take(&wk->pool, idx)))
        return true;
    if (wk->pool.grow_failures > 0 && !wk->grow_warned) {
        wk->grow_warned = true;
        RKV_WARN("rdma: cannot register more reply buffers past %u (memlock?); replies wait for "
                 "buffers in use",
                 rkv_reply_pool_count(&wk->pool));
    }
    return wait_pool(c, idx);
}

/* Replies first..n-1 of a batch that failed before posting them: their
 * buffers (by FIFO place from head) go back. */
static void lent_back(struct rdma_sconn *c, unsigned head, unsigned first, unsigned n)
{
    for (unsigned i = first; i < n; i++)
        rkv_reply_pool_give(&c->wk->pool, c->reply_of[(head + i) % c->sh->credits]);
}

/* At close: the reply buffers of requests handed and not answered (before
 * srq_give_back forgets them), and, once the QP is gone, those of sends. */
static void lent_give_back(struct rdma_sconn *c)
{
    for (unsigned i = 0; i < c->handed; i++)
        rkv_reply_pool_give(&c->wk->pool, c->reply_of[(c->polled_head + i) % c->sh->credits]);
    c->handed = 0;
}

static void sent_give_back(struct rdma_sconn *c)
{
    for (; c->sent_count > 0; c->sent_count--) {
        rkv_reply_pool_give(&c->wk->pool, c->sent_buf[c->sent_head]);
        c->sent_head = (c->sent_head + 1) % c->sh->credits;
    }
    holder_unlink(c);
}

/* ------------------------------------------------------------ a worker's receive CQ */

/* A request (or a failure) came for armed c: make its event_fd readable,
 * so a worker that parked it sweeps it again. Under table_lock. */
static void conn_signal(struct rdma_sconn *c)
{
    uint64_t one = 1;

    if (!c->armed)
        return;
    c->armed = false;
    atomic_fetch_sub_explicit(&c->wk->armed, 1, memory_order_relaxed);
    c->signaled = true;
    if (write(c->wake_efd, &one, sizeof one) != (ssize_t)sizeof one)
        RKV_DEBUG("%s: cannot signal its wake-up: %s", c->peer, strerror(errno));
}

/* One completion of the worker's receive CQ to its connection's FIFO.
 * Returns false when no connection holds its buffer now (the caller gives
 * it back to the queue): its QP is gone (a late or flushed receive of a
 * closed connection), the receive failed, or the connection is dead or
 * broke the protocol. A connection holds at most `credits` requests (a
 * conforming client never has more in flight: a request's buffer is
 * re-posted before its reply is sent), so one more is a client that sends
 * past its credits, holding other clients' buffers: it is failed, as is
 * every arrival of it after that given back. Under table_lock, by the
 * worker. */
static bool arrival(struct rdma_worker *wk, const struct ibv_wc *wc)
{
    struct rdma_sconn *c = rkv_qp_table_find(&wk->table, wc->qp_num);

    if (c == NULL)
        return false;
    if (RKV_UNLIKELY(wc->status != IBV_WC_SUCCESS)) {
        if (c->established)
            conn_wc_fail(c, wc->status, "receiving a request");
        else /* the listener's still: not its send queue */
            atomic_store(&c->dead, true);
    } else if (RKV_UNLIKELY(wc->opcode != IBV_WC_RECV || !rkv_srq_valid(wk->q, wc->wr_id))) {
        conn_fail(c, "unexpected receive completion");
    } else if (RKV_UNLIKELY(c->polled_count == c->sh->credits)) {
        conn_fail(c, "the client sent more requests than its credits");
    } else if (RKV_LIKELY(!atomic_load_explicit(&c->dead, memory_order_relaxed))) {
        unsigned at = (c->polled_head + c->polled_count) % c->sh->credits;
        c->polled[at] = (uint32_t)wc->wr_id;
        c->lens[at] = wc->byte_len;
        c->polled_count++;
        conn_signal(c);
        return true;
    }
    conn_signal(c); /* a parked one: its worker sees it dead */
    return false;
}

/* Buffers no connection holds, gathered to go back to the queue in one post. */
struct give_back {
    uint32_t idx[ARRIVALS_AT_ONCE];
    struct ibv_recv_wr wrs[ARRIVALS_AT_ONCE];
    struct ibv_sge sges[ARRIVALS_AT_ONCE];
    unsigned n;
};

static void give_back_flush(struct rkv_srq *q, struct give_back *g)
{
    if (g->n > 0 && rkv_srq_post(q, g->idx, g->n, g->wrs, g->sges) != 0)
        RKV_WARN("rdma: cannot give receive buffers back to a shared queue");
    g->n = 0;
}

static void give_back_add(struct rkv_srq *q, struct give_back *g, uint64_t wr_id)
{
    if (!rkv_srq_valid(q, wr_id))
        return; /* names no buffer of ours: nothing to give back */
    g->idx[g->n++] = (uint32_t)wr_id;
    if (g->n == ARRIVALS_AT_ONCE)
        give_back_flush(q, g);
}

/* Take what a closing connection kept for the worker (conn_leave_table),
 * then everything its receive CQ holds, to the connections they belong to:
 * in the CQ's order, which is each QP's arrival order. The buffers none
 * holds go back to the queue. Worker thread only. */
static void worker_take_arrivals(struct rdma_worker *wk)
{
    struct ibv_wc wcs[ARRIVALS_AT_ONCE];
    struct give_back g;
    int n;

    g.n = 0;
    pthread_mutex_lock(&wk->table_lock);
    for (; wk->stash_count > 0; wk->stash_count--) {
        if (!arrival(wk, &wk->stash[wk->stash_head]))
            give_back_add(wk->q, &g, wk->stash[wk->stash_head].wr_id);
        wk->stash_head = (wk->stash_head + 1) % wk->q->depth;
    }
    do {
        n = ibv_poll_cq(wk->recv_cq, (int)ARRIVALS_AT_ONCE, wcs);
        for (int i = 0; i < n; i++)
            if (!arrival(wk, &wcs[i]))
                give_back_add(wk->q, &g, wcs[i].wr_id);
    } while (n == (int)ARRIVALS_AT_ONCE);
    give_back_flush(wk->q, &g);
    pthread_mutex_unlock(&wk->table_lock);
    if (RKV_UNLIKELY(n < 0))
        RKV_WARN("rdma: ibv_poll_cq failed on a worker's receive CQ");
}

/* The transport's wake(): the worker's receive CQ raised an event. Take
 * the events, notify again while a connection waits for a wake-up (before
 * the look below: a request after it raises an event, one before it is
 * taken by it), then take what arrived. */
static void srv_wake(void *ctx)
{
    struct rdma_worker *wk = ctx;
    struct ibv_cq *cq;
    void *cq_ctx;

    while (ibv_get_cq_event(wk->recv_comp, &cq, &cq_ctx) == 0) {
        wk->cq_events++;
        wk->notified = false;
    }
    if (wk->cq_events >= 64) {
        ibv_ack_cq_events(wk->recv_cq, wk->cq_events);
        wk->cq_events = 0;
    }
    if (atomic_load_explicit(&wk->armed, memory_order_relaxed) > 0 && !wk->notified) {
        if (ibv_req_notify_cq(wk->recv_cq, 0) == 0)
            wk->notified = true;
        else
            RKV_WARN("rdma: ibv_req_notify_cq failed on a worker's receive CQ");
    }
    worker_take_arrivals(wk);
}

/* c leaves its worker's table, and its QP goes, under table_lock: the
 * listener cannot give a new QP that takes the number (rxe reuses them at
 * once) a place in the table until every completion of this one is out of
 * the CQ. Those are c's own (back to the queue: c is closing) and other
 * connections', which the closer (the worker, or the listener for a
 * connection not handed over, which must not touch other connections) keeps
 * in the stash for the worker's next take, in order. The stash holds them
 * all: a completion there or in the CQ holds one of the queue's buffers. */
static void conn_leave_table(struct rdma_sconn *c)
{
    struct rdma_worker *wk = c->wk;
    struct ibv_wc wcs[ARRIVALS_AT_ONCE];
    struct give_back g;
    int n;

    g.n = 0;
    pthread_mutex_lock(&wk->table_lock);
    rdma_destroy_qp(c->id); /* no receive of its QP completes after this */
    do {
        n = ibv_poll_cq(wk->recv_cq, (int)ARRIVALS_AT_ONCE, wcs);
        for (int i = 0; i < n; i++) {
            if (wcs[i].qp_num != c->qp_num && wk->stash_count < wk->q->depth &&
                rkv_qp_table_find(&wk->table, wcs[i].qp_num) != NULL)
                wk->stash[(wk->stash_head + wk->stash_count++) % wk->q->depth] = wcs[i];
            else
                give_back_add(wk->q, &g, wcs[i].wr_id);
        }
    } while (n == (int)ARRIVALS_AT_ONCE);
    give_back_flush(wk->q, &g);
    rkv_qp_table_remove(&wk->table, c->qp_num);
    if (c->armed) {
        c->armed = false;
        atomic_fetch_sub_explicit(&wk->armed, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&wk->table_lock);
    c->in_table = false;
}

/* Once its QP is gone and it left the table: the shared receive queue's
 * buffers this connection holds go back to it, the requests it polled and
 * did not answer and the ones that arrived and were not polled. */
static void srq_give_back(struct rdma_sconn *c)
{
    const uint32_t credits = c->sh->credits;
    unsigned n = 0;

    for (unsigned i = 0; i < c->polled_count; i++)
        c->s->repost[n++] = c->polled[(c->polled_head + i) % credits];
    c->polled_count = 0;
    c->handed = 0;
    if (n > 0 && rkv_srq_post(c->q, c->s->repost, n, c->s->rwr, c->s->rsge) != 0)
        RKV_WARN("%s: cannot give receive buffers back to the shared queue", c->peer);
}

/* The max_conns place is given back first: a peer that sees the disconnect
 * and reconnects at once must not be refused for a place this connection,
 * already going, still seemed to hold (its resources are freed just after). */
static void conn_destroy(struct rdma_sconn *c)
{
    struct srv_shared *sh = c->sh;

    atomic_fetch_sub(&sh->conns, 1);
    pthread_mutex_lock(&c->close_lock);
    c->closing = true;
    pthread_mutex_unlock(&c->close_lock);
    if (c->id != NULL && c->id->qp != NULL) {
        rdma_disconnect(c->id);
        lent_give_back(c);
        if (c->in_table)
            conn_leave_table(c); /* its QP goes there */
        else
            rdma_destroy_qp(c->id);
    }
    if (c->q != NULL)
        srq_give_back(c);
    if (c->wk != NULL) {
        sent_give_back(c); /* the QP is gone: the device is done with them */
        atomic_fetch_sub(&c->wk->conns, 1);
    }
    if (c->q != NULL)
        rkv_srq_leave(c->q, sh->credits);
    if (c->cq_events)
        ibv_ack_cq_events(c->recv_cq, c->cq_events);
    if (c->send_cq != NULL)
        ibv_destroy_cq(c->send_cq);
    if (c->recv_cq != NULL)
        ibv_destroy_cq(c->recv_cq);
    if (c->comp != NULL)
        ibv_destroy_comp_channel(c->comp);
    if (c->wake_efd >= 0)
        close(c->wake_efd);
    rkv_rdma_buf_free(&c->recvs);
    /* Waits until the listener acknowledged every event it took for this id. */
    if (c->id != NULL)
        rdma_destroy_id(c->id);
    pthread_mutex_destroy(&c->close_lock);
    free_conn_arrays(c);
    free(c);
    shared_put(sh);
}

/* The staging pool's buffers: registered, RKV_RDMA_STAGING_SIZE bytes. */
static void *staging_make(void *ctx)
{
    struct srv_shared *sh = ctx;
    struct rkv_rdma_buf *b = calloc(1, sizeof *b);
    char err[300];

    if (b != NULL && rkv_rdma_buf_alloc(sh->pd, RKV_RDMA_STAGING_SIZE, IBV_ACCESS_LOCAL_WRITE,
                                        "pull staging buffer", b, err, sizeof err) != RKV_OK) {
        RKV_ERROR("rdma: %s", err);
        free(b);
        b = NULL;
    }
    return b;
}

static void staging_unmake(void *ctx, void *buf)
{
    (void)ctx;
    rkv_rdma_buf_free(buf);
    free(buf);
}

/* A reply pool's chunks: registered, a mapping each (rkv_rdma_buf). */
static bool reply_chunk_make(void *ctx, uint64_t bytes, struct rkv_reply_chunk *chunk)
{
    struct srv_shared *sh = ctx;
    struct rkv_rdma_buf *b = calloc(1, sizeof *b);
    char err[300];

    if (b == NULL || rkv_rdma_buf_alloc(sh->pd, bytes, IBV_ACCESS_LOCAL_WRITE, "reply buffers", b,
                                        err, sizeof err) != RKV_OK) {
        if (b != NULL)
            RKV_ERROR("rdma: %s", err);
        free(b);
        return false;
    }
    chunk->mem = b->mem;
    chunk->lkey = b->mr->lkey;
    chunk->handle = b;
    return true;
}

static void reply_chunk_unmake(void *ctx, struct rkv_reply_chunk *chunk)
{
    (void)ctx;
    rkv_rdma_buf_free(chunk->handle);
    free(chunk->handle);
}

/* The worker with the fewest connections: the worker (main.c) that gets
 * the connection is the one worker_of() names. */
static uint32_t least_loaded_worker(const struct srv_shared *sh)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < sh->nworkers; i++)
        if (atomic_load(&sh->workers[i].conns) < atomic_load(&sh->workers[best].conns))
            best = i;
    return best;
}

/* Send WRs per QP: a batch of replies (at most RKV_REPLY_BATCH, or credits)
 * and 2 x signal_interval - 1 more, so that a batch rarely waits for room
 * (one signaled WR in `interval` is always on its way back). A pull and a
 * keepalive probe wait for room like a batch. */
static uint32_t send_depth_of(uint32_t credits, uint32_t interval)
{
    return RKV_MIN(credits, RKV_REPLY_BATCH) + 2 * RKV_MAX(interval, 1u) - 1;
}

/* Everything a connection needs before rdma_accept(): CQs, QP, buffers, the
 * receive slots posted. */
static struct rdma_sconn *rdma_conn_create(struct srv_shared *sh, struct rdma_cm_id *id, char *err,
                                           size_t err_len)
{
    const uint32_t credits = sh->credits;
    const uint32_t send_depth = send_depth_of(credits, sh->interval);
    uint32_t send_cqe, recv_cqe;
    struct rdma_sconn *c = calloc(1, sizeof *c);
    struct ibv_qp *qp;
    int flags, rc;

    if (c == NULL)
        goto oom;
    c->polled = calloc(credits, sizeof *c->polled);
    c->reply_of = calloc(credits, sizeof *c->reply_of);
    c->sent_buf = calloc(credits, sizeof *c->sent_buf);
    c->sent_wr = calloc(credits, sizeof *c->sent_wr);
    c->lens = calloc(credits, sizeof *c->lens);
    if (!c->polled || !c->reply_of || !c->sent_buf || !c->sent_wr || !c->lens) {
        free_conn_arrays(c);
        free(c);
        goto oom;
    }
    pthread_mutex_init(&c->close_lock, NULL);
    c->wake_efd = -1;
    c->sh = sh;
    c->s = &sh->setup_scratch;
    c->id = id;
    atomic_init(&c->dead, false);
    atomic_fetch_add(&sh->refs, 1);
    atomic_fetch_add(&sh->conns, 1);
    c->worker = least_loaded_worker(sh);
    c->wk = &sh->workers[c->worker];
    atomic_fetch_add(&c->wk->conns, 1);
    rkv_rdma_format_addr(rdma_get_peer_addr(id), c->peer + 5, sizeof c->peer - 5);
    memcpy(c->peer, "rdma ", 5);

    /* Receive completions. On a shared queue, every QP of the worker
     * completes on its one receive CQ (make_srqs), as deep as the queue: at
     * most that many receives are outstanding in total, so a peer that
     * sends past its credits, faster than the worker polls, cannot overrun
     * it (a CQ that overran would lose the completions, and with them the
     * buffers). The connection's wake-up is an eventfd the worker's wake()
     * signals. Without one, its own CQ of a receive per credit and its own
     * completion channel. Either way a send CQ of its own: a completion per
     * signaled send at most (a flush: per send). */
    if (sh->srqs != NULL) {
        c->q = &sh->srqs[c->worker];
        rkv_srq_join(c->q, credits);
        c->wake_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (c->wake_efd < 0) {
            rkv_rdma_errno_error(errno, "eventfd", err, err_len);
            goto fail;
        }
    } else {
        c->comp = ibv_create_comp_channel(sh->verbs);
        flags = c->comp != NULL ? fcntl(c->comp->fd, F_GETFL) : -1;
        if (flags < 0 || fcntl(c->comp->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
            rkv_rdma_errno_error(errno, "a completion channel", err, err_len);
            goto fail;
        }
        recv_cqe = RKV_MIN(RKV_MAX(sh->cq_size, credits + 1), sh->caps.max_cqe);
        c->recv_cq = ibv_create_cq(sh->verbs, (int)recv_cqe, c, c->comp, 0);
    }
    send_cqe = RKV_MIN(RKV_MAX(sh->cq_size, send_depth), sh->caps.max_cqe);
    c->send_cq = ibv_create_cq(sh->verbs, (int)send_cqe, c, NULL, 0);
    if (c->send_cq == NULL || (c->q == NULL && c->recv_cq == NULL)) {
        rkv_rdma_errno_error(errno, "ibv_create_cq", err, err_len);
        goto fail;
    }
    c->max_inline = sh->max_inline;
    if (rkv_rdma_create_qp(id, sh->pd, c->send_cq, c->q != NULL ? c->wk->recv_cq : c->recv_cq,
                           c->q != NULL ? c->q->srq : NULL, send_depth, credits, &c->max_inline,
                           &qp, err, err_len) != RKV_OK)
        goto fail;
    if (c->q == NULL &&
        rkv_rdma_buf_alloc(sh->pd, (size_t)credits * sh->max_msg, IBV_ACCESS_LOCAL_WRITE,
                           "receive buffers", &c->recvs, err, err_len) != RKV_OK)
        goto fail;
    /* keep: a batch that leaves more than interval sends outstanding ends
     * with a signaled one, so a wait for room always has a completion coming */
    rkv_rdma_sq_init(&c->sq, send_depth, sh->interval, sh->interval);
    for (uint32_t i = 0; i < credits; i++)
        c->s->repost[i] = i;
    rc = c->q != NULL ? 0
                      : rkv_rdma_post_recvs(qp, &c->recvs, sh->max_msg, c->s->repost, credits,
                                            c->s->rwr, c->s->rsge);
    if (rc != 0) {
        rkv_rdma_errno_error(rc, "ibv_post_recv", err, err_len);
        goto fail;
    }
    /* last: from here the worker may hand it what its QP receives (nothing
     * arrives before rdma_accept) */
    if (c->q != NULL) {
        c->qp_num = qp->qp_num;
        pthread_mutex_lock(&c->wk->table_lock);
        c->in_table = rkv_qp_table_add(&c->wk->table, c->qp_num, c);
        pthread_mutex_unlock(&c->wk->table_lock);
        if (!c->in_table) {
            snprintf(err, err_len, "no room for QP %u in its worker's QP table", c->qp_num);
            goto fail;
        }
    }
    id->context = c;
    return c;

fail:
    id->context = NULL;
    if (id->qp != NULL)
        rdma_destroy_qp(id);
    c->id = NULL; /* the caller rejects and destroys the id */
    conn_destroy(c);
    return NULL;
oom:
    snprintf(err, err_len, "out of memory for a connection");
    return NULL;
}

/* ------------------------------------------------------------ listener */

/* Worker i's receive CQ for its queue's receives, as deep as the queue
 * (every completion it can ever hold fits), its completion channel, the
 * stash beside it (conn_leave_table) and its QP number table: room for
 * every connection (max_conns) and those still being torn down. */
static rkv_status make_worker_cq(struct srv_shared *sh, uint32_t i, char *err, size_t err_len)
{
    struct rdma_worker *wk = &sh->workers[i];
    uint32_t cqe = RKV_MIN(RKV_MAX(sh->cq_size, sh->srqs[i].depth), sh->caps.max_cqe);
    int flags;

    wk->stash = calloc(sh->srqs[i].depth, sizeof *wk->stash);
    if (wk->stash == NULL ||
        rkv_qp_table_init(&wk->table, sh->max_conns + RKV_QP_TABLE_SLACK) != RKV_OK) {
        free(wk->stash);
        snprintf(err, err_len, "out of memory for a worker's QP table");
        return RKV_NO_MEMORY;
    }
    pthread_mutex_init(&wk->table_lock, NULL);
    wk->q = &sh->srqs[i]; /* worker_cq_destroy frees what follows */
    wk->recv_comp = ibv_create_comp_channel(sh->verbs);
    flags = wk->recv_comp != NULL ? fcntl(wk->recv_comp->fd, F_GETFL) : -1;
    if (flags < 0 || fcntl(wk->recv_comp->fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        rkv_rdma_errno_error(errno, "a worker's completion channel", err, err_len);
        return RKV_CONNECTION;
    }
    wk->recv_cq = ibv_create_cq(sh->verbs, (int)cqe, wk, wk->recv_comp, 0);
    if (wk->recv_cq == NULL) {
        rkv_rdma_errno_error(errno, "ibv_create_cq (a worker's receive CQ)", err, err_len);
        return RKV_NO_MEMORY;
    }
    return RKV_OK;
}

/* One shared receive queue per worker (rdma_srq.h), `depth` buffers each at
 * most, and its receive CQ (make_worker_cq); none when depth is 0 or the
 * device has no SRQs (then each QP posts credits receive buffers of its
 * own, on a receive CQ of its own, as before). */
static rkv_status make_srqs(struct srv_shared *sh, unsigned workers, unsigned depth, char *err,
                            size_t err_len)
{
    uint32_t n = RKV_MAX(workers, 1u);

    if (depth == 0)
        return RKV_OK;
    if (sh->caps.max_srq < n || sh->caps.max_srq_wr < RKV_SRQ_CHUNK ||
        sh->caps.max_cqe < RKV_SRQ_CHUNK) {
        RKV_INFO("rdma: %s has no shared receive queues for %u workers (max_srq %u): "
                 "receive buffers per connection",
                 rkv_rdma_device_name(sh->verbs), n, sh->caps.max_srq);
        return RKV_OK;
    }
    /* every buffer's completion must fit the worker's receive CQ
     * (make_worker_cq), so the depth stays within max_cqe too, in whole
     * chunks (rkv_srq_init rounds it up to one) */
    depth = RKV_MIN(depth,
                    RKV_MIN(sh->caps.max_srq_wr, sh->caps.max_cqe) / RKV_SRQ_CHUNK * RKV_SRQ_CHUNK);
    sh->srqs = calloc(n, sizeof *sh->srqs);
    if (sh->srqs == NULL) {
        snprintf(err, err_len, "out of memory for shared receive queues");
        return RKV_NO_MEMORY;
    }
    for (uint32_t i = 0; i < n; i++) {
        rkv_status st = rkv_srq_init(&sh->srqs[i], sh->pd, depth, sh->max_msg, err, err_len);
        if (st == RKV_INVALID && i == 0) { /* the device refuses SRQs: fall back */
            RKV_INFO("rdma: %s; receive buffers per connection", err);
            free(sh->srqs);
            sh->srqs = NULL;
            return RKV_OK;
        }
        if (st != RKV_OK)
            return st; /* shared_put frees those made (sh->nsrq) */
        sh->nsrq = i + 1;
        st = make_worker_cq(sh, i, err, err_len);
        if (st != RKV_OK)
            return st; /* shared_put frees it (worker_cq_destroy) */
    }
    return RKV_OK;
}

/* One reply pool per worker (reply_pool.h), registered on demand up to
 * `bound` buffers (reply_pool, or srq_depth: a reply answers a request that
 * held one of the receive queue's) and at least 2 x credits, so that one
 * connection, which holds at most its credits, never leaves the others none. */
static rkv_status make_workers(struct srv_shared *sh, unsigned workers, unsigned bound, char *err,
                               size_t err_len)
{
    bound = RKV_MAX(bound, 2 * sh->credits);

    sh->nworkers = RKV_MAX(workers, 1u);
    sh->workers = calloc(sh->nworkers, sizeof *sh->workers);
    if (sh->workers == NULL || !scratch_alloc(&sh->setup_scratch, sh->credits)) {
        sh->nworkers = 0;
        snprintf(err, err_len, "out of memory for the reply pools");
        return RKV_NO_MEMORY;
    }
    for (uint32_t i = 0; i < sh->nworkers; i++) {
        atomic_init(&sh->workers[i].conns, 0);
        if (!scratch_alloc(&sh->workers[i].scratch, sh->credits) ||
            rkv_reply_pool_init(&sh->workers[i].pool, sh->max_msg, bound, reply_chunk_make,
                                reply_chunk_unmake, sh) != RKV_OK) {
            sh->nworkers = i + 1; /* shared_put frees those made (a pool freed twice is a no-op) */
            snprintf(err, err_len, "out of memory for the reply pools");
            return RKV_NO_MEMORY;
        }
    }
    return RKV_OK;
}

/* listener_fd: an epoll set of the cm event channel and the device's
 * asynchronous events (SRQ limits), both taken in accept(). */
static rkv_status make_listener_fd(struct rdma_listener *l, char *err, size_t err_len)
{
    struct epoll_event ev = { .events = EPOLLIN };
    int async_fd = l->sh->verbs->async_fd;
    int flags = fcntl(async_fd, F_GETFL);

    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0 || epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->sh->channel->fd, &ev) != 0 ||
        flags < 0 || fcntl(async_fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
        epoll_ctl(l->epfd, EPOLL_CTL_ADD, async_fd, &ev) != 0) {
        rkv_rdma_errno_error(errno, "the listener's epoll set", err, err_len);
        return RKV_INTERNAL;
    }
    return RKV_OK;
}

static rkv_status srv_listen(const char *addr, const struct rkv_region *region,
                             const struct rkv_strans_params *p, struct rkv_listener **out,
                             char *err, size_t err_len)
{
    struct rkv_strans_params params;
    struct sockaddr_storage ss;
    struct srv_shared *sh = NULL;
    struct rdma_listener *l = NULL;
    uint8_t port;
    bool relaxed = false;
    char size_text[32];
    rkv_status st = RKV_INVALID;

    *out = NULL;
    rkv_strans_params_resolve(p, &params);

    if (region == NULL || region->base == NULL || region->size == 0) {
        snprintf(err, err_len, "rdma listen: no region to export");
        return RKV_INVALID;
    }
    if (rkv_rdma_parse_addr(addr, true, &ss, err, err_len) != RKV_OK)
        return RKV_INVALID;

    sh = calloc(1, sizeof *sh);
    l = calloc(1, sizeof *l);
    if (sh == NULL || l == NULL) {
        free(sh);
        free(l);
        snprintf(err, err_len, "out of memory");
        return RKV_NO_MEMORY;
    }
    atomic_init(&sh->refs, 1);
    atomic_init(&sh->conns, 0);
    l->sh = sh;
    l->epfd = -1;
    sh->region_base = region->base;
    sh->region_size = region->size;
    sh->credits = p->credits;
    sh->max_msg = p->max_msg;
    sh->max_conns = p->max_conns;
    sh->rejected = p->rejected;
    sh->max_inline = p->max_inline;
    sh->interval = p->signal_interval;
    sh->cq_size = p->cq_size;
    sh->ack_timeout = p->ack_timeout;
    sh->retry_count = p->retry_count;
    rkv_rdma_format_addr((struct sockaddr *)&ss, l->addr, sizeof l->addr);
    if (sh->credits > MAX_CREDITS || sh->max_msg < RKV_MIN_MSG || sh->max_msg > RKV_MAX_MSG ||
        sh->interval > RKV_RDMA_MAX_SIGNAL) {
        snprintf(err, err_len,
                 "credits %u (1..%u), max_msg %u (%u..%u) or signal_interval %u (1..%u) out of range",
                 sh->credits, MAX_CREDITS, sh->max_msg, RKV_MIN_MSG, RKV_MAX_MSG, sh->interval,
                 RKV_RDMA_MAX_SIGNAL);
        goto fail;
    }
    if (!rkv_rdma_rc_check(sh->ack_timeout, sh->retry_count, "ack_timeout", "retry_count", err,
                           err_len))
        goto fail;

    st = rkv_rdma_open_id(l, &sh->channel, &l->id, err, err_len);
    if (st != RKV_OK)
        goto fail;
    st = RKV_CONNECTION;
    if (p->tos != 0 && rdma_set_option(l->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, (void *)&p->tos,
                                       sizeof p->tos) != 0)
        RKV_WARN("rdma listen %s: cannot set ToS %u: %s", l->addr, p->tos, strerror(errno));
    if (rdma_bind_addr(l->id, (struct sockaddr *)&ss) != 0) {
        char what[128];
        if (errno == ENODEV || errno == EADDRNOTAVAIL) {
            snprintf(err, err_len,
                     "%s is not an address of an RDMA-capable interface "
                     "(`rdma link show`, `ibv_devices`): use the IP of the RDMA netdev, or 0.0.0.0",
                     l->addr);
        } else {
            snprintf(what, sizeof what, "rdma_bind_addr(%s)", l->addr);
            rkv_rdma_errno_error(errno, what, err, err_len);
        }
        goto fail;
    }
    if (l->id->verbs != NULL) {
        if (p->device != NULL && strcmp(p->device, rkv_rdma_device_name(l->id->verbs)) != 0) {
            snprintf(err, err_len, "%s is on RDMA device %s, but rdma_device is %s", l->addr,
                     rkv_rdma_device_name(l->id->verbs), p->device);
            st = RKV_INVALID;
            goto fail;
        }
        sh->verbs = l->id->verbs;
        port = l->id->port_num;
    } else {
        st = rkv_rdma_find_device(p->device, &sh->verbs, err, err_len);
        if (st != RKV_OK)
            goto fail;
        st = RKV_CONNECTION;
        port = 0; /* any ACTIVE port */
    }
    if (rkv_rdma_check_port(sh->verbs, port, err, err_len) != RKV_OK)
        goto fail;
    st = rkv_rdma_check_gid(sh->verbs, port, p->gid_index, err, err_len);
    if (st != RKV_OK)
        goto fail;
    st = rkv_rdma_query_caps(sh->verbs, &sh->caps, err, err_len);
    if (st != RKV_OK)
        goto fail;
    if (send_depth_of(sh->credits, sh->interval) > sh->caps.max_qp_wr) {
        snprintf(err, err_len, "credits %u need %u send WRs but %s allows %u per QP; lower credits",
                 sh->credits, send_depth_of(sh->credits, sh->interval),
                 rkv_rdma_device_name(sh->verbs), sh->caps.max_qp_wr);
        st = RKV_INVALID;
        goto fail;
    }
    st = rkv_rdma_check_memlock(region->size, "region", err, err_len);
    if (st != RKV_OK)
        goto fail;
    st = RKV_CONNECTION;
    sh->pd = ibv_alloc_pd(sh->verbs);
    if (sh->pd == NULL) {
        rkv_rdma_errno_error(errno, "ibv_alloc_pd", err, err_len);
        goto fail;
    }
    /* Remote peers may read the region and nothing else: no REMOTE_WRITE. */
    sh->region_mr = rkv_rdma_reg_mr(sh->pd, region->base, region->size,
                                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, &relaxed,
                                    "table region", err, err_len);
    if (sh->region_mr == NULL ||
        rkv_rdma_buf_alloc(sh->pd, RKV_RDMA_PROBE_LEN, IBV_ACCESS_LOCAL_WRITE, "keepalive buffer",
                           &sh->probe, err, err_len) != RKV_OK)
        goto fail;
    if (rkv_staging_pool_init(&sh->staging, p->workers, staging_make, staging_unmake, sh) != RKV_OK) {
        snprintf(err, err_len, "out of memory for the staging pool");
        goto fail;
    }
    if (make_workers(sh, p->workers, params.reply_pool ? params.reply_pool : params.srq_depth, err,
                     err_len) != RKV_OK ||
        make_srqs(sh, p->workers, p->no_srq ? 0 : p->srq_depth, err, err_len) != RKV_OK ||
        make_listener_fd(l, err, err_len) != RKV_OK)
        goto fail;
    while (l->lane_key == 0)
        if (getrandom(&l->lane_key, sizeof l->lane_key, 0) != (ssize_t)sizeof l->lane_key) {
            snprintf(err, err_len, "getrandom() failed: no key for READ lanes");
            goto fail;
        }
    if (rdma_listen(l->id, LISTEN_BACKLOG) != 0) {
        rkv_rdma_errno_error(errno, "rdma_listen", err, err_len);
        goto fail;
    }
    RKV_INFO("rdma: listening on %s (device %s), %s region registered, rkey 0x%x, relaxed ordering %s",
             l->addr, rkv_rdma_device_name(sh->verbs),
             rkv_format_size(region->size, size_text, sizeof size_text), sh->region_mr->rkey,
             relaxed ? "on" : "off");
    *out = &l->listener;
    return RKV_OK;

fail:
    if (l->epfd >= 0)
        close(l->epfd);
    if (l->id != NULL)
        rdma_destroy_id(l->id);
    shared_put(sh);
    free(l);
    return st;
}

static int srv_listener_fd(struct rkv_listener *listener)
{
    struct rdma_listener *l = rdma_listener_of(listener);
    return l->epfd;
}

static void srv_region_desc(struct rkv_listener *listener, uint32_t *rkey, uint64_t *addr)
{
    struct rdma_listener *l = rdma_listener_of(listener);
    *rkey = l->sh->region_mr->rkey;
    *addr = (uint64_t)(uintptr_t)l->sh->region_base;
}

static void setup_unlink(struct rdma_listener *l, struct rdma_sconn *c)
{
    for (struct rdma_sconn **pp = &l->setup; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            c->next = NULL;
            return;
        }
    }
}

/* Refuse a connect request, telling the client why. Acks the event. */
static void reject_request(struct srv_shared *sh, struct rdma_cm_event *ev,
                           enum rkv_rdma_reject_reason reason)
{
    struct rdma_cm_id *id = ev->id;
    struct rkv_rdma_reject rej = { .magic = RKV_RDMA_REJECT_MAGIC, .reason = reason };

    if ((reason == RKV_REJECT_TOO_MANY || reason == RKV_REJECT_RESOURCES) && sh->rejected != NULL)
        atomic_fetch_add(sh->rejected, 1); /* "busy" refusals */

    rdma_reject(id, &rej, sizeof rej);
    rdma_ack_cm_event(ev);
    rdma_destroy_id(id);
}

/* ------------------------------------------------------------ READ lanes */

static uint32_t srv_lane_key(struct rkv_listener *listener)
{
    return rdma_listener_of(listener)->lane_key;
}

static struct rdma_lane *lane_of_id(const struct rdma_listener *l, const struct rdma_cm_id *id)
{
    struct rdma_lane *ln = l->lanes;
    while (ln != NULL && ln->id != id)
        ln = ln->next;
    return ln;
}

/* Unlink, disconnect and free a lane: its QP goes, and its place. */
static void lane_destroy(struct rdma_listener *l, struct rdma_lane *ln)
{
    for (struct rdma_lane **pp = &l->lanes; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == ln) {
            *pp = ln->next;
            l->nlanes--;
            break;
        }
    }
    if (ln->id->qp != NULL) {
        rdma_disconnect(ln->id);
        rdma_destroy_qp(ln->id);
    }
    rdma_destroy_id(ln->id);
    free(ln);
}

/* The lanes' CQ and its channel (in the listener's epoll set), made with
 * the first lane: room for every lane's one receive, and as many flushed. */
static bool lane_cq_make(struct rdma_listener *l, char *err, size_t err_len)
{
    struct srv_shared *sh = l->sh;
    struct epoll_event ev = { .events = EPOLLIN };
    struct ibv_comp_channel *comp;
    int flags;

    if (l->lane_cq != NULL)
        return true;
    comp = ibv_create_comp_channel(sh->verbs);
    flags = comp != NULL ? fcntl(comp->fd, F_GETFL) : -1;
    if (flags < 0 || fcntl(comp->fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
        epoll_ctl(l->epfd, EPOLL_CTL_ADD, comp->fd, &ev) != 0) {
        rkv_rdma_errno_error(errno, "the READ lanes' completion channel", err, err_len);
        if (comp != NULL)
            ibv_destroy_comp_channel(comp);
        return false;
    }
    struct ibv_cq *cq =
        ibv_create_cq(sh->verbs, (int)RKV_MIN(2 * sh->max_conns + 64, sh->caps.max_cqe), l, comp, 0);
    if (cq == NULL || ibv_req_notify_cq(cq, 0) != 0) {
        rkv_rdma_errno_error(errno, "the READ lanes' CQ", err, err_len);
        if (cq != NULL)
            ibv_destroy_cq(cq);
        epoll_ctl(l->epfd, EPOLL_CTL_DEL, comp->fd, NULL);
        ibv_destroy_comp_channel(comp);
        return false;
    }
    l->lane_comp = comp;
    l->lane_cq = cq;
    return true;
}

/* A lane's QP: no sends of its own, one zero-length receive that only a
 * message the lane must not send would complete. Returns 0 or an errno. */
static int lane_qp_make(struct rdma_listener *l, struct rdma_lane *ln, char *err, size_t err_len)
{
    uint32_t no_inline = 0;
    struct ibv_recv_wr wr = { .wr_id = ln->serial, .num_sge = 0 }, *bad = NULL;

    if (rkv_rdma_create_qp(ln->id, l->sh->pd, l->lane_cq, l->lane_cq, NULL, 1, 1, &no_inline,
                           &ln->id->qp, err, err_len) != RKV_OK)
        return EINVAL;
    int rc = ibv_post_recv(ln->id->qp, &wr, &bad);
    if (rc != 0)
        rkv_rdma_errno_error(rc, "ibv_post_recv (READ lane)", err, err_len);
    return rc;
}

/* A lane's connect request (the caller checked the flag): the key, the
 * bound, then a QP and rdma_accept. Acks ev. */
static void on_lane_request(struct rdma_listener *l, struct rdma_cm_event *ev,
                            const struct rkv_rdma_connect_info *info, const char *peer)
{
    struct srv_shared *sh = l->sh;
    struct rdma_conn_param cp = { 0 };
    struct rdma_lane *ln;
    char err[400];

    if (info->lane_key != l->lane_key) {
        RKV_WARN("rdma %s: rejecting a READ lane from %s: wrong lane key", l->addr, peer);
        reject_request(sh, ev, RKV_REJECT_LANE_KEY);
        return;
    }
    if (l->nlanes >= sh->max_conns) {
        RKV_WARN("rdma %s: rejecting a READ lane from %s: %u lanes is the limit (max_conns)",
                 l->addr, peer, l->nlanes);
        reject_request(sh, ev, RKV_REJECT_TOO_MANY);
        return;
    }
    ln = calloc(1, sizeof *ln);
    if (ln == NULL || !lane_cq_make(l, err, sizeof err)) {
        if (ln == NULL)
            snprintf(err, sizeof err, "out of memory");
        RKV_ERROR("rdma %s: rejecting a READ lane from %s: %s", l->addr, peer, err);
        free(ln);
        reject_request(sh, ev, RKV_REJECT_RESOURCES);
        return;
    }
    ln->id = ev->id;
    ln->serial = ++l->lane_serials;
    snprintf(ln->peer, sizeof ln->peer, "%s", peer);
    ln->next = l->lanes;
    l->lanes = ln;
    l->nlanes++;
    if (lane_qp_make(l, ln, err, sizeof err) != 0) {
        RKV_ERROR("rdma %s: rejecting a READ lane from %s: %s", l->addr, peer, err);
        l->lanes = ln->next;
        l->nlanes--;
        if (ln->id->qp != NULL)
            rdma_destroy_qp(ln->id);
        free(ln);
        reject_request(sh, ev, RKV_REJECT_RESOURCES);
        return;
    }
    cp.responder_resources = RKV_MIN(ev->param.conn.initiator_depth, sh->caps.max_rd_atom);
    rkv_rdma_set_ack_timeout(ev->id, sh->ack_timeout);
    int rc = rkv_rdma_accept(ev->id, &cp, sh->retry_count);
    rdma_ack_cm_event(ev);
    if (rc != 0) {
        RKV_WARN("rdma %s: rdma_accept for a READ lane from %s failed: %s", l->addr, peer,
                 strerror(rc));
        lane_destroy(l, ln);
        return;
    }
    RKV_DEBUG("rdma %s: READ lane from %s (%u lanes)", l->addr, peer, l->nlanes);
}

/* A lane's receive completed: it sent a message (or its QP failed). Close
 * it; a flushed receive of a lane already gone names no lane. */
static void lanes_poll(struct rdma_listener *l)
{
    struct ibv_wc wcs[16];
    struct ibv_cq *cq;
    void *ctx;
    int n;

    if (l->lane_cq == NULL)
        return;
    while (ibv_get_cq_event(l->lane_comp, &cq, &ctx) == 0)
        ibv_ack_cq_events(l->lane_cq, 1);
    ibv_req_notify_cq(l->lane_cq, 0);
    while ((n = ibv_poll_cq(l->lane_cq, (int)RKV_ARRAY_SIZE(wcs), wcs)) > 0) {
        for (int i = 0; i < n; i++) {
            struct rdma_lane *ln = l->lanes;
            while (ln != NULL && ln->serial != wcs[i].wr_id)
                ln = ln->next;
            if (ln == NULL)
                continue;
            if (wcs[i].status != IBV_WC_WR_FLUSH_ERR)
                RKV_WARN("rdma %s: %s: a READ lane sent a message (%s); closing the lane", l->addr,
                         ln->peer, rkv_rdma_wc_status_name(wcs[i].status));
            lane_destroy(l, ln);
        }
    }
}

/* A lane's cm event (ESTABLISHED, or its end); false: the id is no lane's.
 * Acks ev when it was. */
static bool on_lane_event(struct rdma_listener *l, struct rdma_cm_event *ev)
{
    struct rdma_lane *ln = lane_of_id(l, ev->id);

    enum rdma_cm_event_type type = ev->event;

    if (ln == NULL)
        return false;
    if (type == RDMA_CM_EVENT_ESTABLISHED) {
        /* rdma_cm grants every QP remote write; a lane serves READs only */
        struct ibv_qp_attr a = { .qp_access_flags = IBV_ACCESS_REMOTE_READ };
        if (ibv_modify_qp(ln->id->qp, &a, IBV_QP_ACCESS_FLAGS) != 0)
            RKV_DEBUG("rdma %s: cannot narrow a lane's QP access to remote read: %s", l->addr,
                      strerror(errno));
        rdma_ack_cm_event(ev);
        return true;
    }
    rdma_ack_cm_event(ev);
    if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_REJECTED ||
        type == RDMA_CM_EVENT_CONNECT_ERROR || type == RDMA_CM_EVENT_UNREACHABLE ||
        type == RDMA_CM_EVENT_DEVICE_REMOVAL)
        lane_destroy(l, ln);
    return true;
}

static void on_connect_request(struct rdma_listener *l, struct rdma_cm_event *ev)
{
    struct srv_shared *sh = l->sh;
    struct rdma_cm_id *id = ev->id;
    struct rdma_conn_param cp = { 0 };
    struct rdma_sconn *c;
    char peer[80], err[400];

    rkv_rdma_format_addr(rdma_get_peer_addr(id), peer, sizeof peer);
    if (id->verbs != sh->verbs) {
        RKV_WARN("rdma %s: rejecting %s: it arrived on %s, the region is registered on %s", l->addr,
                 peer, rkv_rdma_device_name(id->verbs), rkv_rdma_device_name(sh->verbs));
        reject_request(sh, ev, RKV_REJECT_WRONG_DEVICE);
        return;
    }
    struct rkv_rdma_connect_info info = { 0 };
    if (ev->param.conn.private_data != NULL && ev->param.conn.private_data_len >= sizeof info)
        memcpy(&info, ev->param.conn.private_data, sizeof info);
    if (info.magic == RKV_RDMA_CONNECT_MAGIC && (info.flags & RKV_RDMA_CONNECT_LANE) != 0) {
        on_lane_request(l, ev, &info, peer);
        return;
    }
    if (atomic_load(&sh->conns) >= sh->max_conns) {
        RKV_WARN("rdma %s: rejecting %s: %u connections is the limit (max_conns)", l->addr, peer,
                 sh->max_conns);
        reject_request(sh, ev, RKV_REJECT_TOO_MANY);
        return;
    }
    c = rdma_conn_create(sh, id, err, sizeof err);
    if (c == NULL) {
        RKV_ERROR("rdma %s: rejecting %s: %s", l->addr, peer, err);
        reject_request(sh, ev, RKV_REJECT_RESOURCES);
        return;
    }
    /* the client's keepalive buffer; a client that names none is not probed */
    if (ev->param.conn.private_data != NULL && ev->param.conn.private_data_len >= sizeof c->probe)
        memcpy(&c->probe, ev->param.conn.private_data, sizeof c->probe);
    if (c->probe.magic != RKV_RDMA_CONNECT_MAGIC)
        memset(&c->probe, 0, sizeof c->probe);
    /* Let the client keep as many READs in flight as the device serves, and
     * let our pulls do the same against the client. */
    cp.responder_resources = RKV_MIN(ev->param.conn.initiator_depth, sh->caps.max_rd_atom);
    cp.initiator_depth = RKV_MIN(ev->param.conn.responder_resources, sh->caps.max_init_rd_atom);
    cp.rnr_retry_count = 7; /* retry forever: a reply waits for a re-posted receive */
    rkv_rdma_set_ack_timeout(id, sh->ack_timeout);
    int rc = rkv_rdma_accept(id, &cp, sh->retry_count);
    if (rc != 0) {
        RKV_WARN("rdma %s: rdma_accept for %s failed: %s", l->addr, peer, strerror(rc));
        rdma_ack_cm_event(ev);
        conn_destroy(c);
        return;
    }
    c->next = l->setup;
    l->setup = c;
    rdma_ack_cm_event(ev);
}

/* A connection's teardown event. Returns after acking ev. */
static void on_conn_gone(struct rdma_listener *l, struct rdma_cm_event *ev)
{
    struct rdma_sconn *c = ev->id->context;

    if (c == NULL) {
        rdma_ack_cm_event(ev);
        return;
    }
    if (!c->established) { /* still ours: tear it down */
        RKV_DEBUG("rdma %s: %s went away during setup (%s)", l->addr, c->peer,
                  rdma_event_str(ev->event));
        setup_unlink(l, c);
        rdma_ack_cm_event(ev);
        conn_destroy(c);
        return;
    }
    /* A worker owns it; the unacked event keeps it alive until the ack. */
    atomic_store(&c->dead, true);
    pthread_mutex_lock(&c->close_lock);
    if (!c->closing)
        rdma_disconnect(c->id); /* QP to error: flushed receives (per-QP ones only: an
                                   SRQ's are not flushed) wake an event-mode worker;
                                   otherwise its next liveness look (<= 100 ms) sees dead */
    pthread_mutex_unlock(&c->close_lock);
    rdma_ack_cm_event(ev);
}

static rkv_status srv_accept_conn(struct rkv_listener *listener, struct rkv_sconn **out)
{
    struct rdma_listener *l = rdma_listener_of(listener);
    struct rdma_cm_event *ev;

    *out = NULL;
    rkv_rdma_drain_async(l->sh->verbs);
    lanes_poll(l);
    for (;;) {
        if (rdma_get_cm_event(l->sh->channel, &ev) != 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return RKV_OK;
            RKV_ERROR("rdma %s: rdma_get_cm_event: %s", l->addr, strerror(errno));
            return RKV_CONNECTION;
        }
        if (ev->id == l->id) {
            if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL)
                RKV_ERROR("rdma %s: the RDMA device %s was removed; restart the server", l->addr,
                          rkv_rdma_device_name(l->sh->verbs));
            rdma_ack_cm_event(ev);
            continue;
        }
        if (l->lanes != NULL && ev->event != RDMA_CM_EVENT_CONNECT_REQUEST && on_lane_event(l, ev))
            continue;
        switch (ev->event) {
        case RDMA_CM_EVENT_CONNECT_REQUEST: on_connect_request(l, ev); break;
        case RDMA_CM_EVENT_ESTABLISHED: {
            struct rdma_sconn *c = ev->id->context;
            rdma_ack_cm_event(ev);
            if (c != NULL && !c->established) {
                /* rdma_cm grants every QP remote write; this one serves READs only */
                struct ibv_qp_attr a = { .qp_access_flags = IBV_ACCESS_REMOTE_READ };
                if (ibv_modify_qp(c->id->qp, &a, IBV_QP_ACCESS_FLAGS) != 0)
                    RKV_DEBUG("rdma %s: cannot narrow %s's QP access to remote read: %s", l->addr,
                              c->peer, strerror(errno));
                setup_unlink(l, c);
                c->established = true;
                c->s = &c->wk->scratch; /* the worker's from now on: only it works on c */
                RKV_DEBUG("rdma %s: %s connected (inline %u)", l->addr, c->peer, c->max_inline);
                *out = &c->sconn;
                return RKV_OK;
            }
            break;
        }
        case RDMA_CM_EVENT_DISCONNECTED:
        case RDMA_CM_EVENT_REJECTED:
        case RDMA_CM_EVENT_CONNECT_ERROR:
        case RDMA_CM_EVENT_UNREACHABLE:
        case RDMA_CM_EVENT_DEVICE_REMOVAL: on_conn_gone(l, ev); break;
        default: /* TIMEWAIT_EXIT, ADDR_CHANGE, ...: nothing to do */ rdma_ack_cm_event(ev); break;
        }
    }
}

static void srv_close_listener(struct rkv_listener *listener)
{
    struct rdma_listener *l = rdma_listener_of(listener);
    while (l->setup != NULL) {
        struct rdma_sconn *c = l->setup;
        l->setup = c->next;
        conn_destroy(c);
    }
    while (l->lanes != NULL)
        lane_destroy(l, l->lanes);
    if (l->lane_cq != NULL)
        ibv_destroy_cq(l->lane_cq);
    if (l->lane_comp != NULL)
        ibv_destroy_comp_channel(l->lane_comp);
    rdma_destroy_id(l->id);
    close(l->epfd);
    shared_put(l->sh);
    free(l);
}

/* ------------------------------------------------------------ per connection */

/* After arm(), completion events queue on the channel; take and ack them. */
static void drain_cq_events(struct rdma_sconn *c)
{
    struct ibv_cq *cq;
    void *ctx;

    while (ibv_get_cq_event(c->comp, &cq, &ctx) == 0)
        c->cq_events++;
    if (c->cq_events >= 64) {
        ibv_ack_cq_events(c->recv_cq, c->cq_events);
        c->cq_events = 0;
    }
}

/* Take what arrived into the FIFO. On a shared queue: everything the
 * worker's receive CQ holds, to whichever of its connections it belongs
 * (worker_take_arrivals). Without one: c's own CQ, up to its credits.
 * Returns false when the connection failed. */
static bool take_arrivals(struct rdma_sconn *c)
{
    const uint32_t credits = c->sh->credits;
    int n;

    if (c->q != NULL) {
        worker_take_arrivals(c->wk);
        return !atomic_load_explicit(&c->dead, memory_order_relaxed);
    }
    n = ibv_poll_cq(c->recv_cq, (int)(credits - c->polled_count), c->s->wcs);
    if (RKV_UNLIKELY(n < 0)) {
        conn_fail(c, "ibv_poll_cq failed on the receive queue");
        return false;
    }
    for (int i = 0; i < n; i++) {
        const struct ibv_wc *wc = &c->s->wcs[i];
        if (RKV_UNLIKELY(wc->status != IBV_WC_SUCCESS)) {
            conn_wc_fail(c, wc->status, "receiving a request");
            return false;
        }
        if (RKV_UNLIKELY(wc->opcode != IBV_WC_RECV || wc->wr_id >= credits)) {
            conn_fail(c, "unexpected receive completion");
            return false;
        }
        unsigned at = (c->polled_head + c->polled_count) % credits;
        c->polled[at] = (uint32_t)wc->wr_id;
        c->lens[at] = wc->byte_len;
        c->polled_count++;
    }
    return true;
}

static unsigned srv_poll(struct rkv_sconn *sconn, struct rkv_msg *msgs, unsigned max)
{
    struct rdma_sconn *c = rdma_sconn_of(sconn);
    const uint32_t credits = c->sh->credits;
    unsigned got, want;

    if (c->q != NULL) {
        if (RKV_UNLIKELY(c->signaled)) { /* the worker's wake() made event_fd readable */
            uint64_t v;
            c->signaled = false;
            if (read(c->wake_efd, &v, sizeof v) < 0 && errno != EAGAIN)
                RKV_DEBUG("%s: cannot read its wake-up: %s", c->peer, strerror(errno));
        }
    } else if (RKV_UNLIKELY(c->armed)) {
        c->armed = false;
        drain_cq_events(c);
    }
    if (RKV_UNLIKELY(atomic_load_explicit(&c->dead, memory_order_relaxed)))
        return 0;
    if (c->q != NULL && RKV_UNLIKELY(!rkv_srq_tend(c->q)))
        RKV_DEBUG("%s: the shared receive queue stays at its size", c->peer);
    if (!take_arrivals(c) || max == 0)
        return 0;
    want = RKV_MIN(max, c->polled_count - c->handed);
    /* each request handed out takes its reply's buffer now */
    for (got = 0; got < want; got++) {
        unsigned at = (c->polled_head + c->handed) % credits;
        uint32_t slot = c->polled[at];
        if (RKV_UNLIKELY(!take_reply_buf(c, &c->reply_of[at])))
            break; /* the connection failed */
        msgs[got].data = c->q != NULL ? rkv_srq_buf(c->q, slot)
                                      : c->recvs.mem + (size_t)slot * c->sh->max_msg;
        msgs[got].len = c->lens[at];
        c->handed++;
    }
    c->requests += got;
    return got;
}

static void *srv_reply_buf(struct rkv_sconn *sconn, unsigned i)
{
    struct rdma_sconn *c = rdma_sconn_of(sconn);
    return rkv_reply_pool_buf(&c->wk->pool, c->reply_of[(c->polled_head + i) % c->sh->credits]);
}

/* The listener thread may learn first that the peer left. */
static bool conn_is_dead(void *ctx)
{
    struct rdma_sconn *c = ctx;
    return atomic_load_explicit(&c->dead, memory_order_relaxed);
}

/* Report a failed rkv_rdma_sq_wait(); returns RKV_CONNECTION. */
static rkv_status sq_wait_failed(struct rdma_sconn *c, int rc, enum ibv_wc_status bad,
                                 const char *what)
{
    /* -ECANCELED: the listener saw the peer leave and already set dead */
    if (rc == -EIO)
        conn_wc_fail(c, bad, what);
    else if (rc == -ETIMEDOUT)
        conn_fail(c, "the peer did not complete a transfer in time");
    else if (rc != -ECANCELED)
        conn_fail(c, "send queue accounting error (a bug: please report it)");
    return RKV_CONNECTION;
}

static rkv_status sq_wait(struct rdma_sconn *c, uint32_t limit, unsigned timeout_ms, const char *what)
{
    enum ibv_wc_status bad = IBV_WC_SUCCESS;
    int rc = rkv_rdma_sq_wait(&c->sq, c->send_cq, limit, timeout_ms * 1000000ull, conn_is_dead, c,
                              &bad);

    return RKV_LIKELY(rc == 0) ? RKV_OK : sq_wait_failed(c, rc, bad, what);
}

/* Post replies first..first+n-1 of the batch (lens[], their buffers by
 * FIFO place from `head`) as one chained SEND list: inline when they fit,
 * their buffer back to the pool at once; else from the buffer, which goes
 * back when the send has completed, and then the last WR is signaled so
 * that completion always comes. Returns 0 or an errno. */
static int post_replies(struct rdma_sconn *c, const uint32_t *lens, unsigned head, unsigned first,
                        unsigned n)
{
    const uint32_t credits = c->sh->credits;
    struct rkv_reply_pool *pool = &c->wk->pool;
    struct ibv_send_wr *bad = NULL;
    bool from_buf = false;
    int rc;

    for (unsigned i = 0; i < n; i++) {
        uint32_t buf = c->reply_of[(head + first + i) % credits];
        uint32_t len = lens[first + i];
        bool inl = len <= c->max_inline, signaled;
        c->s->ssge[i] = (struct ibv_sge){
            .addr = (uintptr_t)rkv_reply_pool_buf(pool, buf),
            .length = len,
            .lkey = rkv_reply_pool_lkey(pool, buf),
        };
        c->s->swr[i] = (struct ibv_send_wr){
            .next = i + 1 < n ? &c->s->swr[i + 1] : NULL,
            .sg_list = &c->s->ssge[i],
            .num_sge = 1,
            .opcode = IBV_WR_SEND,
            .send_flags = inl ? IBV_SEND_INLINE : 0,
        };
        from_buf |= !inl;
        c->s->swr[i].wr_id = rkv_rdma_sq_take(&c->sq, i + 1 == n, i + 1 == n && from_buf, &signaled);
        if (signaled)
            c->s->swr[i].send_flags |= IBV_SEND_SIGNALED;
        if (!inl) {
            unsigned at = (c->sent_head + c->sent_count++) % credits;
            c->sent_buf[at] = buf;
            c->sent_wr[at] = c->sq.taken;
        }
    }
    rc = ibv_post_send(c->id->qp, c->s->swr, &bad);
    /* the inline ones were copied (or never posted): their buffers are free */
    for (unsigned i = 0; i < n; i++)
        if (c->s->swr[i].send_flags & IBV_SEND_INLINE)
            rkv_reply_pool_give(pool, c->reply_of[(head + first + i) % credits]);
    if (from_buf)
        holder_link(c);
    return rc;
}

static rkv_status srv_reply(struct rkv_sconn *sconn, const uint32_t *lens, unsigned n)
{
    struct rdma_sconn *c = rdma_sconn_of(sconn);
    const uint32_t credits = c->sh->credits;
    const unsigned head = c->polled_head, most = c->sq.depth - c->sq.keep;
    unsigned k;
    int rc;

    if (RKV_UNLIKELY(atomic_load_explicit(&c->dead, memory_order_relaxed)))
        return RKV_CONNECTION;
    if (n == 0)
        return RKV_OK;
    if (RKV_UNLIKELY(n > c->handed))
        return RKV_INVALID;
    for (unsigned i = 0; i < n; i++)
        if (RKV_UNLIKELY(lens[i] > c->sh->max_msg))
            return RKV_INVALID;
    /* Give the request slots back first: the client may send its next
     * request the moment it sees a reply. The replies' buffers stay where
     * they are in reply_of (nothing is handed out until this returns). */
    for (unsigned i = 0; i < n; i++)
        c->s->repost[i] = c->polled[(c->polled_head + i) % credits];
    c->polled_head = (c->polled_head + n) % credits;
    c->polled_count -= n;
    c->handed -= n;
    rc = c->q != NULL ? rkv_srq_post(c->q, c->s->repost, n, c->s->rwr, c->s->rsge)
                      : rkv_rdma_post_recvs(c->id->qp, &c->recvs, c->sh->max_msg, c->s->repost, n,
                                            c->s->rwr, c->s->rsge);
    if (RKV_UNLIKELY(rc != 0)) {
        lent_back(c, head, 0, n);
        conn_fail(c, "ibv_post_recv failed");
        return RKV_CONNECTION;
    }
    /* Account finished sends without waiting, so that a wait below is rare:
     * with a live peer its NIC acknowledges within a round trip. */
    reap_sends(c);
    /* One post: more than `most` (a caller that batches past
     * RKV_REPLY_BATCH) go in several. */
    for (unsigned first = 0; first < n; first += k) {
        k = RKV_MIN(n - first, most);
        if (RKV_UNLIKELY(atomic_load_explicit(&c->dead, memory_order_relaxed) ||
                         sq_wait(c, c->sq.depth - k, REPLY_TIMEOUT_MS, "sending a reply") != RKV_OK)) {
            lent_back(c, head, first, n);
            return RKV_CONNECTION;
        }
        if (RKV_UNLIKELY(post_replies(c, lens, head, first, k) != 0)) {
            lent_back(c, head, first + k, n);
            conn_fail(c, "ibv_post_send failed");
            return RKV_CONNECTION;
        }
    }
    return RKV_OK;
}

/* Post one signaled RDMA READ of the client's buffer into `land`. */
static int post_pull_read(struct rdma_sconn *c, const struct rkv_remote_buf *rb, void *land,
                          uint32_t lkey)
{
    bool signaled;
    struct ibv_sge sge = { .addr = (uintptr_t)land, .length = rb->len, .lkey = lkey };
    struct ibv_send_wr wr = {
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_READ,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.rdma = { .remote_addr = rb->addr, .rkey = rb->rkey },
    }, *bad_wr = NULL;

    wr.wr_id = rkv_rdma_sq_take(&c->sq, true, true, &signaled);
    return ibv_post_send(c->id->qp, &wr, &bad_wr);
}

/* RDMA READ the client's staged value into `land` (lkey) and wait for it. */
static rkv_status pull_into(struct rdma_sconn *c, const struct rkv_remote_buf *rb, void *land,
                            uint32_t lkey)
{
    enum ibv_wc_status wc_status = IBV_WC_SUCCESS;
    char err[300];
    int rc;

    if (sq_wait(c, c->sq.depth - 1, PULL_TIMEOUT_MS, "pulling a value") != RKV_OK)
        return RKV_CONNECTION;
    if (post_pull_read(c, rb, land, lkey) != 0) {
        conn_fail(c, "ibv_post_send (RDMA READ) failed");
        return RKV_CONNECTION;
    }
    rc = rkv_rdma_sq_wait(&c->sq, c->send_cq, 0, PULL_TIMEOUT_MS * 1000000ull, conn_is_dead, c,
                          &wc_status);
    if (rc == -EIO && (wc_status == IBV_WC_REM_ACCESS_ERR || wc_status == IBV_WC_REM_INV_REQ_ERR)) {
        /* the descriptor came from the client: say whose fault it is */
        snprintf(err, sizeof err,
                 "the client's rendezvous descriptor (address 0x%llx, %u bytes, "
                 "rkey 0x%x) is not readable: %s (a client bug, or a hostile client)",
                 (unsigned long long)rb->addr, rb->len, rb->rkey, rkv_rdma_wc_status_name(wc_status));
        conn_fail(c, err);
        return RKV_CONNECTION;
    }
    if (rc != 0)
        return sq_wait_failed(c, rc, wc_status, "RDMA READ of the client's staged value");
    return RKV_OK;
}

/* Into the region directly (it is registered); anywhere else through a
 * buffer of the listener's staging pool (staging_pool.h), held for this
 * one READ and copy. */
static rkv_status srv_pull(struct rkv_sconn *sconn, const struct rkv_remote_buf *rb, void *dst)
{
    struct rdma_sconn *c = rdma_sconn_of(sconn);
    struct srv_shared *sh = c->sh;
    uint8_t *d = dst;
    void *taken;
    rkv_status st;

    if (atomic_load(&c->dead))
        return RKV_CONNECTION;
    if (rb->len == 0 || rb->len > RKV_RDMA_STAGING_SIZE || rb->addr + rb->len < rb->addr)
        return RKV_PROTOCOL;
    if (d >= sh->region_base && d + rb->len <= sh->region_base + sh->region_size)
        return pull_into(c, rb, d, sh->region_mr->lkey);
    st = rkv_staging_take(&sh->staging, PULL_TIMEOUT_MS * 1000000ull, &taken);
    if (st != RKV_OK) {
        RKV_WARN("%s: no staging buffer for a %u-byte value: %s", c->peer, rb->len,
                 st == RKV_TIMEOUT ? "all in use for longer than the pull timeout"
                                   : "cannot register one (memlock?)");
        return RKV_NO_MEMORY;
    }
    struct rkv_rdma_buf *bounce = taken;
    st = pull_into(c, rb, bounce->mem, bounce->mr->lkey);
    if (st == RKV_OK)
        memcpy(d, bounce->mem, rb->len);
    rkv_staging_give(&sh->staging, bounce);
    return st;
}

/* RC notices a dead peer only when it sends: a client that vanished while
 * its connection was idle (a cable pulled, a blackholed link) would hold
 * its slot and credits forever. So a connection that brought no request
 * for RKV_RDMA_KEEPALIVE_MS gets an RDMA READ of the few bytes the client
 * named at connect (rdma_util.h); a live peer's NIC answers it, a dead
 * one's retries run out within rkv_rdma_detect_ns() and the error
 * completion closes the connection. */
static void keepalive(struct rdma_sconn *c)
{
    uint64_t now = rkv_now_ns();
    enum ibv_wc_status bad;
    bool signaled;

    if (c->probe.magic == 0)
        return;
    if (c->probe_at == 0 || c->requests != c->requests_seen) {
        c->requests_seen = c->requests;
        c->probe_at = now + RKV_RDMA_KEEPALIVE_MS * 1000000ull;
        return;
    }
    if (rkv_rdma_sq_poll(&c->sq, c->send_cq, &bad) != 0) {
        conn_wc_fail(c, bad, "probing an idle peer (keepalive)");
        return;
    }
    if (now < c->probe_at || c->sq.outstanding >= c->sq.depth)
        return;
    struct ibv_sge sge = { .addr = (uintptr_t)c->sh->probe.mem,
                           .length = RKV_RDMA_PROBE_LEN,
                           .lkey = c->sh->probe.mr->lkey };
    struct ibv_send_wr wr = {
        .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED,
        .wr.rdma = { .remote_addr = c->probe.addr, .rkey = c->probe.rkey },
    }, *bad_wr;
    wr.wr_id = rkv_rdma_sq_take(&c->sq, true, true, &signaled);
    if (ibv_post_send(c->id->qp, &wr, &bad_wr) != 0)
        conn_fail(c, "ibv_post_send (keepalive probe) failed");
    c->probe_at = now + RKV_RDMA_KEEPALIVE_MS * 1000000ull;
}

/* Also where an idle connection's reply buffers come back to the pool
 * once their sends completed, and where one whose sends are stuck is
 * failed (check_stuck). */
static bool srv_alive(struct rkv_sconn *sconn)
{
    struct rdma_sconn *c = rdma_sconn_of(sconn);
    if (!atomic_load_explicit(&c->dead, memory_order_relaxed))
        keepalive(c);
    if (c->sent_count > 0 && !atomic_load_explicit(&c->dead, memory_order_relaxed)) {
        reap_sends(c);
        check_stuck(c, rkv_now_ns());
    }
    return !atomic_load_explicit(&c->dead, memory_order_relaxed);
}

static int srv_event_fd(struct rkv_sconn *sconn)
{
    struct rdma_sconn *c = rdma_sconn_of(sconn);
    return c->q != NULL ? c->wake_efd : c->comp->fd;
}

/* On a shared queue: the worker's receive CQ channel, which srv_wake()
 * serves for all its connections. */
static int srv_wake_fd(struct rkv_sconn *sconn, void **ctx)
{
    struct rdma_sconn *c = rdma_sconn_of(sconn);
    if (c->q == NULL)
        return -1;
    *ctx = c->wk;
    return c->wk->recv_comp->fd;
}

/* Ask for a completion event on the next request. The worker polls once
 * more after arming (a request that arrived just before is not signaled)
 * and sleeps on event_fd() only if that poll finds nothing. On a shared
 * queue the worker's receive CQ is armed (once for all its connections
 * until its event is taken: srv_wake) and c stays armed until a request
 * comes for it (arrival: conn_signal), polls or not. */
static void srv_arm(struct rkv_sconn *sconn)
{
    struct rdma_sconn *c = rdma_sconn_of(sconn);
    struct rdma_worker *wk = c->wk;

    if (c->q == NULL) {
        if (ibv_req_notify_cq(c->recv_cq, 0) != 0)
            conn_fail(c, "ibv_req_notify_cq failed");
        c->armed = true;
        return;
    }
    pthread_mutex_lock(&wk->table_lock);
    if (!c->armed) {
        c->armed = true;
        atomic_fetch_add_explicit(&wk->armed, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&wk->table_lock);
    if (!wk->notified) {
        if (ibv_req_notify_cq(wk->recv_cq, 0) != 0)
            conn_fail(c, "ibv_req_notify_cq failed");
        else
            wk->notified = true;
    }
}

static const char *srv_peer(struct rkv_sconn *sconn)
{
    struct rdma_sconn *c = rdma_sconn_of(sconn);
    return c->peer;
}

static int srv_worker_of(struct rkv_sconn *sconn)
{
    struct rdma_sconn *c = rdma_sconn_of(sconn);
    return (int)c->worker;
}

static void srv_close(struct rkv_sconn *sconn)
{
    struct rdma_sconn *c = rdma_sconn_of(sconn);
    conn_destroy(c);
}

static const struct rkv_msg_transport_ops rdma_msg_ops = {
    .region_desc = srv_region_desc,
    .lane_key = srv_lane_key,
    .reply_buf = srv_reply_buf,
    .pull = srv_pull,
};

const struct rkv_server_transport rkv_rdma_server_transport = {
    .scheme = "rdma",
    .msg = &rdma_msg_ops,
    .listen = srv_listen,
    .listener_fd = srv_listener_fd,
    .accept = srv_accept_conn,
    .close_listener = srv_close_listener,
    .poll = srv_poll,
    .reply = srv_reply,
    .alive = srv_alive,
    .event_fd = srv_event_fd,
    .arm = srv_arm,
    .wake_fd = srv_wake_fd,
    .wake = srv_wake,
    .peer = srv_peer,
    .worker_of = srv_worker_of,
    .close = srv_close,
};
