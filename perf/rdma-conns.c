/* rdma-conns.c — opens and closes many rdma connections to one rkv-server.
 *
 * The client half of the verbs suite's `conns` step (tests/verbs/guest.sh)
 * and of docs/results/2026-12-03-rdma-connections.md: what a connection
 * costs the server, whether closing gives it all back, and how fast
 * connections are set up. librkv's client registers a read buffer and a
 * 1 MiB staging buffer per connection, too much for a thousand in a small
 * guest; this tool is a bare rkv client instead: one PD, one CQ and one
 * small registered buffer for all its connections, and per connection an
 * rdma_cm id and a QP of 2 WRs, which connects and says HELLO (the server
 * answers it with its region descriptor: the connection is then what a
 * real client's is to the server).
 *
 *   rdma-conns HOST:PORT N [ROUNDS] [--hold]
 *   rdma-conns HOST:PORT N --deaf K
 *
 * With --deaf K each connection, once through HELLO, sends K STATS
 * requests and posts no receive for their replies (a peer that stopped
 * receiving: the server's sends of those replies, each from a buffer of
 * its worker's reply pool, are never taken), prints
 * "deaf N" and waits for a line on stdin; then it exits without closing
 * (the server closes them: the verbs suite's `deaf` step).
 *
 * Each round opens N connections (up to 32 setting up at once), each
 * through HELLO, then closes them all, and prints
 *   round R: opened N in S s (C conn/s), closed in S s
 * With --hold it prints "held N" after the opening of each round and waits
 * for a line on stdin before closing, and for another after the close
 * (a harness measures the server held, and after the close).
 * Exit status 0, 1 on a failed connection (the reason on stderr), 2 on bad
 * arguments.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "protocol.h"
#include "rdma_util.h"
#include "util.h"

#define IN_FLIGHT 32u   /* connections setting up at once */
#define MSG_BYTES 4096u /* one receive: the HELLO reply fits */
#define WAIT_MS   30000 /* no progress for this long: give up */
#define MAX_CONNS 100000L
#define MAX_DEAF  32 /* --deaf K: requests each at most */

enum conn_state { IDLE, RESOLVING, ROUTING, CONNECTING, HELLO, READY, CLOSING, GONE };

struct conn {
    struct rdma_cm_id *id;
    enum conn_state state;
};

struct churn {
    struct rdma_event_channel *ch;
    struct ibv_context *verbs; /* set by the first id resolved */
    struct ibv_pd *pd;
    struct ibv_comp_channel *comp;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    uint8_t *buf; /* [0, MSG_BYTES): receives (shared: contents unused) | the HELLO | STATS */
    uint32_t hello_len;
    uint32_t stats_len;
    unsigned deaf; /* --deaf K: K */
    struct sockaddr_storage addr;
    struct conn *conns;
    long n, started, ready, gone;
    long deaf_sent; /* --deaf: connections whose STATS the server's NIC acknowledged */
};

static double now_s(void)
{
    return (double)rkv_now_ns() / 1e9;
}

static int fail(const char *what, int err)
{
    fprintf(stderr, "rdma-conns: %s: %s\n", what, strerror(err));
    return -1;
}

