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
#include "rkv.h"

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
    rkv_loc_cache_store(lc, NULL, region, kh, slot_for(0, 0));
    uint64_t tag = rkv_loc_cache_find(lc, NULL, region, kh) & 0xffff;
    rkv_loc_cache_store(lc, NULL, region, kh, 0);
    return tag;
}

#define MAX_DISTINCT 256

/* n (<= MAX_DISTINCT) key hashes whose tags differ, so that in a one-set
 * cache nothing but capacity makes them evict each other, and no key's find
 * can return another's entry (a tag collision, which costs a lookup one
 * verified READ, is not what these tests are about). */
static void distinct_keys(struct rkv_loc_cache *lc, uint64_t *kh, unsigned n)
{
    uint64_t tags[MAX_DISTINCT];
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
        rkv_loc_cache_store(lc, NULL, REGION_A, kh[i], slot_for(i, 1));
    for (unsigned i = 0; i < RKV_LOC_CACHE_WAYS; i++) {
        uint64_t s = rkv_loc_cache_find(lc, NULL, REGION_A, kh[i]);
        assert_int_equal(s & ~0xffffull, slot_for(i, 1) & ~0xffffull);
    }
    /* an update stays in its way, a forget empties it */
    rkv_loc_cache_store(lc, NULL, REGION_A, kh[3], slot_for(3, 2));
    assert_int_equal(key_of_slot(rkv_loc_cache_find(lc, NULL, REGION_A, kh[3])), 3);
    assert_int_equal(rkv_slot_class(rkv_loc_cache_find(lc, NULL, REGION_A, kh[3])), 2);
    rkv_loc_cache_store(lc, NULL, REGION_A, kh[3], 0);
    assert_int_equal(rkv_loc_cache_find(lc, NULL, REGION_A, kh[3]), 0);
    rkv_loc_cache_store(lc, NULL, REGION_A, kh[3], slot_for(3, 1));
    /* full: the 9th key takes exactly one way */
    rkv_loc_cache_store(lc, NULL, REGION_A, kh[RKV_LOC_CACHE_WAYS], slot_for(RKV_LOC_CACHE_WAYS, 1));
    unsigned kept = 0;
    for (unsigned i = 0; i <= RKV_LOC_CACHE_WAYS; i++)
        kept += rkv_loc_cache_find(lc, NULL, REGION_A, kh[i]) != 0;
    assert_int_equal(kept, RKV_LOC_CACHE_WAYS);
    assert_int_not_equal(rkv_loc_cache_find(lc, NULL, REGION_A, kh[RKV_LOC_CACHE_WAYS]), 0);
    rkv_loc_cache_release(lc);
}

/* What a client does per GET: find, and store when the location changed. */
static void use_key(struct rkv_loc_cache *lc, struct rkv_loc_cache_meter *m, uint64_t kh,
                    uint64_t slot)
{
    uint64_t found = rkv_loc_cache_find(lc, m, REGION_A, kh);
    if (rkv_loc_cache_changed(found, slot))
        rkv_loc_cache_store(lc, m, REGION_A, kh, slot);
}

/* A working set well inside the default budget grows the table to fit and
 * is then kept whole; the table stays far below the budget. */
static void test_default_size_keeps_working_set(void **state)
{
    (void)state;
    enum { KEYS = 200000, PASSES = 4 };
    struct rkv_loc_cache *lc = rkv_loc_cache_acquire(RKV_DEFAULT_LOCATION_CACHE);
    struct rkv_loc_cache_meter m = { 0 };
    assert_non_null(lc);
    assert_int_equal(rkv_loc_cache_entries(lc), RKV_LOC_CACHE_START);
    assert_int_equal(rkv_loc_cache_budget(lc), RKV_DEFAULT_LOCATION_CACHE);
    for (unsigned pass = 0; pass < PASSES; pass++)
        for (unsigned i = 0; i < KEYS; i++)
            use_key(lc, &m, 0x9e3779b97f4a7c15ull * (i + 1), slot_for(i % 1000, 1));
    unsigned kept = 0;
    for (unsigned i = 0; i < KEYS; i++)
        kept += key_of_slot(rkv_loc_cache_find(lc, NULL, REGION_A, 0x9e3779b97f4a7c15ull * (i + 1))) ==
                i % 1000;
    assert_true(kept >= KEYS - KEYS / 100); /* below 1 in 64 evicting: next to no losses */
    assert_true(rkv_loc_cache_entries(lc) >= 2 * KEYS);
    assert_true(rkv_loc_cache_entries(lc) <= RKV_DEFAULT_LOCATION_CACHE / 4);
    rkv_loc_cache_release(lc);
}

