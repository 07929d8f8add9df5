/* test_worker_wake.c — a wake-up several connections share (transport.h
 * wake_fd / wake) reaches the parked connection a request came for.
 *
 * rdma completes every receive of a worker's connections on one CQ with one
 * completion channel: the worker watches that fd once, calls the
 * transport's wake() when it is readable, and wake() makes the event_fd of
 * each armed connection with requests readable, which unparks it
 * (server/worker.c). Here a real worker thread in event mode (every idle
 * connection parked at once, a sleep whenever a pass finds nothing) serves
 * fake connections whose transport plays the CQ: a shared queue of
 * arrivals, armed once for all (a notification fires the shared eventfd
 * for the first arrival after arming, as ibv_req_notify_cq does), taken by
 * any connection's poll or by wake(), each arrival counted for its
 * connection and its event_fd written if it was armed. Requests go to one
 * parked connection at a time, the others idle: each must be taken by that
 * connection's own poll. A lost wake-up is a request never taken (the
 * safety net fails the test after SAFETY_S; nothing here waits on time to
 * pass).
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "fake_sconn_ops.h"
#include "server.h"
#include "util.h"

#define CONNS    8u
#define ROUNDS   64u
#define SAFETY_S 30 /* a lost wake-up fails the test instead of hanging it */

/* ------------------------------------------------------------ fake transport */

struct fake_wake_sconn {
    struct rkv_sconn sconn; /* first: what the ops take (transport.h) */
    int efd;                /* its event_fd */
    bool armed;             /* under q_lock */
    bool signaled;          /* efd written: its poll reads it (worker thread) */
    unsigned fifo;          /* arrivals taken for it, not yet polled (under q_lock) */
    _Atomic unsigned got;   /* arrivals its own poll took */
};

static struct fake_wake_sconn conns[CONNS];
static int chan_fd; /* the shared wake-up: the "completion channel" */
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned queue[ROUNDS], queued; /* the "CQ": arrivals by connection */
static bool notified;                  /* the "CQ" is armed: the next arrival fires chan_fd */
static unsigned armed_conns;

static struct fake_wake_sconn *fake_of(struct rkv_sconn *sconn)
{
    return RKV_CONTAINER_OF(sconn, struct fake_wake_sconn, sconn);
}

static void efd_write(int fd)
{
    uint64_t one = 1;
    assert_int_equal(write(fd, &one, sizeof one), sizeof one);
}

static void efd_read(int fd)
{
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof v);
    (void)r;
}

/* Everything the "CQ" holds to its connections' FIFOs; the armed ones get
 * their event_fd written. Under q_lock. */
static void take_all(void)
{
    for (unsigned i = 0; i < queued; i++) {
        struct fake_wake_sconn *c = &conns[queue[i]];
        c->fifo++;
        if (c->armed) {
            c->armed = false;
            armed_conns--;
            c->signaled = true;
            efd_write(c->efd);
        }
    }
    queued = 0;
}

static unsigned fake_poll(struct rkv_sconn *sconn, struct rkv_msg *msgs, unsigned max)
{
    struct fake_wake_sconn *c = fake_of(sconn);
    (void)msgs;
    (void)max;
    if (c->signaled) {
        c->signaled = false;
        efd_read(c->efd);
    }
    pthread_mutex_lock(&q_lock);
    take_all();
    atomic_fetch_add(&c->got, c->fifo);
    c->fifo = 0;
    pthread_mutex_unlock(&q_lock);
    return 0; /* counted, not handed out: the wire protocol is not what is tested */
}

static void fake_arm(struct rkv_sconn *sconn)
{
    struct fake_wake_sconn *c = fake_of(sconn);
    pthread_mutex_lock(&q_lock);
    if (!c->armed) {
        c->armed = true;
        armed_conns++;
    }
    notified = true;
    pthread_mutex_unlock(&q_lock);
}

static int fake_event_fd(struct rkv_sconn *sconn)
{
    return fake_of(sconn)->efd;
}

static int fake_wake_fd(struct rkv_sconn *sconn, void **ctx)
{
    (void)sconn;
    *ctx = &chan_fd;
    return chan_fd;
}

