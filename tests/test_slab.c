/* test_slab.c — the slab allocator (server/slab.c): class table, alloc/free,
 * the grace period that keeps freed items away from reuse, page exhaustion,
 * hint validation of untrusted offsets, the stats identity, threads, moving
 * pages between classes (refused while an item is in use, not handed out
 * before grace_ms, reserved for the class that asked, per-item words that
 * outlive the move, and moves racing allocating threads), and the per-thread
 * magazines of small classes (refill in batches, drain, the grace period
 * kept for items freed by this thread or another, pages that move while
 * magazines hold their items, lock timing).
 *
 * The heap here is plain malloc'd memory standing in for a region: the
 * allocator only hands out offsets and never touches item bytes, which the
 * tests check by filling items with patterns. Grace periods run on a clock
 * the tests advance (rkv_slab_config.clock_ns), so "not yet" and "now" are
 * exact whatever the scheduler does; one test checks the default clock.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "slab.h"
#include "util.h"

#define HEAP_OFFSET 4096u
#define PAGE        4096u

/* The clock every fixture's grace periods are timed on: it moves only when a
 * test advances it. Starts well away from 0, like a real monotonic clock. */
static uint64_t test_clock_now = 1000000000ull;

static uint64_t test_clock(void)
{
    return __atomic_load_n(&test_clock_now, __ATOMIC_ACQUIRE);
}

static void advance_ms(unsigned ms)
{
    __atomic_add_fetch(&test_clock_now, (uint64_t)ms * 1000000u, __ATOMIC_RELEASE);
}

/* A fake region: one header page, then `pages` slab pages. */
struct fixture {
    uint8_t *region;
    struct rkv_slab *slab;
    uint32_t pages;
};

/* Pages in the newest fixture: page n lies at heap_offset + (pages - 1 -
 * n) * PAGE (slab.h: top down). */
static uint32_t fixture_pages;

/* Where page n of the newest fixture starts. */
static uint64_t page_base(uint64_t n)
{
    return HEAP_OFFSET + (fixture_pages - 1 - n) * (uint64_t)PAGE;
}

/* The page of the newest fixture that holds offset off. */
static uint64_t page_of(uint64_t off)
{
    return fixture_pages - 1 - (off - HEAP_OFFSET) / PAGE;
}

static void fixture_make(struct fixture *f, uint32_t pages, double factor, uint32_t grace_ms,
                         bool meta)
{
    char err[256] = "";
    f->pages = pages;
    fixture_pages = pages;
    f->region = aligned_alloc(4096, HEAP_OFFSET + (size_t)pages * PAGE);
    assert_non_null(f->region);
    memset(f->region, 0, HEAP_OFFSET + (size_t)pages * PAGE);
    struct rkv_slab_config c = {
        .region = f->region,
        .heap_offset = HEAP_OFFSET,
        .heap_size = (uint64_t)pages * PAGE,
        .page_size = PAGE,
        .growth_factor = factor,
        .grace_ms = grace_ms,
        .item_meta = meta,
        .clock_ns = test_clock,
    };
    assert_int_equal(rkv_slab_create(&c, &f->slab, err, sizeof err), RKV_OK);
}

static void fixture_free(struct fixture *f)
{
    rkv_slab_destroy(f->slab);
    free(f->region);
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------ class table */

static void test_class_table(void **state)
{
    (void)state;
    uint32_t sz[RKV_MAX_CLASSES], n;
    char err[256];

    assert_int_equal(rkv_slab_classes(1u << 20, 1.25, 0, sz, &n, err, sizeof err), RKV_OK);
    assert_true(n > 10 && n <= RKV_MAX_CLASSES);
    assert_int_equal(sz[0], 64);
    assert_int_equal(sz[n - 1], 1u << 20);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(sz[i] % RKV_ITEM_ALIGN, 0);
        if (i > 0) {
            assert_true(sz[i] > sz[i - 1]);
            /* grows by the factor: never more than factor*prev rounded up to 64 */
            uint64_t bound = RKV_ALIGN_UP((uint64_t)(sz[i - 1] * 1.25), 64);
            assert_true(sz[i] <= RKV_MAX(bound, sz[i - 1] + 64u));
        }
    }
    /* a larger factor gives fewer classes */
    uint32_t n2;
    assert_int_equal(rkv_slab_classes(1u << 20, 2.0, 0, sz, &n2, err, sizeof err), RKV_OK);
    assert_true(n2 < n);
    assert_int_equal(sz[1], 128);

    /* refused: too many classes, factor <= 1, bad page size */
    assert_int_equal(rkv_slab_classes(1u << 20, 1.01, 0, sz, &n, err, sizeof err), RKV_INVALID);
    assert_non_null(strstr(err, "growth factor"));
    assert_int_equal(rkv_slab_classes(1u << 20, 1.0, 0, sz, &n, err, sizeof err), RKV_INVALID);
    assert_int_equal(rkv_slab_classes(1000, 1.25, 0, sz, &n, err, sizeof err), RKV_INVALID);
}

/* The table's classes: 4-byte steps from the smallest item below
 * RKV_SLAB_FINE4_BELOW, 8-byte ones below the fine limit, then every coarse
 * class with one class between each two and memcached's twins
 * (test_memcached_twin_classes); strictly
 * increasing, aligned, ending at the page size, within RKV_MAX_CLASSES even
 * at the largest pages and the smallest factor the coarse table allows. */
