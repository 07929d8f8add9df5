/* test_index_grow.c — the index that grows while serving (index_geom.h,
 * server/index_grow.c).
 *
 * The addressing on its own: at every split pointer of a few levels, each
 * candidate of every key stays in its bucket or goes to bucket + M, and only
 * from the bucket being split. A table that starts tiny and grows as small
 * items fill it: every item found by the server and by one-sided lookups,
 * the index grown. A reader whose geometry is from before a growth: it sees
 * the split buckets' levels, re-reads the geometry and finds every key, and
 * a miss is still a miss; the same with the split landing between its two
 * bucket READs. Those are deterministic: the growth happens between the
 * reader's steps. Last, writers and one-sided readers on threads while the
 * index splits under them: no lost key, no false miss, every value right
 * (fixed amounts of work per thread: nothing depends on the scheduler).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hash.h"
#include "index_geom.h"
#include "lookup.h"
#include "region.h"
#include "table.h"
#include "transport.h"

#define KEYS 3000

/* Each split of geometry g moves a key's candidate only from the bucket it
 * splits, and only to that bucket + M; a level completes as split reaches M. */
static void test_addressing_splits_move_only_the_split_bucket(void **state)
{
    (void)state;
    static const uint64_t bases[] = { 2, 3, 7, 100 };
    static uint64_t where[KEYS][2];
    char key[32];
    for (size_t k = 0; k < sizeof bases / sizeof bases[0]; k++) {
        struct rkv_index_geom g = rkv_index_flat(bases[k]);
        for (unsigned i = 0; i < KEYS; i++) {
            struct rkv_key_hash h;
            snprintf(key, sizeof key, "key:%u", i);
            rkv_hash_key(key, strlen(key), 99, &g, &h);
            where[i][0] = h.bucket[0];
            where[i][1] = h.bucket[1];
        }
        while (g.level < 3) { /* three doublings, one split at a time */
            uint64_t split = g.split, m = rkv_index_span(&g);
            struct rkv_index_geom next = g;
            if (++next.split == m) {
                next.level++;
                next.split = 0;
            }
            assert_true(rkv_index_geom_valid(&next, rkv_index_count(&next)));
            assert_int_equal(rkv_index_count(&next), rkv_index_count(&g) + 1);
            for (unsigned i = 0; i < KEYS; i++) {
                struct rkv_key_hash h;
                snprintf(key, sizeof key, "key:%u", i);
                rkv_hash_key(key, strlen(key), 99, &next, &h);
                for (unsigned c = 0; c < 2; c++) {
                    assert_true(h.bucket[c] < rkv_index_count(&next));
                    if (where[i][c] != split)
                        assert_int_equal(h.bucket[c], where[i][c]);
                    else
                        assert_true(h.bucket[c] == split || h.bucket[c] == split + m);
                    /* the level its bucket is at: one above the unsplit ones */
                    assert_int_equal(rkv_index_bucket_level(&next, h.bucket[c]),
                                     next.level + (h.bucket[c] < next.split ||
                                                   h.bucket[c] >= rkv_index_span(&next)));
                    where[i][c] = h.bucket[c];
                }
            }
            g = next;
        }
        /* a complete level spreads keys over all of its buckets */
        uint64_t n = rkv_index_count(&g), used = 0;
        static uint8_t seen[800];
        memset(seen, 0, sizeof seen);
        for (unsigned i = 0; i < KEYS; i++)
            seen[where[i][0]] = 1;
        for (uint64_t b = 0; b < n; b++)
            used += seen[b];
        assert_true(used == n || n > KEYS / 4);
    }
}

/* The geometry word round-trips, and a hostile one is refused. */
static void test_geometry_word_checked(void **state)
{
    (void)state;
    struct rkv_index_geom g = { .base = 5, .level = 3, .split = 17 };
    struct rkv_index_geom back = rkv_index_geom_from(5, rkv_index_geom_word(&g));
    assert_int_equal(back.level, 3);
    assert_int_equal(back.split, 17);
    assert_true(rkv_index_geom_valid(&g, 5 * 8 + 17));
    assert_false(rkv_index_geom_valid(&g, 5 * 8 + 16)); /* past the capacity */
    g.split = 40;                                       /* a split past M */
    assert_false(rkv_index_geom_valid(&g, 1000));
    g = (struct rkv_index_geom){ .base = 5, .level = 63, .split = 0 }; /* a shift that overflows */
    assert_false(rkv_index_geom_valid(&g, UINT64_MAX));
    g = (struct rkv_index_geom){ .base = 1, .level = 0, .split = 0 };
    assert_false(rkv_index_geom_valid(&g, 10));
}

