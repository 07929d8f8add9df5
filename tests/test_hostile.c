/* test_hostile.c — a client that sends malformed requests to a real server.
 *
 * Talks to a real rkv-server through the raw client transport (no librkv
 * safety nets) and sends what a buggy or malicious peer might: requests
 * before HELLO, truncated headers, lengths that disagree with the bytes,
 * unknown opcodes and flags, oversized keys and values, rendezvous
 * descriptors outside the staging buffer, garbage hints, a "more follow"
 * mark that nothing follows (in each poll mode); and, over shm, a
 * client that tries every route to write the region it maps read-only, as
 * an unprivileged user. Each must get an
 * error reply or a closed connection; the server must keep serving other
 * clients with their data intact, drop the bad connections, and exit 0 on
 * SIGTERM (under ASan that also proves nothing leaked).
 *
 * Usage: test_hostile PATH/TO/rkv-server  (RKV_TEST_LISTEN as in test_integration)
 */
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "protocol.h"
#include "region_attack.h"
#include "rkv.h"
#include "server_proc.h"
#include "shm_ring.h"
#include "transport.h"
#include "util.h"

static const char *server_bin;
static struct server_proc sp;
static rkv_client *good; /* a well-behaved client that must keep working */

struct raw {
    const struct rkv_client_transport *ops;
    struct rkv_ctrans *t;
    struct rkv_trans_counters tc;
    struct rkv_hello hello;
};

/* Connect raw; the transport's connect and send limit is a safety net only
 * (a loaded Soft-RoCE guest has taken over 2 s to connect). */
static void raw_open_at(struct raw *r, const char *uri)
{
    char scheme[8], err[256];
    const char *addr;
    memset(r, 0, sizeof *r);
    assert_true(rkv_uri_split(uri, scheme, sizeof scheme, &addr));
    r->ops = rkv_client_transport_by_scheme(scheme);
    assert_non_null(r->ops);
    struct rkv_ctrans_params p = { .local_buf_size = 1 << 20, .timeout_ms = 20000 };
    assert_int_equal(r->ops->connect(addr, &p, &r->tc, &r->t, err, sizeof err), RKV_OK);
}

static void raw_open(struct raw *r)
{
    raw_open_at(r, sp.uri);
}

/* Wait up to timeout_ms for the next reply; return its status (header in
 * *out), or -1 when the server closed the connection or never answered. */
static int raw_recv(struct raw *r, unsigned timeout_ms, struct rkv_resp *out)
{
    const void *reply;
    size_t rlen;
    if (r->ops->recv(r->t, &reply, &rlen, timeout_ms) != RKV_OK)
        return -1;
    const struct rkv_resp *h;
    const uint8_t *payload;
    int st = rkv_resp_parse(reply, rlen, &h, &payload) == RKV_OK ? h->status : -2;
    if (st >= 0 && out)
        *out = *h;
    if (st == RKV_OK && h->opcode == RKV_OP_HELLO)
        assert_int_equal(rkv_hello_parse(payload, h->payload_len, &r->hello), RKV_OK);
    r->ops->recv_done(r->t);
    return st;
}

/* Send one message of `len` bytes; return the reply status, or -1 when the
 * server closed the connection (or never answered) instead. */
static int raw_call(struct raw *r, const void *msg, uint32_t len, struct rkv_resp *out)
{
    memcpy(r->ops->send_buf(r->t, 0), msg, len);
    if (r->ops->send(r->t, &len, 1) != RKV_OK)
        return -1;
    return raw_recv(r, 2000, out);
}

static size_t build(void *buf, uint8_t op, uint8_t flags, const char *key, uint16_t key_len,
                    const void *val, uint32_t val_len, uint64_t arg)
{
    struct rkv_req h = {
        .opcode = op, .flags = flags, .key_len = key_len, .value_len = val_len, .req_id = 7, .arg = arg
    };
    return rkv_req_build(buf, &h, key, val, val_len, NULL, 0);
}

static void raw_hello(struct raw *r)
{
    uint64_t buf[64];
    uint32_t len = (uint32_t)build(buf, RKV_OP_HELLO, 0, "", 0, NULL, 0, RKV_PROTO_VERSION);
    assert_int_equal(raw_call(r, buf, len, NULL), RKV_OK);
    char err[256];
    assert_int_equal(r->ops->set_region(r->t, &r->hello, err, sizeof err), RKV_OK);
}

