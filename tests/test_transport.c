/* test_transport.c — one test for every transport, driven by a URI.
 *
 *   test_transport [URI]      URI = argv[1], else $RKV_TEST_URI, else
 *                             shm://<a fresh temp dir>/t.sock
 *
 * It checks the contract in common/transport.h, knowing nothing about any
 * transport beyond picking its two operation tables by the URI's scheme, so
 * the same binary runs over shm here and over rdma:// in the Soft-RoCE VM
 * (tests/verbs/run.sh).
 *
 * In-process server: a real region (rkv_region_create) holding a
 * recognisable byte pattern behind a plausible header, a listener, and one
 * thread that accepts connections and answers every request with exactly one
 * reply through poll / reply_buf / reply (polling again before it replies,
 * as the worker does), sleeping in event mode (arm + event_fd + listener_fd)
 * when idle. Its tiny protocol:
 *
 *   HELLO  -> an rkv_hello built from the listener (what set_region needs)
 *   ECHO   -> the request's bytes, unchanged
 *   PULL   -> pulls the staged value the request describes and answers with
 *             pull()'s status and the XXH3 hash of what arrived
 *   BYE    -> the request's bytes; then the connection is handed to the
 *             test (t_server.handed), which closes it
 *
 * Clients check: batches cost exactly one doorbell, replies come back whole
 * and in order, credits can all be in flight at once and not more, region
 * reads return the region's bytes, staged values arrive exactly, a client
 * that vanishes mid-batch is cleaned up while the listener keeps serving,
 * several clients at once get only their own replies, a connection the
 * server closes gives its max_conns place back before its peer can see the
 * hang-up, and connect() with NULL or zero params runs with
 * rkv_ctrans_params_init()'s values.
 *
 * Linked with --wrap=close and --wrap=rdma_disconnect: the hang-up hook
 * (test_place_given_back_first) holds a close right after the step that
 * lets the peer see it.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <cmocka.h>

#include "layout.h"
#include "log.h"
#include "region.h"
#include "transport.h"
#include "util.h"

#define T_CREDITS    16u
#define T_MAX_MSG    2048u
#define T_REGION     (16u << 20)
#define T_TIMEOUT_MS 5000u
#define T_MAX_CONNS  8u
#define T_MAX_PULL   (64u << 20)
#define T_SLEEP_MS   2000 /* longest idle wait of the test server */

/* ---------------------------------------------------------- the URI */

static char g_uri[256];
static const char *g_addr; /* after "scheme://" */
static char g_tmpdir[64];  /* for the default shm path */
static const struct rkv_client_transport *ct;
static const struct rkv_server_transport *st;

/* ------------------------------------------------ the test protocol */

enum { T_HELLO = 1, T_ECHO, T_PULL, T_BYE, T_STALL, T_HOLD };

struct t_hdr {
    uint32_t kind; /* T_* */
    uint32_t seq;  /* echoed by HELLO / PULL replies */
};

struct t_pull_req {
    struct t_hdr h;
    struct rkv_remote_buf rb;
};

struct t_pull_reply {
    struct t_hdr h;
    uint32_t status; /* what pull() returned */
    uint32_t pad;
    uint64_t hash; /* XXH3-64 of the pulled bytes */
};

struct t_hello_reply {
    struct t_hdr h;
    struct rkv_hello hello;
};

/* Deterministic content: message `seq` of client `who`. */
static uint32_t echo_len(uint64_t seq)
{
    uint32_t lens[] = { 8, 9, 64, 100, 511, 1000, T_MAX_MSG - 1, T_MAX_MSG };
    return lens[seq % RKV_ARRAY_SIZE(lens)];
}

static void echo_fill(void *buf, uint32_t who, uint32_t seq, uint32_t len)
{
    uint8_t *p = buf;
    struct t_hdr h = { T_ECHO, seq };
    memcpy(p, &h, sizeof h);
    for (uint32_t i = sizeof h; i < len; i++)
        p[i] = (uint8_t)(seq * 131u + i * 7u + who * 29u);
}

/* Region content after the header: a function of the offset. */
static uint8_t region_byte(uint64_t off)
{
    uint64_t x = off * 0x9E3779B97F4A7C15ull;
    return (uint8_t)(x >> 56);
}

/* ----------------------------------------------------- the server */

struct t_server {
    struct rkv_region region;
    struct rkv_listener *l;
    struct rkv_strans_params params;
    pthread_t thread;
    _Atomic bool stop;
    int stop_fd;               /* eventfd that wakes the server to stop */
    _Atomic unsigned accepted; /* connections ever accepted */
    _Atomic unsigned closed;   /* connections closed after alive() went false */
    _Atomic unsigned pulls_ok;
    _Atomic unsigned pulls_failed;
    _Atomic unsigned bad_requests; /* unknown kind: the test fails on it */
    _Atomic unsigned sleeps;       /* times the server blocked in event mode */
    _Atomic bool sleep_untimed;    /* block with no timeout: only a wake-up ends a sleep */
    _Atomic unsigned holds;        /* T_HOLDs begun */
    _Atomic unsigned releases;     /* T_HOLDs the test let go */
    struct rkv_sconn *conns[T_MAX_CONNS];
    unsigned nconns;
    struct rkv_sconn *bye;            /* said BYE in this pass: handed over after its reply */
    struct rkv_sconn *_Atomic handed; /* a BYE connection for the test to close */
};

static struct t_server g_srv;

