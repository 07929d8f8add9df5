/* test_admission.c — peers that never authenticate cannot lock clients out.
 *
 * Real rkv-server processes with a shared secret and small limits. Peers
 * that complete the transport handshake and never send HELLO are crowded
 * out by newcomers (max_unauth_conns) and closed after hello_timeout_ms; a
 * socket that never even sends its connect message is dropped with no other
 * peer around; a client over max_conns hears "busy, retry"; refusals and
 * drops are counted; and a HELLO with the wrong secret changes nothing (its
 * hints are not applied). No assertion depends on timing: each waits for a
 * condition (a hang-up, a counter) with a generous bound as a safety net.
 *
 * At scale (shm, MANY = 10,000 connections; skipped with the reason when
 * the open-files limit cannot be raised that far): a client that opens
 * and closes MANY connections in a loop finds each one served, the one
 * over max_conns refused "busy", and the server's descriptors back at
 * their count and its memory where the first round left it; MANY peers
 * that never send HELLO only ever crowd out one another, and a client
 * gets in at its first try behind them; clients that fill every credit and
 * never read a reply cost the server a bounded amount each and do not
 * stop it serving others.
 *
 * Usage: test_admission PATH/TO/rkv-server  (RKV_TEST_LISTEN as in test_integration)
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "protocol.h"
#include "rkv.h"
#include "server_proc.h"
#include "transport.h"
#include "util.h"

#define SECRET         "s3cret"
#define SAFETY_MS      30000 /* bound on every wait; never the expected time */
#define MANY           10000 /* connections in the tests at scale */
#define SILENT_AT_ONCE 64    /* silent peers a test holds open at once */
#define IDLE_KIB       64u   /* server memory per idle connection: the target (design.md) */
#define STALLED        100   /* clients that fill their credits and never read */

/* Under AddressSanitizer (the test and the server are built alike) freed
 * memory waits in quarantine, so the server's RSS does not come back
 * after a round; LeakSanitizer checks the server at its exit instead. */
#ifdef __SANITIZE_ADDRESS__
#define RSS_COMES_BACK false
#else
#define RSS_COMES_BACK true
#endif

static const char *server_bin;
static struct server_proc sp; /* each test's server; killed by teardown if a test fails */

/* A peer that did the transport handshake and then says nothing. */
struct silent {
    const struct rkv_client_transport *ops;
    struct rkv_ctrans *t;
    struct rkv_trans_counters tc;
};

static void silent_open(const char *uri, struct silent *s)
{
    char scheme[8], err[256];
    const char *addr;
    memset(s, 0, sizeof *s);
    assert_true(rkv_uri_split(uri, scheme, sizeof scheme, &addr));
    s->ops = rkv_client_transport_by_scheme(scheme);
    assert_non_null(s->ops);
    struct rkv_ctrans_params p = { .local_buf_size = 1 << 20, .timeout_ms = 5000 };
    rkv_status st = s->ops->connect(addr, &p, &s->tc, &s->t, err, sizeof err);
    if (st != RKV_OK)
        fail_msg("transport connect: %s", err);
}

/* Wait for the server to hang up on a silent peer: true when it did. */
static bool silent_hung_up(struct silent *s)
{
    const void *msg;
    size_t len;
    rkv_status st = s->ops->recv(s->t, &msg, &len, SAFETY_MS);
    if (st == RKV_OK)
        s->ops->recv_done(s->t);
    return st == RKV_CONNECTION;
}

static void silent_close(struct silent *s)
{
    s->ops->close(s->t);
}

static uint64_t stat_of(rkv_client *c, const char *name)
{
    uint64_t v = 0;
    assert_true(server_stat(c, 0, name, &v));
    return v;
}

static rkv_client *good_client(const char *uri)
{
    struct rkv_options o = { .auth_secret = SECRET };
    return connect_retry(uri, &o, 10000);
}

