/* test_pipeline.c — the pipelined client API (rkv_submit / rkv_poll /
 * rkv_wait) against real servers.
 *
 * Two servers, so a handle shards over both: GETs, PUTs, DELETEs and INCRs
 * in flight together on both; writes to one key complete (and take effect)
 * in submission order, rendezvous values among them; the window is a hard
 * limit; every accepted op completes exactly once with its token; a server
 * that dies or stops answering mid-window completes each of its ops with an
 * error while the other server's go ahead; bad arguments are refused with a
 * message and leave nothing outstanding; the synchronous calls, which wrap
 * the same core, never take the pipelined ops' completions.
 *
 * No test waits on time: a stopped server is SIGSTOPped (its replies come
 * late by the client's own timeout), a dead one SIGKILLed.
 *
 * Usage: test_pipeline PATH/TO/rkv-server
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

#include <cmocka.h>

#include "rkv.h"
#include "server_proc.h"

#define NSERVERS 2

static const char *server_bin;
static unsigned uri_seq;

struct fixture {
    struct server_proc sp[NSERVERS];
    rkv_client *c;
};

static int start_with(void **state, const struct rkv_options *o)
{
    static const char *const extra[] = { "--memory", "32M", "--event-mode", NULL };
    struct fixture *f = calloc(1, sizeof *f);
    if (f == NULL)
        return -1;
    *state = f;
    unsigned base = 300 + uri_seq;
    uri_seq += NSERVERS;
    return server_shards_start(f->sp, NSERVERS, server_bin, base, extra, o, &f->c);
}

static int setup(void **state)
{
    return start_with(state, NULL);
}

static int setup_short_timeout(void **state)
{
    const struct rkv_options o = { .timeout_ms = 300, .reconnect_ms = 50 };
    return start_with(state, &o);
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    if (f == NULL)
        return 0;
    int rc = server_shards_stop(f->sp, NSERVERS, f->c);
    free(f);
    return rc;
}

/* The n-th key (from `prefix`) that lives on server `shard`. */
static size_t key_on(rkv_client *c, unsigned shard, const char *prefix, unsigned n, char *key,
                     size_t cap)
{
    for (unsigned i = 0, found = 0;; i++) {
        int len = snprintf(key, cap, "%s%u", prefix, i);
        if (rkv_shard_of(c, key, (size_t)len) == shard && found++ == n)
            return (size_t)len;
    }
}

/* Take every completion until nothing is outstanding (each wait bounded:
 * every op completes within the handle's timeout); *n of them go to out. */
static void drain(rkv_client *c, struct rkv_completion *out, unsigned cap, unsigned *n)
{
    *n = 0;
    while (rkv_outstanding(c) > 0) {
        unsigned got;
        assert_true(*n < cap);
        assert_int_equal(rkv_wait(c, out + *n, cap - *n, &got, 30000), RKV_OK);
        assert_true(got > 0); /* 30 s without one: a hang */
        *n += got;
    }
}

/* GET, PUT, DELETE and INCR on both servers, all in flight at once; each
 * completion is the one its synchronous call would give. */
