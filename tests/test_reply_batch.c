/* test_reply_batch.c — when a worker posts a connection's replies
 * (server/reply_batch.c), one pass at a time.
 *
 * Each test plays the passes a worker makes over one connection: how many
 * requests it took, whether the last of them carried RKV_REQ_MORE, whether
 * it may hold — and checks the verdict: an unmarked request posts, a marked
 * one holds until its successor comes, RKV_REPLY_BATCH replies post, a
 * marked request that nothing follows posts after RKV_REPLY_HOLD_PASSES
 * quiet passes (and a new request restarts that count), and a pass that may
 * not hold (the worker's look before it sleeps, a closing connection, the
 * shutdown) posts whatever waits. Plus the mark's two helpers in
 * common/protocol.h. No clock, no threads: the count of passes is the bound.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "protocol.h"
#include "reply_batch.h"

/* One pass that took `taken` requests (each answered with a 32-byte reply). */
static enum rkv_reply_verdict pass(struct rkv_reply_batch *b, unsigned taken, bool last_more,
                                   bool may_hold)
{
    for (unsigned i = 0; i < taken; i++)
        rkv_reply_batch_add(b, 32);
    return rkv_reply_batch_decide(b, taken, last_more, may_hold);
}

static void test_nothing_waits(void **state)
{
    (void)state;
    struct rkv_reply_batch b = { 0 };
    assert_int_equal(pass(&b, 0, false, true), RKV_REPLY_NONE);
    assert_int_equal(pass(&b, 0, true, true), RKV_REPLY_NONE);
    assert_int_equal(rkv_reply_batch_room(&b), RKV_REPLY_BATCH);
}

/* An old client's requests (never marked) go out in the pass that took them. */
static void test_unmarked_posts(void **state)
{
    (void)state;
    struct rkv_reply_batch b = { 0 };
    assert_int_equal(pass(&b, 3, false, true), RKV_REPLY_POST);
    assert_int_equal(b.n, 3);
    assert_false(b.held);
    rkv_reply_batch_posted(&b);
    assert_int_equal(b.n, 0);
    assert_int_equal(rkv_reply_batch_room(&b), RKV_REPLY_BATCH);
}

/* A client batch of 16 arriving one request per pass: one doorbell at the
 * unmarked 16th, all 16 replies in it, in the order taken. */
static void test_marked_holds_until_unmarked(void **state)
{
    (void)state;
    struct rkv_reply_batch b = { 0 };
    for (unsigned i = 0; i < 15; i++) {
        assert_int_equal(pass(&b, 1, true, true), RKV_REPLY_HOLD);
        assert_int_equal(pass(&b, 0, false, true), RKV_REPLY_HOLD); /* a pass with nothing new */
        b.lens[b.n - 1] = 100 + i;
    }
    assert_int_equal(b.n, 15);
    assert_true(b.held);
    assert_int_equal(pass(&b, 1, false, true), RKV_REPLY_POST);
    assert_int_equal(b.n, 16);
    for (unsigned i = 0; i < 15; i++)
        assert_int_equal(b.lens[i], 100 + i);
    assert_true(b.held);
    rkv_reply_batch_posted(&b);
    assert_false(b.held);
    /* the next batch starts unheld: an unmarked request goes at once */
    assert_int_equal(pass(&b, 1, false, true), RKV_REPLY_POST);
    assert_false(b.held);
}

/* Only the last request of a pass counts: a pass that ends on an unmarked
 * request posts, one that ends on a marked request holds. */
static void test_last_request_decides(void **state)
{
    (void)state;
    struct rkv_reply_batch b = { 0 };
    assert_int_equal(pass(&b, 4, false, true), RKV_REPLY_POST); /* 3 marked, then the last */
    rkv_reply_batch_posted(&b);
    assert_int_equal(pass(&b, 4, true, true), RKV_REPLY_HOLD); /* the batch continues */
    assert_int_equal(pass(&b, 12, false, true), RKV_REPLY_POST);
    assert_int_equal(b.n, 16);
}

/* RKV_REPLY_BATCH replies go, marked or not; the rest of the client's
 * batch starts a new one. */
static void test_cap_posts(void **state)
{
    (void)state;
    struct rkv_reply_batch b = { 0 };
    assert_int_equal(pass(&b, RKV_REPLY_BATCH - 1, true, true), RKV_REPLY_HOLD);
    assert_int_equal(rkv_reply_batch_room(&b), 1);
    assert_int_equal(pass(&b, 1, true, true), RKV_REPLY_POST);
    assert_int_equal(b.n, RKV_REPLY_BATCH);
    assert_int_equal(rkv_reply_batch_room(&b), 0);
    rkv_reply_batch_posted(&b);
    assert_int_equal(pass(&b, RKV_REPLY_BATCH, true, true), RKV_REPLY_POST);
}

/* A marked request that nothing follows: held RKV_REPLY_HOLD_PASSES - 1
 * quiet passes, posted (EXPIRED) at the next. */