/* A cache's table: key hashes in the one set of a 1-set table, with
 * distinct tags (the budget of 64 entries starts at one set). */
static struct rkv_loc_cache *one_set_cache(uint64_t *kh, unsigned n)
{
    struct rkv_loc_cache *lc = rkv_loc_cache_acquire(64);
    assert_non_null(lc);
    assert_int_equal(rkv_loc_cache_entries(lc), RKV_LOC_CACHE_WAYS);
    distinct_keys(lc, kh, n);
    return lc;
}

/* Evicting stores grow the table; a low eviction rate does not; the table
 * stops at the budget. Every find, across growths, returns nothing or the
 * slot stored for exactly that key. */
static void test_grows_on_evictions(void **state)
{
    (void)state;
    enum { KEYS = 2 * RKV_LOC_CACHE_WAYS };
    uint64_t kh[KEYS];
    struct rkv_loc_cache *lc = one_set_cache(kh, KEYS);
    struct rkv_loc_cache_meter m = { 0 };
    for (unsigned i = 0; i < RKV_LOC_CACHE_WAYS; i++)
        rkv_loc_cache_store(lc, &m, REGION_A, kh[i], slot_for(i, 1)); /* fills the set */
    assert_int_equal(m.evictions, 0);

    /* many finds per eviction: 1 in 128, below the growth rate */
    for (unsigned i = 0; i < RKV_LOC_CACHE_GROW_SAMPLE * 2 * RKV_LOC_CACHE_GROW_RATE; i++)
        (void)rkv_loc_cache_find(lc, &m, REGION_A, kh[i % KEYS]);
    bool judged = false;
    for (unsigned round = 0; !judged && round < 100000; round++) {
        uint64_t before = m.evictions;
        rkv_loc_cache_store(lc, &m, REGION_A, kh[round % KEYS], slot_for(round % KEYS, 1));
        judged = m.evictions < before; /* the meter resets when it judges */
    }
    assert_true(judged);
    assert_int_equal(rkv_loc_cache_entries(lc), RKV_LOC_CACHE_WAYS);

    /* evictions without finds: grows, one doubling at a time, to the budget */
    enum { MANY = MAX_DISTINCT };
    static uint64_t many[MANY];
    distinct_keys(lc, many, MANY);
    unsigned sizes = 0, last = RKV_LOC_CACHE_WAYS;
    for (unsigned round = 0; round < 100000 && rkv_loc_cache_entries(lc) < 64; round++) {
        unsigned k = round % MANY;
        rkv_loc_cache_store(lc, &m, REGION_A, many[k], slot_for(k, round));
        for (unsigned i = 0; i < MANY; i++) {
            uint64_t s = rkv_loc_cache_find(lc, NULL, REGION_A, many[i]);
            assert_true(s == 0 || key_of_slot(s) == i);
        }
        if (rkv_loc_cache_entries(lc) != last) {
            assert_int_equal(rkv_loc_cache_entries(lc), 2 * last);
            last = rkv_loc_cache_entries(lc);
            sizes++;
        }
    }
    assert_int_equal(rkv_loc_cache_entries(lc), 64);
    assert_int_equal(sizes, 3);                          /* 8 -> 16 -> 32 -> 64 */
    for (unsigned round = 0; round < 10 * MANY; round++) /* and no further */
        rkv_loc_cache_store(lc, &m, REGION_A, many[round % MANY], slot_for(round % MANY, 1));
    assert_int_equal(rkv_loc_cache_entries(lc), 64);
    rkv_loc_cache_release(lc);
}

/* Drive this caller's meter to the growth point: evictions of other keys
 * until one short of judging. kh[0..WAYS-1] fill the set first. */
static void evict_until_judging(struct rkv_loc_cache *lc, struct rkv_loc_cache_meter *m,
                                const uint64_t *kh, unsigned nkeys, unsigned skip)
{
    for (unsigned round = 0; m->evictions + 1 < RKV_LOC_CACHE_GROW_SAMPLE; round++) {
        unsigned k = round % nkeys;
        if (k != skip)
            rkv_loc_cache_store(lc, m, REGION_A, kh[k], slot_for(k, round));
    }
}