static void raw_close(struct raw *r)
{
    r->ops->close(r->t);
}

/* The server answered `bad` with an error or a hang-up, and the good client
 * still reads what it stored. */
static void expect_rejected(int st, bool may_reply_error)
{
    if (st >= 0)
        assert_true(may_reply_error && st != RKV_OK);
    char buf[32];
    size_t n;
    assert_int_equal(rkv_get(good, "precious", 8, buf, sizeof buf, &n, NULL), RKV_OK);
    assert_int_equal(n, 5);
    assert_memory_equal(buf, "value", 5);
    assert_int_equal(rkv_ping(good), RKV_OK);
}

static void test_before_hello(void **state)
{
    (void)state;
    struct raw r;
    uint64_t buf[64];
    raw_open(&r);
    uint32_t len = (uint32_t)build(buf, RKV_OP_PUT, 0, "k", 1, "v", 1, 0);
    int st = raw_call(&r, buf, len, NULL);
    assert_true(st == RKV_AUTH || st == -1);
    /* and the connection is gone */
    assert_int_equal(raw_call(&r, buf, len, NULL), -1);
    raw_close(&r);
    expect_rejected(st, true);
}

static void test_truncated_and_wrong_lengths(void **state)
{
    (void)state;
    uint64_t buf[512];
    struct raw r;

    /* a message shorter than a header */
    raw_open(&r);
    raw_hello(&r);
    int st = raw_call(&r, "\x02\x00", 2, NULL);
    raw_close(&r);
    expect_rejected(st, true);

    /* key_len larger than the bytes sent */
    raw_open(&r);
    raw_hello(&r);
    uint32_t len = (uint32_t)build(buf, RKV_OP_PUT, 0, "precious", 8, "evil", 4, 0);
    ((struct rkv_req *)buf)->key_len = 200;
    st = raw_call(&r, buf, len, NULL);
    assert_true(st == RKV_PROTOCOL || st == -1);
    raw_close(&r);
    expect_rejected(st, true);

    /* value_len smaller than the bytes sent */
    raw_open(&r);
    raw_hello(&r);
    len = (uint32_t)build(buf, RKV_OP_PUT, 0, "precious", 8, "evil!", 5, 0);
    ((struct rkv_req *)buf)->value_len = 2;
    st = raw_call(&r, buf, len, NULL);
    assert_true(st == RKV_PROTOCOL || st == -1);
    raw_close(&r);
    expect_rejected(st, true);
}

static void test_unknown_opcode_and_flags(void **state)
{
    (void)state;
    uint64_t buf[64];
    struct raw r;
    static const uint8_t opcodes[] = { 0, RKV_OP_MAX, 200, 255 };
    for (unsigned i = 0; i < sizeof opcodes; i++) {
        raw_open(&r);
        raw_hello(&r);
        uint32_t len = (uint32_t)build(buf, opcodes[i], 0, "", 0, NULL, 0, 0);
        int st = raw_call(&r, buf, len, NULL);
        assert_true(st == RKV_PROTOCOL || st == -1);
        raw_close(&r);
        expect_rejected(st, true);
    }
    /* unknown flag bits, among them 0x08: a put mode past RKV_CAS has no
     * encoding, so a client cannot smuggle one in as another mode */
    static const uint8_t flags[] = { 0x08, 0x80, 0x0b };
    for (unsigned i = 0; i < sizeof flags; i++) {
        raw_open(&r);
        raw_hello(&r);
        uint32_t len = (uint32_t)build(buf, RKV_OP_PUT, flags[i], "precious", 8, "evil", 4, 0);
        int st = raw_call(&r, buf, len, NULL);
        assert_true(st == RKV_PROTOCOL || st == -1);
        raw_close(&r);
        expect_rejected(st, true);
    }
}