/* ---- a table */

struct reader {
    uint8_t *base;
    size_t size;
    unsigned calls;
};

static rkv_status reader_read(void *ctx, const struct rkv_read_op *ops, unsigned n)
{
    struct reader *r = ctx;
    r->calls++;
    for (unsigned i = 0; i < n; i++) {
        assert_true(ops[i].offset + ops[i].len <= r->size);
        memcpy(ops[i].dst, r->base + ops[i].offset, ops[i].len);
    }
    return RKV_OK;
}

struct env {
    struct rkv_region region;
    struct rkv_table *t;
    const struct rkv_region_header *h;
    struct rkv_region_header copy; /* a client's geometry, taken when it connected */
    struct reader rd;
    uint8_t scratch[1 << 21];
    struct rkv_read_op ops[64];
    struct rkv_lookup_ctx ctx;
};

/* A client's view of the table: the header as it is now (its geometry),
 * reads of `base`, a lookup context over them with the given cost model. */
static void connect_reader(struct env *e, uint8_t *base, size_t size, enum rkv_read_cost cost)
{
    e->copy = *e->h;
    e->rd = (struct reader){ .base = base, .size = size };
    e->ctx = (struct rkv_lookup_ctx){ .geom = &e->copy,
                                      .read = reader_read,
                                      .read_ctx = &e->rd,
                                      .scratch = e->scratch,
                                      .scratch_len = sizeof e->scratch,
                                      .ops = e->ops,
                                      .ops_cap = 64,
                                      .max_retries = 8,
                                      .cost = cost };
}

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof *e);
    char err[256];
    /* 4 buckets to start with: the index grows */
    struct rkv_table_config cfg = { .evict = RKV_EVICT_NONE, .index_start = 4 };
    if (e == NULL || rkv_region_create(8ull << 20, &e->region, err, sizeof err) != RKV_OK ||
        rkv_table_create(e->region.base, e->region.size, &cfg, &e->t, err, sizeof err) != RKV_OK)
        return -1;
    e->h = rkv_table_header(e->t);
    connect_reader(e, e->region.base, e->region.size, RKV_COST_PER_READ);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    rkv_table_destroy(e->t);
    rkv_region_destroy(&e->region);
    free(e);
    return 0;
}

static void key_of(unsigned i, char *key, size_t len)
{
    snprintf(key, len, "k%015u", i); /* 16 bytes */
}

static rkv_status put(struct env *e, unsigned i)
{
    char key[32];
    uint64_t value = i * 2654435761u;
    key_of(i, key, sizeof key);
    struct rkv_value_src v = { .data = &value, .len = sizeof value };
    return rkv_table_put(e->t, key, 16, &v, RKV_SET, 0, 0, 0, NULL);
}

static uint64_t buckets_now(const struct env *e)
{
    struct rkv_index_geom g;
    assert_true(rkv_header_geom(e->h, &g));
    return rkv_index_count(&g);
}

/* One-sided GET of key i through the env's reader: its status. */
static rkv_status get(struct env *e, unsigned i)
{
    char key[32];
    uint64_t value = 0;
    key_of(i, key, sizeof key);
    struct rkv_lookup l = { .key = key, .key_len = 16, .buf = &value, .buf_len = sizeof value };
    assert_int_equal(rkv_lookup_batch(&e->ctx, &l, 1), RKV_OK);
    if (l.status == RKV_OK)
        assert_true(value == (uint64_t)(i * 2654435761u));
    return l.status;
}

/* From the smallest start, small items fill the heap: the index grows as
 * they come, and every one is found, by the server and one-sidedly. */