/* Descriptors the server process holds now. */
static unsigned fd_count(pid_t pid)
{
    char path[64];
    unsigned n = 0;
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* VmRSS of pid in KiB. */
static uint64_t rss_kib(pid_t pid)
{
    char path[64], line[256];
    uint64_t kib = 0;
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmRSS: %" SCNu64, &kib) == 1)
            break;
    fclose(f);
    return kib;
}

/* Wait until the server holds `want` descriptors (closing is the worker's,
 * after the peer hung up): polling a condition, SAFETY_MS as a safety net. */
static unsigned wait_fd_count(pid_t pid, unsigned want)
{
    uint64_t deadline = rkv_now_ns() + SAFETY_MS * 1000000ull;
    unsigned n;
    while ((n = fd_count(pid)) != want && rkv_now_ns() < deadline)
        usleep(10000);
    return n;
}

/* Open-files limit for MANY connections in this process and in the server
 * it starts (which inherits it); false when the hard limit is lower. */
static bool nofile_for_many(void)
{
    struct rlimit r;
    const rlim_t want = MANY + 512;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0)
        return false;
    if (r.rlim_cur >= want)
        return true;
    if (r.rlim_max < want) {
        print_message("skipped: RLIMIT_NOFILE hard limit %ju is below the %ju that %d "
                      "connections need (raise it: ulimit -Hn)\n",
                      (uintmax_t)r.rlim_max, (uintmax_t)want, MANY);
        return false;
    }
    r.rlim_cur = want;
    return setrlimit(RLIMIT_NOFILE, &r) == 0;
}

/* A server for the tests at scale: shm only, the default poll mode, room
 * for MANY connections whatever this machine's memory (the tests bound
 * what they cost themselves). False (stopped) over rdma. */
static bool start_many(struct server_proc *p, unsigned n, const char *hello_ms)
{
    char max[16];
    snprintf(max, sizeof max, "%d", MANY + 1); /* and the test's own client */
    const char *const extra[] = { "--memory",
                                  "16M",
                                  "--max-conns",
                                  max,
                                  "--max-unauth-conns",
                                  "16",
                                  "--hello-timeout-ms",
                                  hello_ms,
                                  "--memory-check",
                                  "off",
                                  "--log-level",
                                  "warn",
                                  NULL };
    char uri[256];
    test_uri(uri, sizeof uri, n);
    if (strncmp(uri, "shm://", 6) != 0)
        return false;
    assert_int_equal(server_start(p, server_bin, uri, extra), 0);
    return true;
}

static int kill_server(void **state)
{
    (void)state;
    if (sp.pid > 0)
        server_kill(&sp);
    return 0;
}

static void start(struct server_proc *p, unsigned n, const char *hello_ms, const char *max_conns)
{
    const char *const extra[] = { "--memory",
                                  "16M",
                                  "--event-mode",
                                  "--auth-secret",
                                  SECRET,
                                  "--max-conns",
                                  max_conns,
                                  "--max-unauth-conns",
                                  "2",
                                  "--hello-timeout-ms",
                                  hello_ms,
                                  NULL };
    char uri[256];
    test_uri(uri, sizeof uri, n);
    assert_int_equal(server_start(p, server_bin, uri, extra), 0);
}

/* A silent peer is closed at its HELLO deadline, with nobody else around. */
static void test_silent_peer_closed_at_deadline(void **state)
{
    (void)state;
    struct silent s;
    start(&sp, 60, "200", "3");
    rkv_client *c = good_client(sp.uri);
    assert_non_null(c);
    uint64_t before = stat_of(c, "unauthenticated_dropped");
    silent_open(sp.uri, &s);
    assert_true(silent_hung_up(&s));
    silent_close(&s);
    assert_int_equal(stat_of(c, "unauthenticated_dropped"), before + 1);
    rkv_close(c);
    assert_int_equal(server_stop(&sp), 0);
}

