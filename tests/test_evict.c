/* test_evict.c — which item eviction picks (server/evict.c), seen from inside.
 *
 * rkv_evict_pick_victim samples items of a class and takes the coldest live
 * one. It ranks the samples by their access words before it looks any up
 * in the index, and a freed item keeps the word it had: these tests fill a
 * class, free its oldest items (so the coldest words are free memory's)
 * and check that every pick is a live item, and one of the oldest live
 * ones, under lru and s3fifo.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "layout.h"
#include "region.h"
#include "table.h"
#include "table_private.h"
#include <cmocka.h>

enum { PICKS = 400 };

static uint64_t still_ns = 1000 * 1000000000ull;

/* A clock that stands still: what is freed stays in the limbo. */
static uint64_t still_now(void)
{
    return still_ns;
}

static void key_of(char *key, size_t len, unsigned i)
{
    snprintf(key, len, "pick-%08u", i);
}

static rkv_status put_i(struct rkv_table *t, unsigned i)
{
    char key[32], val[112];
    key_of(key, sizeof key, i);
    memset(val, 'v', sizeof val);
    struct rkv_value_src src = { .data = val, .len = sizeof val };
    return rkv_table_put(t, key, (uint32_t)strlen(key), &src, RKV_SET, 0, 0, 0, NULL);
}

/* The number in the key of the item at p. */
static unsigned key_number(const struct place *p)
{
    char key[32];
    uint32_t len = rkv_item_key_len(p->it);
    assert_true(len > 5 && len < sizeof key);
    memcpy(key, rkv_item_key(p->it), len);
    key[len] = '\0';
    assert_memory_equal(key, "pick-", 5);
    return (unsigned)strtoul(key + 5, NULL, 10);
}

/* Fill a 128 KiB heap of 4 KiB pages with items of one class (until it
 * is full: its first evictions), free the older half, then pick
 * PICKS victims without evicting them: each must be live, and on average
 * among the oldest live items (16 samples of which about half are live:
 * the coldest live one of eight sits near the oldest ninth). A pick whose
 * samples are all free memory finds nothing (one in 2^16 here), and the
 * caller picks again; the sampling seed is fixed, so every run makes the
 * same picks. */
static void picks_live_and_old(enum rkv_evict_policy policy)
{
    struct rkv_table_config c = { .slab_page_size = 4096,
                                  .grace_ms = 10,
                                  .evict = policy,
                                  .now_ns = still_now,
                                  .rng_seed = 0x5eed,
                                  .item_size_hint = 80 };
    struct rkv_region region;
    struct rkv_table *t;
    char err[512] = "";
    assert_int_equal(rkv_region_create(128 * 1024, &region, err, sizeof err), RKV_OK);
    if (rkv_table_create(region.base, region.size, &c, &t, err, sizeof err) != RKV_OK)
        fail_msg("rkv_table_create: %s", err);

    unsigned n = 0;
    struct rkv_table_stats s;
    do { /* until the heap is full: the first evictions, ahead of need */
        assert_int_equal(put_i(t, n++), RKV_OK);
        rkv_table_get_stats(t, &s);
    } while (s.evictions == 0);
    uint64_t evicted = s.evictions;
    assert_true(n > 200 && evicted < 32);
    unsigned gone = 0;
    for (unsigned i = 0; i < n / 2; i++) { /* the older half, less what was evicted */
        char key[32];
        key_of(key, sizeof key, i);
        rkv_status st = rkv_table_delete(t, key, (uint32_t)strlen(key));
        assert_true(st == RKV_OK || st == RKV_NOT_FOUND);
        gone += st == RKV_NOT_FOUND;
    }
    assert_true(gone <= evicted);

    char key[32];
    key_of(key, sizeof key, n - 1);
    struct rkv_key_hash h;
    table_hash(t, key, (uint32_t)strlen(key), &h);
    struct place newest;
    assert_true(rkv_table_index_find(t, &h, key, (uint32_t)strlen(key), &newest));
    unsigned cls = rkv_slot_class(newest.word);

    uint64_t rank_sum = 0;
    unsigned dead = 0; /* picks whose samples were all free memory */
    for (unsigned picked = 0; picked < PICKS;) {
        struct place p, at;
        if (!rkv_evict_pick_victim(t, cls, newest.word, &p)) {
            assert_true(++dead <= PICKS / 16); /* evict_class picks again, and so does this */
            continue;
        }
        picked++;
        assert_true(p.word != newest.word);
        assert_true(rkv_table_live_at(t, rkv_slot_offset(p.word), cls, &at));
        assert_true(at.word == p.word && at.bucket == p.bucket && at.slot == p.slot);
        unsigned k = key_number(&p);
        assert_true(k >= n / 2 && k < n - 1);
        rank_sum += k - n / 2;
    }
    /* the mean rank among the n - n/2 live items: about a ninth, and a
     * quarter is far out of reach unless the pick ignores coldness */
    assert_true(rank_sum < (uint64_t)PICKS * (n - n / 2) / 4);
    rkv_table_get_stats(t, &s);
    assert_int_equal(s.evictions, evicted); /* picking evicts nothing */
    assert_int_equal(s.items, n - n / 2 - (evicted - gone));

    rkv_table_destroy(t);
    rkv_region_destroy(&region);
}

static void test_lru_picks_live_and_old(void **state)
{
    (void)state;
    picks_live_and_old(RKV_EVICT_LRU);
}

static void test_s3fifo_picks_live_and_old(void **state)
{
    (void)state;
    picks_live_and_old(RKV_EVICT_S3FIFO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lru_picks_live_and_old),
        cmocka_unit_test(test_s3fifo_picks_live_and_old),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
