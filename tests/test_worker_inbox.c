/* test_worker_inbox.c — a worker takes every connection main hands it.
 *
 * Main accepts connections and hands each to a worker through the worker's
 * inbox (server/worker.c). The inbox was a 64-entry array, and a handover
 * to a full one was refused: main closed the connection. On a loaded host
 * main can accept many connections before a worker runs again, so with 2
 * workers the 129th of 200 connections opened at once was closed
 * (test_memcache's test_many_connections failed at c128, now and then).
 *
 * Here a real worker thread serves fake, polled connections. The first
 * connection's poll() holds the worker (it waits until the test lets it
 * go), so nothing drains the inbox while the test hands over 199 more —
 * the state a loaded host produces by chance, made certain. Then the
 * worker is let go and stopped: every connection must have been polled and
 * closed by it, none refused.
 */
#include <errno.h>
#include <semaphore.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "fake_sconn_ops.h"
#include "server.h"
#include "util.h"

#define CONNS    200u
#define SAFETY_S 60 /* a stuck worker fails the test instead of hanging it */

/* ------------------------------------------------------------ fake transport */

struct fake_inbox_sconn {
    struct rkv_sconn sconn; /* first: what the ops take (transport.h) */
    unsigned id;
    _Atomic unsigned polls, closes;
};

static struct fake_inbox_sconn *fake_inbox_sconn_of(struct rkv_sconn *sconn)
{
    return RKV_CONTAINER_OF(sconn, struct fake_inbox_sconn, sconn);
}

static sem_t held, release; /* the worker is inside conn 0's first poll / may leave it */

static void wait_sem(sem_t *s, const char *what)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += SAFETY_S;
    while (sem_timedwait(s, &t) != 0)
        if (errno != EINTR)
            fail_msg("%s did not happen within %d s", what, SAFETY_S);
}

static unsigned fake_poll(struct rkv_sconn *sconn, struct rkv_msg *msgs, unsigned max)
{
    struct fake_inbox_sconn *c = fake_inbox_sconn_of(sconn);
    (void)msgs;
    (void)max;
    if (atomic_fetch_add(&c->polls, 1) == 0 && c->id == 0) {
        sem_post(&held);
        wait_sem(&release, "the test letting the worker go");
    }
    return 0;
}

static void fake_close(struct rkv_sconn *sconn)
{
    struct fake_inbox_sconn *c = fake_inbox_sconn_of(sconn);
    atomic_fetch_add(&c->closes, 1);
}

static const struct rkv_msg_transport_ops fake_msg_ops = {
    .reply_buf = fake_reply_buf,
    .pull = fake_pull,
};

/* Polled (no event_fd): the worker sweeps these connections every pass. */
static const struct rkv_server_transport fake_transport = {
    .scheme = "fake",
    .msg = &fake_msg_ops,
    .poll = fake_poll,
    .reply = fake_reply,
    .alive = fake_alive,
    .peer = fake_peer,
    .close = fake_close,
};

/* ------------------------------------------------------------ test */

static void test_inbox_takes_every_connection(void **state)
{
    (void)state;
    struct rkv_server *srv = calloc(1, sizeof *srv);
    struct fake_inbox_sconn *conns = calloc(CONNS, sizeof *conns);
    struct rkv_listen_ep ep = { .ops = &fake_transport, .wire = &rkv_wire_rkv, .uri = "fake://inbox" };
    assert_non_null(srv);
    assert_non_null(conns);
    rkv_server_config_defaults(&srv->cfg);
    srv->cfg.max_conns = 2 * CONNS; /* the worker's own limit is not what is tested */
    assert_int_equal(sem_init(&held, 0, 0), 0);
    assert_int_equal(sem_init(&release, 0, 0), 0);
    assert_int_equal(rkv_worker_start(srv, &srv->workers[0], 0), 0);
    srv->nworkers = 1;

    for (unsigned i = 0; i < CONNS; i++) {
        /* authenticated already: admission.c is not what is tested */
        struct rkv_wconn *wc = calloc(1, sizeof *wc);
        assert_non_null(wc);
        conns[i].id = i;
        *wc = (struct rkv_wconn){ .ops = &fake_transport,
                                  .wire = &rkv_wire_rkv,
                                  .conn = &conns[i].sconn,
                                  .ep = &ep,
                                  .authed = true };
        atomic_fetch_add(&srv->conns_authed, 1);
        atomic_fetch_add(&srv->workers[0].stats.conns, 1);
        rkv_worker_give(&srv->workers[0], wc);
        if (i == 0)
            wait_sem(&held, "the worker polling the first connection");
    }
    sem_post(&release);
    atomic_store(&srv->stop, true);
    rkv_worker_wake(&srv->workers[0]);
    assert_int_equal(pthread_join(srv->workers[0].thread, NULL), 0);

    /* the worker answers what arrived and closes everything when it stops */
    for (unsigned i = 0; i < CONNS; i++) {
        if (atomic_load(&conns[i].closes) != 1 || atomic_load(&conns[i].polls) == 0)
            fail_msg("connection %u of %u: polled %u times, closed %u times by the worker "
                     "(expected polled, closed once: the inbox refused it?)",
                     i, CONNS, atomic_load(&conns[i].polls), atomic_load(&conns[i].closes));
    }
    assert_int_equal(atomic_load(&srv->workers[0].stats.conns), 0);
    assert_int_equal(atomic_load(&srv->conns_rejected), 0);

    close(srv->workers[0].wake_fd);
    pthread_mutex_destroy(&srv->workers[0].inbox_lock);
    sem_destroy(&held);
    sem_destroy(&release);
    free(conns);
    free(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_inbox_takes_every_connection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