static void test_tiny_index_grows_as_items_fill(void **state)
{
    struct env *e = *state;
    uint64_t start = buckets_now(e);
    assert_true(start < e->h->index_capacity);
    unsigned n = 0;
    while (put(e, n) == RKV_OK)
        n++;
    uint64_t grown = buckets_now(e);
    assert_true(grown > start * 4);
    assert_true(grown <= e->h->index_capacity);
    assert_true(n > start * RKV_SLOTS_PER_BUCKET); /* more items than the start could hold */
    /* past the buckets before the heap: it grew into the heap's lowest pages */
    assert_true(e->h->index_offset + grown * 64 > e->h->heap_offset);
    e->copy = *e->h; /* a client connecting now */
    for (unsigned i = 0; i < n; i++) {
        char key[32];
        key_of(i, key, sizeof key);
        assert_non_null(rkv_table_find(e->t, key, 16));
        assert_int_equal(get(e, i), RKV_OK);
    }
    assert_int_equal(get(e, n + 1), RKV_NOT_FOUND);
    assert_int_equal(e->ctx.geom_reads, 0); /* its geometry was current */
    struct rkv_table_stats s;
    rkv_table_get_stats(e->t, &s);
    assert_int_equal(s.items, n);
    assert_int_equal(s.buckets, grown);
}

/* A full heap (every page a size class's) and an index that must grow:
 * it empties the next page (its items evicted as any eviction), lends it
 * once its grace period is over (a test clock that leaps: no sleeping)
 * and grows into it, page after page. Every key the server still holds is found one-sidedly
 * with its value; every other is a miss. */
static uint64_t test_now_ns = 1;
static uint64_t test_clock(void) /* a second per look: every grace period is over by the next */
{
    return __atomic_add_fetch(&test_now_ns, 1000000000ull, __ATOMIC_RELAXED);
}

/* The region offset where e's index ends now. */
static uint64_t index_end(const struct env *e)
{
    return e->h->index_offset + buckets_now(e) * sizeof(struct rkv_bucket);
}

static void test_index_takes_a_page_of_a_full_heap(void **state)
{
    (void)state;
    struct env *e = calloc(1, sizeof *e);
    char err[256], key[32];
    struct rkv_table_config cfg = { .evict = RKV_EVICT_LRU,
                                    .index_start = 4,
                                    .slab_page_size = 4096,
                                    .grace_ms = 10,
                                    .now_ns = test_clock };
    assert_non_null(e);
    assert_int_equal(rkv_region_create(1ull << 20, &e->region, err, sizeof err), RKV_OK);
    if (rkv_table_create(e->region.base, e->region.size, &cfg, &e->t, err, sizeof err) != RKV_OK)
        fail_msg("%s", err);
    e->h = rkv_table_header(e->t);
    unsigned n = 0;
    struct rkv_table_stats s;
    do { /* until the heap is full: every page a class's */
        assert_int_equal(put(e, n++), RKV_OK);
        rkv_table_get_stats(e->t, &s);
    } while (s.evictions == 0 || s.pages_unassigned != 0);
    uint64_t evicted = s.evictions, end = index_end(e);
    /* 16 more pages of buckets: each growth empties the next page of a
     * class or lends one that drained since (the clock leaps a second a
     * look), and never takes more than it needs */
    for (unsigned tries = 0; tries < 64 && index_end(e) < end + 16 * 4096; tries++)
        rkv_table_grow_index(e->t, (end + 16 * 4096 - index_end(e)) / 64);
    assert_int_equal(index_end(e), end + 16 * 4096);
    rkv_table_get_stats(e->t, &s);
    assert_true(s.evictions > evicted); /* the items of the pages it took */
    connect_reader(e, e->region.base, e->region.size, RKV_COST_ROUND_TRIPS);
    unsigned held = 0;
    for (unsigned i = 0; i < n; i++) {
        key_of(i, key, sizeof key);
        bool there = rkv_table_find(e->t, key, 16) != NULL;
        assert_int_equal(get(e, i), there ? RKV_OK : RKV_NOT_FOUND);
        held += there;
    }
    rkv_table_get_stats(e->t, &s);
    assert_int_equal(held, s.items);
    teardown((void **)&e);
}

