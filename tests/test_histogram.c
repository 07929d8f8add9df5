/* test_histogram.c — rkv-bench's latency histogram: exact percentiles on
 * known data, bucket geometry and precision, merging, saturation, and reads
 * while another thread records. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "histogram.h"

static struct histogram *new_hist(void)
{
    struct histogram *h = malloc(sizeof *h);
    assert_non_null(h);
    hist_init(h);
    return h;
}

static void empty_histogram(void **state)
{
    (void)state;
    struct histogram *h = new_hist();
    assert_int_equal(h->count, 0);
    assert_int_equal(hist_percentile(h, 50), 0);
    assert_int_equal(hist_percentile(h, 100), 0);
    assert_true(hist_mean(h) == 0.0);
    free(h);
}

/* Values 1..100 (exact region): percentile p is exactly p. */
static void exact_percentiles_small(void **state)
{
    (void)state;
    struct histogram *h = new_hist();
    for (uint64_t v = 100; v >= 1; v--)
        hist_record(h, v);
    assert_int_equal(h->count, 100);
    assert_int_equal(h->min, 1);
    assert_int_equal(h->max, 100);
    assert_int_equal(hist_percentile(h, 0), 1);
    assert_int_equal(hist_percentile(h, 1), 1);
    assert_int_equal(hist_percentile(h, 50), 50);
    assert_int_equal(hist_percentile(h, 90), 90);
    assert_int_equal(hist_percentile(h, 99), 99);
    assert_int_equal(hist_percentile(h, 99.5), 100);
    assert_int_equal(hist_percentile(h, 100), 100);
    assert_true(hist_mean(h) == 50.5);
    free(h);
}

/* Ranks are ceil(p % of count): exact on values below 256 ns, and 99.9 % of
 * 1000 must not round up to rank 1000 by floating-point error. */
static void percentile_rank_rounding(void **state)
{
    (void)state;
    struct histogram *h = new_hist();
    for (uint64_t v = 1; v <= 1000; v++)
        hist_record(h, v % 200 + 1); /* 1..200, each 5 times */
    /* sorted: 1 x5, 2 x5, ... 200 x5 — rank 999 is value 200, rank 500 value 100 */
    assert_int_equal(hist_percentile(h, 50), 100);
    assert_int_equal(hist_percentile(h, 99.9), 200);
    assert_int_equal(hist_percentile(h, 0.5), 1);
    assert_int_equal(hist_percentile(h, 0.6), 2);
    /* 999 x 1 ns and 1 x 2 ns: rank 999 (99.9 %) is 1, rank 1000 is 2 */
    hist_init(h);
    hist_record_n(h, 1, 999);
    hist_record(h, 2);
    assert_int_equal(hist_percentile(h, 99.9), 1);
    assert_int_equal(hist_percentile(h, 99.91), 2);
    free(h);
}

/* Large values: a percentile is the top of its bucket, within 1/128 above
 * the true value, clamped to the maximum. */
static void precision_of_large_values(void **state)
{
    (void)state;
    struct histogram *h = new_hist();
    const uint64_t values[] = { 1000, 12345, 999999, 5000000, 123456789, 99000000000ull };
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        hist_init(h);
        hist_record(h, values[i]);
        hist_record(h, values[i] * 2 < HIST_MAX_VALUE ? values[i] * 2 : HIST_MAX_VALUE);
        uint64_t p50 = hist_percentile(h, 50);
        assert_true(p50 >= values[i]);
        assert_true((double)(p50 - values[i]) <= (double)values[i] / 128.0);
        assert_int_equal(hist_percentile(h, 100), h->max);
    }
    free(h);
}

/* Buckets tile the range: contiguous, non-overlapping, each value inside the
 * bucket it maps to, width at most value/128. */
static void bucket_geometry(void **state)
{
    (void)state;
    uint64_t prev_hi = 0;
    for (unsigned b = 0; b < HIST_BUCKETS; b++) {
        uint64_t lo, hi;
        hist_bucket_range(b, &lo, &hi);
        if (b > 0)
            assert_int_equal(lo, prev_hi + 1);
        assert_true(hi >= lo);
        assert_int_equal(hist_bucket_of(lo), b);
        assert_int_equal(hist_bucket_of(hi), b);
        if (lo >= 256)
            assert_true((hi - lo + 1) * 128 <= lo);
        prev_hi = hi;
    }
    assert_int_equal(prev_hi, HIST_MAX_VALUE);
    /* 100 ns .. 100 s is inside the range */
    assert_true(HIST_MAX_VALUE >= 100000000000ull);
}

static void saturation(void **state)
{
    (void)state;
    struct histogram *h = new_hist();
    hist_record(h, UINT64_MAX);
    assert_int_equal(hist_bucket_of(UINT64_MAX), HIST_BUCKETS - 1);
    assert_int_equal(h->max, UINT64_MAX);
    assert_int_equal(hist_percentile(h, 50), UINT64_MAX);
    assert_int_equal(h->sum, UINT64_MAX);
    hist_record(h, 5);
    assert_int_equal(h->sum, UINT64_MAX); /* saturated, not wrapped */
    free(h);
    /* value x n past 64 bits saturates too (the product alone overflows) */
    h = new_hist();
    hist_record_n(h, 1ull << 40, 1ull << 30);
    assert_int_equal(h->sum, UINT64_MAX);
    assert_int_equal(h->count, 1ull << 30);
    free(h);
    h = new_hist();
    hist_record_n(h, 3, 1ull << 20); /* and a product that fits is exact */
    assert_int_equal(h->sum, 3ull << 20);
    free(h);
}