/* With a HELLO deadline far away, silent peers beyond max_unauth_conns are
 * crowded out oldest first, and a real client gets in at its first try.
 *
 * max_conns 4, one above the peers this test ever holds authenticated or
 * waiting (5 silent, then 2 silent and the client): the shm listener admits
 * max_conns + max_unauth_conns connections at once, and the connection
 * server_start() probed with may still count there. The server answers that
 * probe's HELLO (wrong secret) and closes the connection after, so the probe
 * returns before the close; on a busy machine the worker can still be
 * between the two while the peers below connect, and with no spare place the
 * fifth would hear "busy". */
static void test_client_gets_in_past_silent_peers(void **state)
{
    (void)state;
    struct silent s[5];
    start(&sp, 61, "600000", "4");
    for (unsigned i = 0; i < 5; i++)
        silent_open(sp.uri, &s[i]);
    /* the first three were crowded out by the last two (cap 2) */
    for (unsigned i = 0; i < 3; i++)
        assert_true(silent_hung_up(&s[i]));
    struct rkv_options o = { .auth_secret = SECRET };
    rkv_client *c = NULL;
    assert_int_equal(rkv_connect(sp.uri, &o, &c), RKV_OK); /* one attempt, no retry */
    assert_int_equal(rkv_put(c, "k", 1, "v", 1, NULL, NULL), RKV_OK);
    assert_true(silent_hung_up(&s[3])); /* crowded out by c */
    assert_int_equal(stat_of(c, "unauthenticated_dropped"), 4);
    for (unsigned i = 0; i < 5; i++)
        silent_close(&s[i]);
    rkv_close(c);
    assert_int_equal(server_stop(&sp), 0);
}

/* Over max_conns, HELLO hears "busy, retry", and it is counted. */
static void test_over_max_conns_is_busy_and_counted(void **state)
{
    (void)state;
    rkv_client *c[3];
    start(&sp, 62, "5000", "3");
    for (unsigned i = 0; i < 3; i++) {
        c[i] = good_client(sp.uri);
        assert_non_null(c[i]);
    }
    struct rkv_options o = { .auth_secret = SECRET };
    rkv_client *extra = NULL;
    assert_int_equal(rkv_connect(sp.uri, &o, &extra), RKV_SERVER_BUSY);
    assert_non_null(strstr(rkv_last_error(NULL), "retry"));
    assert_int_equal(stat_of(c[0], "rejected_connections"), 1);
    rkv_close(c[2]);
    extra = good_client(sp.uri); /* its place is free again */
    assert_non_null(extra);
    rkv_close(extra);
    rkv_close(c[0]);
    rkv_close(c[1]);
    assert_int_equal(server_stop(&sp), 0);
}

/* A connected socket that never sends its connect message is closed (the
 * listener's handshake deadline), though no other peer ever arrives. */
static void test_lone_silent_socket_dropped(void **state)
{
    (void)state;
    start(&sp, 63, "5000", "3");
    if (strncmp(sp.uri, "shm://", 6) != 0) {
        assert_int_equal(server_stop(&sp), 0);
        skip();
    }
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    const char *path = sp.uri + 6;
    assert_true(strlen(path) < sizeof sa.sun_path);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    assert_true(s >= 0);
    assert_int_equal(connect(s, (struct sockaddr *)&sa, sizeof sa), 0);
    struct pollfd pfd = { .fd = s, .events = POLLIN };
    assert_int_equal(poll(&pfd, 1, SAFETY_MS), 1);
    char b;
    assert_true(recv(s, &b, 1, MSG_DONTWAIT) <= 0); /* EOF or reset: closed */
    close(s);
    assert_int_equal(server_stop(&sp), 0);
}

/* Nothing but HELLO acts before authentication: a HELLO with the wrong
 * secret and access hints is refused, and its hints are not applied. */