/* A restart that keeps a region whose index grew into lent pages: every
 * item comes back, and the lent pages stay the index's: a heap filled
 * after the restart places no item in them. */
static void test_kept_region_with_lent_pages(void **state)
{
    (void)state;
    struct env *e = calloc(1, sizeof *e);
    struct rkv_region b;
    struct rkv_table *kept = NULL;
    struct rkv_table_attach_report rep;
    char err[256];
    struct rkv_table_config cfg = { .evict = RKV_EVICT_NONE, .index_start = 4, .slab_page_size = 4096 };
    assert_non_null(e);
    assert_int_equal(rkv_region_create(1ull << 20, &e->region, err, sizeof err), RKV_OK);
    assert_int_equal(rkv_region_create(1ull << 20, &b, err, sizeof err), RKV_OK);
    if (rkv_table_create(e->region.base, e->region.size, &cfg, &e->t, err, sizeof err) != RKV_OK)
        fail_msg("%s", err);
    e->h = rkv_table_header(e->t);
    unsigned n = 0;
    while (index_end(e) <= e->h->heap_offset + 4 * 4096) /* four pages lent at least */
        assert_int_equal(put(e, n++), RKV_OK);
    /* and as many buckets again: the kept index is half empty, so no load
     * makes it grow (and lend) soon after the restart */
    uint64_t before = buckets_now(e);
    assert_int_equal(rkv_table_grow_index(e->t, before), before);
    struct rkv_table_restore r = { 0 };
    rkv_table_stop_state(e->t, &r.clock, &r.max_version);
    uint64_t grown = buckets_now(e);
    memcpy(b.base, e->region.base, e->region.size);

    if (rkv_table_attach(b.base, b.size, &cfg, &r, &kept, &rep, err, sizeof err) != RKV_OK)
        fail_msg("%s", err);
    assert_int_equal(rep.kept, n);
    for (unsigned k = 0; k < RKV_DROP_COUNT; k++)
        assert_int_equal(rep.dropped[k], 0);
    /* the kept table in the env: its header, its reads */
    rkv_table_destroy(e->t);
    e->t = kept;
    e->h = rkv_table_header(kept);
    connect_reader(e, b.base, b.size, RKV_COST_ROUND_TRIPS);
    assert_int_equal(buckets_now(e), grown);
    for (unsigned i = 0; i < n; i++)
        assert_int_equal(get(e, i), RKV_OK);
    /* large values until the heap is full (few keys: the half-empty index
     * need not grow for them), then small ones: none lands in a lent page
     * (each item the index names lies past the index's end) */
    static uint8_t big[2000];
    char key[32];
    for (unsigned i = 0;; i++) {
        snprintf(key, sizeof key, "big%013u", i);
        struct rkv_value_src v = { .data = big, .len = sizeof big };
        if (rkv_table_put(e->t, key, 16, &v, RKV_SET, 0, 0, 0, NULL) != RKV_OK)
            break;
    }
    unsigned more = n;
    while (put(e, more) == RKV_OK)
        more++;
    assert_true(buckets_now(e) >= grown);
    const struct rkv_bucket *bk = (const struct rkv_bucket *)(const void *)((const uint8_t *)b.base +
                                                                            e->h->index_offset);
    for (uint64_t i = 0; i < buckets_now(e); i++)
        for (unsigned sl = 0; sl < RKV_SLOTS_PER_BUCKET; sl++)
            assert_true(bk[i].slot[sl] == 0 || rkv_slot_offset(bk[i].slot[sl]) >= index_end(e));
    for (unsigned i = 0; i < more; i++)
        assert_int_equal(get(e, i), RKV_OK);
    teardown((void **)&e);
    rkv_region_destroy(&b);
}

/* A reader whose geometry is from before the index grew: every key it asks
 * for is found (it sees split buckets at a level above the one it expects,
 * reads the geometry again, hashes again), and an absent key is a miss. */
