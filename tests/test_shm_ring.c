/* test_shm_ring.c — the shm transport's rings, and its server side under attack.
 *
 * Part 1 exercises common/shm_ring.c directly on plain memory: batch publish
 * and consume, wrap-around, a full ring, positions and lengths a hostile
 * producer or consumer could write, and two threads streaming messages
 * through one ring (every byte checked, in order), with and without the
 * sleep/wake handshake.
 *
 * Part 2 runs the real shm server transport against a hand-made client that
 * speaks the handshake itself and then misbehaves: it jumps the ring tail,
 * writes over-long lengths, hands out rendezvous descriptors outside its
 * staging area, tries to shrink the shared memfd or write the region, stays
 * silent after connecting, or dies. The server must drop that connection
 * (alive() false) and keep serving everyone else (design.md invariant 5).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "layout.h"
#include "log.h"
#include "region.h"
#include "region_attack.h"
#include "shm_ring.h"
#include "transport.h"
#include "util.h"

/* ===================================================== part 1: the rings */

/* A connection area in plain memory with both ends of the request ring. */
struct ring_fixture {
    struct rkv_shm_layout l;
    void *area;
    struct rkv_shm_ring prod, cons;
};

static void ring_setup(struct ring_fixture *f, uint32_t credits, uint32_t max_msg)
{
    char err[256];
    assert_int_equal(RKV_OK, rkv_shm_layout_init(&f->l, credits, max_msg, 4096, err, sizeof err));
    f->area = aligned_alloc(4096, f->l.total);
    assert_non_null(f->area);
    memset(f->area, 0, f->l.total);
    rkv_shm_ring_init(&f->prod, f->area, &f->l, RKV_SHM_REQUESTS);
    rkv_shm_ring_init(&f->cons, f->area, &f->l, RKV_SHM_REQUESTS);
}

static void ring_teardown(struct ring_fixture *f)
{
    free(f->area);
}

/* Message `seq`: a length and bytes that both derive from seq. */
static uint32_t msg_len(uint64_t seq, uint32_t max_msg)
{
    return (uint32_t)((seq * 2654435761u) % (max_msg + 1));
}

static uint8_t msg_byte(uint64_t seq, uint32_t i)
{
    return (uint8_t)(seq * 31 + i * 7 + (seq >> 8));
}

static void msg_fill(void *buf, uint64_t seq, uint32_t len)
{
    uint8_t *p = buf;
    for (uint32_t i = 0; i < len; i++)
        p[i] = msg_byte(seq, i);
}

static bool msg_check(const void *buf, uint64_t seq, uint32_t len)
{
    const uint8_t *p = buf;
    for (uint32_t i = 0; i < len; i++)
        if (p[i] != msg_byte(seq, i))
            return false;
    return true;
}

static void test_layout(void **state)
{
    (void)state;
    struct rkv_shm_layout l;
    char err[256];

    assert_int_equal(RKV_OK, rkv_shm_layout_init(&l, 64, 4096, 1 << 20, err, sizeof err));
    assert_int_equal(l.slot_stride % RKV_CACHELINE, 0);
    assert_true(l.slot_stride >= 4096 + RKV_SHM_SLOT_HDR);
    assert_true(l.req_off >= sizeof(struct rkv_shm_ctrl));
    assert_int_equal(l.rep_off, l.req_off + 64 * l.slot_stride);
    assert_true(l.staging_off >= l.rep_off + 64 * l.slot_stride);
    assert_int_equal(l.staging_off % 4096, 0);
    assert_int_equal(l.total, l.staging_off + (1 << 20));
    assert_int_equal(l.total % 4096, 0);
    /* each control word on its own cache line */
    assert_int_equal(offsetof(struct rkv_shm_ctrl, req_head) - offsetof(struct rkv_shm_ctrl, req_tail),
                     RKV_CACHELINE);
    assert_int_equal(offsetof(struct rkv_shm_ctrl, client_sleeping), 5 * RKV_CACHELINE);

    assert_int_equal(RKV_INVALID, rkv_shm_layout_init(&l, 0, 4096, 1 << 20, err, sizeof err));
    assert_non_null(strstr(err, "credits"));
    assert_int_equal(RKV_INVALID, rkv_shm_layout_init(&l, RKV_SHM_MAX_CREDITS + 1, 4096, 1 << 20,
                                                      err, sizeof err));
    assert_int_equal(RKV_INVALID,
                     rkv_shm_layout_init(&l, 64, RKV_MIN_MSG - 1, 1 << 20, err, sizeof err));
    assert_int_equal(RKV_INVALID,
                     rkv_shm_layout_init(&l, 64, RKV_MAX_MSG + 1, 1 << 20, err, sizeof err));
    assert_int_equal(RKV_INVALID, rkv_shm_layout_init(&l, 64, 4096, 100, err, sizeof err));
    assert_int_equal(RKV_INVALID,
                     rkv_shm_layout_init(&l, 4096, RKV_MAX_MSG, 1 << 20, err, sizeof err));
    assert_non_null(strstr(err, "lower"));
}

/* Giving pages back (shm_ring.h): the server may remove pages only while
 * the client is not writing, and a client waits while the server does,
 * up to its timeout (a server that never lets go breaks the connection). */
static void test_trim_handshake(void **state)
{
    (void)state;
    struct ring_fixture f;
    ring_setup(&f, 4, 512);
    struct rkv_shm_ctrl *ctrl = rkv_shm_ctrl_of(f.area);
    assert_int_equal(f.l.req_off % 4096, 0); /* the control page alone */

    assert_true(rkv_shm_trim_begin(ctrl));            /* idle client: go ahead */
    assert_false(rkv_shm_write_begin(ctrl, 1000000)); /* still trimming: gives up */
    rkv_shm_trim_end(ctrl);
    assert_true(rkv_shm_write_begin(ctrl, 1000000));
    assert_false(rkv_shm_trim_begin(ctrl)); /* client writing: hands off */
    rkv_shm_trim_end(ctrl);
    rkv_shm_write_end(ctrl);
    assert_true(rkv_shm_trim_begin(ctrl));
    rkv_shm_trim_end(ctrl);
    ring_teardown(&f);
}

static void test_batch(void **state)
{
    (void)state;
    struct ring_fixture f;
    ring_setup(&f, 8, 512);
    uint32_t lens[5] = { 0, 1, 100, 511, 512 };

    assert_int_equal(8, rkv_shm_ring_space(&f.prod));
    assert_int_equal(0, rkv_shm_ring_ready(&f.cons));
    for (unsigned i = 0; i < 5; i++) {
        void *b = rkv_shm_ring_slot(&f.prod, i);
        assert_int_equal((uintptr_t)b % 8, 0);
        msg_fill(b, i, lens[i]);
    }
    /* nothing is visible before the publish */
    assert_int_equal(0, rkv_shm_ring_ready(&f.cons));
    rkv_shm_ring_publish(&f.prod, lens, 5);
    assert_int_equal(5, rkv_shm_ring_ready(&f.cons));
    assert_int_equal(3, rkv_shm_ring_space(&f.prod));
    for (unsigned i = 0; i < 5; i++) {
        uint32_t len;
        const void *m = rkv_shm_ring_peek(&f.cons, i, &len);
        assert_non_null(m);
        assert_int_equal(len, lens[i]);
        assert_true(msg_check(m, i, len));
    }
    rkv_shm_ring_release(&f.cons, 2);
    assert_int_equal(3, rkv_shm_ring_ready(&f.cons));
    assert_int_equal(5, rkv_shm_ring_space(&f.prod));
    rkv_shm_ring_release(&f.cons, 3);
    assert_int_equal(0, rkv_shm_ring_ready(&f.cons));
    assert_int_equal(8, rkv_shm_ring_space(&f.prod));
    ring_teardown(&f);
}

static void test_wraparound(void **state)
{
    (void)state;
    struct ring_fixture f;
    ring_setup(&f, 4, 512);
    uint64_t sent = 0, got = 0;

    for (unsigned round = 0; round < 1000; round++) {
        unsigned n = 1 + round % 4;
        uint32_t lens[4];
        assert_int_equal(4, rkv_shm_ring_space(&f.prod));
        for (unsigned i = 0; i < n; i++) {
            lens[i] = msg_len(sent + i, 512);
            msg_fill(rkv_shm_ring_slot(&f.prod, i), sent + i, lens[i]);
        }
        rkv_shm_ring_publish(&f.prod, lens, n);
        sent += n;
        assert_int_equal((int)n, rkv_shm_ring_ready(&f.cons));
        for (unsigned i = 0; i < n; i++) {
            uint32_t len;
            const void *m = rkv_shm_ring_peek(&f.cons, i, &len);
            assert_non_null(m);
            assert_int_equal(len, msg_len(got, 512));
            assert_true(msg_check(m, got, len));
            got++;
        }
        rkv_shm_ring_release(&f.cons, n);
    }
    assert_int_equal(sent, got);
    assert_true(sent > 4 * 100); /* wrapped many times */
    ring_teardown(&f);
}

