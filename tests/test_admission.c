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
 * Usage: test_admission PATH/TO/rkv-server  (RKV_TEST_LISTEN as in test_integration)
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "protocol.h"
#include "rkv.h"
#include "server_proc.h"
#include "transport.h"
#include "util.h"

#define SECRET    "s3cret"
#define SAFETY_MS 30000 /* bound on every wait; never the expected time */

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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