static void test_stale_geometry_reader_finds_every_key(void **state)
{
    struct env *e = *state;
    unsigned n = 0;
    while (n < 200 && put(e, n) == RKV_OK)
        n++;
    uint64_t before = buckets_now(e);
    e->copy = *e->h; /* the reader's geometry */
    /* a whole doubling and a half, while the reader holds the old geometry */
    assert_int_equal(rkv_table_grow_index(e->t, before + before / 2), before + before / 2);
    assert_int_equal(buckets_now(e), 2 * before + before / 2);
    for (unsigned i = 0; i < n; i++)
        assert_int_equal(get(e, i), RKV_OK);
    assert_true(e->ctx.geom_reads >= 1);
    assert_true(e->ctx.index_word == e->h->index_geometry); /* learned once, kept */
    uint64_t reads = e->ctx.geom_reads;
    for (unsigned i = n; i < n + 200; i++)
        assert_int_equal(get(e, i), RKV_NOT_FOUND);
    assert_int_equal(e->ctx.geom_reads, reads); /* no more re-reads: it is current */
}

/* The same reader, with a split landing between its first bucket's READ and
 * its second's (the buckets read one at a time): the second bucket is read
 * at its new level and the miss is not trusted. */
struct split_between {
    struct reader rd;
    struct rkv_table *t;
    unsigned split_on_call;
    uint64_t splits;
};

static rkv_status split_between_read(void *ctx, const struct rkv_read_op *ops, unsigned n)
{
    struct split_between *s = ctx;
    rkv_status st = reader_read(&s->rd, ops, n);
    if (s->rd.calls == s->split_on_call)
        s->splits += rkv_table_grow_index(s->t, UINT64_MAX / 2);
    return st;
}

static void test_split_between_bucket_reads_is_not_a_miss(void **state)
{
    struct env *e = *state;
    unsigned n = 0;
    while (n < 300 && put(e, n) == RKV_OK)
        n++;
    e->copy = *e->h;
    struct split_between sb = { .rd = e->rd, .t = e->t, .split_on_call = 1 };
    e->ctx.read_ctx = &sb;
    e->ctx.read = split_between_read;
    /* the first GET's first READ is followed by every split there is room for */
    for (unsigned i = 0; i < n; i++)
        assert_int_equal(get(e, i), RKV_OK);
    assert_true(sb.splits > 0);
    assert_true(e->ctx.geom_reads >= 1);
}

/* ---- writers and readers on threads while the index splits */

#define C_WRITERS     2
#define C_KEYS        4000  /* per writer */
#define C_KEYS_EVICT  20000 /* per writer, into a heap that holds about 18000 */
#define C_READERS     2
#define C_MIN_BATCHES 300 /* per reader, at least, and on until the writers are done */
#define C_BATCH       8

struct conc {
    struct rkv_region region;
    struct rkv_table *t;
    const struct rkv_region_header *h;
    bool evict;                /* the heap fills: keys are evicted, pages lent */
    unsigned keys;             /* per writer */
    unsigned acked[C_WRITERS]; /* keys [0, acked) of each writer were stored (atomic) */
    int writers_done;          /* (atomic) */
};

struct conc_writer {
    struct conc *c;
    unsigned id;
    unsigned errors;  /* PUTs that failed */
    unsigned refused; /* PUTs refused for memory under eviction (allowed) */
};

struct conc_reader {
    struct conc *c;
    unsigned id;
    uint64_t lookups, false_miss, wrong_value, exhausted, geom_reads;
};

static void conc_key(char *key, size_t len, unsigned w, unsigned i)
{
    snprintf(key, len, "w%u.%012u", w, i); /* 16 bytes */
}