static uint32_t handle(struct t_server *s, struct rkv_sconn *c, const struct rkv_msg *m, void *out)
{
    struct t_hdr h;
    if (m->len < sizeof h) {
        atomic_fetch_add(&s->bad_requests, 1);
        return 0;
    }
    memcpy(&h, m->data, sizeof h);
    switch (h.kind) {
    case T_HELLO: {
        struct t_hello_reply r;
        memset(&r, 0, sizeof r);
        r.h = h;
        r.hello.proto_version = RKV_PROTO_VERSION;
        r.hello.credits = s->params.credits;
        r.hello.max_msg = s->params.max_msg;
        st->msg->region_desc(s->l, &r.hello.rkey, &r.hello.region_addr);
        r.hello.region_size = s->region.size;
        r.hello.generation = ((const struct rkv_region_header *)s->region.base)->generation;
        r.hello.clock = 1;
        memcpy(out, &r, sizeof r);
        return sizeof r;
    }
    case T_BYE: /* answered as an echo, then handed over */
        s->bye = c;
        memcpy(out, m->data, m->len);
        return m->len;
    case T_ECHO: memcpy(out, m->data, m->len); return m->len;
    case T_STALL: /* hold the batch while the connection is alive, for up to
                     * T_TIMEOUT_MS, taking its arrivals (poll for none) */
    {
        uint64_t end = rkv_now_ns() + T_TIMEOUT_MS * 1000000ull;
        while (st->alive(c) && rkv_now_ns() < end)
            (void)st->poll(c, NULL, 0);
        memcpy(out, m->data, m->len);
        return m->len;
    }
    case T_HOLD: /* poll nothing (its arrivals pile up in the transport)
                    * until the test lets go, for up to 2 x T_TIMEOUT_MS
                    * (past the client's own wait) */
    {
        uint64_t end = rkv_now_ns() + 2 * T_TIMEOUT_MS * 1000000ull;
        unsigned n = atomic_fetch_add(&s->holds, 1) + 1;
        while (atomic_load(&s->releases) < n && rkv_now_ns() < end)
            sched_yield();
        memcpy(out, m->data, m->len);
        return m->len;
    }
    case T_PULL: {
        struct t_pull_req req;
        struct t_pull_reply r;
        memset(&r, 0, sizeof r);
        r.h = h;
        if (m->len != sizeof req) {
            atomic_fetch_add(&s->bad_requests, 1);
            return 0;
        }
        memcpy(&req, m->data, sizeof req);
        uint8_t *buf = req.rb.len <= T_MAX_PULL ? malloc(req.rb.len + 1) : NULL;
        r.status = buf != NULL ? st->msg->pull(c, &req.rb, buf) : RKV_TOO_LARGE;
        if (r.status == RKV_OK) {
            r.hash = XXH3_64bits(buf, req.rb.len);
            atomic_fetch_add(&s->pulls_ok, 1);
        } else {
            atomic_fetch_add(&s->pulls_failed, 1);
        }
        free(buf);
        memcpy(out, &r, sizeof r);
        return sizeof r;
    }
    default: atomic_fetch_add(&s->bad_requests, 1); return 0;
    }
}

/* Serve every connection once; close the dead. Returns requests served. */
static unsigned serve_pass(struct t_server *s)
{
    struct rkv_msg msgs[T_CREDITS];
    uint32_t lens[T_CREDITS];
    unsigned work = 0;

    for (unsigned i = 0; i < s->nconns;) {
        struct rkv_sconn *c = s->conns[i];
        unsigned n = 0, got;
        /* as server/worker.c: poll again before replying, so requests that
         * arrived meanwhile join the batch (the contract allows it) */
        while (n < T_CREDITS && (got = st->poll(c, msgs + n, T_CREDITS - n)) > 0) {
            for (unsigned k = n; k < n + got; k++)
                lens[k] = handle(s, c, &msgs[k], st->msg->reply_buf(c, k));
            n += got;
        }
        if (n > 0)
            (void)st->reply(c, lens, n); /* a dead peer shows in alive() */
        work += n;
        if (s->bye == c) { /* the test closes it */
            s->bye = NULL;
            s->conns[i] = s->conns[--s->nconns];
            atomic_store(&s->handed, c);
            continue;
        }
        if (!st->alive(c)) {
            st->close(c);
            s->conns[i] = s->conns[--s->nconns];
            atomic_fetch_add(&s->closed, 1);
            continue;
        }
        i++;
    }
    return work;
}

static void accept_pass(struct t_server *s)
{
    while (s->nconns < T_MAX_CONNS) {
        struct rkv_sconn *c = NULL;
        if (st->accept(s->l, &c) != RKV_OK || c == NULL)
            return;
        s->conns[s->nconns++] = c;
        atomic_fetch_add(&s->accepted, 1);
    }
}

/* Event mode: arm every connection, re-check, then block on the fds, for
 * up to T_SLEEP_MS, or until woken when sleep_untimed is set (then a lost
 * wake-up is a reply that never comes: test_event_wakeup). */
static void sleep_pass(struct t_server *s)
{
    struct pollfd pfd[2 * T_MAX_CONNS + 2];
    void *ctx[2 * T_MAX_CONNS + 2] = { 0 }; /* a shared wake-up's: wake() it */
    unsigned n = 0;

    for (unsigned i = 0; i < s->nconns; i++)
        rkv_sconn_arm(st, s->conns[i]);
    if (serve_pass(s) != 0)
        return;
    pfd[n++] = (struct pollfd){ .fd = s->stop_fd, .events = POLLIN };
    pfd[n++] = (struct pollfd){ .fd = st->listener_fd(s->l), .events = POLLIN };
    for (unsigned i = 0; i < s->nconns; i++) {
        void *wctx;
        int fd = rkv_sconn_event_fd(st, s->conns[i]), wfd = rkv_sconn_wake_fd(st, s->conns[i], &wctx);
        unsigned k = 2;
        if (fd >= 0)
            pfd[n++] = (struct pollfd){ .fd = fd, .events = POLLIN };
        while (wfd >= 0 && k < n && pfd[k].fd != wfd)
            k++;
        if (wfd >= 0 && k == n) { /* as server/worker.c: each shared fd once */
            ctx[n] = wctx;
            pfd[n++] = (struct pollfd){ .fd = wfd, .events = POLLIN };
        }
    }
    atomic_fetch_add(&s->sleeps, 1);
    if (poll(pfd, n, atomic_load(&s->sleep_untimed) ? -1 : T_SLEEP_MS) <= 0)
        return;
    for (unsigned k = 2; k < n; k++)
        if (ctx[k] != NULL && (pfd[k].revents & POLLIN))
            st->wake(ctx[k]);
}

