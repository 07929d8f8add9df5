/* test_client_api.c — librkv's contract at its edges, against a real server.
 *
 * What a first-time or careless caller hits: every argument check (single
 * and batched calls must agree), unknown put modes, incr overflow, a TTL
 * that overrides the server's default, the maximum value size, the shape of
 * an error message, and a server that stops answering in the middle of a
 * batch (SIGSTOP: deterministic, the only wait is the client's own timeout).
 *
 * Usage: test_client_api PATH/TO/rkv-server
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "rkv.h"
#include "server_proc.h"

static const char *server_bin;
static unsigned uri_seq;

struct fixture {
    struct server_proc sp;
    rkv_client *c;
};

static int start_with(void **state, const char *const *extra, const struct rkv_options *o)
{
    struct fixture *f = calloc(1, sizeof *f);
    char uri[256];
    test_uri(uri, sizeof uri, 100 + uri_seq++);
    if (f == NULL || server_start(&f->sp, server_bin, uri, extra) != 0)
        return -1;
    f->c = connect_retry(f->sp.uri, o, 5000);
    *state = f;
    return f->c ? 0 : -1;
}

static int setup(void **state)
{
    static const char *const extra[] = { "--memory", "32M", "--event-mode", NULL };
    return start_with(state, extra, NULL);
}

static int setup_default_ttl(void **state)
{
    static const char *const extra[] = { "--memory",      "32M",  "--event-mode",
                                         "--default-ttl", "1000", NULL };
    return start_with(state, extra, NULL);
}

/* 300 ms timeout; the default s3fifo eviction, so GET hits queue access hints */
static int setup_short_timeout(void **state)
{
    static const char *const extra[] = { "--memory", "32M", "--event-mode", NULL };
    const struct rkv_options o = { .timeout_ms = 300, .reconnect_ms = 50 };
    return start_with(state, extra, &o);
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    if (f == NULL)
        return 0;
    rkv_close(f->c);
    int rc = server_stop(&f->sp);
    free(f);
    if (rc != 0)
        fprintf(stderr, "rkv-server exit status %d on SIGTERM (want 0)\n", rc);
    return rc == 0 ? 0 : -1;
}

static bool is_connection_error(rkv_status st)
{
    return st == RKV_TIMEOUT || st == RKV_CONNECTION;
}

/* The value of a server stat, from rkv_stats; fails the test if absent. */
static uint64_t stat_value(rkv_client *c, unsigned shard, const char *name)
{
    uint64_t v = 0;
    assert_true(server_stat(c, shard, name, &v));
    return v;
}

/* ------------------------------------------------------------ arguments */

/* Every bad argument a get can have, as a single call and inside a batch:
 * the same status for each, and nothing is copied to a NULL buffer. */
static void test_get_arguments(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    char buf[64], longkey[300];
    size_t n;
    memset(longkey, 'k', sizeof longkey);
    assert_int_equal(rkv_put(c, "k", 1, "hello", 5, NULL, NULL), RKV_OK);

    struct rkv_get_op ops[] = {
        { .key = NULL, .key_len = 3, .buf = buf, .buf_len = sizeof buf },
        { .key = "k", .key_len = 0, .buf = buf, .buf_len = sizeof buf },
        { .key = "k", .key_len = 1, .buf = NULL, .buf_len = 10 }, /* used to crash */
        { .key = "k", .key_len = 1, .buf = NULL, .buf_len = 0 },  /* asks for the size */
        { .key = longkey, .key_len = 251, .buf = buf, .buf_len = sizeof buf },
        { .key = "absent", .key_len = 6, .buf = NULL, .buf_len = 10 },
        { .key = "k", .key_len = 1, .buf = buf, .buf_len = sizeof buf },
    };
    static const rkv_status want[] = { RKV_INVALID,   RKV_INVALID,
                                       RKV_INVALID,   RKV_BUFFER_TOO_SMALL,
                                       RKV_TOO_LARGE, RKV_INVALID,
                                       RKV_OK };
    enum { N = sizeof ops / sizeof ops[0] };
    for (unsigned i = 0; i < N; i++) {
        rkv_status st = rkv_get(c, ops[i].key, ops[i].key_len, ops[i].buf, ops[i].buf_len, &n, NULL);
        assert_int_equal(st, want[i]);
    }
    assert_int_equal(rkv_get(c, "k", 1, NULL, 10, &n, NULL), RKV_INVALID);
    assert_string_equal(rkv_last_error(c), "get: the buffer is NULL but its length is 10; "
                                           "pass a buffer or length 0");
    assert_int_equal(rkv_mget(c, ops, N), RKV_OK);
    for (unsigned i = 0; i < N; i++)
        assert_int_equal(ops[i].status, want[i]);
    assert_int_equal(ops[3].value_len, 5);
    assert_int_equal(ops[6].value_len, 5);
    assert_memory_equal(buf, "hello", 5);
    assert_int_equal(rkv_mget(c, NULL, 0), RKV_OK);
}