static void test_mixed_kinds_two_shards(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    char keys[NSERVERS][4][32];
    size_t klen[NSERVERS][4];
    char bufs[NSERVERS][2][64];
    struct rkv_op ops[NSERVERS * 6];
    unsigned n = 0;

    assert_int_equal(rkv_set_window(c, 32), RKV_OK);
    for (unsigned s = 0; s < NSERVERS; s++) {
        for (unsigned k = 0; k < 4; k++)
            klen[s][k] = key_on(c, s, "mix", k, keys[s][k], sizeof keys[s][k]);
        assert_int_equal(rkv_put(c, keys[s][0], klen[s][0], "hit", 3, NULL, NULL), RKV_OK);
        assert_int_equal(rkv_put(c, keys[s][2], klen[s][2], "41", 2, NULL, NULL), RKV_OK);
        assert_int_equal(rkv_put(c, keys[s][3], klen[s][3], "gone", 4, NULL, NULL), RKV_OK);
    }
    for (unsigned s = 0; s < NSERVERS; s++) {
        unsigned base = s * 100;
        ops[n++] = (struct rkv_op){ .kind = RKV_KIND_GET,
                                    .token = base + 0,
                                    .key = keys[s][0],
                                    .key_len = klen[s][0],
                                    .buf = bufs[s][0],
                                    .buf_len = sizeof bufs[s][0] };
        ops[n++] = (struct rkv_op){ .kind = RKV_KIND_GET,
                                    .token = base + 1,
                                    .key = keys[s][1],
                                    .key_len = klen[s][1],
                                    .buf = bufs[s][1],
                                    .buf_len = sizeof bufs[s][1] };
        ops[n++] = (struct rkv_op){ .kind = RKV_KIND_PUT,
                                    .token = base + 2,
                                    .key = keys[s][1],
                                    .key_len = klen[s][1],
                                    .value = "new",
                                    .value_len = 3 };
        ops[n++] = (struct rkv_op){ .kind = RKV_KIND_INCR,
                                    .token = base + 3,
                                    .key = keys[s][2],
                                    .key_len = klen[s][2],
                                    .delta = 1 };
        ops[n++] = (struct rkv_op){
            .kind = RKV_KIND_DELETE, .token = base + 4, .key = keys[s][3], .key_len = klen[s][3]
        };
        ops[n++] = (struct rkv_op){
            .kind = RKV_KIND_DELETE, .token = base + 5, .key = keys[s][1], .key_len = 0
        }; /* refused: no completion */
    }
    unsigned accepted = 0;
    for (unsigned i = 0; i < n; i++) {
        rkv_status st = rkv_submit(c, &ops[i]);
        if (ops[i].token % 100 == 5) {
            assert_int_equal(st, RKV_INVALID);
            continue;
        }
        assert_int_equal(st, RKV_OK);
        accepted++;
    }
    /* nothing moves until the handle is called: all are out at once */
    assert_int_equal(rkv_outstanding(c), accepted);

    struct rkv_completion done[32];
    unsigned got;
    drain(c, done, 32, &got);
    assert_int_equal(got, accepted);
    for (unsigned i = 0; i < got; i++) {
        const struct rkv_completion *r = &done[i];
        unsigned s = (unsigned)(r->token / 100);
        switch (r->token % 100) {
        case 0:
            assert_int_equal(r->kind, RKV_KIND_GET);
            assert_int_equal(r->status, RKV_OK);
            assert_int_equal(r->value_len, 3);
            assert_memory_equal(bufs[s][0], "hit", 3);
            assert_true(r->info.version != 0);
            break;
        case 1: /* before or after the PUT in flight: either is right */
            assert_int_equal(r->kind, RKV_KIND_GET);
            assert_true(r->status == RKV_NOT_FOUND || r->status == RKV_OK);
            if (r->status == RKV_OK)
                assert_memory_equal(bufs[s][1], "new", 3);
            break;
        case 2:
            assert_int_equal(r->kind, RKV_KIND_PUT);
            assert_int_equal(r->status, RKV_OK);
            assert_true(r->value != 0); /* the new version */
            break;
        case 3:
            assert_int_equal(r->kind, RKV_KIND_INCR);
            assert_int_equal(r->status, RKV_OK);
            assert_int_equal(r->value, 42);
            break;
        case 4:
            assert_int_equal(r->kind, RKV_KIND_DELETE);
            assert_int_equal(r->status, RKV_OK);
            break;
        default: fail_msg("unexpected token %llu", (unsigned long long)r->token);
        }
    }
    for (unsigned s = 0; s < NSERVERS; s++) {
        char buf[16];
        size_t len;
        assert_int_equal(rkv_get(c, keys[s][3], klen[s][3], buf, sizeof buf, &len, NULL),
                         RKV_NOT_FOUND);
        assert_int_equal(rkv_get(c, keys[s][1], klen[s][1], buf, sizeof buf, &len, NULL), RKV_OK);
        assert_memory_equal(buf, "new", 3);
    }
}

/* Writes to one key from one handle: INCRs return 1, 2, 3... in submission
 * order and complete in it; PUT/DELETE/PUT chains end on the last; a value
 * by rendezvous (larger than a message) between inline ones keeps its place. */