/* PD, CQ and buffer, on the device the first id resolved to. */
static int setup_device(struct churn *w, struct ibv_context *verbs)
{
    w->verbs = verbs;
    w->pd = ibv_alloc_pd(verbs);
    w->comp = ibv_create_comp_channel(verbs);
    if (w->pd == NULL || w->comp == NULL)
        return fail("ibv_alloc_pd / ibv_create_comp_channel", errno);
    int flags = fcntl(w->comp->fd, F_GETFL);
    if (flags < 0 || fcntl(w->comp->fd, F_SETFL, flags | O_NONBLOCK) != 0)
        return fail("fcntl(completion channel)", errno);
    w->cq = ibv_create_cq(verbs, (int)(4 * IN_FLIGHT + 16), NULL, w->comp, 0);
    w->buf = calloc(1, 2 * MSG_BYTES);
    if (w->cq == NULL || w->buf == NULL || ibv_req_notify_cq(w->cq, 0) != 0)
        return fail("ibv_create_cq", errno);
    w->mr = ibv_reg_mr(w->pd, w->buf, 2 * MSG_BYTES, IBV_ACCESS_LOCAL_WRITE);
    if (w->mr == NULL)
        return fail("ibv_reg_mr", errno);
    struct rkv_req req = { .opcode = RKV_OP_HELLO, .req_id = 1, .arg = RKV_PROTO_VERSION };
    w->hello_len = (uint32_t)rkv_req_build(w->buf + MSG_BYTES, &req, "", NULL, 0, NULL, 0);
    struct rkv_req stats = { .opcode = RKV_OP_STATS, .req_id = 2 };
    w->stats_len = (uint32_t)rkv_req_build(w->buf + MSG_BYTES + MSG_BYTES / 2, &stats, "", NULL, 0,
                                           NULL, 0);
    return 0;
}

static int start_one(struct churn *w, long i)
{
    struct conn *c = &w->conns[i];
    if (rdma_create_id(w->ch, &c->id, (void *)(intptr_t)i, RDMA_PS_TCP) != 0)
        return fail("rdma_create_id", errno);
    if (rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&w->addr, 2000) != 0)
        return fail("rdma_resolve_addr", errno);
    c->state = RESOLVING;
    w->started++;
    return 0;
}

static int on_addr(struct churn *w, struct conn *c)
{
    if (w->verbs == NULL && setup_device(w, c->id->verbs) != 0)
        return -1;
    struct ibv_qp_init_attr a = {
        .send_cq = w->cq,
        .recv_cq = w->cq,
        .qp_type = IBV_QPT_RC,
        .cap = { .max_send_wr = 2 + w->deaf, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 },
    };
    if (rdma_create_qp(c->id, w->pd, &a) != 0)
        return fail("rdma_create_qp", errno);
    if (rdma_resolve_route(c->id, 2000) != 0)
        return fail("rdma_resolve_route", errno);
    c->state = ROUTING;
    return 0;
}

static int on_route(struct conn *c)
{
    struct rdma_conn_param cp = {
        .responder_resources = 1,
        .initiator_depth = 1,
        .retry_count = 6,
        .rnr_retry_count = 7,
    };
    if (rdma_connect(c->id, &cp) != 0)
        return fail("rdma_connect", errno);
    c->state = CONNECTING;
    return 0;
}

/* Connected: post the receive for the reply, send HELLO. */
static int on_established(struct churn *w, struct conn *c, long i)
{
    struct ibv_sge rs = { (uintptr_t)w->buf, MSG_BYTES, w->mr->lkey };
    struct ibv_recv_wr rwr = { .wr_id = (uint64_t)i, .sg_list = &rs, .num_sge = 1 }, *rbad;
    struct ibv_sge ss = { (uintptr_t)(w->buf + MSG_BYTES), w->hello_len, w->mr->lkey };
    struct ibv_send_wr swr = { .wr_id = (uint64_t)i,
                               .sg_list = &ss,
                               .num_sge = 1,
                               .opcode = IBV_WR_SEND,
                               .send_flags = IBV_SEND_SIGNALED },
                       *sbad;
    if (ibv_post_recv(c->id->qp, &rwr, &rbad) != 0 || ibv_post_send(c->id->qp, &swr, &sbad) != 0)
        return fail("posting HELLO", errno);
    c->state = HELLO;
    return 0;
}

static int on_cm_event(struct churn *w, struct rdma_cm_event *ev)
{
    long i = (long)(intptr_t)ev->id->context;
    struct conn *c = &w->conns[i];
    enum rdma_cm_event_type type = ev->event;
    int status = ev->status, rc = 0;

    rdma_ack_cm_event(ev);
    switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: rc = on_addr(w, c); break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: rc = on_route(c); break;
    case RDMA_CM_EVENT_ESTABLISHED: rc = on_established(w, c, i); break;
    case RDMA_CM_EVENT_DISCONNECTED:
        if (c->state == CLOSING) {
            c->state = GONE;
            w->gone++;
        } else {
            fprintf(stderr, "rdma-conns: connection %ld: the server disconnected\n", i);
            rc = -1;
        }
        break;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: break;
    default:
        fprintf(stderr, "rdma-conns: connection %ld: %s (status %d)\n", i, rdma_event_str(type),
                status);
        rc = -1;
        break;
    }
    return rc;
}