static void test_fine_class_table(void **state)
{
    (void)state;
    static const struct {
        uint32_t page;
        double factor;
    } cases[] = {
        { 1u << 20, 1.25 }, { 64u << 10, 1.25 }, { 16u << 20, 1.25 }, { 1u << 30, 1.5 },
        { 1u << 20, 2.0 },  { 4096, 1.25 },      { 1u << 20, 1.18 },
    };
    const uint32_t fine = 256;
    char err[256];

    for (unsigned c = 0; c < RKV_ARRAY_SIZE(cases); c++) {
        uint32_t sz[RKV_MAX_CLASSES], n, coarse[RKV_MAX_CLASSES], nc;
        assert_int_equal(rkv_slab_classes(cases[c].page, cases[c].factor, fine, sz, &n, err,
                                          sizeof err),
                         RKV_OK);
        assert_int_equal(rkv_slab_classes(cases[c].page, cases[c].factor, 0, coarse, &nc, err,
                                          sizeof err),
                         RKV_OK);
        assert_true(n > nc && n <= RKV_MAX_CLASSES);
        assert_int_equal(sz[0], RKV_MIN_ITEM_SIZE);
        assert_int_equal(sz[n - 1], cases[c].page);
        for (unsigned i = 0; i < n; i++) {
            assert_int_equal(sz[i] % RKV_ITEM_ALIGN, 0);
            if (i > 0)
                assert_true(sz[i] > sz[i - 1]);
            if (sz[i] <= RKV_SLAB_FINE4_BELOW) /* fine-grained: every 4 bytes, */
                assert_int_equal(sz[i], RKV_MIN_ITEM_SIZE + i * RKV_ITEM_ALIGN);
            else if (sz[i] < fine) /* then every 8 */
                assert_int_equal(sz[i], sz[i - 1] + 2 * RKV_ITEM_ALIGN);
            /* above, to the divisors: steps of about sqrt(factor) */
            else if (i > 0 && sz[i] < cases[c].page / RKV_SLAB_DIVISORS)
                assert_true(sz[i] <=
                            RKV_MAX((uint32_t)(sz[i - 1] * cases[c].factor) + 64, sz[i - 1] + 64));
        }
        /* every coarse class below the divisors is a class, and above, an
         * item of a coarse class's size gets at least as many per page: no
         * item takes more than it would with the coarse classes alone */
        uint32_t divisors_from = cases[c].page / RKV_SLAB_DIVISORS;
        for (unsigned j = 0, i = 0; j < nc; j++) {
            while (i < n && sz[i] < coarse[j])
                i++;
            assert_true(i < n);
            if (coarse[j] < divisors_from)
                assert_int_equal(sz[i], coarse[j]);
            else
                assert_true(cases[c].page / sz[i] >= cases[c].page / coarse[j]);
        }
        /* between two coarse classes above the fine limit and below the
         * divisors, at most three: their mean and memcached's twins
         * (test_memcached_twin_classes) */
        for (unsigned j = 1; j < nc && coarse[j] < divisors_from; j++) {
            unsigned between = 0;
            for (unsigned i = 0; i < n; i++)
                between += sz[i] > coarse[j - 1] && sz[i] < coarse[j];
            if (coarse[j - 1] >= fine)
                assert_true(between <= 3);
        }
        /* the divisors: page / k for every k up to RKV_SLAB_DIVISORS whose
         * class is above the fine and coarse ones, tails under 4 bytes an item */
        for (unsigned i = 0; i < n; i++)
            if (sz[i] >= divisors_from && sz[i] >= fine)
                assert_true(cases[c].page % sz[i] < RKV_ITEM_ALIGN * (cases[c].page / sz[i]));
    }
    /* the largest table the limits allow still fits */
    uint32_t sz[RKV_MAX_CLASSES], n;
    assert_int_equal(rkv_slab_classes(1u << 20, 1.01, fine, sz, &n, err, sizeof err), RKV_INVALID);
    assert_int_equal(rkv_slab_classes(1u << 20, 1.25, 4096, sz, &n, err, sizeof err), RKV_INVALID);
}

/* The smallest of the n classes in sz that holds `bytes`; 0 if none. */
static uint32_t class_holding(const uint32_t *sz, uint32_t n, uint64_t bytes)
{
    for (uint32_t i = 0; i < n; i++)
        if (sz[i] >= bytes)
            return sz[i];
    return 0;
}

/* The chunk memcached 1.6.18 puts an item of `bytes` in with its defaults
 * (slabs_init: from 96 bytes by the factor, each rounded up to 8, up to
 * 512 KiB; ITEM_ntotal: 48-byte header, 8-byte CAS, key NUL, value CRLF). */
static uint64_t memcached_chunk(double factor, uint64_t key, uint64_t value, bool flags)
{
    uint64_t item = 48 + 8 + key + 1 + value + 2 + (flags ? 4 : 0);
    for (uint64_t size = 96; size < (512u << 10) / factor; size = (uint64_t)((double)size * factor)) {
        size = RKV_ALIGN_UP(size, 8u);
        if (size >= item)
            return size;
    }
    return 512u << 10;
}

/* Above the fine limit and below the divisors, no rkv item takes a larger
 * slot than memcached's item for the same key and value takes a chunk, with
 * or without a TTL or flags: rkv's classes hold a twin of each of
 * memcached's chunks. With the coarse classes and their means alone a
 * 16-byte key and a 3,549-byte value took 3,840 bytes where memcached's
 * chunk is 3,632 (0.94x its items at equal RSS). */
static void test_memcached_twin_classes(void **state)
{
    (void)state;
    static const double factors[] = { 1.25, 1.18, 1.5, 2.0 };
    const uint32_t fine = 256, page = (1u << 20) + 640;
    char err[256];

    for (unsigned c = 0; c < RKV_ARRAY_SIZE(factors); c++) {
        uint32_t sz[RKV_MAX_CLASSES], n;
        assert_int_equal(rkv_slab_classes(page, factors[c], fine, sz, &n, err, sizeof err), RKV_OK);
        for (uint64_t value = 1; value < page / RKV_SLAB_DIVISORS; value++) {
            for (unsigned shape = 0; shape < 4; shape++) {
                bool ttl = shape & 1, flags = shape & 2;
                const uint64_t key = 16;
                uint64_t item = RKV_ITEM_PREFIX_SIZE + 4u * ttl + 4u * flags + key + value;
                if (item < fine || item >= page / RKV_SLAB_DIVISORS)
                    continue;
                uint32_t slot = class_holding(sz, n, item);
                assert_true(slot != 0);
                if (slot > memcached_chunk(factors[c], key, value, flags))
                    fail_msg("factor %g, %llu-byte value: slot %u, memcached's chunk %llu",
                             factors[c], (unsigned long long)value, slot,
                             (unsigned long long)memcached_chunk(factors[c], key, value, flags));
            }
        }
    }
    /* the sweep's sizes memcached fits best: 3,549, 5,589 and 8,801 bytes */
    uint32_t sz[RKV_MAX_CLASSES], n;
    assert_int_equal(rkv_slab_classes(page, 1.25, fine, sz, &n, err, sizeof err), RKV_OK);
    assert_true(class_holding(sz, n, RKV_ITEM_PREFIX_SIZE + 16 + 3549) <= 3632);
    assert_true(class_holding(sz, n, RKV_ITEM_PREFIX_SIZE + 16 + 5589) <= 5680);
    assert_true(class_holding(sz, n, RKV_ITEM_PREFIX_SIZE + 16 + 8801) <= 8880);
}

static void test_class_for(void **state)
{
    (void)state;
    struct fixture f;
    fixture_make(&f, 4, 2.0, 10, false);
    /* page 4096, factor 2: 64 128 256 512 1024 2048 4096 */
    assert_int_equal(rkv_slab_class_count(f.slab), 7);
    assert_int_equal(rkv_slab_class_for(f.slab, 1), 0);
    assert_int_equal(rkv_slab_class_for(f.slab, 64), 0);
    assert_int_equal(rkv_slab_class_for(f.slab, 65), 1);
    assert_int_equal(rkv_slab_class_for(f.slab, 4096), 6);
    assert_int_equal(rkv_slab_class_for(f.slab, 4097), -1);
    assert_int_equal(rkv_slab_class_size(f.slab, 3), 512);
    assert_int_equal(rkv_slab_class_size(f.slab, 7), 0);
    fixture_free(&f);
}