static void test_oversized(void **state)
{
    (void)state;
    uint64_t buf[512];
    char key[300];
    struct raw r;
    memset(key, 'x', sizeof key);
    raw_open(&r);
    raw_hello(&r);
    /* a 300-byte key: refused, connection may stay */
    uint32_t len = (uint32_t)build(buf, RKV_OP_PUT, 0, key, 300, "v", 1, 0);
    int st = raw_call(&r, buf, len, NULL);
    assert_true(st == RKV_TOO_LARGE || st == -1);
    /* a rendezvous value far larger than the server allows */
    struct rkv_remote_buf rb = { .addr = 0, .rkey = 0, .len = 0x7fffffff };
    struct rkv_req h = { .opcode = RKV_OP_PUT,
                         .flags = RKV_REQ_REMOTE_VALUE,
                         .key_len = 3,
                         .value_len = rb.len,
                         .req_id = 9 };
    len = (uint32_t)rkv_req_build(buf, &h, "big", &rb, sizeof rb, NULL, 0);
    if (st != -1) {
        st = raw_call(&r, buf, len, NULL);
        assert_true(st == RKV_TOO_LARGE || st == -1);
    }
    raw_close(&r);
    expect_rejected(st, true);
}

static void test_bad_rendezvous(void **state)
{
    (void)state;
    uint64_t buf[64];
    struct raw r;
    raw_open(&r);
    raw_hello(&r);
    /* a descriptor pointing past the staging buffer (and a bogus rkey) */
    struct rkv_remote_buf rb = { .addr = 1ull << 40, .rkey = 0xdead, .len = 8000 };
    struct rkv_req h = { .opcode = RKV_OP_PUT,
                         .flags = RKV_REQ_REMOTE_VALUE,
                         .key_len = 8,
                         .value_len = rb.len,
                         .req_id = 9 };
    uint32_t len = (uint32_t)rkv_req_build(buf, &h, "precious", &rb, sizeof rb, NULL, 0);
    int st = raw_call(&r, buf, len, NULL);
    assert_true(st == RKV_PROTOCOL || st == RKV_CONNECTION || st == -1);
    raw_close(&r);
    expect_rejected(st, true);
}

static void test_garbage_hints(void **state)
{
    (void)state;
    uint64_t buf[512];
    struct raw r;
    raw_open(&r);
    raw_hello(&r);
    struct rkv_req h = { .opcode = RKV_OP_HINTS, .hint_count = 64, .req_id = 3 };
    rkv_hint hints[64];
    for (unsigned i = 0; i < 64; i++)
        hints[i] = i == 0 ? UINT64_MAX : (uint64_t)rand() << 32 | (uint64_t)rand();
    uint32_t len = (uint32_t)rkv_req_build(buf, &h, NULL, NULL, 0, hints, 64);
    assert_int_equal(raw_call(&r, buf, len, NULL), RKV_OK); /* ignored, not fatal */
    raw_close(&r);
    expect_rejected(-1, true);
}

/* A client whose RKV_REQ_MORE mark lies: a marked request that nothing
 * follows. Its server holds the reply only a bounded number of worker
 * passes (server/reply_batch.h), then answers; in every poll mode — event
 * and adaptive workers must not go to sleep holding it (a worker asleep
 * would wake only every 100 ms and take minutes over the bound). Each
 * server counts the held batch as `reply_holds` and `reply_hold_expired`,
 * the write is done, and the connection goes on: a marked request with its
 * successor in the same send, and an old client's unmarked ones, get their
 * replies in order. The bound on each wait is a safety net (10 s). */
static struct server_proc mark_sp; /* test_mark_nothing_follows' server, killed on failure */

static int mark_teardown(void **state)
{
    (void)state;
    server_kill(&mark_sp);
    return 0;
}

