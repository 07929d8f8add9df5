/* test_location_cache.c — client/location_cache.c: associativity, region
 * separation, sharing between handles, and concurrent readers and writers.
 *
 * Deterministic: keys are chosen by what the cache itself reports (its tag
 * in the fingerprint bits of a found entry), never by timing. The threaded
 * test checks an invariant of every single find, whatever the interleaving.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "layout.h"
#include "location_cache.h"

#define REGION_A 0x1234567890abcdefull
#define REGION_B 0x0fedcba987654321ull

/* A slot word that says which key (and which write of it) it came from. */
static uint64_t slot_for(unsigned key, unsigned round)
{
    return rkv_slot_make(1, round % 8, (uint64_t)(key + 1) * 4096 * RKV_ITEM_ALIGN);
}

static unsigned key_of_slot(uint64_t slot)
{
    return (unsigned)(rkv_slot_offset(slot) / (4096 * RKV_ITEM_ALIGN)) - 1;
}

static uint64_t tag_of(struct rkv_loc_cache *lc, uint64_t region, uint64_t kh)
{
    rkv_loc_cache_store(lc, region, kh, slot_for(0, 0));
    uint64_t tag = rkv_loc_cache_find(lc, region, kh) & 0xffff;
    rkv_loc_cache_store(lc, region, kh, 0);
    return tag;
}

/* n key hashes whose tags differ in a one-set cache, so nothing but
 * capacity can make them evict each other. */
static void distinct_keys(struct rkv_loc_cache *lc, uint64_t *kh, unsigned n)
{
    uint64_t tags[RKV_LOC_CACHE_WAYS * 2];
    unsigned got = 0;
    for (uint64_t cand = 1; got < n; cand++) {
        uint64_t t = tag_of(lc, REGION_A, cand);
        bool dup = false;
        for (unsigned i = 0; i < got; i++)
            dup |= tags[i] == t;
        if (!dup) {
            tags[got] = t;
            kh[got++] = cand;
        }
    }
}

/* One set of 8 ways: 8 keys that all map to the same set (a direct-mapped
 * cache of that set would keep one) are all kept; a 9th replaces one. */
static void test_set_keeps_colliding_keys(void **state)
{
    (void)state;
    struct rkv_loc_cache *lc = rkv_loc_cache_acquire(1);
    assert_non_null(lc);
    assert_int_equal(rkv_loc_cache_entries(lc), RKV_LOC_CACHE_WAYS);
    uint64_t kh[RKV_LOC_CACHE_WAYS + 1];
    distinct_keys(lc, kh, RKV_LOC_CACHE_WAYS + 1);
    for (unsigned i = 0; i < RKV_LOC_CACHE_WAYS; i++)
        rkv_loc_cache_store(lc, REGION_A, kh[i], slot_for(i, 1));
    for (unsigned i = 0; i < RKV_LOC_CACHE_WAYS; i++) {
        uint64_t s = rkv_loc_cache_find(lc, REGION_A, kh[i]);
        assert_int_equal(s & ~0xffffull, slot_for(i, 1) & ~0xffffull);
    }
    /* an update stays in its way, a forget empties it */
    rkv_loc_cache_store(lc, REGION_A, kh[3], slot_for(3, 2));
    assert_int_equal(key_of_slot(rkv_loc_cache_find(lc, REGION_A, kh[3])), 3);
    assert_int_equal(rkv_slot_class(rkv_loc_cache_find(lc, REGION_A, kh[3])), 2);
    rkv_loc_cache_store(lc, REGION_A, kh[3], 0);
    assert_int_equal(rkv_loc_cache_find(lc, REGION_A, kh[3]), 0);
    rkv_loc_cache_store(lc, REGION_A, kh[3], slot_for(3, 1));
    /* full: the 9th key takes exactly one way */
    rkv_loc_cache_store(lc, REGION_A, kh[RKV_LOC_CACHE_WAYS], slot_for(RKV_LOC_CACHE_WAYS, 1));
    unsigned kept = 0;
    for (unsigned i = 0; i <= RKV_LOC_CACHE_WAYS; i++)
        kept += rkv_loc_cache_find(lc, REGION_A, kh[i]) != 0;
    assert_int_equal(kept, RKV_LOC_CACHE_WAYS);
    assert_int_not_equal(rkv_loc_cache_find(lc, REGION_A, kh[RKV_LOC_CACHE_WAYS]), 0);
    rkv_loc_cache_release(lc);
}

/* A working set well inside the default size is kept whole. */
static void test_default_size_keeps_working_set(void **state)
{
    (void)state;
    enum { KEYS = 200000 };
    struct rkv_loc_cache *lc = rkv_loc_cache_acquire(RKV_LOC_CACHE_DEFAULT);
    assert_non_null(lc);
    for (unsigned i = 0; i < KEYS; i++)
        rkv_loc_cache_store(lc, REGION_A, 0x9e3779b97f4a7c15ull * (i + 1), slot_for(i % 1000, 1));
    unsigned kept = 0;
    for (unsigned i = 0; i < KEYS; i++)
        kept += key_of_slot(rkv_loc_cache_find(lc, REGION_A, 0x9e3779b97f4a7c15ull * (i + 1))) ==
                i % 1000;
    assert_true(kept >= KEYS - KEYS / 1000); /* 8-way sets at 5% load: next to no losses */
    rkv_loc_cache_release(lc);
}