static void test_create_refuses_bad_geometry(void **state)
{
    (void)state;
    struct rkv_slab *s;
    char err[256];
    uint8_t region[64];
    struct rkv_slab_config c = { .region = region,
                                 .heap_offset = 4096,
                                 .heap_size = 3 * PAGE + 1,
                                 .page_size = PAGE,
                                 .growth_factor = 1.25,
                                 .grace_ms = 10 };
    assert_int_equal(rkv_slab_create(&c, &s, err, sizeof err), RKV_INVALID);
    c.heap_size = 3 * PAGE;
    c.heap_offset = 0;
    assert_int_equal(rkv_slab_create(&c, &s, err, sizeof err), RKV_INVALID);
    c.heap_offset = 4096;
    c.grace_ms = RKV_SLAB_MAX_GRACE_MS + 1;
    assert_int_equal(rkv_slab_create(&c, &s, err, sizeof err), RKV_INVALID);
    assert_non_null(strstr(err, "grace"));
}

/* ------------------------------------------------------------ alloc / free */

static void test_alloc_distinct_aligned(void **state)
{
    (void)state;
    struct fixture f;
    fixture_make(&f, 8, 2.0, 10, false);
    const unsigned cls = 1; /* 128 bytes, 32 per page */
    uint64_t offs[64];

    for (unsigned i = 0; i < 64; i++) {
        offs[i] = rkv_slab_alloc(f.slab, cls);
        assert_true(offs[i] >= HEAP_OFFSET);
        assert_true(offs[i] + 128 <= HEAP_OFFSET + 8u * PAGE);
        assert_int_equal((offs[i] - HEAP_OFFSET) % PAGE % 128, 0);
        assert_true(rkv_slab_valid(f.slab, offs[i], cls));
        memset(f.region + offs[i], (int)i + 1, 128);
    }
    /* no two items overlap: every item still holds its own pattern */
    for (unsigned i = 0; i < 64; i++)
        for (unsigned b = 0; b < 128; b++)
            assert_int_equal(f.region[offs[i] + b], i + 1);

    struct rkv_slab_class_stats cs;
    rkv_slab_class_stats(f.slab, cls, &cs);
    assert_int_equal(cs.pages, 2);
    assert_int_equal(cs.used, 64);
    assert_int_equal(cs.per_page, 32);

    /* a freed item keeps its bytes: the allocator writes nothing */
    rkv_slab_free(f.slab, cls, offs[5]);
    for (unsigned b = 0; b < 128; b++)
        assert_int_equal(f.region[offs[5] + b], 6);
    rkv_slab_class_stats(f.slab, cls, &cs);
    assert_int_equal(cs.used, 63);
    assert_int_equal(cs.limbo, 1);

    /* out-of-range class */
    assert_int_equal(rkv_slab_alloc(f.slab, 99), 0);
    fixture_free(&f);
}

static void test_valid_rejects_garbage(void **state)
{
    (void)state;
    struct fixture f;
    fixture_make(&f, 4, 2.0, 10, true);
    uint64_t a = rkv_slab_alloc(f.slab, 1); /* 128-byte class */
    uint64_t b = rkv_slab_alloc(f.slab, 1);
    assert_int_equal(b, a + 128);

    assert_true(rkv_slab_valid(f.slab, a, 1));
    assert_non_null(rkv_slab_meta(f.slab, a, 1));
    assert_ptr_not_equal(rkv_slab_meta(f.slab, a, 1), rkv_slab_meta(f.slab, b, 1));
    assert_false(rkv_slab_valid(f.slab, a, 0));       /* wrong class */
    assert_false(rkv_slab_valid(f.slab, a + 64, 1));  /* inside an item */
    assert_false(rkv_slab_valid(f.slab, a + 1, 1));   /* misaligned */
    assert_false(rkv_slab_valid(f.slab, a + 256, 1)); /* never handed out */
    assert_false(rkv_slab_valid(f.slab, 0, 1));       /* header */
    assert_false(rkv_slab_valid(f.slab, HEAP_OFFSET - 64, 1));
    assert_false(rkv_slab_valid(f.slab, HEAP_OFFSET + 4u * PAGE, 1)); /* past the heap */
    assert_false(rkv_slab_valid(f.slab, UINT64_MAX - 63, 1));
    assert_false(rkv_slab_valid(f.slab, page_base(1), 1)); /* unassigned page */
    assert_false(rkv_slab_valid(f.slab, a, RKV_MAX_CLASSES + 10));
    assert_null(rkv_slab_meta(f.slab, a + 64, 1));
    /* freeing garbage is ignored, not a crash or a corruption */
    rkv_slab_free(f.slab, 1, a + 64);
    rkv_slab_free(f.slab, 3, a);
    struct rkv_slab_class_stats cs;
    rkv_slab_class_stats(f.slab, 1, &cs);
    assert_int_equal(cs.used, 2);
    assert_int_equal(cs.limbo, 0);
    fixture_free(&f);
}

/* ------------------------------------------------------------ grace period */

static void test_grace_period(void **state)
{
    (void)state;
    const uint32_t grace = 150;
    struct fixture f;
    fixture_make(&f, 1, 2.0, grace, false);
    const unsigned cls = 6; /* 4096 bytes: one item per page, one page */

    uint64_t x = rkv_slab_alloc(f.slab, cls);
    assert_int_not_equal(x, 0);
    assert_int_equal(rkv_slab_alloc(f.slab, cls), 0); /* heap full */
    assert_int_equal(rkv_slab_limbo_wait_ms(f.slab, cls), -1);

    rkv_slab_free(f.slab, cls, x);
    /* the limbo clock counts whole milliseconds: an age of grace_ms may be
     * up to 1 ms short of it, so the item waits grace_ms + 1 */
    assert_int_equal(rkv_slab_limbo_wait_ms(f.slab, cls), grace + 1);
    assert_int_equal(rkv_slab_alloc(f.slab, cls), 0);
    advance_ms(grace);
    assert_int_equal(rkv_slab_limbo_wait_ms(f.slab, cls), 1);
    assert_int_equal(rkv_slab_alloc(f.slab, cls), 0); /* not handed out before grace_ms */
    advance_ms(1);
    assert_int_equal(rkv_slab_limbo_wait_ms(f.slab, cls), 0);
    assert_int_equal(rkv_slab_alloc(f.slab, cls), x); /* ... but it does come back */
    fixture_free(&f);
}

/* With no clock configured, grace periods run on rkv_now_ns(): an item
 * comes back, and never before grace_ms (a lower bound: no sleep-and-hope). */
static void test_grace_period_default_clock(void **state)
{
    (void)state;
    const uint32_t grace = 20;
    char err[256] = "";
    uint8_t *region = aligned_alloc(4096, HEAP_OFFSET + PAGE);
    assert_non_null(region);
    struct rkv_slab *s;
    struct rkv_slab_config c = { .region = region,
                                 .heap_offset = HEAP_OFFSET,
                                 .heap_size = PAGE,
                                 .page_size = PAGE,
                                 .growth_factor = 2.0,
                                 .grace_ms = grace };
    assert_int_equal(rkv_slab_create(&c, &s, err, sizeof err), RKV_OK);
    uint64_t x = rkv_slab_alloc(s, 6);
    assert_int_not_equal(x, 0);
    uint64_t freed_at = rkv_now_ns();
    rkv_slab_free(s, 6, x);
    uint64_t got;
    while ((got = rkv_slab_alloc(s, 6)) == 0) {
        assert_true(rkv_now_ns() - freed_at < 10000000000ull); /* safety net: 10 s */
        sleep_ms(1);
    }
    assert_int_equal(got, x);
    assert_true((rkv_now_ns() - freed_at) / 1000000 >= grace);
    rkv_slab_destroy(s);
    free(region);
}