static void test_wrong_secret_hello_hints_ignored(void **state)
{
    (void)state;
    struct silent s;
    uint64_t buf[64];
    start(&sp, 64, "5000", "3");
    rkv_client *c = good_client(sp.uri);
    assert_non_null(c);
    assert_int_equal(rkv_put(c, "k", 1, "v", 1, NULL, NULL), RKV_OK);
    uint64_t before = stat_of(c, "hints_received");
    silent_open(sp.uri, &s);
    rkv_hint hints[8] = { 0 };
    struct rkv_req h = {
        .opcode = RKV_OP_HELLO, .key_len = 5, .req_id = 1, .arg = RKV_PROTO_VERSION, .hint_count = 8
    };
    uint32_t len = (uint32_t)rkv_req_build(buf, &h, "wrong", NULL, 0, hints, 8);
    memcpy(s.ops->send_buf(s.t, 0), buf, len);
    assert_int_equal(s.ops->send(s.t, &len, 1), RKV_OK);
    const void *reply;
    size_t rlen;
    const struct rkv_resp *r;
    const uint8_t *payload;
    assert_int_equal(s.ops->recv(s.t, &reply, &rlen, SAFETY_MS), RKV_OK);
    assert_int_equal(rkv_resp_parse(reply, rlen, &r, &payload), RKV_OK);
    assert_int_equal(r->status, RKV_AUTH);
    s.ops->recv_done(s.t);
    assert_true(silent_hung_up(&s));
    silent_close(&s);
    assert_int_equal(stat_of(c, "hints_received"), before);
    rkv_close(c);
    assert_int_equal(server_stop(&sp), 0);
}

/* A client of the test's own, once it is the server's only connection
 * (server_start's probe closes after it returns); *base_fds: what the
 * server holds beside connections. */
static rkv_client *only_client(unsigned *base_fds)
{
    rkv_client *c = connect_retry(sp.uri, NULL, 10000);
    uint64_t deadline = rkv_now_ns() + SAFETY_MS * 1000000ull;
    assert_non_null(c);
    while (stat_of(c, "connections") != 1 && rkv_now_ns() < deadline)
        usleep(10000); /* polling a condition, SAFETY_MS as a safety net */
    assert_int_equal(stat_of(c, "connections"), 1);
    *base_fds = fd_count(sp.pid) - 1;
    return c;
}

/* One round: MANY connections open (one more is busy), the last one
 * served while the rest idle, all closed; the server's descriptors back at
 * base_fds. Returns the server's VmRSS with them all open. */
static uint64_t open_close_round(rkv_client *c, rkv_client **cs, unsigned base_fds, uint64_t base_kib)
{
    struct rkv_options o = { .location_cache = (unsigned)-1 };
    for (unsigned i = 0; i < MANY; i++) {
        rkv_status st = rkv_connect(sp.uri, &o, &cs[i]);
        if (st != RKV_OK)
            fail_msg("connection %u of %d: %s", i, MANY, rkv_last_error(NULL));
    }
    rkv_client *extra = NULL;
    assert_int_equal(rkv_connect(sp.uri, &o, &extra), RKV_SERVER_BUSY);
    char v[64] = { 0 };
    size_t got = 0;
    assert_int_equal(rkv_put(cs[MANY - 1], "many", 4, "yes", 3, NULL, NULL), RKV_OK);
    assert_int_equal(rkv_get(cs[0], "many", 4, v, sizeof v, &got, NULL), RKV_OK);
    assert_memory_equal(v, "yes", 3);
    /* idle ones leave the worker's sweep: a pass costs what the active
     * cost (c, asking, is the one active now) */
    uint64_t parked = 0, deadline = rkv_now_ns() + SAFETY_MS * 1000000ull;
    while ((parked = stat_of(c, "connections_parked")) < MANY && rkv_now_ns() < deadline)
        usleep(10000); /* polling a condition, SAFETY_MS as a safety net */
    assert_true(parked >= MANY);
    uint64_t kib = rss_kib(sp.pid);
    print_message("%d connections: server VmRSS %" PRIu64 " KiB (%" PRIu64 " KiB before), %u fds\n",
                  MANY, kib, base_kib, fd_count(sp.pid));
    assert_true(kib <= base_kib + (uint64_t)MANY * IDLE_KIB);
    for (unsigned i = 0; i < MANY; i++)
        rkv_close(cs[i]);
    assert_int_equal(wait_fd_count(sp.pid, base_fds + 1), base_fds + 1);
    return kib;
}