/* An entry stored just before a growth is found after it (through the
 * previous table, and then from the current one); a forget forgets it in
 * both; two growths later, what was never found again is gone, never wrong. */
static void test_growth_keeps_previous_table(void **state)
{
    (void)state;
    enum { KEYS = 2 * RKV_LOC_CACHE_WAYS };
    uint64_t kh[KEYS];
    struct rkv_loc_cache *lc = one_set_cache(kh, KEYS);
    struct rkv_loc_cache_meter m = { 0 };
    unsigned x = KEYS - 1; /* the marker key */
    evict_until_judging(lc, &m, kh, KEYS - 1, x);
    assert_int_equal(rkv_loc_cache_entries(lc), RKV_LOC_CACHE_WAYS);
    /* the marker's store is the judging eviction (the set is full): it lands in
     * the old table, then the table grows */
    rkv_loc_cache_store(lc, &m, REGION_A, kh[x], slot_for(x, 5));
    assert_int_equal(rkv_loc_cache_entries(lc), 2 * RKV_LOC_CACHE_WAYS);
    assert_int_equal(key_of_slot(rkv_loc_cache_find(lc, NULL, REGION_A, kh[x])), x);
    assert_int_equal(rkv_slot_class(rkv_loc_cache_find(lc, NULL, REGION_A, kh[x])), 5);
    /* forgotten: not found, not promoted back from the previous table */
    rkv_loc_cache_store(lc, &m, REGION_A, kh[x], 0);
    assert_int_equal(rkv_loc_cache_find(lc, NULL, REGION_A, kh[x]), 0);

    /* again, now into the 2-set table: the marker is kept across this growth */
    rkv_loc_cache_store(lc, &m, REGION_A, kh[x], slot_for(x, 6));
    uint64_t y[KEYS];
    unsigned ny = 0;
    for (uint64_t cand = 1000; ny < KEYS; cand++) /* keys that may share x's set */
        y[ny++] = cand;
    while (rkv_loc_cache_entries(lc) == 2 * RKV_LOC_CACHE_WAYS) {
        for (unsigned i = 0; i < ny && rkv_loc_cache_entries(lc) == 2 * RKV_LOC_CACHE_WAYS; i++)
            rkv_loc_cache_store(lc, &m, REGION_A, y[i], slot_for(i, 1));
        for (unsigned i = 0; i < ny; i++)
            y[i] += KEYS;
    }
    assert_int_equal(rkv_loc_cache_entries(lc), 4 * RKV_LOC_CACHE_WAYS);
    uint64_t s = rkv_loc_cache_find(lc, NULL, REGION_A, kh[x]);
    assert_true(s == 0 || (key_of_slot(s) == x && rkv_slot_class(s) == 6));
    rkv_loc_cache_release(lc);
}

/* Whether a lookup's slot needs a store: not for a hit through the entry
 * found (the lookup swapped the cache's tag for the key's fingerprint). */
static void test_changed(void **state)
{
    (void)state;
    struct rkv_loc_cache *lc = rkv_loc_cache_acquire(1 << 10);
    uint64_t slot = slot_for(3, 1);
    rkv_loc_cache_store(lc, NULL, REGION_A, 42, slot);
    uint64_t found = rkv_loc_cache_find(lc, NULL, REGION_A, 42);
    assert_int_not_equal(found, 0);
    uint64_t used = (found & ~0xffffull) | 0x5a5a;    /* the key's own fingerprint */
    assert_false(rkv_loc_cache_changed(found, used)); /* a hit: nothing to write */
    assert_true(rkv_loc_cache_changed(found, slot_for(4, 1)));
    assert_true(rkv_loc_cache_changed(found, 0)); /* not found any more: forget */
    assert_true(rkv_loc_cache_changed(0, slot));  /* found through the buckets */
    assert_false(rkv_loc_cache_changed(0, 0));
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
        rkv_loc_cache_store(lc, NULL, REGION_A, kh, slot_for(1, 1));
        separate += rkv_loc_cache_find(lc, NULL, REGION_B, kh) == 0;
        assert_int_not_equal(rkv_loc_cache_find(lc, NULL, REGION_A, kh), 0);
    }
    /* only a 16-bit tag collision (which costs one verified READ) could
     * match: at most a handful in a thousand */
    assert_true(separate >= 995);
    /* both regions hold their own entry for the same key */
    rkv_loc_cache_store(lc, NULL, REGION_A, 77, slot_for(1, 1));
    rkv_loc_cache_store(lc, NULL, REGION_B, 77, slot_for(2, 1));
    assert_int_equal(key_of_slot(rkv_loc_cache_find(lc, NULL, REGION_A, 77)), 1);
    assert_int_equal(key_of_slot(rkv_loc_cache_find(lc, NULL, REGION_B, 77)), 2);
    rkv_loc_cache_release(lc);
}