static void test_full_ring(void **state)
{
    (void)state;
    struct ring_fixture f;
    ring_setup(&f, 4, 512);
    uint32_t lens[4] = { 10, 20, 30, 40 };

    rkv_shm_ring_publish(&f.prod, lens, 4);
    assert_int_equal(0, rkv_shm_ring_space(&f.prod));
    assert_int_equal(4, rkv_shm_ring_ready(&f.cons));
    rkv_shm_ring_release(&f.cons, 1);
    assert_int_equal(1, rkv_shm_ring_space(&f.prod));
    /* the freed slot is the oldest one: it is reused, the others are intact */
    memset(rkv_shm_ring_slot(&f.prod, 0), 0xAB, 50);
    uint32_t l5 = 50;
    rkv_shm_ring_publish(&f.prod, &l5, 1);
    assert_int_equal(4, rkv_shm_ring_ready(&f.cons));
    uint32_t len;
    assert_non_null(rkv_shm_ring_peek(&f.cons, 0, &len));
    assert_int_equal(20, len);
    const uint8_t *m = rkv_shm_ring_peek(&f.cons, 3, &len);
    assert_int_equal(50, len);
    assert_int_equal(0xAB, m[49]);
    ring_teardown(&f);
}

static void test_hostile_positions(void **state)
{
    (void)state;
    struct ring_fixture f;
    ring_setup(&f, 8, 512);
    struct rkv_shm_ctrl *ctrl = rkv_shm_ctrl_of(f.area);
    uint32_t lens[3] = { 1, 2, 3 };

    rkv_shm_ring_publish(&f.prod, lens, 3);
    rkv_shm_ring_release(&f.cons, 3);

    /* a producer claiming more than a ring's worth */
    atomic_store(&ctrl->req_tail, 3 + 9);
    assert_int_equal(-1, rkv_shm_ring_ready(&f.cons));
    atomic_store(&ctrl->req_tail, 3 + 8);
    assert_int_equal(8, rkv_shm_ring_ready(&f.cons));
    /* a producer moving its tail backwards (wraps to a huge count) */
    atomic_store(&ctrl->req_tail, 2);
    assert_int_equal(-1, rkv_shm_ring_ready(&f.cons));
    atomic_store(&ctrl->req_tail, UINT64_MAX);
    assert_int_equal(-1, rkv_shm_ring_ready(&f.cons));

    /* a length over max_msg, and max_msg itself */
    atomic_store(&ctrl->req_tail, 4);
    uint8_t *slot = (uint8_t *)f.area + f.l.req_off + 3 * f.l.slot_stride;
    uint32_t bad = 513;
    memcpy(slot, &bad, 4);
    uint32_t len = 77;
    assert_null(rkv_shm_ring_peek(&f.cons, 0, &len));
    assert_int_equal(77, len); /* untouched on failure */
    bad = UINT32_MAX;
    memcpy(slot, &bad, 4);
    assert_null(rkv_shm_ring_peek(&f.cons, 0, &len));
    bad = 512;
    memcpy(slot, &bad, 4);
    assert_non_null(rkv_shm_ring_peek(&f.cons, 0, &len));
    assert_int_equal(512, len);

    /* a consumer claiming to have consumed more than was published */
    atomic_store(&ctrl->req_head, 10);
    assert_int_equal(-1, rkv_shm_ring_space(&f.prod));
    atomic_store(&ctrl->req_head, 0);
    assert_int_equal(5, rkv_shm_ring_space(&f.prod));
    ring_teardown(&f);
}

/* --- two threads: every message arrives once, whole, in order */

struct stress {
    struct ring_fixture f;
    uint64_t count;        /* messages to send */
    bool sleepy;           /* consumer sleeps on a socket when idle */
    int sv[2];             /* socketpair: [0] consumer side, [1] producer side */
    uint64_t bad;          /* consumer: messages that did not match */
    uint64_t lost_wakeups; /* consumer: sleeps that timed out with work pending */
    uint64_t sleeps;       /* consumer: times it blocked (atomic) */
    uint64_t batches;      /* producer: publishes */
    _Atomic bool abort;    /* consumer gave up: the producer stops too */
};

static void *stress_producer(void *arg)
{
    struct stress *s = arg;
    uint64_t seq = 0;
    unsigned rnd = 12345;
    uint32_t lens[16];
    bool slept = !s->sleepy;

    while (seq < s->count && !atomic_load(&s->abort)) {
        /* halfway, stop until the consumer has fallen asleep once: the
         * sleep/wake path is exercised whatever the scheduler does */
        if (!slept && seq >= s->count / 2) {
            uint64_t give_up = rkv_now_ns() + 10000000000ull; /* safety net: 10 s */
            while (__atomic_load_n(&s->sleeps, __ATOMIC_ACQUIRE) == 0 && !atomic_load(&s->abort) &&
                   rkv_now_ns() < give_up)
                sched_yield();
            slept = true; /* run_stress asserts it did sleep */
        }
        int space = rkv_shm_ring_space(&s->f.prod);
        if (space <= 0) {
            if (space < 0)
                return NULL;
            sched_yield();
            continue;
        }
        rnd = rnd * 1103515245u + 12345u;
        unsigned n = 1 + (rnd >> 16) % (unsigned)space;
        n = (unsigned)RKV_MIN((uint64_t)n, s->count - seq);
        for (unsigned i = 0; i < n; i++) {
            lens[i] = msg_len(seq + i, s->f.l.max_msg);
            msg_fill(rkv_shm_ring_slot(&s->f.prod, i), seq + i, lens[i]);
        }
        rkv_shm_ring_publish(&s->f.prod, lens, n);
        s->batches++;
        seq += n;
        if (s->sleepy && rkv_shm_peer_sleeping(&rkv_shm_ctrl_of(s->f.area)->server_sleeping))
            assert_int_equal(0, rkv_shm_wake(s->sv[1]));
        if (s->sleepy && (rnd & 0x300) == 0)
            usleep(20); /* let the consumer fall asleep now and then */
    }
    return NULL;
}

static void *stress_consumer(void *arg)
{
    struct stress *s = arg;
    _Atomic uint32_t *flag = &rkv_shm_ctrl_of(s->f.area)->server_sleeping;
    uint64_t seq = 0;
    unsigned idle = 0;

    while (seq < s->count) {
        int ready = rkv_shm_ring_ready(&s->f.cons);
        if (ready < 0) {
            s->bad++;
            atomic_store(&s->abort, true);
            return NULL;
        }
        if (ready == 0) {
            if (!s->sleepy || ++idle < 64) {
                sched_yield();
                continue;
            }
            idle = 0;
            rkv_shm_sleep_announce(flag);
            if (rkv_shm_ring_ready(&s->f.cons) == 0) {
                struct pollfd pfd = { .fd = s->sv[0], .events = POLLIN };
                __atomic_add_fetch(&s->sleeps, 1, __ATOMIC_RELEASE);
                /* long: a producer stalled between publish and wake is no lost wake-up */
                if (poll(&pfd, 1, 30000) == 0 && rkv_shm_ring_ready(&s->f.cons) > 0) {
                    s->lost_wakeups++;
                    atomic_store(&s->abort, true);
                    return NULL;
                }
                rkv_shm_drain(s->sv[0]);
            }
            rkv_shm_sleep_cancel(flag);
            continue;
        }
        for (int i = 0; i < ready; i++) {
            uint32_t len;
            const void *m = rkv_shm_ring_peek(&s->f.cons, (unsigned)i, &len);
            if (m == NULL || len != msg_len(seq, s->f.l.max_msg) || !msg_check(m, seq, len))
                s->bad++;
            seq++;
        }
        rkv_shm_ring_release(&s->f.cons, (unsigned)ready);
    }
    return NULL;
}

static void run_stress(uint64_t count, bool sleepy)
{
    struct stress s;
    pthread_t p, c;

    memset(&s, 0, sizeof s);
    ring_setup(&s.f, 16, 512);
    s.count = count;
    s.sleepy = sleepy;
    assert_int_equal(0, socketpair(AF_UNIX, SOCK_SEQPACKET, 0, s.sv));
    assert_int_equal(0, pthread_create(&c, NULL, stress_consumer, &s));
    assert_int_equal(0, pthread_create(&p, NULL, stress_producer, &s));
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    assert_int_equal(0, s.bad);
    assert_int_equal(0, s.lost_wakeups);
    assert_int_equal(count, s.f.cons.pos);
    assert_true(s.batches < count); /* messages really went in batches */
    if (sleepy)
        assert_true(s.sleeps > 0); /* the sleep path was exercised */
    close(s.sv[0]);
    close(s.sv[1]);
    ring_teardown(&s.f);
}

