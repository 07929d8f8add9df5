/* test_read_cost.c — client/read_cost.c: the verdict on timed doorbells,
 * and the watch that checks a "both buckets together" verdict as a
 * connection's GETs go (every timing here is given, none is measured).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "read_cost.h"

/* The read-cost probe's verdict, on timings a guest's Soft-RoCE gave
 * (the connect-time probe takes 9 of each, alternately). */
static void test_reads_serial(void **state)
{
    (void)state;
    /* Soft-RoCE: 2 READs take ~1.5x one; one 2-READ doorbell escaped the
     * tasklet's context switch and took 82 us. The shortest of each (the
     * verdict before: 82 < 1.25 x 84.9) called this a NIC, and such a
     * connection reads both buckets of every cold GET: 3 READs a GET. */
    uint64_t one[9] = { 85043, 87000, 86100, 84900, 88000, 86500, 85500, 87500, 86000 };
    uint64_t two[9] = { 131000, 129000, 82343, 130000, 128500, 132000, 129500, 131500, 130500 };
    assert_true(rkv_reads_serial(one, two, 9));
    assert_int_equal(one[4], 86100); /* sorted in place: the median in the middle */
    assert_int_equal(two[4], 130000);

    /* a NIC: the second READ nearly free, a preemption in either set */
    uint64_t nic1[9] = { 2000, 2010, 1990, 2005, 60000, 1995, 2002, 2008, 1998 };
    uint64_t nic2[9] = { 2100, 2090, 2110, 70000, 2105, 2095, 2098, 2102, 2101 };
    assert_false(rkv_reads_serial(nic1, nic2, 9));

    /* the machine halves its speed mid-probe: taken alternately, both sets
     * straddle the change and still tell serial (1.5x) from parallel */
    uint64_t slow1[9] = { 120, 120, 120, 120, 60, 60, 60, 60, 60 };
    uint64_t slow2[9] = { 180, 180, 180, 180, 90, 90, 90, 90, 90 };
    assert_true(rkv_reads_serial(slow1, slow2, 9));

    /* the threshold itself, an even count, and no samples */
    uint64_t e1[4] = { 100, 100, 100, 100 }, e2[4] = { 125, 125, 125, 125 };
    assert_true(rkv_reads_serial(e1, e2, 4));
    uint64_t f1[4] = { 100, 100, 100, 100 }, f2[4] = { 124, 124, 124, 124 };
    assert_false(rkv_reads_serial(f1, f2, 4));
    assert_false(rkv_reads_serial(NULL, NULL, 0));
}

static const struct rkv_read_op bucket_pair[2] = { { .len = 64 }, { .len = 64 } };
static const struct rkv_read_op small_item[1] = { { .len = 128 } };

/* Feed the watch doorbells of both kinds as a connection's GETs would (a
 * bucket pair, then its item), timing those it picks; returns the pair it
 * decided on, or 0 if it had not decided after `pairs`. */
static unsigned feed(struct rkv_cost_watch *w, unsigned pairs, uint64_t one_ns, uint64_t two_ns)
{
    for (unsigned i = 1; i <= pairs; i++) {
        if (rkv_cost_watch_pick(w, bucket_pair, 2) && rkv_cost_watch_add(w, 2, two_ns))
            return i;
        if (rkv_cost_watch_pick(w, small_item, 1) && rkv_cost_watch_add(w, 1, one_ns))
            return i;
    }
    return 0;
}

/* A connection whose probe said "together" on Soft-RoCE (2 READs at 1.6x
 * one): the watch turns it to the first bucket alone after its samples,
 * one doorbell in RKV_COST_WATCH_EVERY of each kind, and then stops. */
static void test_watch_finds_serial_reads(void **state)
{
    struct rkv_cost_watch w = { 0 };
    (void)state;
    assert_int_equal(feed(&w, 1000, 60000, 96000), 0); /* off until started */
    rkv_cost_watch_start(&w);
    unsigned at = feed(&w, 1000, 60000, 96000);
    assert_int_equal(at, (RKV_COST_WATCH_SAMPLES - 1) * RKV_COST_WATCH_EVERY + 1);
    assert_false(w.on);
    assert_int_equal(feed(&w, 1000, 60000, 96000), 0); /* once decided, nothing more is timed */
}

/* A NIC: the second READ nearly free, a preempted doorbell now and then.
 * The watch keeps watching (fresh sets of samples), never decides. */
static void test_watch_keeps_parallel_reads(void **state)
{
    struct rkv_cost_watch w;
    (void)state;
    rkv_cost_watch_start(&w);
    for (unsigned round = 0; round < 20; round++) {
        assert_int_equal(feed(&w, RKV_COST_WATCH_EVERY, 2000, 2100), 0);
        if (rkv_cost_watch_pick(&w, bucket_pair, 2))
            assert_false(rkv_cost_watch_add(&w, 2, 50000));
    }
    assert_true(w.on);
}

/* Only small doorbells of 1 or 2 READs are timed: a large item's READ
 * prices bytes, not round trips, and a doorbell of 3 is no bucket pair. */
static void test_watch_picks_small_doorbells(void **state)
{
    struct rkv_cost_watch w;
    const struct rkv_read_op big[1] = { { .len = 4096 } };
    const struct rkv_read_op pair_big[2] = { { .len = 64 }, { .len = 4096 } };
    const struct rkv_read_op three[3] = { { .len = 64 }, { .len = 64 }, { .len = 64 } };
    (void)state;
    rkv_cost_watch_start(&w);
    for (unsigned i = 0; i < 4 * RKV_COST_WATCH_EVERY; i++) {
        assert_false(rkv_cost_watch_pick(&w, big, 1));
        assert_false(rkv_cost_watch_pick(&w, pair_big, 2));
        assert_false(rkv_cost_watch_pick(&w, three, 3));
        assert_false(rkv_cost_watch_pick(&w, bucket_pair, 0));
    }
    /* the first small one of each kind is timed, then one in EVERY */
    assert_true(rkv_cost_watch_pick(&w, small_item, 1));
    for (unsigned i = 1; i < RKV_COST_WATCH_EVERY; i++)
        assert_false(rkv_cost_watch_pick(&w, small_item, 1));
    assert_true(rkv_cost_watch_pick(&w, small_item, 1));
    assert_true(rkv_cost_watch_pick(&w, bucket_pair, 2));
    /* a kind with all its samples waits for the other's */
    for (unsigned i = 0; i < RKV_COST_WATCH_SAMPLES; i++)
        assert_false(rkv_cost_watch_add(&w, 1, 1000));
    for (unsigned i = 0; i < 4 * RKV_COST_WATCH_EVERY; i++)
        assert_false(rkv_cost_watch_pick(&w, small_item, 1));
    assert_false(rkv_cost_watch_add(&w, 1, 1000)); /* refused, not counted */
    assert_false(rkv_cost_watch_add(&w, 3, 1000));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_serial),
        cmocka_unit_test(test_watch_finds_serial_reads),
        cmocka_unit_test(test_watch_keeps_parallel_reads),
        cmocka_unit_test(test_watch_picks_small_doorbells),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