static void *server_main(void *arg)
{
    struct t_server *s = arg;
    unsigned idle = 0;

    while (!atomic_load(&s->stop)) {
        accept_pass(s);
        if (serve_pass(s) != 0) {
            idle = 0;
            continue;
        }
        if (++idle < 200) {
            sched_yield();
            continue;
        }
        sleep_pass(s);
    }
    while (s->nconns > 0)
        st->close(s->conns[--s->nconns]);
    return NULL;
}

/* Give the liveness lock back (a clean server stop) and free the region. */
static void region_free(struct t_server *s)
{
    rkv_region_release_liveness(s->region.base);
    rkv_region_destroy(&s->region);
}

static int server_start(void **state)
{
    struct t_server *s = &g_srv;
    char err[512];
    (void)state;

    memset(s, 0, sizeof *s);
    if (rkv_region_create(T_REGION, &s->region, err, sizeof err) != RKV_OK) {
        fprintf(stderr, "region: %s\n", err);
        return -1;
    }
    uint8_t *base = s->region.base;
    for (uint64_t off = RKV_HEADER_SIZE; off < s->region.size; off++)
        base[off] = region_byte(off);
    struct rkv_region_header *h = s->region.base;
    memset(h, 0, RKV_HEADER_SIZE);
    h->magic = RKV_REGION_MAGIC;
    h->format_version = RKV_FORMAT_VERSION;
    h->header_size = RKV_HEADER_SIZE;
    h->generation = 0x1234567890abcdefull;
    h->region_size = s->region.size;
    h->index_offset = RKV_HEADER_SIZE;
    h->index_base = 1024;
    h->index_capacity = 1024;
    h->heap_offset = RKV_HEADER_SIZE + 1024 * sizeof(struct rkv_bucket);
    h->slab_page_size = 1u << 20;
    h->heap_size = (s->region.size - h->heap_offset) / h->slab_page_size * h->slab_page_size;
    h->max_key_len = RKV_MAX_KEY_LEN;
    h->max_value_len = h->slab_page_size - RKV_ITEM_HEADER_MAX - RKV_MAX_KEY_LEN;
    h->clock = 1;
    /* what a live server holds; shm readers refuse a region without it */
    if (rkv_region_hold_liveness(h, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        rkv_region_destroy(&s->region);
        return -1;
    }

    rkv_strans_params_init(&s->params);
    s->params.credits = T_CREDITS;
    s->params.max_msg = T_MAX_MSG;
    s->params.max_conns = T_MAX_CONNS;
    s->params.no_srq = getenv("RKV_TEST_NO_SRQ") != NULL; /* rdma: receive buffers per QP */
    s->params.reply_pool = 1; /* rdma: the smallest reply pool (2 x T_CREDITS buffers), which
                                 test_reply_pool_shared's clients outnumber */
    if (st->listen(g_addr, &s->region, &s->params, &s->l, err, sizeof err) != RKV_OK) {
        fprintf(stderr, "listen on %s: %s\n", g_uri, err);
        s->l = NULL;
        region_free(s);
        return -1;
    }
    s->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (s->stop_fd < 0 || pthread_create(&s->thread, NULL, server_main, s) != 0) {
        st->close_listener(s->l);
        s->l = NULL;
        region_free(s);
        return -1;
    }
    return 0;
}

static int server_stop(void **state)
{
    struct t_server *s = &g_srv;
    (void)state;
    if (s->l == NULL)
        return 0; /* cmocka runs the teardown even when setup failed */
    atomic_store(&s->stop, true);
    uint64_t one = 1;
    if (write(s->stop_fd, &one, sizeof one) != (ssize_t)sizeof one)
        return -1;
    pthread_join(s->thread, NULL);
    close(s->stop_fd);
    st->close_listener(s->l);
    region_free(s);
    return 0;
}

/* ------------------------------------------------------ client side */

struct t_client {
    struct rkv_ctrans *t;
    struct rkv_trans_counters counters;
    struct rkv_hello hello;
    uint32_t who; /* distinguishes concurrent clients' bytes */
    uint32_t seq; /* next echo sequence number */
};

/* Wait for the next reply, copy it out, give the buffer back. */
static size_t recv_copy(struct t_client *cl, void *out, size_t cap)
{
    const void *msg;
    size_t len;
    rkv_status rc = ct->recv(cl->t, &msg, &len, T_TIMEOUT_MS);
    if (rc != RKV_OK)
        fail_msg("recv: %s", rkv_strerror(rc));
    assert_true(len <= cap);
    memcpy(out, msg, len);
    ct->recv_done(cl->t);
    return len;
}

/* rdma: the clients' signal interval; 0: the default */
static unsigned g_client_signal;

/* client_open() that tells the client it has `credits` (the server gave T_CREDITS). */
static void client_open_credits(struct t_client *cl, uint32_t who, uint32_t credits);

static void client_open(struct t_client *cl, uint32_t who)
{
    client_open_credits(cl, who, T_CREDITS);
}

static void client_open_credits(struct t_client *cl, uint32_t who, uint32_t credits)
{
    char err[512];
    struct rkv_ctrans_params p = { .timeout_ms = T_TIMEOUT_MS,
                                   .local_buf_size = 4u << 20,
                                   .signal_interval = g_client_signal };
    memset(cl, 0, sizeof *cl);
    cl->who = who;
    rkv_status rc = ct->connect(g_addr, &p, &cl->counters, &cl->t, err, sizeof err);
    if (rc != RKV_OK)
        fail_msg("connect %s: %s", g_uri, err);

    /* HELLO: one message, one doorbell */
    struct t_hdr h = { T_HELLO, 7 };
    memcpy(ct->send_buf(cl->t, 0), &h, sizeof h);
    uint32_t len = sizeof h;
    assert_int_equal(RKV_OK, ct->send(cl->t, &len, 1));
    assert_int_equal(1, cl->counters.doorbells);
    assert_int_equal(1, cl->counters.sends);
    struct t_hello_reply r;
    assert_int_equal(sizeof r, recv_copy(cl, &r, sizeof r));
    assert_int_equal(T_HELLO, r.h.kind);
    assert_int_equal(7, r.h.seq);
    assert_int_equal(T_CREDITS, r.hello.credits);
    assert_int_equal(g_srv.region.size, r.hello.region_size);
    r.hello.credits = credits;
    cl->hello = r.hello;
    rc = ct->set_region(cl->t, &r.hello, err, sizeof err);
    if (rc != RKV_OK)
        fail_msg("set_region: %s", err);
}

static void client_close(struct t_client *cl)
{
    ct->close(cl->t);
    cl->t = NULL;
}

/* Post n echo requests in ONE send() (one doorbell). */
static void echo_send(struct t_client *cl, unsigned n)
{
    uint32_t lens[2 * T_CREDITS];
    uint64_t doorbells = cl->counters.doorbells, sends = cl->counters.sends;
    for (unsigned i = 0; i < n; i++) {
        uint8_t *b = ct->send_buf(cl->t, i);
        assert_non_null(b);
        lens[i] = echo_len(cl->seq + i);
        echo_fill(b, cl->who, cl->seq + i, lens[i]);
    }
    assert_int_equal(RKV_OK, ct->send(cl->t, lens, n));
    assert_int_equal(doorbells + 1, cl->counters.doorbells);
    assert_int_equal(sends + n, cl->counters.sends);
    cl->seq += n;
}

/* Receive n echoes, which must be sequence numbers first..first+n-1. */
static void echo_recv(struct t_client *cl, uint32_t first, unsigned n)
{
    static _Thread_local uint8_t want[T_MAX_MSG], got[T_MAX_MSG];
    for (unsigned i = 0; i < n; i++) {
        uint32_t len = echo_len(first + i);
        echo_fill(want, cl->who, first + i, len);
        size_t glen = recv_copy(cl, got, sizeof got);
        assert_int_equal(len, glen);
        assert_memory_equal(want, got, len);
    }
}

/* ------------------------------------------------------------ tests */

static void test_echo_batches(void **state)
{
    (void)state;
    struct t_client cl;
    static const unsigned sizes[] = { 1, 2, 3, T_CREDITS / 2, T_CREDITS, 5, T_CREDITS - 1, 1 };

    client_open(&cl, 1);
    for (unsigned round = 0; round < 400; round++) {
        unsigned n = sizes[round % RKV_ARRAY_SIZE(sizes)];
        uint32_t first = cl.seq;
        echo_send(&cl, n);
        echo_recv(&cl, first, n);
    }
    assert_int_equal(0, atomic_load(&g_srv.bad_requests));
    client_close(&cl);
}

/* All credits in flight at once, over several sends, and not one more. */
static void test_credits(void **state)
{
    (void)state;
    struct t_client cl;

    client_open(&cl, 2);
    for (unsigned round = 0; round < 50; round++) {
        uint32_t first = cl.seq;
        unsigned a = 1 + round % (T_CREDITS - 1);
        echo_send(&cl, a);
        echo_send(&cl, T_CREDITS - a);
        /* the window is full: a further request is refused, not queued
         * (its send_buf may still hold an unconsumed request: not touched) */
        uint32_t len = 8;
        uint64_t doorbells = cl.counters.doorbells;
        assert_int_equal(RKV_INVALID, ct->send(cl.t, &len, 1));
        assert_int_equal(doorbells, cl.counters.doorbells);
        echo_recv(&cl, first, T_CREDITS);
    }
    /* interleaved: refill the window as replies return */
    uint32_t next_recv = cl.seq;
    echo_send(&cl, T_CREDITS);
    for (unsigned i = 0; i < 200; i++) {
        echo_recv(&cl, next_recv++, 1);
        echo_send(&cl, 1);
    }
    echo_recv(&cl, next_recv, T_CREDITS);
    client_close(&cl);
}

/* A client that sends past its credits is closed, and a client beside it
 * is served. rdma on a shared receive queue: there the extra requests would
 * take receive buffers that back other clients' credits (with receive
 * buffers per QP they only wait for their own, so there is nothing to see).
 * The server holds the liar's first request (T_STALL) and takes arrivals
 * until the connection dies or T_TIMEOUT_MS passes; RC delivers the rest
 * in order, so the server sees them all while it holds the first. */
static void test_past_credits(void **state)
{
    (void)state;
    struct t_client good, liar;
    const void *msg;
    size_t len;
    unsigned replies = 0;
    rkv_status rc = RKV_OK;

    if (strcmp(st->scheme, "rdma") != 0 || getenv("RKV_TEST_NO_SRQ") != NULL)
        skip();
    client_open(&good, 20);
    client_open_credits(&liar, 21, 2 * T_CREDITS);
    struct t_hdr h = { T_STALL, 0 };
    memcpy(ct->send_buf(liar.t, 0), &h, sizeof h);
    uint32_t hlen = sizeof h;
    assert_int_equal(RKV_OK, ct->send(liar.t, &hlen, 1));
    echo_send(&liar, 2 * T_CREDITS - 1); /* T_CREDITS past the real credits */
    while (replies < 2 * T_CREDITS &&
           (rc = ct->recv(liar.t, &msg, &len, 2 * T_TIMEOUT_MS)) == RKV_OK) {
        ct->recv_done(liar.t);
        replies++;
    }
    assert_int_equal(RKV_CONNECTION, rc);
    assert_true(replies <= T_CREDITS);
    client_close(&liar);
    uint32_t first = good.seq;
    echo_send(&good, T_CREDITS);
    echo_recv(&good, first, T_CREDITS);
    client_close(&good);
}

static bool wait_for(_Atomic unsigned *v, unsigned want, unsigned ms);

/* Liars that flood far past their credits leave the shared receive queue
 * its buffers. A receive CQ smaller than the queue overran when a liar's
 * requests came faster than the server polled: the completion of the
 * receive that overflowed was lost, and its buffer with it, one a liar
 * until none was left and every sender was RNR-retried forever. Here the
 * queue is one chunk (RKV_SRQ_CHUNK buffers: the credits of these few
 * connections ask for no more). Each liar sends a request the server holds
 * without polling (T_HOLD); a client beside it (on the same worker: the
 * server has one, and one receive CQ for its connections) sends 2 requests;
 * then the liar sends the rest of the chunk in one batch, far more than
 * credits + 1: it must land without breaking the connection (the liar
 * signals every send, so send() returns once all but 2 are acknowledged:
 * the 2 the client's requests took wait), on the buffers the liar before
 * gave back. Then the server polls, the client's requests among the
 * liar's flood in the CQ go to the client, the liar is closed, its buffers
 * go back (the 2 land), and the client is answered. */
static void test_floods_leave_the_srq_its_buffers(void **state)
{
    (void)state;
    enum { LIARS = 4, FLOOD = 4 * T_CREDITS };
    struct t_client good, liar;
    uint32_t lens[FLOOD - 1];
    const void *msg;
    size_t len;

    if (strcmp(st->scheme, "rdma") != 0 || getenv("RKV_TEST_NO_SRQ") != NULL)
        skip();
    client_open(&good, 30);
    for (unsigned i = 0; i < LIARS; i++) {
        unsigned holds = atomic_load(&g_srv.holds);
        g_client_signal = 1; /* send() returns once all but 2 are acknowledged */
        client_open_credits(&liar, 31 + i, FLOOD);
        g_client_signal = 0;
        struct t_hdr h = { T_HOLD, 0 };
        memcpy(ct->send_buf(liar.t, 0), &h, sizeof h);
        uint32_t hlen = sizeof h;
        assert_int_equal(RKV_OK, ct->send(liar.t, &hlen, 1));
        assert_true(wait_for(&g_srv.holds, holds + 1, T_TIMEOUT_MS));
        uint32_t good_first = good.seq;
        echo_send(&good, 2);
        for (unsigned k = 0; k < FLOOD - 1; k++) {
            lens[k] = echo_len(k);
            echo_fill(ct->send_buf(liar.t, k), liar.who, k, lens[k]);
        }
        rkv_status sent = ct->send(liar.t, lens, FLOOD - 1), rc = sent;
        atomic_fetch_add(&g_srv.releases, 1);
        while (rc == RKV_OK && (rc = ct->recv(liar.t, &msg, &len, 2 * T_TIMEOUT_MS)) == RKV_OK)
            ct->recv_done(liar.t);
        client_close(&liar); /* first: a failure leaves the next tests their places */
        assert_int_equal(RKV_OK, sent);
        assert_int_equal(RKV_CONNECTION, rc);
        echo_recv(&good, good_first, 2);
    }
    uint32_t first = good.seq;
    echo_send(&good, T_CREDITS);
    echo_recv(&good, first, T_CREDITS);
    client_close(&good);
}

static void test_reads(void **state)
{
    (void)state;
    struct t_client cl;
    size_t cap;
    unsigned rnd = 99;

    client_open(&cl, 3);
    uint8_t *lb = ct->local_buf(cl.t, &cap);
    assert_non_null(lb);
    assert_true(cap >= (1u << 20));

    /* the header, as the server wrote it */
    struct rkv_read_op op = { .offset = 0, .len = RKV_HEADER_SIZE, .dst = lb };
    assert_int_equal(RKV_OK, ct->read(cl.t, &op, 1));
    assert_memory_equal(lb, g_srv.region.base, RKV_HEADER_SIZE);
    assert_int_equal(1, cl.counters.reads);
    assert_int_equal(1, cl.counters.read_round_trips);

    for (unsigned round = 0; round < 300; round++) {
        struct rkv_read_op ops[8];
        unsigned n = 1 + round % 8;
        size_t land = 0;
        for (unsigned i = 0; i < n; i++) {
            rnd = rnd * 1103515245u + 12345u;
            uint32_t len = 1 + (rnd >> 8) % 8192;
            rnd = rnd * 1103515245u + 12345u;
            uint64_t span = g_srv.region.size - RKV_HEADER_SIZE - len;
            uint64_t off = RKV_HEADER_SIZE + (uint64_t)(rnd >> 4) % span;
            ops[i] = (struct rkv_read_op){ .offset = off, .len = len, .dst = lb + land };
            land += RKV_ALIGN_UP(len, 64);
        }
        /* the last byte of the region too, now and then */
        if (round % 10 == 0)
            ops[0] = (struct rkv_read_op){ .offset = g_srv.region.size - 64, .len = 64, .dst = lb };
        uint64_t reads = cl.counters.reads, rts = cl.counters.read_round_trips;
        uint64_t doorbells = cl.counters.doorbells;
        memset(lb, 0, land);
        assert_int_equal(RKV_OK, ct->read(cl.t, ops, n));
        assert_int_equal(reads + n, cl.counters.reads);
        assert_int_equal(rts + 1, cl.counters.read_round_trips);
        assert_true(cl.counters.doorbells <= doorbells + 1);
        for (unsigned i = 0; i < n; i++) {
            const uint8_t *d = ops[i].dst;
            for (uint32_t k = 0; k < ops[i].len; k++)
                if (d[k] != region_byte(ops[i].offset + k))
                    fail_msg("read %u of round %u: byte %u at offset %llu differs", i, round, k,
                             (unsigned long long)(ops[i].offset + k));
        }
    }
    /* reads see the server's later writes (no stale copy) */
    uint8_t *base = g_srv.region.base;
    base[RKV_HEADER_SIZE + 5] ^= 0xff;
    op = (struct rkv_read_op){ .offset = RKV_HEADER_SIZE, .len = 64, .dst = lb };
    assert_int_equal(RKV_OK, ct->read(cl.t, &op, 1));
    assert_int_equal(lb[5], (uint8_t)(region_byte(RKV_HEADER_SIZE + 5) ^ 0xff));
    base[RKV_HEADER_SIZE + 5] ^= 0xff;

    /* a range past the region is refused before it is posted */
    op = (struct rkv_read_op){ .offset = g_srv.region.size - 8, .len = 16, .dst = lb };
    assert_int_equal(RKV_INVALID, ct->read(cl.t, &op, 1));
    /* and the connection still works */
    uint32_t first = cl.seq;
    echo_send(&cl, 2);
    echo_recv(&cl, first, 2);
    client_close(&cl);
}

static void stage_and_pull(struct t_client *cl, size_t off, uint32_t len, uint32_t seed)
{
    size_t cap;
    struct rkv_remote_buf desc;
    uint8_t *stage = ct->staging(cl->t, &cap, &desc);
    assert_non_null(stage);
    assert_true(off + len <= cap);
    for (uint32_t i = 0; i < len; i++)
        stage[off + i] = (uint8_t)(i * 13u + seed + (i >> 9));
    uint64_t want = XXH3_64bits(stage + off, len);
    desc.addr += off;
    desc.len = len;

    struct t_pull_req req = { { T_PULL, seed }, desc };
    memcpy(ct->send_buf(cl->t, 0), &req, sizeof req);
    uint32_t l = sizeof req;
    assert_int_equal(RKV_OK, ct->send(cl->t, &l, 1));
    struct t_pull_reply r;
    assert_int_equal(sizeof r, recv_copy(cl, &r, sizeof r));
    assert_int_equal(T_PULL, r.h.kind);
    assert_int_equal(seed, r.h.seq);
    assert_int_equal(RKV_OK, r.status);
    assert_true(want == r.hash);
}

static void test_staged_values(void **state)
{
    (void)state;
    struct t_client cl;
    size_t cap;
    struct rkv_remote_buf desc;

    client_open(&cl, 4);
    assert_non_null(ct->staging(cl.t, &cap, &desc));
    /* the largest value the region header allows must fit */
    const struct rkv_region_header *h = g_srv.region.base;
    assert_true(cap >= h->max_value_len);
    unsigned ok = atomic_load(&g_srv.pulls_ok);
    stage_and_pull(&cl, 0, h->max_value_len, 1);
    stage_and_pull(&cl, 0, 1, 2);
    stage_and_pull(&cl, 4096, 70000, 3);
    stage_and_pull(&cl, cap - 5000, 5000, 4); /* ends at the very end */
    stage_and_pull(&cl, 0, (uint32_t)RKV_MIN(cap, (size_t)UINT32_MAX), 5);
    assert_int_equal(ok + 5, atomic_load(&g_srv.pulls_ok));
    /* the staging area is reusable right after the reply */
    for (uint32_t i = 0; i < 20; i++)
        stage_and_pull(&cl, 0, 100000 + i, 10 + i);
    client_close(&cl);
}

static bool wait_for(_Atomic unsigned *v, unsigned want, unsigned ms)
{
    for (unsigned i = 0; i < ms; i++) {
        if (atomic_load(v) >= want)
            return true;
        usleep(1000);
    }
    return atomic_load(v) >= want;
}

/* A descriptor outside the staging area never reaches memory it should not:
 * pull() fails, and either the reply says so or the connection is dropped. */
static void test_bad_pull(void **state)
{
    (void)state;
    struct t_client cl;
    size_t cap;
    struct rkv_remote_buf desc;

    client_open(&cl, 5);
    assert_non_null(ct->staging(cl.t, &cap, &desc));
    unsigned failed = atomic_load(&g_srv.pulls_failed);
    desc.addr += cap - 16;
    desc.len = 32;
    struct t_pull_req req = { { T_PULL, 9 }, desc };
    memcpy(ct->send_buf(cl.t, 0), &req, sizeof req);
    uint32_t l = sizeof req;
    assert_int_equal(RKV_OK, ct->send(cl.t, &l, 1));
    const void *msg;
    size_t len;
    rkv_status rc = ct->recv(cl.t, &msg, &len, T_TIMEOUT_MS);
    if (rc == RKV_OK) {
        struct t_pull_reply r;
        assert_int_equal(sizeof r, len);
        memcpy(&r, msg, sizeof r);
        assert_int_not_equal(RKV_OK, r.status);
        ct->recv_done(cl.t);
    } else {
        assert_int_equal(RKV_CONNECTION, rc);
    }
    /* the client may see its connection fail before the server's pull returns */
    assert_true(wait_for(&g_srv.pulls_failed, failed + 1, 5000));
    assert_int_equal(failed + 1, atomic_load(&g_srv.pulls_failed));
    client_close(&cl);
}

/* Clients vanish with requests in flight; the server frees them and the
 * listener goes on serving new clients. */
static void test_disconnect_mid_batch(void **state)
{
    (void)state;
    struct t_client cl;

    /* let earlier tests' connections drain first */
    assert_true(wait_for(&g_srv.closed, atomic_load(&g_srv.accepted), 5000));
    for (unsigned k = 0; k < 5; k++) {
        unsigned accepted = atomic_load(&g_srv.accepted);
        unsigned closed = atomic_load(&g_srv.closed);
        client_open(&cl, 6);
        echo_send(&cl, T_CREDITS / 2);
        if (k % 2)
            echo_send(&cl, T_CREDITS / 2); /* a full window */
        client_close(&cl);
        assert_int_equal(accepted + 1, atomic_load(&g_srv.accepted));
        if (!wait_for(&g_srv.closed, closed + 1, 5000))
            fail_msg("the server did not notice client %u went away", k);
    }
    /* a fresh client is served normally */
    client_open(&cl, 7);
    uint32_t first = cl.seq;
    echo_send(&cl, T_CREDITS);
    echo_recv(&cl, first, T_CREDITS);
    client_close(&cl);
    assert_true(wait_for(&g_srv.closed, atomic_load(&g_srv.accepted), 5000));
    assert_int_equal(0, atomic_load(&g_srv.bad_requests));
}

/* A request to a sleeping server wakes it: the doorbell reaches the event
 * fd the server sleeps on. The server sleeps with no timeout here, so a lost
 * wake-up is a reply that never comes (recv fails after T_TIMEOUT_MS), not
 * a latency to judge. */
static void test_event_wakeup(void **state)
{
    (void)state;
    struct t_client cl;
    uint64_t worst = 0;
    atomic_store(&g_srv.sleep_untimed, true);

    /* counted before the HELLO: the server may fall asleep while the client
     * is still setting up, and nothing wakes it before our first request */
    unsigned sleeps = atomic_load(&g_srv.sleeps);
    client_open(&cl, 8);
    for (unsigned i = 0; i < 20; i++) {
        for (unsigned k = 0; k < 10000 && atomic_load(&g_srv.sleeps) == sleeps; k++)
            usleep(1000); /* safety net: 10 s */
        usleep(2000);     /* well inside poll() by now */
        assert_true(atomic_load(&g_srv.sleeps) > sleeps);
        sleeps = atomic_load(&g_srv.sleeps);
        uint32_t first = cl.seq;
        uint64_t t0 = rkv_now_ns();
        echo_send(&cl, 1 + i % 3);
        echo_recv(&cl, first, 1 + i % 3);
        worst = RKV_MAX(worst, rkv_now_ns() - t0);
    }
    print_message("slowest request to a sleeping server: %llu us\n",
                  (unsigned long long)(worst / 1000));
    atomic_store(&g_srv.sleep_untimed, false);
    client_close(&cl);
}

/* Several clients at once: each gets exactly its own replies, in order. */
struct t_worker {
    uint32_t who;
    unsigned rounds;
    pthread_t th;
};

static void *client_thread(void *arg)
{
    struct t_worker *w = arg;
    struct t_client cl;
    client_open(&cl, w->who);
    for (unsigned r = 0; r < w->rounds; r++) {
        unsigned n = 1 + (r * 7 + w->who) % T_CREDITS;
        uint32_t first = cl.seq;
        echo_send(&cl, n);
        echo_recv(&cl, first, n);
    }
    client_close(&cl);
    return NULL;
}

static void test_concurrent_clients(void **state)
{
    (void)state;
    struct t_worker w[3];
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(w); i++) {
        w[i] = (struct t_worker){ .who = 100 + i, .rounds = 300 };
        assert_int_equal(0, pthread_create(&w[i].th, NULL, client_thread, &w[i]));
    }
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(w); i++)
        pthread_join(w[i].th, NULL);
    assert_int_equal(0, atomic_load(&g_srv.bad_requests));
}