static void *conc_writer_main(void *p)
{
    struct conc_writer *w = p;
    char key[32];
    for (unsigned i = 0; i < w->c->keys; i++) {
        uint64_t value = (uint64_t)w->id << 32 | i;
        conc_key(key, sizeof key, w->id, i);
        struct rkv_value_src v = { .data = &value, .len = sizeof value };
        rkv_status st = rkv_table_put(w->c->t, key, 16, &v, RKV_SET, 0, 0, 0, NULL);
        if (st != RKV_OK) {
            /* With eviction a PUT may be refused, as memcached's "out of
             * memory storing object": when the other writer keeps taking
             * what it evicted through all its waits, which a busy machine's
             * scheduling decides. The key then has no item, never a half. */
            if (st == RKV_OUT_OF_MEMORY && w->c->evict)
                w->refused++;
            else
                w->errors++;
            continue;
        }
        __atomic_store_n(&w->c->acked[w->id], i + 1, __ATOMIC_RELEASE);
        if (w->id == 0 && i % 16 == 0) /* more splits than the load alone makes */
            rkv_table_grow_index(w->c->t, 1);
    }
    __atomic_add_fetch(&w->c->writers_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static rkv_status conc_read(void *ctx, const struct rkv_read_op *ops, unsigned n)
{
    const struct conc *c = ctx;
    for (unsigned i = 0; i < n; i++) {
        if (ops[i].offset + ops[i].len > c->region.size)
            return RKV_PROTOCOL;
        memcpy(ops[i].dst, (const uint8_t *)c->region.base + ops[i].offset, ops[i].len);
    }
    return RKV_OK;
}

static void *conc_reader_main(void *p)
{
    struct conc_reader *r = p;
    struct conc *c = r->c;
    struct rkv_region_header copy = *c->h; /* the geometry when it connected: soon stale */
    static __thread uint8_t scratch[1 << 16];
    struct rkv_read_op ops[64];
    struct rkv_lookup_ctx ctx = { .geom = &copy,
                                  .read = conc_read,
                                  .read_ctx = c,
                                  .scratch = scratch,
                                  .scratch_len = sizeof scratch,
                                  .ops = ops,
                                  .ops_cap = 64,
                                  .max_retries = 1000,
                                  .cost = r->id % 2 ? RKV_COST_PER_READ : RKV_COST_ROUND_TRIPS };
    uint64_t x = 0x9e3779b97f4a7c15ull * (r->id + 1);
    for (unsigned batch = 0;
         batch < C_MIN_BATCHES || __atomic_load_n(&c->writers_done, __ATOMIC_ACQUIRE) < C_WRITERS;
         batch++) {
        struct rkv_lookup l[C_BATCH];
        char keys[C_BATCH][32];
        uint64_t values[C_BATCH];
        unsigned n = 0, w[C_BATCH], k[C_BATCH];
        for (unsigned i = 0; i < C_BATCH; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            w[n] = (unsigned)(x % C_WRITERS);
            unsigned acked = __atomic_load_n(&c->acked[w[n]], __ATOMIC_ACQUIRE);
            if (acked == 0)
                continue;
            k[n] = (unsigned)((x >> 8) % acked);
            conc_key(keys[n], sizeof keys[n], w[n], k[n]);
            l[n] = (struct rkv_lookup){
                .key = keys[n], .key_len = 16, .buf = &values[n], .buf_len = sizeof values[n]
            };
            n++;
        }
        if (n == 0 || rkv_lookup_batch(&ctx, l, n) != RKV_OK)
            continue;
        for (unsigned i = 0; i < n; i++) {
            r->lookups++;
            if (l[i].status == RKV_NOT_FOUND)
                r->false_miss += !c->evict; /* with eviction, a miss may be true */
            else if (l[i].status == RKV_RETRY_EXHAUSTED)
                r->exhausted++;
            else if (l[i].status != RKV_OK || values[i] != ((uint64_t)w[i] << 32 | k[i]))
                r->wrong_value++;
        }
    }
    r->geom_reads = ctx.geom_reads;
    return NULL;
}

/* Writers and one-sided readers on threads while the index splits: with
 * evict, in a heap that fills, so that the index grows into pages it lends
 * (first free ones, then ones it empties) under the readers. */
static void writers_and_readers(bool evict)
{
    static struct conc c;
    struct conc_writer w[C_WRITERS];
    struct conc_reader r[C_READERS];
    pthread_t wt[C_WRITERS], rt[C_READERS];
    char err[256];
    /* 4 buckets, growing to thousands as the keys come; with evict a 1 MiB
     * region of 4 KiB pages, whose index lives in lent pages */
    struct rkv_table_config cfg = { .evict = evict ? RKV_EVICT_LRU : RKV_EVICT_NONE,
                                    .index_start = 4,
                                    .slab_page_size = evict ? 4096 : 0,
                                    .grace_ms = evict ? 1 : 0 };
    memset(&c, 0, sizeof c);
    c.evict = evict;
    c.keys = evict ? C_KEYS_EVICT : C_KEYS;
    assert_int_equal(rkv_region_create(evict ? 1ull << 20 : 16ull << 20, &c.region, err, sizeof err),
                     RKV_OK);
    if (rkv_table_create(c.region.base, c.region.size, &cfg, &c.t, err, sizeof err) != RKV_OK)
        fail_msg("%s", err);
    c.h = rkv_table_header(c.t);
    assert_int_equal(c.h->index_base, 4);
    for (unsigned i = 0; i < C_READERS; i++) {
        r[i] = (struct conc_reader){ .c = &c, .id = i };
        assert_int_equal(pthread_create(&rt[i], NULL, conc_reader_main, &r[i]), 0);
    }
    for (unsigned i = 0; i < C_WRITERS; i++) {
        w[i] = (struct conc_writer){ .c = &c, .id = i };
        assert_int_equal(pthread_create(&wt[i], NULL, conc_writer_main, &w[i]), 0);
    }
    for (unsigned i = 0; i < C_WRITERS; i++)
        pthread_join(wt[i], NULL);
    for (unsigned i = 0; i < C_READERS; i++)
        pthread_join(rt[i], NULL);

    uint64_t lookups = 0, exhausted = 0;
    for (unsigned i = 0; i < C_WRITERS; i++) {
        assert_int_equal(w[i].errors, 0);
        assert_true(w[i].refused < c.keys); /* the table took this writer's keys */
    }
    for (unsigned i = 0; i < C_READERS; i++) {
        assert_int_equal(r[i].false_miss, 0);
        assert_int_equal(r[i].wrong_value, 0);
        lookups += r[i].lookups;
        exhausted += r[i].exhausted;
    }
    print_message("%llu lookups, %llu exhausted, geometry re-reads %llu and %llu\n",
                  (unsigned long long)lookups, (unsigned long long)exhausted,
                  (unsigned long long)r[0].geom_reads, (unsigned long long)r[1].geom_reads);
    assert_true(exhausted * 100 <= lookups);
    struct rkv_index_geom g;
    assert_true(rkv_header_geom(c.h, &g));
    struct rkv_table_stats s;
    rkv_table_get_stats(c.t, &s);
    if (evict) /* past the buckets before the heap: into lent pages */
        assert_true(c.h->index_offset + rkv_index_count(&g) * 64 > c.h->heap_offset + 16 * 4096);
    else
        assert_true(rkv_index_count(&g) >= C_WRITERS * C_KEYS / RKV_SLOTS_PER_BUCKET);
    /* every key is there with its value (with evict: or gone) */
    uint64_t held = 0;
    for (unsigned i = 0; i < C_WRITERS; i++)
        for (unsigned k = 0; k < c.keys; k++) {
            char key[32];
            conc_key(key, sizeof key, i, k);
            const struct rkv_item *it = rkv_table_find(c.t, key, 16);
            if (evict && it == NULL)
                continue;
            assert_non_null(it);
            uint64_t v;
            memcpy(&v, rkv_item_value(it), sizeof v);
            assert_true(v == ((uint64_t)i << 32 | k));
            held++;
        }
    assert_int_equal(held, s.items);
    if (evict)
        assert_true(s.evictions > 0);
    rkv_table_destroy(c.t);
    rkv_region_destroy(&c.region);
}

static void test_writers_and_readers_while_splitting(void **state)
{
    (void)state;
    writers_and_readers(false);
}

static void test_writers_and_readers_while_lending_pages(void **state)
{
    (void)state;
    writers_and_readers(true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addressing_splits_move_only_the_split_bucket),
        cmocka_unit_test(test_geometry_word_checked),
        cmocka_unit_test_setup_teardown(test_tiny_index_grows_as_items_fill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_geometry_reader_finds_every_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_between_bucket_reads_is_not_a_miss, setup,
                                        teardown),
        cmocka_unit_test(test_writers_and_readers_while_splitting),
        cmocka_unit_test(test_writers_and_readers_while_lending_pages),
        cmocka_unit_test(test_kept_region_with_lent_pages),
        cmocka_unit_test(test_index_takes_a_page_of_a_full_heap),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
