/* test_read_lane.c — client/read_lane.h: how many READ lanes a connection
 * opens, which lane a thread's reads take, and the wr_id that carries a
 * READ's reader and read back to the thread waiting for it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "read_lane.h"

/* One lane per online CPU, capped by the setting and by RKV_LANES_MAX; a
 * cap of 0 turns lanes off; a CPU count sysconf could not give is one. */
static void test_lanes_max(void **state)
{
    (void)state;
    assert_int_equal(rkv_lanes_max(2, UINT32_MAX), 2);
    assert_int_equal(rkv_lanes_max(16, UINT32_MAX), 16);
    assert_int_equal(rkv_lanes_max(16, 4), 4);
    assert_int_equal(rkv_lanes_max(2, 4), 2);
    assert_int_equal(rkv_lanes_max(16, 0), 0);
    assert_int_equal(rkv_lanes_max(-1, UINT32_MAX), 1);
    assert_int_equal(rkv_lanes_max(0, UINT32_MAX), 1);
    assert_int_equal(rkv_lanes_max(100000, UINT32_MAX), RKV_LANES_MAX);
}

/* Readers 0..max-1 each get a lane of their own; the rest share them
 * evenly (round robin), so N threads open min(N, max) lanes. */
static void test_lane_pick(void **state)
{
    (void)state;
    unsigned used[4] = { 0 };
    for (uint32_t r = 0; r < 4; r++)
        assert_int_equal(rkv_lane_pick(r, 4), r);
    for (uint32_t r = 0; r < 4000; r++)
        used[rkv_lane_pick(r, 4)]++;
    for (unsigned i = 0; i < 4; i++)
        assert_int_equal(used[i], 1000);
    for (uint32_t r = 0; r < 100; r++)
        assert_int_equal(rkv_lane_pick(r, 1), 0);
    /* 3 threads on a 16-lane connection: 3 lanes */
    unsigned seen = 0;
    for (uint32_t r = 0; r < 3; r++)
        seen |= 1u << rkv_lane_pick(r, 16);
    assert_int_equal(seen, 0x7);
}

/* The wr_id round-trips reader and sequence at their extremes, and two
 * reads of one reader (or one read of two readers) never share an id. */
static void test_wr_id(void **state)
{
    (void)state;
    const uint32_t readers[] = { 0, 1, 4095, UINT32_MAX };
    const uint32_t seqs[] = { 0, 1, 0x80000000u, UINT32_MAX };
    for (unsigned i = 0; i < 4; i++)
        for (unsigned j = 0; j < 4; j++) {
            uint64_t id = rkv_lane_wr_id(readers[i], seqs[j]);
            assert_int_equal(rkv_lane_wr_reader(id), readers[i]);
            assert_int_equal(rkv_lane_wr_seq(id), seqs[j]);
        }
    assert_true(rkv_lane_wr_id(1, 2) != rkv_lane_wr_id(2, 1));
    assert_true(rkv_lane_wr_id(7, 1) != rkv_lane_wr_id(7, 2));
    assert_true(rkv_lane_wr_id(0, UINT32_MAX) != rkv_lane_wr_id(1, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lanes_max),
        cmocka_unit_test(test_lane_pick),
        cmocka_unit_test(test_wr_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