/* Connections' replies share their worker's reply pool (rdma; set small
 * here: 32 buffers), which the requests 7 clients may have out (7 x
 * T_CREDITS) outnumber: every client gets exactly its own replies, in
 * order, and one that stops reading with all its credits out blocks none
 * of the others; its replies are all there when it reads again. */
static void test_reply_pool_shared(void **state)
{
    (void)state;
    struct t_client idle;
    struct t_worker w[T_MAX_CONNS - 2];

    client_open(&idle, 150);
    uint32_t first = idle.seq;
    echo_send(&idle, T_CREDITS);
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(w); i++) {
        w[i] = (struct t_worker){ .who = 160 + i, .rounds = 150 };
        assert_int_equal(0, pthread_create(&w[i].th, NULL, client_thread, &w[i]));
    }
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(w); i++)
        pthread_join(w[i].th, NULL);
    echo_recv(&idle, first, T_CREDITS);
    client_close(&idle);
    assert_int_equal(0, atomic_load(&g_srv.bad_requests));
}

/* The hang-up hook: a close in the thread that armed it is held right after
 * the step that lets the peer see the hang-up (rdma_disconnect() over rdma,
 * the close() of the connection's socket over shm) until released. */
static struct {
    pthread_t thread;
    _Atomic bool armed, paused, release;
} hangup_hook;