/* The same for writes: put/mput, delete, incr; refused ops store nothing. */
static void test_write_arguments(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    char buf[64], longkey[300];
    size_t n;
    memset(longkey, 'k', sizeof longkey);
    size_t max = rkv_max_value_size(c);
    char *big = calloc(1, max + 1);
    assert_non_null(big);

    const struct rkv_put_options mode4 = { .mode = (rkv_put_mode)4 };
    const struct rkv_put_options mode_neg = { .mode = (rkv_put_mode)-1 };
    struct rkv_put_op ops[] = {
        { .key = NULL, .key_len = 2, .value = "v", .value_len = 1 },
        { .key = "w1", .key_len = 0, .value = "v", .value_len = 1 },
        { .key = "w2", .key_len = 2, .value = NULL, .value_len = 5 },
        { .key = "w3", .key_len = 2, .value = NULL, .value_len = 0 }, /* empty value: fine */
        { .key = longkey, .key_len = 251, .value = "v", .value_len = 1 },
        { .key = "w5", .key_len = 2, .value = big, .value_len = max + 1 },
        { .key = "w6", .key_len = 2, .value = "v", .value_len = 1, .opts = &mode4 },
        { .key = "w7", .key_len = 2, .value = "v", .value_len = 1, .opts = &mode_neg },
        { .key = "w8", .key_len = 2, .value = big, .value_len = max }, /* the largest: fine */
    };
    static const rkv_status want[] = { RKV_INVALID, RKV_INVALID,   RKV_INVALID,
                                       RKV_OK,      RKV_TOO_LARGE, RKV_TOO_LARGE,
                                       RKV_INVALID, RKV_INVALID,   RKV_OK };
    enum { N = sizeof ops / sizeof ops[0] };
    for (unsigned i = 0; i < N; i++) {
        rkv_status st = rkv_put(c, ops[i].key, ops[i].key_len, ops[i].value, ops[i].value_len,
                                ops[i].opts, NULL);
        assert_int_equal(st, want[i]);
    }
    assert_int_equal(rkv_delete(c, "w3", 2), RKV_OK);
    assert_int_equal(rkv_delete(c, "w8", 2), RKV_OK);
    assert_int_equal(rkv_mput(c, ops, N), RKV_OK);
    for (unsigned i = 0; i < N; i++)
        assert_int_equal(ops[i].status, want[i]);
    /* nothing refused was stored */
    static const char *const refused[] = { "w2", "w5", "w6", "w7" };
    for (unsigned i = 0; i < 4; i++)
        assert_int_equal(rkv_get(c, refused[i], 2, buf, sizeof buf, &n, NULL), RKV_NOT_FOUND);
    assert_int_equal(rkv_get(c, "w3", 2, buf, sizeof buf, &n, NULL), RKV_OK);
    assert_int_equal(n, 0);

    assert_int_equal(rkv_put(c, "k", 1, NULL, 5, NULL, NULL), RKV_INVALID);
    assert_string_equal(rkv_last_error(c), "put: the value is NULL but its length is 5; "
                                           "pass a value or length 0");
    assert_int_equal(rkv_put(c, NULL, 0, "v", 1, NULL, NULL), RKV_INVALID);
    assert_string_equal(rkv_last_error(c), "put: the key is NULL; keys are 1..250 bytes");

    uint64_t r;
    assert_int_equal(rkv_delete(c, NULL, 1), RKV_INVALID);
    assert_int_equal(rkv_delete(c, "w3", 0), RKV_INVALID);
    assert_string_equal(rkv_last_error(c), "delete: the key is empty (key_len 0); keys are "
                                           "1..250 bytes");
    assert_int_equal(rkv_delete(c, longkey, 251), RKV_TOO_LARGE);
    assert_int_equal(rkv_incr(c, NULL, 1, 1, &r), RKV_INVALID);
    assert_int_equal(rkv_incr(c, "n", 0, 1, &r), RKV_INVALID);
    assert_int_equal(rkv_incr(c, longkey, 251, 1, &r), RKV_TOO_LARGE);
    assert_string_equal(rkv_last_error(c), "incr: key of 251 bytes is longer than the server's "
                                           "limit of 250");
    free(big);
}