/* The same key in another region (another shard, or the same server after a
 * restart: a new generation) does not see this region's entry. */
static void test_regions_are_separate(void **state)
{
    (void)state;
    struct rkv_loc_cache *lc = rkv_loc_cache_acquire(1 << 16);
    unsigned separate = 0;
    for (uint64_t kh = 1; kh <= 1000; kh++) {
        rkv_loc_cache_store(lc, REGION_A, kh, slot_for(1, 1));
        separate += rkv_loc_cache_find(lc, REGION_B, kh) == 0;
        assert_int_not_equal(rkv_loc_cache_find(lc, REGION_A, kh), 0);
    }
    /* only a 16-bit tag collision (which costs one verified READ) could
     * match: at most a handful in a thousand */
    assert_true(separate >= 995);
    /* both regions hold their own entry for the same key */
    rkv_loc_cache_store(lc, REGION_A, 77, slot_for(1, 1));
    rkv_loc_cache_store(lc, REGION_B, 77, slot_for(2, 1));
    assert_int_equal(key_of_slot(rkv_loc_cache_find(lc, REGION_A, 77)), 1);
    assert_int_equal(key_of_slot(rkv_loc_cache_find(lc, REGION_B, 77)), 2);
    rkv_loc_cache_release(lc);
}

/* Handles asking for the same size share one cache; the last release frees it. */
static void test_shared_by_size(void **state)
{
    (void)state;
    struct rkv_loc_cache *a = rkv_loc_cache_acquire(1000), *b = rkv_loc_cache_acquire(1024);
    struct rkv_loc_cache *c = rkv_loc_cache_acquire(4096);
    assert_ptr_equal(a, b);           /* both round to 1024 */
    assert_ptr_not_equal(a, c);
    rkv_loc_cache_store(a, REGION_A, 5, slot_for(5, 1));
    assert_int_equal(key_of_slot(rkv_loc_cache_find(b, REGION_A, 5)), 5);
    assert_int_equal(rkv_loc_cache_find(c, REGION_A, 5), 0);
    rkv_loc_cache_release(a);
    assert_int_equal(key_of_slot(rkv_loc_cache_find(b, REGION_A, 5)), 5); /* still held by b */
    rkv_loc_cache_release(b);
    rkv_loc_cache_release(c);
    a = rkv_loc_cache_acquire(1024);  /* a fresh one */
    assert_int_equal(rkv_loc_cache_find(a, REGION_A, 5), 0);
    rkv_loc_cache_release(a);
}

/* Threads store and find 2x as many keys as the one set holds: every find
 * returns nothing or a slot written for exactly that key, never another's. */
struct hammer {
    struct rkv_loc_cache *lc;
    const uint64_t *kh;
    unsigned nkeys, id, wrong, found;
};

static void *hammer(void *arg)
{
    struct hammer *h = arg;
    for (unsigned round = 0; round < 200000; round++) {
        unsigned k = (round * 7 + h->id * 3) % h->nkeys;
        if (round % 3 == 0)
            rkv_loc_cache_store(h->lc, REGION_A, h->kh[k], (round % 11) ? slot_for(k, round) : 0);
        uint64_t s = rkv_loc_cache_find(h->lc, REGION_A, h->kh[(k + h->id) % h->nkeys]);
        if (s != 0) {
            h->found++;
            h->wrong += key_of_slot(s) != (k + h->id) % h->nkeys;
        }
    }
    return NULL;
}

static void test_concurrent_readers_writers(void **state)
{
    (void)state;
    enum { THREADS = 4, KEYS = 2 * RKV_LOC_CACHE_WAYS };
    struct rkv_loc_cache *lc = rkv_loc_cache_acquire(1);
    uint64_t kh[KEYS];
    distinct_keys(lc, kh, KEYS);
    pthread_t th[THREADS];
    struct hammer hs[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        hs[i] = (struct hammer){ .lc = lc, .kh = kh, .nkeys = KEYS, .id = i };
        assert_int_equal(pthread_create(&th[i], NULL, hammer, &hs[i]), 0);
    }
    unsigned found = 0;
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(hs[i].wrong, 0);
        found += hs[i].found;
    }
    assert_true(found > 0);
    rkv_loc_cache_release(lc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set_keeps_colliding_keys),
        cmocka_unit_test(test_default_size_keeps_working_set),
        cmocka_unit_test(test_regions_are_separate),
        cmocka_unit_test(test_shared_by_size),
        cmocka_unit_test(test_concurrent_readers_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