/* A client opening and closing MANY connections in a loop: each round is
 * served in full, the server gives every descriptor back, and its memory
 * after the second round is where the first left it (no leak per
 * connection: 10,000 x even 100 bytes would show). */
static void test_many_connections_open_close(void **state)
{
    (void)state;
    if (!nofile_for_many())
        skip();
    if (!start_many(&sp, 65, "5000"))
        skip();
    rkv_client **cs = calloc(MANY, sizeof *cs);
    unsigned base_fds;
    assert_non_null(cs);
    rkv_client *c = only_client(&base_fds);
    uint64_t base_kib = rss_kib(sp.pid);
    open_close_round(c, cs, base_fds, base_kib);
    uint64_t after1 = rss_kib(sp.pid);
    open_close_round(c, cs, base_fds, base_kib);
    uint64_t after2 = rss_kib(sp.pid);
    print_message("server VmRSS after round 1: %" PRIu64 " KiB, after round 2: %" PRIu64 " KiB\n",
                  after1, after2);
    assert_true(!RSS_COMES_BACK || after2 <= after1 + 1024);
    free(cs);
    rkv_close(c);
    assert_int_equal(server_stop(&sp), 0);
}

/* MANY peers that connect and never send HELLO, SILENT_AT_ONCE open at a
 * time: each is crowded out by newer ones (max_unauth_conns 16, a HELLO
 * deadline far away), the server never holds more of them than it admits,
 * and a client behind them gets in at its first try. */
static void test_many_silent_peers_crowded_out(void **state)
{
    (void)state;
    struct silent s[SILENT_AT_ONCE];
    if (!nofile_for_many())
        skip();
    if (!start_many(&sp, 66, "600000"))
        skip();
    unsigned base_fds;
    rkv_client *c = only_client(&base_fds);
    uint64_t base_kib = rss_kib(sp.pid);
    for (unsigned i = 0; i < MANY; i++) {
        struct silent *slot = &s[i % SILENT_AT_ONCE];
        if (i >= SILENT_AT_ONCE) { /* 63 newer ones crowded it out */
            assert_true(silent_hung_up(slot));
            silent_close(slot);
        }
        silent_open(sp.uri, slot);
    }
    /* the server holds the 16 it admits, and the hung-up ones it has not
     * closed yet: never more than the test holds open */
    assert_true(fd_count(sp.pid) <= base_fds + 1 + SILENT_AT_ONCE);
    assert_true(rss_kib(sp.pid) <= base_kib + SILENT_AT_ONCE * IDLE_KIB + 4096);
    rkv_client *late = NULL;
    assert_int_equal(rkv_connect(sp.uri, NULL, &late), RKV_OK); /* one attempt */
    assert_int_equal(rkv_put(late, "k", 1, "v", 1, NULL, NULL), RKV_OK);
    for (unsigned i = 0; i < SILENT_AT_ONCE; i++)
        silent_close(&s[i]);
    assert_int_equal(wait_fd_count(sp.pid, base_fds + 2), base_fds + 2);
    assert_true(stat_of(c, "unauthenticated_dropped") >= MANY - SILENT_AT_ONCE);
    rkv_close(late);
    rkv_close(c);
    assert_int_equal(server_stop(&sp), 0);
}

/* A client that says HELLO, then fills every credit with PUTs and never
 * reads a reply: the server answers what it has reply room for and takes nothing
 * more, so STALLED of them cost it at most their rings and request copies
 * (3 x credits x 4 KiB each, under 1 MiB; the budget's 0.52 MiB counts the
 * pages it is charged for: the request ring is the client's), and another
 * client is served all the while. */