/* ------------------------------------------------------------ semantics */

/* Mode 4 used to act as SET and 5 as ADD (the mode was masked to 2 bits). */
static void test_unknown_put_mode(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    char buf[16];
    size_t n;
    const struct rkv_put_options m4 = { .mode = (rkv_put_mode)4 }, m5 = { .mode = (rkv_put_mode)5 };
    assert_int_equal(rkv_put(c, "absent", 6, "v", 1, &m4, NULL), RKV_INVALID);
    assert_string_equal(rkv_last_error(c), "put: unknown put mode 4; use RKV_SET, RKV_ADD, "
                                           "RKV_REPLACE or RKV_CAS");
    assert_int_equal(rkv_get(c, "absent", 6, buf, sizeof buf, &n, NULL), RKV_NOT_FOUND);
    assert_int_equal(rkv_put(c, "present", 7, "old", 3, NULL, NULL), RKV_OK);
    assert_int_equal(rkv_put(c, "present", 7, "new", 3, &m5, NULL), RKV_INVALID);
    assert_int_equal(rkv_put(c, "present", 7, "new", 3, &m4, NULL), RKV_INVALID);
    assert_int_equal(rkv_get(c, "present", 7, buf, sizeof buf, &n, NULL), RKV_OK);
    assert_memory_equal(buf, "old", 3);
}

/* INCR overflow is defined as memcached's: increments wrap modulo 2^64,
 * decrements saturate at 0 (rkv.h). */
static void test_incr_overflow(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    uint64_t r = 7;
    char buf[32];
    size_t n;
    assert_int_equal(rkv_put(c, "max", 3, "18446744073709551615", 20, NULL, NULL), RKV_OK);
    assert_int_equal(rkv_incr(c, "max", 3, 1, &r), RKV_OK);
    assert_int_equal(r, 0);
    assert_int_equal(rkv_get(c, "max", 3, buf, sizeof buf, &n, NULL), RKV_OK);
    assert_int_equal(n, 1);
    assert_memory_equal(buf, "0", 1);
    assert_int_equal(rkv_put(c, "near", 4, "18446744073709551610", 20, NULL, NULL), RKV_OK);
    assert_int_equal(rkv_incr(c, "near", 4, INT64_MAX, &r), RKV_OK);
    assert_true(r == (uint64_t)18446744073709551610ull + (uint64_t)INT64_MAX); /* mod 2^64 */
    assert_int_equal(rkv_put(c, "low", 3, "5", 1, NULL, NULL), RKV_OK);
    assert_int_equal(rkv_incr(c, "low", 3, -6, &r), RKV_OK);
    assert_int_equal(r, 0);
    assert_int_equal(rkv_incr(c, "low", 3, INT64_MIN, &r), RKV_OK);
    assert_int_equal(r, 0);
    /* 21 digits is not a u64: refused, not wrapped */
    assert_int_equal(rkv_put(c, "huge", 4, "184467440737095516150", 21, NULL, NULL), RKV_OK);
    assert_int_equal(rkv_incr(c, "huge", 4, 1, &r), RKV_NOT_NUMBER);
}

/* --default-ttl 1000: ttl 0 takes it, RKV_TTL_NEVER overrides it, a given
 * ttl is kept. ttl_left is read back at once; no waiting. */
static void test_ttl_never(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    char buf[16];
    size_t n;
    struct rkv_item_info info;
    const struct rkv_put_options never = { .ttl = RKV_TTL_NEVER }, ten = { .ttl = 10 };

    assert_int_equal(rkv_put(c, "dflt", 4, "v", 1, NULL, NULL), RKV_OK);
    assert_int_equal(rkv_get(c, "dflt", 4, buf, sizeof buf, &n, &info), RKV_OK);
    assert_true(info.ttl_left > 990 && info.ttl_left <= 1000);
    assert_int_equal(rkv_put(c, "forever", 7, "v", 1, &never, NULL), RKV_OK);
    assert_int_equal(rkv_get(c, "forever", 7, buf, sizeof buf, &n, &info), RKV_OK);
    assert_int_equal(info.ttl_left, 0); /* 0 = never expires */
    assert_int_equal(rkv_put(c, "short", 5, "v", 1, &ten, NULL), RKV_OK);
    assert_int_equal(rkv_get(c, "short", 5, buf, sizeof buf, &n, &info), RKV_OK);
    assert_true(info.ttl_left > 0 && info.ttl_left <= 10);
    /* incr keeps "never" */
    assert_int_equal(rkv_put(c, "cnt", 3, "1", 1, &never, NULL), RKV_OK);
    uint64_t r;
    assert_int_equal(rkv_incr(c, "cnt", 3, 1, &r), RKV_OK);
    assert_int_equal(rkv_get(c, "cnt", 3, buf, sizeof buf, &n, &info), RKV_OK);
    assert_int_equal(info.ttl_left, 0);
}