static void test_write_order_per_key(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    enum { INCRS = 200 };
    char key[32], key2[32], key3[32];
    size_t klen = key_on(c, 1, "order", 0, key, sizeof key);
    size_t klen2 = key_on(c, 1, "order", 1, key2, sizeof key2);
    size_t klen3 = key_on(c, 1, "order", 2, key3, sizeof key3);
    static char big1[20000], big2[20000];
    memset(big1, 'a', sizeof big1);
    memset(big2, 'b', sizeof big2);

    assert_int_equal(rkv_set_window(c, 64), RKV_OK);
    assert_int_equal(rkv_put(c, key, klen, "0", 1, NULL, NULL), RKV_OK);
    struct rkv_completion done[64];
    uint64_t next_token = 0, expect = 0;
    while (expect < INCRS) {
        while (next_token < INCRS && rkv_outstanding(c) < rkv_window(c)) {
            const struct rkv_op op = {
                .kind = RKV_KIND_INCR, .token = next_token++, .key = key, .key_len = klen, .delta = 1
            };
            assert_int_equal(rkv_submit(c, &op), RKV_OK);
        }
        unsigned got;
        assert_int_equal(rkv_wait(c, done, 64, &got, 30000), RKV_OK);
        assert_true(got > 0);
        for (unsigned i = 0; i < got; i++) {
            assert_int_equal(done[i].status, RKV_OK);
            assert_int_equal(done[i].token, expect);     /* completion order */
            assert_int_equal(done[i].value, expect + 1); /* execution order */
            expect++;
        }
    }

    /* PUT big1, PUT "small", DELETE, PUT big2, PUT "last" on one key; and
     * two more keys' big values queued among them, both by rendezvous through
     * the one staging buffer (sent together, the second would overwrite the
     * first before the server pulled it) */
    const struct rkv_op chain[] = {
        { .kind = RKV_KIND_PUT,
          .token = 0,
          .key = key,
          .key_len = klen,
          .value = big1,
          .value_len = sizeof big1 },
        { .kind = RKV_KIND_PUT, .token = 1, .key = key, .key_len = klen, .value = "small", .value_len = 5 },
        { .kind = RKV_KIND_DELETE, .token = 2, .key = key, .key_len = klen },
        { .kind = RKV_KIND_PUT,
          .token = 3,
          .key = key,
          .key_len = klen,
          .value = big2,
          .value_len = sizeof big2 },
        { .kind = RKV_KIND_PUT,
          .token = 4,
          .key = key2,
          .key_len = klen2,
          .value = big1,
          .value_len = sizeof big1 },
        { .kind = RKV_KIND_PUT, .token = 5, .key = key, .key_len = klen, .value = "last", .value_len = 4 },
        { .kind = RKV_KIND_PUT,
          .token = 6,
          .key = key3,
          .key_len = klen3,
          .value = big2,
          .value_len = sizeof big2 },
    };
    for (unsigned i = 0; i < sizeof chain / sizeof chain[0]; i++)
        assert_int_equal(rkv_submit(c, &chain[i]), RKV_OK);
    unsigned got;
    drain(c, done, 64, &got);
    assert_int_equal(got, 7);
    for (unsigned i = 0; i < got; i++) {
        assert_int_equal(done[i].token, i); /* one server: the writes' order */
        assert_int_equal(done[i].status, RKV_OK);
    }
    static char buf[sizeof big1];
    size_t len;
    assert_int_equal(rkv_get(c, key, klen, buf, sizeof buf, &len, NULL), RKV_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(buf, "last", 4);
    assert_int_equal(rkv_get(c, key2, klen2, buf, sizeof buf, &len, NULL), RKV_OK);
    assert_int_equal(len, sizeof big1);
    assert_memory_equal(buf, big1, len);
    assert_int_equal(rkv_get(c, key3, klen3, buf, sizeof buf, &len, NULL), RKV_OK);
    assert_int_equal(len, sizeof big2);
    assert_memory_equal(buf, big2, len);
}

/* The window is a hard limit: the op past it is refused and nothing of it
 * is queued; completions not yet taken count; rkv_set_window only while
 * nothing is outstanding. */
static void test_window_limit(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    char buf[8][16];
    struct rkv_completion done[8];
    unsigned got;

    assert_int_equal(rkv_window(c), RKV_DEFAULT_WINDOW);
    assert_int_equal(rkv_set_window(c, 4), RKV_OK);
    for (unsigned i = 0; i < 4; i++) {
        const struct rkv_op op = { .kind = RKV_KIND_GET,
                                   .token = i,
                                   .key = "w",
                                   .key_len = 1,
                                   .buf = buf[i],
                                   .buf_len = sizeof buf[i] };
        assert_int_equal(rkv_submit(c, &op), RKV_OK);
    }
    const struct rkv_op extra = {
        .kind = RKV_KIND_PUT, .token = 99, .key = "w", .key_len = 1, .value = "v", .value_len = 1
    };
    assert_int_equal(rkv_submit(c, &extra), RKV_WINDOW_FULL);
    assert_non_null(strstr(rkv_last_error(c), "window of 4"));
    assert_int_equal(rkv_outstanding(c), 4);
    /* completed but not taken: still outstanding, still full */
    assert_int_equal(rkv_wait(c, done, 1, &got, 30000), RKV_OK);
    assert_int_equal(got, 1);
    assert_int_equal(rkv_outstanding(c), 3);
    assert_int_equal(rkv_set_window(c, 8), RKV_INVALID);
    assert_non_null(strstr(rkv_last_error(c), "outstanding"));
    assert_int_equal(rkv_submit(c, &extra), RKV_OK);
    assert_int_equal(rkv_submit(c, &extra), RKV_WINDOW_FULL);
    unsigned n;
    drain(c, done, 8, &n);
    assert_int_equal(n, 4);
    bool seen_put = false;
    for (unsigned i = 0; i < n; i++)
        seen_put |= done[i].token == 99;
    assert_true(seen_put);
    assert_int_equal(rkv_set_window(c, 0), RKV_INVALID);
    assert_int_equal(rkv_set_window(c, RKV_MAX_WINDOW + 1), RKV_INVALID);
    assert_int_equal(rkv_set_window(c, RKV_MAX_WINDOW), RKV_OK);
    assert_int_equal(rkv_window(c), RKV_MAX_WINDOW);
    /* nothing outstanding: rkv_wait returns at once, rkv_poll too */
    assert_int_equal(rkv_wait(c, done, 8, &got, 30000), RKV_OK);
    assert_int_equal(got, 0);
    assert_int_equal(rkv_poll(c, done, 8, &got), RKV_OK);
    assert_int_equal(got, 0);
}

/* A steady window of `window` slots over many ops of every kind on both
 * servers, completions taken at most `take` at a time: each token comes
 * back exactly once, and the window is never exceeded. */
static void tokens_exactly_once(rkv_client *c, unsigned window, unsigned take)
{
    enum { OPS = 3000, MAX_WINDOW = 16 };
    static uint8_t seen[OPS];
    static char keys[OPS][16], bufs[MAX_WINDOW][64];
    unsigned slot_of[OPS];
    bool slot_busy[MAX_WINDOW] = { false };
    uint64_t next = 0, taken = 0;
    unsigned max_out = 0;

    assert_true(window <= MAX_WINDOW && take <= window);
    memset(seen, 0, sizeof seen);
    assert_int_equal(rkv_set_window(c, window), RKV_OK);
    while (taken < OPS) {
        for (unsigned s = 0; s < window && next < OPS; s++) {
            if (slot_busy[s])
                continue;
            int klen = snprintf(keys[next], sizeof keys[next], "t%llu",
                                (unsigned long long)(next % 97));
            struct rkv_op op = { .kind = (rkv_kind)(next % 4),
                                 .token = next,
                                 .key = keys[next],
                                 .key_len = (size_t)klen,
                                 .buf = bufs[s],
                                 .buf_len = sizeof bufs[s],
                                 .value = "7",
                                 .value_len = 1,
                                 .delta = 1 };
            rkv_status st = rkv_submit(c, &op);
            assert_int_equal(st, RKV_OK);
            slot_busy[s] = true;
            slot_of[next++] = s;
        }
        if (rkv_outstanding(c) > max_out)
            max_out = rkv_outstanding(c);
        assert_true(rkv_outstanding(c) <= window);
        struct rkv_completion done[MAX_WINDOW];
        unsigned got;
        assert_int_equal(rkv_poll(c, done, take, &got), RKV_OK);
        assert_true(got <= take);
        for (unsigned i = 0; i < got; i++) {
            uint64_t t = done[i].token;
            assert_true(t < next);
            assert_int_equal(seen[t], 0);
            seen[t] = 1;
            slot_busy[slot_of[t]] = false;
            rkv_status st = done[i].status;
            /* every kind's outcome is one its synchronous call can give */
            assert_true(st == RKV_OK || st == RKV_NOT_FOUND || st == RKV_NOT_NUMBER);
            taken++;
        }
    }
    assert_int_equal(max_out, window);
    for (unsigned i = 0; i < OPS; i++)
        assert_int_equal(seen[i], 1);
    assert_int_equal(rkv_outstanding(c), 0);
}

static void test_tokens_exactly_once(void **state)
{
    struct fixture *f = *state;
    tokens_exactly_once(f->c, 16, 16);
}

/* A window that is not a power of two, its completions taken a few at a
 * time: the completion ring (rounded up to a power of two) wraps at every
 * position and still gives each token once. */
static void test_tokens_exactly_once_odd_window(void **state)
{
    struct fixture *f = *state;
    tokens_exactly_once(f->c, 13, 5);
}

static bool is_connection_error(rkv_status st)
{
    return st == RKV_CONNECTION || st == RKV_TIMEOUT;
}

/* Submit kinds of ops on both servers; token = 1000 * server + i. */
static unsigned submit_both(rkv_client *c, char (*keys)[32], char (*bufs)[32], unsigned per)
{
    unsigned n = 0;
    for (unsigned s = 0; s < NSERVERS; s++)
        for (unsigned i = 0; i < per; i++, n++) {
            size_t klen = key_on(c, s, "down", i, keys[n], 32);
            struct rkv_op op = { .kind = i % 2 ? RKV_KIND_PUT : RKV_KIND_GET,
                                 .token = 1000 * s + i,
                                 .key = keys[n],
                                 .key_len = klen,
                                 .buf = bufs[n],
                                 .buf_len = 32,
                                 .value = "v",
                                 .value_len = 1 };
            assert_int_equal(rkv_submit(c, &op), RKV_OK);
        }
    return n;
}

/* One server killed with ops in flight on both: the dead one's ops complete
 * with RKV_CONNECTION (those it answered before dying, with their result),
 * the live one's as usual; ops submitted to the dead one after complete
 * with an error too. No op is lost, none hangs. */
static void test_server_dies_mid_window(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    enum { PER = 12 };
    char keys[NSERVERS * PER][32], bufs[NSERVERS * PER][32];
    struct rkv_completion done[NSERVERS * PER];
    unsigned got;

    assert_int_equal(rkv_set_window(c, NSERVERS * PER), RKV_OK);
    unsigned n = submit_both(c, keys, bufs, PER);
    server_kill(&f->sp[1]);
    f->sp[1].pid = 0;
    drain(c, done, NSERVERS * PER, &got);
    assert_int_equal(got, n);
    for (unsigned i = 0; i < got; i++) {
        rkv_status st = done[i].status;
        if (done[i].token < 1000)
            assert_true(st == RKV_OK || st == RKV_NOT_FOUND);
        else
            assert_true(st == RKV_OK || st == RKV_NOT_FOUND || is_connection_error(st));
    }
    /* the server is gone: every op for it now completes with an error */
    n = submit_both(c, keys, bufs, PER);
    drain(c, done, NSERVERS * PER, &got);
    assert_int_equal(got, n);
    for (unsigned i = 0; i < got; i++) {
        if (done[i].token < 1000)
            assert_true(done[i].status == RKV_OK || done[i].status == RKV_NOT_FOUND);
        else
            assert_true(is_connection_error(done[i].status));
    }
}

/* One server stopped (SIGSTOP) with writes in flight: they complete with
 * RKV_TIMEOUT once timeout_ms passes without a reply; the other server's
 * ops, and GETs (one-sided reads, no server CPU), complete normally. */
static void test_server_stops_mid_window(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    enum { PER = 12 };
    char keys[NSERVERS * PER][32], bufs[NSERVERS * PER][32];
    struct rkv_completion done[NSERVERS * PER];
    unsigned got;

    assert_int_equal(rkv_set_window(c, NSERVERS * PER), RKV_OK);
    assert_int_equal(server_pause(&f->sp[1]), 0);
    unsigned n = submit_both(c, keys, bufs, PER);
    drain(c, done, NSERVERS * PER, &got);
    assert_int_equal(server_resume(&f->sp[1]), 0);
    assert_int_equal(got, n);
    unsigned timeouts = 0;
    for (unsigned i = 0; i < got; i++) {
        rkv_status st = done[i].status;
        bool put = done[i].kind == RKV_KIND_PUT;
        if (done[i].token < 1000 || !put) {
            assert_true(st == RKV_OK || st == RKV_NOT_FOUND ||
                        (done[i].token >= 1000 && is_connection_error(st)));
        } else {
            assert_int_equal(st, RKV_TIMEOUT);
            timeouts++;
        }
    }
    assert_int_equal(timeouts, PER / 2);
    assert_non_null(strstr(rkv_last_error(c), "no reply within 300 ms"));
}

/* Bad arguments: refused with RKV_INVALID / RKV_TOO_LARGE and a message that
 * says what was wrong; nothing becomes outstanding. */
static void test_bad_arguments(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    char longkey[300];
    struct rkv_completion done[4];
    unsigned got;
    const struct rkv_put_options bad_mode = { .mode = (rkv_put_mode)9 };
    memset(longkey, 'k', sizeof longkey);

    assert_int_equal(rkv_submit(c, NULL), RKV_INVALID);
    assert_non_null(strstr(rkv_last_error(c), "op is NULL"));
    const struct rkv_op kind = { .kind = (rkv_kind)7, .key = "k", .key_len = 1 };
    assert_int_equal(rkv_submit(c, &kind), RKV_INVALID);
    assert_non_null(strstr(rkv_last_error(c), "unknown op kind 7"));
    const struct rkv_op nokey = { .kind = RKV_KIND_GET, .key = NULL, .key_len = 1 };
    assert_int_equal(rkv_submit(c, &nokey), RKV_INVALID);
    assert_non_null(strstr(rkv_last_error(c), "get: the key is NULL"));
    const struct rkv_op empty = { .kind = RKV_KIND_DELETE, .key = "k", .key_len = 0 };
    assert_int_equal(rkv_submit(c, &empty), RKV_INVALID);
    assert_non_null(strstr(rkv_last_error(c), "delete: the key is empty"));
    const struct rkv_op big = { .kind = RKV_KIND_INCR, .key = longkey, .key_len = sizeof longkey };
    assert_int_equal(rkv_submit(c, &big), RKV_TOO_LARGE);
    assert_non_null(strstr(rkv_last_error(c), "incr: key of 300 bytes"));
    const struct rkv_op noval = {
        .kind = RKV_KIND_PUT, .key = "k", .key_len = 1, .value = NULL, .value_len = 3
    };
    assert_int_equal(rkv_submit(c, &noval), RKV_INVALID);
    assert_non_null(strstr(rkv_last_error(c), "put: the value is NULL"));
    const struct rkv_op nobuf = {
        .kind = RKV_KIND_GET, .key = "k", .key_len = 1, .buf = NULL, .buf_len = 8
    };
    assert_int_equal(rkv_submit(c, &nobuf), RKV_INVALID);
    assert_non_null(strstr(rkv_last_error(c), "get: the buffer is NULL"));
    const struct rkv_op mode = {
        .kind = RKV_KIND_PUT, .key = "k", .key_len = 1, .value = "v", .value_len = 1, .opts = &bad_mode
    };
    assert_int_equal(rkv_submit(c, &mode), RKV_INVALID);
    assert_non_null(strstr(rkv_last_error(c), "unknown put mode 9"));
    assert_int_equal(rkv_outstanding(c), 0);

    assert_int_equal(rkv_poll(c, NULL, 4, &got), RKV_INVALID);
    assert_non_null(strstr(rkv_last_error(c), "poll: the completion array is NULL"));
    assert_int_equal(rkv_poll(c, done, 0, &got), RKV_INVALID);
    assert_non_null(strstr(rkv_last_error(c), "poll: max is 0"));
    assert_int_equal(rkv_wait(c, done, 4, NULL, 10), RKV_INVALID);
    assert_non_null(strstr(rkv_last_error(c), "wait: the count pointer is NULL"));
    assert_int_equal(rkv_poll(NULL, done, 4, &got), RKV_INVALID);
}

/* A SET whose value is over the server's limit is accepted and completes
 * as a PUT with RKV_TOO_LARGE, having removed the key's old value (as
 * memcached's set does); a REPLACE over the limit is refused at submit and
 * leaves the old value. */
static void test_set_too_large_completes(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    size_t max = rkv_max_value_size(c), len;
    char *big = calloc(1, max + 1), buf[16];
    struct rkv_completion done[1];
    unsigned got = 0;
    const struct rkv_put_options repl = { .mode = RKV_REPLACE };
    assert_non_null(big);

    assert_int_equal(rkv_put(c, "tl", 2, "old", 3, NULL, NULL), RKV_OK);
    const struct rkv_op rop = {
        .kind = RKV_KIND_PUT, .key = "tl", .key_len = 2, .value = big, .value_len = max + 1, .opts = &repl
    };
    assert_int_equal(rkv_submit(c, &rop), RKV_TOO_LARGE);
    assert_int_equal(rkv_outstanding(c), 0);
    assert_int_equal(rkv_get(c, "tl", 2, buf, sizeof buf, &len, NULL), RKV_OK);

    const struct rkv_op op = {
        .kind = RKV_KIND_PUT, .key = "tl", .key_len = 2, .value = big, .value_len = max + 1, .token = 77
    };
    assert_int_equal(rkv_submit(c, &op), RKV_OK);
    assert_int_equal(rkv_wait(c, done, 1, &got, 30000), RKV_OK);
    assert_int_equal(got, 1);
    assert_int_equal(done[0].token, 77);
    assert_int_equal(done[0].kind, RKV_KIND_PUT);
    assert_int_equal(done[0].status, RKV_TOO_LARGE);
    assert_int_equal(rkv_get(c, "tl", 2, buf, sizeof buf, &len, NULL), RKV_NOT_FOUND);
    free(big);
}

/* Synchronous calls while pipelined ops are out: they wrap the same core
 * but never take the pipelined ops' completions, and move them along. */
static void test_sync_calls_beside_the_window(void **state)
{
    struct fixture *f = *state;
    rkv_client *c = f->c;
    char buf[16];
    size_t len;
    struct rkv_completion done[8];
    unsigned got;

    assert_int_equal(rkv_set_window(c, 8), RKV_OK);
    for (unsigned i = 0; i < 8; i++) {
        const struct rkv_op op = {
            .kind = RKV_KIND_PUT, .token = i, .key = "side", .key_len = 4, .value = "p", .value_len = 1
        };
        assert_int_equal(rkv_submit(c, &op), RKV_OK);
    }
    assert_int_equal(rkv_put(c, "sync", 4, "s", 1, NULL, NULL), RKV_OK);
    assert_int_equal(rkv_get(c, "sync", 4, buf, sizeof buf, &len, NULL), RKV_OK);
    assert_int_equal(rkv_ping(c), RKV_OK);
    struct rkv_get_op g[2] = { { .key = "sync", .key_len = 4, .buf = buf, .buf_len = sizeof buf },
                               { .key = "side", .key_len = 4, .buf = buf, .buf_len = sizeof buf } };
    assert_int_equal(rkv_mget(c, g, 2), RKV_OK);
    assert_int_equal(g[0].status, RKV_OK);
    assert_int_equal(g[1].status, RKV_OK); /* the pipelined PUTs went first on its server */
    assert_int_equal(rkv_outstanding(c), 8);
    unsigned n;
    drain(c, done, 8, &n);
    assert_int_equal(n, 8);
    for (unsigned i = 0; i < n; i++)
        assert_int_equal(done[i].status, RKV_OK);
    assert_int_equal(rkv_wait(c, done, 8, &got, 0), RKV_OK);
    assert_int_equal(got, 0);
}

int main(int argc, char **argv)
{
    server_bin = argc > 1 ? argv[1] : getenv("RKV_SERVER_BIN");
    if (server_bin == NULL) {
        fprintf(stderr, "usage: %s PATH/TO/rkv-server\n", argv[0]);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_mixed_kinds_two_shards, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_order_per_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_window_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tokens_exactly_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tokens_exactly_once_odd_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_dies_mid_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_stops_mid_window, setup_short_timeout, teardown),
        cmocka_unit_test_setup_teardown(test_set_too_large_completes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sync_calls_beside_the_window, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