static void test_limbo_fifo_and_fresh_first(void **state)
{
    (void)state;
    const uint32_t grace = 60;
    struct fixture f;
    fixture_make(&f, 2, 2.0, grace, false);
    const unsigned cls = 4; /* 1024 bytes, 4 per page */
    uint64_t it[4];
    for (unsigned i = 0; i < 4; i++)
        it[i] = rkv_slab_alloc(f.slab, cls);
    rkv_slab_free(f.slab, cls, it[2]);
    rkv_slab_free(f.slab, cls, it[0]);
    /* inside the grace period a fresh item comes from a new page instead */
    uint64_t fresh = rkv_slab_alloc(f.slab, cls);
    assert_true(fresh != it[0] && fresh != it[2]);
    assert_int_equal(page_of(fresh), 1);
    advance_ms(grace + 1);
    /* after it, reuse goes oldest-freed first */
    assert_int_equal(rkv_slab_alloc(f.slab, cls), it[2]);
    assert_int_equal(rkv_slab_alloc(f.slab, cls), it[0]);
    fixture_free(&f);
}

/* A class's free queue uses a ring of 64 entries at first and widens it
 * when full; widened while its entries wrap around the ring's end, it
 * loses and reorders nothing: reuse stays oldest-freed first. */
static void test_queue_widens_wrapped(void **state)
{
    (void)state;
    const uint32_t grace = 10;
    struct fixture f;
    fixture_make(&f, 4, 2.0, grace, false);
    const unsigned cls = 1; /* 128 bytes, 32 a page: no magazines */
    enum { N = 128 };
    uint64_t it[N];
    for (unsigned i = 0; i < N; i++)
        assert_int_not_equal(it[i] = rkv_slab_alloc(f.slab, cls), 0);
    assert_int_equal(rkv_slab_alloc(f.slab, cls), 0); /* heap full */
    for (unsigned i = 0; i < 40; i++)
        rkv_slab_free(f.slab, cls, it[i]);
    advance_ms(grace + 1);
    for (unsigned i = 0; i < 30; i++) /* the ring's head moves to 30 */
        assert_int_equal(rkv_slab_alloc(f.slab, cls), it[i]);
    for (unsigned i = 40; i < 100; i++) /* wraps at 64, fills at 54 more, widens */
        rkv_slab_free(f.slab, cls, it[i]);
    advance_ms(grace + 1);
    for (unsigned i = 30; i < 100; i++)
        assert_int_equal(rkv_slab_alloc(f.slab, cls), it[i]);
    assert_int_equal(rkv_slab_alloc(f.slab, cls), 0);
    fixture_free(&f);
}

/* ------------------------------------------------------------ exhaustion */

static void test_page_exhaustion(void **state)
{
    (void)state;
    struct fixture f;
    fixture_make(&f, 2, 2.0, 10, false);
    /* class 5 (2048 B, 2 per page) fills page 0, class 0 takes page 1 */
    uint64_t a = rkv_slab_alloc(f.slab, 5), b = rkv_slab_alloc(f.slab, 5);
    assert_true(a && b);
    assert_int_equal(rkv_slab_pages_unassigned(f.slab), 1);
    for (unsigned i = 0; i < 64; i++)
        assert_int_not_equal(rkv_slab_alloc(f.slab, 0), 0);
    assert_int_equal(rkv_slab_pages_unassigned(f.slab), 0);
    assert_int_equal(rkv_slab_alloc(f.slab, 0), 0); /* its page is full */
    assert_int_equal(rkv_slab_alloc(f.slab, 3), 0); /* no page left for a new class */
    assert_int_equal(rkv_slab_alloc(f.slab, 5), 0);

    struct rkv_slab_stats ss;
    rkv_slab_stats(f.slab, &ss);
    assert_int_equal(ss.used, 2u * PAGE);
    assert_int_equal(ss.unassigned, 0);
    fixture_free(&f);
}

static void test_stats_account_every_byte(void **state)
{
    (void)state;
    struct fixture f;
    fixture_make(&f, 16, 1.25, 30, false);
    unsigned ncls = rkv_slab_class_count(f.slab);
    uint64_t offs[200];
    unsigned cls_of[200];
    for (unsigned i = 0; i < 200; i++) {
        cls_of[i] = (i * 7) % ncls;
        offs[i] = rkv_slab_alloc(f.slab, cls_of[i]);
    }
    for (unsigned i = 0; i < 200; i += 3)
        if (offs[i])
            rkv_slab_free(f.slab, cls_of[i], offs[i]);
    struct rkv_slab_stats ss;
    rkv_slab_stats(f.slab, &ss);
    assert_int_equal(ss.used + ss.limbo + ss.ready + ss.fresh + ss.unassigned + ss.tail, ss.heap);
    assert_true(ss.limbo > 0);
    assert_true(ss.tail > 0); /* 1.25 classes do not divide 4096 evenly */
    advance_ms(31);
    rkv_slab_stats(f.slab, &ss);
    assert_int_equal(ss.limbo, 0);
    assert_true(ss.ready > 0);
    fixture_free(&f);
}

/* ------------------------------------------------------------ page moves */

/* Two pages of class 1 (128 bytes, 32 per page), every item handed out. */
static void fill_two_pages(struct fixture *f, uint64_t offs[64])
{
    for (unsigned i = 0; i < 64; i++) {
        offs[i] = rkv_slab_alloc(f->slab, 1);
        assert_int_not_equal(offs[i], 0);
        memset(f->region + offs[i], 0xA0 + (int)(i % 16), 128);
    }
    assert_int_equal(rkv_slab_pages_unassigned(f->slab), 0);
    assert_int_equal(rkv_slab_alloc(f->slab, 3), 0); /* no page for another class */
}

/* The heap's stats, checked to account for every byte. */
static struct rkv_slab_stats heap_accounted(struct fixture *f)
{
    struct rkv_slab_stats ss;
    rkv_slab_stats(f->slab, &ss);
    assert_int_equal(ss.used + ss.limbo + ss.ready + ss.fresh + ss.unassigned + ss.draining + ss.tail,
                     ss.heap);
    return ss;
}