static void hangup_hold(void)
{
    if (!atomic_load(&hangup_hook.armed) || !pthread_equal(pthread_self(), hangup_hook.thread))
        return;
    atomic_store(&hangup_hook.armed, false);
    atomic_store(&hangup_hook.paused, true);
    for (int i = 0; i < 20000 && !atomic_load(&hangup_hook.release); i++)
        usleep(1000); /* safety net: 20 s */
}

int __real_close(int fd);
int __wrap_close(int fd);
int __wrap_close(int fd)
{
    struct stat sb;
    bool sock = atomic_load(&hangup_hook.armed) &&
                pthread_equal(pthread_self(), hangup_hook.thread) && fstat(fd, &sb) == 0 &&
                S_ISSOCK(sb.st_mode);
    int rc = __real_close(fd);
    if (sock)
        hangup_hold();
    return rc;
}

int __real_rdma_disconnect(struct rdma_cm_id *id);
int __wrap_rdma_disconnect(struct rdma_cm_id *id);
int __wrap_rdma_disconnect(struct rdma_cm_id *id)
{
    int rc = __real_rdma_disconnect(id);
    hangup_hold();
    return rc;
}

static void *close_armed(void *arg)
{
    hangup_hook.thread = pthread_self();
    atomic_store(&hangup_hook.armed, true);
    st->close(arg);
    return NULL;
}

