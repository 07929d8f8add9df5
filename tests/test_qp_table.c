/* test_qp_table.c — the rdma server's QP number → connection map
 * (server/qp_table.h): found after add, gone after remove, the rest of a
 * probe run still found after a removal in its middle, a full table and a
 * duplicate refused, and a long mixed run checked against a plain array. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "qp_table.h"

static int conns[64]; /* stand-ins: their addresses are the values */

static void test_add_find_remove(void **state)
{
    (void)state;
    struct rkv_qp_table t;

    assert_int_equal(RKV_OK, rkv_qp_table_init(&t, 4));
    assert_null(rkv_qp_table_find(&t, 17));
    assert_true(rkv_qp_table_add(&t, 17, &conns[0]));
    assert_true(rkv_qp_table_add(&t, 18, &conns[1]));
    assert_ptr_equal(&conns[0], rkv_qp_table_find(&t, 17));
    assert_ptr_equal(&conns[1], rkv_qp_table_find(&t, 18));
    assert_false(rkv_qp_table_add(&t, 17, &conns[2])); /* already there */
    assert_ptr_equal(&conns[0], rkv_qp_table_find(&t, 17));
    assert_true(rkv_qp_table_remove(&t, 17));
    assert_false(rkv_qp_table_remove(&t, 17));
    assert_null(rkv_qp_table_find(&t, 17));
    assert_ptr_equal(&conns[1], rkv_qp_table_find(&t, 18));
    /* a QP number a closed connection had may come back for a new one */
    assert_true(rkv_qp_table_add(&t, 17, &conns[3]));
    assert_ptr_equal(&conns[3], rkv_qp_table_find(&t, 17));
    rkv_qp_table_destroy(&t);
}

static void test_full_table_refuses(void **state)
{
    (void)state;
    struct rkv_qp_table t;
    unsigned added = 0;

    assert_int_equal(RKV_OK, rkv_qp_table_init(&t, 8));
    for (uint32_t q = 0; q < 64; q++)
        added += rkv_qp_table_add(&t, 1000 + q, &conns[q]);
    /* 16 slots: half of them at most, never a table with no free slot */
    assert_int_equal(8, added);
    for (uint32_t q = 0; q < 8; q++)
        assert_ptr_equal(&conns[q], rkv_qp_table_find(&t, 1000 + q));
    assert_null(rkv_qp_table_find(&t, 1000 + 8));
    rkv_qp_table_destroy(&t);
}

/* Every entry of a probe run is found after any one of them goes: the
 * backward shift must not strand one behind a new hole, the run wrapping
 * round the end of the slots included. */
static void test_remove_keeps_runs(void **state)
{
    (void)state;
    struct rkv_qp_table t;

    for (uint32_t gone = 0; gone < 32; gone++) {
        assert_int_equal(RKV_OK, rkv_qp_table_init(&t, 32)); /* 64 slots, half full */
        for (uint32_t q = 0; q < 32; q++)
            assert_true(rkv_qp_table_add(&t, q * 64 + 7, &conns[q]));
        assert_true(rkv_qp_table_remove(&t, gone * 64 + 7));
        for (uint32_t q = 0; q < 32; q++)
            if (q == gone)
                assert_null(rkv_qp_table_find(&t, q * 64 + 7));
            else
                assert_ptr_equal(&conns[q], rkv_qp_table_find(&t, q * 64 + 7));
        assert_int_equal(31, t.count);
        rkv_qp_table_destroy(&t);
    }
}

/* Adds and removes at random (a fixed seed) against a plain array. */
static void test_against_an_array(void **state)
{
    (void)state;
    enum { QPS = 200, MOST = 60, STEPS = 20000 };
    void *ref[QPS] = { 0 };
    unsigned held = 0;
    struct rkv_qp_table t;
    uint64_t x = 88172645463325252ull;

    assert_int_equal(RKV_OK, rkv_qp_table_init(&t, MOST));
    for (unsigned step = 0; step < STEPS; step++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint32_t q = (uint32_t)(x % QPS), qp_num = q * 4099 + 0x11;
        if (ref[q] != NULL) {
            assert_true(rkv_qp_table_remove(&t, qp_num));
            ref[q] = NULL;
            held--;
        } else if (held < MOST) {
            assert_true(rkv_qp_table_add(&t, qp_num, &conns[q % 64]));
            ref[q] = &conns[q % 64];
            held++;
        }
        if (step % 97 == 0)
            for (uint32_t k = 0; k < QPS; k++)
                assert_ptr_equal(ref[k], rkv_qp_table_find(&t, k * 4099 + 0x11));
    }
    assert_int_equal(held, t.count);
    rkv_qp_table_destroy(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_find_remove),
        cmocka_unit_test(test_full_table_refuses),
        cmocka_unit_test(test_remove_keeps_runs),
        cmocka_unit_test(test_against_an_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