static void test_page_move_waits_for_grace(void **state)
{
    (void)state;
    const uint32_t grace = 120;
    struct fixture f;
    fixture_make(&f, 2, 2.0, grace, false);
    uint64_t offs[64];
    fill_two_pages(&f, offs);

    /* page info: what the table looks at before it evicts */
    uint64_t victim = page_of(offs[0]);
    struct rkv_slab_page_info pi;
    assert_int_equal(rkv_slab_page_count(f.slab), 2);
    assert_int_equal(rkv_slab_page_class(f.slab, victim), 1);
    assert_int_equal(rkv_slab_page_class(f.slab, 2), -1);
    assert_true(rkv_slab_page_info(f.slab, victim, &pi));
    assert_int_equal(pi.start, page_base(victim));
    assert_int_equal(pi.size, 128);
    assert_int_equal(pi.handed, 32);
    assert_int_equal(pi.used, 32);
    assert_false(rkv_slab_page_info(f.slab, 7, &pi));

    /* free all but one item of the page: still in use, so it stays */
    unsigned on_victim[32], n = 0;
    for (unsigned i = 0; i < 64; i++)
        if (page_of(offs[i]) == victim)
            on_victim[n++] = i;
    assert_int_equal(n, 32);
    for (unsigned i = 1; i < 32; i++)
        rkv_slab_free(f.slab, 1, offs[on_victim[i]]);
    assert_false(rkv_slab_page_take(f.slab, victim, 1, 3));
    assert_false(rkv_slab_page_take(f.slab, victim, 2, 3));  /* not its class */
    assert_false(rkv_slab_page_take(f.slab, victim, 1, 99)); /* no such class */
    struct rkv_slab_class_stats cs;
    rkv_slab_class_stats(f.slab, 1, &cs);
    assert_int_equal(cs.pages, 2);
    assert_int_equal(cs.limbo, 31);

    /* the last one freed: the page leaves class 1, its limbo goes with it */
    rkv_slab_free(f.slab, 1, offs[on_victim[0]]);
    assert_true(rkv_slab_page_take(f.slab, victim, 1, 3));
    assert_false(rkv_slab_page_take(f.slab, victim, 1, 3)); /* gone already */
    rkv_slab_class_stats(f.slab, 1, &cs);
    assert_int_equal(cs.pages, 1);
    assert_int_equal(cs.used, 32);
    assert_int_equal(cs.limbo + cs.ready, 0);
    assert_int_equal(rkv_slab_page_class(f.slab, victim), -1);
    assert_false(rkv_slab_valid(f.slab, offs[on_victim[5]], 1)); /* hints to old items refused */
    struct rkv_slab_stats ss = heap_accounted(&f);
    assert_int_equal(ss.reassigns, 1);
    assert_int_equal(ss.pages_draining, 1);
    assert_int_equal(ss.draining, PAGE);
    assert_int_equal(ss.pages_unassigned, 0);
    /* freeing an old item again is ignored: the page is no longer class 1's */
    rkv_slab_free(f.slab, 1, offs[on_victim[3]]);
    rkv_slab_class_stats(f.slab, 1, &cs);
    assert_int_equal(cs.used, 32);
    assert_int_equal(cs.limbo, 0);

    assert_int_equal(rkv_slab_page_wait_ms(f.slab, 3), grace);
    assert_int_equal(rkv_slab_page_wait_ms(f.slab, 2), -1); /* reserved for class 3 */

    /* Not handed out before grace_ms after the last free; then class 3 gets
     * it, and class 1, which gave it up, never gets its memory back. */
    assert_int_equal(rkv_slab_alloc(f.slab, 3), 0);
    advance_ms(grace - 1);
    assert_int_equal(rkv_slab_page_wait_ms(f.slab, 3), 1);
    assert_int_equal(rkv_slab_alloc(f.slab, 3), 0);
    assert_int_equal(rkv_slab_alloc(f.slab, 1), 0);
    advance_ms(1);
    assert_int_equal(rkv_slab_page_wait_ms(f.slab, 3), 0);
    assert_int_equal(rkv_slab_alloc(f.slab, 1), 0);
    uint64_t got = rkv_slab_alloc(f.slab, 3);
    assert_int_equal(page_of(got), victim);
    assert_true(rkv_slab_valid(f.slab, got, 3));
    assert_int_equal(rkv_slab_page_class(f.slab, victim), 3);
    assert_int_equal(rkv_slab_alloc(f.slab, 1), 0);
    /* the rest of the page serves class 3: 8 items of 512 bytes, then none */
    for (unsigned i = 1; i < 8; i++)
        assert_int_equal(page_of(rkv_slab_alloc(f.slab, 3)), victim);
    assert_int_equal(rkv_slab_alloc(f.slab, 3), 0);
    ss = heap_accounted(&f);
    assert_int_equal(ss.pages_draining, 0);
    assert_int_equal(ss.used, 2u * PAGE);
    fixture_free(&f);
}

static void test_page_move_reserved_and_idle(void **state)
{
    (void)state;
    const uint32_t grace = 80;
    struct fixture f;
    fixture_make(&f, 2, 2.0, grace, false);
    uint64_t offs[64];
    fill_two_pages(&f, offs);

    /* taken for class 3: another class waits one grace period longer */
    for (unsigned i = 0; i < 64; i++)
        if (page_of(offs[i]) == 0)
            rkv_slab_free(f.slab, 1, offs[i]);
    assert_true(rkv_slab_page_take(f.slab, 0, 1, 3));
    assert_int_equal(rkv_slab_page_wait_ms(f.slab, 3), grace);
    assert_int_equal(rkv_slab_page_wait_ms(f.slab, 2), -1); /* not offered to class 2 yet */
    advance_ms(2 * grace - 1);
    assert_int_equal(rkv_slab_alloc(f.slab, 2), 0);
    advance_ms(1);
    uint64_t got = rkv_slab_alloc(f.slab, 2);
    assert_int_equal(page_of(got), 0);

    /* a page whose items were all freed more than grace_ms ago needs no
     * drain: open to any class at once */
    for (unsigned i = 0; i < 64; i++)
        if (page_of(offs[i]) == 1)
            rkv_slab_free(f.slab, 1, offs[i]);
    advance_ms(grace);
    assert_true(rkv_slab_page_take(f.slab, 1, 1, RKV_SLAB_FOR_ANY));
    assert_int_equal(rkv_slab_page_wait_ms(f.slab, 5), 0);
    assert_int_equal(rkv_slab_pages_unassigned(f.slab), 1);
    got = rkv_slab_alloc(f.slab, 5);
    assert_int_equal(page_of(got), 1);
    struct rkv_slab_stats ss = heap_accounted(&f);
    assert_int_equal(ss.reassigns, 2);
    assert_int_equal(ss.pages_unassigned + ss.pages_draining, 0);
    fixture_free(&f);
}

/* Per-item words outlive a move: a word obtained for an old item stays
 * writable memory, and the new class (more items per page) gets words for
 * all of its items. */
static void test_page_move_meta(void **state)
{
    (void)state;
    struct fixture f;
    fixture_make(&f, 1, 2.0, 1, true);
    uint64_t a = rkv_slab_alloc(f.slab, 5), b = rkv_slab_alloc(f.slab, 5); /* 2048 bytes, 2 per page */
    uint32_t *old = rkv_slab_meta(f.slab, b, 5);
    assert_non_null(old);
    rkv_slab_free(f.slab, 5, a);
    rkv_slab_free(f.slab, 5, b);
    assert_true(rkv_slab_page_take(f.slab, 0, 5, 0));
    assert_null(rkv_slab_meta(f.slab, b, 5));
    advance_ms(1);
    for (unsigned i = 0; i < PAGE / 64; i++) { /* class 0: 64 items */
        uint64_t off = rkv_slab_alloc(f.slab, 0);
        assert_int_equal(off, page_base(0) + i * 64ull);
        uint32_t *m = rkv_slab_meta(f.slab, off, 0);
        assert_non_null(m);
        *m = i;
    }
    *old = 7; /* a hint that raced the move: harmless, and not a use after free */
    assert_int_equal(*rkv_slab_meta(f.slab, page_base(0) + 63 * 64, 0), 63);
    fixture_free(&f);
}