/* A connection the server closes gives its place back before its peer can
 * see the hang-up: with every max_conns place taken, a client that connects
 * the moment one closes is accepted, not refused. The server's close is held
 * right after the peer-visible step while the new client connects. */
static void test_place_given_back_first(void **state)
{
    (void)state;
    struct t_client cl[T_MAX_CONNS], again;
    struct rkv_ctrans_params p = { .timeout_ms = T_TIMEOUT_MS, .local_buf_size = 4u << 20 };
    char err[512] = "";
    pthread_t th;

    for (unsigned i = 0; i < T_MAX_CONNS; i++)
        client_open(&cl[i], 200 + i); /* every place taken */
    struct t_hdr h = { T_BYE, 1 }, r;
    memcpy(ct->send_buf(cl[0].t, 0), &h, sizeof h);
    uint32_t len = sizeof h;
    assert_int_equal(RKV_OK, ct->send(cl[0].t, &len, 1));
    assert_int_equal(sizeof r, recv_copy(&cl[0], &r, sizeof r));
    struct rkv_sconn *c = NULL;
    for (int i = 0; i < 20000 && (c = atomic_load(&g_srv.handed)) == NULL; i++)
        usleep(1000); /* the server hands it over after the reply; safety net 20 s */
    assert_non_null(c);
    atomic_store(&g_srv.handed, NULL);
    atomic_store(&hangup_hook.paused, false);
    atomic_store(&hangup_hook.release, false);
    assert_int_equal(0, pthread_create(&th, NULL, close_armed, c));
    for (int i = 0; i < 20000 && !atomic_load(&hangup_hook.paused); i++)
        usleep(1000); /* safety net: 20 s */
    bool held = atomic_load(&hangup_hook.paused);
    memset(&again, 0, sizeof again);
    rkv_status rc = ct->connect(g_addr, &p, &again.counters, &again.t, err, sizeof err);
    atomic_store(&hangup_hook.release, true);
    pthread_join(th, NULL);
    if (rc == RKV_OK)
        client_close(&again);
    for (unsigned i = 0; i < T_MAX_CONNS; i++)
        client_close(&cl[i]);
    assert_true(held); /* the close was held where the peer could see the hang-up */
    if (rc != RKV_OK)
        fail_msg("a client connecting once the hang-up could be seen was refused: %s", err);
    assert_int_equal(0, atomic_load(&g_srv.bad_requests));
}