static void merge_and_record_n(void **state)
{
    (void)state;
    struct histogram *a = new_hist(), *b = new_hist(), *m = new_hist();
    hist_record_n(a, 10, 90); /* 90 x 10 ns */
    hist_record_n(b, 200, 9); /* 9 x 200 ns */
    hist_record_n(b, 250, 1); /* 1 x 250 ns */
    hist_record_n(b, 7, 0);   /* nothing */
    hist_merge(m, a);
    hist_merge(m, b);
    assert_int_equal(m->count, 100);
    assert_int_equal(m->min, 10);
    assert_int_equal(m->max, 250);
    assert_int_equal(m->sum, 900 + 1800 + 250);
    assert_int_equal(hist_percentile(m, 90), 10);
    assert_int_equal(hist_percentile(m, 91), 200);
    assert_int_equal(hist_percentile(m, 99), 200);
    assert_int_equal(hist_percentile(m, 99.01), 250);
    /* merging an empty histogram changes nothing */
    hist_init(a);
    hist_merge(m, a);
    assert_int_equal(m->count, 100);
    assert_int_equal(m->min, 10);
    free(a);
    free(b);
    free(m);
}

/* Values split at random over 7 parts and merged equal the histogram of the
 * whole exactly: every bucket, count, sum, min and max (this is what makes
 * the --processes merge exact), and so does every percentile. hist_diff of a
 * later snapshot against an earlier one gives the histogram of what came in
 * between. */
static void merge_of_parts_equals_whole(void **state)
{
    (void)state;
    enum { PARTS = 7 };
    struct histogram *whole = new_hist(), *merged = new_hist(), *part[PARTS];
    for (int i = 0; i < PARTS; i++)
        part[i] = new_hist();
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 200000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t v = (x >> 20) % (1ull << (x % 37)); /* spread over every power of two */
        hist_record(whole, v);
        hist_record(part[x % PARTS], v);
    }
    for (int i = 0; i < PARTS; i++)
        hist_merge(merged, part[i]);
    assert_memory_equal(merged->buckets, whole->buckets, sizeof whole->buckets);
    assert_int_equal(merged->count, whole->count);
    assert_int_equal(merged->sum, whole->sum);
    assert_int_equal(merged->min, whole->min);
    assert_int_equal(merged->max, whole->max);
    for (double p = 0; p <= 100; p += 0.5)
        assert_int_equal(hist_percentile(merged, p), hist_percentile(whole, p));

    /* whole = parts 0..2 then 3..6: the difference of the snapshots is 3..6. */
    struct histogram *first = new_hist(), *rest = new_hist(), *diff = new_hist();
    for (int i = 0; i < 3; i++)
        hist_merge(first, part[i]);
    for (int i = 3; i < PARTS; i++)
        hist_merge(rest, part[i]);
    hist_diff(diff, merged, first);
    assert_memory_equal(diff->buckets, rest->buckets, sizeof rest->buckets);
    assert_int_equal(diff->count, rest->count);
    assert_int_equal(diff->sum, rest->sum);
    for (double p = 1; p <= 99; p += 1) /* min/max are bucket edges: compare inside */
        assert_int_equal(hist_bucket_of(hist_percentile(diff, p)),
                         hist_bucket_of(hist_percentile(rest, p)));
    hist_diff(diff, merged, merged);
    assert_int_equal(diff->count, 0);
    for (int i = 0; i < PARTS; i++)
        free(part[i]);
    free(whole);
    free(merged);
    free(first);
    free(rest);
    free(diff);
}

/* A reader merging while the writer records sees a count that matches its
 * buckets and never more than was written. */
struct writer_arg {
    struct histogram *h;
    uint64_t n;
};

static void *writer(void *p)
{
    struct writer_arg *a = p;
    for (uint64_t i = 0; i < a->n; i++)
        hist_record(a->h, 100 + i % 1000);
    return NULL;
}

static void concurrent_snapshot(void **state)
{
    (void)state;
    struct histogram *h = new_hist(), *snap = new_hist();
    struct writer_arg arg = { h, 2000000 };
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, writer, &arg), 0);
    uint64_t last = 0;
    for (int i = 0; i < 200; i++) {
        hist_init(snap);
        hist_merge(snap, h);
        uint64_t in_buckets = 0;
        for (unsigned b = 0; b < HIST_BUCKETS; b++)
            in_buckets += snap->buckets[b];
        assert_int_equal(in_buckets, snap->count);
        assert_true(snap->count >= last);
        assert_true(snap->count <= arg.n);
        if (snap->count > 0) {
            uint64_t p = hist_percentile(snap, 99);
            assert_true(p >= 100 && p <= 1099);
        }
        last = snap->count;
    }
    pthread_join(t, NULL);
    hist_init(snap);
    hist_merge(snap, h);
    assert_int_equal(snap->count, arg.n);
    assert_int_equal(snap->min, 100);
    assert_int_equal(snap->max, 1099);
    free(h);
    free(snap);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(empty_histogram),          cmocka_unit_test(exact_percentiles_small),
        cmocka_unit_test(percentile_rank_rounding), cmocka_unit_test(precision_of_large_values),
        cmocka_unit_test(bucket_geometry),          cmocka_unit_test(saturation),
        cmocka_unit_test(merge_and_record_n),       cmocka_unit_test(merge_of_parts_equals_whole),
        cmocka_unit_test(concurrent_snapshot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