/* ------------------------------------------------------------ magazines */

/* At 4 KiB pages class 0 (64 bytes) has 64 items per page: it has
 * magazines (slab.c MAG_MIN_PER_PAGE), refilled MAG_BATCH (8) at a time. */
#define MAG_CLS   0u
#define MAG_BATCH 8u

/* Runs fn(arg) on a thread of its own, so in another thread slot. */
static void on_other_thread(void *(*fn)(void *), void *arg)
{
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fn, arg), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
}

struct mag_op {
    struct fixture *f;
    uint64_t off; /* to free, or what an allocation got */
};

static void *free_there(void *p)
{
    struct mag_op *op = p;
    rkv_slab_free(op->f->slab, MAG_CLS, op->off);
    return NULL;
}

static void *alloc_there(void *p)
{
    struct mag_op *op = p;
    op->off = rkv_slab_alloc(op->f->slab, MAG_CLS);
    return NULL;
}

static void test_magazine_refill_and_drain(void **state)
{
    (void)state;
    struct fixture f;
    fixture_make(&f, 2, 2.0, 10, false);
    struct rkv_slab_class_stats cs;
    uint64_t ready, freed;

    /* one allocation takes a batch: one handed out, the rest in the magazine */
    uint64_t a = rkv_slab_alloc(f.slab, MAG_CLS);
    assert_int_equal(a, page_base(0));
    rkv_slab_mag_count(f.slab, MAG_CLS, &ready, &freed);
    assert_int_equal(ready, MAG_BATCH - 1);
    assert_int_equal(freed, 0);
    rkv_slab_class_stats(f.slab, MAG_CLS, &cs);
    assert_int_equal(cs.used, 1); /* magazine items are not "used" */
    assert_int_equal(cs.ready, MAG_BATCH - 1);
    assert_int_equal(cs.fresh, 64 - MAG_BATCH);
    /* the batch is handed out in order, then the next batch */
    for (unsigned i = 1; i < 2 * MAG_BATCH; i++)
        assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), page_base(0) + 64ull * i);
    rkv_slab_mag_count(f.slab, MAG_CLS, &ready, &freed);
    assert_int_equal(ready, 0);

    /* a freed item waits in the magazine, counted as limbo */
    rkv_slab_free(f.slab, MAG_CLS, a);
    rkv_slab_mag_count(f.slab, MAG_CLS, &ready, &freed);
    assert_int_equal(freed, 1);
    rkv_slab_class_stats(f.slab, MAG_CLS, &cs);
    assert_int_equal(cs.used, 2 * MAG_BATCH - 1);
    assert_int_equal(cs.limbo, 1);
    /* garbage is not taken in */
    rkv_slab_free(f.slab, MAG_CLS, a + 1);
    rkv_slab_free(f.slab, MAG_CLS, page_base(1)); /* an unassigned page */
    rkv_slab_mag_count(f.slab, MAG_CLS, &ready, &freed);
    assert_int_equal(freed, 1);

    /* another thread's allocation refills its own magazine; draining gives
     * every magazine's items back: ready ones first in line, still ready */
    struct mag_op other = { .f = &f };
    on_other_thread(alloc_there, &other);
    assert_int_equal(other.off, page_base(0) + 64ull * 2 * MAG_BATCH);
    rkv_slab_mag_count(f.slab, MAG_CLS, &ready, &freed);
    assert_int_equal(ready, MAG_BATCH - 1);
    assert_int_equal(freed, 1);
    rkv_slab_drain(f.slab, MAG_CLS);
    rkv_slab_mag_count(f.slab, MAG_CLS, &ready, &freed);
    assert_int_equal(ready + freed, 0);
    rkv_slab_class_stats(f.slab, MAG_CLS, &cs);
    assert_int_equal(cs.used, 2 * MAG_BATCH);
    assert_int_equal(cs.ready, MAG_BATCH - 1);
    assert_int_equal(cs.limbo, 1);
    assert_int_equal(cs.fresh, 64 - 3 * MAG_BATCH);
    /* what the other magazine held comes next, in its order; then fresh
     * items: the freed one is still inside its grace period */
    for (unsigned i = 1; i < MAG_BATCH; i++)
        assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), other.off + 64ull * i);
    assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), page_base(0) + 64ull * 3 * MAG_BATCH);
    struct rkv_slab_stats ss = heap_accounted(&f);
    assert_int_equal(ss.limbo, 64);
    fixture_free(&f);
}

/* Nothing in a magazine is handed out inside its grace period: not an item
 * this thread freed (its own magazine), not one another thread freed (that
 * one's magazine, which an allocation that finds nothing drains). */
static void test_magazine_keeps_grace_period(void **state)
{
    (void)state;
    const uint32_t grace = 40;
    struct fixture f;
    fixture_make(&f, 1, 2.0, grace, false);
    uint64_t all[64];
    for (unsigned i = 0; i < 64; i++)
        assert_int_not_equal(all[i] = rkv_slab_alloc(f.slab, MAG_CLS), 0);
    assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), 0); /* one page, all handed out */

    /* freed by this thread */
    rkv_slab_free(f.slab, MAG_CLS, all[10]);
    assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), 0);
    assert_int_equal(rkv_slab_limbo_wait_ms(f.slab, MAG_CLS), grace + 1);
    advance_ms(grace);
    assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), 0); /* not before grace_ms */
    advance_ms(1);
    assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), all[10]);

    /* freed by another thread, asked for here: not before, then yes */
    struct mag_op op = { .f = &f, .off = all[20] };
    on_other_thread(free_there, &op);
    assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), 0);
    advance_ms(grace);
    assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), 0);
    advance_ms(1);
    assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), all[20]);

    /* freed here, asked for by another thread */
    rkv_slab_free(f.slab, MAG_CLS, all[30]);
    advance_ms(grace);
    struct mag_op got = { .f = &f };
    on_other_thread(alloc_there, &got);
    assert_int_equal(got.off, 0);
    advance_ms(1);
    on_other_thread(alloc_there, &got);
    assert_int_equal(got.off, all[30]);
    /* a freed list that fills goes to the class in one batch, grace intact */
    for (unsigned i = 40; i < 58; i++)
        rkv_slab_free(f.slab, MAG_CLS, all[i]);
    assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), 0);
    advance_ms(grace + 1);
    assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), all[40]);
    fixture_free(&f);
}

/* A page whose items sit only in magazines (ready, or freed) can move: the
 * take empties the magazines first; one item in use keeps it. */