/* connect() with NULL params, or with every field zero, runs with
 * rkv_ctrans_params_init()'s values: every transport resolves them the same
 * way (the read buffer shows it). Last: its connections end without HELLO,
 * and no later test needs their max_conns places. */
static void test_null_params_are_defaults(void **state)
{
    (void)state;
    struct rkv_ctrans_params d;
    const struct rkv_ctrans_params zeros = { 0 };
    rkv_ctrans_params_init(&d);
    for (int i = 0; i < 2; i++) {
        struct rkv_trans_counters counters = { 0 };
        struct rkv_ctrans *t = NULL;
        char err[512] = "";
        size_t len = 0;
        rkv_status rc = ct->connect(g_addr, i == 0 ? NULL : &zeros, &counters, &t, err, sizeof err);
        if (rc != RKV_OK)
            fail_msg("connect %s with %s params: %s", g_uri, i == 0 ? "NULL" : "zero", err);
        assert_non_null(ct->local_buf(t, &len));
        assert_int_equal(len, d.local_buf_size);
        ct->close(t);
    }
}

/* ------------------------------------------------------------- main */

static bool pick_transport(const char *uri)
{
    char scheme[16];
    if (!rkv_uri_split(uri, scheme, sizeof scheme, &g_addr))
        return false;
    ct = rkv_client_transport_by_scheme(scheme);
    st = rkv_server_transport_by_scheme(scheme);
    return ct != NULL && st != NULL && st->msg != NULL; /* a message transport */
}