static void test_mark_nothing_follows(void **state)
{
    (void)state;
    static const char *const modes[] = { "busy", "adaptive", "event" };
    struct server_proc *s = &mark_sp;
    for (unsigned m = 0; m < RKV_ARRAY_SIZE(modes); m++) {
        const char *const extra[] = { "--memory",    "16M",    "--workers", "1",
                                      "--poll-mode", modes[m], NULL };
        struct rkv_resp resp;
        struct raw r;
        uint64_t buf[64], holds = 0, expired = 0;
        char uri[256], val[8];
        size_t n;
        test_uri(uri, sizeof uri, 60 + m);
        assert_int_equal(server_start(s, server_bin, uri, extra), 0);
        rkv_client *c = connect_retry(s->uri, NULL, 5000);
        assert_non_null(c);
        raw_open_at(&r, s->uri);
        raw_hello(&r);
        assert_true(r.hello.features & RKV_FEATURE_MORE);

        uint32_t len = (uint32_t)build(buf, RKV_OP_PUT, RKV_REQ_MORE, "lonely", 6, "v", 1, 0);
        memcpy(r.ops->send_buf(r.t, 0), buf, len);
        assert_int_equal(r.ops->send(r.t, &len, 1), RKV_OK);
        if (raw_recv(&r, 10000, &resp) != RKV_OK)
            fail_msg("poll mode %s: no reply to a marked request that nothing followed", modes[m]);
        assert_true(server_stat(c, 0, "reply_holds", &holds));
        assert_true(server_stat(c, 0, "reply_hold_expired", &expired));
        if (holds < 1 || expired < 1)
            fail_msg("poll mode %s: reply_holds %llu, reply_hold_expired %llu (want >= 1 each)",
                     modes[m], (unsigned long long)holds, (unsigned long long)expired);
        assert_int_equal(rkv_get(c, "lonely", 6, val, sizeof val, &n, NULL), RKV_OK);
        assert_int_equal(n, 1);

        /* marked + unmarked in one send, then two unmarked (an old client) */
        for (unsigned round = 0; round < 2; round++) {
            uint32_t lens[2];
            for (unsigned i = 0; i < 2; i++) {
                uint8_t flags = round == 0 && i == 0 ? RKV_REQ_MORE : 0;
                lens[i] = (uint32_t)build(buf, RKV_OP_PING, flags, "", 0, NULL, 0, 0);
                ((struct rkv_req *)buf)->req_id = 100 + i;
                memcpy(r.ops->send_buf(r.t, i), buf, lens[i]);
            }
            assert_int_equal(r.ops->send(r.t, lens, 2), RKV_OK);
            for (unsigned i = 0; i < 2; i++) {
                assert_int_equal(raw_recv(&r, 10000, &resp), RKV_OK);
                assert_int_equal(resp.req_id, 100 + i);
            }
        }
        raw_close(&r);
        rkv_close(c);
        assert_int_equal(server_stop(s), 0);
    }
}

static void test_many_bad_clients_then_clean_state(void **state)
{
    (void)state;
    uint64_t buf[64];
    for (int i = 0; i < 20; i++) {
        struct raw r;
        raw_open(&r);
        if (i % 2)
            raw_hello(&r);
        uint32_t len = (uint32_t)build(buf, (uint8_t)(100 + i), 0, "", 0, NULL, 0, 0);
        (void)raw_call(&r, buf, len, NULL);
        raw_close(&r);
    }
    /* every bad connection is gone: only the good client remains */
    char stats[4096];
    size_t n;
    unsigned long long conns = 0;
    for (int i = 0; i < 1000; i++) { /* safety net: 20 s */
        assert_int_equal(rkv_stats(good, 0, stats, sizeof stats, &n), RKV_OK);
        conns = strtoull(strstr(stats, "\nconnections ") + 13, NULL, 10);
        if (conns == 1)
            break;
        usleep(20000);
    }
    assert_int_equal(conns, 1);
    expect_rejected(-1, true);
}

/* ------------------------------------------------------------------ shm region */

/* The region descriptor, as a hostile client that does the shm handshake
 * itself keeps it (librkv closes it once mapped); its socket in *sock. */
static int raw_region_fd(int *sock)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct rkv_shm_connect_msg m = { RKV_SHM_MAGIC, RKV_SHM_VERSION, (uint32_t)getpid() };
    struct rkv_shm_accept_msg a;
    int fds[RKV_SHM_CONN_FDS];
    unsigned nfds = 0;
    size_t got;
    const char *path = sp.uri + strlen("shm://");
    if (strlen(path) >= sizeof sa.sun_path)
        return -1;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    *sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct pollfd pfd = { .events = POLLIN };
    if (*sock < 0 || connect(*sock, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        rkv_shm_send_fds(*sock, &m, sizeof m, NULL, 0) != 0 ||
        (pfd.fd = *sock, poll(&pfd, 1, 10000) != 1) || /* a safety net, not a timing */
        rkv_shm_recv_fds(*sock, &a, sizeof a, &got, fds, RKV_SHM_CONN_FDS, &nfds) != 0 ||
        got != sizeof a || a.status != RKV_OK || nfds != RKV_SHM_CONN_FDS) {
        fprintf(stderr, "shm handshake for the region descriptor failed: %s\n", strerror(errno));
        return -1;
    }
    close(fds[1]); /* the connection memfd is the client's own business */
    return fds[0];
}