/* --deaf: K STATS requests in one post, and no receive for the replies. */
static int send_deaf(struct churn *w, struct conn *c)
{
    struct ibv_sge sge = { (uintptr_t)(w->buf + MSG_BYTES + MSG_BYTES / 2), w->stats_len,
                           w->mr->lkey };
    struct ibv_send_wr wrs[MAX_DEAF], *bad;

    for (unsigned i = 0; i < w->deaf; i++)
        wrs[i] = (struct ibv_send_wr){ .wr_id = UINT64_MAX,
                                       .next = i + 1 < w->deaf ? &wrs[i + 1] : NULL,
                                       .sg_list = &sge,
                                       .num_sge = 1,
                                       .opcode = IBV_WR_SEND };
    wrs[w->deaf - 1].send_flags = IBV_SEND_SIGNALED;
    if (ibv_post_send(c->id->qp, wrs, &bad) != 0)
        return fail("posting STATS", errno);
    return 0;
}

/* HELLO sent and its reply received: ready. */
static int on_completions(struct churn *w)
{
    struct ibv_wc wc[16];
    struct ibv_cq *cq;
    void *ctx;
    int n;

    if (ibv_get_cq_event(w->comp, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        ibv_req_notify_cq(cq, 0);
    }
    while ((n = ibv_poll_cq(w->cq, (int)RKV_ARRAY_SIZE(wc), wc)) > 0) {
        for (int k = 0; k < n; k++) {
            if (wc[k].status != IBV_WC_SUCCESS) {
                fprintf(stderr, "rdma-conns: connection %lu: %s\n", (unsigned long)wc[k].wr_id,
                        ibv_wc_status_str(wc[k].status));
                return -1;
            }
            if (wc[k].opcode != IBV_WC_RECV) {
                w->deaf_sent += wc[k].wr_id == UINT64_MAX;
                continue;
            }
            struct rkv_resp r;
            memcpy(&r, w->buf, sizeof r);
            if (r.opcode != RKV_OP_HELLO || r.status != RKV_OK) {
                fprintf(stderr, "rdma-conns: HELLO refused: %s\n", rkv_strerror(r.status));
                return -1;
            }
            w->conns[wc[k].wr_id].state = READY;
            w->ready++;
            if (w->deaf > 0 && send_deaf(w, &w->conns[wc[k].wr_id]) != 0)
                return -1;
        }
    }
    return n < 0 ? fail("ibv_poll_cq", EIO) : 0;
}

/* Serve cm events and completions until done() or WAIT_MS without any. */
static int run_until(struct churn *w, bool (*done)(const struct churn *w), bool opening)
{
    while (!done(w)) {
        while (opening && w->started < w->n && w->started - w->ready < IN_FLIGHT)
            if (start_one(w, w->started) != 0)
                return -1;
        struct pollfd pfd[2] = { { .fd = w->ch->fd, .events = POLLIN },
                                 { .fd = w->comp != NULL ? w->comp->fd : -1, .events = POLLIN } };
        int p = poll(pfd, 2, WAIT_MS);
        if (p == 0) {
            fprintf(stderr, "rdma-conns: no progress for %d ms\n", WAIT_MS);
            return -1;
        }
        struct rdma_cm_event *ev;
        while (rdma_get_cm_event(w->ch, &ev) == 0)
            if (on_cm_event(w, ev) != 0)
                return -1;
        if (w->cq != NULL && on_completions(w) != 0)
            return -1;
    }
    return 0;
}

static bool all_ready(const struct churn *w)
{
    return w->ready == w->n;
}

static bool all_deaf(const struct churn *w)
{
    return w->ready == w->n && w->deaf_sent == w->n;
}

static bool all_gone(const struct churn *w)
{
    return w->gone == w->n;
}

/* --hold: a line on stdin (or its end) says go on. */
static void wait_line(void)
{
    char line[16];
    if (fgets(line, sizeof line, stdin) == NULL)
        return; /* end of input: go on too */
}

static int round_trip(struct churn *w, int r, bool hold)
{
    w->started = w->ready = w->gone = 0;
    double t0 = now_s();
    if (run_until(w, all_ready, true) != 0)
        return -1;
    double t1 = now_s();
    if (hold) {
        printf("held %ld\n", w->n);
        fflush(stdout);
        wait_line();
    }
    double t2 = now_s();
    for (long i = 0; i < w->n; i++) {
        w->conns[i].state = CLOSING;
        rdma_disconnect(w->conns[i].id);
    }
    if (run_until(w, all_gone, false) != 0)
        return -1;
    for (long i = 0; i < w->n; i++) {
        rdma_destroy_qp(w->conns[i].id);
        rdma_destroy_id(w->conns[i].id);
        w->conns[i] = (struct conn){ 0 };
    }
    double t3 = now_s();
    printf("round %d: opened %ld in %.2f s (%.0f conn/s), closed in %.2f s\n", r, w->n, t1 - t0,
           (double)w->n / (t1 - t0), t3 - t2);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    struct churn w = { 0 };
    char err[300];
    bool hold = false;
    long rounds = 1;
    int rc = 1;

    if (argc > 1 && strcmp(argv[argc - 1], "--hold") == 0) {
        hold = true;
        argc--;
    }
    if (argc == 5 && strcmp(argv[3], "--deaf") == 0) {
        long k = strtol(argv[4], NULL, 10);
        if (k < 1 || k > MAX_DEAF) {
            fprintf(stderr, "rdma-conns: --deaf takes 1..%d\n", MAX_DEAF);
            return 2;
        }
        w.deaf = (unsigned)k;
        argc = 3;
    }
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: rdma-conns HOST:PORT N [ROUNDS] [--hold]\n"
                        "       rdma-conns HOST:PORT N --deaf K\n");
        return 2;
    }
    w.n = strtol(argv[2], NULL, 10);
    rounds = argc == 4 ? strtol(argv[3], NULL, 10) : 1;
    if (w.n < 1 || w.n > MAX_CONNS || rounds < 1 ||
        rkv_rdma_parse_addr(argv[1], false, &w.addr, err, sizeof err) != RKV_OK) {
        fprintf(stderr, "rdma-conns: bad arguments%s%s\n", err[0] ? ": " : "", err);
        return 2;
    }
    w.conns = calloc((size_t)w.n, sizeof *w.conns);
    w.ch = rdma_create_event_channel();
    if (w.conns == NULL || w.ch == NULL) {
        fail("rdma_create_event_channel", errno);
        return 1;
    }
    int flags = fcntl(w.ch->fd, F_GETFL);
    fcntl(w.ch->fd, F_SETFL, flags | O_NONBLOCK);
    if (w.deaf > 0) { /* open, go deaf, wait, and leave the closing to the server */
        if (run_until(&w, all_deaf, true) != 0)
            goto out;
        printf("deaf %ld\n", w.n);
        fflush(stdout);
        wait_line();
        _exit(0);
    }
    for (int r = 1; r <= rounds; r++) {
        if (round_trip(&w, r, hold) != 0)
            goto out;
        if (hold)
            wait_line();
    }
    rc = 0;
out:
    if (w.mr != NULL)
        ibv_dereg_mr(w.mr);
    free(w.buf);
    if (w.cq != NULL)
        ibv_destroy_cq(w.cq);
    if (w.comp != NULL)
        ibv_destroy_comp_channel(w.comp);
    if (w.pd != NULL)
        ibv_dealloc_pd(w.pd);
    rdma_destroy_event_channel(w.ch);
    free(w.conns);
    return rc;
}