/* rkv_max_value_size is the server's limit, also in stats; over two servers
 * with different limits, the smaller. */
static void test_max_value_size(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    size_t max = rkv_max_value_size(c);
    assert_true(max > 4096);
    assert_int_equal(stat_value(c, 0, "max_value_len"), max);
    assert_int_equal(stat_value(c, 0, "max_key_len"), 250);

    static const char *const small[] = { "--memory",        "16M",  "--event-mode",
                                         "--max-value-len", "1000", NULL };
    struct server_proc sp;
    char uri[256], both[600];
    test_uri(uri, sizeof uri, 100 + uri_seq++);
    assert_int_equal(server_start(&sp, server_bin, uri, small), 0);
    snprintf(both, sizeof both, "%s,%s", f->sp.uri, uri);
    rkv_client *c2 = connect_retry(both, NULL, 5000);
    assert_non_null(c2);
    assert_int_equal(rkv_max_value_size(c2), 1000);
    assert_int_equal(stat_value(c2, 1, "max_value_len"), 1000);
    rkv_close(c2);
    assert_int_equal(server_stop(&sp), 0);
}

/* "URI: what went wrong; what to do", the URI once. */
static void test_error_message_shape(void **state)
{
    (void)state;
    char uri[300], want[600];
    rkv_client *c = (rkv_client *)1;
    snprintf(uri, sizeof uri, "shm:///tmp/rkv-test-%d-none.sock", (int)getpid());
    assert_int_equal(rkv_connect(uri, NULL, &c), RKV_CONNECTION);
    assert_null(c);
    snprintf(want, sizeof want,
             "%s: cannot connect: No such file or directory; is rkv-server "
             "running with this shm listen path?",
             uri);
    assert_string_equal(rkv_last_error(NULL), want);

    assert_int_equal(rkv_connect("tcp://x", NULL, &c), RKV_INVALID);
    assert_string_equal(rkv_last_error(NULL),
                        "bad server URI \"tcp://x\": use rdma://HOST:PORT or shm://PATH");
}

/* RC settings out of range are refused before anything connects; 0 picks
 * the defaults, which a working server then accepts. */
static void test_rc_options(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = (rkv_client *)1;
    struct rkv_options o = { .rdma_ack_timeout = 32 };
    assert_int_equal(rkv_connect(f->sp.uri, &o, &c), RKV_INVALID);
    assert_null(c);
    assert_string_equal(rkv_last_error(NULL),
                        "rkv_options: rdma_ack_timeout 32 is out of range: use "
                        "1..31 (each try waits 4.096 us x 2^N for the peer's ACK; 16 = 268 ms)");
    o = (struct rkv_options){ .rdma_retry_count = 8 };
    assert_int_equal(rkv_connect(f->sp.uri, &o, &c), RKV_INVALID);
    assert_string_equal(rkv_last_error(NULL), "rkv_options: rdma_retry_count 8 is out of range: use "
                                              "1..7 (retransmissions before a transfer fails)");
    o = (struct rkv_options){ .rdma_ack_timeout = 31, .rdma_retry_count = 1 };
    assert_int_equal(rkv_connect(f->sp.uri, &o, &c), RKV_OK);
    assert_int_equal(rkv_ping(c), RKV_OK);
    rkv_close(c);
}

/* ------------------------------------------------------------ a stopped server */

#define STOP_KEYS 128

static void fill_ops(struct rkv_get_op *ops, char (*keys)[16], char (*bufs)[32])
{
    for (unsigned i = 0; i < STOP_KEYS; i++)
        ops[i] = (struct rkv_get_op){
            .key = keys[i], .key_len = strlen(keys[i]), .buf = bufs[i], .buf_len = sizeof bufs[i]
        };
}

/* Each op has its value or a connection error; the call's status says
 * whether any op carries one. */