/* Handles asking for the same size share one cache; the last release frees it. */
static void test_shared_by_size(void **state)
{
    (void)state;
    struct rkv_loc_cache *a = rkv_loc_cache_acquire(1000), *b = rkv_loc_cache_acquire(1024);
    struct rkv_loc_cache *c = rkv_loc_cache_acquire(4096);
    assert_ptr_equal(a, b); /* both round to 1024 */
    assert_ptr_not_equal(a, c);
    rkv_loc_cache_store(a, NULL, REGION_A, 5, slot_for(5, 1));
    assert_int_equal(key_of_slot(rkv_loc_cache_find(b, NULL, REGION_A, 5)), 5);
    assert_int_equal(rkv_loc_cache_find(c, NULL, REGION_A, 5), 0);
    rkv_loc_cache_release(a);
    assert_int_equal(key_of_slot(rkv_loc_cache_find(b, NULL, REGION_A, 5)), 5); /* still held by b */
    rkv_loc_cache_release(b);
    rkv_loc_cache_release(c);
    a = rkv_loc_cache_acquire(1024); /* a fresh one */
    assert_int_equal(rkv_loc_cache_find(a, NULL, REGION_A, 5), 0);
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
            rkv_loc_cache_store(h->lc, NULL, REGION_A, h->kh[k],
                                (round % 11) ? slot_for(k, round) : 0);
        uint64_t s = rkv_loc_cache_find(h->lc, NULL, REGION_A, h->kh[(k + h->id) % h->nkeys]);
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

/* Threads find and store many more keys than the table first holds, each
 * with its own meter, so the table grows under them: every find still
 * returns nothing or the slot of exactly that key, and the table grew. */
struct grower {
    struct rkv_loc_cache *lc;
    const uint64_t *kh;
    unsigned id, wrong, found;
};

static void *grow_hammer(void *arg)
{
    struct grower *g = arg;
    struct rkv_loc_cache_meter m = { 0 };
    for (unsigned round = 0; round < 100000; round++) {
        unsigned k = (round * 7919u + g->id * 131u) % MAX_DISTINCT;
        uint64_t s = rkv_loc_cache_find(g->lc, &m, REGION_A, g->kh[k]);
        if (s != 0) {
            g->found++;
            g->wrong += key_of_slot(s) != k;
        }
        if (s == 0 || round % 5 == 0)
            rkv_loc_cache_store(g->lc, &m, REGION_A, g->kh[k], round % 13 ? slot_for(k, round) : 0);
    }
    return NULL;
}

static void test_concurrent_growth(void **state)
{
    (void)state;
    enum { THREADS = 4, BUDGET = 1 << 12 };
    static uint64_t kh[MAX_DISTINCT];
    struct rkv_loc_cache *lc = rkv_loc_cache_acquire(BUDGET);
    unsigned start = rkv_loc_cache_entries(lc);
    assert_int_equal(start, BUDGET / 64);
    distinct_keys(lc, kh, MAX_DISTINCT); /* 4x the first table */
    pthread_t th[THREADS];
    struct grower gs[THREADS];
    for (unsigned i = 0; i < THREADS; i++) {
        gs[i] = (struct grower){ .lc = lc, .kh = kh, .id = i };
        assert_int_equal(pthread_create(&th[i], NULL, grow_hammer, &gs[i]), 0);
    }
    unsigned found = 0;
    for (unsigned i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(gs[i].wrong, 0);
        found += gs[i].found;
    }
    assert_true(found > 0);
    assert_true(rkv_loc_cache_entries(lc) > start);
    assert_true(rkv_loc_cache_entries(lc) <= BUDGET);
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
        cmocka_unit_test(test_grows_on_evictions),
        cmocka_unit_test(test_growth_keeps_previous_table),
        cmocka_unit_test(test_changed),
        cmocka_unit_test(test_concurrent_growth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