/* The channel fired: take its event, arm again while a connection waits,
 * then take what arrived (rdma_server.c srv_wake). */
static void fake_wake(void *ctx)
{
    assert_ptr_equal(ctx, &chan_fd);
    efd_read(chan_fd);
    pthread_mutex_lock(&q_lock);
    if (armed_conns > 0)
        notified = true;
    take_all();
    pthread_mutex_unlock(&q_lock);
}

/* A request arrives for connection i. */
static void arrive(unsigned i)
{
    pthread_mutex_lock(&q_lock);
    queue[queued++] = i;
    if (notified) {
        notified = false;
        efd_write(chan_fd);
    }
    pthread_mutex_unlock(&q_lock);
}

static void fake_close(struct rkv_sconn *c)
{
    close(fake_of(c)->efd);
}

static const struct rkv_msg_transport_ops fake_msg_ops = {
    .reply_buf = fake_reply_buf,
    .pull = fake_pull,
};

static const struct rkv_server_transport fake_transport = {
    .scheme = "fake",
    .msg = &fake_msg_ops,
    .poll = fake_poll,
    .reply = fake_reply,
    .alive = fake_alive,
    .event_fd = fake_event_fd,
    .arm = fake_arm,
    .wake_fd = fake_wake_fd,
    .wake = fake_wake,
    .peer = fake_peer,
    .close = fake_close,
};

/* ------------------------------------------------------------ test */

/* Until *v reaches want (the safety net fails the test). */
static void wait_until(_Atomic uint64_t *v64, _Atomic unsigned *v, unsigned want, const char *what)
{
    time_t end = time(NULL) + SAFETY_S;
    while ((v64 != NULL ? atomic_load(v64) : atomic_load(v)) < want) {
        if (time(NULL) > end)
            fail_msg("%s did not happen within %d s (a lost wake-up)", what, SAFETY_S);
        usleep(1000);
    }
}

static void test_shared_wake_reaches_parked_connection(void **state)
{
    (void)state;
    struct rkv_server *srv = calloc(1, sizeof *srv);
    struct rkv_listen_ep ep = { .ops = &fake_transport, .wire = &rkv_wire_rkv, .uri = "fake://wake" };
    struct rkv_worker *w;
    char what[64];
    assert_non_null(srv);
    rkv_server_config_defaults(&srv->cfg);
    srv->cfg.poll_mode = RKV_POLL_EVENT; /* park every idle connection, sleep at once */
    chan_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    assert_true(chan_fd >= 0);
    w = &srv->workers[0];
    assert_int_equal(rkv_worker_start(srv, w, 0), 0);
    srv->nworkers = 1;

    for (unsigned i = 0; i < CONNS; i++) {
        struct rkv_wconn *wc = calloc(1, sizeof *wc);
        assert_non_null(wc);
        conns[i].efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        assert_true(conns[i].efd >= 0);
        /* authenticated already: admission.c is not what is tested */
        *wc = (struct rkv_wconn){ .ops = &fake_transport,
                                  .wire = &rkv_wire_rkv,
                                  .conn = &conns[i].sconn,
                                  .ep = &ep,
                                  .authed = true };
        atomic_fetch_add(&srv->conns_authed, 1);
        atomic_fetch_add(&w->stats.conns, 1);
        rkv_worker_give(w, wc);
    }
    /* each round: every connection parked, one gets a request */
    for (unsigned r = 0; r < ROUNDS; r++) {
        unsigned i = (r * 5) % CONNS, want = atomic_load(&conns[i].got) + 1;
        wait_until(&w->stats.parked, NULL, CONNS, "parking every connection");
        arrive(i);
        snprintf(what, sizeof what, "round %u: connection %u taking its request", r, i);
        wait_until(NULL, &conns[i].got, want, what);
    }
    atomic_store(&srv->stop, true);
    rkv_worker_wake(w);
    assert_int_equal(pthread_join(w->thread, NULL), 0);
    for (unsigned i = 0; i < CONNS; i++)
        assert_int_equal(atomic_load(&conns[i].got), ROUNDS / CONNS);

    close(chan_fd);
    close(w->wake_fd);
    pthread_mutex_destroy(&w->inbox_lock);
    free(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_wake_reaches_parked_connection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