static void test_stalled_readers_bounded(void **state)
{
    (void)state;
    struct silent *s = calloc(STALLED, sizeof *s);
    uint64_t buf[RKV_STRANS_DEFAULT_MAX_MSG / 8];
    char value[3000];
    assert_non_null(s);
    if (!start_many(&sp, 67, "5000"))
        skip();
    rkv_client *c = connect_retry(sp.uri, NULL, 10000);
    assert_non_null(c);
    uint64_t base_kib = rss_kib(sp.pid);
    uint64_t puts = 0;
    memset(value, 'x', sizeof value);
    for (unsigned i = 0; i < STALLED; i++) {
        silent_open(sp.uri, &s[i]);
        struct rkv_req h = { .opcode = RKV_OP_HELLO, .req_id = 1, .arg = RKV_PROTO_VERSION };
        uint32_t len = (uint32_t)rkv_req_build(buf, &h, NULL, NULL, 0, NULL, 0);
        memcpy(s[i].ops->send_buf(s[i].t, 0), buf, len);
        assert_int_equal(s[i].ops->send(s[i].t, &len, 1), RKV_OK);
        const void *reply; /* its HELLO's reply is the only one it reads */
        size_t rlen;
        assert_int_equal(s[i].ops->recv(s[i].t, &reply, &rlen, SAFETY_MS), RKV_OK);
        s[i].ops->recv_done(s[i].t);
        /* every credit (the server's default), and not one write more: a
         * slot written without a credit is the server's still */
        for (uint32_t id = 2; id < 2 + RKV_STRANS_DEFAULT_CREDITS; id++) {
            char key[32];
            int klen = snprintf(key, sizeof key, "stalled-%u-%u", i, id);
            struct rkv_req p = { .opcode = RKV_OP_PUT,
                                 .key_len = (uint16_t)klen,
                                 .value_len = sizeof value,
                                 .req_id = id };
            len = (uint32_t)rkv_req_build(buf, &p, key, value, sizeof value, NULL, 0);
            memcpy(s[i].ops->send_buf(s[i].t, 0), buf, len);
            assert_int_equal(s[i].ops->send(s[i].t, &len, 1), RKV_OK);
            puts++;
        }
    }
    /* every PUT sent is taken (each had a reply slot), and another client
     * is served beside them */
    uint64_t deadline = rkv_now_ns() + SAFETY_MS * 1000000ull;
    while (stat_of(c, "cmd_put") < puts && rkv_now_ns() < deadline)
        usleep(10000); /* polling a condition, SAFETY_MS as a safety net */
    assert_int_equal(stat_of(c, "cmd_put"), puts);
    char v[8];
    size_t got = 0;
    assert_int_equal(rkv_put(c, "k", 1, "v", 1, NULL, NULL), RKV_OK);
    assert_int_equal(rkv_get(c, "k", 1, v, sizeof v, &got, NULL), RKV_OK);
    uint64_t kib = rss_kib(sp.pid);
    print_message("%d stalled clients: server VmRSS %" PRIu64 " KiB (%" PRIu64 " KiB before)\n",
                  STALLED, kib, base_kib);
    assert_true(kib <= base_kib + STALLED * 1024ull);
    for (unsigned i = 0; i < STALLED; i++)
        silent_close(&s[i]);
    free(s);
    rkv_close(c);
    assert_int_equal(server_stop(&sp), 0);
}

int main(int argc, char **argv)
{
    server_bin = argc > 1 ? argv[1] : getenv("RKV_SERVER_BIN");
    if (server_bin == NULL) {
        fprintf(stderr, "usage: %s PATH/TO/rkv-server\n", argv[0]);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_silent_peer_closed_at_deadline, kill_server),
        cmocka_unit_test_teardown(test_client_gets_in_past_silent_peers, kill_server),
        cmocka_unit_test_teardown(test_over_max_conns_is_busy_and_counted, kill_server),
        cmocka_unit_test_teardown(test_lone_silent_socket_dropped, kill_server),
        cmocka_unit_test_teardown(test_wrong_secret_hello_hints_ignored, kill_server),
        cmocka_unit_test_teardown(test_many_connections_open_close, kill_server),
        cmocka_unit_test_teardown(test_many_silent_peers_crowded_out, kill_server),
        cmocka_unit_test_teardown(test_stalled_readers_bounded, kill_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