static void test_magazine_page_take(void **state)
{
    (void)state;
    const uint32_t grace = 30;
    struct fixture f;
    fixture_make(&f, 2, 2.0, grace, false);
    uint64_t a = rkv_slab_alloc(f.slab, MAG_CLS); /* page 0; 7 more of it in the magazine */
    struct mag_op other = { .f = &f };
    on_other_thread(alloc_there, &other); /* page 0 too, another magazine */
    assert_int_equal(page_of(other.off), 0);
    assert_false(rkv_slab_page_take(f.slab, 0, MAG_CLS, RKV_SLAB_FOR_ANY)); /* both in use */
    rkv_slab_free(f.slab, MAG_CLS, a);
    assert_false(rkv_slab_page_take(f.slab, 0, MAG_CLS, RKV_SLAB_FOR_ANY));
    struct rkv_slab_page_info pi;
    assert_true(rkv_slab_page_info(f.slab, 0, &pi));
    assert_int_equal(pi.used, 1); /* magazine items are not in use */
    on_other_thread(free_there, &other);
    assert_true(rkv_slab_page_take(f.slab, 0, MAG_CLS, RKV_SLAB_FOR_ANY));
    uint64_t ready, freed;
    rkv_slab_mag_count(f.slab, MAG_CLS, &ready, &freed);
    assert_int_equal(ready + freed, 0);
    /* its memory waits out the grace period of the last free: meanwhile
     * the class gets page 1 */
    uint64_t b = rkv_slab_alloc(f.slab, MAG_CLS);
    assert_int_equal(page_of(b), 1);
    assert_int_equal(rkv_slab_alloc(f.slab, 3), 0);
    advance_ms(grace + 1);
    assert_int_equal(page_of(rkv_slab_alloc(f.slab, 3)), 0);
    heap_accounted(&f);
    fixture_free(&f);
}

static void test_lock_timing(void **state)
{
    (void)state;
    char err[256] = "";
    struct fixture f = { .pages = 2 };
    f.region = aligned_alloc(4096, HEAP_OFFSET + 2 * PAGE);
    assert_non_null(f.region);
    struct rkv_slab_config c = {
        .region = f.region,
        .heap_offset = HEAP_OFFSET,
        .heap_size = 2 * PAGE,
        .page_size = PAGE,
        .growth_factor = 2.0,
        .grace_ms = 1,
        .clock_ns = test_clock,
        .lock_timing = true,
    };
    assert_int_equal(rkv_slab_create(&c, &f.slab, err, sizeof err), RKV_OK);
    struct rkv_lock_stats ls;
    rkv_slab_lock_stats(f.slab, &ls);
    assert_int_equal(ls.holds, 0);
    for (unsigned i = 0; i < MAG_BATCH; i++)
        assert_int_not_equal(rkv_slab_alloc(f.slab, MAG_CLS), 0);
    rkv_slab_lock_stats(f.slab, &ls);
    assert_int_equal(ls.holds, 2); /* one batch: the class lock, and the page lock inside it */
    assert_int_equal(ls.contended, 0);
    assert_true(ls.hold_max_ns <= ls.hold_ns);
    assert_int_not_equal(rkv_slab_alloc(f.slab, 4), 0); /* no magazines: one hold per call */
    rkv_slab_lock_stats(f.slab, &ls);
    assert_int_equal(ls.holds, 4);
    fixture_free(&f);
}

/* Classes of many items per page refill more at a time (an eighth of a
 * page's items, up to 32): at 16 KiB pages class 0 has 256 items, so one
 * class-lock hold serves 32 allocations, a freed list takes 64 before it
 * is given back, and the grace period holds all the same. */
static void test_magazine_large_batch(void **state)
{
    (void)state;
    const uint32_t page = 4 * PAGE, grace = 20;
    char err[256] = "";
    struct fixture f = { .pages = 1 };
    f.region = aligned_alloc(4096, HEAP_OFFSET + page);
    assert_non_null(f.region);
    struct rkv_slab_config c = {
        .region = f.region,
        .heap_offset = HEAP_OFFSET,
        .heap_size = page,
        .page_size = page,
        .growth_factor = 2.0,
        .grace_ms = grace,
        .clock_ns = test_clock,
        .lock_timing = true,
    };
    assert_int_equal(rkv_slab_create(&c, &f.slab, err, sizeof err), RKV_OK);
    struct rkv_lock_stats ls;
    uint64_t ready, freed, all[256];
    for (unsigned i = 0; i < 256; i++)
        assert_int_equal(all[i] = rkv_slab_alloc(f.slab, MAG_CLS), HEAP_OFFSET + 64ull * i);
    rkv_slab_lock_stats(f.slab, &ls);
    assert_int_equal(ls.holds, 256 / 32 + 1); /* 8 refills, and the page lock inside the first */
    for (unsigned i = 0; i < 64; i++)
        rkv_slab_free(f.slab, MAG_CLS, all[i]);
    rkv_slab_mag_count(f.slab, MAG_CLS, &ready, &freed);
    assert_int_equal(freed, 64);
    rkv_slab_free(f.slab, MAG_CLS, all[64]); /* the full list goes back first */
    rkv_slab_mag_count(f.slab, MAG_CLS, &ready, &freed);
    assert_int_equal(freed, 1);
    rkv_slab_lock_stats(f.slab, &ls);
    assert_int_equal(ls.holds, 256 / 32 + 2);
    /* none comes back inside its grace period, then the oldest first */
    assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), 0);
    advance_ms(grace);
    assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), 0);
    advance_ms(1);
    assert_int_equal(rkv_slab_alloc(f.slab, MAG_CLS), all[0]);
    rkv_slab_mag_count(f.slab, MAG_CLS, &ready, &freed);
    assert_int_equal(ready, 31); /* one refill of 32 */
    fixture_free(&f);
}

/* ------------------------------------------------------------ threads */

#define CHURNERS     3
#define CHURN_ROUNDS 20000u

/* What the churning threads and the main thread share. */
struct churn_shared {
    struct fixture *f;
    unsigned progress[CHURNERS]; /* rounds each thread has done (atomic) */
    unsigned done;               /* threads finished (atomic) */
    unsigned hold_at;            /* 0, or a round no thread passes before `released` */
    int released;                /* set by the main thread (atomic) */
};

struct thread_arg {
    struct churn_shared *sh;
    unsigned id;
    unsigned failures;
};

/* Each thread allocates, stamps, checks and frees items of shared classes:
 * if two threads ever held the same item, a stamp would be overwritten. */