int main(int argc, char **argv)
{
    const char *uri = argc > 1 ? argv[1] : getenv("RKV_TEST_URI");
    if (uri == NULL || uri[0] == '\0') {
        snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/rkv-transport-XXXXXX");
        if (mkdtemp(g_tmpdir) == NULL) {
            perror("mkdtemp");
            return 1;
        }
        snprintf(g_uri, sizeof g_uri, "shm://%s/t.sock", g_tmpdir);
    } else {
        snprintf(g_uri, sizeof g_uri, "%s", uri);
    }
    if (!pick_transport(g_uri)) {
        fprintf(stderr,
                "usage: %s [shm://PATH | rdma://HOST:PORT] (or set RKV_TEST_URI); "
                "got \"%s\"\n",
                argv[0], g_uri);
        return 1;
    }
    rkv_log_set_level(RKV_LOG_ERROR);
    fprintf(stderr, "transport test on %s\n", g_uri);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echo_batches),
        cmocka_unit_test(test_credits),
        cmocka_unit_test(test_past_credits),
        cmocka_unit_test(test_floods_leave_the_srq_its_buffers),
        cmocka_unit_test(test_reads),
        cmocka_unit_test(test_staged_values),
        cmocka_unit_test(test_bad_pull),
        cmocka_unit_test(test_disconnect_mid_batch),
        cmocka_unit_test(test_event_wakeup),
        cmocka_unit_test(test_concurrent_clients),
        cmocka_unit_test(test_reply_pool_shared),
        cmocka_unit_test(test_place_given_back_first),
        cmocka_unit_test(test_null_params_are_defaults),
    };
    int rc = cmocka_run_group_tests(tests, server_start, server_stop);
    if (g_tmpdir[0] != '\0')
        rmdir(g_tmpdir);
    return rc;
}
