/* test_reply_pool.c — the rdma server's reply pool (server/reply_pool.h):
 * nothing registered until asked, chunks on demand up to the bound, buffers
 * given back reused, a refused registration leaves the pool as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "reply_pool.h"

struct fake {
    unsigned made, unmade;
    bool fail; /* the next make fails */
};

static bool fake_make(void *ctx, uint64_t bytes, struct rkv_reply_chunk *chunk)
{
    struct fake *f = ctx;
    if (f->fail) {
        f->fail = false;
        return false;
    }
    f->made++;
    chunk->mem = malloc(bytes);
    chunk->lkey = f->made;
    chunk->handle = chunk->mem;
    return chunk->mem != NULL;
}

static void fake_unmake(void *ctx, struct rkv_reply_chunk *chunk)
{
    struct fake *f = ctx;
    f->unmade++;
    free(chunk->handle);
}

static void test_chunks_on_demand_up_to_bound(void **state)
{
    (void)state;
    struct fake f = { 0 };
    struct rkv_reply_pool p;
    uint32_t idx[2 * RKV_REPLY_POOL_CHUNK], extra;

    /* a bound of 100 is two whole chunks */
    assert_int_equal(RKV_OK, rkv_reply_pool_init(&p, 256, 100, fake_make, fake_unmake, &f));
    assert_int_equal(0, f.made);
    assert_int_equal(0, rkv_reply_pool_count(&p));
    for (unsigned i = 0; i < 2 * RKV_REPLY_POOL_CHUNK; i++) {
        assert_true(rkv_reply_pool_take(&p, &idx[i]));
        assert_int_equal(i < RKV_REPLY_POOL_CHUNK ? 1 : 2, f.made);
        memset(rkv_reply_pool_buf(&p, idx[i]), 0xab, 256); /* each is its own 256 bytes */
        for (unsigned j = 0; j < i; j++)
            assert_int_not_equal(idx[i], idx[j]);
    }
    assert_int_equal(2 * RKV_REPLY_POOL_CHUNK, rkv_reply_pool_out(&p));
    assert_false(rkv_reply_pool_take(&p, &extra)); /* at the bound: none */
    assert_int_equal(2, f.made);
    rkv_reply_pool_give(&p, idx[5]);
    assert_true(rkv_reply_pool_take(&p, &extra)); /* the one given back */
    assert_int_equal(idx[5], extra);
    assert_int_equal(2, f.made);
    for (unsigned i = 0; i < 2 * RKV_REPLY_POOL_CHUNK; i++)
        rkv_reply_pool_give(&p, idx[i]);
    assert_int_equal(0, rkv_reply_pool_out(&p));
    rkv_reply_pool_destroy(&p);
    assert_int_equal(2, f.unmade);
}

static void test_buffers_and_keys_per_chunk(void **state)
{
    (void)state;
    struct fake f = { 0 };
    struct rkv_reply_pool p;
    uint32_t a, b;

    assert_int_equal(RKV_OK, rkv_reply_pool_init(&p, 128, 128, fake_make, fake_unmake, &f));
    assert_true(rkv_reply_pool_take(&p, &a));
    assert_true(rkv_reply_pool_take(&p, &b));
    assert_int_equal(128, rkv_reply_pool_buf(&p, b) - rkv_reply_pool_buf(&p, a));
    assert_int_equal(1, rkv_reply_pool_lkey(&p, a));
    rkv_reply_pool_give(&p, a);
    rkv_reply_pool_give(&p, b);
    rkv_reply_pool_destroy(&p);
}

static void test_small_bound_small_chunk(void **state)
{
    (void)state;
    struct fake f = { 0 };
    struct rkv_reply_pool p;
    uint32_t idx[32], extra;

    assert_int_equal(RKV_OK, rkv_reply_pool_init(&p, 64, 32, fake_make, fake_unmake, &f));
    for (unsigned i = 0; i < 32; i++)
        assert_true(rkv_reply_pool_take(&p, &idx[i]));
    assert_int_equal(1, f.made); /* one chunk of 32 */
    assert_false(rkv_reply_pool_take(&p, &extra));
    /* past the bound on request: one more chunk, the first 32 still valid */
    assert_true(rkv_reply_pool_grow_past(&p));
    assert_int_equal(64, p.bound);
    assert_int_equal(1, p.grown_past);
    assert_true(rkv_reply_pool_take(&p, &extra));
    assert_true(extra >= 32);
    memset(rkv_reply_pool_buf(&p, extra), 1, 64);
    memset(rkv_reply_pool_buf(&p, idx[0]), 1, 64);
    rkv_reply_pool_give(&p, extra);
    for (unsigned i = 0; i < 32; i++)
        rkv_reply_pool_give(&p, idx[i]);
    assert_int_equal(0, rkv_reply_pool_out(&p));
    rkv_reply_pool_destroy(&p);
    assert_int_equal(2, f.unmade);
}

static void test_refused_chunk_leaves_pool(void **state)
{
    (void)state;
    struct fake f = { .fail = true };
    struct rkv_reply_pool p;
    uint32_t a;

    assert_int_equal(RKV_OK, rkv_reply_pool_init(&p, 64, 0, fake_make, fake_unmake, &f));
    assert_int_equal(1, p.bound);              /* at least one buffer */
    assert_false(rkv_reply_pool_take(&p, &a)); /* registration refused (memlock) */
    assert_int_equal(1, p.grow_failures);
    assert_int_equal(0, rkv_reply_pool_count(&p));
    assert_true(rkv_reply_pool_take(&p, &a)); /* the next try registers */
    assert_int_equal(1, f.made);
    rkv_reply_pool_give(&p, a);
    rkv_reply_pool_destroy(&p);
    assert_int_equal(1, f.unmade);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunks_on_demand_up_to_bound),
        cmocka_unit_test(test_buffers_and_keys_per_chunk),
        cmocka_unit_test(test_small_bound_small_chunk),
        cmocka_unit_test(test_refused_chunk_leaves_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