static void test_bounded_quiet_passes(void **state)
{
    (void)state;
    struct rkv_reply_batch b = { 0 };
    assert_int_equal(pass(&b, 1, true, true), RKV_REPLY_HOLD);
    for (unsigned i = 1; i < RKV_REPLY_HOLD_PASSES; i++)
        if (pass(&b, 0, false, true) != RKV_REPLY_HOLD)
            fail_msg("quiet pass %u: posted before the bound", i);
    assert_int_equal(pass(&b, 0, false, true), RKV_REPLY_EXPIRED);
    assert_int_equal(b.n, 1);
    rkv_reply_batch_posted(&b);
    assert_int_equal(b.quiet, 0);
}

/* Each request taken restarts the count: a slow but steady client batch
 * is held as long as its requests keep coming. */
static void test_new_request_restarts_count(void **state)
{
    (void)state;
    struct rkv_reply_batch b = { 0 };
    for (unsigned r = 0; r < 3; r++) {
        assert_int_equal(pass(&b, 1, true, true), RKV_REPLY_HOLD);
        for (unsigned i = 1; i < RKV_REPLY_HOLD_PASSES; i++)
            assert_int_equal(pass(&b, 0, false, true), RKV_REPLY_HOLD);
    }
    assert_int_equal(pass(&b, 0, false, true), RKV_REPLY_EXPIRED);
    assert_int_equal(b.n, 3);
}

/* A pass that may not hold (the look before a sleep, a closing connection,
 * shutdown) posts what waits, held or just taken, and whatever the mark. */
static void test_may_not_hold_posts(void **state)
{
    (void)state;
    struct rkv_reply_batch b = { 0 };
    assert_int_equal(pass(&b, 2, true, false), RKV_REPLY_POST);
    rkv_reply_batch_posted(&b);
    assert_int_equal(pass(&b, 2, true, true), RKV_REPLY_HOLD);
    assert_int_equal(pass(&b, 0, false, false), RKV_REPLY_POST); /* the worker is about to sleep */
    assert_int_equal(b.n, 2);
    assert_true(b.held);
}

/* The mark in a request header: set and cleared without touching the put
 * mode or rendezvous bits, read from a received message, never from one
 * shorter than a header; the parser takes it on every opcode and refuses
 * other flags where only PUT has them. */
static void test_mark_in_header(void **state)
{
    (void)state;
    _Alignas(8) uint8_t msg[sizeof(struct rkv_req) + 1];
    struct rkv_req h = { .opcode = RKV_OP_PUT, .flags = RKV_ADD | RKV_REQ_REMOTE_VALUE };
    struct rkv_req_view v;
    memcpy(msg, &h, sizeof h);
    assert_false(rkv_req_more(msg, sizeof h));
    rkv_req_set_more(msg, true);
    assert_true(rkv_req_more(msg, sizeof h));
    assert_false(rkv_req_more(msg, sizeof h - 1));
    assert_int_equal(msg[offsetof(struct rkv_req, flags)],
                     RKV_ADD | RKV_REQ_REMOTE_VALUE | RKV_REQ_MORE);
    rkv_req_set_more(msg, false);
    assert_int_equal(msg[offsetof(struct rkv_req, flags)], RKV_ADD | RKV_REQ_REMOTE_VALUE);

    static const struct {
        struct rkv_req h;
        rkv_status want;
    } cases[] = {
        { { .opcode = RKV_OP_PUT, .key_len = 1, .value_len = 0, .flags = RKV_REQ_MORE }, RKV_OK },
        { { .opcode = RKV_OP_DELETE, .key_len = 1, .flags = RKV_REQ_MORE }, RKV_OK },
        { { .opcode = RKV_OP_INCR, .key_len = 1, .flags = RKV_REQ_MORE }, RKV_OK },
        { { .opcode = RKV_OP_HINTS, .flags = RKV_REQ_MORE }, RKV_OK },
        { { .opcode = RKV_OP_PING, .flags = RKV_REQ_MORE }, RKV_OK },
        { { .opcode = RKV_OP_PING, .flags = RKV_REQ_MORE | RKV_ADD }, RKV_PROTOCOL },
        { { .opcode = RKV_OP_DELETE, .key_len = 1, .flags = RKV_REQ_REMOTE_VALUE }, RKV_PROTOCOL },
        { { .opcode = RKV_OP_PUT, .key_len = 1, .flags = 0x08 }, RKV_PROTOCOL },
        { { .opcode = RKV_OP_PUT, .key_len = 1, .flags = 0x80 | RKV_REQ_MORE }, RKV_PROTOCOL },
    };
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memcpy(msg, &cases[i].h, sizeof cases[i].h);
        msg[sizeof h] = 'k';
        size_t len = sizeof h + cases[i].h.key_len;
        if (rkv_req_parse(msg, len, 250, 1024, &v) != cases[i].want)
            fail_msg("case %u: opcode %u flags 0x%x: want %s", i, cases[i].h.opcode,
                     cases[i].h.flags, rkv_status_name(cases[i].want));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nothing_waits),
        cmocka_unit_test(test_unmarked_posts),
        cmocka_unit_test(test_marked_holds_until_unmarked),
        cmocka_unit_test(test_last_request_decides),
        cmocka_unit_test(test_cap_posts),
        cmocka_unit_test(test_bounded_quiet_passes),
        cmocka_unit_test(test_new_request_restarts_count),
        cmocka_unit_test(test_may_not_hold_posts),
        cmocka_unit_test(test_mark_in_header),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