static bool check_mget(const struct rkv_get_op *ops, char (*keys)[16], char (*bufs)[32], rkv_status rc)
{
    bool carried = false;
    for (unsigned i = 0; i < STOP_KEYS; i++) {
        if (ops[i].status == RKV_OK) {
            assert_int_equal(ops[i].value_len, strlen(keys[i]));
            assert_memory_equal(bufs[i], keys[i], ops[i].value_len);
        } else {
            assert_true(is_connection_error(ops[i].status));
            carried = true;
        }
    }
    if (carried)
        assert_true(is_connection_error(rc));
    else
        assert_int_equal(rc, RKV_OK);
    return carried;
}

/* SIGSTOP the server: GET hits keep queueing access hints until the
 * credits run out; the hint flush that then waits for a credit times out and
 * takes the connection down in the middle of an mget. That used to crash
 * (shm_send_buf(NULL)). Every call must instead return its statuses, and
 * after SIGCONT the handle reconnects by itself. */
static void test_server_stops_answering(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    char keys[STOP_KEYS][16], bufs[STOP_KEYS][32];
    struct rkv_get_op ops[STOP_KEYS];
    struct rkv_put_op pops[2] = {
        { .key = "p0", .key_len = 2, .value = "v", .value_len = 1 },
        { .key = "p1", .key_len = 2, .value = "v", .value_len = 1 },
    };
    char buf[32];
    size_t n;
    uint64_t r;

    for (unsigned i = 0; i < STOP_KEYS; i++) {
        snprintf(keys[i], sizeof keys[i], "stop%u", i);
        assert_int_equal(rkv_put(c, keys[i], strlen(keys[i]), keys[i], strlen(keys[i]), NULL, NULL),
                         RKV_OK);
    }
    assert_int_equal(server_pause(&f->sp), 0);
    /* credits (64) / about 2 hint messages per mget (128 hits, 60 hints a
     * message): about the 31st call waits for a credit until the oldest
     * reply is 300 ms late and fails, and so does each reconnect attempt
     * after it (the server accepts none); 60 s is only the safety net */
    unsigned failed = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (now = t0; now.tv_sec - t0.tv_sec < 60 && failed < 3; clock_gettime(CLOCK_MONOTONIC, &now)) {
        fill_ops(ops, keys, bufs);
        rkv_status rc = rkv_mget(c, ops, STOP_KEYS);
        failed += check_mget(ops, keys, bufs, rc);
    }
    assert_int_equal(failed, 3);
    /* every other call on the stopped server fails cleanly too */
    rkv_status st = rkv_get(c, keys[0], strlen(keys[0]), buf, sizeof buf, &n, NULL);
    assert_true(st == RKV_OK || is_connection_error(st));
    assert_true(is_connection_error(rkv_put(c, "x", 1, "v", 1, NULL, NULL)));
    assert_true(is_connection_error(rkv_delete(c, "x", 1)));
    assert_true(is_connection_error(rkv_incr(c, "x", 1, 1, &r)));
    assert_true(is_connection_error(rkv_ping(c)));
    assert_true(is_connection_error(rkv_stats(c, 0, buf, sizeof buf, &n)));
    st = rkv_mput(c, pops, 2);
    assert_true(is_connection_error(st));
    assert_true(is_connection_error(pops[0].status) && is_connection_error(pops[1].status));

    assert_int_equal(server_resume(&f->sp), 0);
    /* the handle reconnects by itself (backoff <= 50 ms; bound 20 s) */
    bool ok = false;
    for (unsigned i = 0; i < 400 && !ok; i++) {
        fill_ops(ops, keys, bufs);
        rkv_status rc = rkv_mget(c, ops, STOP_KEYS);
        ok = !check_mget(ops, keys, bufs, rc);
        if (!ok)
            usleep(50000);
    }
    assert_true(ok);
    assert_int_equal(rkv_put(c, "after", 5, "v", 1, NULL, NULL), RKV_OK);
    struct rkv_counters k;
    rkv_get_counters(c, &k);
    assert_true(k.reconnects >= 1);
}

int main(int argc, char **argv)
{
    server_bin = argc > 1 ? argv[1] : getenv("RKV_SERVER_BIN");
    if (server_bin == NULL) {
        fprintf(stderr, "usage: %s PATH/TO/rkv-server\n", argv[0]);
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_get_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rc_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_put_mode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_incr_overflow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ttl_never, setup_default_ttl, teardown),
        cmocka_unit_test_setup_teardown(test_max_value_size, setup, teardown),
        cmocka_unit_test(test_error_message_shape),
        cmocka_unit_test_setup_teardown(test_server_stops_answering, setup_short_timeout, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