static void *churn(void *p)
{
    struct thread_arg *a = p;
    struct fixture *f = a->sh->f;
    uint64_t held[32] = { 0 };
    unsigned cls_of[32];
    for (unsigned round = 0; round < CHURN_ROUNDS; round++) {
        if (a->sh->hold_at != 0 && round == a->sh->hold_at)
            while (!__atomic_load_n(&a->sh->released, __ATOMIC_ACQUIRE))
                sched_yield();
        unsigned i = round % 32;
        if (held[i]) {
            uint32_t stamp;
            memcpy(&stamp, f->region + held[i], sizeof stamp);
            if (stamp != (a->id << 24 | i))
                a->failures++;
            rkv_slab_free(f->slab, cls_of[i], held[i]);
            held[i] = 0;
        }
        cls_of[i] = (round / 32) % 3;
        held[i] = rkv_slab_alloc(f->slab, cls_of[i]);
        if (held[i]) {
            uint32_t stamp = a->id << 24 | i;
            memcpy(f->region + held[i], &stamp, sizeof stamp);
        }
        __atomic_store_n(&a->sh->progress[a->id - 1], round + 1, __ATOMIC_RELEASE);
    }
    __atomic_add_fetch(&a->sh->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static bool all_past(struct churn_shared *sh, unsigned round)
{
    for (unsigned i = 0; i < CHURNERS; i++)
        if (__atomic_load_n(&sh->progress[i], __ATOMIC_ACQUIRE) < round)
            return false;
    return true;
}

/* Runs the churning threads; the main thread drives the clock (1 ms a step,
 * so freed items come back after a few steps) until they are done, calling
 * `midway` once while every thread is between rounds hold_at / 2 and
 * hold_at (none passes hold_at before it returns); it returns false when
 * what it checked is wrong. */
static void run_churn(struct churn_shared *sh, struct thread_arg args[CHURNERS],
                      bool (*midway)(void *), void *ctx)
{
    pthread_t th[CHURNERS];
    bool called = midway == NULL, midway_ok = true;
    for (unsigned i = 0; i < CHURNERS; i++) {
        args[i] = (struct thread_arg){ .sh = sh, .id = i + 1 };
        assert_int_equal(pthread_create(&th[i], NULL, churn, &args[i]), 0);
    }
    while (__atomic_load_n(&sh->done, __ATOMIC_ACQUIRE) < CHURNERS) {
        if (!called && all_past(sh, sh->hold_at / 2)) {
            midway_ok = midway(ctx); /* checked once the threads are released */
            called = true;
            __atomic_store_n(&sh->released, 1, __ATOMIC_RELEASE);
        }
        advance_ms(1);
        sched_yield();
    }
    for (unsigned i = 0; i < CHURNERS; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    assert_true(midway_ok);
}

/* Moves pages between the churning classes while the threads run: a page
 * moves only when none of its items is held, so stamps still never clash.
 * Whether it ever finds such a page is up to the scheduler: the forced move
 * below does not depend on it. */
struct mover_arg {
    struct fixture *f;
    int stop; /* set by the main thread (atomic) */
    unsigned moves;
};

static void *mover(void *p)
{
    struct mover_arg *m = p;
    unsigned seed = 12345;
    while (!__atomic_load_n(&m->stop, __ATOMIC_RELAXED)) {
        uint64_t page = (uint64_t)rand_r(&seed) % m->f->pages;
        int cls = rkv_slab_page_class(m->f->slab, page);
        if (cls >= 0 && rkv_slab_page_take(m->f->slab, page, (unsigned)cls, rand_r(&seed) % 4 - 1))
            m->moves++;
        /* hints racing the moves: per-item words of whatever is there now */
        for (unsigned i = 0; i < 16; i++) {
            uint64_t off = HEAP_OFFSET + (uint64_t)rand_r(&seed) % (m->f->pages * (PAGE / 64)) * 64;
            uint32_t *w = rkv_slab_meta(m->f->slab, off, (unsigned)rand_r(&seed) % 3);
            if (w != NULL)
                __atomic_store_n(w, i, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

/* A page of class 2 (256 bytes, 16 per page) whose items the main thread
 * holds, so no churning thread uses it; freed and taken midway. */
struct forced_move {
    struct fixture *f;
    uint64_t items[PAGE / 256];
    uint64_t page;
    unsigned moves; /* by the main thread */
};

static bool force_move(void *p)
{
    struct forced_move *fm = p;
    for (unsigned i = 0; i < PAGE / 256; i++)
        rkv_slab_free(fm->f->slab, 2, fm->items[i]);
    /* The clock stands still here (the main thread drives it), so no thread
     * can reuse these items before the take: only the mover can beat us to
     * the page, and then it has left class 2 all the same. */
    if (rkv_slab_page_take(fm->f->slab, fm->page, 2, 0)) {
        fm->moves++;
        return true;
    }
    return rkv_slab_page_class(fm->f->slab, fm->page) == -1;
}

static void test_threads_with_page_moves(void **state)
{
    (void)state;
    struct fixture f;
    fixture_make(&f, 8, 2.0, 1, true);
    struct forced_move fm = { .f = &f };
    for (unsigned i = 0; i < PAGE / 256; i++) {
        fm.items[i] = rkv_slab_alloc(f.slab, 2);
        assert_int_not_equal(fm.items[i], 0);
        assert_int_equal(page_of(fm.items[i]), page_of(fm.items[0]));
    }
    fm.page = page_of(fm.items[0]);

    struct churn_shared sh = { .f = &f, .hold_at = CHURN_ROUNDS / 2 };
    struct thread_arg args[CHURNERS];
    struct mover_arg m = { .f = &f };
    pthread_t mv;
    assert_int_equal(pthread_create(&mv, NULL, mover, &m), 0);
    run_churn(&sh, args, force_move, &fm);
    __atomic_store_n(&m.stop, 1, __ATOMIC_RELAXED);
    pthread_join(mv, NULL);
    print_message("page moves during churn: %u forced, %u by the mover thread\n", fm.moves, m.moves);
    assert_int_equal(heap_accounted(&f).reassigns, fm.moves + m.moves);
    assert_true(fm.moves + m.moves > 0);
    fixture_free(&f);
}

static void test_threads(void **state)
{
    (void)state;
    struct fixture f;
    fixture_make(&f, 32, 2.0, 1, false);
    struct churn_shared sh = { .f = &f };
    struct thread_arg args[CHURNERS];
    run_churn(&sh, args, NULL, NULL);
    fixture_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_class_table),
        cmocka_unit_test(test_fine_class_table),
        cmocka_unit_test(test_memcached_twin_classes),
        cmocka_unit_test(test_class_for),
        cmocka_unit_test(test_create_refuses_bad_geometry),
        cmocka_unit_test(test_alloc_distinct_aligned),
        cmocka_unit_test(test_valid_rejects_garbage),
        cmocka_unit_test(test_grace_period),
        cmocka_unit_test(test_grace_period_default_clock),
        cmocka_unit_test(test_limbo_fifo_and_fresh_first),
        cmocka_unit_test(test_queue_widens_wrapped),
        cmocka_unit_test(test_page_exhaustion),
        cmocka_unit_test(test_stats_account_every_byte),
        cmocka_unit_test(test_page_move_waits_for_grace),
        cmocka_unit_test(test_page_move_reserved_and_idle),
        cmocka_unit_test(test_page_move_meta),
        cmocka_unit_test(test_magazine_refill_and_drain),
        cmocka_unit_test(test_magazine_keeps_grace_period),
        cmocka_unit_test(test_magazine_page_take),
        cmocka_unit_test(test_lock_timing),
        cmocka_unit_test(test_magazine_large_batch),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_threads_with_page_moves),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