/* librkv's read-only mapping of the region, from /proc/self/maps. */
static void *librkv_view(size_t *size)
{
    char line[512];
    void *view = NULL;
    FILE *maps = fopen("/proc/self/maps", "re");
    while (maps != NULL && view == NULL && fgets(line, sizeof line, maps) != NULL) {
        unsigned long lo, hi;
        if (strstr(line, "memfd:rkv-region") != NULL && sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
            view = (void *)lo;
            *size = hi - lo;
        }
    }
    if (maps != NULL)
        fclose(maps);
    return view;
}

/* Child: connect, give up root if we have it (staying ptrace-able by
 * ourselves so /proc/self/fd stays ours and only the memfd's own permissions
 * decide), then try every write route. Exit status: routes that worked, or
 * 100+ for a setup failure. */
static int region_attacker(void)
{
    rkv_client *c = NULL;
    size_t size = 0;
    char path[64], link[256], buf[32];
    size_t n;
    int sock;
    if (rkv_connect(sp.uri, NULL, &c) != RKV_OK)
        return 101;
    void *view = librkv_view(&size);
    int fd = raw_region_fd(&sock);
    if (view == NULL)
        return 102;
    if (fd < 0)
        return 106;
    if (geteuid() == 0 && (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0 ||
                           prctl(PR_SET_DUMPABLE, 1) != 0))
        return 103;
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    if (geteuid() == 0 || readlink(path, link, sizeof link) <= 0)
        return 104; /* not unprivileged, or /proc not ours */
    unsigned broken = region_write_attempts(fd, size, view);
    /* and the client still reads as before */
    if (rkv_get(c, "precious", 8, buf, sizeof buf, &n, NULL) != RKV_OK || n != 5 ||
        memcmp(buf, "value", 5) != 0)
        return 105;
    rkv_close(c);
    close(fd);
    close(sock);
    return (int)broken;
}

static void test_shm_client_cannot_write_region(void **state)
{
    (void)state;
    if (strncmp(sp.uri, "shm://", 6) != 0) {
        print_message("skipped: the region descriptor is an shm matter (server on %s)\n", sp.uri);
        return;
    }
    if (geteuid() != 0)
        print_message("not root: the attacker runs as this user (uid %u), which owns the "
                      "server; the seals must hold all the same\n",
                      (unsigned)geteuid());
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(region_attacker());
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    /* the region is as it was: a new client validates its header, and the
     * value is the one stored */
    rkv_client *fresh = connect_retry(sp.uri, NULL, 5000);
    assert_non_null(fresh);
    rkv_close(fresh);
    expect_rejected(-1, true);
}

static int group_setup(void **state)
{
    (void)state;
    static const char *const extra[] = { "--memory", "32M", "--event-mode", NULL };
    char uri[256];
    test_uri(uri, sizeof uri, 50);
    if (server_start(&sp, server_bin, uri, extra) != 0)
        return -1;
    good = connect_retry(sp.uri, NULL, 5000);
    if (good == NULL || rkv_put(good, "precious", 8, "value", 5, NULL, NULL) != RKV_OK)
        return -1;
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    rkv_close(good);
    int rc = server_stop(&sp);
    if (rc != 0)
        fprintf(stderr, "rkv-server exit status %d on SIGTERM (want 0)\n", rc);
    return rc == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    server_bin = argc > 1 ? argv[1] : getenv("RKV_SERVER_BIN");
    if (server_bin == NULL) {
        fprintf(stderr, "usage: %s PATH/TO/rkv-server\n", argv[0]);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_before_hello),
        cmocka_unit_test(test_truncated_and_wrong_lengths),
        cmocka_unit_test(test_unknown_opcode_and_flags),
        cmocka_unit_test(test_oversized),
        cmocka_unit_test(test_bad_rendezvous),
        cmocka_unit_test(test_garbage_hints),
        cmocka_unit_test_teardown(test_mark_nothing_follows, mark_teardown),
        cmocka_unit_test(test_many_bad_clients_then_clean_state),
        cmocka_unit_test(test_shm_client_cannot_write_region),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