static void test_spsc_stress(void **state)
{
    (void)state;
    run_stress(300000, false);
}

static void test_spsc_sleep_wake(void **state)
{
    (void)state;
    run_stress(30000, true);
}

/* ===================================== part 2: the server against attack */

#define SRV_CREDITS 8u
#define SRV_MAX_MSG 1024u

struct srv_fixture {
    char dir[64];
    char path[100];
    struct rkv_region region;
    struct rkv_listener *l;
};

static const struct rkv_server_transport *st = &rkv_shm_server_transport;

/* The clock the test listeners time handshake deadlines on: it stands
 * still until a test advances it, so no deadline passes behind a test's
 * back however slowly it runs. */
static _Atomic uint64_t srv_clock_ns = 1;

static uint64_t srv_now(void)
{
    return atomic_load(&srv_clock_ns);
}

static void srv_setup(struct srv_fixture *f, unsigned max_conns)
{
    char err[256];
    snprintf(f->dir, sizeof f->dir, "/tmp/rkv-shm-test-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof f->path, "%s/s.sock", f->dir);
    assert_int_equal(RKV_OK, rkv_region_create(4 << 20, &f->region, err, sizeof err));
    memset(f->region.base, 0x5A, f->region.size);
    /* what a live server holds; shm readers refuse a region without it */
    assert_int_equal(0, rkv_region_hold_liveness(f->region.base, err, sizeof err));
    struct rkv_strans_params p = {
        .credits = SRV_CREDITS, .max_msg = SRV_MAX_MSG, .max_conns = max_conns, .now_ns = srv_now
    };
    rkv_status rc = st->listen(f->path, &f->region, &p, &f->l, err, sizeof err);
    if (rc != RKV_OK)
        fail_msg("listen: %s", err);
}

/* Give the liveness lock back (as a clean server stop does) and free. */
static void srv_region_free(struct srv_fixture *f)
{
    rkv_region_release_liveness(f->region.base);
    rkv_region_destroy(&f->region);
}

static void srv_teardown(struct srv_fixture *f)
{
    st->close_listener(f->l);
    struct stat sb;
    assert_int_equal(-1, lstat(f->path, &sb)); /* the socket file is gone */
    srv_region_free(f);
    rmdir(f->dir);
}

/* accept() until a connection appears or, when peer >= 0, that client
 * socket has the listener's answer (a refusal); NULL then. The client side
 * is already connected and has sent its message. Safety net: 20 s. */
static struct rkv_sconn *srv_accept_for(struct srv_fixture *f, int peer)
{
    struct pollfd ppfd = { .fd = peer, .events = POLLIN };
    for (int i = 0; i < 20000 && (peer < 0 || poll(&ppfd, 1, 0) == 0); i++) {
        struct rkv_sconn *c;
        assert_int_equal(RKV_OK, st->accept(f->l, &c));
        if (c != NULL)
            return c;
        struct pollfd pfd = { .fd = st->listener_fd(f->l), .events = POLLIN };
        poll(&pfd, 1, 1);
    }
    if (peer < 0 || poll(&ppfd, 1, 0) == 0)
        fail_msg("no connection accepted");
    return NULL;
}

static struct rkv_sconn *srv_accept_one(struct srv_fixture *f)
{
    return srv_accept_for(f, -1);
}

/* A hand-made client: the raw handshake, then direct access to everything
 * the server shares. */
struct raw_client {
    int sock;
    int region_fd, conn_fd;
    struct rkv_shm_accept_msg m;
    struct rkv_shm_layout l;
    uint8_t *area;
    struct rkv_shm_ctrl *ctrl;
};

static int raw_connect_only(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_true(s >= 0);
    assert_int_equal(0, connect(s, (struct sockaddr *)&sa, sizeof sa));
    return s;
}

/* The raw handshake; returns the status the listener answered. Accepted
 * (RKV_OK): *c is the server's side and rc maps everything shared. Refused:
 * *c is NULL and rc->sock is still open for the caller to close. */
static rkv_status raw_try_connect(struct srv_fixture *f, struct raw_client *rc, struct rkv_sconn **c)
{
    char err[256];
    struct rkv_shm_connect_msg hello = { RKV_SHM_MAGIC, RKV_SHM_VERSION, (uint32_t)getpid() };
    int fds[2];
    unsigned nfds;
    size_t got;

    rc->sock = raw_connect_only(f->path);
    assert_int_equal(0, rkv_shm_send_fds(rc->sock, &hello, sizeof hello, NULL, 0));
    *c = srv_accept_for(f, rc->sock);
    assert_int_equal(0, rkv_shm_recv_fds(rc->sock, &rc->m, sizeof rc->m, &got, fds, 2, &nfds));
    assert_int_equal(sizeof rc->m, got);
    if (rc->m.status != RKV_OK) {
        assert_null(*c);
        assert_int_equal(0, nfds);
        return rc->m.status;
    }
    assert_non_null(*c);
    assert_int_equal(2, nfds);
    rc->region_fd = fds[0];
    rc->conn_fd = fds[1];
    assert_int_equal(RKV_OK, rkv_shm_layout_init(&rc->l, rc->m.credits, rc->m.max_msg,
                                                 rc->m.staging_size, err, sizeof err));
    assert_int_equal(rc->l.total, rc->m.conn_size);
    rc->area = mmap(NULL, rc->l.total, PROT_READ | PROT_WRITE, MAP_SHARED, rc->conn_fd, 0);
    assert_true(rc->area != MAP_FAILED);
    rc->ctrl = rkv_shm_ctrl_of(rc->area);
    assert_true(st->alive(*c));
    return RKV_OK;
}

static void raw_connect(struct srv_fixture *f, struct raw_client *rc, struct rkv_sconn **c)
{
    assert_int_equal(RKV_OK, raw_try_connect(f, rc, c));
}

static void raw_close(struct raw_client *rc)
{
    munmap(rc->area, rc->l.total);
    close(rc->conn_fd);
    close(rc->region_fd);
    close(rc->sock);
}

/* The server notices a dead peer within its rate-limited check. */
static bool eventually_dead(struct rkv_sconn *c)
{
    for (int i = 0; i < 5000; i++) { /* safety net: 5 s */
        if (!st->alive(c))
            return true;
        usleep(1000);
    }
    return false;
}

/* One listener and one raw client connected to it, for each test below. */
struct conn_fixture {
    struct srv_fixture f;
    struct raw_client rc;
    struct rkv_sconn *c;     /* server side; NULL once the test closed it */
    bool rc_open;            /* the raw client is still connected */
    struct rkv_shm_ring req; /* the raw client's producer view of requests */
    struct rkv_msg msgs[SRV_CREDITS];
};

static int conn_setup(void **state)
{
    struct conn_fixture *x = calloc(1, sizeof *x);
    assert_non_null(x);
    srv_setup(&x->f, 0);
    raw_connect(&x->f, &x->rc, &x->c);
    x->rc_open = true;
    rkv_shm_ring_init(&x->req, x->rc.area, &x->rc.l, RKV_SHM_REQUESTS);
    *state = x;
    return 0;
}

static int conn_teardown(void **state)
{
    struct conn_fixture *x = *state;
    if (x->c != NULL)
        st->close(x->c);
    if (x->rc_open)
        raw_close(&x->rc);
    srv_teardown(&x->f);
    free(x);
    return 0;
}

/* Publish n requests of `len` bytes from the raw client. */
static void raw_publish(struct conn_fixture *x, unsigned n, uint32_t len)
{
    uint32_t lens[SRV_CREDITS];
    for (unsigned i = 0; i < n; i++)
        lens[i] = len;
    rkv_shm_ring_publish(&x->req, lens, n);
}

/* The server must have dropped the connection on what the client did. */
static void expect_dropped(struct conn_fixture *x)
{
    assert_int_equal(0, st->poll(x->c, x->msgs, SRV_CREDITS));
    assert_false(st->alive(x->c));
    assert_int_equal(0, st->poll(x->c, x->msgs, SRV_CREDITS));
    assert_int_equal(RKV_CONNECTION, st->reply(x->c, NULL, 0));
}

static void test_server_valid_exchange(void **state)
{
    struct conn_fixture *x = *state;
    struct raw_client *rc = &x->rc;
    struct rkv_sconn *c = x->c;

    assert_int_equal(SRV_CREDITS, rc->m.credits);
    assert_int_equal(SRV_MAX_MSG, rc->m.max_msg);
    assert_int_equal(x->f.region.size, rc->m.region_size);
    assert_true(rc->m.staging_size >= (1u << 20));
    assert_non_null(strstr(st->peer(c), "shm pid"));

    /* a well-behaved client, by hand: two requests, one publish */
    uint32_t lens[2] = { 5, SRV_MAX_MSG };
    msg_fill(rkv_shm_ring_slot(&x->req, 0), 1, 5);
    msg_fill(rkv_shm_ring_slot(&x->req, 1), 2, SRV_MAX_MSG);
    rkv_shm_ring_publish(&x->req, lens, 2);
    assert_int_equal(2, st->poll(c, x->msgs, SRV_CREDITS));
    /* the server hands out private copies, not the shared slots */
    for (unsigned i = 0; i < 2; i++) {
        const uint8_t *d = x->msgs[i].data;
        assert_true(d < rc->area || d >= rc->area + rc->l.total);
        assert_int_equal(0, (uintptr_t)d % 8);
    }
    /* the client scribbles over its slot afterwards */
    memset(rc->area + rc->l.req_off + RKV_SHM_SLOT_HDR, 0, 5);
    assert_int_equal(5, x->msgs[0].len);
    assert_true(msg_check(x->msgs[0].data, 1, 5));
    assert_true(msg_check(x->msgs[1].data, 2, SRV_MAX_MSG));
    assert_int_equal(2, atomic_load(&rc->ctrl->req_head));

    /* replies land in the reply ring with one publish */
    memcpy(st->msg->reply_buf(c, 0), "ok", 2);
    memcpy(st->msg->reply_buf(c, 1), "fine", 4);
    uint32_t rl[2] = { 2, 4 };
    assert_int_equal(RKV_OK, st->reply(c, rl, 2));
    assert_int_equal(2, atomic_load(&rc->ctrl->rep_tail));
    assert_memory_equal(rc->area + rc->l.rep_off + RKV_SHM_SLOT_HDR, "ok", 2);
    assert_memory_equal(rc->area + rc->l.rep_off + rc->l.slot_stride + RKV_SHM_SLOT_HDR, "fine", 4);
    /* more replies than requests is a worker bug, refused */
    assert_int_equal(RKV_INTERNAL, st->reply(c, rl, 1));

    /* a valid rendezvous pull, at an offset */
    uint8_t *staging = rc->area + rc->l.staging_off;
    msg_fill(staging + 4096, 77, 100000);
    uint8_t *dst = malloc(100000);
    struct rkv_remote_buf rb = { .addr = 4096, .rkey = 0, .len = 100000 };
    assert_int_equal(RKV_OK, st->msg->pull(c, &rb, dst));
    assert_true(msg_check(dst, 77, 100000));
    rb.addr = rc->m.staging_size - 10;
    rb.len = 10;
    assert_int_equal(RKV_OK, st->msg->pull(c, &rb, dst)); /* the very end is fine */
    free(dst);
    assert_true(st->alive(c));

    /* event mode: arm, then a publish from a client wakes the event fd */
    st->arm(c);
    assert_int_equal(1, atomic_load(&rc->ctrl->server_sleeping));
    struct pollfd pfd = { .fd = st->event_fd(c), .events = POLLIN };
    assert_int_equal(0, poll(&pfd, 1, 0));
    assert_true(rkv_shm_peer_sleeping(&rc->ctrl->server_sleeping));
    assert_int_equal(0, rkv_shm_wake(rc->sock));
    assert_int_equal(1, poll(&pfd, 1, 1000));
    st->arm(c); /* drains the wake-up */
    assert_int_equal(0, poll(&pfd, 1, 0));
    assert_true(st->alive(c));

    /* the client dies: the event fd reports it and alive() turns false */
    raw_close(rc);
    x->rc_open = false;
    assert_int_equal(1, poll(&pfd, 1, 1000));
    assert_true(eventually_dead(c));
}

/* A second poll before the reply joins the batch: the replies to both
 * polls go out with one publish, in arrival order, and the server never
 * takes more requests than it has reply slots for. */
static void test_server_repoll_joins_batch(void **state)
{
    struct conn_fixture *x = *state;
    struct rkv_shm_ring rep;
    uint32_t lens[SRV_CREDITS];

    rkv_shm_ring_init(&rep, x->rc.area, &x->rc.l, RKV_SHM_REPLIES);
    for (unsigned i = 0; i < 5; i++)
        msg_fill(rkv_shm_ring_slot(&x->req, i), 100 + i, 16 + i);
    uint32_t first[2] = { 16, 17 }, second[3] = { 18, 19, 20 };
    rkv_shm_ring_publish(&x->req, first, 2);
    assert_int_equal(2, st->poll(x->c, x->msgs, SRV_CREDITS));
    rkv_shm_ring_publish(&x->req, second, 3);
    assert_int_equal(3, st->poll(x->c, x->msgs + 2, SRV_CREDITS - 2));
    for (unsigned i = 0; i < 5; i++) {
        assert_true(msg_check(x->msgs[i].data, 100 + i, 16 + i));
        memcpy(st->msg->reply_buf(x->c, i), x->msgs[i].data, x->msgs[i].len); /* echo */
        lens[i] = x->msgs[i].len;
    }
    assert_int_equal(0, atomic_load(&x->rc.ctrl->rep_tail)); /* nothing published yet */
    assert_int_equal(RKV_OK, st->reply(x->c, lens, 5));
    assert_int_equal(5, rkv_shm_ring_ready(&rep)); /* one publish, all five */
    for (unsigned i = 0; i < 5; i++) {
        uint32_t len;
        const void *m = rkv_shm_ring_peek(&rep, i, &len);
        assert_non_null(m);
        assert_int_equal(16 + i, len);
        assert_true(msg_check(m, 100 + i, 16 + i));
    }
    /* the client keeps those five unread: only SRV_CREDITS - 5 more fit */
    for (unsigned i = 0; i < SRV_CREDITS; i++)
        lens[i] = 8;
    rkv_shm_ring_publish(&x->req, lens, SRV_CREDITS);
    assert_int_equal(SRV_CREDITS - 5, st->poll(x->c, x->msgs, SRV_CREDITS));
    assert_int_equal(0, st->poll(x->c, x->msgs, SRV_CREDITS));
    assert_true(st->alive(x->c));
}

/* The sleep handshake, step by step. The worker goes to sleep as worker.c
 * does: arm() (drain, announce), poll() once more, sleep when that found
 * nothing. The client sends as shm_client.c does: publish, then wake when the
 * server announced it sleeps. Every interleaving of those two pairs of steps
 * is played in one thread; a wake-up is lost when the worker would sleep
 * with a request waiting and nothing readable on its event fd. The same
 * game with the worker's steps the wrong way round (poll, then arm) must
 * find the lost wake-up, so the check is known to catch one. */
enum { STEP_ARM, STEP_POLL };

/* Play one interleaving: order[i] 'W' is the worker's next step, 'C' the
 * client's. Returns true when a wake-up was lost. */
static bool play_sleep_race(struct conn_fixture *x, const char *order, const int worker[2])
{
    struct pollfd pfd = { .fd = st->event_fd(x->c), .events = POLLIN };
    unsigned w = 0, cl = 0, got = 0;
    bool polled = false;
    for (const char *o = order; *o; o++) {
        if (*o == 'W' && worker[w++] == STEP_ARM) {
            st->arm(x->c);
        } else if (*o == 'W') {
            got = st->poll(x->c, x->msgs, SRV_CREDITS);
            polled = true;
        } else if (cl++ == 0) {
            raw_publish(x, 1, 8);
        } else if (rkv_shm_peer_sleeping(&x->rc.ctrl->server_sleeping)) {
            assert_int_equal(0, rkv_shm_wake(x->rc.sock));
        }
    }
    assert_true(polled);
    bool woken = poll(&pfd, 1, 0) == 1;
    bool lost = got == 0 && !woken;
    /* back to a quiet connection: the request answered, no flag, no byte */
    if (got == 0)
        got = st->poll(x->c, x->msgs, SRV_CREDITS);
    assert_int_equal(1, got);
    uint32_t len = 8;
    memset(st->msg->reply_buf(x->c, 0), 0, 8);
    assert_int_equal(RKV_OK, st->reply(x->c, &len, 1));
    atomic_store(&x->rc.ctrl->rep_head, atomic_load(&x->rc.ctrl->rep_tail)); /* client read it */
    rkv_shm_sleep_cancel(&x->rc.ctrl->server_sleeping);
    assert_true(rkv_shm_drain(pfd.fd));
    assert_int_equal(0, poll(&pfd, 1, 0));
    return lost;
}

static void test_server_sleep_handshake(void **state)
{
    struct conn_fixture *x = *state;
    static const char *const orders[] = { "WWCC", "WCWC", "WCCW", "CWWC", "CWCW", "CCWW" };
    static const int right[2] = { STEP_ARM, STEP_POLL }, wrong[2] = { STEP_POLL, STEP_ARM };
    unsigned lost_wrong = 0;
    for (unsigned i = 0; i < RKV_ARRAY_SIZE(orders); i++) {
        if (play_sleep_race(x, orders[i], right))
            fail_msg("interleaving %s lost a wake-up", orders[i]);
        lost_wrong += play_sleep_race(x, orders[i], wrong);
    }
    /* poll-then-arm loses the request published between the two ("WCCW") */
    assert_true(lost_wrong > 0);
    assert_true(st->alive(x->c));
}

static void test_server_tail_jump(void **state)
{
    struct conn_fixture *x = *state;
    atomic_store(&x->rc.ctrl->req_tail, SRV_CREDITS + 5);
    expect_dropped(x);

    /* the listener keeps serving: a second client is fine ... */
    st->close(x->c);
    raw_close(&x->rc);
    raw_connect(&x->f, &x->rc, &x->c);
    rkv_shm_ring_init(&x->req, x->rc.area, &x->rc.l, RKV_SHM_REQUESTS);
    raw_publish(x, 1, 8);
    assert_int_equal(1, st->poll(x->c, x->msgs, SRV_CREDITS));
    assert_true(st->alive(x->c));
    /* ... until it moves its tail backwards */
    atomic_store(&x->rc.ctrl->req_tail, 0);
    expect_dropped(x);
}

static void test_server_bad_len(void **state)
{
    struct conn_fixture *x = *state;
    uint32_t bad = SRV_MAX_MSG + 1;
    memcpy(x->rc.area + x->rc.l.req_off, &bad, 4);
    atomic_store(&x->rc.ctrl->req_tail, 1);
    expect_dropped(x);
}

static void test_server_bad_reply_head(void **state)
{
    struct conn_fixture *x = *state;
    /* the client claims to have consumed replies that were never sent */
    atomic_store(&x->rc.ctrl->rep_head, 3);
    raw_publish(x, 1, 8);
    expect_dropped(x);
}

/* A client that never drains its replies stalls only itself. */
static void test_server_backpressure(void **state)
{
    struct conn_fixture *x = *state;
    uint32_t lens[SRV_CREDITS];
    for (unsigned i = 0; i < SRV_CREDITS; i++)
        lens[i] = 16;

    raw_publish(x, SRV_CREDITS, 16);
    assert_int_equal(SRV_CREDITS, st->poll(x->c, x->msgs, SRV_CREDITS));
    assert_int_equal(RKV_OK, st->reply(x->c, lens, SRV_CREDITS));
    /* request ring is free again, reply ring full and never consumed */
    raw_publish(x, 3, 16);
    assert_int_equal(0, st->poll(x->c, x->msgs, SRV_CREDITS));
    assert_true(st->alive(x->c));
    /* the client consumes two replies: exactly two requests are taken */
    atomic_store(&x->rc.ctrl->rep_head, 2);
    assert_int_equal(2, st->poll(x->c, x->msgs, SRV_CREDITS));
    assert_int_equal(0, st->poll(x->c, x->msgs, SRV_CREDITS));
    assert_int_equal(RKV_OK, st->reply(x->c, lens, 2));
    assert_true(st->alive(x->c));
}

static void test_server_bad_pull(void **state)
{
    struct conn_fixture *x = *state;
    uint8_t dst[64];
    const struct rkv_remote_buf bad[] = {
        { .addr = x->rc.m.staging_size - 10, .rkey = 0, .len = 11 }, /* 1 byte past the end */
        { .addr = UINT64_MAX - 8, .rkey = 0, .len = 16 },            /* overflowing */
        { .addr = 0, .rkey = 7, .len = 16 },                         /* an rkey on shm */
    };

    for (unsigned i = 0; i < RKV_ARRAY_SIZE(bad); i++) {
        if (i > 0) {
            st->close(x->c);
            raw_close(&x->rc);
            raw_connect(&x->f, &x->rc, &x->c);
        }
        assert_int_equal(RKV_PROTOCOL, st->msg->pull(x->c, &bad[i], dst));
        assert_false(st->alive(x->c));
    }
}

static void test_server_shared_memory_is_safe(void **state)
{
    struct conn_fixture *x = *state;
    struct raw_client *rc = &x->rc;

    /* the connection memfd is sealed: no SIGBUS for the server */
    assert_int_equal(-1, ftruncate(rc->conn_fd, 4096));
    assert_int_equal(EPERM, errno);
    /* the region is read-only to the client by every route, reopening it
     * through /proc included (as root that open works; the seals hold) */
    void *ro = mmap(NULL, rc->m.region_size, PROT_READ, MAP_SHARED, rc->region_fd, 0);
    assert_true(ro != MAP_FAILED);
    assert_int_equal(0, region_write_attempts(rc->region_fd, rc->m.region_size, ro));
    assert_int_equal(0x5A, ((uint8_t *)ro)[0]);
    assert_int_equal(0x5A, ((uint8_t *)ro)[rc->m.region_size - 1]);
    ((uint8_t *)x->f.region.base)[0] = 0x11; /* server writes are visible */
    assert_int_equal(0x11, ((uint8_t *)ro)[0]);
    munmap(ro, rc->m.region_size);
}

/* Silent peers, bad connect messages and version mismatches never block or
 * break the listener. */
static void test_listener_handshakes(void **state)
{
    (void)state;
    struct srv_fixture f;
    struct raw_client rc;
    struct rkv_sconn *c;

    srv_setup(&f, 0);
    int silent = raw_connect_only(f.path);
    int garbage = raw_connect_only(f.path);
    assert_int_equal(3, send(garbage, "abc", 3, 0));
    int old = raw_connect_only(f.path);
    struct rkv_shm_connect_msg m = { RKV_SHM_MAGIC, RKV_SHM_VERSION + 1, 1 };
    assert_int_equal(sizeof m, send(old, &m, sizeof m, 0));

    raw_connect(&f, &rc, &c); /* accepted despite the three */
    /* ... with the silent one still waiting for its deadline (the listener's
     * clock has not moved): it did not wait for it to run out */
    char buf[16];
    struct pollfd spfd = { .fd = silent, .events = POLLIN };
    assert_int_equal(0, poll(&spfd, 1, 0));

    /* the garbage sender was hung up on; the old version got a reason */
    assert_int_equal(0, recv(garbage, buf, sizeof buf, 0));
    struct rkv_shm_accept_msg am;
    assert_int_equal(sizeof am, recv(old, &am, sizeof am, 0));
    assert_int_equal(RKV_VERSION_MISMATCH, am.status);
    assert_non_null(strstr(am.reason, "version"));
    /* the silent one is dropped once its 2 s handshake deadline has passed,
     * at the next accept call, and not before */
    struct rkv_sconn *none;
    atomic_fetch_add(&srv_clock_ns, 2000000000ull - 1);
    assert_int_equal(RKV_OK, st->accept(f.l, &none));
    assert_null(none);
    assert_int_equal(0, poll(&spfd, 1, 0));
    atomic_fetch_add(&srv_clock_ns, 1);
    assert_int_equal(RKV_OK, st->accept(f.l, &none));
    assert_null(none);
    assert_int_equal(1, poll(&spfd, 1, 0));
    assert_int_equal(0, recv(silent, buf, sizeof buf, MSG_DONTWAIT));
    close(silent);
    close(garbage);
    close(old);
    st->close(c);
    raw_close(&rc);
    srv_teardown(&f);
}

static void test_listener_max_conns(void **state)
{
    (void)state;
    struct srv_fixture f;
    struct raw_client rc;
    struct rkv_sconn *c;

    srv_setup(&f, 1);
    raw_connect(&f, &rc, &c);
    struct raw_client refused;
    struct rkv_sconn *none;
    assert_int_equal(RKV_SERVER_BUSY, raw_try_connect(&f, &refused, &none));
    assert_non_null(strstr(refused.m.reason, "max_conns"));
    close(refused.sock);
    /* closing the first frees its place; a connection may outlive its listener */
    st->close(c);
    raw_close(&rc);
    raw_connect(&f, &rc, &c);
    st->close_listener(f.l);
    f.l = NULL;
    assert_true(st->alive(c));
    st->close(c);
    raw_close(&rc);
    srv_region_free(&f);
    unlink(f.path);
    rmdir(f.dir);
}

/* close() with a pause, for test_conn_close_frees_place_first: the test
 * binary links with -Wl,--wrap=close, so every close() in it (the shm
 * server's included) comes here. Armed, the one thread named stops right
 * after the close() that shows its peer socket `watch` the hang-up, until
 * the test releases it: the moment a client first learns its connection
 * is gone, held open as long as the test needs. */
static struct {
    pthread_t thread;
    _Atomic int watch;   /* peer socket; -1: not armed */
    _Atomic bool paused; /* the pause happened */
    _Atomic bool release;
} close_hook = { .watch = -1 };

int __real_close(int fd);
int __wrap_close(int fd);

int __wrap_close(int fd)
{
    int rc = __real_close(fd);
    int watch = atomic_load(&close_hook.watch);
    if (watch < 0 || !pthread_equal(pthread_self(), close_hook.thread))
        return rc;
    struct pollfd pfd = { .fd = watch, .events = POLLIN };
    if (poll(&pfd, 1, 0) == 1) {
        atomic_store(&close_hook.watch, -1);
        atomic_store(&close_hook.paused, true);
        for (int i = 0; i < 20000 && !atomic_load(&close_hook.release); i++)
            usleep(1000); /* safety net: 20 s */
    }
    return rc;
}

struct close_job {
    struct rkv_sconn *c;
    int peer;
};

static void *close_conn_thread(void *arg)
{
    struct close_job *j = arg;
    close_hook.thread = pthread_self();
    atomic_store(&close_hook.watch, j->peer);
    st->close(j->c);
    return NULL;
}

/* A connection gives its place back before its peer can see the hang-up:
 * a client at max_conns that reconnects the moment its connection closes
 * is accepted, not refused "busy". The server's close is held right after
 * the peer could first see the hang-up (close_hook) while the client
 * reconnects. */
static void test_conn_close_frees_place_first(void **state)
{
    (void)state;
    struct srv_fixture f;
    struct raw_client rc, again;
    struct rkv_sconn *c, *c2;
    struct close_job job;
    pthread_t th;

    srv_setup(&f, 1);
    raw_connect(&f, &rc, &c);
    job = (struct close_job){ .c = c, .peer = rc.sock };
    atomic_store(&close_hook.paused, false);
    atomic_store(&close_hook.release, false);
    assert_int_equal(0, pthread_create(&th, NULL, close_conn_thread, &job));
    struct pollfd pfd = { .fd = rc.sock, .events = POLLIN };
    assert_int_equal(1, poll(&pfd, 1, 20000)); /* the hang-up; safety net 20 s */
    char byte;
    assert_int_equal(0, recv(rc.sock, &byte, 1, MSG_DONTWAIT));
    rkv_status st_again = raw_try_connect(&f, &again, &c2);
    atomic_store(&close_hook.release, true);
    pthread_join(th, NULL);
    assert_true(atomic_load(&close_hook.paused)); /* the close was held */
    raw_close(&rc);
    if (st_again != RKV_OK)
        fail_msg("reconnect after the hang-up refused (%s: %s)", rkv_status_name(st_again),
                 again.m.reason);
    st->close(c2);
    raw_close(&again);
    srv_teardown(&f);
}

/* Out of file descriptors, the listener still answers: the peer gets
 * "busy, retry" (not a reset or silence), and the refusal is counted. */
static void test_listener_out_of_fds(void **state)
{
    (void)state;
    struct srv_fixture f;
    struct rlimit saved, low;
    _Atomic uint64_t rejected = 0;
    char err[256];

    srv_setup(&f, 0);
    st->close_listener(f.l); /* again, with a refusal counter */
    struct rkv_strans_params p = { .credits = SRV_CREDITS,
                                   .max_msg = SRV_MAX_MSG,
                                   .rejected = &rejected };
    assert_int_equal(RKV_OK, st->listen(f.path, &f.region, &p, &f.l, err, sizeof err));
    int s = raw_connect_only(f.path);
    struct rkv_shm_connect_msg m = { RKV_SHM_MAGIC, RKV_SHM_VERSION, 1 };
    assert_int_equal(sizeof m, send(s, &m, sizeof m, 0));
    /* no descriptor left for accept(): the limit is the lowest free one */
    int probe = dup(0);
    assert_true(probe >= 0);
    close(probe);
    assert_int_equal(0, getrlimit(RLIMIT_NOFILE, &saved));
    low = saved;
    low.rlim_cur = (rlim_t)probe;
    assert_int_equal(0, setrlimit(RLIMIT_NOFILE, &low));
    struct rkv_sconn *none;
    assert_int_equal(RKV_OK, st->accept(f.l, &none));
    assert_int_equal(0, setrlimit(RLIMIT_NOFILE, &saved));
    assert_null(none);
    struct rkv_shm_accept_msg am;
    struct pollfd pfd = { .fd = s, .events = POLLIN };
    assert_int_equal(1, poll(&pfd, 1, 10000)); /* a safety net, not a timing */
    ssize_t got = recv(s, &am, sizeof am, MSG_DONTWAIT);
    if (got != (ssize_t)sizeof am)
        fail_msg("recv %zd: %s (revents %x)", got, strerror(errno), (unsigned)pfd.revents);
    assert_int_equal(RKV_SERVER_BUSY, am.status);
    assert_non_null(strstr(am.reason, "file descriptors"));
    assert_non_null(strstr(am.reason, "retry"));
    assert_int_equal(1, atomic_load(&rejected));
    close(s);
    /* and with descriptors back, clients get in again */
    struct raw_client rc;
    struct rkv_sconn *c;
    raw_connect(&f, &rc, &c);
    st->close(c);
    raw_close(&rc);
    srv_teardown(&f);
}

static void test_listener_socket_path(void **state)
{
    (void)state;
    struct srv_fixture f;
    struct rkv_listener *l2;
    char err[256];

    srv_setup(&f, 0);
    /* a second server on a live socket is refused, the first keeps it */
    assert_int_equal(RKV_INVALID, st->listen(f.path, &f.region, NULL, &l2, err, sizeof err));
    assert_non_null(strstr(err, "already listening"));
    struct stat sb;
    assert_int_equal(0, lstat(f.path, &sb));
    assert_int_equal(0660, sb.st_mode & 0777);
    st->close_listener(f.l);

    /* a stale socket (its server died without unlinking) is replaced */
    int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", f.path);
    assert_int_equal(0, bind(s, (struct sockaddr *)&sa, sizeof sa));
    close(s);
    assert_int_equal(RKV_OK, st->listen(f.path, &f.region, NULL, &f.l, err, sizeof err));
    st->close_listener(f.l);

    /* a regular file is never removed */
    FILE *fp = fopen(f.path, "w");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(RKV_INVALID, st->listen(f.path, &f.region, NULL, &l2, err, sizeof err));
    assert_non_null(strstr(err, "not a socket"));
    unlink(f.path);

    /* a missing directory and a region without a memfd are explained */
    char bad[192];
    snprintf(bad, sizeof bad, "%s/nodir/s.sock", f.dir);
    assert_int_equal(RKV_INVALID, st->listen(bad, &f.region, NULL, &l2, err, sizeof err));
    assert_non_null(strstr(err, "directory"));
    /* ... unless the caller asks for it to be made (rkv-server does: /run/rkv) */
    struct rkv_strans_params mk;
    rkv_strans_params_init(&mk);
    mk.make_dir = true;
    assert_int_equal(RKV_OK, st->listen(bad, &f.region, &mk, &l2, err, sizeof err));
    st->close_listener(l2);
    snprintf(bad, sizeof bad, "%s/nodir", f.dir);
    assert_int_equal(0, rmdir(bad));
    struct rkv_region anon = f.region;
    anon.fd = -1;
    assert_int_equal(RKV_INVALID, st->listen(f.path, &anon, NULL, &l2, err, sizeof err));
    assert_non_null(strstr(err, "memfd"));
    struct rkv_strans_params p = { .credits = 100000 };
    assert_int_equal(RKV_INVALID, st->listen(f.path, &f.region, &p, &l2, err, sizeof err));
    assert_non_null(strstr(err, "credits"));
    srv_region_free(&f);
    rmdir(f.dir);
}

/* ==================================== part 3: the client against a server */

struct client_fixture {
    struct srv_fixture f;
    struct rkv_ctrans *t;
    struct rkv_sconn *c;
    struct rkv_trans_counters counters;
};

static void *connect_thread(void *arg)
{
    struct client_fixture *cf = arg;
    char err[256];
    struct rkv_ctrans_params p = { .timeout_ms = 3000, .local_buf_size = 1 << 16 };
    if (rkv_shm_client_transport.connect(cf->f.path, &p, &cf->counters, &cf->t, err, sizeof err) !=
        RKV_OK)
        cf->t = NULL;
    return NULL;
}

static void client_setup(struct client_fixture *cf)
{
    pthread_t th;
    memset(cf, 0, sizeof *cf);
    srv_setup(&cf->f, 0);
    assert_int_equal(0, pthread_create(&th, NULL, connect_thread, cf));
    cf->c = srv_accept_one(&cf->f);
    pthread_join(th, NULL);
    assert_non_null(cf->t);
}

static void client_teardown(struct client_fixture *cf)
{
    rkv_shm_client_transport.close(cf->t);
    st->close(cf->c);
    srv_teardown(&cf->f);
}

static void test_client_checks(void **state)
{
    (void)state;
    const struct rkv_client_transport *ct = &rkv_shm_client_transport;
    struct client_fixture cf;
    char err[256];
    client_setup(&cf);

    /* set_region insists on the region the memfd really has */
    struct rkv_hello h = { .proto_version = RKV_PROTO_VERSION,
                           .credits = SRV_CREDITS,
                           .max_msg = SRV_MAX_MSG,
                           .region_size = cf.f.region.size };
    assert_int_equal(RKV_OK, ct->set_region(cf.t, &h, err, sizeof err));
    h.region_size += 4096;
    assert_int_equal(RKV_PROTOCOL, ct->set_region(cf.t, &h, err, sizeof err));
    assert_non_null(strstr(err, "region"));
    h.region_size = cf.f.region.size;
    h.credits = SRV_CREDITS * 2;
    assert_int_equal(RKV_PROTOCOL, ct->set_region(cf.t, &h, err, sizeof err));

    /* reads stay inside the region and land inside the local buffer */
    size_t cap;
    uint8_t *lb = ct->local_buf(cf.t, &cap);
    assert_true(cap >= (1 << 16));
    struct rkv_read_op op = { .offset = cf.f.region.size - 8, .len = 8, .dst = lb };
    assert_int_equal(RKV_OK, ct->read(cf.t, &op, 1));
    op.len = 9;
    assert_int_equal(RKV_INVALID, ct->read(cf.t, &op, 1));
    op.offset = UINT64_MAX - 2;
    op.len = 8;
    assert_int_equal(RKV_INVALID, ct->read(cf.t, &op, 1));
    op.offset = 0;
    op.dst = lb + cap - 4;
    assert_int_equal(RKV_INVALID, ct->read(cf.t, &op, 1));
    uint8_t outside[8];
    op.dst = outside;
    assert_int_equal(RKV_INVALID, ct->read(cf.t, &op, 1));
    assert_int_equal(1, cf.counters.reads);
    assert_int_equal(0, cf.counters.doorbells);

    /* sends beyond the credits are refused; an over-long message too */
    uint32_t lens[SRV_CREDITS + 1];
    for (unsigned i = 0; i <= SRV_CREDITS; i++)
        lens[i] = 8;
    assert_null(ct->send_buf(cf.t, SRV_CREDITS));
    assert_int_equal(RKV_INVALID, ct->send(cf.t, lens, SRV_CREDITS + 1));
    lens[0] = SRV_MAX_MSG + 1;
    assert_int_equal(RKV_INVALID, ct->send(cf.t, lens, 1));
    lens[0] = 8;
    assert_int_equal(RKV_OK, ct->send(cf.t, lens, SRV_CREDITS));
    assert_int_equal(RKV_INVALID, ct->send(cf.t, lens, 1));
    assert_int_equal(1, cf.counters.doorbells);
    assert_int_equal(SRV_CREDITS, cf.counters.sends);

    /* nothing answered yet: a bounded wait times out */
    const void *msg;
    size_t len;
    uint64_t t0 = rkv_now_ns();
    assert_int_equal(RKV_TIMEOUT, ct->recv(cf.t, &msg, &len, 30));
    uint64_t waited = rkv_now_ns() - t0;
    /* never early; the upper bound only says it returned (a busy machine
     * may run us late by any amount) */
    assert_true(waited >= 29000000ull && waited < 30000000000ull);

    /* the real server answers all of them */
    struct rkv_msg msgs[SRV_CREDITS];
    assert_int_equal(SRV_CREDITS, st->poll(cf.c, msgs, SRV_CREDITS));
    for (unsigned i = 0; i < SRV_CREDITS; i++)
        msg_fill(st->msg->reply_buf(cf.c, i), 1000 + i, i + 1);
    uint32_t rl[SRV_CREDITS];
    for (unsigned i = 0; i < SRV_CREDITS; i++)
        rl[i] = i + 1;
    assert_int_equal(RKV_OK, st->reply(cf.c, rl, SRV_CREDITS));
    for (unsigned i = 0; i < SRV_CREDITS; i++) {
        assert_int_equal(RKV_OK, ct->recv(cf.t, &msg, &len, 1000));
        assert_int_equal(i + 1, len);
        assert_int_equal(0, (uintptr_t)msg % 8);
        assert_true(msg_check(msg, 1000 + i, (uint32_t)len));
        /* a held reply keeps its credit until recv_done() */
        assert_int_equal(RKV_INVALID, ct->send(cf.t, lens, 1));
    }
    ct->recv_done(cf.t);
    assert_int_equal(RKV_OK, ct->send(cf.t, lens, SRV_CREDITS));
    assert_int_equal(2, cf.counters.doorbells);
    client_teardown(&cf);
}

/* The client learns that the server went away while it waits. */
static void test_client_server_death(void **state)
{
    (void)state;
    const struct rkv_client_transport *ct = &rkv_shm_client_transport;
    struct client_fixture cf;
    client_setup(&cf);

    uint32_t len = 8;
    assert_int_equal(RKV_OK, ct->send(cf.t, &len, 1));
    struct rkv_msg msgs[1];
    assert_int_equal(1, st->poll(cf.c, msgs, 1));
    /* one reply, then the server drops the connection */
    memcpy(st->msg->reply_buf(cf.c, 0), "lastword", 8);
    assert_int_equal(RKV_OK, st->reply(cf.c, &len, 1));
    st->close(cf.c);
    cf.c = NULL;

    const void *msg;
    size_t got;
    assert_int_equal(RKV_OK, ct->recv(cf.t, &msg, &got, 10000));
    assert_int_equal(8, got);
    assert_memory_equal(msg, "lastword", 8);
    ct->recv_done(cf.t);
    /* the hang-up, not the timeout (that would be RKV_TIMEOUT) */
    assert_int_equal(RKV_CONNECTION, ct->recv(cf.t, &msg, &got, 30000));
    ct->close(cf.t);
    srv_teardown(&cf.f);
}

/* Takes the liveness lock and exits holding it: the kernel marks the lock's
 * owner dead, as it does for every thread of a SIGKILLed server. */
static void *hold_and_die(void *region_base)
{
    char err[128];
    if (rkv_region_hold_liveness(region_base, err, sizeof err) != 0)
        return (void *)1;
    return NULL;
}

/* The region stays mapped after its server is gone, but reads stop serving
 * it, as an RDMA READ to a dead server fails. */
static void test_client_read_after_server_death(void **state)
{
    (void)state;
    const struct rkv_client_transport *ct = &rkv_shm_client_transport;
    struct client_fixture cf;
    struct rkv_read_op op;
    size_t cap;
    pthread_t th;
    void *res;

    client_setup(&cf);
    uint8_t *lb = ct->local_buf(cf.t, &cap);
    op = (struct rkv_read_op){ .offset = 0, .len = 64, .dst = lb };
    assert_int_equal(RKV_OK, ct->read(cf.t, &op, 1));

    /* the server dies: its thread exits still holding the lock */
    rkv_region_release_liveness(cf.f.region.base);
    assert_int_equal(0, pthread_create(&th, NULL, hold_and_die, cf.f.region.base));
    pthread_join(th, &res);
    assert_null(res);
    uint32_t word;
    memcpy(&word, ((struct rkv_region_header *)cf.f.region.base)->liveness, sizeof word);
    assert_true(word & RKV_FUTEX_OWNER_DIED);
    assert_int_equal(RKV_CONNECTION, ct->read(cf.t, &op, 1));
    assert_int_equal(RKV_CONNECTION, ct->read(cf.t, &op, 1)); /* and stays broken */
    rkv_shm_client_transport.close(cf.t);
    st->close(cf.c);
    st->close_listener(cf.f.l);
    rkv_region_destroy(&cf.f.region); /* the lock died with its owner */
    rmdir(cf.f.dir);
}

/* A fake server for the client's own defences: it speaks the handshake by
 * hand and then writes whatever the test wants into the shared memory. */
struct fake_server {
    char dir[64], path[100];
    int lsock;     /* listening socket */
    int region_fd; /* a plain memfd standing in for the region */
    uint64_t region_size;
    uint64_t claimed_region; /* region_size put in the accept message */
    unsigned send_fds;       /* descriptors to send (normally 2) */
    int sock;                /* the accepted connection */
    struct rkv_shm_layout l;
    uint8_t *area; /* the connection memory */
};

static void *fake_server_thread(void *arg)
{
    struct fake_server *fs = arg;
    char err[256];
    struct rkv_shm_connect_msg hello;
    size_t got;
    unsigned nfds;
    int none[1];

    fs->sock = accept4(fs->lsock, NULL, NULL, SOCK_CLOEXEC);
    if (fs->sock < 0)
        return NULL;
    struct pollfd pfd = { .fd = fs->sock, .events = POLLIN };
    poll(&pfd, 1, 2000);
    if (rkv_shm_recv_fds(fs->sock, &hello, sizeof hello, &got, none, 0, &nfds) != 0)
        return NULL;
    rkv_shm_layout_init(&fs->l, SRV_CREDITS, SRV_MAX_MSG, 4096, err, sizeof err);
    int memfd = memfd_create("fake-conn", MFD_CLOEXEC);
    if (ftruncate(memfd, (off_t)fs->l.total) != 0)
        return NULL;
    fs->area = mmap(NULL, fs->l.total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    struct rkv_shm_accept_msg m = {
        .magic = RKV_SHM_MAGIC,
        .version = RKV_SHM_VERSION,
        .status = RKV_OK,
        .credits = SRV_CREDITS,
        .max_msg = SRV_MAX_MSG,
        .region_size = fs->claimed_region,
        .staging_size = 4096,
        .conn_size = fs->l.total,
    };
    int fds[2] = { fs->region_fd, memfd };
    rkv_shm_send_fds(fs->sock, &m, sizeof m, fds, fs->send_fds);
    close(memfd);
    return NULL;
}

/* Connect the real client to a fake server; returns the connect status. */
static rkv_status fake_connect(struct fake_server *fs, uint64_t claimed_region, unsigned send_fds,
                               struct rkv_ctrans **t, char *err, size_t err_len)
{
    pthread_t th;
    memset(fs, 0, sizeof *fs);
    snprintf(fs->dir, sizeof fs->dir, "/tmp/rkv-shm-test-XXXXXX");
    assert_non_null(mkdtemp(fs->dir));
    snprintf(fs->path, sizeof fs->path, "%s/fake.sock", fs->dir);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", fs->path);
    fs->lsock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_int_equal(0, bind(fs->lsock, (struct sockaddr *)&sa, sizeof sa));
    assert_int_equal(0, listen(fs->lsock, 4));
    fs->region_size = 1 << 20;
    fs->region_fd = memfd_create("fake-region", MFD_CLOEXEC);
    assert_int_equal(0, ftruncate(fs->region_fd, (off_t)fs->region_size));
    fs->claimed_region = claimed_region ? claimed_region : fs->region_size;
    fs->send_fds = send_fds;
    fs->sock = -1;
    assert_int_equal(0, pthread_create(&th, NULL, fake_server_thread, fs));
    struct rkv_ctrans_params p = { .timeout_ms = 2000 };
    rkv_status rc = rkv_shm_client_transport.connect(fs->path, &p, NULL, t, err, err_len);
    pthread_join(th, NULL);
    return rc;
}

static void fake_close(struct fake_server *fs)
{
    if (fs->area != NULL)
        munmap(fs->area, fs->l.total);
    if (fs->sock >= 0)
        close(fs->sock);
    close(fs->lsock);
    close(fs->region_fd);
    unlink(fs->path);
    rmdir(fs->dir);
}

static void test_client_hostile_server(void **state)
{
    (void)state;
    const struct rkv_client_transport *ct = &rkv_shm_client_transport;
    struct fake_server fs;
    struct rkv_ctrans *t;
    char err[256];
    const void *msg;
    size_t len;

    /* a region bigger than the memfd behind it */
    assert_int_equal(RKV_PROTOCOL, fake_connect(&fs, 2 << 20, 2, &t, err, sizeof err));
    assert_non_null(strstr(err, "region"));
    fake_close(&fs);
    /* a missing descriptor */
    assert_int_equal(RKV_PROTOCOL, fake_connect(&fs, 0, 1, &t, err, sizeof err));
    assert_non_null(strstr(err, "descriptors"));
    fake_close(&fs);

    /* a reply tail jumping past the ring */
    assert_int_equal(RKV_OK, fake_connect(&fs, 0, 2, &t, err, sizeof err));
    atomic_store(&rkv_shm_ctrl_of(fs.area)->rep_tail, SRV_CREDITS + 1);
    assert_int_equal(RKV_PROTOCOL, ct->recv(t, &msg, &len, 10));
    uint32_t one = 8;
    assert_int_equal(RKV_CONNECTION, ct->send(t, &one, 1));
    ct->close(t);
    fake_close(&fs);

    /* a reply longer than max_msg */
    assert_int_equal(RKV_OK, fake_connect(&fs, 0, 2, &t, err, sizeof err));
    uint32_t bad = SRV_MAX_MSG + 1;
    memcpy(fs.area + fs.l.rep_off, &bad, 4);
    atomic_store(&rkv_shm_ctrl_of(fs.area)->rep_tail, 1);
    assert_int_equal(RKV_PROTOCOL, ct->recv(t, &msg, &len, 10));
    ct->close(t);
    fake_close(&fs);

    /* a server that keeps server_trimming set: the client waits for it
     * (shm_ring.h, "Giving pages back") a bounded time, then gives up on
     * the connection instead of hanging or writing under it */
    assert_int_equal(RKV_OK, fake_connect(&fs, 0, 2, &t, err, sizeof err));
    atomic_store(&rkv_shm_ctrl_of(fs.area)->server_trimming, 1);
    assert_non_null(ct->send_buf(t, 0));
    assert_int_equal(RKV_CONNECTION, ct->send(t, &one, 1));
    assert_int_equal(0, atomic_load(&rkv_shm_ctrl_of(fs.area)->req_tail));
    ct->close(t);
    fake_close(&fs);

    /* a server that never consumes requests yet answers them */
    assert_int_equal(RKV_OK, fake_connect(&fs, 0, 2, &t, err, sizeof err));
    assert_int_equal(RKV_OK, ct->send(t, &one, 1));
    memcpy(fs.area + fs.l.rep_off, &one, 4);
    atomic_store(&rkv_shm_ctrl_of(fs.area)->rep_tail, 1);
    assert_int_equal(RKV_OK, ct->recv(t, &msg, &len, 10));
    ct->recv_done(t);
    uint32_t full[SRV_CREDITS];
    for (unsigned i = 0; i < SRV_CREDITS; i++)
        full[i] = 8;
    assert_int_equal(RKV_PROTOCOL, ct->send(t, full, SRV_CREDITS));
    ct->close(t);
    fake_close(&fs);
}

#define CONN_TEST(f) cmocka_unit_test_setup_teardown(f, conn_setup, conn_teardown)

int main(void)
{
    rkv_log_set_level(RKV_LOG_ERROR); /* the drops below are expected */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_trim_handshake),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_wraparound),
        cmocka_unit_test(test_full_ring),
        cmocka_unit_test(test_hostile_positions),
        cmocka_unit_test(test_spsc_stress),
        cmocka_unit_test(test_spsc_sleep_wake),
        CONN_TEST(test_server_valid_exchange),
        CONN_TEST(test_server_tail_jump),
        CONN_TEST(test_server_bad_len),
        CONN_TEST(test_server_bad_reply_head),
        CONN_TEST(test_server_backpressure),
        CONN_TEST(test_server_bad_pull),
        CONN_TEST(test_server_shared_memory_is_safe),
        CONN_TEST(test_server_repoll_joins_batch),
        CONN_TEST(test_server_sleep_handshake),
        cmocka_unit_test(test_listener_handshakes),
        cmocka_unit_test(test_listener_max_conns),
        cmocka_unit_test(test_conn_close_frees_place_first),
        cmocka_unit_test(test_listener_out_of_fds),
        cmocka_unit_test(test_listener_socket_path),
        cmocka_unit_test(test_client_checks),
        cmocka_unit_test(test_client_server_death),
        cmocka_unit_test(test_client_read_after_server_death),
        cmocka_unit_test(test_client_hostile_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
